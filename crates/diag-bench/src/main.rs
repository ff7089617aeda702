//! `diag-bench`: measures `diag`'s own overhead and prints one JSON object of figures.
//!
//! `diag-bench report --tool-calls N --runs R` renders the HTML and Markdown reports of a
//! synthetic run with N tool calls (each a log search of 20 lines, ten calls per Executor
//! turn, one claim per call) R times and prints their sizes and the median render time;
//! `diag-bench report --store PATH --run ID` does the same for a stored run, reading it from
//! the store once.
//!
//! `diag-bench graph --scenario pass|evidence_retry|planner_fail --runs N` runs the compiled
//! diagnosis topology N times over instant scripted nodes, so the figure is the engine's cost
//! alone: routing, events, state writes and the clock.
//!
//! With `--store PATH` each run is also persisted exactly as the ask service persists it:
//! `create_run`, every event through the recorder as the engine's observer (committed before
//! each agent node and with the finish), and `finish_success_evaluated` with the summary from
//! the final state and an evaluation. The figures then include
//! the store, and `db_bytes_per_run` is the database plus WAL size (after a truncating
//! checkpoint) divided by the runs the file holds. The store is any run store location: a
//! SQLite path, or a `postgres://` URL (the run store a location names, `diag::stores`, as `diag --db`
//! opens it; `db_bytes_per_run` is then left out).
//!
//! `diag-bench graph --store LOC --writers W --runs N` measures concurrent writers: W processes
//! of this binary at once (each with a `DIAG_HOST_ID` of its own, as W machines would be), each
//! storing N runs as above into the one store. It prints the total stored runs per second,
//! from the first writer's start to the last one's exit, and each writer's figures and errors
//! (a writer counts a run it could not store and goes on). It exits 1 when any run failed.
//!
//! `diag-bench logs [--dir DIR] [--size-mib N] [--runs N] [--one-file] [--write
//! docs/BENCHMARKS.md]` times `search_logs` against ripgrep on a generated log, and on one
//! 400 MB file alone (see `logs.rs`).

// No `unwrap`/`expect` outside tests: a failure is a value (Cargo.toml's [lints] says why this is
// an attribute and not a table entry).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand, ValueEnum};
use diag::stores::OpenOptions;
use diag_ask::setup::RandomIds;
use diag_core::clock::{Clock, FixedClock, SystemClock, Timestamp};
use diag_core::graph::{Event, InvokeOptions, NodeKind, NoopObserver, Observer, RunConfig};
use diag_core::ids::IdSource;
use diag_core::protocol::{Verdict, Verification};
use diag_core::store::NewRun;
use diag_core::store::Recorder;
use diag_core::store::Store;
use diag_diagnosis::scripted::{steps, FnNode, ScriptStep};
use diag_diagnosis::topology::{self, DiagnosisNodes};
use diag_diagnosis::{AgentStatus, DiagnosisState, ExecutorStatus, STEP_LIMIT};
use diag_store_sqlite::SqliteStore;

mod logs;

