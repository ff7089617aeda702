//! `search_logs` against real files in temporary directories: formats (plain, JSON lines,
//! gzip), sources (files, directories, globs), filters, bounds and files that misbehave; one
//! test per timestamp format with a window over it; the two truncation flags told apart; and
//! properties that the window found by binary search is the full scan's.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use diag_core::clock::{FixedClock, Timestamp};
use diag_core::protocol::{
    validate_run, Binding, Claim, ExecutorOutput, InvocationStatus, ToolInvocation,
};
use diag_core::tools::{Tool, ToolContext, ToolError, ToolLimits, ToolRegistry};
use diag_tools::search_logs::{LogSource, LogZone};
use diag_tools::{LogSearchLimits, SearchLogs};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
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
    assert_eq!(
        out["matches_found"], 2,
        "counts are about the files searched"
    );
    assert!(out["skipped"][0]["file"]
        .as_str()
        .unwrap()
        .ends_with("c.log"));
    assert_eq!(
        out["skipped"][0]["reason"],
        "more than 2 files: this and 1 later files were not searched"
    );
}

// ---------------------------------------------------------------------------------------------
// Timestamp formats: one file per format, written as the service writes it, across the day
// and year boundaries, with a window over each and the count of matching lines without time.
// ---------------------------------------------------------------------------------------------

/// A file in one format, searched with a window: the (timestamp, line start) of each match,
/// and `untimed_lines`.
struct FormatCase {
    name: &'static str,
    zone: &'static str,
    /// The file's modification time (the reference for times without a year).
    mtime: &'static str,
    text: &'static str,
    query: &'static str,
    since: Option<&'static str>,
    until: Option<&'static str>,
    want: &'static [(Option<&'static str>, &'static str)],
    untimed: u64,
}

fn set_mtime(path: &Path, at: &str) {
    let ms = Timestamp::parse_rfc3339(at).unwrap().unix_ms();
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64);
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

