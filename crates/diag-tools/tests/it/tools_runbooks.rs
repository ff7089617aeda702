//! `search_runbooks` over Markdown folders in temporary directories: sensible, deterministic
//! ranking, section splitting, bounds, and folders that misbehave.

use std::fs;
use std::path::{Path, PathBuf};

use diag_core::clock::{FixedClock, Timestamp};
use diag_core::tools::{Tool, ToolContext, ToolError};
use diag_tools::{RunbookSearchLimits, SearchRunbooks};
use serde_json::{json, Value};
use tempfile::TempDir;

fn write(dir: &Path, rel: &str, content: &str) -> PathBuf {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, content).unwrap();
    path
}

fn run(tool: &SearchRunbooks, args: Value) -> Result<Value, ToolError> {
    let clock = FixedClock(Timestamp::from_unix_ms(0));
    let cx = ToolContext { clock: &clock };
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(tool.call(&args, &cx))
}

/// (file name, heading) of each hit, best first.
fn ranked(out: &Value) -> Vec<(String, String)> {
    out["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let name = Path::new(h["path"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (name, h["heading"].as_str().unwrap().to_string())
        })
        .collect()
}

fn library() -> TempDir {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    write(
        d,
        "runbooks/checkout-502.md",
        "# Checkout returns 502\n\
         Checkout answers HTTP 502 when an upstream it calls fails.\n\
         \n\
         ## Symptoms\n\
         Error rate of checkout-service above 1%, status code 502 in the access log.\n\
         \n\
         ## Mitigation\n\
         Check the payment connection pool: if active connections equal the pool size, \
         raise the pool size or restart payment.\n\
         ```sh\n\
         # this comment is not a heading\n\
         kubectl rollout restart deploy/payment\n\
         ```\n",
    );
    write(
        d,
        "runbooks/payment/database.md",
        "# Payment database\n\
         ## Connection pool exhausted\n\
         Symptoms: payment_pool_active_connections equals payment_pool_max_connections; \
         requests wait for a connection and time out. Raise the pool size.\n\
         ## Slow queries\n\
         Look at the slow query log.\n",
    );
    write(
        d,
        "runbooks/disk.md",
        "# Disk full\nFree space on the node; rotate logs.\n",
    );
    write(
        d,
        "runbooks/notes.txt",
        "checkout 502 connection pool (not Markdown)\n",
    );
    dir
}

#[test]
fn ranking_is_sensible() {
    let dir = library();
    let tool = SearchRunbooks::new(
        vec![dir.path().join("runbooks")],
        RunbookSearchLimits::default(),
    );
    let out = run(&tool, json!({"query": "connection pool exhausted"})).unwrap();
    let r = ranked(&out);
    assert_eq!(
        r[0],
        ("database.md".into(), "Connection pool exhausted".into())
    );
    assert!(
        r.iter().all(|(f, _)| f != "notes.txt" && f != "disk.md"),
        "{r:?}"
    );

    let out = run(&tool, json!({"query": "checkout 502"})).unwrap();
    let r = ranked(&out);
    assert_eq!(r[0].0, "checkout-502.md");
    assert!(r.iter().all(|(f, _)| f == "checkout-502.md"), "{r:?}");

    // The file name and the parent heading count: "mitigation" for checkout finds the
    // Mitigation section of checkout-502.md, not only sections that say "checkout".
    let out = run(&tool, json!({"query": "checkout mitigation"})).unwrap();
    assert_eq!(
        ranked(&out)[0],
        ("checkout-502.md".into(), "Mitigation".into())
    );

    let hit = &out["hits"][0];
    assert!(hit["text"]
        .as_str()
        .unwrap()
        .contains("kubectl rollout restart"));
    assert!(hit["text"]
        .as_str()
        .unwrap()
        .contains("# this comment is not a heading"));
    assert!(hit["score"].as_f64().unwrap() > 0.0);
    let keys: Vec<&String> = hit.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["heading", "path", "score", "text"]);
    assert!(out.get("skipped").is_none());
}

