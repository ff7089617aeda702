//! The fixture library: every run file in `fixtures/runs/` (one per routing class of the
//! diagnosis graph) and the README's incident, replayed offline through the real runtime and
//! nodes. Each must follow its recording to the end, reproduce its `expected` result, and do
//! so again on a second replay; together they must cover every way a run can end. A
//! deliberately corrupted copy must be reported as a divergence naming the exchange.
//!
//! The files are also held to what they claim to be: the tool catalog is the real tools'
//! specs, log lines and runbook text are the demo environment's, and every exchange's
//! metadata (agent, round, attempt, turn; invocation id, tool, status) is what the replay
//! really did.

use diag_testkit::repo;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use diag_ask::replay::{compare, replay, Replayed};
use diag_core::clock::Timestamp;
use diag_core::ids::SequentialIds;
use diag_core::store::Store;
use diag_core::tools::{Tool, ToolSpec};
use diag_diagnosis::FallbackKind;
use diag_runfile::{Exchange, RunFile, FORMAT};
use diag_tools::{
    CurrentTime, LogQuery, LogSearchLimits, MetricsLimits, QueryMetrics, RunbookSearchLimits,
    SearchLogs, SearchRunbooks,
};
use serde_json::Value;
use tempfile::TempDir;

const MIN_RUN_FILES: usize = 25;

fn incident() -> PathBuf {
    repo().join("fixtures/incident-checkout-502.json")
}