fn check_format(case: &FormatCase) {
    let dir = TempDir::new().unwrap();
    let path = write(dir.path(), case.name, case.text);
    set_mtime(&path, case.mtime);
    // Read whole and by binary search alike.
    for window_search_min_bytes in [u64::MAX, 0] {
        let limits = LogSearchLimits {
            window_search_min_bytes,
            window_granularity_bytes: 1,
            ..LogSearchLimits::default()
        };
        let source = LogSource {
            path: path.clone(),
            zone: LogZone::parse(case.zone).unwrap(),
        };
        let tool = SearchLogs::with_sources(vec![source], limits);
        let mut args = json!({"query": case.query});
        if let Some(s) = case.since {
            args["since"] = json!(s);
        }
        if let Some(u) = case.until {
            args["until"] = json!(u);
        }
        let out = run(&tool, args).unwrap();
        let got: Vec<(Option<String>, String)> = out["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["timestamp"].as_str().map(str::to_string),
                    m["line"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(got.len(), case.want.len(), "{}: {got:#?}", case.name);
        for ((ts, line), (want_ts, want_line)) in got.iter().zip(case.want) {
            assert_eq!(ts.as_deref(), *want_ts, "{}: {line}", case.name);
            assert!(line.starts_with(want_line), "{}: {line}", case.name);
        }
        assert_eq!(out["matches_found"], case.want.len(), "{}", case.name);
        assert_eq!(out["untimed_lines"], case.untimed, "{}", case.name);
    }
}

#[test]
fn format_iso8601_and_rfc3339_with_offsets_and_local_times() {
    check_format(&FormatCase {
        name: "checkout.log",
        zone: "Europe/Berlin",
        mtime: "2027-01-01T00:10:00Z",
        text: "starting checkout-service v2.3.1, error budget 5%\n\
               2026-12-31T22:59:58.100Z ERROR upstream reset by payment-service\n\
               2027-01-01T00:00:00.900+01:00 ERROR upstream reset by payment-service\n\
               \tat io.netty.channel.AbstractChannel.read(AbstractChannel.java:42) error frame\n\
               2027-01-01 00:00:01,250 ERROR upstream reset (local time, Berlin)\n\
               20270101T000002Z ERROR upstream reset (basic format)\n\
               2027-01-01T00:00:03Z INFO recovered, error rate 0%\n",
        query: "error",
        since: Some("2026-12-31T23:00:00Z"),
        until: Some("2027-01-01T00:00:02Z"),
        want: &[
            (
                Some("2026-12-31T23:00:00.900Z"),
                "2027-01-01T00:00:00.900+01:00",
            ),
            (None, "\tat io.netty"),
            (Some("2026-12-31T23:00:01.250Z"), "2027-01-01 00:00:01,250"),
            (Some("2027-01-01T00:00:02.000Z"), "20270101T000002Z"),
        ],
        untimed: 1,
    });
}

#[test]
fn format_rfc3164_syslog_takes_its_year_from_the_file_time() {
    check_format(&FormatCase {
        name: "auth.log",
        zone: "America/New_York",
        mtime: "2027-01-01T06:00:00Z",
        text: "Dec 31 18:59:59 web01 sshd[811]: Failed password for root from 203.0.113.9 port 52144 ssh2\n\
               Dec 31 23:59:58 web01 sshd[811]: Failed password for invalid user admin from 203.0.113.9 port 52160 ssh2\n\
               Jan  1 00:00:02 web01 sshd[815]: Failed password for root from 198.51.100.4 port 40022 ssh2\n\
               Jan  1 00:00:03 web01 sshd[815]: Connection closed by 198.51.100.4 port 40022 [preauth]\n",
        query: "failed password",
        since: Some("2027-01-01T00:00:00Z"),
        until: None,
        want: &[
            (Some("2027-01-01T04:59:58.000Z"), "Dec 31 23:59:58"),
            (Some("2027-01-01T05:00:02.000Z"), "Jan  1 00:00:02"),
        ],
        untimed: 0,
    });
}

#[test]
fn format_rfc5424_syslog() {
    check_format(&FormatCase {
        name: "syslog",
        zone: "UTC",
        mtime: "2027-01-02T00:00:00Z",
        text: "<34>1 2026-12-31T23:59:59.003Z mymachine.example.com su - ID47 - 'su root' failed for lonvick on /dev/pts/8\n\
               <165>1 2027-01-01T00:00:00.000003-08:00 192.0.2.1 myproc 8710 - - %% It's time to make the do-nothing failed\n\
               <165>1 2027-01-01T08:00:01Z 192.0.2.1 myproc 8710 - - failed again\n\
               <165>1 - 192.0.2.1 myproc 8710 - - failed without a timestamp (NILVALUE)\n",
        query: "failed",
        since: Some("2027-01-01T00:00:00Z"),
        until: Some("2027-01-01T08:00:00Z"),
        // The NILVALUE line inherits the time above it (08:00:01), outside the window.
        want: &[(Some("2027-01-01T08:00:00.000Z"), "<165>1 2027-01-01T00:00:00.000003-08:00")],
        untimed: 0,
    });
}

#[test]
fn format_nginx_and_apache_combined_access_log() {
    check_format(&FormatCase {
        name: "access.log",
        zone: "UTC",
        mtime: "2027-01-01T00:00:05Z",
        text: "203.0.113.9 - - [31/Dec/2026:23:59:59 +0100] \"GET /api/checkout HTTP/1.1\" 502 157 \"-\" \"curl/8.5.0\"\n\
               198.51.100.4 - alice [01/Jan/2027:00:00:01 +0100] \"POST /api/checkout HTTP/2.0\" 502 0 \"https://shop.example/cart\" \"Mozilla/5.0 (X11; Linux x86_64)\"\n\
               192.0.2.7 - - [31/Dec/2026:23:00:02 +0000] \"GET /healthz HTTP/1.1\" 200 2 \"-\" \"kube-probe/1.29\"\n\
               192.0.2.8 - - [31/Dec/2026:23:00:03 +0000] \"GET /api/checkout HTTP/1.1\" 502 157 \"-\" \"curl/8.5.0\"\n",
        query: "\" 502 ",
        since: Some("2026-12-31T23:00:00Z"),
        until: None,
        want: &[
            (Some("2026-12-31T23:00:01.000Z"), "198.51.100.4"),
            (Some("2026-12-31T23:00:03.000Z"), "192.0.2.8"),
        ],
        untimed: 0,
    });
}

#[test]
fn format_apache_error_log() {
    check_format(&FormatCase {
        name: "error_log",
        zone: "Europe/Berlin",
        mtime: "2027-01-01T00:30:00Z",
        text: "[Thu Dec 31 23:59:58.123456 2026] [proxy:error] [pid 2215:tid 140] (111)Connection refused: AH00957: HTTP: attempt to connect to 10.0.0.7:8080 (backend) failed\n\
               [Fri Jan 01 00:00:03 2027] [proxy_http:error] [pid 2215:tid 141] [client 203.0.113.9:51234] AH01114: HTTP: failed to make connection to backend: 10.0.0.7\n\
               [Fri Jan 01 01:00:00 2027] [core:notice] [pid 2210] AH00094: Command line: '/usr/sbin/apache2', nothing failed\n",
        query: "failed",
        since: Some("2026-12-31T23:00:00Z"),
        until: Some("2026-12-31T23:59:59Z"),
        want: &[(Some("2026-12-31T23:00:03.000Z"), "[Fri Jan 01 00:00:03 2027]")],
        untimed: 0,
    });
}

#[test]
fn format_log4j_with_stack_traces() {
    check_format(&FormatCase {
        name: "payment.log",
        zone: "Asia/Tokyo",
        mtime: "2027-01-01T00:01:00Z",
        text: "2027-01-01 08:59:59,978 ERROR [http-nio-8080-exec-7] c.e.checkout.PaymentClient - charge failed: java.net.SocketTimeoutException: Read timed out\n\
               java.net.SocketTimeoutException: Read timed out\n\
               \tat java.base/sun.nio.ch.NioSocketImpl.timedRead(NioSocketImpl.java:288)\n\
               2027-01-01 09:00:00,004 WARN  [http-nio-8080-exec-7] c.e.checkout.PaymentClient - retry 1/3 after Read timed out\n",
        query: "timed out",
        since: Some("2027-01-01T00:00:00Z"),
        until: None,
        // The exception line inherits 23:59:59.978Z from its record: outside the window.
        want: &[(Some("2027-01-01T00:00:00.004Z"), "2027-01-01 09:00:00,004 WARN")],
        untimed: 0,
    });
}

#[test]
fn format_kubernetes_klog_across_new_year() {
    check_format(&FormatCase {
        name: "kube-controller-manager.log",
        zone: "UTC",
        mtime: "2027-01-01T00:05:00Z",
        text: "Log file created at: 2026/12/31 23:50:00\n\
               I1231 23:59:59.912345       1 leaderelection.go:250] attempting to acquire leader lease kube-system/kube-controller-manager...\n\
               E1231 23:59:59.998001       1 leaderelection.go:332] error retrieving resource lock kube-system/kube-controller-manager: context deadline exceeded\n\
               E0101 00:00:00.120000       1 leaderelection.go:332] error retrieving resource lock kube-system/kube-controller-manager: dial tcp 10.96.0.1:443: connect: connection refused\n\
               I0101 00:00:02.000000       1 leaderelection.go:260] successfully acquired lease kube-system/kube-controller-manager\n",
        query: "lease",
        since: Some("2026-12-31T23:59:59.990Z"),
        until: Some("2027-01-01T00:00:01Z"),
        want: &[],
        untimed: 0,
    });
    check_format(&FormatCase {
        name: "kube-controller-manager.log",
        zone: "UTC",
        mtime: "2027-01-01T00:05:00Z",
        text: "Log file created at: 2026/12/31 23:50:00 error retrieving nothing yet\n\
               I1231 23:59:59.912345       1 leaderelection.go:250] attempting to acquire leader lease\n\
               E1231 23:59:59.998001       1 leaderelection.go:332] error retrieving resource lock kube-system/kube-controller-manager: context deadline exceeded\n\
               E0101 00:00:00.120000       1 leaderelection.go:332] error retrieving resource lock kube-system/kube-controller-manager: dial tcp 10.96.0.1:443: connect: connection refused\n\
               I0101 00:00:02.000000       1 leaderelection.go:260] successfully acquired lease\n",
        query: "error retrieving",
        since: Some("2026-12-31T23:59:59.990Z"),
        until: Some("2027-01-01T00:00:01Z"),
        want: &[
            (Some("2026-12-31T23:59:59.998Z"), "E1231"),
            (Some("2027-01-01T00:00:00.120Z"), "E0101"),
        ],
        // The header line has no klog time and nothing above it.
        untimed: 1,
    });
}

#[test]
fn format_android_logcat() {
    check_format(&FormatCase {
        name: "logcat.txt",
        zone: "+05:30",
        mtime: "2027-03-17T17:00:00Z",
        text: "--------- beginning of main E (crash buffer)\n\
               03-17 16:13:38.811  1702  2395 D WindowManager: printFreezingDisplayLogsopening app wtoken = AppWindowToken{9f4ef63 token=Token{a64f992}}\n\
               03-17 16:13:38.819  1702  8671 E PowerManagerService: acquire lock failed, tag=\"View Lock\"\n\
               03-17 16:14:02.004  2227  2227 E AndroidRuntime: FATAL EXCEPTION: main\n",
        query: " E ",
        since: Some("2027-03-17T10:44:00Z"),
        until: None,
        want: &[(Some("2027-03-17T10:44:02.004Z"), "03-17 16:14:02.004")],
        untimed: 1,
    });
}

#[test]
fn format_hdfs_compact_dates_across_midnight() {
    check_format(&FormatCase {
        name: "hdfs-datanode.log",
        zone: "UTC",
        mtime: "2008-11-10T01:00:00Z",
        text: "081109 203615 148 INFO dfs.DataNode$PacketResponder: PacketResponder 1 for block blk_38865049064139660 terminating\n\
               081109 235959 222 WARN dfs.DataNode: Exception in receiveBlock for block blk_-6952295868487656571 java.io.IOException: Connection reset by peer\n\
               081110 000001 223 WARN dfs.DataNode: Exception in receiveBlock for block blk_7128370237687728475 java.io.IOException: Connection reset by peer\n",
        query: "exception",
        since: Some("2008-11-10T00:00:00Z"),
        until: None,
        want: &[(Some("2008-11-10T00:00:01.000Z"), "081110 000001")],
        untimed: 0,
    });
}

#[test]
fn format_epoch_seconds_and_milliseconds() {
    check_format(&FormatCase {
        name: "squid-access.log",
        zone: "UTC",
        mtime: "2027-01-01T00:00:05Z",
        text: "1798761599.123    921 192.168.0.68 TCP_MISS/502 4120 GET http://shop.example/api/checkout - HIER_DIRECT/10.0.0.7 text/html\n\
               1798761600.001     15 192.168.0.69 TCP_MISS/502 310 GET http://shop.example/api/checkout - HIER_DIRECT/10.0.0.7 text/html\n",
        query: "TCP_MISS/502",
        since: Some("2027-01-01T00:00:00Z"),
        until: None,
        want: &[(Some("2027-01-01T00:00:00.001Z"), "1798761600.001")],
        untimed: 0,
    });
    check_format(&FormatCase {
        name: "events.log",
        zone: "UTC",
        mtime: "2027-01-01T00:00:05Z",
        text: "1798761599999 ERROR order=ord-1 payment failed\n\
               1798761600000 ERROR order=ord-2 payment failed\n",
        query: "payment failed",
        since: None,
        until: Some("2026-12-31T23:59:59.999Z"),
        want: &[(Some("2026-12-31T23:59:59.999Z"), "1798761599999")],
        untimed: 0,
    });
}

#[test]
fn format_json_lines_with_common_time_fields() {
    check_format(&FormatCase {
        name: "payment.jsonl",
        zone: "UTC",
        mtime: "2027-01-01T00:00:05Z",
        text: "{\"msg\":\"charge failed at startup\"}\n\
               {\"level\":\"error\",\"ts\":1798761599.5,\"caller\":\"pay/client.go:88\",\"msg\":\"charge failed\"}\n\
               {\"@timestamp\":\"2027-01-01T00:00:00.250Z\",\"log.level\":\"error\",\"message\":\"charge failed\"}\n\
               {\"time\":\"2027-01-01T01:00:00.5+01:00\",\"level\":\"error\",\"msg\":\"charge failed\"}\n\
               {\"asctime\":\"2027-01-01 00:00:01,000\",\"levelname\":\"ERROR\",\"message\":\"charge failed\"}\n",
        query: "charge failed",
        since: Some("2027-01-01T00:00:00Z"),
        until: None,
        want: &[
            (Some("2027-01-01T00:00:00.250Z"), "{\"@timestamp\""),
            (Some("2027-01-01T00:00:00.500Z"), "{\"time\""),
            (Some("2027-01-01T00:00:01.000Z"), "{\"asctime\""),
        ],
        untimed: 1,
    });
}

#[test]
fn a_window_over_a_format_that_cannot_be_read_says_so() {
    // Proxifier writes `[MM.DD HH:MM:SS]`, which is not read: every match is counted as
    // untimed instead of vanishing.
    check_format(&FormatCase {
        name: "proxifier.log",
        zone: "UTC",
        mtime: "2027-01-01T00:00:05Z",
        text: "[10.30 16:49:06] chrome.exe - proxy.example:5070 open through proxy proxy.example:5070 HTTPS\n\
               [10.30 16:49:07] chrome.exe - proxy.example:5070 close, 0 bytes sent, 0 bytes received\n",
        query: "chrome.exe",
        since: Some("2026-10-30T00:00:00Z"),
        until: None,
        want: &[],
        untimed: 2,
    });
}

// ---------------------------------------------------------------------------------------------
// Honest truncation: more lines than the limit, and an answer cut to fit the output cap.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_output_cap_and_the_limit_are_told_apart() {
    let dir = TempDir::new().unwrap();
    let body: String = (1..=300)
        .map(|i| {
            format!(
                "2026-11-30T14:{:02}:{:02}Z ERROR checkout upstream returned 502 attempt {i} {}\n",
                i / 60,
                i % 60,
                "x".repeat(200)
            )
        })
        .collect();
    let f = write(dir.path(), "checkout.log", body);
    let clock = FixedClock(Timestamp::parse_rfc3339("2026-11-30T15:00:00Z").unwrap());
    let cx = ToolContext { clock: &clock };
    let mut registry = ToolRegistry::new(ToolLimits {
        max_output_bytes: 8 * 1024,
        ..ToolLimits::default()
    });
    registry
        .register(Arc::new(SearchLogs::new(
            vec![f],
            LogSearchLimits::default(),
        )))
        .unwrap();
    let session = &registry;

    // The limit lets 50 through of 300: more matched; the 50 do not fit the cap either.
    let o = session
        .call("search_logs", &json!({"query": "502"}), &cx)
        .await;
    assert_eq!(o.status, InvocationStatus::Ok);
    let shown = o.output["matches"].as_array().unwrap().len();
    assert!(shown > 0 && shown < 50, "{shown}");
    assert_eq!(o.output["matches_shown"], shown);
    assert_eq!(o.output["output_truncated"], true);
    assert_eq!(o.output["more_matches"], true);
    assert_eq!(o.output["matches_found"], 300);

    // Everything that matched fits the limit, but not the cap: only the cap is reported.
    let o = session
        .call(
            "search_logs",
            &json!({"query": "attempt 1", "limit": 500}),
            &cx,
        )
        .await;
    // attempt 1, 10-19, 100-199
    assert_eq!(o.output["matches_found"], 111);
    assert_eq!(
        o.output["more_matches"], false,
        "the limit let every match through"
    );
    assert_eq!(o.output["output_truncated"], true);
    let shown = o.output["matches"].as_array().unwrap().len();
    assert_eq!(o.output["matches_shown"], shown);

    // Neither: no flag says otherwise.
    let o = session
        .call(
            "search_logs",
            &json!({"query": "attempt 7 ", "limit": 5}),
            &cx,
        )
        .await;
    assert_eq!(o.output["matches_found"], 1);
    assert_eq!(o.output["more_matches"], false);
    assert!(o.output.get("output_truncated").is_none());
    assert!(o.output.get("matches_shown").is_none());

    // Quotes bind to the output as shown: the last line shown passes, one cut away does not.
    let o = session
        .call("search_logs", &json!({"query": "502"}), &cx)
        .await;
    let shown = o.output["matches"].as_array().unwrap().len();
    let invocation = ToolInvocation {
        run_id: "run-1".into(),
        session_id: "ses-1".into(),
        invocation_id: "inv-1".into(),
        agent: "executor".into(),
        round: 1,
        tool_name: "search_logs".into(),
        arguments: json!({"query": "502"}),
        output: o.output.clone(),
        status: InvocationStatus::Ok,
        duration_ms: 1,
    };
    let quote = |n: usize| {
        let output = ExecutorOutput {
            claims: vec![Claim {
                claim_id: "c1".into(),
                text: "checkout logged an upstream failure".into(),
                bindings: vec![Binding {
                    source_invocation_id: "inv-1".into(),
                    tool_name: "search_logs".into(),
                    raw_path: format!("/matches/{n}/line"),
                    quote: "ERROR checkout upstream returned".into(),
                }],
            }],
            ..ExecutorOutput::default()
        };
        validate_run("run-1", &output, std::slice::from_ref(&invocation)).checked_bindings[0].passed
    };
    assert!(quote(shown - 1));
    assert!(!quote(shown));
}

// ---------------------------------------------------------------------------------------------
// The window by binary search equals the full scan.
// ---------------------------------------------------------------------------------------------

/// One generated line: seconds after the previous timestamped line (`None`: no timestamp of
/// its own), its length of filler, and whether it holds the query.
#[derive(Debug, Clone)]
struct GenLine {
    gap: Option<u32>,
    filler: usize,
    hit: bool,
}

fn gen_line() -> impl Strategy<Value = GenLine> {
    (
        prop_oneof![
            3 => Just(Some(0u32)),
            5 => (1u32..5).prop_map(Some),
            1 => (60u32..100_000).prop_map(Some),
            2 => Just(None),
        ],
        0usize..120,
        prop::bool::weighted(0.4),
    )
        .prop_map(|(gap, filler, hit)| GenLine { gap, filler, hit })
}

/// The file text and, per line, its byte offset.
fn render(lines: &[GenLine], backwards_at: Option<usize>) -> (String, Vec<usize>) {
    let mut t: i64 = 1_796_047_200_000; // 2026-11-30T14:00:00Z
    let mut text = String::new();
    let mut offsets = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        offsets.push(text.len());
        let filler = "abcdefghij".repeat(l.filler / 10 + 1)[..l.filler].to_string();
        let hit = if l.hit { " needle" } else { "" };
        match l.gap {
            Some(g) => {
                t += i64::from(g) * 1000;
                if backwards_at == Some(i) {
                    t -= 3_600_000;
                }
                let ts = Timestamp::from_unix_ms(t).to_string();
                text.push_str(&format!("{ts} INFO {filler}{hit}\n"));
            }
            None => text.push_str(&format!("\tat frame {filler}{hit}\n")),
        }
    }
    (text, offsets)
}

