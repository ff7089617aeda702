//! The run store across processes, on both backends from one definition
//! ([`for_each_fresh`]): eight writers with distinct host ids into one store at once, a writer
//! killed with SIGKILL mid-run on this host (swept at once: its process is gone) and on
//! another host (swept only once its lease has expired), and a writer killed during busy
//! writes. What a check reads with SQL it reads with the same statement on both backends;
//! the SQLite file's own properties (its integrity check, its shared request parts) are
//! checked beside, on that backend only.
//!
//! The child processes are this test binary itself, started again with only
//! `child_process_role` selected (`--ignored --exact`: the role is an ignored test, so a normal
//! run lists it as ignored instead of counting it as passed) and `DIAG_STORE_TEST_ROLE` naming
//! what to do.

use diag_testkit::backends::{for_each_fresh, write_full, write_partial, Fresh};
use diag_testkit::bounded;
use diag_testkit::records::{assert_blob_refs_exact, integrity, raw};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use diag::stores::OpenOptions;
use diag_core::graph::NodeKind;
use diag_core::store::{RunFilter, RunStatus, Store, INTERRUPTED};
use diag_store_sqlite::StoreOptions;

const ROLE: &str = "DIAG_STORE_TEST_ROLE";
const LOCATION: &str = "DIAG_STORE_TEST_LOCATION";
const PREFIX: &str = "DIAG_STORE_TEST_PREFIX";
const RUNS: &str = "DIAG_STORE_TEST_RUNS";
const START_AT_MS: &str = "DIAG_STORE_TEST_START_AT_MS";

/// Per run (`diag_testkit::backends::write_full`): 6 events, 2 agent steps, 2 model exchanges,
/// 3 tool invocations, 1 evaluation.
const EVENTS: i64 = 6;
const STEPS: i64 = 2;
const EXCHANGES: i64 = 2;
const INVOCATIONS: i64 = 3;

/// The trace tables a run's rows are counted in, in [`per_run_counts`]' order.
const TRACE_TABLES: [&str; 4] = [
    "orchestration_event",
    "agent_step",
    "model_exchange",
    "tool_invocation",
];

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Opens the store a child writes to. On SQLite the busy timeout bounds a wait for another
/// writer's lock, not a speed: eight processes migrating one new file at once on a loaded
/// two-core machine (the whole suite runs beside them in the one test binary) can hold each
/// other off past the default 5 s, which is no fault of the store. What the checks here ask is
/// that nothing is lost or corrupted.
fn open_as_writer(location: &Path) -> Store {
    if diag::stores::is_postgres(location) {
        diag::stores::open(location, &OpenOptions::default())
            .unwrap_or_else(|e| panic!("open: {e}"))
    } else {
        let options = StoreOptions {
            busy_timeout: Duration::from_secs(120),
            ..StoreOptions::default()
        };
        diag_testkit::open_sqlite_with(location, options).unwrap_or_else(|e| panic!("open: {e}"))
    }
}