/// The run files of `fixtures/runs/`, sorted by name.
fn run_files() -> Vec<PathBuf> {
    let dir = repo().join("fixtures/runs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// The library and the incident.
fn all_files() -> Vec<PathBuf> {
    let mut files = run_files();
    files.push(incident());
    files
}

fn name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

fn load(path: &Path) -> RunFile {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    RunFile::parse(&text, &name(path)).unwrap_or_else(|e| panic!("{e}"))
}

/// A store in a temporary directory; the directory lives as long as the store is used.
fn temp_store() -> (TempDir, Store) {
    let dir = TempDir::new().unwrap();
    let store = diag_testkit::open_sqlite(dir.path().join("runs.db")).unwrap();
    (dir, store)
}

async fn replay_into(run: &RunFile, store: &Store, ids: &Arc<SequentialIds>) -> Replayed {
    replay(run, store, ids.clone()).await.unwrap()
}

/// What one replay left in the store, apart from run id, timestamps and durations.
#[derive(Debug, PartialEq)]
struct Trace {
    events: Vec<(String, u32, u32, String, Value)>,
    steps: Vec<(String, u32, u32, u32, String)>,
    requests: Vec<String>,
    invocations: Vec<(String, String, Value, Value, String)>,
}

fn trace(store: &Store, run_id: &str) -> Trace {
    Trace {
        events: store
            .events(run_id)
            .unwrap()
            .into_iter()
            .map(|e| {
                let detail = serde_json::to_value(&e.detail).unwrap();
                (e.node, e.attempt, e.round, e.status, detail)
            })
            .collect(),
        steps: store
            .agent_steps(run_id)
            .unwrap()
            .into_iter()
            .map(|s| {
                let s = s.step;
                let status = s.status.as_str().to_string();
                (
                    s.agent.as_str().to_string(),
                    s.round,
                    s.attempt,
                    s.turn,
                    status,
                )
            })
            .collect(),
        requests: store
            .exchanges(run_id)
            .unwrap()
            .into_iter()
            .map(|x| x.request_sha256)
            .collect(),
        invocations: store
            .invocations(run_id)
            .unwrap()
            .into_iter()
            .map(|i| {
                let status = i.status.as_str().to_string();
                (i.invocation_id, i.tool_name, i.arguments, i.output, status)
            })
            .collect(),
    }
}

/// The file's exchange metadata against what the replay did: every model exchange is one
/// agent step with the same agent, round, attempt and turn (and an outcome of the recorded
/// kind), every tool exchange one invocation with the same id, tool, arguments and status.
fn check_metadata(file: &str, run: &RunFile, t: &Trace) {
    let mut steps = t.steps.iter();
    let mut invocations = t.invocations.iter();
    for (i, x) in run.exchanges.iter().enumerate() {
        match x {
            Exchange::Model(m) => {
                let (agent, round, attempt, turn, status) = steps
                    .next()
                    .unwrap_or_else(|| panic!("{file}: exchange {i} made no agent step"));
                let want_status = match (&m.response, &m.error) {
                    (Some(r), _) if r.finish_reason == "length" && r.tool_calls.is_empty() => {
                        "truncated".to_string()
                    }
                    (Some(_), _) => "ok".to_string(),
                    (None, Some(e)) => serde_json::to_value(e.class)
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_string(),
                    (None, None) => unreachable!("RunFile::parse refuses it"),
                };
                assert_eq!(
                    (agent.as_str(), *round, *attempt, *turn, status.as_str()),
                    (
                        m.agent.as_str(),
                        m.round,
                        m.attempt,
                        m.turn,
                        want_status.as_str()
                    ),
                    "{file}: exchange {i} (agent, round, attempt, turn, outcome) is not what \
                     the replay did"
                );
            }
            Exchange::Tool(r) => {
                let (id, tool, arguments, _, status) = invocations
                    .next()
                    .unwrap_or_else(|| panic!("{file}: exchange {i} made no tool invocation"));
                assert_eq!(
                    (id, tool, arguments, status.as_str()),
                    (
                        &r.invocation_id,
                        &r.tool_name,
                        &r.arguments,
                        r.status.as_str()
                    ),
                    "{file}: exchange {i} is not the invocation the replay recorded"
                );
            }
        }
    }
    assert!(
        steps.next().is_none(),
        "{file}: more agent steps than model exchanges"
    );
    assert!(
        invocations.next().is_none(),
        "{file}: more invocations than tool exchanges"
    );
}

/// How a run ended, for the coverage check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ending {
    Composer,
    PreVerificationFallback,
    PostVerificationFallback,
}

fn ending(file: &str, r: &Replayed) -> Ending {
    let last = r.actual.path.last().map(String::as_str);
    match (last, r.outcome.state.fallback_kind) {
        (Some("composer"), None) => Ending::Composer,
        (Some("fallback"), Some(FallbackKind::PreVerification)) => Ending::PreVerificationFallback,
        (Some("fallback"), Some(FallbackKind::PostVerification)) => {
            Ending::PostVerificationFallback
        }
        other => panic!("{file}: the run ended in an unexpected place: {other:?}"),
    }
}

#[test]
fn the_library_holds_enough_run_files_all_of_the_current_format() {
    let files = run_files();
    assert!(
        files.len() >= MIN_RUN_FILES,
        "fixtures/runs holds {} run files, fewer than {MIN_RUN_FILES}",
        files.len()
    );
    for path in all_files() {
        let raw: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(raw["format"], FORMAT, "{}", name(&path));
        let run = load(&path);
        assert_eq!(run.format, FORMAT);
        assert!(run.expected.is_some(), "{}: no `expected`", name(&path));
        assert!(!run.exchanges.is_empty(), "{}: no exchanges", name(&path));
    }
}

#[tokio::test]
async fn every_run_file_replays_to_its_expected_result_twice() {
    let mut endings = BTreeSet::new();
    let mut evidence_retries = 0;
    for path in all_files() {
        let file = name(&path);
        let run = load(&path);
        let expected = run.expected.clone().unwrap();
        let (_dir, store) = temp_store();
        let ids = Arc::new(SequentialIds::default());

        let first = replay_into(&run, &store, &ids).await;
        assert_eq!(
            first.divergence, None,
            "{file}: the replay left its recording"
        );
        let diff = compare(&expected, &first.actual);
        assert!(
            diff.is_empty(),
            "{file}: replay differs from expected: {diff:#?}"
        );
        let first_trace = trace(&store, &first.outcome.run_id);
        check_metadata(&file, &run, &first_trace);

        // A second replay, into the same store and session under a new run id, is the same
        // run: same result, same events, same requests, same tool invocations.
        let second = replay_into(&run, &store, &ids).await;
        assert_ne!(first.outcome.run_id, second.outcome.run_id);
        assert_eq!(
            second.divergence, None,
            "{file}: the second replay diverged"
        );
        assert_eq!(
            first.actual, second.actual,
            "{file}: the second replay differs"
        );
        assert_eq!(
            first_trace,
            trace(&store, &second.outcome.run_id),
            "{file}: the second replay stored another trace"
        );

        // Every route of the graph ends in an answer (a Fallback is handled, not a failure),
        // so every fixture is a SUCCESS; only engine errors make a run FAILED.
        assert_eq!(first.actual.status, "SUCCESS", "{file}");
        assert_eq!(
            first.actual.degraded,
            first.actual.path.last().map(String::as_str) == Some("fallback"),
            "{file}: degraded is set exactly when the run fell back"
        );
        endings.insert(ending(&file, &first));
        if first.actual.path.iter().any(|n| n == "retry_prepare") {
            evidence_retries += 1;
        }
    }
    assert_eq!(
        endings,
        BTreeSet::from([
            Ending::Composer,
            Ending::PreVerificationFallback,
            Ending::PostVerificationFallback
        ]),
        "the library must end at the Composer and at both kinds of Fallback"
    );
    assert!(
        evidence_retries > 0,
        "the library must hold an evidence retry"
    );
}

/// The library's files, by routing class, with the path each must take. Guards the names
/// against drifting away from what the files do.
#[test]
fn the_routing_classes_are_all_present() {
    use diag_diagnosis::topology::STEP_LIMIT;
    let names: BTreeSet<String> = run_files()
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for class in [
        "pass",
        "planner_invalid_then_ok",
        "planner_retryable_then_ok",
        "planner_retry_exhausted",
        "planner_non_retryable",
        "prose_around_json_planner",
        "executor_failed",
        "executor_tool_blocked",
        "executor_tool_budget_exhausted",
        "executor_invalid_output",
        "executor_no_evidence",
        "gatekeeper_low_confid",
        "gatekeeper_low_confid_zero_passed",
        "gatekeeper_reject",
        "gatekeeper_unknown_invocation",
        "gatekeeper_short_quote",
        "gatekeeper_half_bound_claim",
        "gatekeeper_unbound_token",
        "verifier_retry_then_ok",
        "verifier_retry_exhausted",
        "verifier_non_retryable",
        "verifier_reject",
        "verifier_invalid_allowed_claims",
        "verifier_allows_unsupported",
        "evidence_retry",
        "evidence_retry_second_low_confid",
        "evidence_retry_round2_executor_fails",
        "non_critical_gap",
        "ceiling_low_confid",
        "composer_retry_then_ok",
        "composer_retry_exhausted",
        "composer_non_retryable",
        "composer_prose",
        "composer_cites_refused_inline",
        "composer_unbound_token",
        "composer_derivations",
        "composer_derivation_wrong",
        "composer_derivation_refused",
        "longest_path",
    ] {
        assert!(
            names.contains(class),
            "fixtures/runs/{class}.json is missing"
        );
    }
    let longest = load(&repo().join("fixtures/runs/longest_path.json"));
    assert_eq!(
        longest.expected.unwrap().path.len(),
        STEP_LIMIT as usize,
        "longest_path.json takes the longest legal path"
    );
}

#[test]
fn every_catalog_is_the_real_tools_specs() {
    let real: Vec<ToolSpec> = vec![
        SearchLogs::new(Vec::new(), LogSearchLimits::default()).spec(),
        QueryMetrics::new("http://127.0.0.1:9090", MetricsLimits::default())
            .unwrap()
            .spec(),
        SearchRunbooks::new(Vec::new(), RunbookSearchLimits::default()).spec(),
        CurrentTime::new().spec(),
    ];
    for path in all_files() {
        assert!(
            load(&path).tools == real,
            "{}: the tool catalog is not the built-in tools' specs; copy them from the \
             tools' spec() again:\n{}",
            name(&path),
            serde_json::to_string_pretty(&real).unwrap()
        );
    }
}

/// A `search_logs` output over a source given by its absolute path, with each file named
/// from the repository root, as the recordings name them (`fixtures/demo/logs/…`): what the
/// tool returns over the source `fixtures/demo/logs` searched from there.
fn files_from_repo_root(mut output: Value) -> Value {
    let root = format!("{}/", repo().display());
    for list in ["matches", "skipped"] {
        for item in output
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let file = item["file"].as_str().unwrap();
            let relative = file
                .strip_prefix(&root)
                .unwrap_or_else(|| panic!("{file} is not under {root}"));
            item["file"] = Value::from(relative);
        }
    }
    output
}