fn window_args(lines: &[GenLine], pick: (u8, u8, u32, u32)) -> Value {
    let total: u32 = lines.iter().filter_map(|l| l.gap).sum();
    let at = |kind: u8, x: u32| -> Option<String> {
        let base: i64 = 1_796_047_200_000;
        let s = match kind % 4 {
            0 => return None,
            1 => base - 3_600_000, // before the first line
            2 => base + i64::from(total) * 1000 + 3_600_000, // after the last
            _ => base + i64::from(x % (total + 2)) * 1000, // on or between lines
        };
        Some(Timestamp::from_unix_ms(s).to_string())
    };
    let (mut since, mut until) = (at(pick.0, pick.2), at(pick.1, pick.3));
    if let (Some(s), Some(u)) = (&since, &until) {
        if s > u {
            std::mem::swap(&mut since, &mut until);
        }
    }
    let mut args = json!({"query": "needle", "limit": 500});
    if let Some(s) = since {
        args["since"] = json!(s);
    }
    if let Some(u) = until {
        args["until"] = json!(u);
    }
    if args.get("since").is_none() && args.get("until").is_none() {
        args["since"] = json!(Timestamp::from_unix_ms(1_796_047_200_000).to_string());
    }
    args
}

fn property_config(seed: u64) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        rng_seed: proptest::test_runner::RngSeed::Fixed(seed),
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    }
}

