//! `diag eval` end to end: the real binary against aimock (scripted answers per model, in
//! `tests/fixtures/aimock/eval.json`) over the checkout scenario, whose Prometheus diag
//! backfills and starts itself. Three models give three runs with known scores: one correct
//! and grounded, one correct but ungrounded, one fooled by the red herring. The printed
//! tables and the `--json` document say exactly that; `--record` makes a suite that
//! `diag replay` passes; bad input is one stderr line and exit 2.

use serde_json::Value;

use crate::support::cli_env;
use cli_env::{assert_schema, repo_file, TestEnv};
use diag_testkit::Aimock;

const KEY: &str = "sk-diag-eval-key-7d21a9";
const KEY_VAR: &str = "DIAG_EVAL_KEY";

fn scenario() -> String {
    repo_file("scenarios/checkout-502-payment-pool")
        .display()
        .to_string()
}

/// Three models on one server; only `grounded` has prices.
fn eval_env(server: &Aimock) -> TestEnv {
    let mut env = TestEnv::new();
    env.set_env(KEY_VAR, KEY);
    let model = |name: &str, prices: &str| {
        format!(
            "[models.{name}]\nbase_url = {:?}\nmodel = \"eval-{name}\"\napi_key_env = {KEY_VAR:?}\n\
             timeout_secs = 30\n{prices}\n",
            server.base_url()
        )
    };
    let text = [
        model(
            "grounded",
            "price_per_1k_prompt = 1.0\nprice_per_1k_completion = 2.0",
        ),
        model("ungrounded", ""),
        model("fooled", ""),
        "[agents]\ndefault = \"grounded\"\n".to_string(),
        // The models' scores and figures come from their own scripted tool calls.
        "[executor]\nrun_plan_steps = false\n".to_string(),
    ]
    .concat();
    std::fs::write(env.path("diag.toml"), text).unwrap();
    env
}

const MODELS: [&str; 3] = ["grounded", "ungrounded", "fooled"];

fn eval_args<'a>(extra: &[&'a str], scenario: &'a str) -> Vec<&'a str> {
    let mut args = vec!["--config", "diag.toml", "eval", scenario];
    for m in MODELS {
        args.extend(["--model", m]);
    }
    args.extend(extra);
    args
}

/// The data row of the table printed for `model`, split on runs of spaces.
fn row<'a>(stdout: &'a str, model: &str) -> Vec<&'a str> {
    let mut lines = stdout.lines();
    lines
        .find(|l| *l == format!("model {model}"))
        .unwrap_or_else(|| panic!("no table for {model}:\n{stdout}"));
    let heading = lines.next().unwrap();
    assert!(heading.starts_with("scenario  "), "{heading}");
    lines
        .next()
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

#[test]
fn three_models_score_grounded_ungrounded_and_fooled_in_tables_json_and_a_replayable_suite() {
    let server = Aimock::start_with("eval.json", Some(KEY));
    let env = eval_env(&server);
    let s = scenario();

    let out = env.run(&eval_args(
        &["--record", "rec", "--report-dir", "reports"],
        &s,
    ));
    out.expect(0).quiet_stderr();
    // scenario runs grounded ungrounded partial fooled fallback failed verdict tokens calls wall cost
    let g = row(&out.stdout, "grounded");
    assert_eq!(
        g[..11],
        [
            "checkout-502-payment-pool",
            "1",
            "1/1",
            "0/1",
            "0/1",
            "0/1",
            "0/1",
            "0/1",
            "PASS",
            "5030",
            "5.0"
        ]
    );
    // (600+700+1500+900+500) prompt tokens at 1.0 and (150+60+300+200+120) at 2.0 per 1,000.
    assert_eq!(g[12], "5.8600");
    let u = row(&out.stdout, "ungrounded");
    assert_eq!(
        u[1..9],
        ["1", "0/1", "1/1", "0/1", "0/1", "0/1", "0/1", "PASS"]
    );
    assert_eq!(u[12], "-");
    let f = row(&out.stdout, "fooled");
    assert_eq!(
        f[1..9],
        ["1", "0/1", "0/1", "0/1", "1/1", "0/1", "0/1", "PASS"]
    );
    assert!(
        out.stdout
            .ends_with("3 run(s) over 1 scenario(s) and 3 model(s); 1 grounded; runs are stored (diag runs, diag trace RUN_ID)\n"),
        "{}",
        out.stdout
    );

    // Every run is stored, and its report and run file written.
    let runs = env.run(&["runs", "--json"]);
    runs.expect(0);
    assert_eq!(runs.json()["runs"].as_array().unwrap().len(), 3);
    for m in MODELS {
        assert!(env
            .path(&format!("reports/checkout-502-payment-pool/{m}-1.html"))
            .is_file());
        assert!(env
            .path(&format!("rec/checkout-502-payment-pool/{m}-1.json"))
            .is_file());
    }
    let summary = std::fs::read_to_string(env.path("reports/eval.md")).unwrap();
    assert!(summary.contains("## model `fooled`"), "{summary}");
    drop(server);

    // The recorded eval is a regression suite, offline.
    let replay = env.run(&["replay", "rec"]);
    replay.expect(0).quiet_stderr();
    assert!(
        replay.stdout.ends_with("3 passed, 0 failed\n"),
        "{}",
        replay.stdout
    );
}

