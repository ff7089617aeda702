//! The `diag` binary end to end, offline: every test runs the real binary in a hermetic
//! environment (temporary HOME, XDG folders and database, cleared environment) against the
//! hand-written run files in `tests/fixtures/runs/`. Human output is snapshotted with insta
//! (ids, times, durations and temporary paths filtered); `--json` output is parsed and
//! validated against its schema in `docs/schema/`. Every exit code is reached for real, and
//! every bad input of SPEC §8 that reaches the command line ends with one stderr line.

use diag_testkit::read_json;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::support::cli_env;
use cli_env::{apply_filters, assert_schema, id_filters, repo_file, Out, TestEnv};
use diag_testkit::bounded;

const PASS: &str = "tests/fixtures/runs/pass.json";
const LOW_CONFID: &str = "tests/fixtures/runs/low_confid.json";
const PLANNER_PROSE: &str = "tests/fixtures/runs/planner_prose.json";
const BLANK_ANSWER: &str = "tests/fixtures/runs/blank_answer.json";

/// Snapshots exit code, stdout and stderr together, with the environment's filters.
#[track_caller]
fn snapshot(env: &TestEnv, name: &str, out: &Out) {
    let mut settings = insta::Settings::clone_current();
    for (re, to) in env.filters() {
        settings.add_filter(&re, to);
    }
    settings.bind(|| insta::assert_snapshot!(name, out.snapshot_text()));
}

/// The hint of a store that is not there (openspec/specs/command-line/spec.md, "Store errors").
const NO_STORE_HINT: &str = " (diag ask creates the store; check --db, DIAG_DB or [store] path)";

fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap() + "\n").unwrap();
}

/// The stored runs, newest first, through `diag runs --json`. Without a database file there
/// are none: `runs` then says so (DIAG_DB names the file) and creates nothing.
fn stored_runs(env: &TestEnv) -> Vec<Value> {
    if !env.db().exists() {
        let out = env.run(&["runs", "--json"]);
        out.expect(2);
        assert_eq!(
            out.one_error_line(),
            format!(
                "diag: no run store at {}{NO_STORE_HINT}",
                env.db().display()
            )
        );
        assert!(!env.db().exists());
        return Vec::new();
    }
    let out = env.run(&["runs", "--json", "--limit", "1000"]);
    out.expect(0);
    let doc = out.json();
    assert_schema("runs.v2.json", &doc);
    doc["runs"].as_array().unwrap().clone()
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string in {v}"))
}

/// Makes the database refuse to mark any run SUCCESS, as a disk that fails at that moment
/// would: the run's trace is stored, its finishing write is not.
fn refuse_success(env: &TestEnv) {
    create_store(env);
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER refuse_success BEFORE UPDATE OF status ON diagnosis_run \
         WHEN NEW.status = 'SUCCESS' BEGIN SELECT RAISE(ABORT, 'the disk refused the write'); END;",
    )
    .unwrap();
}

/// Creates the (empty) run store DIAG_DB names, as the first `ask` would.
fn create_store(env: &TestEnv) {
    drop(diag_testkit::open_sqlite(env.db()).expect("create the run store"));
}

// ---------------------------------------------------------------------------------------------
// ask, trace, runs, replay: human output and JSON.

#[test]
fn ask_with_a_fixture_prints_header_timeline_tool_calls_and_answer() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let out = env.run(&["ask", "--fixture", "pass.json"]);
    out.expect(0).quiet_stderr();
    snapshot(&env, "ask_fixture", &out);
}