/// Searches `text` with the window found by binary search (every knob at its finest) and by
/// reading the whole file, and compares: same lines, times and counts; a line number where
/// the search counted lines, else the byte offset of that same line.
fn same_as_full_scan(
    text: &str,
    offsets: &[usize],
    args: &Value,
    granularity: u64,
    order_probes: u64,
) -> Result<(), TestCaseError> {
    let dir = TempDir::new().unwrap();
    let f = write(dir.path(), "app.log", text);
    let search = |window_search_min_bytes: u64| {
        let limits = LogSearchLimits {
            window_search_min_bytes,
            window_granularity_bytes: granularity,
            order_probes,
            ..LogSearchLimits::default()
        };
        run(&SearchLogs::new(vec![f.clone()], limits), args.clone()).unwrap()
    };
    let full = search(u64::MAX);
    let fast = search(0);
    for key in ["matches_found", "more_matches", "untimed_lines"] {
        prop_assert_eq!(&fast[key], &full[key], "{} differs for {}", key, args);
    }
    let (a, b) = (
        fast["matches"].as_array().unwrap(),
        full["matches"].as_array().unwrap(),
    );
    prop_assert_eq!(a.len(), b.len(), "{}", args);
    for (x, y) in a.iter().zip(b) {
        prop_assert_eq!(&x["line"], &y["line"]);
        prop_assert_eq!(&x["timestamp"], &y["timestamp"]);
        let no = y["line_no"].as_u64().unwrap();
        match x["line_no"].as_u64() {
            Some(n) => prop_assert_eq!(n, no),
            None => prop_assert_eq!(
                x["byte_offset"].as_u64(),
                Some(offsets[no as usize - 1] as u64)
            ),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(property_config(0x05EA_5C41))]

    #[test]
    fn window_by_binary_search_equals_the_full_scan(
        lines in prop::collection::vec(gen_line(), 0..60),
        pick in (any::<u8>(), any::<u8>(), any::<u32>(), any::<u32>()),
        granularity in prop_oneof![Just(1u64), Just(16), Just(300), Just(1 << 20)],
        order_probes in 1u64..6,
    ) {
        let (text, offsets) = render(&lines, None);
        let args = window_args(&lines, pick);
        same_as_full_scan(&text, &offsets, &args, granularity, order_probes)?;
    }
}

proptest! {
    #![proptest_config(property_config(0x0BAC_C0DE))]

    #[test]
    fn a_file_that_goes_back_in_time_gives_the_full_scan_result(
        lines in prop::collection::vec(gen_line(), 2..60),
        back in any::<prop::sample::Index>(),
        pick in (any::<u8>(), any::<u8>(), any::<u32>(), any::<u32>()),
        granularity in prop_oneof![Just(1u64), Just(16), Just(300)],
    ) {
        let timed: Vec<usize> = (0..lines.len()).filter(|i| lines[*i].gap.is_some()).collect();
        prop_assume!(timed.len() >= 2);
        // An hour back at one timestamped line after the first.
        let at = timed[1 + back.index(timed.len() - 1)];
        let (text, offsets) = render(&lines, Some(at));
        let args = window_args(&lines, pick);
        // Probes every few bytes (shorter than any line): the order check sees every line, so
        // the search must fall back to reading the whole file.
        let order_probes = (text.len() as u64 / 8).max(1);
        same_as_full_scan(&text, &offsets, &args, granularity, order_probes)?;
    }
}

/// A zone abbreviation written in the line is understood (a PostgreSQL log with
/// `log_timezone = 'America/New_York'`), or the line is untimed and counted: never read as
/// UTC in silence.
#[test]
fn a_zone_written_in_the_line_places_it_or_leaves_it_untimed() {
    let dir = TempDir::new().unwrap();
    let log = write(
        dir.path(),
        "postgresql.log",
        "2026-12-03 14:44:48.890 EST [24943] LOG:  checkpoint starting: time\n\
         2026-12-03 14:45:10.002 EST [24943] LOG:  checkpoint complete\n\
         2026-12-03 14:46:00.000 IST [24943] LOG:  checkpoint ambiguous\n\
         2026-12-03 16:46:00.000 BRST [24943] LOG:  checkpoint in an unknown zone\n",
    );
    // The lines' true time is 19:44–19:45 UTC.
    let out = search(
        &[&log],
        json!({"query": "checkpoint", "since": "2026-12-03T19:40:00Z",
               "until": "2026-12-03T19:50:00Z"}),
    );
    assert_eq!(out["matches_found"], 2, "{out}");
    assert_eq!(out["matches"][0]["timestamp"], "2026-12-03T19:44:48.890Z");
    // IST has several meanings and BRST is unknown: both untimed, counted.
    assert_eq!(out["untimed_lines"], 2, "{out}");
    // The window the lines would fall in if read as UTC finds nothing.
    let out = search(
        &[&log],
        json!({"query": "checkpoint", "since": "2026-12-03T14:40:00Z",
               "until": "2026-12-03T14:50:00Z"}),
    );
    assert_eq!(out["matches_found"], 0, "{out}");
}

/// logfmt (Prometheus' own log) and apt's history log are read, so a window finds their
/// lines; apt's lines between `Start-Date` and `End-Date` take the start's time.
#[test]
fn logfmt_and_apt_history_lines_are_found_by_a_window() {
    let dir = TempDir::new().unwrap();
    let prometheus = write(
        dir.path(),
        "prometheus.log",
        "ts=2026-12-03T19:39:00.000Z caller=main.go:1 level=info msg=\"Starting Prometheus\"\n\
         ts=2026-12-03T19:40:00.123Z caller=head.go:2 level=warn msg=\"compaction failed\"\n\
         ts=2026-12-03T19:50:00.000Z caller=head.go:2 level=warn msg=\"compaction failed\"\n",
    );
    let out = search(
        &[&prometheus],
        json!({"query": "compaction", "since": "2026-12-03T19:35:00Z",
               "until": "2026-12-03T19:45:00Z"}),
    );
    assert_eq!(out["matches_found"], 1, "{out}");
    assert_eq!(out["matches"][0]["timestamp"], "2026-12-03T19:40:00.123Z");
    assert_eq!(out["untimed_lines"], 0, "{out}");

    let apt = write(
        dir.path(),
        "history.log",
        "\nStart-Date: 2026-05-09  07:29:02\n\
         Commandline: apt-get install -y prometheus\n\
         Install: prometheus:amd64 (2.45.3+ds-2)\n\
         End-Date: 2026-05-09  07:29:40\n\
         \nStart-Date: 2026-05-10  09:00:00\n\
         Commandline: apt-get remove -y prometheus\n\
         Remove: prometheus:amd64 (2.45.3+ds-2)\n\
         End-Date: 2026-05-10  09:00:05\n",
    );
    let out = search(
        &[&apt],
        json!({"query": "prometheus", "since": "2026-05-09T07:00:00Z",
               "until": "2026-05-09T08:00:00Z"}),
    );
    assert_eq!(out["matches_found"], 2, "{out}");
    assert_eq!(
        out["matches"][0]["line"],
        "Commandline: apt-get install -y prometheus"
    );
    assert_eq!(out["untimed_lines"], 0, "{out}");
}
