//! `diag replay` at CI scale: `--jobs N` (parallel, output in file order, the same store as one
//! job), `--shard K/N` (a stable split by path) and `--junit FILE` (JUnit XML, validated with
//! xmllint against Jenkins' junit-10.xsd under tests/fixtures/junit/).
//!
//! Nothing here depends on timing: parallel runs are compared by their results, never by how
//! long they took or in which order they finished.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::support::cli_env::{apply_filters, id_filters, repo_file, Out, TestEnv};
use diag_testkit::read_json;

const PASS: &str = "tests/fixtures/runs/pass.json";

/// Copies a repository folder into the test's working directory, recursively.
fn copy_tree(env: &TestEnv, from: &str, to: &str) {
    fn walk(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap().flatten() {
            let p = e.path();
            let dest = to.join(e.file_name());
            if p.is_dir() {
                walk(&p, &dest);
            } else {
                std::fs::copy(&p, &dest).unwrap();
            }
        }
    }
    walk(&repo_file(from), &env.path(to));
}

fn write_json(path: &Path, value: &Value) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap() + "\n").unwrap();
}

/// The `file` of each entry of a `replay --json` document, in order.
fn files_of(doc: &Value) -> Vec<String> {
    doc["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files in {doc}"))
        .iter()
        .map(|f| f["file"].as_str().unwrap().to_string())
        .collect()
}

fn replay_json(env: &TestEnv, args: &[&str]) -> (Out, Value) {
    let mut all = vec!["replay", "--json"];
    all.extend_from_slice(args);
    let out = env.run(&all);
    let doc = out.json();
    (out, doc)
}

/// `xmllint`, which the test command installs (scripts/install-peers): missing, the test
/// fails rather than skipping the schema check.
fn xmllint(args: &[&str]) -> std::process::Output {
    Command::new("xmllint")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "xmllint cannot be run ({e}): install libxml2-utils (scripts/install-peers does)"
            )
        })
}

