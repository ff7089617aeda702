//! Tools read only what the operator configured (openspec/specs/tools/spec.md): a link that
//! leaves the configured sources is skipped and named as skipped, its content is in no tool
//! output; a link inside is followed; an allowed link target admits what lies below it.

#![cfg(unix)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use diag_core::clock::{FixedClock, Timestamp};
use diag_core::tools::{Tool, ToolContext};
use diag_tools::confine::OUTSIDE;
use diag_tools::{LogSearchLimits, RunbookSearchLimits, SearchLogs, SearchRunbooks};
use serde_json::{json, Value};
use tempfile::TempDir;

/// The content of the file outside: it must appear in no output.
const SECRET: &str = "root:x:0:0:root:/root:/bin/bash needle";

fn write(path: &Path, content: &str) -> PathBuf {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
    path.to_path_buf()
}

fn call(tool: &dyn Tool, args: Value) -> Value {
    let clock = FixedClock(Timestamp::parse_rfc3339("2026-11-30T15:00:00Z").unwrap());
    let cx = ToolContext { clock: &clock };
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(tool.call(&args, &cx))
        .unwrap()
}

/// The files listed as skipped for leading outside.
fn outside(out: &Value) -> Vec<String> {
    let mut files: Vec<String> = out["skipped"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["reason"] == OUTSIDE)
        .map(|s| {
            Path::new(s["file"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    files
}

/// A source folder with a log, a link inside, links outside (a file, a chain) and a link to
/// a folder outside; and the outside folder with the secret.
fn layout() -> (TempDir, PathBuf, PathBuf) {
    let root = TempDir::new().unwrap();
    let out_dir = root.path().join("outside");
    let secret = write(&out_dir.join("passwd"), &format!("{SECRET}\n"));
    let src = root.path().join("logs");
    let app = write(&src.join("app.log"), "2026-11-30T14:00:00Z needle inside\n");
    symlink(&app, src.join("current.log")).unwrap();
    symlink(&secret, src.join("passwd.log")).unwrap();
    symlink(src.join("passwd.log"), src.join("chain.log")).unwrap();
    symlink(&out_dir, src.join("etc")).unwrap();
    (root, src, out_dir)
}

#[test]
fn search_logs_follows_links_inside_and_skips_links_outside() {
    let (_root, src, _) = layout();
    let tool = SearchLogs::new(vec![src.clone()], LogSearchLimits::default());
    let out = call(&tool, json!({"query": "needle"}));
    let text = out.to_string();
    assert!(!text.contains("root:x:0:0"), "{text}");
    let files: Vec<&str> = out["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["file"].as_str().unwrap())
        .collect();
    assert_eq!(files.len(), 2, "app.log and the link to it: {text}");
    assert!(files
        .iter()
        .all(|f| f.ends_with("app.log") || f.ends_with("current.log")));
    assert_eq!(outside(&out), ["chain.log", "passwd.log"], "{text}");
    // The folder link is not walked at all.
    assert!(text.contains("symlinked directory not followed"), "{text}");
}

#[test]
fn a_glob_matching_a_link_outside_skips_it() {
    let (_root, src, _) = layout();
    let tool = SearchLogs::new(vec![src.join("*.log")], LogSearchLimits::default());
    let out = call(&tool, json!({"query": "needle"}));
    assert!(!out.to_string().contains("root:x:0:0"));
    assert_eq!(outside(&out), ["chain.log", "passwd.log"]);
}

#[test]
fn an_allowed_link_target_admits_what_lies_below_it() {
    let (_root, src, out_dir) = layout();
    let tool = SearchLogs::new(vec![src.join("*.log")], LogSearchLimits::default())
        .with_link_targets(vec![out_dir]);
    let out = call(&tool, json!({"query": "needle"}));
    assert!(out.to_string().contains("root:x:0:0"));
    assert!(outside(&out).is_empty());
}

#[test]
fn a_configured_file_that_is_a_link_is_its_target() {
    let (_root, src, _) = layout();
    // The operator named the link itself: its resolved location is the source.
    let tool = SearchLogs::new(vec![src.join("passwd.log")], LogSearchLimits::default());
    let out = call(&tool, json!({"query": "needle"}));
    assert!(out.to_string().contains("root:x:0:0"));
}

#[test]
fn search_runbooks_skips_a_runbook_link_outside() {
    let root = TempDir::new().unwrap();
    let secret = write(
        &root.path().join("outside/notes.md"),
        &format!("# Restart\n{SECRET} restart\n"),
    );
    let rb = root.path().join("runbooks");
    let page = write(&rb.join("pool.md"), "# Restart\nrestart the pool\n");
    symlink(&page, rb.join("current.md")).unwrap();
    symlink(&secret, rb.join("passwd.md")).unwrap();
    let tool = SearchRunbooks::new(vec![rb.clone()], RunbookSearchLimits::default());
    let out = call(&tool, json!({"query": "restart"}));
    let text = out.to_string();
    assert!(!text.contains("root:x:0:0"), "{text}");
    assert_eq!(outside(&out), ["passwd.md"], "{text}");
    assert_eq!(out["hits"].as_array().unwrap().len(), 2, "{text}");
    let allowed = SearchRunbooks::new(vec![rb], RunbookSearchLimits::default())
        .with_link_targets(vec![root.path().join("outside")]);
    assert!(call(&allowed, json!({"query": "restart"}))
        .to_string()
        .contains("root:x:0:0"));
}

/// `diag replay DIR` walks folders with the one directory walk: a link to a folder (here a
/// cycle back to the folder itself) is not walked, so the replay ends, each run file once.
#[test]
fn replay_of_a_folder_with_a_link_cycle_replays_each_run_file_once() {
    use crate::support::cli_env::TestEnv;
    let env = TestEnv::new();
    let dir = env.path("suite");
    fs::create_dir_all(dir.join("inner")).unwrap();
    fs::copy(
        diag_testkit::repo().join("fixtures/runs/pass.json"),
        dir.join("inner/pass.json"),
    )
    .unwrap();
    symlink(&dir, dir.join("inner/loop")).unwrap();
    let out = env.run(&["replay", dir.to_str().unwrap()]);
    out.expect(0);
    assert!(out.stdout.contains("1 passed, 0 failed"), "{}", out.stdout);
}

/// A walk lists a link to a log file as a file (confinement then decides), never walks a
/// symlinked folder, and goes in sorted order.
#[test]
fn the_one_walk_lists_files_in_order_and_notes_what_it_passes_over() {
    let (_root, src, _) = layout();
    let walked = diag_tools::walk::files_under(&src, 32);
    let names: Vec<String> = walked
        .files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["app.log", "chain.log", "current.log", "passwd.log"]);
    assert_eq!(
        walked.skipped,
        [(src.join("etc"), diag_tools::walk::Skip::SymlinkedFolder)]
    );
}

/// End to end through `diag ask` against aimock (graph.json's demo run, whose Executor
/// searches the checkout logs): a log folder holding links that lead outside, one named so
/// that it would be the first checkout match, the other a checkout folder. The outside
/// content is in no model request (aimock's journal), no byte of the store, no run file, no
/// export and no output; the tool output names both links as skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_content_reaches_no_model_request_store_run_file_or_export() {
    use crate::support::cli_env::{repo_file, TestEnv};
    use diag_testkit::Aimock;

    const KEY: &str = "sk-diag-confine-3b9e71";
    const LEAK: &str = "root:x:0:0";
    let server = Aimock::start_with("graph.json", Some(KEY));
    let mut env = TestEnv::new();
    env.set_env("DIAG_CONFINE_KEY", KEY);
    let outside_dir = env.root().join("outside");
    let secret = write(
        &outside_dir.join("passwd"),
        &format!("2026-11-30T13:59:00Z upstream returned 502 {SECRET}\n"),
    );
    let logs = env.root().join("logs");
    fs::create_dir_all(&logs).unwrap();
    for name in ["checkout-service.log", "payment-service.jsonl"] {
        fs::copy(
            repo_file(&format!("fixtures/demo/logs/{name}")),
            logs.join(name),
        )
        .unwrap();
    }
    // `checkout-a.log` sorts before `checkout-service.log`: were it read, its line would be
    // the limit-1 search's one match. The journal below counts the Executor model's own
    // turns, so the configuration does not run the plan's steps first.
    symlink(&secret, logs.join("checkout-a.log")).unwrap();
    symlink(&outside_dir, logs.join("checkout")).unwrap();
    fs::write(
        env.path("diag.toml"),
        format!(
            "[models.default]\nbase_url = {:?}\nmodel = \"diag-confine\"\n\
             api_key_env = \"DIAG_CONFINE_KEY\"\ntimeout_secs = 60\n\
             [executor]\nrun_plan_steps = false\n\
             [tools.search_logs]\npaths = [{:?}]\n\
             [tools.search_runbooks]\npaths = [{:?}]\n",
            server.base_url(),
            logs.display().to_string(),
            repo_file("fixtures/demo/runbooks").display().to_string(),
        ),
    )
    .unwrap();
    let question = "why does checkout return 502 since 14:00?";
    let ask = env.run(&[
        "--config",
        "diag.toml",
        "ask",
        question,
        "--json",
        "--record",
        "run.json",
    ]);
    ask.expect(0);
    let doc = ask.json();
    assert_eq!(doc["status"], "SUCCESS", "{doc}");
    let run_id = doc["run_id"].as_str().unwrap().to_string();

    let trace = env.run(&["trace", &run_id, "--json"]);
    trace.expect(0);
    let first = &trace.json()["tool_invocations"][0]["output"];
    let skipped: Vec<(String, String)> = first["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let file = Path::new(s["file"].as_str().unwrap());
            (
                file.file_name().unwrap().to_string_lossy().into_owned(),
                s["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        skipped.contains(&("checkout-a.log".to_string(), OUTSIDE.to_string())),
        "{first}"
    );
    assert!(
        skipped.contains(&(
            "checkout".to_string(),
            "symlinked directory not followed".to_string()
        )),
        "{first}"
    );
    assert!(
        first["matches"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with("checkout-service.log"),
        "{first}"
    );

    let export = env.run(&["export", &run_id, "-o", "export.json"]);
    export.expect(0);
    let journal = server.chat_requests(5).await;
    assert_eq!(journal.len(), 5, "five model calls");
    let mut places: Vec<(String, Vec<u8>)> = vec![
        (
            "model requests".into(),
            serde_json::to_vec(&journal).unwrap(),
        ),
        ("ask --json".into(), ask.stdout.clone().into_bytes()),
        ("trace --json".into(), trace.stdout.clone().into_bytes()),
        ("run file".into(), fs::read(env.path("run.json")).unwrap()),
        ("export".into(), fs::read(env.path("export.json")).unwrap()),
    ];
    for entry in fs::read_dir(env.db().parent().unwrap()).unwrap().flatten() {
        places.push((
            entry.path().display().to_string(),
            fs::read(entry.path()).unwrap(),
        ));
    }
    // The check can fail: the store does hold the run's own evidence.
    let holds = |bytes: &[u8], s: &str| bytes.windows(s.len()).any(|w| w == s.as_bytes());
    assert!(places
        .iter()
        .any(|(_, b)| holds(b, "upstream returned 502")));
    let leaks: Vec<&String> = places
        .iter()
        .filter(|(_, b)| holds(b, LEAK))
        .map(|(what, _)| what)
        .collect();
    assert!(leaks.is_empty(), "outside content found in {leaks:?}");
}