#[derive(Parser)]
#[command(name = "diag-bench", about = "Benchmarks of diag's own overhead")]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Run the compiled topology over instant scripted nodes.
    Graph {
        #[arg(long, value_enum, default_value = "pass")]
        scenario: Scenario,
        #[arg(long, default_value_t = 10_000)]
        runs: u64,
        /// Persist every run in the run store at this location (a SQLite path or a
        /// postgres:// URL), as `diag ask` does.
        #[arg(long, value_name = "PATH|URL")]
        store: Option<PathBuf>,
        /// Run this many writer processes at once, each storing --runs runs into --store.
        #[arg(long, requires = "store", value_parser = clap::value_parser!(u32).range(1..=64))]
        writers: Option<u32>,
        /// Set by --writers on each writer process: its number (from 1).
        #[arg(long, hide = true, requires = "store", conflicts_with = "writers")]
        writer_index: Option<u32>,
    },
    /// Render the HTML and Markdown reports of a run.
    Report {
        /// Tool calls of the synthetic run.
        #[arg(long, default_value_t = 100)]
        tool_calls: usize,
        /// Renders of each format; the median time is reported.
        #[arg(long, default_value_t = 50)]
        runs: usize,
        /// Report a stored run of this store (a SQLite path or a postgres:// URL) instead of a
        /// synthetic one (with --run).
        #[arg(long, value_name = "PATH|URL", requires = "run")]
        store: Option<PathBuf>,
        /// The stored run to report.
        #[arg(long, value_name = "ID", requires = "store")]
        run: Option<String>,
    },
    /// Time search_logs against ripgrep on a generated log (made once under --dir).
    Logs {
        #[arg(long, default_value = "/tmp/diag-bench-logs")]
        dir: PathBuf,
        /// Size of the single-file corpus, and of the four-file one, in MiB.
        #[arg(long, default_value_t = 1024)]
        size_mib: u64,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Only the one-file case: the first 400 MB of the log4j file, against rg and against
        /// one thread.
        #[arg(long)]
        one_file: bool,
        /// Replace the log-search section of this Markdown file with the figures.
        #[arg(long, value_name = "FILE")]
        write: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
#[value(rename_all = "snake_case")]
enum Scenario {
    /// planner, executor, gatekeeper, verified_input, verifier, composer (6 nodes).
    Pass,
    /// One evidence retry: 12 node executions.
    EvidenceRetry,
    /// Planner twice, then the Fallback (3 nodes).
    PlannerFail,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Pass => "pass",
            Scenario::EvidenceRetry => "evidence_retry",
            Scenario::PlannerFail => "planner_fail",
        }
    }
}

fn by_round(first: ScriptStep, later: ScriptStep) -> ScriptStep {
    Box::new(move |s, c| {
        if s.round_number == 1 {
            first(s, c)
        } else {
            later(s, c)
        }
    })
}

fn nodes(scenario: Scenario) -> DiagnosisNodes {
    let planner = match scenario {
        Scenario::PlannerFail => steps::planner(AgentStatus::InvalidOutput),
        _ => steps::planner(AgentStatus::Completed),
    };
    let verifier = match scenario {
        Scenario::EvidenceRetry => by_round(
            steps::verifier_verdict(
                Verdict::LowConfid,
                vec![steps::fact(true, Verification::NoEvidence)],
            ),
            steps::verifier_verdict(Verdict::Pass, vec![]),
        ),
        _ => steps::verifier_verdict(Verdict::Pass, vec![]),
    };
    DiagnosisNodes {
        planner: FnNode::new(planner),
        executor: FnNode::new(steps::executor(ExecutorStatus::Completed)),
        gatekeeper: FnNode::new(steps::gate_pass()),
        verified_input: FnNode::new(steps::verified_input_built()),
        verifier: FnNode::new(verifier),
        retry_prepare: FnNode::new(steps::retry_prepared()),
        composer: FnNode::new(steps::composer_answer("benchmark answer")),
        fallback: FnNode::new(steps::fallback()),
    }
}