#[test]
fn ask_json_follows_its_schema_for_pass_low_confidence_and_fallback_runs() {
    let env = TestEnv::new();
    let pass = env.copy_fixture(PASS, "pass.json");
    let doc = env.ask_fixture_json(&pass, &[]);
    assert_schema("ask.v2.json", &doc);
    assert_eq!(doc["schema"], "diag.ask.v2");
    assert_eq!(doc["status"], "SUCCESS");
    assert_eq!(doc["effective_verdict"], "PASS");
    assert_eq!(doc["degraded"], false);
    assert_eq!(doc["fallback_kind"], Value::Null);
    assert_eq!(doc["failure"], Value::Null);
    assert_eq!(doc["answer"], read_json(&pass)["expected"]["answer"]);
    let nodes: Vec<&str> = doc["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| str_of(e, "node"))
        .collect();
    assert_eq!(
        nodes,
        [
            "planner",
            "executor",
            "gatekeeper",
            "verified_input",
            "verifier",
            "composer"
        ]
    );
    assert_eq!(doc["evaluation"]["tool_calls"], 1);
    assert_eq!(doc["evaluation"]["terminal_path"], "composer");

    let low = env.ask_fixture_json(&env.copy_fixture(LOW_CONFID, "low.json"), &[]);
    assert_schema("ask.v2.json", &low);
    assert_eq!(low["effective_verdict"], "LOW_CONFID");
    assert_eq!(low["degraded"], false);

    let fallback = env.ask_fixture_json(&env.copy_fixture(PLANNER_PROSE, "prose.json"), &[]);
    assert_schema("ask.v2.json", &fallback);
    assert_eq!(fallback["status"], "SUCCESS");
    assert_eq!(fallback["degraded"], true);
    assert_eq!(fallback["fallback_kind"], "pre_verification");
    assert_eq!(fallback["effective_verdict"], Value::Null);
    assert_eq!(
        fallback["evaluation"]["terminal_path"],
        "fallback_pre_verification"
    );

    let blank = env.ask_fixture_json(&env.copy_fixture(BLANK_ANSWER, "blank.json"), &[]);
    assert_schema("ask.v2.json", &blank);
    assert_eq!(blank["fallback_kind"], "post_verification");
}

#[test]
fn trace_prints_the_stored_run_and_its_json_follows_the_schema() {
    let env = TestEnv::new();
    let pass = env.copy_fixture(PASS, "pass.json");
    let run_id = str_of(&env.ask_fixture_json(&pass, &[]), "run_id").to_string();

    let out = env.run(&["trace", &run_id]);
    out.expect(0).quiet_stderr();
    snapshot(&env, "trace", &out);

    let out = env.run(&["trace", &run_id, "--json"]);
    out.expect(0).quiet_stderr();
    let doc = out.json();
    assert_schema("trace.v1.json", &doc);
    assert_eq!(doc["run"]["run_id"], run_id.as_str());
    assert_eq!(doc["run"]["status"], "SUCCESS");
    assert_eq!(doc["run"]["effective_verdict"], "PASS");
    assert_eq!(doc["run"]["step_count"], 5);
    assert_eq!(doc["run"]["tool_count"], 1);
    assert_eq!(doc["events"].as_array().unwrap().len(), 6);
    assert_eq!(doc["agent_steps"].as_array().unwrap().len(), 5);
    let inv = &doc["tool_invocations"][0];
    assert_eq!(inv["invocation_id"], "inv-1");
    assert_eq!(inv["run_id"], run_id.as_str());
    assert!(str_of(&inv["output"]["matches"][0], "line").contains("upstream returned 502"));
    assert_eq!(doc["evaluation"]["claims_verified"], 1);
}

/// `diag trace RUN_ID --json`, checked against its schema.
fn trace_json(env: &TestEnv, run_id: &str) -> Value {
    let out = env.run(&["trace", run_id, "--json"]);
    out.expect(0).quiet_stderr();
    let doc = out.json();
    assert_schema("trace.v1.json", &doc);
    doc
}

/// A refused binding's pointer that names nothing is model-written text: `ask` and the reports
/// show `(pointer not found)`, `trace` shows it quoted and marked as model-written.
#[test]
fn a_model_written_pointer_that_names_nothing_is_not_shown_beside_the_answer() {
    let env = TestEnv::new();
    let forged = "/db-1 disk failed at 13:55, replace it now";
    let text = std::fs::read_to_string(repo_file("fixtures/runs/gatekeeper_reject.json"))
        .unwrap()
        .replace("/matches/5/line", forged);
    let file = env.path("forged.json");
    std::fs::write(&file, text).unwrap();
    let report = env.path("forged.html");
    let out = env.run(&[
        "ask",
        "--fixture",
        file.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    out.expect(0).quiet_stderr();
    assert!(!out.stdout.contains("disk failed"), "{}", out.stdout);
    assert!(out.stdout.contains("(pointer not found)"), "{}", out.stdout);
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(
        !html.contains("disk failed"),
        "the report shows the forged pointer"
    );
    assert!(html.contains("(pointer not found)"));
    let run_id = str_of(&env.ask_fixture_json(&file, &[]), "run_id").to_string();
    let md = env.run(&["report", &run_id, "--format", "md"]);
    md.expect(0);
    assert!(!md.stdout.contains("disk failed"), "{}", md.stdout);
    let trace = env.run(&["trace", &run_id]);
    trace.expect(0);
    assert!(
        trace
            .stdout
            .contains(&format!("(pointer not found: model-written {forged:?})")),
        "{}",
        trace.stdout
    );
}

#[test]
fn ask_and_trace_show_which_bindings_the_gatekeeper_refused_and_why() {
    let env = TestEnv::new();
    let reject = env.copy_fixture("fixtures/runs/gatekeeper_reject.json", "reject.json");
    let out = env.run(&["ask", "--fixture", reject.to_str().unwrap()]);
    out.expect(0).quiet_stderr();
    let refused = "gatekeeper refused 3 of 3 binding(s)\n\
        \x20 c1      inv-1   search_logs          /matches/0/line          quote_not_found\n\
        \x20 c2      inv-2   search_logs          (pointer not found)      path_not_found\n\
        \x20 c3      inv-3   search_runbooks      /hits                    not_a_string\n";
    assert!(out.stdout.contains(refused), "{}", out.stdout);
    let run_id = str_of(&env.ask_fixture_json(&reject, &[]), "run_id").to_string();
    let trace = env.run(&["trace", &run_id]);
    trace.expect(0).quiet_stderr();
    // The trace shows every claim with its refusal code and each binding with its failure.
    let grounding =
        "grounding  claims 0 bound, 3 refused  ·  claim tokens 0 checked, 0 unbound  ·  \
        answer tokens 0 checked, 0 unbound  ·  verifier items dropped 0\n\
        \x20 c1       refused (failed_binding)\n\
        \x20          inv-1 search_logs /matches/0/line  quote_not_found\n\
        \x20 c2       refused (failed_binding)\n\
        \x20          inv-2 search_logs (pointer not found: model-written \"/matches/5/line\")  \
        path_not_found\n\
        \x20 c3       refused (failed_binding)\n\
        \x20          inv-3 search_runbooks /hits  not_a_string\n";
    assert!(trace.stdout.contains(grounding), "{}", trace.stdout);
    // The block comes between the tool calls and the token line.
    let (tools, block, tokens) = (
        trace.stdout.find("tool calls\n").unwrap(),
        trace.stdout.find("grounding  claims").unwrap(),
        trace.stdout.find("tokens ").unwrap(),
    );
    assert!(tools < block && block < tokens, "{}", trace.stdout);
    let doc = trace_json(&env, &run_id);
    let claims = doc["grounding"]["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 3);
    assert_eq!(claims[0]["status"], "refused");
    assert_eq!(claims[0]["code"], "failed_binding");
    assert_eq!(claims[0]["bindings"][0]["failure"], "quote_not_found");
    assert_eq!(doc["grounding"]["figures"]["claims_refused"], 3);

    // A run whose bindings all passed shows each claim bound, its quote marked in the line.
    let pass = env.copy_fixture(PASS, "pass.json");
    let run_id = str_of(&env.ask_fixture_json(&pass, &[]), "run_id").to_string();
    let trace = env.run(&["trace", &run_id]);
    trace.expect(0).quiet_stderr();
    assert!(!trace.stdout.contains("refused ("), "{}", trace.stdout);
    assert!(
        trace
            .stdout
            .contains("[[upstream returned 502 from payment-service]]"),
        "{}",
        trace.stdout
    );
    let doc = trace_json(&env, &run_id);
    let figures = &doc["grounding"]["figures"];
    assert_eq!(figures["claims_refused"], 0);
    assert!(figures["claims_bound"].as_u64().unwrap() > 0, "{figures}");
    assert!(
        figures["answer_tokens_checked"].as_u64().unwrap() > 0,
        "{figures}"
    );
    assert_eq!(doc["evaluation"]["grounding"], *figures);
}

#[test]
fn ask_and_trace_name_a_claim_refused_for_an_unobserved_token() {
    let env = TestEnv::new();
    let file = env.copy_fixture(
        "fixtures/runs/gatekeeper_unbound_token.json",
        "unbound.json",
    );
    let out = env.run(&["ask", "--fixture", file.to_str().unwrap()]);
    out.expect(0).quiet_stderr();
    assert!(
        out.stdout.contains(
            "gatekeeper refused 1 claim(s) for what they say\n  c3      unbound_token identifier `v2.3.1`\n"
        ),
        "{}",
        out.stdout
    );
    let run_id = str_of(&env.ask_fixture_json(&file, &[]), "run_id").to_string();
    let trace = env.run(&["trace", &run_id]);
    trace.expect(0).quiet_stderr();
    assert!(
        trace
            .stdout
            .contains("  c3       refused (unbound_token: identifier `v2.3.1`)\n"),
        "{}",
        trace.stdout
    );
    let doc = trace_json(&env, &run_id);
    let c3 = doc["grounding"]["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["claim_id"] == "c3")
        .unwrap();
    assert_eq!(c3["code"], "unbound_token");
    assert_eq!(c3["token"], "v2.3.1");
    assert_eq!(c3["token_kind"], "identifier");
    assert_eq!(
        c3["text"],
        Value::Null,
        "a refused claim's text is not shown"
    );
    // `v2.3.1` and `13:58`: the claim names a deploy and a time no evidence shows.
    assert_eq!(doc["grounding"]["figures"]["claim_tokens_unbound"], 2);
    assert!(!doc["run"]["answer"].as_str().unwrap().contains("v2.3.1"));
}

#[test]
fn runs_lists_newest_first_and_filters_by_session_status_and_limit() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    env.copy_fixture(LOW_CONFID, "low.json");
    env.copy_fixture(PLANNER_PROSE, "prose.json");
    for (file, session) in [
        ("pass.json", "incident-1"),
        ("low.json", "incident-1"),
        ("prose.json", "incident-2"),
    ] {
        env.run(&["ask", "--fixture", file, "--session", session])
            .expect(0);
    }
    refuse_success(&env);
    env.run(&["ask", "--fixture", "pass.json", "--session", "incident-2"])
        .expect(3);

    let out = env.run(&["runs"]);
    out.expect(0).quiet_stderr();
    snapshot(&env, "runs", &out);

    let all = stored_runs(&env);
    let statuses: Vec<&str> = all.iter().map(|r| str_of(r, "status")).collect();
    assert_eq!(statuses, ["FAILED", "SUCCESS", "SUCCESS", "SUCCESS"]);

    let session = |args: &[&str]| -> Vec<Value> {
        let mut a = vec!["runs", "--json"];
        a.extend_from_slice(args);
        let out = env.run(&a);
        out.expect(0).quiet_stderr();
        let doc = out.json();
        assert_schema("runs.v2.json", &doc);
        doc["runs"].as_array().unwrap().clone()
    };
    let one = session(&["--session", "incident-1"]);
    assert_eq!(one.len(), 2);
    assert!(one.iter().all(|r| r["session_id"] == "incident-1"));
    // Newest first: the low-confidence run was asked after the PASS one.
    assert_eq!(one[0]["effective_verdict"], "LOW_CONFID");
    assert_eq!(one[1]["effective_verdict"], "PASS");

    let failed = session(&["--status", "failed"]);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["session_id"], "incident-2");
    assert_eq!(session(&["--status", "SUCCESS"]).len(), 3);
    assert_eq!(session(&["--status", "running"]).len(), 0);
    assert_eq!(
        session(&["--session", "incident-2", "--status", "success"]).len(),
        1
    );

    let newest = session(&["--limit", "1"]);
    assert_eq!(newest.len(), 1);
    assert_eq!(newest[0]["run_id"], all[0]["run_id"]);
    assert!(session(&["--session", "no-such-session"]).is_empty());

    let out = env.run(&["runs", "--status", "degraded"]);
    out.expect(2);
    assert!(out.one_error_line().contains("unknown status `degraded`"));
}

#[test]
fn replay_prints_a_summary_table_and_its_json_follows_the_schema() {
    let env = TestEnv::new();
    for (from, to) in [
        (PASS, "runs/pass.json"),
        (LOW_CONFID, "runs/low_confid.json"),
        (PLANNER_PROSE, "runs/planner_prose.json"),
        (BLANK_ANSWER, "runs/blank_answer.json"),
    ] {
        env.copy_fixture(from, to);
    }
    let out = env.run(&["replay", "runs"]);
    out.expect(0).quiet_stderr();
    snapshot(&env, "replay", &out);

    let out = env.run(&["replay", "runs", "--json"]);
    out.expect(0).quiet_stderr();
    let doc = out.json();
    assert_schema("replay.v1.json", &doc);
    assert_eq!(
        (doc["passed"].as_u64(), doc["failed"].as_u64()),
        (Some(4), Some(0))
    );
    for f in doc["files"].as_array().unwrap() {
        assert_eq!(f["result"], "ok", "{f}");
        assert_eq!(f["status"], "SUCCESS");
        assert!(str_of(f, "run_id").starts_with("run-"));
    }
}

#[test]
fn every_schema_is_valid_and_every_committed_run_file_follows_diag_run_v2() {
    for name in [
        "ask.v1.json",
        "ask.v2.json",
        "trace.v1.json",
        "runs.v1.json",
        "runs.v2.json",
        "eval.v1.json",
        "diag_eval_v1.json",
        "replay.v1.json",
        "diag_run_v1.json",
        "diag_run_v2.json",
        "investigate.v1.json",
        "serve_status.v1.json",
    ] {
        let schema = read_json(&repo_file("docs/schema").join(name));
        jsonschema::meta::validate(&schema)
            .unwrap_or_else(|e| panic!("{name} is not a valid JSON Schema: {e}"));
    }
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "json") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo_file("fixtures"), &mut files);
    walk(&repo_file("tests/fixtures"), &mut files);
    let mut run_files = 0;
    for f in files {
        let doc = read_json(&f);
        let is_run_file = doc["format"]
            .as_str()
            .is_some_and(|s| s.starts_with("diag_run_"));
        if is_run_file {
            run_files += 1;
            assert_schema("diag_run_v2.json", &doc);
        }
    }
    assert!(run_files >= 4, "found {run_files} run files");

    // The schema is not looser than the parser on what the parser refuses.
    let mut both = read_json(&repo_file(PASS));
    both["exchanges"][0]["error"] = json!({"class": "permanent", "message": "x"});
    let schema = read_json(&repo_file("docs/schema/diag_run_v2.json"));
    assert!(!jsonschema::is_valid(&schema, &both));
    let mut v9 = read_json(&repo_file(PASS));
    v9["format"] = json!("diag_run_v9");
    assert!(!jsonschema::is_valid(&schema, &v9));
}

// ---------------------------------------------------------------------------------------------
// Round trips: ask → trace → export → replay; replay --update; folders.

#[test]
fn ask_then_trace_export_and_replay_round_trip() {
    let env = TestEnv::new();
    let pass = env.copy_fixture(PASS, "pass.json");
    let asked = env.ask_fixture_json(&pass, &[]);
    let run_id = str_of(&asked, "run_id").to_string();
    let trace = env.run(&["trace", &run_id]);
    trace.expect(0).quiet_stderr();

    env.run(&["export", &run_id, "-o", "out.json"])
        .expect(0)
        .wrote("out.json");
    let exported = read_json(&env.path("out.json"));
    assert_schema("diag_run_v2.json", &exported);
    assert_eq!(exported["run_id"], run_id.as_str());
    assert_eq!(exported["expected"], read_json(&pass)["expected"]);
    let model_exchanges: Vec<&Value> = exported["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["kind"] == "model")
        .collect();
    assert_eq!(model_exchanges.len(), 5);
    assert!(model_exchanges
        .iter()
        .all(|x| x["request_sha256"].as_str().is_some_and(|h| h.len() == 64)));

    // Without -o the same document goes to stdout.
    let stdout = env.run(&["export", &run_id]);
    stdout.expect(0).quiet_stderr();
    assert_eq!(
        stdout.stdout,
        std::fs::read_to_string(env.path("out.json")).unwrap()
    );

    let replayed = env.run(&["replay", "out.json", "--json"]);
    replayed.expect(0).quiet_stderr();
    let doc = replayed.json();
    assert_eq!(doc["files"][0]["result"], "ok", "{doc}");
    let replay_run = str_of(&doc["files"][0], "run_id").to_string();
    assert_ne!(replay_run, run_id);

    // The replayed run's stored trace prints exactly like the original, ids aside.
    let again = env.run(&["trace", &replay_run]);
    again.expect(0);
    let filters = id_filters();
    assert_eq!(
        apply_filters(&filters, &again.stdout),
        apply_filters(&filters, &trace.stdout)
    );
}

/// Every run file of the fixture library (`fixtures/runs/` and the incident), through the
/// binary: replayed, printed by `trace` (text and schema-valid JSON), exported, and the export
/// replayed to the same result and the same printed trace.
#[test]
fn every_library_fixture_round_trips_through_trace_and_export() {
    let env = TestEnv::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo_file("fixtures/runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files.push(repo_file("fixtures/incident-checkout-502.json"));
    assert!(files.len() >= 26, "{} files", files.len());
    let filters = id_filters();
    for (i, file) in files.iter().enumerate() {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let original = read_json(file);
        let copy = env.path(&format!("{i}-{name}"));
        std::fs::copy(file, &copy).unwrap();
        let copy = copy.display().to_string();

        let out = env.run(&["replay", &copy, "--json"]);
        out.expect(0).quiet_stderr();
        let doc = out.json();
        assert_eq!(doc["files"][0]["result"], "ok", "{name}: {doc}");
        let run_id = str_of(&doc["files"][0], "run_id").to_string();

        let text = env.run(&["trace", &run_id]);
        text.expect(0).quiet_stderr();
        let json_trace = env.run(&["trace", &run_id, "--json"]);
        json_trace.expect(0).quiet_stderr();
        let json_trace = json_trace.json();
        assert_schema("trace.v1.json", &json_trace);
        let nodes: Vec<&str> = json_trace["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["node"].as_str().unwrap())
            .collect();
        let expected_path: Vec<&str> = original["expected"]["path"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        assert_eq!(
            nodes, expected_path,
            "{name}: the stored events are the path"
        );

        let exported_path = env.path(&format!("{i}-exported.json"));
        let exported_arg = exported_path.display().to_string();
        env.run(&["export", &run_id, "-o", &exported_arg])
            .expect(0)
            .wrote(&exported_arg);
        let exported = read_json(&exported_path);
        assert_schema("diag_run_v2.json", &exported);
        assert_eq!(exported["run_id"], run_id.as_str(), "{name}");
        // An export always carries each model request's sha256 and max_tokens; hand-written
        // library files may leave them out (the tape then does not check the request).
        let mut exchanges = exported["exchanges"].as_array().unwrap().clone();
        for (x, o) in exchanges
            .iter_mut()
            .zip(original["exchanges"].as_array().unwrap())
        {
            if x["kind"] == "model" {
                let sha = x["request_sha256"].as_str().unwrap_or_default();
                assert_eq!(sha.len(), 64, "{name}: {x}");
                if o.get("request_sha256").is_none() {
                    x.as_object_mut().unwrap().remove("request_sha256");
                }
                // And the max_tokens the request asked for (the replay's own limits here).
                assert!(x["max_tokens"].as_u64().is_some(), "{name}: {x}");
                if o.get("max_tokens").is_none() {
                    x.as_object_mut().unwrap().remove("max_tokens");
                }
                // And the version of the agent's prompt the request was built with: the
                // file's own, or for a file that records none, the Composer's version 2
                // (`composer_answer_v1`), so the export replays as the file did.
                let version = x["prompt_version"].as_u64();
                assert!(version.is_some(), "{name}: {x}");
                match o.get("prompt_version") {
                    Some(v) => assert_eq!(version, v.as_u64(), "{name}: {x}"),
                    None => {
                        if x["agent"] == "composer" {
                            assert_eq!(version, Some(2), "{name}: {x}");
                        }
                        x.as_object_mut().unwrap().remove("prompt_version");
                    }
                }
            }
        }
        assert_eq!(
            Value::Array(exchanges),
            original["exchanges"],
            "{name}: the export changed the exchanges"
        );
        for field in ["question", "session_id", "started_at", "tools", "expected"] {
            assert_eq!(
                exported[field], original[field],
                "{name}: the export changed `{field}`"
            );
        }

        let out = env.run(&["replay", &exported_arg, "--json"]);
        out.expect(0).quiet_stderr();
        let doc = out.json();
        assert_eq!(doc["files"][0]["result"], "ok", "{name}: {doc}");
        let again = str_of(&doc["files"][0], "run_id").to_string();
        let again = env.run(&["trace", &again]);
        again.expect(0).quiet_stderr();
        assert_eq!(
            apply_filters(&filters, &again.stdout),
            apply_filters(&filters, &text.stdout),
            "{name}: the export's replay prints another trace"
        );
    }
}

#[test]
fn a_difference_far_into_the_answer_or_in_a_line_break_is_shown() {
    let env = TestEnv::new();
    // The library's pass run: its answer is long and has several lines.
    let original = read_json(&repo_file("fixtures/runs/pass.json"));
    let answer = str_of(&original["expected"], "answer").to_string();
    assert!(answer.chars().count() > 200 && answer.contains('\n'));
    // The recorded answer with its last character changed, and with its first line break
    // turned into a space: both used to print as two identical lines.
    let last = answer.chars().count() - 1;
    let changed: String = answer
        .chars()
        .enumerate()
        .map(|(i, c)| if i == last { '#' } else { c })
        .collect();
    let unbroken = answer.replacen('\n', " ", 1);
    for (name, wrong) in [("late.json", changed), ("unbroken.json", unbroken)] {
        let mut file = original.clone();
        file["expected"]["answer"] = json!(wrong);
        write_json(&env.path(name), &file);
        let out = env.run(&["replay", name]);
        out.expect(5);
        let lines: Vec<&str> = out.stdout.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("    answer (first difference at character "))
            .unwrap_or_else(|| panic!("{name}: {}", out.stdout));
        let expected = lines[at + 1]
            .trim_start()
            .strip_prefix("- expected: ")
            .unwrap();
        let actual = lines[at + 2]
            .trim_start()
            .strip_prefix("+ actual:   ")
            .unwrap();
        assert_ne!(expected, actual, "{name}: {}", out.stdout);
    }
}

#[test]
fn replay_of_a_wrong_expected_exits_5_and_update_rewrites_it() {
    let env = TestEnv::new();
    let original = read_json(&repo_file(PASS));
    let mut wrong = original.clone();
    wrong["expected"]["answer"] = json!("payment-service is fine.");
    wrong["expected"]["effective_verdict"] = json!("LOW_CONFID");
    let file = env.path("wrong.json");
    write_json(&file, &wrong);

    let out = env.run(&["replay", "wrong.json"]);
    out.expect(5);
    assert_eq!(
        out.one_error_line(),
        "diag: 1 of 1 run file(s) did not reproduce"
    );
    snapshot(&env, "replay_mismatch", &out);

    let doc = env.run(&["replay", "wrong.json", "--json"]);
    doc.expect(5);
    let doc = doc.json();
    assert_schema("replay.v1.json", &doc);
    let fields: Vec<&str> = doc["files"][0]["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| str_of(m, "field"))
        .collect();
    assert_eq!(fields, ["effective_verdict", "answer"]);

    let out = env.run(&["replay", "--update", "wrong.json"]);
    out.expect(0).quiet_stderr();
    assert!(out.stdout.contains("updated"), "{}", out.stdout);
    let rewritten = read_json(&file);
    assert_eq!(rewritten["expected"], original["expected"]);
    assert_eq!(rewritten["exchanges"], original["exchanges"]);
    assert_eq!(rewritten["tools"], original["tools"]);
    assert_schema("diag_run_v2.json", &rewritten);

    env.run(&["replay", "wrong.json"]).expect(0).quiet_stderr();
    let out = env.run(&["replay", "--update", "wrong.json", "--json"]);
    out.expect(0);
    assert_eq!(out.json()["files"][0]["result"], "ok");
}

#[test]
fn a_tool_call_with_other_arguments_diverges_with_exit_5() {
    let env = TestEnv::new();
    let mut run = read_json(&repo_file(PASS));
    let tool = run["exchanges"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|x| x["kind"] == "tool")
        .unwrap();
    tool["arguments"]["query"] = json!("HTTP 503");
    write_json(&env.path("diverge.json"), &run);

    let out = env.run(&["replay", "diverge.json"]);
    out.expect(5);
    out.one_error_line();
    assert!(out.stdout.contains("DIVERGED"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("diverged at exchange 2: tool search_logs called with other arguments"),
        "{}",
        out.stdout
    );

    let doc = env.run(&["replay", "diverge.json", "--json"]);
    doc.expect(5);
    let doc = doc.json();
    assert_schema("replay.v1.json", &doc);
    assert_eq!(doc["files"][0]["result"], "diverged");
    assert!(str_of(&doc["files"][0], "divergence").starts_with("exchange 2: "));

    // `ask --fixture` reports the same divergence, in one line.
    let out = env.run(&["ask", "--fixture", "diverge.json"]);
    out.expect(5);
    let line = out.one_error_line();
    assert!(
        line.starts_with("diag: the run left its recording at exchange 2: tool search_logs"),
        "{line}"
    );
}

#[test]
fn a_model_call_in_another_attempt_diverges_with_exit_5_in_replay_and_ask() {
    let env = TestEnv::new();
    let mut run = read_json(&repo_file(PASS));
    let (i, composer) = run["exchanges"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .enumerate()
        .find(|(_, x)| x["agent"] == "composer")
        .unwrap();
    composer["turn"] = json!(2);
    write_json(&env.path("shifted.json"), &run);

    let out = env.run(&["replay", "shifted.json", "--json"]);
    out.expect(5);
    let doc = out.json();
    assert_eq!(doc["files"][0]["result"], "diverged", "{doc}");
    let divergence = str_of(&doc["files"][0], "divergence");
    assert!(
        divergence.starts_with(&format!(
            "exchange {i}: model call for composer recorded in round 1 attempt 1 turn 2"
        )),
        "{divergence}"
    );

    let out = env.run(&["ask", "--fixture", "shifted.json"]);
    out.expect(5);
    let line = out.one_error_line();
    assert!(
        line.starts_with(&format!(
            "diag: the run left its recording at exchange {i}: model call for composer"
        )),
        "{line}"
    );
}

#[test]
fn replay_of_a_folder_recurses_in_sorted_order_and_skips_other_json() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "suite/b/pass.json");
    env.copy_fixture(LOW_CONFID, "suite/a/deeper/low.json");
    env.copy_fixture(PLANNER_PROSE, "suite/prose.json");
    // JSON that is not a run file (a model-server fixture) and a non-JSON file.
    env.copy_fixture("tests/fixtures/aimock/graph.json", "suite/b/aimock.json");
    std::fs::write(env.path("suite/notes.txt"), "not a run file").unwrap();

    let out = env.run(&["replay", "suite", "--json"]);
    out.expect(0).quiet_stderr();
    let doc = out.json();
    assert_schema("replay.v1.json", &doc);
    let files: Vec<&str> = doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| str_of(f, "file"))
        .collect();
    assert_eq!(
        files,
        [
            "suite/a/deeper/low.json",
            "suite/b/pass.json",
            "suite/prose.json"
        ]
    );
    assert_eq!(doc["passed"], 3);

    // A truncated run file in the folder is reported, not skipped.
    let text = std::fs::read_to_string(repo_file(PASS)).unwrap();
    std::fs::write(env.path("suite/b/truncated.json"), &text[..text.len() / 3]).unwrap();
    let out = env.run(&["replay", "suite", "--json"]);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: 1 run file(s) could not be replayed"
    );
    let doc = out.json();
    assert_eq!(
        (doc["passed"].as_u64(), doc["failed"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(doc["files"][2]["file"], "suite/b/truncated.json");
    assert_eq!(doc["files"][2]["result"], "error");
    std::fs::remove_file(env.path("suite/b/truncated.json")).unwrap();

    // A folder and a file together; an empty folder alone is an input error.
    let out = env.run(&["replay", "suite/a", "suite/b/pass.json"]);
    out.expect(0);
    assert!(
        out.stdout.ends_with("2 passed, 0 failed\n"),
        "{}",
        out.stdout
    );
    std::fs::create_dir_all(env.path("empty")).unwrap();
    let out = env.run(&["replay", "empty"]);
    out.expect(2);
    assert_eq!(out.one_error_line(), "diag: no run files found");
}

// ---------------------------------------------------------------------------------------------
// Store errors: an exit code and a hint per kind.

/// A store error's kind picks the exit code (6: trying again may work; 2: the user's store)
/// and the hint (openspec/specs/command-line/spec.md, "Store errors"); nothing is changed.
#[test]
fn store_errors_exit_by_kind_with_their_hint() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");

    // Corrupt: a damaged database (SQLite's header, then text) is left as it was.
    let corrupt = env.path("corrupt.db");
    let garbage = format!(
        "SQLite format 3\0{}",
        "not a database, just text\n".repeat(300)
    );
    std::fs::write(&corrupt, &garbage).unwrap();
    let out = env.run(&["--db", corrupt.to_str().unwrap(), "runs"]);
    out.expect(2);
    let line = out.one_error_line();
    assert!(
        line.starts_with("diag: ")
            && line.contains("is corrupt")
            && line.ends_with(
                "(copy the runs that still read with diag store copy, or start a new store \
                 with --db)"
            ),
        "{line}"
    );
    assert_eq!(std::fs::read_to_string(&corrupt).unwrap(), garbage);

    // Busy: another writer holds the lock past the busy timeout; no run is stored.
    create_store(&env);
    let holder = rusqlite::Connection::open(env.db()).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let out = env.run(&["ask", "--fixture", "pass.json"]);
    out.expect(6);
    let line = out.one_error_line();
    assert!(
        line.starts_with("diag: ")
            && line.contains("locked by another writer")
            && line.ends_with("(another diag holds the store's write lock: try again)"),
        "{line}"
    );
    holder.execute_batch("ROLLBACK").unwrap();
    drop(holder);
    assert_eq!(stored_runs(&env), Vec::<Value>::new());
    // Tried again once the lock is gone, the same command works.
    env.run(&["ask", "--fixture", "pass.json"]).expect(0);
    assert_eq!(stored_runs(&env).len(), 1);

    // Unreachable: nothing listens at the PostgreSQL URL's port.
    let url = format!(
        "postgres://diag@127.0.0.1:{}/diag",
        diag_testkit::free_port()
    );
    let out = env.run(&["--db", &url, "runs"]);
    out.expect(6);
    let line = out.one_error_line();
    assert!(
        line.starts_with("diag: cannot reach the PostgreSQL run store")
            && line.ends_with("(check that the server is running and the URL's host and port)"),
        "{line}"
    );
}

// ---------------------------------------------------------------------------------------------
// Exit codes 3 and 4.

#[test]
fn a_run_whose_result_cannot_be_stored_ends_failed_with_exit_3() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    refuse_success(&env);

    let out = env.run(&["ask", "--fixture", "pass.json"]);
    out.expect(3);
    let line = out.one_error_line();
    assert!(
        line.contains("FAILED: persistence: the result could not be stored")
            && line.contains("the disk refused the write"),
        "{line}"
    );
    assert!(out.stdout.contains("status   FAILED"), "{}", out.stdout);

    let out = env.run(&["ask", "--fixture", "pass.json", "--json"]);
    out.expect(3);
    out.one_error_line();
    let doc = out.json();
    assert_schema("ask.v2.json", &doc);
    assert_eq!(doc["status"], "FAILED");
    assert_eq!(doc["answer"], Value::Null);
    assert_eq!(doc["evaluation"], Value::Null);
    assert!(str_of(&doc, "failure").starts_with("persistence: "));

    // The stored run says the same, with the partial trace that really was recorded.
    let run_id = str_of(&doc, "run_id");
    let trace = env.run(&["trace", run_id, "--json"]);
    trace.expect(0);
    let trace = trace.json();
    assert_schema("trace.v1.json", &trace);
    assert_eq!(trace["run"]["status"], "FAILED");
    assert_eq!(trace["run"]["answer"], Value::Null);
    assert_eq!(trace["events"].as_array().unwrap().len(), 6);
    assert_eq!(trace["evaluation"], Value::Null);
}

#[test]
fn strict_exits_4_for_low_confidence_and_degraded_runs_only() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    env.copy_fixture(LOW_CONFID, "low.json");
    env.copy_fixture(PLANNER_PROSE, "prose.json");

    env.run(&["ask", "--fixture", "pass.json", "--strict"])
        .expect(0)
        .quiet_stderr();
    env.run(&["ask", "--fixture", "low.json"])
        .expect(0)
        .quiet_stderr();
    env.run(&["ask", "--fixture", "prose.json"])
        .expect(0)
        .quiet_stderr();

    let out = env.run(&["ask", "--fixture", "low.json", "--strict"]);
    out.expect(4);
    let line = out.one_error_line();
    assert!(
        line.starts_with("diag: --strict: run run-")
            && line.ends_with(" is LOW_CONFID rather than PASS"),
        "{line}"
    );
    assert!(out.stdout.contains("verdict  LOW_CONFID"), "{}", out.stdout);

    let out = env.run(&["ask", "--fixture", "prose.json", "--strict", "--json"]);
    out.expect(4);
    assert!(out
        .one_error_line()
        .ends_with(" is degraded (a Fallback answered)"));
    let doc = out.json();
    assert_schema("ask.v2.json", &doc);
    assert_eq!(doc["degraded"], true);
}

// ---------------------------------------------------------------------------------------------
// Bad input (SPEC §8): one line on stderr, exit 2, nothing stored.

/// Runs `args`, expects exit 2 and one stderr line containing `needle`.
#[track_caller]
fn refused(env: &TestEnv, args: &[&str], needle: &str) -> Out {
    let out = env.run(args);
    out.expect(2);
    let line = out.one_error_line();
    assert!(line.contains(needle), "`{line}` should contain `{needle}`");
    out
}

#[test]
fn bad_questions_and_run_files_are_refused_in_one_line() {
    let env = TestEnv::new();
    let pass_text = std::fs::read_to_string(repo_file(PASS)).unwrap();
    env.copy_fixture(PASS, "pass.json");
    std::fs::write(
        env.path("truncated.json"),
        &pass_text[..pass_text.len() / 2],
    )
    .unwrap();
    std::fs::write(
        env.path("malformed.json"),
        "{\"format\": \"diag_run_v1\", \"question\": }",
    )
    .unwrap();
    std::fs::write(
        env.path("v9.json"),
        pass_text.replace("\"diag_run_v2\"", "\"diag_run_v9\""),
    )
    .unwrap();
    std::fs::write(env.path("no_format.json"), "{\"question\": \"q\"}").unwrap();
    let mut no_question = read_json(&repo_file(PASS));
    no_question["question"] = json!("  ");
    write_json(&env.path("no_question.json"), &no_question);
    // Values the schema (docs/schema/diag_run_v2.json) forbids, named by their path.
    let mut degraded = read_json(&repo_file(PASS));
    degraded["expected"]["status"] = json!("DEGRADED");
    write_json(&env.path("degraded.json"), &degraded);
    let mut wizard = read_json(&repo_file(PASS));
    wizard["exchanges"][0]["agent"] = json!("wizard");
    write_json(&env.path("wizard.json"), &wizard);
    let mut yesterday = read_json(&repo_file(PASS));
    yesterday["started_at"] = json!("yesterday");
    write_json(&env.path("yesterday.json"), &yesterday);
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    assert!(std::str::from_utf8(&garbage).is_err());
    std::fs::write(env.path("garbage.json"), &garbage).unwrap();
    std::fs::write(env.path("nul.json"), b"\0\0\0\x01{}").unwrap();

    refused(&env, &["ask", ""], "the question is empty");
    refused(&env, &["ask", " \t\n "], "the question is empty");
    refused(
        &env,
        &["ask", "--fixture", "pass.json", "   "],
        "the question is empty",
    );
    refused(
        &env,
        &["ask", "--fixture", "pass.json", "--session", ""],
        "--session \"\": a session id must be non-blank printable text",
    );
    refused(
        &env,
        &["ask", "--fixture", "pass.json", "--session", "a\u{1b}[2Jb"],
        "a session id must be non-blank printable text",
    );
    let cases = [
        (
            "truncated.json",
            "truncated.json: not valid JSON (EOF while parsing",
        ),
        ("malformed.json", "malformed.json: not valid JSON"),
        (
            "v9.json",
            "v9.json: unknown run file format `diag_run_v9` (this diag reads `diag_run_v2` and `diag_run_v1`)",
        ),
        ("no_format.json", "no_format.json: missing field `format`"),
        ("no_question.json", "no_question.json: question: empty"),
        (
            "degraded.json",
            "degraded.json: expected.status: unknown variant `DEGRADED`, expected one of `SUCCESS`, `FAILED`",
        ),
        (
            "wizard.json",
            "wizard.json: exchanges[0].agent: unknown variant `wizard`, expected one of `planner`, `executor`, `verifier`, `composer`",
        ),
        (
            "yesterday.json",
            "yesterday.json: started_at: not an RFC 3339 date-time (",
        ),
        (
            "garbage.json",
            "garbage.json: not a run file (not UTF-8 text)",
        ),
        ("nul.json", "nul.json: not valid JSON"),
        ("missing.json", "missing.json: cannot read"),
    ];
    for (file, needle) in cases {
        let out = refused(&env, &["ask", "--fixture", file], needle);
        assert!(out.stdout.is_empty(), "{file}: {}", out.stdout);
        // replay shows the same reason in its table and fails as an input error.
        if file != "missing.json" {
            let out = env.run(&["replay", file]);
            out.expect(2);
            assert_eq!(
                out.one_error_line(),
                "diag: 1 run file(s) could not be replayed"
            );
            assert!(out.stdout.contains(needle), "{}", out.stdout);
        }
    }
    refused(
        &env,
        &["replay", "missing.json"],
        "missing.json: no such file or folder",
    );
    // Nothing was stored by any of them.
    assert!(stored_runs(&env).is_empty());
}

/// Editors on Windows start UTF-8 files with a byte order mark: such a run file loads, in a
/// folder too, and replays like the same file without it.
#[test]
fn a_run_file_starting_with_a_byte_order_mark_replays() {
    let env = TestEnv::new();
    let text = std::fs::read_to_string(repo_file(PASS)).unwrap();
    std::fs::create_dir_all(env.path("bom")).unwrap();
    std::fs::write(env.path("bom/pass.json"), format!("\u{feff}{text}")).unwrap();
    let out = env.run(&["replay", "bom/pass.json", "--json"]);
    out.expect(0).quiet_stderr();
    assert_eq!(out.json()["passed"], 1);
    let out = env.run(&["replay", "bom", "--json"]);
    out.expect(0).quiet_stderr();
    assert_eq!(out.json()["files"].as_array().unwrap().len(), 1);
    let doc = env.ask_fixture_json(&env.path("bom/pass.json"), &[]);
    assert_eq!(doc["status"], "SUCCESS");
}

#[test]
fn unknown_run_ids_are_refused_in_one_line() {
    let env = TestEnv::new();
    create_store(&env);
    for cmd in ["trace", "export"] {
        let out = refused(
            &env,
            &[cmd, "run-0123456789abcdef"],
            "unknown run `run-0123456789abcdef` (diag runs lists the stored runs)",
        );
        assert!(out.stdout.is_empty());
    }
    refused(
        &env,
        &["trace", "run-\u{1b}[2Jx", "--json"],
        "unknown run `run- [2Jx`",
    );
}

#[test]
fn bad_configurations_are_refused_in_one_line_naming_file_and_key() {
    let mut env = TestEnv::new();
    let write = |name: &str, text: &str| std::fs::write(env.path(name), text).unwrap();
    write(
        "syntax.toml",
        "[models.a]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodle = \"m\"\n",
    );
    write("header.toml", "[models\n");
    write(
        "semantic.toml",
        "[models.a]\nbase_url = \"ftp://x\"\nmodel = \"m\"\n",
    );
    write("agents.toml", "[agents]\nverifier = \"ghost\"\n");
    write(
        "key.toml",
        "[models.a]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n\
         api_key_env = \"DIAG_TEST_API_KEY\"\n",
    );
    write("nomodel.toml", "[tools.search_logs]\npaths = [\"logs\"]\n");
    std::fs::create_dir_all(env.path("logs")).unwrap();
    let model = "[models.a]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n";
    write(
        "type.toml",
        &format!("{model}\n[limits]\nmax_turns = \"x\"\n"),
    );
    write(
        "connect.toml",
        &format!("{model}connect_timeout_secs = 0\n"),
    );
    write(
        "calls.toml",
        &format!("{model}[limits]\nmax_tool_calls = 0\n"),
    );
    write(
        "two.toml",
        "[models.a]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n\
         [models.b]\nbase_url = \"http://127.0.0.1:2/v1\"\nmodel = \"n\"\n",
    );
    write(
        "some.toml",
        "[models.a]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n\
         [models.b]\nbase_url = \"http://127.0.0.1:2/v1\"\nmodel = \"n\"\n\
         [agents]\nverifier = \"b\"\n",
    );
    write(
        "mcp.toml",
        &format!("{model}[[mcp]]\nname = \"x\"\ncommand = \"/nonexistent/diag-mcp-server\"\n"),
    );
    write(
        "logpaths.toml",
        &format!("{model}[tools.search_logs]\npaths = [\"logs\", \"logz\"]\n"),
    );
    write(
        "runbooks.toml",
        &format!("{model}[tools.search_runbooks]\npaths = [\"no-runbooks\"]\n"),
    );

    refused(
        &env,
        &["--config", "syntax.toml", "ask", "q"],
        "config syntax.toml: key `models.a.modle`: unknown key (expected one of `base_url`, ",
    );
    // One line each, `config FILE: key `a.b.c`: problem`, the key named as written.
    let exact = [
        (
            "type.toml",
            "config type.toml: key `limits.max_turns`: invalid type: string \"x\", expected \
             u32 (line 6)",
        ),
        (
            "connect.toml",
            "config connect.toml: key `models.a.connect_timeout_secs`: must be at least 1",
        ),
        (
            "calls.toml",
            "config calls.toml: key `limits.max_tool_calls`: must be at least 1 (line 5)",
        ),
        (
            "two.toml",
            "config two.toml: key `agents.default`: 2 models are defined (a, b); name the one \
             agents use by default",
        ),
        (
            "some.toml",
            "config some.toml: key `agents.default`: 2 models are defined (a, b) and \
             agents.planner, agents.executor, agents.composer are not set; name the one agents \
             use by default",
        ),
        (
            "logpaths.toml",
            "config logpaths.toml: key `tools.search_logs.paths[1]`: `logz` does not exist",
        ),
        (
            "runbooks.toml",
            "config runbooks.toml: key `tools.search_runbooks.paths[0]`: `no-runbooks` does \
             not exist",
        ),
    ];
    for (file, want) in exact {
        let out = env.run(&["--config", file, "ask", "q"]);
        out.expect(2);
        assert_eq!(out.one_error_line(), format!("diag: {want}"));
    }
    let out = env.run(&["--config", "mcp.toml", "ask", "q"]);
    out.expect(2);
    let line = out.one_error_line();
    assert!(
        line.starts_with(
            "diag: config mcp.toml: key `mcp[0].command`: MCP server `x`: cannot run \
             `/nonexistent/diag-mcp-server`: "
        ),
        "{line}"
    );
    assert_eq!(line.matches("MCP server").count(), 1, "{line}");
    refused(
        &env,
        &["--config", "header.toml", "ask", "q"],
        "config header.toml: line 1:",
    );
    refused(
        &env,
        &["--config", "semantic.toml", "ask", "q"],
        "config semantic.toml: key `models.a.base_url`: must start with http:// or https://",
    );
    refused(
        &env,
        &["--config", "agents.toml", "ask", "q"],
        "config agents.toml: key `agents.verifier`: names model `ghost`",
    );
    refused(
        &env,
        &["--config", "key.toml", "ask", "q"],
        "config key.toml: key `models.a.api_key_env`: the API key variable DIAG_TEST_API_KEY \
         (api_key_env) is not set",
    );
    refused(
        &env,
        &["--config", "nomodel.toml", "ask", "q"],
        "config nomodel.toml: key `models`: no model endpoint is configured",
    );
    refused(
        &env,
        &["--config", "absent.toml", "ask", "q"],
        "config absent.toml: cannot read",
    );
    // No --config and nothing in the (temporary) config folder.
    refused(&env, &["ask", "q"], "no model endpoint is configured");
    // DIAG_CONFIG names the file when --config does not.
    env.set_env("DIAG_CONFIG", "semantic.toml");
    refused(
        &env,
        &["ask", "q"],
        "config semantic.toml: key `models.a.base_url`",
    );
    assert!(stored_runs(&env).is_empty());
}

#[test]
fn an_unwritable_record_path_is_refused_before_the_run() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    std::fs::create_dir_all(env.path("a-folder")).unwrap();
    refused(
        &env,
        &["ask", "--fixture", "pass.json", "--record", "a-folder"],
        "a-folder: cannot write the run file: it is a folder",
    );
    refused(
        &env,
        &[
            "ask",
            "--fixture",
            "pass.json",
            "--record",
            "no/such/dir/run.json",
        ],
        "no/such/dir/run.json: cannot write the run file: the folder no/such/dir does not exist",
    );
    assert!(stored_runs(&env).is_empty());

    // A path whose folder exists but refuses the file (even to root): the run happens, its
    // answer is printed and stored, and the one error line says how to get the run file.
    if cfg!(target_os = "linux") {
        let out = env.run(&[
            "ask",
            "--fixture",
            "pass.json",
            "--record",
            "/proc/diag-cli-test-run.json",
        ]);
        out.expect(2);
        let line = out.one_error_line();
        let runs = stored_runs(&env);
        assert_eq!(runs.len(), 1);
        let run_id = str_of(&runs[0], "run_id");
        assert!(
            line.starts_with("diag: /proc/diag-cli-test-run.json: cannot write the run file: ")
                && line.ends_with(&format!(
                    "(run {run_id} is stored; diag export {run_id} -o FILE writes it)"
                )),
            "{line}"
        );
        assert!(out.stdout.contains("status   SUCCESS"), "{}", out.stdout);
        assert!(out
            .stdout
            .contains("Next: look at payment-service's own logs."));
        env.run(&["export", run_id, "-o", "exported.json"])
            .expect(0);
        env.run(&["replay", "exported.json"]).expect(0);
    }

    // A record path that works writes a run file that replays.
    let out = env.run(&["ask", "--fixture", "pass.json", "--record", "rec.json"]);
    out.expect(0).quiet_stderr();
    assert_schema("diag_run_v2.json", &read_json(&env.path("rec.json")));
    env.run(&["replay", "rec.json"]).expect(0);
}

#[test]
fn a_read_only_database_is_refused_in_one_line_and_left_untouched() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let run_id = str_of(&env.ask_fixture_json(&env.path("pass.json"), &[]), "run_id").to_string();
    let db = env.db();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    let before = std::fs::read(&db).unwrap();

    let out = refused(&env, &["ask", "--fixture", "pass.json"], "is read-only");
    assert!(out.stdout.is_empty());
    // Reading still works, and the file is byte for byte what it was.
    env.run(&["trace", &run_id]).expect(0).quiet_stderr();
    assert_eq!(stored_runs(&env).len(), 1);
    refused(&env, &["gc", "--keep", "0"], "is read-only");
    assert_eq!(std::fs::read(&db).unwrap(), before);
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();

    // A database path in a read-only folder. Root ignores permission bits, so as root the
    // folder is /proc, which no one can create files in.
    let folder = env.root().join("read-only");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o555)).unwrap();
    let probe = folder.join("probe");
    let folder = if std::fs::write(&probe, "x").is_ok() {
        let _ = std::fs::remove_file(&probe);
        PathBuf::from("/proc")
    } else {
        folder
    };
    let path = folder.join("diag.db").display().to_string();
    let out = refused(
        &env,
        &["--db", &path, "ask", "--fixture", "pass.json"],
        &format!("cannot open the run store {path}"),
    );
    assert!(out.stdout.is_empty());
    refused(
        &env,
        &["--db", &path, "runs"],
        &format!("no run store at {path}"),
    );
}