/// Log lines and runbook sections in the recorded outputs are the demo environment's own,
/// word for word; outputs have the real tools' shapes.
#[test]
fn recorded_tool_outputs_are_the_demo_environments() {
    let demo = |rel: &str| {
        std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    };
    for path in all_files() {
        let file = name(&path);
        for x in load(&path).exchanges {
            let Exchange::Tool(t) = x else { continue };
            let o = &t.output;
            let at = format!("{file}: {} ({})", t.invocation_id, t.tool_name);
            if t.status.as_str() != "ok" {
                assert!(
                    o["error"].is_string(),
                    "{at}: an error output names its error"
                );
                continue;
            }
            match t.tool_name.as_str() {
                "search_logs" => {
                    // Exactly what the real tool returns over the demo logs today.
                    let tool = SearchLogs::new(
                        vec![repo().join("fixtures/demo/logs")],
                        LogSearchLimits::default(),
                    );
                    let query = LogQuery::from_arguments(&t.arguments, tool.limits()).unwrap();
                    let now = Timestamp::parse_rfc3339("2026-11-30T15:00:00Z").unwrap();
                    let real = files_from_repo_root(
                        serde_json::to_value(tool.search(&query, now).unwrap()).unwrap(),
                    );
                    assert!(
                        *o == real,
                        "{at}: the recorded output is not the real tool's over the demo \
                         logs; it returns:\n{real}"
                    );
                    for m in o["matches"].as_array().unwrap() {
                        let source = demo(m["file"].as_str().unwrap());
                        let no = m["line_no"].as_u64().unwrap() as usize;
                        assert_eq!(
                            source.lines().nth(no - 1),
                            m["line"].as_str(),
                            "{at}: line {no} is not the demo log's"
                        );
                        let line = m["line"].as_str().unwrap();
                        let ts = m["timestamp"].as_str().unwrap();
                        assert!(line.contains(ts), "{at}: timestamp {ts} not in its line");
                    }
                }
                "search_runbooks" => {
                    for h in o["hits"].as_array().unwrap() {
                        let source = demo(h["path"].as_str().unwrap());
                        let heading = h["heading"].as_str().unwrap();
                        assert!(
                            source.contains(&format!("# {heading}\n")),
                            "{at}: {heading}"
                        );
                        assert!(source.contains(h["text"].as_str().unwrap()), "{at}: text");
                        assert!(h["score"].is_number(), "{at}");
                    }
                }
                "query_metrics" => {
                    let kind = o["resultType"].as_str().unwrap();
                    assert!(["vector", "matrix"].contains(&kind), "{at}: {kind}");
                    assert!(o["result"].is_array(), "{at}");
                    // Every sample carries its time as text, exactly as the tool adds it to
                    // what Prometheus answers.
                    let mut from_server = o.clone();
                    for series in from_server["result"].as_array_mut().unwrap() {
                        let samples: Vec<&mut Value> = match series.get_mut("value") {
                            Some(v) => vec![v],
                            None => series["values"]
                                .as_array_mut()
                                .unwrap()
                                .iter_mut()
                                .collect(),
                        };
                        for sample in samples {
                            let sample = sample.as_array_mut().unwrap();
                            assert_eq!(sample.len(), 3, "{at}: a sample without its time text");
                            sample.pop();
                        }
                    }
                    assert_eq!(
                        &diag_tools::query_metrics::with_sample_times(from_server),
                        o,
                        "{at}: the samples' time texts are not the tool's"
                    );
                }
                "current_time" => assert!(o["now"].is_string(), "{at}"),
                other => panic!("{at}: {other} is not a built-in tool"),
            }
        }
    }
}

