//! The run store across processes: several writers on one file at once, and writers killed
//! with SIGKILL mid-run.
//!
//! The child processes are this test binary itself, started again with only
//! `child_process_role` selected and `DIAG_STORE_TEST_ROLE` naming what to do; without that
//! variable the role test returns at once, so a normal test run just passes it.

use crate::support::records;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use diag::agent::runtime::{RunHooks, StepStatus};
use diag::agent::AgentRole;
use diag::diagnosis::Status;
use diag::graph::{NodeKind, Observer, RunConfig};
use diag::store::{RunFilter, RunStatus, Store, StoreOptions, INTERRUPTED};
use records::*;
use serde_json::json;

const ROLE: &str = "DIAG_STORE_TEST_ROLE";
const DB: &str = "DIAG_STORE_TEST_DB";
const PREFIX: &str = "DIAG_STORE_TEST_PREFIX";
const RUNS: &str = "DIAG_STORE_TEST_RUNS";
const START_AT_MS: &str = "DIAG_STORE_TEST_START_AT_MS";

/// Per run: 6 events, 2 agent steps, 2 model exchanges, 3 tool invocations, 1 evaluation.
const EVENTS: usize = 6;
const STEPS: usize = 2;
const EXCHANGES: usize = 2;
const INVOCATIONS: usize = 3;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Writes the first `upto_events` events of a run and its steps, exchanges and invocations
/// in the order a live run would produce them.
fn write_partial_run(store: &Store, run_id: &str, upto_events: usize) -> diag::store::RunRecorder {
    let session = "concurrency";
    let rec = store
        .create_run(new_run(run_id, session, 0))
        .unwrap_or_else(|e| panic!("create {run_id}: {e}"));
    let config = RunConfig::new(session, run_id);
    let mut observer = rec.clone();
    for (i, (node, status)) in PASS_PATH.iter().enumerate().take(upto_events) {
        // As the engine does: an agent node's start commits the events held so far.
        let kind = if matches!(*node, "gatekeeper" | "verified_input") {
            NodeKind::Deterministic
        } else {
            NodeKind::Agent
        };
        Observer::<Status>::node_started(&mut observer, node, kind, 1, 1);
        if *node == "executor" {
            for turn in 1..=STEPS as u32 {
                rec.agent_step(&config, &step(AgentRole::Executor, turn, StepStatus::Ok));
                rec.model_exchange(&config, &exchange_ok(AgentRole::Executor, turn));
            }
            for n in 1..=INVOCATIONS as u32 {
                rec.record_own(invocation(
                    run_id,
                    session,
                    n,
                    json!({"matches": [{"line": "upstream returned 502"}]}),
                ));
            }
        }
        Observer::<Status>::event(&mut observer, &event(i as u32 + 1, node, *status));
    }
    if let Some(e) = rec.take_error() {
        panic!("trace write of {run_id} failed: {e}");
    }
    rec
}

/// A whole run, finished as `diag ask` finishes one: the Composer's event is still held
/// when the run ends, and goes into the one transaction that stores SUCCESS and the
/// evaluation.
fn write_full_run(store: &Store, run_id: &str) {
    let rec = write_partial_run(store, run_id, EVENTS);
    let report = store
        .finish_success_evaluated(
            run_id,
            summary("payment-service timed out"),
            &json!({"groundedness": 0.9}),
        )
        .unwrap_or_else(|e| panic!("finish {run_id}: {e:?}"));
    assert!(report.evaluation_error.is_none(), "{run_id}");
    drop(rec);
}

