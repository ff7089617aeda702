//! `search_logs` against real files in temporary directories: formats (plain, JSON lines,
//! gzip), sources (files, directories, globs), filters, bounds and files that misbehave.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use diag::clock::{FixedClock, Timestamp};
use diag::tools::{LogSearchLimits, SearchLogs, Tool, ToolContext, ToolError};
use serde_json::{json, Value};
use tempfile::TempDir;

fn write(dir: &Path, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(&path, content).unwrap();
    path
}

fn gzip(content: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(content).unwrap();
    enc.finish().unwrap()
}

fn run(tool: &SearchLogs, args: Value) -> Result<Value, ToolError> {
    let clock = FixedClock(Timestamp::parse_rfc3339("2026-11-30T15:00:00Z").unwrap());
    let cx = ToolContext { clock: &clock };
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(tool.call(&args, &cx))
}

fn search<P: AsRef<Path>>(sources: &[P], args: Value) -> Value {
    let sources = sources.iter().map(|p| p.as_ref().to_path_buf()).collect();
    let tool = SearchLogs::new(sources, LogSearchLimits::default());
    run(&tool, args).unwrap()
}

/// (file name, line_no, line) of each match, for compact assertions.
fn hits(out: &Value) -> Vec<(String, u64, String)> {
    out["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let file = Path::new(m["file"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (
                file,
                // 0 for a line whose number was not counted (checked where it matters).
                m["line_no"].as_u64().unwrap_or(0),
                m["line"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn lines(out: &Value) -> Vec<String> {
    hits(out).into_iter().map(|(_, _, l)| l).collect()
}

#[test]
fn plain_text_substring_is_case_insensitive_with_timestamps() {
    let dir = TempDir::new().unwrap();
    let f = write(
        dir.path(),
        "app.log",
        "2026-11-30T13:59:58Z INFO started\n\
         2026-11-30T14:00:01.250+01:00 ERROR upstream Timeout\r\n\
         no timestamp: error here\n\
         2026-11-30 14:00:03,5 WARN retry\n",
    );
    let out = search(&[&f], json!({"query": "error"}));
    // Exactly the spec's shape when nothing was skipped.
    let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["matches", "matches_found", "more_matches"]);
    assert_eq!(out["more_matches"], false);
    assert_eq!(out["matches_found"], 2);
    assert_eq!(
        out["matches"][0],
        json!({
            "file": f.to_string_lossy(),
            "line_no": 2,
            "timestamp": "2026-11-30T13:00:01.250Z",
            "line": "2026-11-30T14:00:01.250+01:00 ERROR upstream Timeout"
        })
    );
    assert_eq!(out["matches"][1]["line_no"], 3);
    assert_eq!(out["matches"][1]["timestamp"], Value::Null);
    let out = search(&[&f], json!({"query": "TIMEOUT"}));
    assert_eq!(hits(&out).len(), 1);
    let out = search(&[f], json!({"query": "warn"}));
    assert_eq!(out["matches"][0]["timestamp"], "2026-11-30T14:00:03.500Z");
}

#[test]
fn json_lines_give_timestamp_and_service() {
    let dir = TempDir::new().unwrap();
    let f = write(
        dir.path(),
        "all.jsonl",
        concat!(
            r#"{"ts":"2026-11-30T14:00:00Z","service":"checkout","msg":"HTTP 502 from payment"}"#,
            "\n",
            r#"{"time":1796047260,"service":"payment","msg":"pool exhausted, HTTP 502 upstream"}"#,
            "\n",
            r#"{"timestamp":1796047320500,"service":{"name":"checkout-service"},"msg":"502 again"}"#,
            "\n",
        ),
    );
    let out = search(&[&f], json!({"query": "502"}));
    let ts: Vec<&Value> = out["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["timestamp"])
        .collect();
    assert_eq!(
        ts,
        [
            "2026-11-30T14:00:00.000Z",
            "2026-11-30T14:01:00.000Z",
            "2026-11-30T14:02:00.500Z"
        ]
    );
    let out = search(&[&f], json!({"query": "502", "service": "Checkout"}));
    assert_eq!(
        hits(&out).iter().map(|h| h.1).collect::<Vec<_>>(),
        [1, 3],
        "the service field decides, with prefix-and-separator matching"
    );
    let out = search(&[f], json!({"query": "502", "service": "payment"}));
    assert_eq!(hits(&out).iter().map(|h| h.1).collect::<Vec<_>>(), [2]);
}

#[test]
fn gzip_files_are_decompressed_by_content() {
    let dir = TempDir::new().unwrap();
    write(
        dir.path(),
        "app.log.1.gz",
        gzip(b"2026-11-30T14:00:00Z ERROR rotated\n"),
    );
    // Compressed without a telling name: the magic bytes decide.
    write(dir.path(), "app.log.2", gzip(b"ok\nERROR renamed\n"));
    // Two gzip members back to back, as `cat a.gz b.gz` produces.
    let mut multi = gzip(b"ERROR member one\n");
    multi.extend(gzip(b"ERROR member two\n"));
    write(dir.path(), "app.log.3.gz", multi);
    let out = search(&[dir.path().to_path_buf()], json!({"query": "error"}));
    assert_eq!(
        hits(&out),
        [
            (
                "app.log.1.gz".into(),
                1,
                "2026-11-30T14:00:00Z ERROR rotated".into()
            ),
            ("app.log.2".into(), 2, "ERROR renamed".into()),
            ("app.log.3.gz".into(), 1, "ERROR member one".into()),
            ("app.log.3.gz".into(), 2, "ERROR member two".into()),
        ]
    );
}

#[test]
fn globs_and_directories_are_searched_in_path_order() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    write(d, "logs/b.log", "hit b\n");
    write(d, "logs/a.log", "miss\nhit a\n");
    write(d, "logs/c.txt", "hit c\n");
    write(d, "logs/nested/deeper/z.log", "hit z\n");
    write(d, "other/y.log", "hit y\n");

    let pattern = d.join("logs/*.log");
    let out = search(&[pattern], json!({"query": "hit"}));
    assert_eq!(
        hits(&out),
        [
            ("a.log".into(), 2, "hit a".into()),
            ("b.log".into(), 1, "hit b".into())
        ]
    );

    // A directory is walked recursively; a file named twice is searched once; the source
    // order does not matter, the path order does.
    let out = search(
        &[d.join("other"), d.join("logs"), d.join("logs/a.log")],
        json!({"query": "hit"}),
    );
    assert_eq!(lines(&out), ["hit a", "hit b", "hit c", "hit z", "hit y"]);

    let recursive = d.join("**/*.log");
    let out = search(&[recursive], json!({"query": "hit"}));
    assert_eq!(lines(&out), ["hit a", "hit b", "hit z", "hit y"]);

    let out = search(&[d.join("nothing/*.log")], json!({"query": "hit"}));
    assert_eq!(out["skipped"][0]["reason"], "no file matches the pattern");
}

#[test]
fn time_window_is_inclusive_and_continuation_lines_inherit_time() {
    let dir = TempDir::new().unwrap();
    let f = write(
        dir.path(),
        "app.log",
        "stack before any timestamp: error\n\
         2026-11-30T13:59:59Z error early\n\
         2026-11-30T14:00:00Z error at start\n\
         \tat payment.Pool.get error frame\n\
         2026-11-30T14:05:00Z error at end\n\
         2026-11-30T14:05:00.001Z error late\n\
         \tat late error frame\n",
    );
    let out = search(
        &[&f],
        json!({"query": "error", "since": "2026-11-30T14:00:00Z", "until": "2026-11-30T14:05:00Z"}),
    );
    assert_eq!(
        lines(&out),
        [
            "2026-11-30T14:00:00Z error at start",
            "\tat payment.Pool.get error frame",
            "2026-11-30T14:05:00Z error at end"
        ]
    );
    // The continuation line keeps its own (absent) timestamp in the output.
    assert_eq!(out["matches"][1]["timestamp"], Value::Null);
    // The first line has no time, neither its own nor one above: counted, not dropped
    // silently.
    assert_eq!(out["untimed_lines"], 1);
    assert_eq!(out["matches_found"], 3);

    // Offsets are honoured: 15:00+01:00 is 14:00Z.
    let out = search(
        &[f],
        json!({"query": "error", "since": "2026-11-30T15:05:00.001+01:00"}),
    );
    assert_eq!(
        lines(&out),
        [
            "2026-11-30T14:05:00.001Z error late",
            "\tat late error frame"
        ]
    );
}

#[test]
fn service_filter_uses_file_and_directory_names() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    write(d, "logs/checkout.log", "error c1\n");
    write(d, "logs/checkout-2026-11-30.log.gz", gzip(b"error c2\n"));
    write(d, "logs/payment.log", "error p\n");
    write(d, "logs/payment-checkout.log", "error pc\n");
    write(d, "logs/checkout/app.log", "error c3\n");
    let out = search(
        &[d.join("logs")],
        json!({"query": "error", "service": "checkout"}),
    );
    assert_eq!(lines(&out), ["error c3", "error c2", "error c1"]);
    // The configured source's own path never names a service.
    let out = search(
        &[d.join("logs")],
        json!({"query": "error", "service": "logs"}),
    );
    assert!(lines(&out).is_empty());
}

#[test]
fn regex_queries_are_bounded_and_checked() {
    let dir = TempDir::new().unwrap();
    let f = write(
        dir.path(),
        "app.log",
        "timeout after 250ms\nTIMEOUT AFTER 3000MS\ntimeout after ms\n",
    );
    let out = search(
        &[&f],
        json!({"query": r"timeout after \d+ms", "regex": true}),
    );
    assert_eq!(lines(&out), ["timeout after 250ms", "TIMEOUT AFTER 3000MS"]);
    let out = search(
        &[&f],
        json!({"query": r"(?-i)timeout after \d+ms", "regex": true}),
    );
    assert_eq!(lines(&out), ["timeout after 250ms"]);
    // Without regex: true, metacharacters are literal.
    let out = search(&[&f], json!({"query": r"\d+"}));
    assert!(lines(&out).is_empty());

    let tool = SearchLogs::new(vec![f], LogSearchLimits::default());
    let e = run(&tool, json!({"query": "(unclosed", "regex": true})).unwrap_err();
    assert!(
        matches!(e, ToolError::InvalidArguments(ref m) if m.contains("invalid regex")),
        "{e}"
    );
    let e = run(&tool, json!({"query": r"\w{1000}{1000}", "regex": true})).unwrap_err();
    assert!(matches!(e, ToolError::InvalidArguments(_)), "{e}");
}

#[test]
fn result_cap_sets_truncated_and_keeps_the_first_matches() {
    let dir = TempDir::new().unwrap();
    let body: String = (1..=20).map(|i| format!("error {i}\n")).collect();
    let f = write(dir.path(), "app.log", body);
    let out = search(&[&f], json!({"query": "error", "limit": 3}));
    assert_eq!(lines(&out), ["error 1", "error 2", "error 3"]);
    assert_eq!(out["more_matches"], true);
    assert_eq!(out["matches_found"], 20, "every matching line is counted");
    let out = search(&[&f], json!({"query": "error", "limit": 20}));
    assert_eq!(out["more_matches"], false);
    assert_eq!(out["matches_found"], 20);
    assert_eq!(lines(&out).len(), 20);

    let limits = LogSearchLimits {
        default_limit: 2,
        max_limit: 5,
        ..LogSearchLimits::default()
    };
    let tool = SearchLogs::new(vec![f], limits);
    let out = run(&tool, json!({"query": "error"})).unwrap();
    assert_eq!(lines(&out).len(), 2);
    let out = run(&tool, json!({"query": "error", "limit": 1000})).unwrap();
    assert_eq!(lines(&out).len(), 5, "a limit above the maximum is capped");
    assert_eq!(out["more_matches"], true);
    assert_eq!(out["matches_found"], 20);
}

#[test]
fn invalid_utf8_is_converted_lossily() {
    let dir = TempDir::new().unwrap();
    let f = write(
        dir.path(),
        "app.log",
        b"error \xff\xfe bytes \xc3\xa9t\xc3\xa9\n",
    );
    let out = search(&[f], json!({"query": "ÉTÉ"}));
    assert_eq!(lines(&out), ["error \u{fffd}\u{fffd} bytes été"]);
}

#[test]
fn binary_files_are_skipped_and_noted() {
    let dir = TempDir::new().unwrap();
    write(dir.path(), "a.bin", b"error\0\x01\x02 error\n");
    // A NUL after the sniffed prefix does not make a text file binary.
    let mut late = "error text\n".repeat(1000).into_bytes();
    late.extend(b"\0 error tail\n");
    write(dir.path(), "b.log", late);
    write(
        dir.path(),
        "c.log.gz",
        gzip(b"\0\0\0 error compressed binary"),
    );
    let out = search(
        &[dir.path().to_path_buf()],
        json!({"query": "error", "limit": 1}),
    );
    assert_eq!(hits(&out)[0].0, "b.log");
    let skipped: Vec<(String, String)> = out["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let file = Path::new(s["file"].as_str().unwrap()).file_name().unwrap();
            (
                file.to_string_lossy().into_owned(),
                s["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // Every file is searched (to count its matches), even once the limit is filled.
    assert_eq!(
        skipped,
        [
            ("a.bin".to_string(), "binary file".to_string()),
            ("c.log.gz".to_string(), "binary file".to_string())
        ]
    );
    assert_eq!(out["matches_found"], 1001);
}

#[test]
fn vanished_files_and_broken_symlinks_do_not_fail_the_search() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    write(d, "logs/a.log", "error a\n");
    let gone = write(d, "logs/b.log", "error b\n");
    write(d, "logs/c.log", "error c\n");
    // A directory entry that points nowhere: listed, then unreadable.
    std::os::unix::fs::symlink(d.join("logs/rotated-away.log"), d.join("logs/b2.log")).unwrap();
    // A configured file that has been deleted.
    fs::remove_file(&gone).unwrap();
    let out = search(&[d.join("logs"), gone.clone()], json!({"query": "error"}));
    assert_eq!(lines(&out), ["error a", "error c"]);
    assert_eq!(out["more_matches"], false);
    let skipped = out["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped[0]["file"].as_str().unwrap().ends_with("b2.log"));
    assert!(skipped[0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("not found"));
    assert_eq!(skipped[1]["file"], gone.to_string_lossy().as_ref());
}

#[test]
fn a_truncated_gzip_keeps_the_matches_before_the_damage() {
    let dir = TempDir::new().unwrap();
    // Sparse matches, so the limit is not reached before the damage is.
    let body: String = (1..=4000)
        .map(|i| format!("line {i} {}\n", if i % 20 == 0 { "error" } else { "ok" }))
        .collect();
    let mut gz = gzip(body.as_bytes());
    gz.truncate(gz.len() / 2);
    let f = write(dir.path(), "cut.log.gz", gz);
    let out = search(&[f], json!({"query": "error", "limit": 500}));
    let found = lines(&out).len();
    assert!(
        found > 0 && found < 200,
        "matches before the damage are kept: {found}"
    );
    let reason = out["skipped"][0]["reason"].as_str().unwrap();
    assert!(reason.starts_with("read error after line"), "{reason}");
}

#[test]
fn very_long_lines_are_cut_and_marked() {
    let dir = TempDir::new().unwrap();
    let long = format!("2026-11-30T14:00:00Z error {}", "é".repeat(10_000));
    // Longer than the whole scan window: the tail is neither kept nor searched.
    let huge = format!("error {} needle-in-tail", "x".repeat(2 * 1024 * 1024));
    let f = write(
        dir.path(),
        "app.log",
        format!("{long}\nshort error\n{huge}\n"),
    );
    let out = search(&[&f], json!({"query": "error"}));
    let m = &out["matches"][0];
    assert_eq!(m["line_truncated"], true);
    let line = m["line"].as_str().unwrap();
    assert!(line.len() <= 4096 && line.len() > 4000, "{}", line.len());
    assert!(long.starts_with(line));
    assert_eq!(m["timestamp"], "2026-11-30T14:00:00.000Z");
    assert!(out["matches"][1].get("line_truncated").is_none());
    assert_eq!(out["matches"][2]["line_no"], 3);
    assert_eq!(out["matches"][2]["line_truncated"], true);
    assert_eq!(
        out["more_matches"], false,
        "more_matches speaks about matches only"
    );
    let out = search(&[f], json!({"query": "needle-in-tail"}));
    assert!(lines(&out).is_empty());
}

#[test]
fn a_large_file_is_streamed() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("big.log");
    let mut w = std::io::BufWriter::new(fs::File::create(&path).unwrap());
    let filler = "2026-11-30T14:00:00Z INFO request served in 12ms path=/api/checkout status=200\n";
    let n = 10 * 1024 * 1024 / filler.len() + 1;
    for _ in 0..n {
        w.write_all(filler.as_bytes()).unwrap();
    }
    w.write_all(b"2026-11-30T14:59:59Z ERROR the one we want\n")
        .unwrap();
    drop(w);
    assert!(fs::metadata(&path).unwrap().len() > 10 * 1024 * 1024);
    let out = search(&[&path], json!({"query": "the one we want"}));
    assert_eq!(out["matches"][0]["line_no"], n as u64 + 1);
    // A time window in a large ordered file is found by binary search: the lines before it
    // are not read, so the match carries its byte offset instead of a line number.
    let out = search(
        &[path],
        json!({"query": "error", "since": "2026-11-30T14:30:00Z"}),
    );
    assert_eq!(lines(&out), ["2026-11-30T14:59:59Z ERROR the one we want"]);
    assert_eq!(out["matches"][0]["line_no"], Value::Null);
    assert_eq!(out["matches"][0]["byte_offset"], (n * filler.len()) as u64);
    assert_eq!(out["untimed_lines"], 0);
}

#[test]
fn bad_arguments_are_errors_naming_the_parameter() {
    let tool = SearchLogs::new(Vec::new(), LogSearchLimits::default());
    let cases = [
        (json!({}), "missing required parameter 'query'"),
        (json!({"query": 5}), "parameter 'query' must be a string"),
        (
            json!({"query": "x", "since": "14:00"}),
            "parameter 'since' must be an RFC 3339",
        ),
        (
            json!({"query": "x", "since": "2026-11-30T15:00:00Z", "until": "2026-11-30T14:00:00Z"}),
            "is after 'until'",
        ),
        (
            json!({"query": "x", "limit": 0}),
            "parameter 'limit' must be a positive integer",
        ),
        (
            json!({"query": "x", "services": "a"}),
            "unknown parameter 'services'",
        ),
        (json!(["x"]), "arguments must be a JSON object"),
    ];
    for (args, want) in cases {
        match run(&tool, args.clone()) {
            Err(ToolError::InvalidArguments(m)) => assert!(m.contains(want), "{args}: {m}"),
            other => panic!("{args}: {other:?}"),
        }
    }
}

#[test]
fn no_sources_means_no_matches() {
    let dir = TempDir::new().unwrap();
    let out = search(&[dir.path().to_path_buf()], json!({"query": "x"}));
    let empty = json!({"matches": [], "matches_found": 0, "more_matches": false});
    assert_eq!(out, empty);
    let tool = SearchLogs::new(Vec::new(), LogSearchLimits::default());
    assert_eq!(run(&tool, json!({"query": "x"})).unwrap(), empty);
    let spec = tool.spec();
    assert_eq!(spec.name, "search_logs");
    assert_eq!(spec.parameters["required"], json!(["query"]));
}

#[test]
fn too_many_files_are_left_out_and_said_so() {
    let dir = TempDir::new().unwrap();
    for name in ["a.log", "b.log", "c.log", "d.log"] {
        write(dir.path(), name, "error\n");
    }
    let limits = LogSearchLimits {
        max_files: 2,
        ..LogSearchLimits::default()
    };
    let tool = SearchLogs::new(vec![dir.path().to_path_buf()], limits);
    let out = run(&tool, json!({"query": "error"})).unwrap();
    assert_eq!(
        hits(&out).iter().map(|h| h.0.as_str()).collect::<Vec<_>>(),
        ["a.log", "b.log"]
    );
    assert_eq!(out["matches_found"], 2, "counts are about the files searched");
    assert!(out["skipped"][0]["file"]
        .as_str()
        .unwrap()
        .ends_with("c.log"));
    assert_eq!(
        out["skipped"][0]["reason"],
        "more than 2 files: this and 1 later files were not searched"
    );
}