#[test]
fn ranking_is_deterministic_and_ties_go_by_path_then_heading() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let same = "# Restart\nrestart the service\n";
    write(d, "rb/b.md", same);
    write(d, "rb/a.md", same);
    write(
        d,
        "rb/c.md",
        "# Zeta\nrestart the service\n# Alpha\nrestart the service\n",
    );
    let tool = SearchRunbooks::new(vec![d.join("rb")], RunbookSearchLimits::default());
    let first = run(&tool, json!({"query": "restart service"})).unwrap();
    for _ in 0..3 {
        assert_eq!(
            run(&tool, json!({"query": "restart service"})).unwrap(),
            first
        );
    }
    let r = ranked(&first);
    assert_eq!(
        r[..2],
        [
            ("a.md".into(), "Restart".into()),
            ("b.md".into(), "Restart".into())
        ]
    );
    let c: Vec<&(String, String)> = r.iter().filter(|(f, _)| f == "c.md").collect();
    assert_eq!(
        c,
        [
            &("c.md".into(), "Alpha".into()),
            &("c.md".into(), "Zeta".into())
        ]
    );
    let scores: Vec<f64> = first["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
}

#[test]
fn limit_defaults_to_five_and_is_capped() {
    let dir = TempDir::new().unwrap();
    let body: String = (1..=30)
        .map(|i| format!("## Step {i}\nrestart\n"))
        .collect();
    write(dir.path(), "rb/many.md", &body);
    let tool = SearchRunbooks::new(vec![dir.path().join("rb")], RunbookSearchLimits::default());
    let hits = |args| run(&tool, args).unwrap()["hits"].as_array().unwrap().len();
    assert_eq!(hits(json!({"query": "restart"})), 5);
    assert_eq!(hits(json!({"query": "restart", "limit": 2})), 2);
    assert_eq!(hits(json!({"query": "restart", "limit": 1000})), 20);
}

#[test]
fn section_text_is_bounded() {
    let dir = TempDir::new().unwrap();
    let long = format!("# Long\n{}\n", "pool ".repeat(2000));
    write(dir.path(), "rb/long.md", &long);
    write(dir.path(), "rb/short.md", "# Short\npool\n");
    let limits = RunbookSearchLimits {
        max_section_chars: 100,
        ..RunbookSearchLimits::default()
    };
    let tool = SearchRunbooks::new(vec![dir.path().join("rb")], limits);
    let out = run(&tool, json!({"query": "pool"})).unwrap();
    for hit in out["hits"].as_array().unwrap() {
        let text = hit["text"].as_str().unwrap();
        assert!(text.chars().count() <= 101, "{}", text.len());
        if hit["heading"] == "Long" {
            assert_eq!(hit["text_truncated"], true);
            assert!(text.ends_with('…'));
        } else {
            assert!(hit.get("text_truncated").is_none());
        }
    }
}

#[test]
fn missing_folders_and_oversized_files_are_noted() {
    let dir = library();
    write(
        dir.path(),
        "runbooks/huge.md",
        &"# Pool\npool\n".repeat(200),
    );
    let limits = RunbookSearchLimits {
        max_file_bytes: 1000,
        ..RunbookSearchLimits::default()
    };
    let tool = SearchRunbooks::new(
        vec![dir.path().join("runbooks"), dir.path().join("nowhere")],
        limits,
    );
    let out = run(&tool, json!({"query": "pool"})).unwrap();
    assert!(!ranked(&out).is_empty());
    let skipped = out["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    // Folders are listed before files are read, so notes come in that order.
    assert!(skipped[0]["file"].as_str().unwrap().ends_with("nowhere"));
    assert_eq!(skipped[0]["reason"], "not found");
    assert!(skipped[1]["file"].as_str().unwrap().ends_with("huge.md"));
    assert_eq!(skipped[1]["reason"], "larger than 1000 bytes");
}

#[test]
fn invalid_utf8_runbooks_are_read_lossily() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("bad.md");
    fs::write(&path, b"# Pool \xff\nraise the pool\n").unwrap();
    let tool = SearchRunbooks::new(vec![path], RunbookSearchLimits::default());
    let out = run(&tool, json!({"query": "pool"})).unwrap();
    assert_eq!(out["hits"][0]["heading"], "Pool \u{fffd}");
}

#[test]
fn bad_queries_are_errors() {
    let tool = SearchRunbooks::new(Vec::new(), RunbookSearchLimits::default());
    for (args, want) in [
        (json!({}), "missing required parameter 'query'"),
        (json!({"query": "?! -"}), "no words to search for"),
        (json!({"query": "x", "limit": -1}), "positive integer"),
        (json!({"query": "x", "top": 3}), "unknown parameter 'top'"),
    ] {
        match run(&tool, args.clone()) {
            Err(ToolError::InvalidArguments(m)) => assert!(m.contains(want), "{args}: {m}"),
            other => panic!("{args}: {other:?}"),
        }
    }
    assert_eq!(
        run(&tool, json!({"query": "pool"})).unwrap(),
        json!({"hits": []})
    );
}