#[test]
fn child_process_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let db = PathBuf::from(std::env::var(DB).unwrap());
    let prefix = std::env::var(PREFIX).unwrap_or_default();
    let runs: usize = std::env::var(RUNS)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if let Some(start) = std::env::var(START_AT_MS)
        .ok()
        .and_then(|t| t.parse::<u64>().ok())
    {
        // Every writer opens the (new) file at the same moment, so the migration races too.
        let now = unix_ms();
        if start > now {
            std::thread::sleep(Duration::from_millis(start - now));
        }
    }
    // The busy timeout bounds a wait for another writer's lock, not a speed: four processes
    // migrating one new file at once on a loaded two-core machine (the whole suite runs beside
    // them in the one test binary) can hold each other off past the default 5 s, which is no
    // fault of the store. What this checks is that nothing is lost or corrupted.
    let options = StoreOptions {
        busy_timeout: Duration::from_secs(120),
        ..StoreOptions::default()
    };
    let store = Store::open_with(&db, options).unwrap_or_else(|e| panic!("open: {e}"));
    match role.as_str() {
        "writer" => {
            for i in 0..runs {
                write_full_run(&store, &format!("{prefix}-{i}"));
            }
            println!("WROTE {runs}");
        }
        "stall" => {
            for i in 0..runs {
                write_full_run(&store, &format!("{prefix}-{i}"));
            }
            // Four nodes done, then the Verifier starts its model call and hangs there: the
            // recorder stays alive, so only what the store committed on its own survives the
            // kill.
            let mut rec = write_partial_run(&store, &format!("{prefix}-stalled"), 4);
            Observer::<Status>::node_started(&mut rec, "verifier", NodeKind::Agent, 1, 1);
            println!("MIDRUN {prefix}-stalled");
            std::thread::sleep(Duration::from_secs(120));
            drop(rec);
        }
        "loop" => {
            for i in 0.. {
                write_full_run(&store, &format!("{prefix}-{i}"));
                println!("DONE {i}");
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// Kills the child when the test ends, however it ends.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The role test's name as libtest knows it: its module path inside the test binary (this
/// module is one of many in `it`), without the crate's name.
fn role_test_name() -> String {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    format!("{module}::child_process_role")
}

fn spawn(role: &str, db: &Path, prefix: &str, runs: usize, start_at_ms: Option<u64>) -> ChildGuard {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        role_test_name().as_str(),
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, role)
    .env(DB, db)
    .env(PREFIX, prefix)
    .env(RUNS, runs.to_string())
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(t) = start_at_ms {
        cmd.env(START_AT_MS, t.to_string());
    }
    ChildGuard(cmd.spawn().unwrap())
}

/// Reads the child's stdout until a line satisfies `want`, or fails after `limit`.
fn wait_for_line(child: &mut ChildGuard, limit: Duration, want: impl Fn(&str) -> bool) -> String {
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if want(&line) => return line,
            Ok(_) => continue,
            Err(e) => {
                let _ = child.0.kill();
                let out = child.0.wait_with_output_stderr();
                panic!("child never reported ({e:?}); stderr:\n{out}");
            }
        }
    }
}

trait StderrText {
    fn wait_with_output_stderr(&mut self) -> String;
}

impl StderrText for Child {
    fn wait_with_output_stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut e) = self.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut text);
        }
        let _ = self.wait();
        text
    }
}

fn sigkill(child: &mut ChildGuard) {
    // Child::kill sends SIGKILL on Unix: no destructor, no rollback, no clean close.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
}

fn per_run_counts(path: &Path, run_id: &str) -> [i64; 4] {
    let conn = raw(path);
    let count = |table: &str| -> i64 {
        conn.query_row(
            &format!("SELECT count(*) FROM {table} WHERE run_id = ?1"),
            [run_id],
            |r| r.get(0),
        )
        .unwrap()
    };
    [
        count("orchestration_event"),
        count("agent_step"),
        count("model_exchange"),
        count("tool_invocation"),
    ]
}