#[test]
fn the_json_document_carries_every_run_with_its_score() {
    let server = Aimock::start_with("eval.json", Some(KEY));
    let env = eval_env(&server);
    let s = scenario();
    let out = env.run(&eval_args(&["--json", "--repeat", "2"], &s));
    out.expect(0).quiet_stderr();
    let doc: Value = out.json();
    assert_schema("eval.v1.json", &doc);
    assert_eq!(doc["schema"], "diag.eval.v1");
    assert_eq!(doc["repeat"], 2);
    assert_eq!(doc["scenarios"][0]["id"], "checkout-502-payment-pool");
    assert_eq!(doc["scenarios"][0]["now"], "2026-11-30T14:11:00.000Z");
    assert_eq!(doc["not_grounded"], 4);
    let models = doc["models"].as_array().unwrap();
    let names: Vec<&str> = models
        .iter()
        .map(|m| m["model"].as_str().unwrap())
        .collect();
    assert_eq!(names, MODELS);
    let expected = [
        ("grounded", (true, false, false), "grounded"),
        ("ungrounded", (false, true, false), "named_ungrounded"),
        ("fooled", (false, false, true), "fooled"),
    ];
    for (m, (name, (grounded, ungrounded, fooled), outcome)) in models.iter().zip(expected) {
        assert_eq!(m["model"], name);
        let cell = &m["scenarios"][0];
        let runs = cell["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{name}");
        for (i, r) in runs.iter().enumerate() {
            assert_eq!(r["repeat"], i + 1);
            assert_eq!(r["status"], "SUCCESS");
            assert_eq!(r["effective_verdict"], "PASS");
            assert_eq!(r["degraded"], false);
            let sc = &r["score"];
            assert_eq!(sc["outcome"], outcome, "{name}");
            assert_eq!(sc["grounded"], grounded, "{name}");
            assert_eq!(sc["named_ungrounded"], ungrounded, "{name}");
            assert_eq!(sc["fooled"], fooled, "{name}");
            assert_eq!(sc["fallback"], false);
            assert_eq!(sc["failed"], false);
            assert_eq!(r["prompt_tokens"], 4200);
            assert_eq!(r["completion_tokens"], 830);
            assert_eq!(r["model_calls"], 5);
            assert_eq!(r["tool_calls"], 3);
        }
        let a = &cell["aggregate"];
        assert_eq!(a["runs"], 2);
        assert_eq!(a["grounded"], if grounded { 2 } else { 0 });
        assert_eq!(a["named_ungrounded"], if ungrounded { 2 } else { 0 });
        assert_eq!(a["fooled"], if fooled { 2 } else { 0 });
        assert_eq!(a["outcomes"][outcome], 2);
        assert_eq!(a["verdicts"]["PASS"], 2);
        assert_eq!(a["tokens"]["mean"], 5030.0);
        assert_eq!(a["tokens"]["sd"], 0.0);
        assert_eq!(a["score"]["mean"], if grounded { 1.0 } else { 0.0 });
    }
    assert_eq!(
        models[0]["scenarios"][0]["runs"][0]["score"]["grounding_claims"][0],
        "c2"
    );
    assert_eq!(
        models[2]["scenarios"][0]["runs"][0]["score"]["fooled_by"],
        "fraud-service"
    );
    assert!(
        (models[0]["scenarios"][0]["aggregate"]["cost"]["mean"]
            .as_f64()
            .unwrap()
            - 5.86)
            .abs()
            < 1e-9
    );
    assert!(models[1]["scenarios"][0]["aggregate"]["cost"].is_null());

    // --strict: runs that were not grounded make the eval exit 4, after the output.
    let strict = env.run(&eval_args(&["--json", "--strict"], &s));
    strict.expect(4);
    assert_schema("eval.v1.json", &strict.json());
    assert_eq!(
        strict.one_error_line(),
        "diag: --strict: 2 of 3 run(s) did not reach a grounded root cause"
    );
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let server = Aimock::start_with("eval.json", Some(KEY));
    let env = eval_env(&server);
    let s = scenario();

    let missing = env.run(&["--config", "diag.toml", "eval", "no-such-folder"]);
    missing.expect(2);
    assert_eq!(
        missing.one_error_line(),
        "diag: no-such-folder: no such scenario folder"
    );
    assert!(missing.stdout.is_empty());

    std::fs::create_dir_all(env.path("broken/bad-one")).unwrap();
    std::fs::write(
        env.path("broken/bad-one/scenario.toml"),
        "format = \"diag_scenario_v1\"\nid = \n",
    )
    .unwrap();
    let malformed = env.run(&["--config", "diag.toml", "eval", "broken"]);
    malformed.expect(2);
    let line = malformed.one_error_line();
    assert!(
        line.starts_with("diag: scenario broken/bad-one/scenario.toml: line 2: "),
        "{line}"
    );

    std::fs::write(
        env.path("broken/bad-one/scenario.toml"),
        std::fs::read_to_string(repo_file(
            "scenarios/checkout-502-payment-pool/scenario.toml",
        ))
        .unwrap()
        .replace(
            "id = \"checkout-502-payment-pool\"",
            "id = \"bad-one\"\nseverity = 3",
        ),
    )
    .unwrap();
    let unknown_key = env.run(&["--config", "diag.toml", "eval", "broken/bad-one"]);
    unknown_key.expect(2);
    let line = unknown_key.one_error_line();
    assert!(
        line.starts_with(
            "diag: scenario broken/bad-one/scenario.toml: key `severity`: unknown key"
        ),
        "{line}"
    );

    let unknown_model = env.run(&["--config", "diag.toml", "eval", &s, "--model", "gpt-9"]);
    unknown_model.expect(2);
    assert_eq!(
        unknown_model.one_error_line(),
        "diag: --model gpt-9: no [models.gpt-9] in config diag.toml (configured: fooled, grounded, ungrounded)"
    );

    let zero = env.run(&["--config", "diag.toml", "eval", &s, "--repeat", "0"]);
    zero.expect(2);
    // Nothing ran.
    assert_eq!(server_chat_count(&server), 0);
}

