//! Every scenario folder under `scenarios/` is a usable eval environment:
//! - its `scenario.toml` loads, and agrees with `docs/schema/diag_scenario_v1.json` (and so
//!   do mutations of it that break a rule: both refuse them);
//! - `search_logs` (diag's real tool) places every log line in time: no untimed line, no
//!   skipped file;
//! - its `metrics.om` backfills into a real Prometheus that diag starts on a free port;
//! - every `[[checks]]` step runs through diag's tool registry, as a model's call would, and
//!   shows its `expect`, and together they show every labelled evidence text.
//!
//! Prometheus and promtool come from `scripts/install-peers`; without them the tests fail
//! and say so.

use diag_testkit::repo;
use std::path::{Path, PathBuf};

use diag_ask::config::Config;
use diag_ask::setup::builtin_registry;
use diag_eval::env::{check_problems, run_checks, untimed_lines, ScenarioEnv};
use diag_eval::scenario::{discover, Scenario, ScenarioError};
use serde_json::{json, Value};

fn folders() -> Vec<PathBuf> {
    let found = discover(&[repo().join("scenarios")]).expect("scenarios/ holds scenario folders");
    assert!(found.skipped.is_empty(), "{:?}", found.skipped);
    let all = found.dirs;
    // Every folder in scenarios/ is a scenario: none is silently left out.
    let dirs: Vec<PathBuf> = std::fs::read_dir(repo().join("scenarios"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(
        all.len(),
        dirs.len(),
        "a folder in scenarios/ has no scenario.toml"
    );
    // The library: the checkout demo and twelve other incidents.
    assert!(all.len() >= 13, "{} scenarios", all.len());
    all
}

#[cfg(unix)]
#[test]
fn a_linked_scenario_folder_is_not_followed_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let real = repo().join("scenarios");
    let first = discover(&[real]).unwrap().dirs.remove(0);
    std::os::unix::fs::symlink(&first, d.join("linked")).unwrap();
    // Only a link: no scenario folder is found.
    assert!(matches!(
        discover(&[d.to_path_buf()]),
        Err(ScenarioError::NotScenario { .. })
    ));
    // Beside a real one: the real one runs, the link is reported.
    std::fs::create_dir(d.join("real")).unwrap();
    std::fs::write(
        d.join("real/scenario.toml"),
        std::fs::read(first.join("scenario.toml")).unwrap(),
    )
    .unwrap();
    let found = discover(&[d.to_path_buf()]).unwrap();
    assert_eq!(found.dirs, [d.join("real")]);
    assert_eq!(
        found.skipped,
        [(d.join("linked"), diag_tools::walk::Skip::SymlinkedFolder)]
    );
}

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("docs/schema/diag_scenario_v1.json")).unwrap(),
    )
    .unwrap();
    jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("diag_scenario_v1.json is a valid JSON Schema")
}

fn toml_to_json(text: &str) -> Value {
    let t: toml::Value = toml::from_str(text).unwrap();
    serde_json::to_value(t).unwrap()
}

#[test]
fn every_scenario_loads_and_its_schema_agrees() {
    let v = validator();
    for dir in folders() {
        let s = Scenario::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        let doc = toml_to_json(&std::fs::read_to_string(dir.join("scenario.toml")).unwrap());
        let errors: Vec<String> = v.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{}: {errors:?}", dir.display());
        assert_eq!(s.id(), dir.file_name().unwrap().to_str().unwrap());
        // At least one red herring, and a question that is not blank (noise is required).
        assert!(
            !s.file.label.red_herrings.is_empty(),
            "{}: no red herring",
            s.id()
        );
    }
}

/// Writes `doc` as the scenario.toml of a fresh folder named `id`, its environment paths
/// made absolute (pointing into `origin`), and loads it.
fn load_doc(origin: &Path, doc: &Value) -> Result<Scenario, ScenarioError> {
    let tmp = tempfile::tempdir().unwrap();
    let id = doc["id"].as_str().unwrap_or("x").to_string();
    let dir = tmp.path().join(if diag_eval::scenario::valid_id(&id) {
        id
    } else {
        "x".into()
    });
    std::fs::create_dir(&dir).unwrap();
    let mut doc = doc.clone();
    let abs = |v: &mut Value| {
        if let Some(s) = v.as_str() {
            *v = json!(origin.join(s).display().to_string());
        }
    };
    if let Some(env) = doc.get_mut("environment") {
        for key in ["logs", "runbooks"] {
            if let Some(Value::Array(items)) = env.get_mut(key) {
                items.iter_mut().for_each(abs);
            }
        }
        if let Some(m) = env.get_mut("metrics") {
            abs(m);
        }
    }
    let text = toml::to_string(&doc).unwrap();
    std::fs::write(dir.join("scenario.toml"), text).unwrap();
    Scenario::load(&dir)
}

/// A change to a scenario document that breaks one rule.
type Mutation = Box<dyn Fn(&mut Value)>;