/// The child process roles (see the module documentation).
#[test]
#[ignore = "the entry point of a re-run of this binary, which the tests that need it start"]
fn child_process_role() {
    let Ok(role) = std::env::var(ROLE) else {
        eprintln!("child_process_role runs only as a re-run of this binary ({ROLE} unset)");
        return;
    };
    let location = PathBuf::from(std::env::var(LOCATION).unwrap());
    let prefix = std::env::var(PREFIX).unwrap();
    let runs: usize = std::env::var(RUNS).unwrap().parse().unwrap();
    if let Some(start) = std::env::var(START_AT_MS)
        .ok()
        .and_then(|t| t.parse::<u64>().ok())
    {
        // Every writer opens the (new) store at the same moment, so the migration races too.
        let now = unix_ms();
        if start > now {
            std::thread::sleep(Duration::from_millis(start - now));
        }
    }
    let store = open_as_writer(&location);
    match role.as_str() {
        "writer" => {
            for i in 0..runs {
                write_full(&store, &format!("{prefix}-{i}"));
            }
            println!("WROTE {runs}");
        }
        "stall" => {
            for i in 0..runs {
                write_full(&store, &format!("{prefix}-{i}"));
            }
            // Four nodes done, then the Verifier starts its model call (which commits the
            // events so far) and hangs there: the recorder stays alive, so only what the
            // store committed on its own survives the kill.
            let rec = write_partial(&store, &format!("{prefix}-stalled"), 4);
            rec.observe_node(NodeKind::Agent);
            println!("MIDRUN {prefix}-stalled");
            loop {
                std::thread::park();
            }
        }
        "loop" => {
            for i in 0.. {
                write_full(&store, &format!("{prefix}-{i}"));
                println!("DONE {i}");
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// Kills the child when the test ends, however it ends.
struct ChildGuard(Option<Child>);

impl ChildGuard {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().unwrap()
    }

    /// SIGKILL (what `Child::kill` sends on Unix): no destructor, no rollback, no clean close.
    fn sigkill(&mut self) {
        let child = self.child();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The role test's name as libtest knows it: its module path inside the test binary (this
/// module is one of many in `it`), without the crate's name.
fn role_test_name() -> String {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    format!("{module}::child_process_role")
}

/// A child playing `role` on the store at `fresh`; `host` is its host id (none: this host's).
fn spawn(
    role: &str,
    fresh: &Fresh,
    prefix: &str,
    runs: usize,
    host: Option<&str>,
    start_at_ms: Option<u64>,
) -> ChildGuard {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        role_test_name().as_str(),
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, role)
    .env(LOCATION, fresh.location())
    .env(PREFIX, prefix)
    .env(RUNS, runs.to_string())
    .env_remove("DIAG_HOST_ID")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(host) = host {
        cmd.env("DIAG_HOST_ID", host);
    }
    if let Some(t) = start_at_ms {
        cmd.env(START_AT_MS, t.to_string());
    }
    ChildGuard(Some(cmd.spawn().unwrap()))
}

/// Reads the child's stdout until a line satisfies `want`; a child that never prints it
/// fails the test after the suite's bound, with its stderr.
fn wait_for_line(guard: &mut ChildGuard, want: impl Fn(&str) -> bool) -> String {
    let stdout = guard.child().stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    loop {
        match rx.recv_timeout(bounded::LIMIT) {
            // libtest prints `test …::child_process_role ... ` without a newline, so a report
            // may share its line.
            Ok(line) if want(&line) => return line,
            Ok(_) => continue,
            Err(e) => {
                let child = guard.0.take().unwrap();
                let out = bounded::wait_with_output(child, Duration::from_secs(5), "child");
                panic!(
                    "the child never reported ({e:?}); stderr:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

/// Rows per run in each of [`TRACE_TABLES`], read with one statement per table.
fn per_run_counts(fresh: &Fresh) -> BTreeMap<String, [i64; 4]> {
    let mut counts: BTreeMap<String, [i64; 4]> = BTreeMap::new();
    for (i, table) in TRACE_TABLES.iter().enumerate() {
        let sql = format!("SELECT run_id || ' ' || count(*) FROM {table} GROUP BY run_id");
        for row in fresh.query_rows(&sql) {
            let (run_id, n) = row.rsplit_once(' ').unwrap();
            counts.entry(run_id.to_string()).or_default()[i] = n.parse().unwrap();
        }
    }
    counts
}

/// A run's trace as the port reads it back: events, agent steps, exchanges, invocations.
fn trace(
    store: &Store,
    run_id: &str,
) -> (
    Vec<diag_core::graph::Event<String>>,
    Vec<diag_core::store::StoredStep>,
    Vec<diag_core::store::StoredExchange>,
    Vec<diag_core::protocol::ToolInvocation>,
) {
    (
        store.events(run_id).unwrap(),
        store.agent_steps(run_id).unwrap(),
        store.exchanges(run_id).unwrap(),
        store.invocations(run_id).unwrap(),
    )
}

/// The file's own consistency, on SQLite: the engine's integrity check, read raw and
/// through the store.
fn assert_sqlite_intact(fresh: &Fresh, _store: &Store) {
    if let (Some(path), Some(sqlite)) = (fresh.sqlite_path(), fresh.sqlite_store()) {
        assert_eq!(integrity(path), "ok");
        assert_eq!(sqlite.integrity_check().unwrap(), "ok");
    }
}

#[test]
fn eight_writers_on_eight_hosts_lose_nothing_in_one_store() {
    for_each_fresh(|fresh| {
        let writers = 8;
        let per_writer = 50;
        // All open the new store at one moment: the schema is made by whichever comes
        // first, the others wait for it.
        let start = unix_ms() + 500;
        let children: Vec<ChildGuard> = (0..writers)
            .map(|w| {
                let host = format!("host-{w}");
                spawn(
                    "writer",
                    fresh,
                    &format!("w{w}"),
                    per_writer,
                    Some(&host),
                    Some(start),
                )
            })
            .collect();
        for (w, mut guard) in children.into_iter().enumerate() {
            // Eight writers on two cores share the bound's time: four times it.
            let child = guard.0.take().unwrap();
            let out = bounded::wait_with_output(child, bounded::LIMIT * 4, &format!("writer {w}"));
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "writer {w}: {stdout}\n{stderr}");
            assert!(
                stdout.contains(&format!("WROTE {per_writer}")),
                "writer {w}: {stdout}"
            );
        }
        let runs = (writers * per_writer) as i64;
        assert_eq!(
            fresh.counts(),
            [
                runs,
                runs * EVENTS,
                runs * STEPS,
                runs * INVOCATIONS,
                runs * EXCHANGES,
                runs
            ],
            "exact row counts: no run lost, none doubled ({})",
            fresh.name
        );
        assert_eq!(
            fresh.query("SELECT count(DISTINCT run_id) FROM diagnosis_run"),
            runs.to_string(),
            "no duplicate run id"
        );
        assert_eq!(
            fresh.query(
                "SELECT count(*) FROM diagnosis_run r WHERE NOT EXISTS \
                 (SELECT 1 FROM evaluation e WHERE e.run_id = r.run_id)"
            ),
            "0",
            "every SUCCESS has its evaluation"
        );
        assert_eq!(
            fresh.query("SELECT count(DISTINCT owner_host) FROM diagnosis_run"),
            writers.to_string(),
            "each run names its writer's host"
        );
        let store = fresh.open();
        let all = store.list_runs(&RunFilter::default()).unwrap();
        assert_eq!(all.len(), runs as usize);
        assert!(all.iter().all(|r| r.status == RunStatus::Success
            && r.step_count == STEPS as u64
            && r.tool_count == INVOCATIONS as u64
            && r.path.len() == EVENTS as usize));
        for w in 0..writers {
            // Each writer's invocations come back scoped to its own runs.
            let run_id = format!("w{w}-{}", per_writer - 1);
            let invocations = store.invocations(&run_id).unwrap();
            assert_eq!(invocations.len(), INVOCATIONS as usize, "{run_id}");
            assert!(invocations.iter().all(|i| i.run_id == run_id));
        }
        assert_sqlite_intact(fresh, &store);
        if let Some(path) = fresh.sqlite_path() {
            // The request parts every writer stored are there once each, counted exactly.
            let (blobs, distinct): (i64, i64) = raw(path)
                .query_row(
                    "SELECT count(*), count(DISTINCT sha256) FROM blob",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
            assert_eq!(
                (blobs, distinct),
                (1, 1),
                "the Executor's system prompt, once"
            );
            assert_blob_refs_exact(path);
        }
    });
}

#[test]
fn a_run_killed_mid_way_on_this_host_is_swept_with_its_partial_trace() {
    for_each_fresh(|fresh| {
        let mut child = spawn("stall", fresh, "k", 5, None, None);
        let line = wait_for_line(&mut child, |l| l.contains("MIDRUN "));
        let stalled = line.rsplit("MIDRUN ").next().unwrap().trim().to_string();

        // While its owner lives, opening the store leaves the run alone.
        let store = fresh.open();
        assert_eq!(
            store.get_run(&stalled).unwrap().unwrap().status,
            RunStatus::Running
        );
        let trace_before = trace(&store, &stalled);
        drop(store);

        // Its owner was on this host: once the process is gone, the next open sweeps the run,
        // without waiting for the lease.
        child.sigkill();
        let store = fresh.open();
        assert_sqlite_intact(fresh, &store);
        let run = store.get_run(&stalled).unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Failed);
        assert_eq!(run.failure.as_deref(), Some(INTERRUPTED));
        assert_eq!(
            run.path,
            ["planner", "executor", "gatekeeper", "verified_input"]
        );
        assert_eq!(
            per_run_counts(fresh)[&stalled],
            [4, STEPS, EXCHANGES, INVOCATIONS],
            "the partial trace is kept"
        );
        assert_eq!(
            trace(&store, &stalled),
            trace_before,
            "the committed trace reads back as before the kill"
        );
        assert_eq!(store.evaluation(&stalled).unwrap(), None);
        let finished = store
            .list_runs(&RunFilter {
                status: Some(RunStatus::Success),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            finished.len(),
            5,
            "the runs finished before the kill are intact"
        );
    });
}

#[test]
fn a_writer_killed_on_another_host_is_swept_once_its_lease_has_expired() {
    for_each_fresh(|fresh| {
        let mut child = spawn("stall", fresh, "k", 0, Some("host-elsewhere"), None);
        let line = wait_for_line(&mut child, |l| l.contains("MIDRUN "));
        let stalled = line.rsplit("MIDRUN ").next().unwrap().trim().to_string();
        let open_at = |offset: Duration| -> Store {
            let now = diag_core::clock::SystemClock::new();
            let clock = Arc::new(diag_core::clock::FixedClock(
                diag_core::clock::Clock::now(&now).saturating_add(offset),
            ));
            diag::stores::open_with_clock(fresh.location(), &OpenOptions::default(), clock).unwrap()
        };
        // The owner is on another host: this process cannot see it, and its lease (a minute
        // by default) is current, so the run is left alone.
        let store = open_at(Duration::ZERO);
        assert_eq!(
            store.get_run(&stalled).unwrap().unwrap().status,
            RunStatus::Running
        );
        let trace_before = trace(&store, &stalled);
        drop(store);
        child.sigkill();
        // Still inside the lease: a killed owner elsewhere is not known to be gone yet.
        let store = open_at(Duration::from_secs(30));
        assert_eq!(
            store.get_run(&stalled).unwrap().unwrap().status,
            RunStatus::Running
        );
        drop(store);
        // Past it: whoever opens the store sweeps the run FAILED (interrupted), trace intact.
        let store = open_at(Duration::from_secs(61));
        let run = store.get_run(&stalled).unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Failed);
        assert_eq!(run.failure.as_deref(), Some(INTERRUPTED));
        assert_eq!(
            run.path,
            ["planner", "executor", "gatekeeper", "verified_input"]
        );
        assert_eq!(
            trace(&store, &stalled),
            trace_before,
            "the committed trace is intact"
        );
        assert_eq!(store.evaluation(&stalled).unwrap(), None);
    });
}

#[test]
fn a_writer_killed_during_busy_writes_leaves_a_consistent_store() {
    for_each_fresh(|fresh| {
        let mut child = spawn("loop", fresh, "b", 0, None, None);
        wait_for_line(&mut child, |l| l.ends_with("DONE 40"));
        child.sigkill();

        let store = fresh.open();
        assert_sqlite_intact(fresh, &store);
        let runs = store.list_runs(&RunFilter::default()).unwrap();
        assert!(runs.len() >= 41, "{} runs", runs.len());
        assert!(
            runs.iter().all(|r| r.status != RunStatus::Running),
            "all swept"
        );
        let counts = per_run_counts(fresh);
        let mut interrupted = 0;
        for run in &runs {
            let [events, steps, exchanges, invocations] =
                counts.get(&run.run_id).copied().unwrap_or_default();
            match run.status {
                RunStatus::Success => {
                    assert_eq!(
                        [events, steps, exchanges, invocations],
                        [EVENTS, STEPS, EXCHANGES, INVOCATIONS],
                        "{} is complete",
                        run.run_id
                    );
                }
                RunStatus::Failed => {
                    interrupted += 1;
                    assert_eq!(run.failure.as_deref(), Some(INTERRUPTED));
                    // The Composer's event is only ever stored together with SUCCESS.
                    assert!(events < EVENTS, "{}: {events} events", run.run_id);
                    assert_eq!(run.path.len() as i64, events);
                }
                RunStatus::Running => unreachable!(),
            }
        }
        assert!(interrupted <= 1, "only the run in flight is interrupted");
        assert_eq!(
            fresh.query(
                "SELECT count(*) FROM diagnosis_run r WHERE status = 'SUCCESS' AND NOT EXISTS \
                 (SELECT 1 FROM evaluation e WHERE e.run_id = r.run_id)"
            ),
            "0",
            "SUCCESS and its evaluation are one transaction: no kill separates them"
        );
    });
}