#[test]
fn a_file_that_is_not_a_run_store_is_refused_and_left_untouched() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let garbage: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_246_822_519) >> 7) as u8)
        .collect();
    std::fs::write(env.path("garbage.db"), &garbage).unwrap();
    let foreign = env.path("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE inventory (item TEXT); INSERT INTO inventory VALUES ('x');")
        .unwrap();
    let foreign_bytes = std::fs::read(&foreign).unwrap();

    for args in [
        &["--db", "garbage.db", "runs"][..],
        &["--db", "garbage.db", "ask", "--fixture", "pass.json"],
    ] {
        let out = refused(&env, args, "garbage.db");
        assert_eq!(
            out.one_error_line(),
            "diag: garbage.db is not a diag run store (it is not an SQLite database): give the \
             path of a run store, or a new file name for one"
        );
    }
    // A text file and a folder given as the store are named for what they are.
    std::fs::write(env.path("notes.txt"), "meeting notes\n").unwrap();
    std::fs::create_dir(env.path("emptydir")).unwrap();
    for (db, what) in [
        ("notes.txt", "it is not an SQLite database"),
        ("emptydir", "it is a folder"),
    ] {
        let out = refused(&env, &["--db", db, "runs"], db);
        assert_eq!(
            out.one_error_line(),
            format!(
                "diag: {db} is not a diag run store ({what}): give the path of a run store, or \
                 a new file name for one"
            )
        );
    }
    assert_eq!(
        std::fs::read_to_string(env.path("notes.txt")).unwrap(),
        "meeting notes\n"
    );
    // A damaged database (SQLite's header, then garbage) is corrupt, as before.
    let mut damaged = b"SQLite format 3\0".to_vec();
    damaged.extend_from_slice(&garbage);
    std::fs::write(env.path("damaged.db"), &damaged).unwrap();
    refused(
        &env,
        &["--db", "damaged.db", "runs"],
        "the run store damaged.db is corrupt",
    );
    refused(
        &env,
        &["--db", "foreign.db", "ask", "--fixture", "pass.json"],
        "foreign.db is an SQLite database but not a diag run store",
    );
    // Byte for byte what they were: not even switched to WAL mode.
    assert!(std::fs::read(env.path("garbage.db")).unwrap() == garbage);
    assert!(std::fs::read(&foreign).unwrap() == foreign_bytes);

    // An empty file is no store yet: reading commands leave it empty, `ask` makes it one.
    std::fs::write(env.path("empty.db"), b"").unwrap();
    for args in [
        &["runs"][..],
        &["trace", "run-1"][..],
        &["gc", "--keep", "1"][..],
    ] {
        let mut all = vec!["--db", "empty.db"];
        all.extend_from_slice(args);
        let out = env.run(&all);
        out.expect(2);
        assert_eq!(
            out.one_error_line(),
            "diag: no run store at empty.db (the file is empty) (diag ask creates the store; \
             check --db, DIAG_DB or [store] path)",
            "{args:?}"
        );
        assert_eq!(std::fs::metadata(env.path("empty.db")).unwrap().len(), 0);
    }
    env.run(&["--db", "empty.db", "ask", "--fixture", "pass.json"])
        .expect(0);
    env.run(&["--db", "empty.db", "runs"])
        .expect(0)
        .quiet_stderr();
}