/// The README's incident: a whole diagnosis over logs, metrics and runbooks, every claim
/// bound to a recorded output, verified PASS, composed in Markdown.
#[tokio::test]
async fn the_incident_is_a_whole_verified_diagnosis() {
    let run = load(&incident());
    let widest = run
        .exchanges
        .iter()
        .filter_map(|x| match x {
            Exchange::Model(m) => m.response.as_ref().map(|r| r.tool_calls.len()),
            Exchange::Tool(_) => None,
        })
        .max()
        .unwrap();
    assert!(widest >= 3, "the Executor makes several calls in one turn");

    let (_dir, store) = temp_store();
    let r = replay_into(&run, &store, &Arc::new(SequentialIds::default())).await;
    assert_eq!(r.divergence, None);
    let s = &r.outcome.state;
    let raw = s.round.gatekeeper_raw.as_ref().unwrap();
    let audit = raw.audit;
    assert_eq!((audit.failed, audit.unbound_claims), (0, 0), "{audit:?}");
    // Good evidence is not refused: every claim of the demo is bound by what it says, its
    // 36 salient tokens (times, numbers, services, routes, a quoted log message, the runbook
    // heading c7 quotes in single quotes) all found in its evidence.
    assert_eq!(raw.refused_claims, []);
    assert_eq!(
        raw.grounding,
        diag_core::protocol::Grounding {
            claims_bound: 7,
            claims_refused: 0,
            tokens_checked: 36,
            tokens_unbound: 0,
        }
    );
    let tools: BTreeSet<&str> = s
        .round
        .verified_evidence
        .iter()
        .map(|e| e.tool_name.as_str())
        .collect();
    assert_eq!(
        tools,
        BTreeSet::from(["query_metrics", "search_logs", "search_runbooks"])
    );
    assert_eq!(r.actual.effective_verdict.map(|v| v.as_str()), Some("PASS"));
    assert!(!r.actual.degraded);
    let answer = r.actual.answer.unwrap();
    assert!(answer.starts_with("## "), "a Markdown answer: {answer}");
    assert!(answer.contains("settlement-batch"));
    // Every salient token of the answer was checked and bound, and the Verifier's free text
    // reached it whole.
    let g = s
        .round
        .answer_grounding
        .clone()
        .expect("the answer was checked");
    assert_eq!((g.tokens_checked, g.tokens_unbound), (30, 0), "{g:?}");
    assert_eq!(s.round.dropped_items, 0);
}