/// Validates a JUnit document against the JUnit schema CI tools use.
#[track_caller]
fn assert_valid_junit(file: &Path) {
    let schema = repo_file("tests/fixtures/junit/junit-10.xsd");
    let out = xmllint(&[
        "--noout",
        "--schema",
        schema.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{} does not validate against junit-10.xsd:\n{}\n{}",
        file.display(),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(file).unwrap_or_default()
    );
}

/// An XPath expression evaluated by xmllint, as a string.
fn xpath(file: &Path, expr: &str) -> String {
    let out = xmllint(&["--xpath", expr, file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "xmllint --xpath {expr}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // xmllint ends a string result with a newline.
    let text = String::from_utf8(out.stdout).unwrap();
    text.strip_suffix('\n').unwrap_or(&text).to_string()
}

// ---------------------------------------------------------------------------------------------
// --shard

#[test]
fn three_shards_together_replay_every_fixture_exactly_once() {
    let env = TestEnv::new();
    copy_tree(&env, "fixtures", "fixtures");
    let (out, all) = replay_json(&env, &["fixtures"]);
    out.expect(0);
    let every = files_of(&all);
    assert!(every.len() >= 40, "{} files", every.len());

    let mut seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut sizes = Vec::new();
    for k in 1..=3u64 {
        let (out, doc) = replay_json(&env, &["fixtures", "--shard", &format!("{k}/3")]);
        out.expect(0).quiet_stderr();
        let files = files_of(&doc);
        sizes.push(files.len());
        // A shard keeps the files' order.
        let mut in_order = files.clone();
        in_order.sort_by_key(|f| every.iter().position(|e| e == f));
        assert_eq!(files, in_order);
        for f in files {
            seen.entry(f).or_default().push(k);
        }
    }
    let union: Vec<&String> = seen.keys().collect();
    let mut expected: Vec<&String> = every.iter().collect();
    expected.sort();
    assert_eq!(union, expected, "the shards' union is not the whole set");
    for (f, shards) in &seen {
        assert_eq!(shards.len(), 1, "{f} is in shards {shards:?}");
    }
    assert!(sizes.iter().all(|&n| n > 0), "{sizes:?}");
}

#[test]
fn a_files_shard_does_not_depend_on_the_order_or_spelling_of_the_arguments() {
    let env = TestEnv::new();
    copy_tree(&env, "fixtures/runs", "suite");
    let mut names: Vec<String> = std::fs::read_dir(env.path("suite"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .map(|n| format!("suite/{n}"))
        .collect();
    names.sort();
    let mut reversed = names.clone();
    reversed.reverse();
    let absolute: Vec<String> = names
        .iter()
        .map(|n| env.path(n).display().to_string())
        .collect();
    let dotted: Vec<String> = names.iter().map(|n| format!("./{n}")).collect();

    for k in 1..=3 {
        let shard = format!("{k}/3");
        let set = |files: &[String]| -> Vec<String> {
            let mut args: Vec<&str> = vec!["--shard", &shard];
            args.extend(files.iter().map(String::as_str));
            let (out, doc) = replay_json(&env, &args);
            out.expect(0);
            // Compared as the relative path the shard is computed from.
            let root = format!("{}/", env.work().display());
            let mut got: Vec<String> = files_of(&doc)
                .into_iter()
                .map(|f| {
                    f.trim_start_matches(&root)
                        .trim_start_matches("./")
                        .to_string()
                })
                .collect();
            got.sort();
            got
        };
        let sorted = set(&names);
        assert_eq!(sorted, set(&reversed), "shard {shard}: reversed order");
        assert_eq!(sorted, set(&absolute), "shard {shard}: absolute paths");
        assert_eq!(sorted, set(&dotted), "shard {shard}: ./ paths");
        // The folder named instead of its files: the same shard.
        let (out, doc) = replay_json(&env, &["--shard", &shard, "suite"]);
        out.expect(0);
        let mut from_folder = files_of(&doc);
        from_folder.sort();
        assert_eq!(sorted, from_folder, "shard {shard}: the folder");
    }
}

#[test]
fn an_empty_shard_prints_an_empty_summary_and_exits_0() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "only.json");
    let mut empty = 0;
    let mut holding = 0;
    for k in 1..=5 {
        let shard = format!("{k}/5");
        let junit = env.path(&format!("junit-{k}.xml"));
        let out = env.run(&[
            "replay",
            "only.json",
            "--shard",
            &shard,
            "--junit",
            junit.to_str().unwrap(),
        ]);
        out.expect(0).quiet_stderr();
        assert_valid_junit(&junit);
        if out.stdout.ends_with("0 passed, 0 failed\n") {
            empty += 1;
            assert_eq!(xpath(&junit, "string(/testsuites/testsuite/@tests)"), "0");
        } else {
            holding += 1;
            assert!(
                out.stdout.ends_with("1 passed, 0 failed\n"),
                "{}",
                out.stdout
            );
            assert_eq!(xpath(&junit, "string(/testsuites/testsuite/@tests)"), "1");
        }
    }
    assert_eq!((holding, empty), (1, 4));
}

// ---------------------------------------------------------------------------------------------
// --junit

#[test]
fn junit_of_a_green_set_validates_and_lists_every_file_in_order() {
    let env = TestEnv::new();
    copy_tree(&env, "tests/fixtures/runs", "runs");
    let junit = env.path("out/junit.xml");
    std::fs::create_dir_all(env.path("out")).unwrap();
    let (out, doc) = replay_json(&env, &["runs", "--junit", "out/junit.xml", "--jobs", "2"]);
    out.expect(0).quiet_stderr();
    assert_valid_junit(&junit);
    let files = files_of(&doc);
    assert_eq!(files.len(), 4);
    let suite = "/testsuites/testsuite";
    assert_eq!(xpath(&junit, &format!("string({suite}/@tests)")), "4");
    assert_eq!(xpath(&junit, &format!("string({suite}/@failures)")), "0");
    assert_eq!(xpath(&junit, &format!("string({suite}/@errors)")), "0");
    assert_eq!(xpath(&junit, "string(/testsuites/@tests)"), "4");
    assert_eq!(xpath(&junit, "count(//failure | //error)"), "0");
    for (i, f) in files.iter().enumerate() {
        let case = format!("{suite}/testcase[{}]", i + 1);
        assert_eq!(&xpath(&junit, &format!("string({case}/@name)")), f);
        assert_eq!(
            xpath(&junit, &format!("string({case}/@classname)")),
            "diag.replay"
        );
    }
}

#[test]
fn junit_of_a_failing_set_validates_with_a_failure_per_mismatch_or_divergence_and_an_error_per_unreadable_file(
) {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "set/a_pass.json");
    let original = read_json(&repo_file(PASS));
    let mut wrong = original.clone();
    wrong["expected"]["answer"] = json!("payment-service is fine & <healthy>.");
    wrong["expected"]["effective_verdict"] = json!("LOW_CONFID");
    write_json(&env.path("set/b_wrong.json"), &wrong);
    let mut diverge = original.clone();
    let tool = diverge["exchanges"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|x| x["kind"] == "tool")
        .unwrap();
    tool["arguments"]["query"] = json!("HTTP 503");
    write_json(&env.path("set/c_diverge.json"), &diverge);
    let text = std::fs::read_to_string(repo_file(PASS)).unwrap();
    std::fs::write(env.path("set/d_truncated.json"), &text[..text.len() / 3]).unwrap();

    let junit = env.path("junit.xml");
    let out = env.run(&["replay", "set", "--junit", "junit.xml"]);
    out.expect(5);
    assert_eq!(
        out.one_error_line(),
        "diag: 3 of 4 run file(s) did not reproduce"
    );
    assert_valid_junit(&junit);
    let suite = "/testsuites/testsuite";
    assert_eq!(xpath(&junit, &format!("string({suite}/@tests)")), "4");
    assert_eq!(xpath(&junit, &format!("string({suite}/@failures)")), "2");
    assert_eq!(xpath(&junit, &format!("string({suite}/@errors)")), "1");
    assert_eq!(xpath(&junit, "count(//testcase/failure)"), "2");
    assert_eq!(xpath(&junit, "count(//testcase/error)"), "1");
    let case = |name: &str| format!("{suite}/testcase[@name='set/{name}']");
    assert_eq!(
        xpath(&junit, &format!("count({}/*)", case("a_pass.json"))),
        "0"
    );
    // The failure message names the first mismatch (the table's first one too).
    let message = xpath(
        &junit,
        &format!("string({}/failure/@message)", case("b_wrong.json")),
    );
    assert!(
        message.starts_with("effective_verdict: expected LOW_CONFID, got PASS"),
        "{message}"
    );
    assert_eq!(
        xpath(
            &junit,
            &format!("string({}/failure/@type)", case("b_wrong.json"))
        ),
        "mismatch"
    );
    // Every mismatch is in the failure's text, escaped and read back intact.
    let details = xpath(&junit, &format!("string({}/failure)", case("b_wrong.json")));
    assert!(
        details.contains("expected: payment-service is fine & <healthy>."),
        "{details}"
    );
    let message = xpath(
        &junit,
        &format!("string({}/failure/@message)", case("c_diverge.json")),
    );
    assert!(
        message.starts_with("diverged at exchange 2: tool search_logs called with other arguments"),
        "{message}"
    );
    assert_eq!(
        xpath(
            &junit,
            &format!("string({}/failure/@type)", case("c_diverge.json"))
        ),
        "divergence"
    );
    let message = xpath(
        &junit,
        &format!("string({}/error/@message)", case("d_truncated.json")),
    );
    assert!(message.contains("d_truncated.json"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// --jobs

/// Every stored run of a replay, by file: its export and its printed trace, ids and times
/// normalised.
fn stored_by_file(env: &TestEnv, db: &Path, doc: &Value) -> BTreeMap<String, (String, String)> {
    let db = db.to_str().unwrap();
    let filters = id_filters();
    let mut out = BTreeMap::new();
    for f in doc["files"].as_array().unwrap() {
        let file = f["file"].as_str().unwrap().to_string();
        let run_id = f["run_id"].as_str().unwrap_or_else(|| panic!("{f}"));
        let export = env.run(&["--db", db, "export", run_id]);
        export.expect(0);
        let trace = env.run(&["--db", db, "trace", run_id]);
        trace.expect(0);
        out.insert(
            file,
            (
                apply_filters(&filters, &export.stdout),
                apply_filters(&filters, &trace.stdout),
            ),
        );
    }
    out
}

#[test]
fn two_jobs_and_one_job_give_the_same_store_and_the_same_summaries() {
    let env = TestEnv::new();
    copy_tree(&env, "fixtures", "fixtures");
    let one = env.path("one.db");
    let two = env.path("two.db");
    let filters = id_filters();
    let mut docs = Vec::new();
    let mut tables = Vec::new();
    for (db, jobs) in [(&one, "1"), (&two, "2")] {
        let db_arg = db.to_str().unwrap();
        let out = env.run(&["--db", db_arg, "replay", "fixtures", "--jobs", jobs]);
        out.expect(0).quiet_stderr();
        tables.push(out.stdout.clone());
        let out = env.run(&[
            "--db", db_arg, "replay", "fixtures", "--jobs", jobs, "--json",
        ]);
        out.expect(0);
        docs.push(out.json());
    }
    assert_eq!(tables[0], tables[1], "the summary tables differ");
    let norm = |d: &Value| apply_filters(&filters, &serde_json::to_string_pretty(d).unwrap());
    assert_eq!(norm(&docs[0]), norm(&docs[1]), "the JSON summaries differ");

    let a = stored_by_file(&env, &one, &docs[0]);
    let b = stored_by_file(&env, &two, &docs[1]);
    assert_eq!(a.len(), files_of(&docs[0]).len());
    for (file, (export, trace)) in &a {
        let (export2, trace2) = &b[file];
        assert_eq!(export, export2, "{file}: exports differ");
        assert_eq!(trace, trace2, "{file}: traces differ");
    }
    // Both stores hold the same number of runs (two replays of every file).
    let count = |db: &PathBuf| {
        let out = env.run(&[
            "--db",
            db.to_str().unwrap(),
            "runs",
            "--json",
            "--limit",
            "1000",
        ]);
        out.expect(0);
        out.json()["runs"].as_array().map(Vec::len)
    };
    assert_eq!(count(&one), count(&two));
    assert_eq!(count(&one), Some(2 * a.len()));
}

#[test]
fn output_follows_the_file_order_under_four_jobs_whatever_the_lengths() {
    let env = TestEnv::new();
    // Long and short runs interleaved, named so that neither sorted nor reversed order is
    // the order given.
    let long = "fixtures/runs/longest_path.json";
    let short = "fixtures/runs/planner_non_retryable.json";
    let mut args: Vec<String> = Vec::new();
    for i in 0..12 {
        let (from, name) = if i % 3 == 0 {
            (long, format!("m{:02}_long.json", (i * 7) % 12))
        } else {
            (short, format!("m{:02}_short.json", (i * 7) % 12))
        };
        env.copy_fixture(from, &name);
        args.push(name);
    }
    let mut with_jobs: Vec<&str> = vec!["--jobs", "4"];
    with_jobs.extend(args.iter().map(String::as_str));
    let (out, doc) = replay_json(&env, &with_jobs);
    out.expect(0);
    assert_eq!(files_of(&doc), args);

    let mut table_args = vec!["replay"];
    table_args.extend(with_jobs.iter().copied());
    let out = env.run(&table_args);
    out.expect(0);
    let listed: Vec<&str> = out
        .stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.ends_with(".json"))
        .collect();
    assert_eq!(listed, args);
}

// ---------------------------------------------------------------------------------------------
// Usage errors

#[test]
fn bad_jobs_and_shard_values_are_one_line_usage_errors() {
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    for (args, says) in [
        (vec!["--jobs", "0"], "--jobs 0"),
        (vec!["--jobs", "x"], "--jobs x"),
        (vec!["--jobs=-2"], "--jobs -2"),
        (vec!["--shard", "0/3"], "--shard 0/3"),
        (vec!["--shard", "4/3"], "--shard 4/3"),
        (vec!["--shard", "x"], "--shard x"),
        (vec!["--shard", "1/0"], "--shard 1/0"),
    ] {
        let mut all = vec!["replay", "pass.json"];
        all.extend(args.iter().copied());
        let out = env.run(&all);
        out.expect(2);
        let line = out.one_error_line();
        assert!(line.starts_with(&format!("diag: {says}: ")), "{line}");
        assert!(out.stdout.is_empty(), "{}", out.stdout);
    }
}

#[test]
fn help_and_completions_offer_the_ci_options() {
    let env = TestEnv::new();
    let help = env.run(&["replay", "--help"]);
    help.expect(0).quiet_stderr();
    for opt in ["--jobs <N>", "--shard <K/N>", "--junit <FILE>"] {
        assert!(help.stdout.contains(opt), "{opt}:\n{}", help.stdout);
    }
    let bash = env.run(&["completions", "bash"]);
    bash.expect(0).quiet_stderr();
    for opt in ["--jobs", "--shard", "--junit"] {
        assert!(bash.stdout.contains(opt), "{opt}");
    }
}