/// A database URL is not a path: `--db postgres://…` used to create a folder `postgres:` in
/// the working directory and a SQLite file in it, and report success. A URL of any scheme but
/// PostgreSQL's (`postgres://`, `postgresql://`: the PostgreSQL store) is refused from the flag,
/// `DIAG_DB` and `[store] path` alike, naming only the scheme (the URL may hold a password),
/// and nothing is created anywhere.
#[test]
fn a_database_url_is_refused_naming_only_its_scheme_and_nothing_is_created() {
    let mut env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let url = "mysql://diag:s3cret-pw@127.0.0.1:3306/runs";
    let config = env.path("diag.toml");
    std::fs::write(&config, format!("[store]\npath = \"{url}\"\n")).unwrap();
    let listing = |env: &TestEnv| {
        let mut names: Vec<String> = std::fs::read_dir(env.work())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing(&env);
    let db_dir = env.db().parent().unwrap().to_path_buf();
    let hint = "(give the path of a SQLite file (--db ./runs.db) or a postgres:// URL)";
    for args in [
        &["--db", url, "ask", "--fixture", "pass.json"][..],
        &["--db", url, "runs"],
        &["--db", "redis://db.internal/diag", "trace", "run-x"],
        &["--db", url, "replay", "pass.json"],
    ] {
        let source = "--db";
        let scheme = args[1].split_once("://").unwrap().0;
        let out = refused(
            &env,
            args,
            &format!(
                "{source} is a {scheme}:// URL; diag stores runs in a SQLite file or a PostgreSQL database {hint}"
            ),
        );
        assert!(!out.stderr.contains("s3cret"), "{}", out.stderr);
    }
    let by_env = env.run_with(&["ask", "--fixture", "pass.json"], |c| {
        c.env("DIAG_DB", url);
    });
    by_env.expect(2);
    assert_eq!(
        by_env.one_error_line(),
        format!("diag: DIAG_DB is a mysql:// URL; diag stores runs in a SQLite file or a PostgreSQL database {hint}")
    );
    env.set_env("DIAG_CONFIG", config.to_str().unwrap());
    let by_config = env.run_with(&["runs"], |c| {
        c.env_remove("DIAG_DB");
    });
    by_config.expect(2);
    assert_eq!(
        by_config.one_error_line(),
        format!("diag: [store] path is a mysql:// URL; diag stores runs in a SQLite file or a PostgreSQL database {hint}")
    );
    // A path that merely holds `://` further on is a path.
    env.run(&["--db", "./dir://x.db", "ask", "--fixture", "pass.json"])
        .expect(0);
    assert!(env.path("dir:").join("x.db").exists());
    let mut after = listing(&env);
    after.retain(|n| n != "dir:");
    assert_eq!(after, before, "nothing created in the working directory");
    assert!(!db_dir.exists() || std::fs::read_dir(&db_dir).unwrap().next().is_none());
}

#[test]
fn other_usage_errors_exit_2() {
    let env = TestEnv::new();
    for args in [
        &["frobnicate"][..],
        &["ask", "--no-such-flag", "q"],
        &["runs", "--limit", "many"],
        &["gc", "--older-than", "10y"],
        &["completions", "tcsh"],
        &["replay"],
    ] {
        let out = env.run(args);
        out.expect(2);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
    refused(
        &env,
        &["gc"],
        "say what to delete: --older-than DURATION and/or --keep N",
    );
    let help = env.run(&["--help"]);
    help.expect(0);
    assert!(help.stdout.contains("Exit codes:"), "{}", help.stdout);
    env.run(&["--version"]).expect(0);
}

// ---------------------------------------------------------------------------------------------
// Output modes, gc, completions, the default database path.

#[test]
fn quiet_prints_only_the_answer() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let expected = read_json(&repo_file(PASS))["expected"]["answer"]
        .as_str()
        .unwrap()
        .to_string();
    for args in [
        &["--quiet", "ask", "--fixture", "pass.json"][..],
        &["ask", "-q", "--fixture", "pass.json"],
    ] {
        let out = env.run(args);
        out.expect(0).quiet_stderr();
        assert_eq!(out.stdout, format!("{expected}\n"));
    }
    // A FAILED run prints no answer, and says why on stderr.
    refuse_success(&env);
    let out = env.run(&["-q", "ask", "--fixture", "pass.json"]);
    out.expect(3);
    assert_eq!(out.stdout, "");
    out.one_error_line();
}

#[test]
fn quiet_names_a_verdict_that_is_not_a_verified_pass_on_stderr() {
    let env = TestEnv::new();
    // A verified PASS: stdout is the answer, stderr empty (see quiet_prints_only_the_answer).
    // LOW_CONFID, not degraded: the answer alone on stdout, one verdict line on stderr.
    env.copy_fixture(LOW_CONFID, "low.json");
    let low_answer = read_json(&repo_file(LOW_CONFID))["expected"]["answer"]
        .as_str()
        .unwrap()
        .to_string();
    let out = env.run(&["-q", "ask", "--fixture", "low.json"]);
    out.expect(0);
    assert_eq!(out.stdout, format!("{}\n", low_answer.trim_end()));
    let line = out.one_error_line();
    assert!(
        line.starts_with("diag: verdict LOW_CONFID; diag trace "),
        "{line}"
    );
    assert!(line.ends_with(" shows why"), "{line}");
    assert!(!line.contains("degraded"), "{line}");

    // A degraded run (the Planner never produced a plan): no verdict, and which Fallback.
    env.copy_fixture(PLANNER_PROSE, "prose.json");
    let prose_answer = read_json(&repo_file(PLANNER_PROSE))["expected"]["answer"]
        .as_str()
        .unwrap()
        .to_string();
    let out = env.run(&["--quiet", "ask", "--fixture", "prose.json"]);
    out.expect(0);
    let line = out.one_error_line();
    let run_id = line
        .strip_prefix(
            "diag: verdict none (not verified), degraded (pre_verification fallback answered); \
             diag trace ",
        )
        .and_then(|rest| rest.strip_suffix(" shows why"))
        .unwrap_or_else(|| panic!("{line}"));
    // The recorded answer names no run (`<run_id>`); the replay's names its own.
    assert_eq!(
        out.stdout,
        format!(
            "{}\n",
            prose_answer
                .trim_end()
                .replace("`diag trace <run_id>`", &format!("`diag trace {run_id}`"))
        )
    );
    assert!(out.stdout.contains(&format!("`diag trace {run_id}`")));

    // With --strict the verdict line comes first and the strict failure follows it.
    let out = env.run(&["-q", "ask", "--strict", "--fixture", "low.json"]);
    out.expect(4);
    assert_eq!(out.stdout, format!("{}\n", low_answer.trim_end()));
    let lines = out.stderr_lines();
    assert_eq!(lines.len(), 2, "{}", out.stderr);
    assert!(
        lines[0].starts_with("diag: verdict LOW_CONFID;"),
        "{}",
        lines[0]
    );
    assert!(lines[1].starts_with("diag: --strict: run "), "{}", lines[1]);

    // Without --quiet the header already shows the verdict: no extra line.
    env.run(&["ask", "--fixture", "low.json"])
        .expect(0)
        .quiet_stderr();
}

#[test]
fn progress_never_shows_when_stdout_is_not_a_terminal() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let with = env.run(&["ask", "--fixture", "pass.json"]);
    with.expect(0).quiet_stderr();
    let without = env.run(&["--no-progress", "ask", "--fixture", "pass.json"]);
    without.expect(0).quiet_stderr();
    for c in ['\r', '\u{1b}', '⠁', '⠂', '⠄', '⡀', '⢀', '⠠', '⠐', '⠈'] {
        assert!(!with.stdout.contains(c), "{c:?} in {}", with.stdout);
    }
    let filters = env.filters();
    assert_eq!(
        apply_filters(&filters, &with.stdout),
        apply_filters(&filters, &without.stdout)
    );
}