#[test]
fn the_loader_refuses_what_the_schema_refuses() {
    let v = validator();
    for dir in folders() {
        let doc = toml_to_json(&std::fs::read_to_string(dir.join("scenario.toml")).unwrap());
        assert!(
            load_doc(&dir, &doc).is_ok(),
            "{}: the copy loads",
            dir.display()
        );
        let mutations: Vec<(&str, Mutation)> = vec![
            ("unknown top-level key", Box::new(|d| d["extra"] = json!(1))),
            (
                "unknown label key",
                Box::new(|d| d["label"]["cause"] = json!("x")),
            ),
            (
                "unknown check key",
                Box::new(|d| d["checks"][0]["expects"] = json!("x")),
            ),
            (
                "wrong format",
                Box::new(|d| d["format"] = json!("diag_scenario_v2")),
            ),
            (
                "missing checks",
                Box::new(|d| {
                    d.as_object_mut().unwrap().remove("checks");
                }),
            ),
            ("no checks", Box::new(|d| d["checks"] = json!([]))),
            (
                "no fault keyword",
                Box::new(|d| d["label"]["fault_keywords"] = json!([])),
            ),
            (
                "no evidence",
                Box::new(|d| d["label"]["evidence"] = json!([])),
            ),
            (
                "unknown evidence tool",
                Box::new(|d| d["label"]["evidence"][0]["tool"] = json!("grep")),
            ),
            ("bad now", Box::new(|d| d["now"] = json!("yesterday"))),
            (
                "bad window start",
                Box::new(|d| d["label"]["window"]["start"] = json!("2026-11-30 14:00")),
            ),
            ("blank question", Box::new(|d| d["question"] = json!("  "))),
            (
                "no logs",
                Box::new(|d| d["environment"]["logs"] = json!([])),
            ),
            (
                "logs not a list",
                Box::new(|d| d["environment"]["logs"] = json!("logs")),
            ),
            (
                "component not text",
                Box::new(|d| d["label"]["component"] = json!(3)),
            ),
            (
                "missing window",
                Box::new(|d| {
                    d["label"].as_object_mut().unwrap().remove("window");
                }),
            ),
        ];
        for (what, mutate) in mutations {
            let mut m = doc.clone();
            mutate(&mut m);
            assert!(
                !v.is_valid(&m),
                "{}: the schema takes {what}",
                dir.display()
            );
            let err = load_doc(&dir, &m).err();
            let err = err.unwrap_or_else(|| panic!("{}: the loader takes {what}", dir.display()));
            let line = err.to_string();
            assert!(
                line.contains("scenario.toml") && !line.contains('\n'),
                "{what}: {line}"
            );
        }
    }
}

#[test]
fn loader_errors_name_the_file_and_the_key() {
    let dir = repo().join("scenarios/checkout-502-payment-pool");
    let mut doc = toml_to_json(&std::fs::read_to_string(dir.join("scenario.toml")).unwrap());
    doc["label"]["window"]["start"] = json!("2026-11-30T15:00:00Z");
    let e = load_doc(&dir, &doc).unwrap_err().to_string();
    assert!(
        e.contains("key `label.window`") && e.contains("before"),
        "{e}"
    );
    let mut doc2 = toml_to_json(&std::fs::read_to_string(dir.join("scenario.toml")).unwrap());
    doc2["label"]["red_herrings"][0]["colour"] = json!("red");
    let e = load_doc(&dir, &doc2).unwrap_err().to_string();
    assert!(
        e.contains("label.red_herrings") && e.contains("colour"),
        "{e}"
    );
    let missing = Scenario::load(&repo().join("scenarios/no-such-scenario")).unwrap_err();
    assert!(
        missing.to_string().contains("no such scenario folder"),
        "{missing}"
    );
}

/// One Prometheus per scenario with metrics, started and stopped by diag's own code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_environment_finds_its_evidence_with_the_real_tools() {
    for dir in folders() {
        let s = Scenario::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        let env = ScenarioEnv::start(&s, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            env.prometheus.is_some(),
            s.file.environment.metrics.is_some(),
            "{}",
            s.id()
        );
        let config = Config {
            tools: env.tools.clone(),
            ..Config::default()
        };
        let registry = builtin_registry(&config).unwrap();

        let (matched, untimed, skipped) = untimed_lines(&s, &registry).await;
        assert!(matched > 0, "{}: search_logs read no line", s.id());
        assert_eq!(
            untimed,
            0,
            "{}: {untimed} log lines have no time search_logs reads",
            s.id()
        );
        assert!(skipped.is_empty(), "{}: files skipped: {skipped:?}", s.id());

        let runs = run_checks(&s, &registry).await;
        assert_eq!(runs.len(), s.file.checks.len());
        // A metrics check is answered by the backfilled history, not by an empty result.
        for r in runs.iter().filter(|r| r.tool == "query_metrics") {
            let result = r.output["result"].as_array();
            assert!(
                result.is_some_and(|a| !a.is_empty()),
                "{}: checks[{}] found no series: {}",
                s.id(),
                r.index,
                r.output
            );
        }
        let problems = check_problems(&s, &runs);
        env.stop().await;
        assert!(problems.is_empty(), "{}:\n{}", s.id(), problems.join("\n"));
    }
}