fn server_chat_count(server: &Aimock) -> usize {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(server.journal())
        .iter()
        .filter(|e| {
            e["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/chat/completions"))
        })
        .count()
}

/// `eval --report` and `--record` write as every output file is written (openspec/specs/cli,
/// "Writing an output file"): a link is written through and stays a link, a FIFO is written
/// in place and stays a FIFO, a link to nothing is one line and exit 2.
#[cfg(unix)]
#[test]
fn eval_writes_its_files_through_links_and_into_fifos_and_refuses_a_dangling_link() {
    use std::os::unix::fs::{symlink, FileTypeExt};
    let server = Aimock::start_with("eval.json", Some(KEY));
    let env = eval_env(&server);
    let s = scenario();
    let scen = "checkout-502-payment-pool";
    std::fs::create_dir_all(env.path(&format!("reports/{scen}"))).unwrap();
    std::fs::create_dir_all(env.path(&format!("rec/{scen}"))).unwrap();
    std::fs::write(env.path("summary.md"), "old").unwrap();
    symlink(env.path("summary.md"), env.path("reports/eval.md")).unwrap();
    std::fs::write(env.path("report.html"), "old").unwrap();
    symlink(
        env.path("report.html"),
        env.path(&format!("reports/{scen}/grounded-1.html")),
    )
    .unwrap();
    let fifo = env.path(&format!("rec/{scen}/grounded-1.json"));
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: the path is a valid NUL-terminated string for the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let args = [
        "--config",
        "diag.toml",
        "eval",
        &s,
        "--model",
        "grounded",
        "--record",
        "rec",
        // The old name of --report-dir, still taken.
        "--report",
        "reports",
    ];
    env.run(&args).expect(0).quiet_stderr();
    let recorded: Value = serde_json::from_slice(&reader.join().unwrap()).unwrap();
    assert_eq!(recorded["expected"]["status"], "SUCCESS", "{recorded}");
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    for (link, target, marker) in [
        ("reports/eval.md", "summary.md", "## model `grounded`"),
        (
            &format!("reports/{scen}/grounded-1.html"),
            "report.html",
            "<html",
        ),
    ] {
        assert!(std::fs::symlink_metadata(env.path(link))
            .unwrap()
            .file_type()
            .is_symlink());
        let written = std::fs::read_to_string(env.path(target)).unwrap();
        assert!(written.contains(marker), "{target}: {written:.200}");
    }

    // The FIFO has no reader now: the second run records into a plain file.
    std::fs::remove_file(&fifo).unwrap();
    std::fs::remove_file(env.path("reports/eval.md")).unwrap();
    symlink(env.path("nowhere/eval.md"), env.path("reports/eval.md")).unwrap();
    let refused = env.run(&args);
    refused.expect(2);
    let line = refused.one_error_line();
    assert!(
        line.contains("it is a link to a file that does not exist"),
        "{line}"
    );
    assert!(!env.path("nowhere").exists());
}