#[test]
fn concurrent_asks_share_one_database() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    create_store(&env);
    let children: Vec<_> = (0..4)
        .map(|i| {
            let mut cmd = env.command();
            cmd.args([
                "ask",
                "--fixture",
                "pass.json",
                "--json",
                "--session",
                &format!("session-{i}"),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    let mut run_ids = Vec::new();
    for child in children {
        let out = bounded::wait_with_output(child, bounded::LIMIT, "diag ask --fixture pass.json");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["status"], "SUCCESS");
        run_ids.push(str_of(&doc, "run_id").to_string());
    }
    let stored = stored_runs(&env);
    assert_eq!(stored.len(), 4);
    for id in &run_ids {
        let trace = env.run(&["trace", id, "--json"]);
        trace.expect(0);
        let doc = trace.json();
        assert_eq!(doc["events"].as_array().unwrap().len(), 6);
        assert_eq!(doc["tool_invocations"][0]["run_id"], id.as_str());
    }
}

#[test]
fn gc_keeps_only_the_newest_runs() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    for session in ["first", "second", "third"] {
        env.run(&["ask", "--fixture", "pass.json", "--session", session])
            .expect(0);
    }
    assert_eq!(stored_runs(&env).len(), 3);
    let out = env.run(&["gc", "--keep", "1"]);
    out.expect(0).quiet_stderr();
    assert!(
        out.stdout.starts_with("deleted 2 run(s); database "),
        "{}",
        out.stdout
    );
    let left = stored_runs(&env);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["session_id"], "third");
    let out = env.run(&["gc", "--older-than", "30d"]);
    out.expect(0);
    assert!(out.stdout.starts_with("deleted 0 run(s)"), "{}", out.stdout);
    assert_eq!(stored_runs(&env).len(), 1);
}