#[test]
fn four_processes_write_one_file_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let per_child = 100;
    let start = unix_ms() + 400;
    let children: Vec<ChildGuard> = (0..4)
        .map(|c| spawn("writer", &db, &format!("p{c}"), per_child, Some(start)))
        .collect();
    for mut child in children {
        let status = child.0.wait().unwrap();
        let stderr = child.0.wait_with_output_stderr();
        assert!(status.success(), "a writer failed: {status}\n{stderr}");
    }
    let runs = 4 * per_child as i64;
    assert_eq!(
        counts(&db),
        [
            runs,
            runs * EVENTS as i64,
            runs * STEPS as i64,
            runs * INVOCATIONS as i64,
            runs * EXCHANGES as i64,
            runs,
            1
        ],
        "exact row counts in {:?}",
        TABLES
    );
    let store = Store::open(&db).unwrap();
    let all = store.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(all.len(), runs as usize);
    assert!(all.iter().all(|r| r.status == RunStatus::Success
        && r.step_count == STEPS as u64
        && r.tool_count == INVOCATIONS as u64
        && r.path.len() == EVENTS));
    for c in 0..4 {
        // Each writer's invocations came back scoped to its own runs.
        let run_id = format!("p{c}-{}", per_child - 1);
        assert!(store
            .invocations(&run_id)
            .unwrap()
            .iter()
            .all(|i| i.run_id == run_id));
    }
    assert_eq!(store.integrity_check().unwrap(), "ok");
    // The request parts every writer stored are there once each, counted exactly.
    let conn = raw(&db);
    let (blobs, distinct): (i64, i64) = conn
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
    assert_blob_refs_exact(&db);
}

#[test]
fn a_run_killed_mid_way_is_swept_with_its_partial_trace() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("killed.db");
    let mut child = spawn("stall", &db, "k", 5, None);
    // libtest prints `test store_concurrency::child_process_role ... ` without a newline, so the first report
    // may share its line.
    let line = wait_for_line(&mut child, Duration::from_secs(60), |l| {
        l.contains("MIDRUN ")
    });
    let stalled = line.rsplit("MIDRUN ").next().unwrap().trim().to_string();

    // While its owner lives, opening the store leaves the run alone.
    let store = Store::open(&db).unwrap();
    assert_eq!(
        store.get_run(&stalled).unwrap().unwrap().status,
        RunStatus::Running
    );
    drop(store);

    sigkill(&mut child);
    assert_eq!(integrity(&db), "ok");
    let store = Store::open(&db).unwrap();
    let run = store.get_run(&stalled).unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.failure.as_deref(), Some(INTERRUPTED));
    assert_eq!(
        run.path,
        ["planner", "executor", "gatekeeper", "verified_input"]
    );
    assert_eq!(
        per_run_counts(&db, &stalled),
        [4, STEPS as i64, EXCHANGES as i64, INVOCATIONS as i64],
        "the partial trace is kept"
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
    assert_eq!(store.integrity_check().unwrap(), "ok");
}

#[test]
fn a_writer_killed_during_busy_writes_leaves_a_consistent_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("busy.db");
    let mut child = spawn("loop", &db, "b", 0, None);
    wait_for_line(&mut child, Duration::from_secs(60), |l| {
        l.ends_with("DONE 40")
    });
    sigkill(&mut child);

    assert_eq!(integrity(&db), "ok");
    let store = Store::open(&db).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
    let runs = store.list_runs(&RunFilter::default()).unwrap();
    assert!(runs.len() >= 41, "{} runs", runs.len());
    assert!(
        runs.iter().all(|r| r.status != RunStatus::Running),
        "all swept"
    );
    let mut interrupted = 0;
    for run in &runs {
        let [events, steps, exchanges, invocations] = per_run_counts(&db, &run.run_id);
        match run.status {
            RunStatus::Success => {
                assert_eq!(
                    [events, steps, exchanges, invocations],
                    [
                        EVENTS as i64,
                        STEPS as i64,
                        EXCHANGES as i64,
                        INVOCATIONS as i64
                    ],
                    "{} is complete",
                    run.run_id
                );
            }
            RunStatus::Failed => {
                interrupted += 1;
                assert_eq!(run.failure.as_deref(), Some(INTERRUPTED));
                // The Composer's event is only ever stored together with SUCCESS.
                assert!(events < EVENTS as i64, "{}: {events} events", run.run_id);
                assert_eq!(run.path.len() as i64, events);
            }
            RunStatus::Running => unreachable!(),
        }
    }
    assert!(interrupted <= 1, "only the run in flight is interrupted");
    let unevaluated = runs
        .iter()
        .filter(|r| r.status == RunStatus::Success)
        .filter(|r| store.evaluation(&r.run_id).unwrap().is_none())
        .count();
    assert_eq!(
        unevaluated, 0,
        "SUCCESS and its evaluation are one transaction: no kill separates them"
    );
}