/// Peak resident set size of this process, from the kernel's own accounting.
fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn bench_graph(
    scenario: Scenario,
    runs: u64,
    store_location: Option<&Path>,
) -> Result<serde_json::Value, String> {
    let graph = topology::compile(nodes(scenario)).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    let fixed = FixedClock(Timestamp::from_unix_ms(0));
    let system = SystemClock::new();
    let store = match store_location {
        Some(location) => Some(open_store(location)?),
        None => None,
    };
    // Alone, the engine runs on a pinned clock; stored runs get real timestamps, as in
    // production (and distinct run ids across repeated benchmarks on one file).
    let clock: &dyn Clock = if store.is_some() { &system } else { &fixed };
    // Stored runs get the ids `diag ask` gives them: their order decides where in the store's
    // B-trees each run's rows land.
    let ids = RandomIds;
    let config = RunConfig::new("bench-session", "bench-run");
    let mut observer = NoopObserver;
    let started = Instant::now();
    let node_executions = rt.block_on(async {
        let mut total: u64 = 0;
        for _ in 0..runs {
            let state = match &store {
                None => {
                    let opts = InvokeOptions {
                        step_limit: STEP_LIMIT,
                        clock,
                        cancel: None,
                        observer: &mut observer,
                    };
                    graph
                        .invoke(
                            DiagnosisState::new(
                                "why does checkout return 502?",
                                diag_core::protocol::RunClock::at(clock.now()),
                            ),
                            &config,
                            opts,
                        )
                        .await
                        .map_err(|f| f.error.to_string())?
                }
                Some(store) => stored_run(&graph, store, clock, &ids.run_id()).await?,
            };
            total += state.events.len() as u64;
        }
        Ok::<u64, String>(total)
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let us_per_node = if node_executions > 0 {
        seconds * 1e6 / node_executions as f64
    } else {
        0.0
    };
    let mut figures = serde_json::json!({
        "scenario": scenario.name(),
        "runs": runs,
        "node_executions": node_executions,
        "nodes_per_run": node_executions.checked_div(runs).unwrap_or(0),
        "seconds": seconds,
        "runs_per_sec": per_second(runs, seconds),
        "us_per_node": us_per_node,
        "peak_rss_kb": peak_rss_kb(),
    });
    if let Some(location) = store_location {
        figures["backend"] = backend_name(location).into();
    }
    if let Some(location) = store_location.filter(|l| !diag::stores::is_postgres(l)) {
        // The file itself (the port has no checkpoint or file size): a second handle on it.
        let store =
            SqliteStore::open_existing(location, Default::default()).map_err(|e| e.to_string())?;
        // The whole file over every run it holds (earlier benchmarks on the same file
        // included), so the schema's fixed pages weigh less the more runs there are.
        store.checkpoint().map_err(|e| e.to_string())?;
        let stored = diag_core::store::RunReader::count_runs(&store).map_err(|e| e.to_string())?;
        figures["db_bytes_per_run"] = store.file_bytes().checked_div(stored).unwrap_or(0).into();
    }
    Ok(figures)
}

fn per_second(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// The run store at `location`, opened as `diag --db` opens it.
fn open_store(location: &Path) -> Result<Store, String> {
    diag::stores::open(location, &OpenOptions::default()).map_err(|e| e.to_string())
}

fn backend_name(location: &Path) -> &'static str {
    if diag::stores::is_postgres(location) {
        "postgres"
    } else {
        "sqlite"
    }
}

/// Seconds since the Unix epoch: the one clock writer processes share.
fn unix_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// One writer of `--writers`: stores `runs` runs, counting (not stopping at) the ones that
/// fail, and reports when its first run began and its last one ended.
fn bench_writer(
    scenario: Scenario,
    runs: u64,
    location: &Path,
    index: u32,
) -> Result<serde_json::Value, String> {
    let graph = topology::compile(nodes(scenario)).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    let store = open_store(location)?;
    let clock = SystemClock::new();
    let ids = RandomIds;
    let began = unix_seconds();
    let started = Instant::now();
    let (stored, errors, first_error) = rt.block_on(async {
        let (mut stored, mut errors, mut first_error) = (0u64, 0u64, None::<String>);
        for _ in 0..runs {
            match stored_run(&graph, &store, &clock, &ids.run_id()).await {
                Ok(_) => stored += 1,
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert(e);
                }
            }
        }
        (stored, errors, first_error)
    });
    let seconds = started.elapsed().as_secs_f64();
    Ok(serde_json::json!({
        "writer": index,
        "host_id": std::env::var(diag_core::env_vars::EnvVars::DIAG_HOST_ID).ok(),
        "pid": std::process::id(),
        "runs": runs,
        "stored": stored,
        "errors": errors,
        "first_error": first_error,
        "began_at": began,
        "ended_at": began + seconds,
        "seconds": seconds,
        "runs_per_sec": per_second(stored, seconds),
    }))
}

/// `--writers W`: W writer processes of this binary at once into one store. The store is
/// opened (and so created) here first, so that its schema is not part of the figure.
/// Returns the figures and, when a run was not stored, what went wrong.
fn bench_writers(
    scenario: Scenario,
    runs: u64,
    location: &Path,
    writers: u32,
) -> Result<(serde_json::Value, Option<String>), String> {
    let (backend, before) = {
        let store = open_store(location)?;
        let n = store.count_runs().map_err(|e| e.to_string())?;
        (backend_name(location), n)
    };
    let exe = std::env::current_exe().map_err(|e| format!("cannot find diag-bench: {e}"))?;
    let parent = std::process::id();
    let started = Instant::now();
    let mut children = Vec::with_capacity(writers as usize);
    for index in 1..=writers {
        let child = Command::new(&exe)
            .args(["graph", "--scenario", scenario.name(), "--runs"])
            .arg(runs.to_string())
            .arg("--store")
            .arg(location)
            .arg("--writer-index")
            .arg(index.to_string())
            .env(
                diag_core::env_vars::EnvVars::DIAG_HOST_ID,
                format!("diag-bench-{parent}-w{index}"),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start writer {index}: {e}"))?;
        children.push((index, child));
    }
    let mut reports = Vec::with_capacity(children.len());
    let mut failed = Vec::new();
    for (index, child) in children {
        let out = child
            .wait_with_output()
            .map_err(|e| format!("writer {index}: {e}"))?;
        let report = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .filter(|_| out.status.success());
        match report {
            Some(r) => reports.push(r),
            None => {
                let err = String::from_utf8_lossy(&out.stderr);
                let line = err.lines().last().unwrap_or("").trim();
                failed.push(format!("writer {index} ({}): {line}", out.status));
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(first) = failed.first() {
        return Err(format!(
            "{} of {writers} writer(s) failed; {first}",
            failed.len()
        ));
    }
    let after = open_store(location)?
        .count_runs()
        .map_err(|e| e.to_string())?;
    let field = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap_or(0);
    let stored: u64 = reports.iter().map(|r| field(r, "stored")).sum();
    let errors: u64 = reports.iter().map(|r| field(r, "errors")).sum();
    let times = |k: &str| -> Vec<f64> { reports.iter().filter_map(|r| r[k].as_f64()).collect() };
    let write_seconds = times("ended_at").into_iter().fold(f64::MIN, f64::max)
        - times("began_at").into_iter().fold(f64::MAX, f64::min);
    let figures = serde_json::json!({
        "scenario": scenario.name(),
        "backend": backend,
        "writers": writers,
        "runs_per_writer": runs,
        "runs": runs * u64::from(writers),
        "stored": stored,
        "errors": errors,
        "store_runs_before": before,
        "store_runs_after": after,
        "seconds": seconds,
        "runs_per_sec": per_second(stored, seconds),
        "write_seconds": write_seconds,
        "write_runs_per_sec": per_second(stored, write_seconds),
        "per_writer": reports,
    });
    let problem = if errors > 0 {
        let first = reports
            .iter()
            .find_map(|r| r["first_error"].as_str())
            .unwrap_or("");
        Some(format!(
            "{errors} of {} run(s) were not stored; the first error: {first}",
            runs * u64::from(writers)
        ))
    } else if after != before + stored {
        Some(format!(
            "the writers stored {stored} run(s) but the store went from {before} to {after}"
        ))
    } else {
        None
    };
    Ok((figures, problem))
}

/// Forwards the engine's observations to a run's recorder, as the ask service does.
struct Recording(Recorder);

impl<O: Display> Observer<O> for Recording {
    fn node_started(&mut self, _node: &str, kind: NodeKind, _attempt: u32, _round: u32) {
        self.0.observe_node(kind);
    }
    fn event(&mut self, event: &Event<O>) {
        self.0.observe_event(event);
    }
}

/// One run persisted the way the ask service does it (openspec/specs/ask-service/spec.md),
/// through the run store port.
async fn stored_run(
    graph: &diag_diagnosis::DiagnosisGraph,
    store: &Store,
    clock: &dyn Clock,
    run_id: &str,
) -> Result<DiagnosisState, String> {
    let question = "why does checkout return 502?";
    let started_at = clock.now();
    let recorder = store
        .create_run(NewRun {
            run_id: run_id.to_string(),
            session_id: "bench-session".to_string(),
            question: question.to_string(),
            started_at,
            tools: Vec::new(),
            limits: None,
            resumed_from: None,
            replay_of: None,
        })
        .map_err(|e| e.to_string())?;
    let config = RunConfig::new("bench-session", run_id);
    let began = clock.elapsed();
    let mut observer = Recording(recorder.clone());
    let opts = InvokeOptions {
        step_limit: STEP_LIMIT,
        clock,
        cancel: None,
        observer: &mut observer,
    };
    let state = graph
        .invoke(
            DiagnosisState::new(question, diag_core::protocol::RunClock::at(started_at)),
            &config,
            opts,
        )
        .await
        .map_err(|f| f.error.to_string())?;
    if let Some(e) = recorder.take_error() {
        return Err(e.to_string());
    }
    let duration_ms = u64::try_from(clock.elapsed().saturating_sub(began).as_millis()).unwrap_or(0);
    let mut summary = diag_diagnosis::evaluation::run_summary(&state, clock.now(), duration_ms);
    summary.self_evaluation = Some(serde_json::json!({"verifier_evaluation": {
        "verifier_status": state.round.verifier_status,
        "verifier_model_verdict": state.round.verifier_model_verdict,
        "effective_verdict": state.round.effective_verdict,
        "verdict": state.round.effective_verdict,
        "round": state.round_number,
        "gatekeeper_status": state.round.gatekeeper_status,
        "degraded": state.degraded,
    }}));
    let report = store
        .finish_success_evaluated(
            run_id,
            summary,
            &serde_json::json!({"effective_verdict": state.round.effective_verdict,
                                "degraded": state.degraded,
                                "nodes": state.events.len()}),
        )
        .map_err(|e| e.to_string())?;
    if let Some(e) = report.evaluation_error {
        return Err(e.to_string());
    }
    Ok(state)
}

/// A run with `n` tool calls: ten per Executor turn, each a log search of 20 lines, and one
/// claim bound to each call, all verified and cited.
fn synthetic_run(n: usize) -> diag_report::RunData {
    use diag_core::agent::prompts::PromptAudit;
    use diag_core::agent::runtime::{AgentStepRecord, StepStatus};
    use diag_core::agent::AgentRole;
    use diag_core::graph::{Detail, Event};
    use diag_core::model::FinishReason;
    use diag_core::protocol::{InvocationStatus, ToolInvocation};
    use diag_core::store::{RunRow, RunStatus};
    use diag_report::{ModelCall, RunData};
    use serde_json::json;

    let t0 = Timestamp::from_unix_ms(1_796_047_200_000);
    let turns = n.div_ceil(10);
    let step = |agent: AgentRole, turn: u32, ms: u64, finish: FinishReason| AgentStepRecord {
        agent,
        round: 1,
        attempt: 1,
        turn,
        status: StepStatus::Ok,
        model: "bench".into(),
        prompt_tokens: 1000,
        completion_tokens: 200,
        finish_reason: Some(finish),
        duration_ms: ms,
        prompt: PromptAudit {
            prompt_id: agent.as_str().into(),
            version: 1,
            sha256: "0".repeat(64),
            size: 4000,
        },
    };
    let mut model_calls = vec![ModelCall {
        step: step(AgentRole::Planner, 1, 900, FinishReason::Stop),
        tool_calls: 0,
    }];
    for turn in 0..turns {
        let calls = (n - turn * 10).min(10);
        model_calls.push(ModelCall {
            step: step(
                AgentRole::Executor,
                turn as u32 + 1,
                700,
                FinishReason::ToolCalls,
            ),
            tool_calls: calls,
        });
    }
    model_calls.push(ModelCall {
        step: step(
            AgentRole::Executor,
            turns as u32 + 1,
            1500,
            FinishReason::Stop,
        ),
        tool_calls: 0,
    });
    model_calls.push(ModelCall {
        step: step(AgentRole::Verifier, 1, 1200, FinishReason::Stop),
        tool_calls: 0,
    });
    model_calls.push(ModelCall {
        step: step(AgentRole::Composer, 1, 1100, FinishReason::Stop),
        tool_calls: 0,
    });
    let invocations: Vec<ToolInvocation> = (1..=n)
        .map(|i| ToolInvocation {
            run_id: "run-bench".into(),
            session_id: "ses-bench".into(),
            invocation_id: format!("inv-{i}"),
            agent: "executor".into(),
            round: 1,
            tool_name: "search_logs".into(),
            arguments: json!({"query": format!("error {i}"), "service": "checkout", "limit": 20}),
            output: json!({"matches": (0..20).map(|k| json!({
                "file": "logs/checkout-service.log", "line_no": k + 1,
                "timestamp": "2026-11-30T14:02:03.363Z",
                "line": format!("2026-11-30T14:02:03.363Z ERROR checkout-service POST /api/checkout 502 in 5002ms: upstream returned 502 from payment-service (call {i}, line {k})")
            })).collect::<Vec<_>>(), "truncated": false}),
            status: InvocationStatus::Ok,
            duration_ms: 40 + (i as u64 * 37) % 400,
        })
        .collect();
    let exec_ms: u64 = model_calls
        .iter()
        .filter(|m| m.step.agent == AgentRole::Executor)
        .map(|m| m.step.duration_ms)
        .sum::<u64>()
        + (0..turns)
            .map(|t| {
                invocations[t * 10..(t * 10 + 10).min(n)]
                    .iter()
                    .map(|i| i.duration_ms)
                    .max()
                    .unwrap_or(0)
            })
            .sum::<u64>();
    let nodes = [
        ("planner", "COMPLETED", 905),
        ("executor", "COMPLETED", exec_ms + 5),
        ("gatekeeper", "PASS", 3),
        ("verified_input", "BUILT", 1),
        ("verifier", "COMPLETED", 1204),
        ("composer", "COMPLETED", 1103),
    ];
    let mut at = 0u64;
    let events: Vec<Event<String>> = nodes
        .iter()
        .enumerate()
        .map(|(i, (node, status, ms))| {
            let e = Event {
                seq: i as u32 + 1,
                node: node.to_string(),
                attempt: 1,
                round: 1,
                status: status.to_string(),
                started_at: t0.saturating_add(std::time::Duration::from_millis(at)),
                duration_ms: *ms,
                detail: Detail::default(),
            };
            at += ms;
            e
        })
        .collect();
    let claims: Vec<serde_json::Value> = (1..=n)
        .map(|i| json!({"claim_id": format!("c{i}"), "text": format!("checkout-service logged an upstream 502 from payment-service (call {i})")}))
        .collect();
    let bindings: Vec<serde_json::Value> = (1..=n)
        .map(|i| {
            json!({"claim_id": format!("c{i}"), "source_invocation_id": format!("inv-{i}"),
            "tool_name": "search_logs", "raw_path": "/matches/0/line", "passed": true,
            "matched_text": "upstream returned 502 from payment-service", "failure": null})
        })
        .collect();
    let answer = format!(
        "checkout-service answers 502 because payment-service times out.\n\n{}",
        (1..=n)
            .map(|i| format!("- upstream 502 seen by call {i} [c{i}]"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    RunData {
        run: RunRow {
            run_id: "run-bench".into(),
            session_id: "ses-bench".into(),
            question: "why does checkout-service return 502 since 14:00?".into(),
            status: RunStatus::Success,
            failure: None,
            answer: Some(answer),
            started_at: t0,
            finished_at: Some(t0.saturating_add(std::time::Duration::from_millis(at))),
            duration_ms: Some(at),
            prompt_tokens: 1000 * model_calls.len() as u64,
            completion_tokens: 200 * model_calls.len() as u64,
            step_count: model_calls.len() as u64,
            tool_count: n as u64,
            degraded: false,
            effective_verdict: Some(Verdict::Pass),
            fallback_kind: None,
            path: nodes.iter().map(|n| n.0.to_string()).collect(),
            self_evaluation: Some(json!({"verifier_evaluation": {
                "round": 1, "gatekeeper_status": "PASS", "verifier_status": "COMPLETED",
                "model_verdict": "PASS", "effective_verdict": "PASS", "ceiling": "PASS",
                "groundedness": 0.9,
                "gatekeeper_raw": {"result": "pass", "severity": null, "checked_bindings": bindings,
                    "audit": {"claims": n, "bindings": n, "passed": n, "failed": 0, "unbound_claims": 0}},
                "verified_executor_output": {"claims": claims},
                "claim_checks": (1..=n).map(|i| json!({"claim_id": format!("c{i}"), "supported": true})).collect::<Vec<_>>(),
            }})),
            tools: Vec::new(),
            limits: None,
            owner_pid: 0,
            created_at: t0,
            resumed_from: None,
            replay_of: None,
            reuse: None,
        },
        events,
        model_calls,
        invocations,
        alerts: None,
    }
}

fn bench_report(
    tool_calls: usize,
    runs: usize,
    stored: Option<(&Path, &str)>,
) -> Result<serde_json::Value, String> {
    use diag_report::{render, Format};
    let data = match stored {
        Some((location, run)) => {
            let store = diag::stores::open_existing(location, &OpenOptions::default())
                .map_err(|e| e.to_string())?;
            diag_report::from_store(&store, run)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("unknown run {run}"))?
        }
        None => synthetic_run(tool_calls),
    };
    let shape = topology::shape().map_err(|e| e.to_string())?.shape();
    let runs = runs.max(1);
    let mut figures = serde_json::Map::new();
    for (name, format) in [("html", Format::Html), ("md", Format::Md)] {
        let mut times = Vec::with_capacity(runs);
        let mut bytes = 0;
        for _ in 0..runs {
            let t = Instant::now();
            let text = render(format, &data, &shape);
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            bytes = text.len();
        }
        times.sort_by(f64::total_cmp);
        figures.insert(format!("{name}_bytes"), bytes.into());
        figures.insert(
            format!("{name}_ms_median"),
            serde_json::json!((times[times.len() / 2] * 1000.0).round() / 1000.0),
        );
        figures.insert(
            format!("{name}_ms_max"),
            serde_json::json!((times[times.len() - 1] * 1000.0).round() / 1000.0),
        );
    }
    figures.insert("tool_calls".into(), data.invocations.len().into());
    figures.insert("runs".into(), runs.into());
    figures.insert(
        "run".into(),
        match stored {
            Some((_, run)) => run.into(),
            None => "synthetic".into(),
        },
    );
    Ok(serde_json::Value::Object(figures))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Bench::Graph {
            scenario,
            runs,
            store,
            writers,
            writer_index,
        } => match (store.as_deref(), writers, writer_index) {
            (Some(location), Some(writers), _) => {
                match bench_writers(scenario, runs, location, writers) {
                    Ok((figures, None)) => Ok(figures),
                    Ok((figures, Some(problem))) => {
                        println!("{figures}");
                        eprintln!("diag-bench: {problem}");
                        return ExitCode::FAILURE;
                    }
                    Err(e) => Err(e),
                }
            }
            (Some(location), None, Some(index)) => bench_writer(scenario, runs, location, index),
            (store, _, _) => bench_graph(scenario, runs, store),
        },
        Bench::Report {
            tool_calls,
            runs,
            store,
            run,
        } => bench_report(tool_calls, runs, store.as_deref().zip(run.as_deref())),
        Bench::Logs {
            dir,
            size_mib,
            runs,
            one_file,
            write,
        } => logs::bench_logs(&dir, size_mib, runs.max(1), one_file, write.as_deref()),
    };
    match result {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("diag-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