#[test]
fn completions_and_the_man_page_are_generated() {
    let env = TestEnv::new();
    let bash = env.run(&["completions", "bash"]);
    bash.expect(0).quiet_stderr();
    assert!(bash.stdout.contains("_diag()"), "{}", bash.stdout);
    assert!(bash.stdout.contains("--fixture"));
    for shell in ["zsh", "fish"] {
        let out = env.run(&["completions", shell]);
        out.expect(0);
        assert!(!out.stdout.is_empty());
    }
    let man = env.run(&["man"]);
    man.expect(0).quiet_stderr();
    assert!(
        man.stdout.starts_with(".ie"),
        "{}",
        &man.stdout[..80.min(man.stdout.len())]
    );
    assert!(man.stdout.contains(".TH diag 1"), "man page header");
    // diag(1) names its subcommands' pages, and each can be printed, with its own flags.
    assert!(man.stdout.contains("diag\\-ask(1)"), "{}", man.stdout);
    let ask = env.run(&["man", "ask"]);
    ask.expect(0).quiet_stderr();
    assert!(ask.stdout.contains(".TH diag-ask 1"), "{}", ask.stdout);
    assert!(
        ask.stdout.contains("\\fB\\-\\-fixture\\fR"),
        "{}",
        ask.stdout
    );
    let am = env.run(&["man", "investigate", "alertmanager"]);
    am.expect(0);
    assert!(am.stdout.contains(".TH diag-investigate-alertmanager 1"));
    assert!(am.stdout.contains("\\fB\\-\\-group\\-by\\fR"));
    let out = env.run(&["man", "investigate", "nope"]);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: diag investigate has no subcommand `nope` (diag investigate --help lists them)"
    );
    // --out-dir writes every page that diag(1) and the others name.
    std::fs::create_dir(env.path("man1")).unwrap();
    let out = env.run(&["man", "--out-dir", "man1"]);
    out.expect(0);
    let mut names: Vec<String> = std::fs::read_dir(env.path("man1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.contains(&"diag.1".to_string()), "{names:?}");
    assert!(names.contains(&"diag-ask.1".to_string()), "{names:?}");
    assert!(
        names.contains(&"diag-serve-status.1".to_string()),
        "{names:?}"
    );
    assert_eq!(
        out.one_error_line(),
        format!("diag: wrote {} man pages into man1", names.len())
    );
    for page in &names {
        let text = std::fs::read_to_string(env.path("man1").join(page)).unwrap();
        let stem = page.strip_suffix(".1").unwrap();
        assert!(text.contains(&format!(".TH {stem} 1")), "{page}");
        // Every page it names is there.
        for named in text.split("diag\\-").skip(1) {
            let Some((name, _)) = named.split_once("(1)") else {
                continue;
            };
            if name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '-' || c == '\\')
            {
                let file = format!("diag-{}.1", name.replace("\\-", "-"));
                assert!(names.contains(&file), "{page} names {file}");
            }
        }
    }
}

#[test]
fn without_diag_db_the_store_lives_in_the_xdg_data_folder() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let out = env.run_with(&["ask", "--fixture", "pass.json"], |c| {
        c.env_remove("DIAG_DB");
    });
    out.expect(0).quiet_stderr();
    assert!(env.root().join("data/diag/diag.db").is_file());
    assert!(!env.db().exists());
    // An empty DIAG_DB is unset, not an empty path.
    let out = env.run_with(&["runs", "--json"], |c| {
        c.env("DIAG_DB", "");
    });
    out.expect(0).quiet_stderr();
    assert_eq!(out.json()["runs"].as_array().unwrap().len(), 1);
    assert!(!env.db().exists());
    // With neither DIAG_DB, XDG_DATA_HOME nor HOME there is no default to use.
    let out = env.run_with(&["runs"], |c| {
        c.env_remove("DIAG_DB")
            .env_remove("XDG_DATA_HOME")
            .env_remove("HOME");
    });
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: no database path: HOME is not set (set --db PATH or DIAG_DB)"
    );
}