/// Replays a corrupted copy of `file` and returns the replay.
async fn replay_corrupted(file: &str, corrupt: impl FnOnce(&mut Value)) -> Replayed {
    let path = repo().join("fixtures/runs").join(file);
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    corrupt(&mut doc);
    let run = RunFile::parse(&doc.to_string(), file).unwrap();
    let (_dir, store) = temp_store();
    replay_into(&run, &store, &Arc::new(SequentialIds::default())).await
}

/// Index of the first exchange `pick` accepts.
fn find(doc: &Value, pick: impl Fn(&Value) -> bool) -> usize {
    doc["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .position(pick)
        .unwrap()
}

#[tokio::test]
async fn changed_tool_arguments_are_a_divergence_at_that_tool_exchange() {
    let mut tool_index = None;
    let r = replay_corrupted("pass.json", |doc| {
        // The Executor's first turn now asks for a wider search than the recording holds.
        let turn = find(doc, |x| {
            x["agent"] == "executor"
                && x["response"]["tool_calls"]
                    .as_array()
                    .is_some_and(|calls| !calls.is_empty())
        });
        doc["exchanges"][turn]["response"]["tool_calls"][0]["arguments"]["limit"] = 50.into();
        tool_index = Some(find(doc, |x| x["kind"] == "tool"));
    })
    .await;
    let tool_index = tool_index.unwrap();
    let d = r.divergence.expect("a divergence");
    assert_eq!(d.exchange, tool_index, "{d}");
    assert!(
        d.to_string()
            .starts_with(&format!("exchange {tool_index}: ")),
        "{d}"
    );
    assert!(d.message.contains("other arguments"), "{d}");
    // The run still ends, closed: the Executor fails and the Fallback answers.
    assert_eq!(r.actual.path, ["planner", "executor", "fallback"]);
    let expected = load(&repo().join("fixtures/runs/pass.json"))
        .expected
        .unwrap();
    assert!(!compare(&expected, &r.actual).is_empty());
}

/// A technical retry sends the same bytes as the first attempt, so the request hash cannot
/// tell them apart: the replay compares each model call's round, attempt and turn too.
#[tokio::test]
async fn a_model_call_replayed_as_another_attempt_is_a_divergence() {
    let mut index = None;
    let r = replay_corrupted("verifier_retry_then_ok.json", |doc| {
        // The recording now claims the Verifier's first call was already its second attempt.
        let i = find(doc, |x| x["agent"] == "verifier");
        assert_eq!(doc["exchanges"][i]["attempt"], 1);
        doc["exchanges"][i]["attempt"] = 2.into();
        index = Some(i);
    })
    .await;
    let d = r.divergence.expect("a divergence");
    assert_eq!(d.exchange, index.unwrap(), "{d}");
    assert!(
        d.message
            .contains("recorded in round 1 attempt 2 turn 1, replayed for verifier in round 1 attempt 1 turn 1"),
        "{d}"
    );
}

#[tokio::test]
async fn a_call_the_budget_blocks_but_the_recording_ran_is_a_divergence() {
    let mut index = None;
    let r = replay_corrupted("executor_tool_budget_exhausted.json", |doc| {
        let i = find(doc, |x| x["kind"] == "tool" && x["status"] == "blocked");
        doc["exchanges"][i]["status"] = "ok".into();
        index = Some(i);
    })
    .await;
    let d = r.divergence.expect("a divergence");
    assert_eq!(d.exchange, index.unwrap(), "{d}");
    assert!(d.message.contains("blocked by the call budget"), "{d}");
}

#[tokio::test]
async fn a_recording_cut_short_is_a_divergence_at_its_end() {
    let mut len = 0;
    let r = replay_corrupted("pass.json", |doc| {
        let exchanges = doc["exchanges"].as_array_mut().unwrap();
        exchanges.pop();
        len = exchanges.len();
    })
    .await;
    let d = r.divergence.expect("a divergence");
    assert_eq!(d.exchange, len, "{d}");
    assert!(d.message.contains("recording exhausted"), "{d}");
}

#[tokio::test]
async fn the_gatekeepers_refusals_are_stored_with_their_reasons_and_shown() {
    let (_dir, store) = temp_store();
    let ids = Arc::new(SequentialIds::default());
    let run = load(&repo().join("fixtures/runs/gatekeeper_reject.json"));
    let replayed = replay_into(&run, &store, &ids).await;
    let stored = store.get_run(&replayed.outcome.run_id).unwrap().unwrap();
    let evaluation = stored.self_evaluation.expect("a self-evaluation");
    let raw: diag_core::protocol::GatekeeperRaw =
        serde_json::from_value(evaluation["verifier_evaluation"]["gatekeeper_raw"].clone())
            .expect("the raw Gatekeeper result is kept beside its normalized status");
    assert_eq!(raw.result.as_deref(), Some("fail"));
    let refused: Vec<(&str, &str, &str)> = raw
        .checked_bindings
        .iter()
        .filter(|b| !b.passed)
        .map(|b| {
            (
                b.claim_id.as_str(),
                b.source_invocation_id.as_str(),
                b.failure.as_deref().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        refused,
        [
            ("c1", "inv-1", "quote_not_found"),
            ("c2", "inv-2", "path_not_found"),
            ("c3", "inv-3", "not_a_string"),
        ]
    );
    let invocations = store.invocations(&replayed.outcome.run_id).unwrap();
    let shown = diag_report::terminal::refused_bindings(Some(&raw), &invocations);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[0], "gatekeeper refused 3 of 3 binding(s)");
    // A pointer that names nothing in the recorded output is model-written text no check
    // vouched for: it is not shown (openspec/specs/verified-evidence/spec.md).
    assert_eq!(
        lines[2],
        "  c2      inv-2   search_logs          (pointer not found)      path_not_found"
    );
    assert!(!shown.contains("/matches/5/line"), "{shown}");
    // A run whose bindings all passed shows nothing.
    let pass = load(&repo().join("fixtures/runs/pass.json"));
    let replayed = replay_into(&pass, &store, &ids).await;
    let stored = store.get_run(&replayed.outcome.run_id).unwrap().unwrap();
    let raw: diag_core::protocol::GatekeeperRaw = serde_json::from_value(
        stored.self_evaluation.unwrap()["verifier_evaluation"]["gatekeeper_raw"].clone(),
    )
    .unwrap();
    assert!(raw.checked_bindings.iter().all(|b| b.passed));
    assert_eq!(diag_report::terminal::refused_bindings(Some(&raw), &[]), "");
}

/// The grounding fixtures: what the Executor invented is refused with its code, never shown to
/// the Verifier, and never reaches the answer, while the claims bound by what they say do.
#[tokio::test]
async fn the_grounding_fixtures_refuse_what_they_invent() {
    for (file, refusal, token, invented) in [
        (
            "gatekeeper_short_quote.json",
            "failed_binding",
            None,
            &["13:55", "disk"][..],
        ),
        (
            "gatekeeper_half_bound_claim.json",
            "failed_binding",
            None,
            &["#4411", "DBA", "settlement-batch holding"][..],
        ),
        (
            "gatekeeper_unbound_token.json",
            "unbound_token",
            Some("v2.3.1"),
            &["v2.3.1", "13:58", "deploy"][..],
        ),
    ] {
        let run = load(&repo().join("fixtures/runs").join(file));
        let (_dir, store) = temp_store();
        let r = replay_into(&run, &store, &Arc::new(SequentialIds::default())).await;
        assert_eq!(r.divergence, None, "{file}");
        let raw = r.outcome.state.round.gatekeeper_raw.as_ref().unwrap();
        let refused: Vec<(&str, &str, Option<&str>)> = raw
            .refused_claims
            .iter()
            .map(|c| {
                (
                    c.claim_id.as_str(),
                    c.code.as_str(),
                    c.token.as_ref().map(|t| t.text.as_str()),
                )
            })
            .collect();
        let id = if file == "gatekeeper_short_quote.json" {
            "c1"
        } else {
            "c3"
        };
        assert_eq!(refused, [(id, refusal, token)], "{file}");
        let answer = r.actual.answer.as_deref().unwrap();
        for m in invented {
            assert!(
                !answer.contains(m),
                "{file}: {m} reached the answer:\n{answer}"
            );
        }
        // The stored self-evaluation keeps the refusals and figures for the trace.
        let stored = store.get_run(&r.outcome.run_id).unwrap().unwrap();
        let evaluation = stored.self_evaluation.expect("a self-evaluation");
        let kept = &evaluation["verifier_evaluation"]["gatekeeper_raw"];
        assert_eq!(kept["refused_claims"][0]["code"], refusal, "{file}");
        assert_eq!(kept["grounding"]["claims_refused"], 1, "{file}");
        if file != "gatekeeper_short_quote.json" {
            // The Verifier was told which claim was refused and why, in codes only.
            let verifier_input = r
                .outcome
                .state
                .round
                .verifier_input
                .as_deref()
                .expect("the Verifier ran");
            assert!(verifier_input.contains("\"refused_claims\""), "{file}");
            for m in invented {
                assert!(
                    !verifier_input.contains(m),
                    "{file}: {m} shown to the Verifier"
                );
            }
        }
    }
}