/// An endpoint nothing listens on: the run falls back, the exit says no model answered (7), and
/// the one line names the agent, the endpoint's URL (as the run recorded it) and the model.
#[test]
fn an_unreachable_endpoint_is_named_and_exits_7_with_the_fallbacks_answer() {
    let env = TestEnv::new();
    // A port that was free a moment ago: nothing listens, the connection is refused.
    let port = diag_testkit::free_port();
    let logs = repo_file("fixtures/demo/logs");
    std::fs::write(
        env.path("diag.toml"),
        format!(
            "[models.default]\nbase_url = \"http://127.0.0.1:{port}/v1/\"\n\
             model = \"m\"\ntimeout_secs = 5\nconnect_timeout_secs = 2\n\
             [tools.search_logs]\npaths = [{:?}]\n",
            logs.display().to_string()
        ),
    )
    .unwrap();
    let question = "why does checkout return 502 since 14:00?";

    let out = env.run(&["--config", "diag.toml", "ask", question]);
    out.expect(7);
    let run_id = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("run      "))
        .expect("the header names the run")
        .trim()
        .to_string();
    let line = out.one_error_line();
    let want = format!(
        "diag: no model answered: planner (transient) at http://127.0.0.1:{port}/v1, model m: "
    );
    assert!(line.starts_with(&want), "{line}");
    assert!(
        line.ends_with(&format!(
            "; run {run_id} holds the Fallback's answer, not a diagnosis (check the endpoint \
             under [models] in the configuration)"
        )),
        "{line}"
    );
    assert!(out.stdout.contains("status   SUCCESS"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("verdict  none (degraded: fallback answer)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("diag could not establish trusted material for this diagnosis"),
        "{}",
        out.stdout
    );
    // The answer names its own run, not a placeholder.
    assert!(
        out.stdout.contains(&format!(
            "- Inspect this run with `diag trace {run_id}` to see each stage"
        )),
        "{}",
        out.stdout
    );

    // --strict does not hide it, and --json says so.
    let out = env.run(&[
        "--config",
        "diag.toml",
        "ask",
        question,
        "--strict",
        "--json",
    ]);
    out.expect(7);
    assert!(out.one_error_line().starts_with(&want));
    let doc = out.json();
    assert_schema("ask.v2.json", &doc);
    assert_eq!(doc["schema"], "diag.ask.v2");
    assert_eq!(doc["status"], "SUCCESS");
    assert_eq!(doc["degraded"], true);
    assert_eq!(doc["fallback_kind"], "pre_verification");
    assert_eq!(doc["model_answered"], false);
    // The same first failed call as the line: agent, class, endpoint, model, message.
    let error = doc["model_error"].as_str().unwrap();
    let named = want.trim_start_matches("diag: no model answered: ");
    assert!(error.starts_with(named), "{error}");
}

/// An endpoint that accepts connections and never answers: without a deadline the run would
/// wait out every timeout and retry; `[limits] run_timeout_secs` stops it, stored FAILED with
/// the deadline named.
#[test]
fn a_run_past_its_deadline_is_stopped_and_stored_failed_naming_it() {
    let env = TestEnv::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts every connection and keeps it open, silent, until the test ends.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let logs = repo_file("fixtures/demo/logs");
    std::fs::write(
        env.path("diag.toml"),
        format!(
            "[models.default]\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"m\"\n\
             timeout_secs = 60\nconnect_timeout_secs = 2\n\
             [tools.search_logs]\npaths = [{:?}]\n[limits]\nrun_timeout_secs = 2\n",
            logs.display().to_string()
        ),
    )
    .unwrap();
    let out = env.run(&[
        "--config",
        "diag.toml",
        "ask",
        "why does checkout return 502 since 14:00?",
        "--json",
    ]);
    out.expect(3);
    let failure = "deadline: the run was stopped after 2 s ([limits] run_timeout_secs); diag \
                   trace shows how far it got";
    let doc = out.json();
    assert_schema("ask.v2.json", &doc);
    let run_id = str_of(&doc, "run_id").to_string();
    assert_eq!(
        out.one_error_line(),
        format!("diag: run {run_id} FAILED: {failure}")
    );
    assert_eq!(doc["status"], "FAILED");
    assert_eq!(doc["failure"], failure);
    // The planner's call was in flight: it is in the trace, cut where it was.
    let trace = env.run(&["trace", &run_id, "--json"]);
    trace.expect(0);
    let trace = trace.json();
    assert_eq!(trace["run"]["status"], "FAILED");
    assert_eq!(trace["run"]["failure"], failure);
    // The deadline is one of the limits the run ran under, recorded with it.
    env.run(&["export", &run_id, "-o", "run.json"]).expect(0);
    assert_eq!(
        read_json(&env.path("run.json"))["limits"]["run_timeout_secs"],
        2
    );
}

/// Ctrl-C during `diag replay` of a large folder: exit 130 with one line, the files replayed
/// so far stay stored, a replay cut short is FAILED (`interrupted`), nothing is left RUNNING,
/// and the files not yet started are not run.
#[test]
fn ctrl_c_during_replay_exits_130_and_leaves_no_run_running() {
    let env = TestEnv::new();
    let folder = env.path("many");
    std::fs::create_dir_all(&folder).unwrap();
    let pass = std::fs::read(repo_file(PASS)).unwrap();
    const FILES: usize = 3000;
    for i in 0..FILES {
        std::fs::write(folder.join(format!("{i:05}.json")), &pass).unwrap();
    }
    let mut child = env
        .command()
        .args(["replay", "many"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (bounded) until the first runs are stored, then interrupt.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let out = env.run(&["runs", "--limit", "1", "--json"]);
        if out.code == Some(0) && !out.json()["runs"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "replay ended before it could be interrupted"
        );
        assert!(std::time::Instant::now() < deadline, "no run was stored");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let output =
        bounded::wait_with_output(child, bounded::LIMIT, "diag replay many (after SIGINT)");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("diag: interrupted after "), "{stderr}");
    assert!(
        output.stdout.is_empty(),
        "no table for an interrupted replay"
    );

    let out = env.run(&["runs", "--limit", "100000", "--json"]);
    out.expect(0).quiet_stderr();
    let runs = out.json()["runs"].as_array().unwrap().clone();
    assert!(!runs.is_empty());
    assert!(runs.len() < FILES, "every file ran: {}", runs.len());
    for run in &runs {
        match run["status"].as_str().unwrap() {
            "SUCCESS" => {}
            "FAILED" => {
                let id = run["run_id"].as_str().unwrap();
                let trace = env.run(&["trace", id, "--json"]);
                assert_eq!(trace.json()["run"]["failure"], "interrupted", "{id}");
            }
            other => panic!("a run was left {other}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Where the store is: --db > DIAG_DB > [store] path > the data folder; read-only commands
// never create it.

#[test]
fn the_store_path_of_the_config_is_used_after_db_and_diag_db() {
    let mut env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    std::fs::create_dir_all(env.path("conf")).unwrap();
    // Relative to the config file's folder, not to the working directory.
    std::fs::write(
        env.path("conf/diag.toml"),
        "[store]\npath = \"stores/cfg.db\"\n",
    )
    .unwrap();
    let cfg_db = env.path("conf/stores/cfg.db");
    let no_diag_db = |c: &mut std::process::Command| {
        c.env_remove("DIAG_DB");
    };
    let count = |env: &TestEnv, args: &[&str]| -> usize {
        let mut a = args.to_vec();
        a.extend(["runs", "--json"]);
        let out = env.run_with(&a, no_diag_db);
        out.expect(0).quiet_stderr();
        out.json()["runs"].as_array().unwrap().len()
    };

    // ask --fixture with --config stores where the config says.
    env.run_with(
        &[
            "--config",
            "conf/diag.toml",
            "ask",
            "--fixture",
            "pass.json",
        ],
        no_diag_db,
    )
    .expect(0)
    .quiet_stderr();
    assert!(cfg_db.is_file());
    assert!(!env.db().exists());
    assert!(!env.root().join("data/diag/diag.db").exists());
    assert_eq!(count(&env, &["--config", "conf/diag.toml"]), 1);

    // DIAG_DB wins over the config; --db wins over both.
    env.run(&[
        "--config",
        "conf/diag.toml",
        "ask",
        "--fixture",
        "pass.json",
    ])
    .expect(0);
    assert!(env.db().is_file());
    env.run(&[
        "--config",
        "conf/diag.toml",
        "--db",
        "flag.db",
        "ask",
        "--fixture",
        "pass.json",
    ])
    .expect(0);
    assert!(env.path("flag.db").is_file());
    assert_eq!(count(&env, &["--config", "conf/diag.toml"]), 1);

    // DIAG_CONFIG is a way to name the config too, for every command.
    env.set_env("DIAG_CONFIG", "conf/diag.toml");
    env.run_with(&["ask", "--fixture", "pass.json"], no_diag_db)
        .expect(0);
    assert_eq!(count(&env, &[]), 2);
    let out = env.run_with(&["runs", "--json"], no_diag_db);
    let run_id = str_of(&out.json()["runs"][0], "run_id").to_string();
    env.run_with(&["trace", &run_id], no_diag_db)
        .expect(0)
        .quiet_stderr();
    env.run_with(&["export", &run_id, "-o", "out.json"], no_diag_db)
        .expect(0);
    env.run_with(&["gc", "--keep", "1"], no_diag_db).expect(0);
    assert_eq!(count(&env, &[]), 1);
    // An invalid config is refused by the commands that read it for the store path.
    std::fs::write(env.path("conf/diag.toml"), "[store]\npaht = \"x.db\"\n").unwrap();
    let out = env.run_with(&["runs"], no_diag_db);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: config conf/diag.toml: key `store.paht`: unknown key (expected one of `path`, `url`, `password_env`) (line 2)"
    );
}

#[test]
fn a_live_ask_stores_its_run_where_the_config_says() {
    let env = TestEnv::new();
    let port = diag_testkit::free_port();
    std::fs::write(
        env.path("diag.toml"),
        format!(
            "[models.default]\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"m\"\n\
             timeout_secs = 5\nconnect_timeout_secs = 2\n[store]\npath = \"live/runs.db\"\n"
        ),
    )
    .unwrap();
    let out = env.run_with(
        &["--config", "diag.toml", "ask", "why 502?", "--json"],
        |c| {
            c.env_remove("DIAG_DB");
        },
    );
    out.expect(7); // nothing listens: no model answered, the run is stored all the same
    let run_id = str_of(&out.json(), "run_id").to_string();
    assert!(env.path("live/runs.db").is_file());
    assert!(!env.db().exists());
    assert!(!env.root().join("data/diag/diag.db").exists());
    let out = env.run(&["--db", "live/runs.db", "trace", &run_id]);
    out.expect(0).quiet_stderr();

    // A replay stored beside it is marked as one, newest stored first, though its own start
    // time is its recording's (2026-11-30).
    env.copy_fixture(PASS, "pass.json");
    let replayed = env.run(&[
        "--db",
        "live/runs.db",
        "ask",
        "--fixture",
        "pass.json",
        "--json",
    ]);
    replayed.expect(0);
    let replay_id = str_of(&replayed.json(), "run_id").to_string();
    let out = env.run(&["--db", "live/runs.db", "runs"]);
    out.expect(0).quiet_stderr();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].contains("  source  stored  "), "{}", out.stdout);
    let source = |line: &str| line.split_whitespace().nth(4).unwrap().to_string();
    assert!(lines[1].starts_with(&replay_id), "{}", out.stdout);
    assert_eq!(source(lines[1]), "replay");
    assert!(lines[2].starts_with(&run_id), "{}", out.stdout);
    assert_eq!(source(lines[2]), "live");
    let out = env.run(&["--db", "live/runs.db", "runs", "--json"]);
    let doc = out.json();
    assert_schema("runs.v2.json", &doc);
    let recorded = read_json(&env.path("pass.json"))["run_id"].clone();
    assert_eq!(doc["runs"][0]["replay_of"], recorded);
    assert_eq!(doc["runs"][0]["started_at"], "2026-11-30T14:10:00.000Z");
    assert_eq!(doc["runs"][1]["replay_of"], serde_json::Value::Null);
}

#[test]
fn read_only_commands_never_create_a_store() {
    let env = TestEnv::new();
    let missing = env.root().join("nonexistent/dir/x.db");
    let path = missing.display().to_string();
    for args in [
        &["runs"][..],
        &["runs", "--json"],
        &["trace", "run-0123456789abcdef0123"],
        &["export", "run-0123456789abcdef0123"],
        &["gc", "--keep", "1"],
    ] {
        let mut a = vec!["--db", path.as_str()];
        a.extend_from_slice(args);
        let out = env.run(&a);
        out.expect(2);
        assert_eq!(
            out.one_error_line(),
            format!("diag: no run store at {path}{NO_STORE_HINT}")
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
        // Through DIAG_DB, the same.
        let out = env.run_with(args, |c| {
            c.env("DIAG_DB", &missing);
        });
        out.expect(2);
        assert_eq!(
            out.one_error_line(),
            format!("diag: no run store at {path}{NO_STORE_HINT}")
        );
    }
    assert!(!env.root().join("nonexistent").exists());

    // At the default path (a machine where diag never ran): `runs` has nothing to list,
    // `trace`, `export` and `gc` have nothing to work on. Nothing is created either way.
    let default = env.root().join("data/diag/diag.db");
    let unset = |c: &mut std::process::Command| {
        c.env_remove("DIAG_DB");
    };
    let out = env.run_with(&["runs"], unset);
    out.expect(0).quiet_stderr();
    assert!(out.stdout.ends_with("(no runs)\n"), "{}", out.stdout);
    let out = env.run_with(&["runs", "--json"], unset);
    out.expect(0).quiet_stderr();
    assert_eq!(out.json(), json!({"schema": "diag.runs.v2", "runs": []}));
    for args in [
        &["trace", "run-0123456789abcdef0123"][..],
        &["export", "run-0123456789abcdef0123"],
        &["gc", "--older-than", "30d"],
    ] {
        let out = env.run_with(args, unset);
        out.expect(2);
        assert_eq!(
            out.one_error_line(),
            format!("diag: no run store at {}{NO_STORE_HINT}", default.display())
        );
    }
    assert!(!env.root().join("data/diag").exists());

    // A `[store] path` that does not exist is named like --db.
    std::fs::write(env.path("diag.toml"), "[store]\npath = \"gone/x.db\"\n").unwrap();
    let out = env.run_with(&["--config", "diag.toml", "runs"], unset);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        format!("diag: no run store at gone/x.db{NO_STORE_HINT}")
    );
    assert!(!env.path("gone").exists());
}

#[test]
fn ask_with_a_fixture_refuses_another_question_than_the_recorded_one() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let recorded = read_json(&repo_file(PASS))["question"]
        .as_str()
        .unwrap()
        .to_string();
    let out = env.run(&["ask", "--fixture", "pass.json", "why is the sky blue?"]);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        format!(
            "diag: pass.json records the question \"{recorded}\", not this one: omit the \
             question or give the recorded one"
        )
    );
    assert!(out.stdout.is_empty());
    assert!(stored_runs(&env).is_empty());

    // The recorded question, even with other surrounding spaces, or none at all, works.
    let padded = format!("  {recorded}\n");
    for args in [
        &["ask", "--fixture", "pass.json", recorded.as_str(), "--json"][..],
        &["ask", "--fixture", "pass.json", padded.as_str(), "--json"],
        &["ask", "--fixture", "pass.json", "--json"],
    ] {
        let out = env.run(args);
        out.expect(0).quiet_stderr();
        assert_eq!(out.json()["status"], "SUCCESS");
    }
    let runs = stored_runs(&env);
    assert_eq!(runs.len(), 3);
    assert!(runs.iter().all(|r| r["question"] == recorded.as_str()));
}

#[test]
fn runs_prints_whole_ids_in_aligned_columns_and_refuses_limit_0() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let long = "ses-fixture-verifier-retry-incident-2026-11-30-checkout";
    for session in [long, "short"] {
        env.run(&["ask", "--fixture", "pass.json", "--session", session])
            .expect(0);
    }
    let out = env.run(&["runs"]);
    out.expect(0).quiet_stderr();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(!out.stdout.contains('…'), "{}", out.stdout);
    // Every column starts where its heading does.
    for heading in [
        "session", "status", "verdict", "source", "stored", "question",
    ] {
        let at = lines[0].find(heading).unwrap();
        for line in &lines[1..] {
            assert_eq!(&line[at - 2..at], "  ", "`{heading}` column of `{line}`");
            assert_ne!(&line[at..at + 1], " ", "`{heading}` column of `{line}`");
        }
    }
    let session_col = lines[0].find("session").unwrap();
    assert!(
        lines[1][session_col..].starts_with("short "),
        "{}",
        lines[1]
    );
    assert!(
        lines[2][session_col..].starts_with(&format!("{long}  ")),
        "{}",
        lines[2]
    );
    // The id shown is the one `--session` takes.
    let out = env.run(&["runs", "--session", long, "--json"]);
    out.expect(0);
    assert_eq!(out.json()["runs"].as_array().unwrap().len(), 1);

    for json in [false, true] {
        let mut args = vec!["runs", "--limit", "0"];
        if json {
            args.push("--json");
        }
        let out = env.run(&args);
        out.expect(2);
        assert_eq!(out.one_error_line(), "diag: --limit must be at least 1");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn exit_code_5_reads_the_same_in_help_and_readme() {
    let env = TestEnv::new();
    let help = env.run(&["--help"]);
    help.expect(0);
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let meaning = "replay: a run file did not reproduce its expected result, or (replay and ask \
                   --fixture) the run left its recording (divergence)";
    assert!(
        words(&help.stdout).contains(&format!("5 {meaning}")),
        "{}",
        help.stdout
    );
    let readme = std::fs::read_to_string(repo_file("README.md")).unwrap();
    let row = readme
        .lines()
        .find(|l| l.starts_with("| 5 |"))
        .expect("README exit code 5");
    assert_eq!(row.replace('`', ""), format!("| 5 | {meaning} |"));
}

/// The harness bounds every command: one that hangs fails its test, naming the command, and
/// is killed; one that writes more than a pipe holds still finishes.
#[test]
fn a_hanging_command_fails_its_test_naming_the_command() {
    let mut sleep = std::process::Command::new("sleep");
    sleep.arg("30");
    let started = std::time::Instant::now();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        bounded::output(&mut sleep, std::time::Duration::from_millis(300))
    }))
    .expect_err("a hanging command fails the test");
    let message = panicked.downcast_ref::<String>().expect("a message");
    assert_eq!(
        message,
        "`sleep 30` did not finish within 300ms and was killed"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));

    let mut big = std::process::Command::new("head");
    big.args(["-c", "1000000", "/dev/zero"]);
    let out = bounded::output(&mut big, bounded::LIMIT);
    assert!(out.status.success());
    assert_eq!(out.stdout.len(), 1_000_000);
}

/// Messages a new user meets, each saying what is wrong and what to do, in one line: only a
/// command that has `--format` or `--fixture` suggests it, and `--listen` says `HOST:PORT`.
#[test]
fn first_hour_messages_suggest_only_what_the_command_has() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let out = env.run(&["ask", "--fixture", "pass.json", "--report", "x.pdf"]);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: x.pdf: cannot tell the report format from the name: use a .html or .md file"
    );
    let run_id = str_of(&env.ask_fixture_json(&env.path("pass.json"), &[]), "run_id").to_string();
    let out = env.run(&["report", &run_id, "-o", "x.pdf"]);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: x.pdf: cannot tell the report format from the name: use a .html or .md file, or \
         --format html|md"
    );

    // Without a configuration: `ask` may replay a recording instead, `serve` and
    // `investigate` may not.
    let hint = "or replay a recorded run with --fixture FILE";
    assert!(
        refused(&env, &["ask", "q"], "no model endpoint is configured")
            .one_error_line()
            .contains(hint)
    );
    for args in [
        &["serve"][..],
        &["investigate", "alertmanager", "--url", "http://127.0.0.1:9"][..],
    ] {
        let out = refused(&env, args, "no model endpoint is configured");
        assert!(!out.one_error_line().contains("--fixture"), "{args:?}");
    }

    // A configuration without [models]: the same, and investigate says so before it asks
    // Alertmanager (nothing listens on port 9).
    std::fs::write(
        env.path("nomodels.toml"),
        format!(
            "[tools.search_logs]\npaths = [{:?}]\n",
            repo_file("fixtures/demo/logs").display().to_string()
        ),
    )
    .unwrap();
    let no_models = "diag: config nomodels.toml: key `models`: no model endpoint is configured: \
                     add a [models.NAME] table with base_url and model to the config file, as \
                     in fixtures/demo/diag.toml";
    let out = env.run(&["--config", "nomodels.toml", "ask", "q"]);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        format!("{no_models} (or replay a recorded run with --fixture FILE)")
    );
    let out = env.run(&[
        "--config",
        "nomodels.toml",
        "investigate",
        "alertmanager",
        "--url",
        "http://127.0.0.1:9",
    ]);
    out.expect(2);
    assert_eq!(out.one_error_line(), no_models);
    let out = env.run_with(&["--config", "nomodels.toml", "serve"], |cmd| {
        cmd.env("DIAG_SERVE_TOKEN", "a".repeat(40));
    });
    out.expect(2);
    assert_eq!(out.one_error_line(), no_models);

    // An address without a host.
    let logs = repo_file("fixtures/demo/logs");
    std::fs::write(
        env.path("serve.toml"),
        format!(
            "[models.m]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\
             [tools.search_logs]\npaths = [{:?}]\n",
            logs.display().to_string()
        ),
    )
    .unwrap();
    let out = env.run(&["--config", "serve.toml", "serve", "--listen", "19555"]);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: --listen 19555: not HOST:PORT (e.g. 127.0.0.1:9095; 0.0.0.0:9095 listens on every \
         interface, for an Alertmanager on another host)"
    );

    // A PostgreSQL URL's sslmode is named with the mode to use; nothing is contacted (the
    // port is 1) and nothing is written.
    let out = env.run(&[
        "--db",
        "postgres://diag@127.0.0.1:1/runs?sslmode=verify-full",
        "runs",
    ]);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: the run store URL is not a PostgreSQL URL diag can use: sslmode=verify-full: \
         diag verifies the server's certificate and host in every TLS mode, so sslmode=require \
         is the same check (trust a private CA with PGSSLROOTCERT)"
    );
    let out = env.run(&[
        "--db",
        "postgres://diag@127.0.0.1:1/runs?sslmode=on",
        "runs",
    ]);
    out.expect(2);
    assert_eq!(
        out.one_error_line(),
        "diag: the run store URL is not a PostgreSQL URL diag can use: sslmode=on is not a mode \
         diag knows: use sslmode=prefer (the default), sslmode=require or sslmode=disable"
    );
}

/// `report -o` and `export -o` say in one line on stderr what they wrote (nothing under
/// `--quiet`); stdout stays empty.
#[test]
fn a_file_written_by_report_or_export_is_confirmed_in_one_line() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let run_id = str_of(&env.ask_fixture_json(&env.path("pass.json"), &[]), "run_id").to_string();
    for (args, what) in [
        (vec!["report", &run_id, "-o", "r.html"], "the HTML report"),
        (vec!["report", &run_id, "-o", "r.md"], "the Markdown report"),
        (vec!["export", &run_id, "-o", "run.json"], "the run file"),
    ] {
        let out = env.run(&args);
        out.expect(0);
        assert!(out.stdout.is_empty(), "{args:?}");
        let file = args[3];
        let bytes = std::fs::metadata(env.path(file)).unwrap().len();
        let mut line = format!("diag: wrote {file} ({what} of run {run_id}, {bytes} bytes");
        line.push_str(&if file == "run.json" {
            "; diag replay run.json replays it)".to_string()
        } else {
            ")".to_string()
        });
        assert_eq!(out.one_error_line(), line);
        let mut quiet = vec!["--quiet"];
        quiet.extend(&args);
        env.run(&quiet).expect(0).quiet_stderr();
    }
}

/// A usage error is one `diag: …` line (exit 2) that keeps clap's suggestion and usage and
/// names the help to read; help itself stays clap's text.
#[test]
fn usage_errors_are_one_line_keeping_claps_suggestions() {
    let env = TestEnv::new();
    let cases: [(&[&str], &str); 4] = [
        (
            &["trac"],
            "diag: unrecognized subcommand 'trac'; tip: a similar subcommand exists: 'trace'; \
             usage: diag [OPTIONS] <COMMAND> (diag --help says more)",
        ),
        (
            &["runs", "--limt", "3"],
            "diag: unexpected argument '--limt' found; tip: a similar argument exists: \
             '--limit'; usage: diag runs --limit <LIMIT> (diag runs --help says more)",
        ),
        (
            &["report"],
            "diag: the following required arguments were not provided: <RUN_ID>; usage: diag \
             report <RUN_ID> (diag report --help says more)",
        ),
        (
            &[
                "investigate",
                "alertmanager",
                "--urll",
                "http://127.0.0.1:9",
            ],
            "diag: unexpected argument '--urll' found; tip: a similar argument exists: '--url'; \
             usage: diag investigate alertmanager --url <URL> (diag investigate alertmanager \
             --help says more)",
        ),
    ];
    for (args, line) in cases {
        let out = env.run(args);
        out.expect(2);
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_eq!(out.one_error_line(), line, "{args:?}");
    }
    let out = env.run(&["runs", "--help"]);
    out.expect(0).quiet_stderr();
    assert!(out.stdout.contains("Usage: diag runs"), "{}", out.stdout);

    // One vocabulary for reports: --report FILE (one run), --report-dir DIR and
    // --report-format (many); the old spellings are still taken but not shown.
    std::fs::create_dir(env.path("reports")).unwrap();
    for format_flag in ["--report-format", "--format"] {
        let out = env.run(&[
            "investigate",
            "alertmanager",
            "--url",
            "ftp://example.org",
            "--report-dir",
            "reports",
            format_flag,
            "md",
        ]);
        out.expect(2);
        assert_eq!(
            out.one_error_line(),
            "diag: ftp://example.org: not an http(s) URL",
            "{format_flag}"
        );
    }
    let help = env.run(&["investigate", "alertmanager", "--help"]);
    assert!(help.stdout.contains("--report-format <REPORT_FORMAT>"));
    assert!(!help.stdout.contains("  --format"), "{}", help.stdout);
    // Global flags show only where they do something, and are taken everywhere.
    let graph = env.run(&["graph", "--help"]);
    graph.expect(0);
    for flag in ["--quiet", "--db", "--config", "--no-progress"] {
        assert!(!graph.stdout.contains(flag), "{flag}: {}", graph.stdout);
    }
    env.run(&["graph", "--quiet"]).expect(0).quiet_stderr();
    let trace = env.run(&["trace", "--help"]);
    assert!(trace.stdout.contains("--db <PATH|URL>") && !trace.stdout.contains("--quiet"));
    let ask = env.run(&["ask", "--help"]);
    assert!(ask.stdout.contains("-q, --quiet") && ask.stdout.contains("--no-progress"));
    let help = env.run(&["eval", "--help"]);
    assert!(help.stdout.contains("--report-dir <DIR>"));
    assert!(!help.stdout.contains("  --report <"), "{}", help.stdout);
    let out = env.run(&[]);
    out.expect(2);
    assert!(
        out.stderr.contains("Usage: diag [OPTIONS] <COMMAND>"),
        "{}",
        out.stderr
    );
}

/// `diag runs` says when more runs are stored than it lists, and `gc` takes a duration of
/// several units (`1h30m`).
#[test]
fn runs_says_when_more_are_stored_and_gc_takes_1h30m() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    for _ in 0..3 {
        env.ask_fixture_json(&env.path("pass.json"), &[]);
    }
    let rows = |out: &Out| out.stdout.lines().filter(|l| l.starts_with("run-")).count();
    let out = env.run(&["runs", "--limit", "2"]);
    out.expect(0).quiet_stderr();
    assert_eq!(rows(&out), 2, "{}", out.stdout);
    assert_eq!(
        out.stdout.lines().last(),
        Some("(more runs are stored: diag runs --limit 4 lists more)")
    );
    let out = env.run(&["runs", "--limit", "3"]);
    out.expect(0).quiet_stderr();
    assert_eq!(rows(&out), 3, "{}", out.stdout);
    assert!(
        !out.stdout.contains("more runs are stored"),
        "{}",
        out.stdout
    );
    // --json is the listed runs alone, as its schema says.
    let out = env.run(&["runs", "--limit", "2", "--json"]);
    out.expect(0);
    assert_eq!(out.json()["runs"].as_array().unwrap().len(), 2);

    let out = env.run(&["gc", "--older-than", "1h30m"]);
    out.expect(0).quiet_stderr();
    assert!(
        out.stdout.starts_with("deleted 0 run(s);"),
        "{}",
        out.stdout
    );
    let out = env.run(&["gc", "--older-than", "30m1h"]);
    out.expect(2);

    // --dry-run lists what gc would delete, oldest first, and changes nothing; gc then
    // deletes exactly those.
    let listed = |env: &TestEnv| -> Vec<String> {
        stored_runs(env)
            .iter()
            .map(|r| str_of(r, "run_id").to_string())
            .collect()
    };
    let before = listed(&env);
    assert_eq!(before.len(), 3);
    let out = env.run(&["gc", "--keep", "1", "--dry-run"]);
    out.expect(0).quiet_stderr();
    let oldest_first: Vec<&str> = before[1..].iter().rev().map(String::as_str).collect();
    assert_eq!(
        out.stdout,
        format!(
            "{}\n{}\nwould delete 2 run(s); nothing was changed (without --dry-run, runs of \
             processes that are gone are first marked FAILED and may be deleted too)\n",
            oldest_first[0], oldest_first[1]
        )
    );
    assert_eq!(listed(&env), before);
    let out = env.run(&["gc", "--keep", "1"]);
    out.expect(0);
    assert!(
        out.stdout.starts_with("deleted 2 run(s);"),
        "{}",
        out.stdout
    );
    assert_eq!(listed(&env), before[..1]);
}
