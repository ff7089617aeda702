//! What `diag replay` needs at CI scale, as plain functions: the `--jobs` and `--shard` values,
//! the stable shard of a run file, a file's result with its `--json` document and JUnit test
//! case, the report names of `--report-dir`, and the JUnit XML document of `--junit`.
//!
//! Sharding hashes each file's path (made relative to the working directory, `/`-separated)
//! with SHA-256 and assigns it to shard `1 + (first 8 bytes, big-endian) mod N`. A hash, not an
//! even split of the sorted list: a file's shard then depends on its own path only, so it does
//! not move when other files are added or removed, and N runners given the same arguments
//! agree whatever order they list the files in and wherever their checkout lies. The price is
//! counts that are only balanced on average (a few hundred files split within a few percent).

use std::path::{Component, Path, PathBuf};

use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use quick_xml::Writer;

use serde::Serialize;

use diag_core::hash::sha256_hex;
use diag_core::text::one_line;

use crate::Mismatch;

/// The schema name of `diag replay --json` output.
pub const REPLAY_JSON_SCHEMA: &str = "diag.replay.v1";

/// The value of `--jobs`: a whole number of at least 1.
pub fn parse_jobs(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("--jobs 0: replay needs at least one job (--jobs N, N ≥ 1)".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "--jobs {text}: not a whole number of at least 1 (--jobs N)"
        )),
    }
}

/// One shard of `--shard K/N`: `index` is K, counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The value of `--shard`: `K/N` with 1 ≤ K ≤ N.
pub fn parse_shard(text: &str) -> Result<Shard, String> {
    let bad = |why: &str| format!("--shard {text}: {why} (--shard K/N, 1 ≤ K ≤ N)");
    let Some((k, n)) = text.split_once('/') else {
        return Err(bad("not of the form K/N"));
    };
    let (Ok(index), Ok(count)) = (k.trim().parse::<u64>(), n.trim().parse::<u64>()) else {
        return Err(bad("K and N must be whole numbers"));
    };
    if count == 0 {
        return Err(bad("N must be at least 1"));
    }
    if index == 0 || index > count {
        return Err(bad(&format!("K must be between 1 and {count}")));
    }
    Ok(Shard { index, count })
}

/// The path a file's shard is computed from: relative to `cwd` when the file lies under it
/// (so two checkouts in different places agree), `.` components dropped, `/` separators.
pub fn shard_key(path: &Path, cwd: Option<&Path>) -> String {
    let rel = match cwd {
        Some(cwd) if path.is_absolute() => path.strip_prefix(cwd).unwrap_or(path),
        _ => path,
    };
    let mut parts: Vec<String> = Vec::new();
    for c in rel.components() {
        match c {
            Component::CurDir => {}
            Component::RootDir => parts.push(String::new()),
            Component::ParentDir => parts.push("..".to_string()),
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            Component::Prefix(p) => parts.push(p.as_os_str().to_string_lossy().into_owned()),
        }
    }
    if parts.len() == 1 && parts[0].is_empty() {
        return "/".to_string();
    }
    parts.join("/")
}

/// The shard (1 ..= `count`) a file with this key belongs to.
pub fn shard_of(key: &str, count: u64) -> u64 {
    // The first 8 bytes of the digest, big-endian (16 hex digits always parse).
    let hex = sha256_hex(key.as_bytes());
    let first = u64::from_str_radix(hex.get(..16).unwrap_or("0"), 16).unwrap_or(0);
    1 + first % count.max(1)
}

/// The files of one shard, in their order (`cwd`: what [`shard_key`] makes paths relative to).
pub fn in_shard(files: Vec<PathBuf>, shard: Shard, cwd: Option<&Path>) -> Vec<PathBuf> {
    files
        .into_iter()
        .filter(|f| {
            let key = shard_key(f, cwd);
            shard_of(&key, shard.count) == shard.index
        })
        .collect()
}

/// How the replay of one run file ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileVerdict {
    Ok,
    Updated,
    Mismatch,
    Diverged,
    Error,
}

/// The replay of one run file, as `diag replay` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct FileResult {
    pub file: String,
    pub result: FileVerdict,
    pub run_id: Option<String>,
    pub status: Option<String>,
    pub path: Vec<String>,
    pub mismatches: Vec<Mismatch>,
    pub divergence: Option<String>,
    pub error: Option<String>,
    /// Wall time of the replay, for JUnit only (the JSON output stays deterministic).
    #[serde(skip)]
    pub seconds: f64,
}

impl FileResult {
    /// A file not replayed yet: an error until it is.
    pub fn new(file: String) -> FileResult {
        FileResult {
            file,
            result: FileVerdict::Error,
            run_id: None,
            status: None,
            path: Vec::new(),
            mismatches: Vec::new(),
            divergence: None,
            error: None,
            seconds: 0.0,
        }
    }

    /// A file that could not be replayed, and why.
    pub fn error(file: String, message: String) -> FileResult {
        FileResult {
            error: Some(message),
            ..FileResult::new(file)
        }
    }

    /// Whether the file fails the replay: a mismatch, a divergence or an error.
    pub fn failed(&self) -> bool {
        matches!(
            self.result,
            FileVerdict::Mismatch | FileVerdict::Diverged | FileVerdict::Error
        )
    }

    /// Its JUnit test case: a mismatch's message names the first mismatched field, a
    /// divergence's where it diverged; the details carry every mismatch.
    pub fn junit_case(&self) -> Case {
        let outcome = match self.result {
            FileVerdict::Ok | FileVerdict::Updated => CaseOutcome::Passed,
            FileVerdict::Mismatch => {
                let mut details = String::new();
                for m in &self.mismatches {
                    details.push_str(&format!(
                        "{}:\n  - expected: {}\n  + actual:   {}\n",
                        m.field, m.expected, m.actual
                    ));
                }
                let message = match self.mismatches.first() {
                    Some(m) => format!(
                        "{}: expected {}, got {}",
                        m.field,
                        one_line(&m.expected, 200),
                        one_line(&m.actual, 200)
                    ),
                    None => "the replay did not reproduce the expected result".to_string(),
                };
                CaseOutcome::Failure {
                    kind: "mismatch",
                    message,
                    details,
                }
            }
            FileVerdict::Diverged => {
                let d = self.divergence.clone().unwrap_or_default();
                CaseOutcome::Failure {
                    kind: "divergence",
                    message: format!("diverged at {}", one_line(&d, 300)),
                    details: d,
                }
            }
            FileVerdict::Error => CaseOutcome::Error {
                message: self.error.clone().unwrap_or_else(|| "error".to_string()),
            },
        };
        Case {
            name: self.file.clone(),
            seconds: self.seconds,
            outcome,
        }
    }
}

/// The `--json` document (schema [`REPLAY_JSON_SCHEMA`]) of the results, `failed` of them
/// failing.
pub fn document(results: &[FileResult], failed: usize) -> serde_json::Value {
    serde_json::json!({
        "schema": REPLAY_JSON_SCHEMA,
        "files": results,
        "passed": results.len() - failed,
        "failed": failed,
    })
}

/// The report file name of each run file, in order: its stem and `extension`, `-2`, `-3`, …
/// added when an earlier file already took the name.
pub fn report_names(files: &[PathBuf], extension: &str) -> Vec<String> {
    let mut taken: Vec<String> = Vec::new();
    for f in files {
        let stem = f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .filter(|s| !s.is_empty() && !s.starts_with('.'))
            .unwrap_or_else(|| "run".to_string());
        let mut name = format!("{stem}.{extension}");
        let mut n = 2;
        while taken.contains(&name) {
            name = format!("{stem}-{n}.{extension}");
            n += 1;
        }
        taken.push(name);
    }
    taken
}

/// How one run file ended, as JUnit tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum CaseOutcome {
    Passed,
    /// A mismatch or a divergence: `kind` is the failure's `type`.
    Failure {
        kind: &'static str,
        message: String,
        details: String,
    },
    /// The file could not be loaded or replayed.
    Error {
        message: String,
    },
}

/// One `<testcase>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub name: String,
    pub seconds: f64,
    pub outcome: CaseOutcome,
}

/// What the `<testsuite>` says about where and when it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteInfo {
    pub name: String,
    /// `YYYY-MM-DDTHH:MM:SS`, UTC, without a zone (as the JUnit schemas ask).
    pub timestamp: String,
    pub hostname: String,
    pub seconds: f64,
    pub properties: Vec<(String, String)>,
}

impl SuiteInfo {
    /// The suite of one `diag replay --junit`: named after its shard, with `--jobs` and the
    /// shard as properties.
    pub fn replay(
        shard: Option<Shard>,
        jobs: usize,
        seconds: f64,
        timestamp: String,
        hostname: String,
    ) -> SuiteInfo {
        let mut properties = vec![("jobs".to_string(), jobs.to_string())];
        if let Some(shard) = shard {
            properties.push(("shard".to_string(), shard.to_string()));
        }
        SuiteInfo {
            name: match shard {
                Some(shard) => format!("diag.replay shard {shard}"),
                None => "diag.replay".to_string(),
            },
            timestamp,
            hostname,
            seconds,
            properties,
        }
    }
}

/// The class name of every test case.
pub const CLASSNAME: &str = "diag.replay";

/// XML 1.0 cannot carry most control characters, even escaped: they become U+FFFD.
fn xml_text(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => c,
            c if (c as u32) < 0x20 => '\u{FFFD}',
            '\u{FFFE}' | '\u{FFFF}' => '\u{FFFD}',
            c => c,
        })
        .collect()
}

/// Seconds with millisecond precision (Surefire's time pattern allows three decimals).
fn secs(s: f64) -> String {
    let s = if s.is_finite() && s > 0.0 { s } else { 0.0 };
    format!("{s:.3}")
}

/// The JUnit XML document: `<testsuites>` holding one `<testsuite>` with one `<testcase>` per
/// run file, in the order given. Text and attributes are escaped by the XML writer.
pub fn junit_xml(suite: &SuiteInfo, cases: &[Case]) -> Result<Vec<u8>, std::io::Error> {
    let failures = cases
        .iter()
        .filter(|c| matches!(c.outcome, CaseOutcome::Failure { .. }))
        .count()
        .to_string();
    let errors = cases
        .iter()
        .filter(|c| matches!(c.outcome, CaseOutcome::Error { .. }))
        .count()
        .to_string();
    let tests = cases.len().to_string();
    let time = secs(suite.seconds);
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;

    let mut root = BytesStart::new("testsuites");
    root.push_attribute(("name", "diag replay"));
    root.push_attribute(("tests", tests.as_str()));
    root.push_attribute(("failures", failures.as_str()));
    root.push_attribute(("errors", errors.as_str()));
    root.push_attribute(("time", time.as_str()));
    w.write_event(Event::Start(root))?;

    let mut ts = BytesStart::new("testsuite");
    ts.push_attribute(("name", xml_text(&suite.name).as_str()));
    ts.push_attribute(("tests", tests.as_str()));
    ts.push_attribute(("failures", failures.as_str()));
    ts.push_attribute(("errors", errors.as_str()));
    ts.push_attribute(("skipped", "0"));
    ts.push_attribute(("time", time.as_str()));
    ts.push_attribute(("timestamp", suite.timestamp.as_str()));
    ts.push_attribute(("hostname", xml_text(&suite.hostname).as_str()));
    ts.push_attribute(("id", "0"));
    ts.push_attribute(("package", CLASSNAME));
    w.write_event(Event::Start(ts))?;

    w.write_event(Event::Start(BytesStart::new("properties")))?;
    for (name, value) in &suite.properties {
        let mut p = BytesStart::new("property");
        p.push_attribute(("name", xml_text(name).as_str()));
        p.push_attribute(("value", xml_text(value).as_str()));
        w.write_event(Event::Empty(p))?;
    }
    w.write_event(Event::End(BytesEnd::new("properties")))?;

    for case in cases {
        let mut tc = BytesStart::new("testcase");
        tc.push_attribute(("name", xml_text(&case.name).as_str()));
        tc.push_attribute(("classname", CLASSNAME));
        tc.push_attribute(("time", secs(case.seconds).as_str()));
        let (tag, kind, message, details) = match &case.outcome {
            CaseOutcome::Passed => {
                w.write_event(Event::Empty(tc))?;
                continue;
            }
            CaseOutcome::Failure {
                kind,
                message,
                details,
            } => ("failure", *kind, message, details),
            CaseOutcome::Error { message } => ("error", "error", message, message),
        };
        w.write_event(Event::Start(tc))?;
        let mut f = BytesStart::new(tag);
        f.push_attribute(("message", xml_text(message).as_str()));
        f.push_attribute(("type", kind));
        w.write_event(Event::Start(f))?;
        w.write_event(Event::Text(BytesText::new(&xml_text(details))))?;
        w.write_event(Event::End(BytesEnd::new(tag)))?;
        w.write_event(Event::End(BytesEnd::new("testcase")))?;
    }

    w.write_event(Event::Empty(BytesStart::new("system-out")))?;
    w.write_event(Event::Empty(BytesStart::new("system-err")))?;
    w.write_event(Event::End(BytesEnd::new("testsuite")))?;
    w.write_event(Event::End(BytesEnd::new("testsuites")))?;
    let mut out = w.into_inner();
    out.push(b'\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn jobs_and_shards_are_validated() {
        assert_eq!(parse_jobs("3"), Ok(3));
        assert!(parse_jobs("0").is_err());
        assert!(parse_jobs("x").is_err());
        assert!(parse_jobs("-1").is_err());
        assert_eq!(parse_shard("2/3"), Ok(Shard { index: 2, count: 3 }));
        assert_eq!(parse_shard("1/1"), Ok(Shard { index: 1, count: 1 }));
        for bad in [
            "0/3", "4/3", "x", "1/0", "0/0", "1/", "/3", "a/b", "1/3/2", "-1/3",
        ] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_shard_key_ignores_dot_components_and_the_checkout_location() {
        let cwd = PathBuf::from("/home/ci/work/repo");
        let a = shard_key(&cwd.join("fixtures/runs/a.json"), Some(&cwd));
        let b = shard_key(Path::new("./fixtures/./runs/a.json"), Some(&cwd));
        let other = PathBuf::from("/srv/checkout");
        let c = shard_key(&other.join("fixtures/runs/a.json"), Some(&other));
        assert_eq!(a, "fixtures/runs/a.json");
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(shard_key(Path::new("/x/y.json"), Some(&cwd)), "/x/y.json");
    }

    #[test]
    fn shards_are_fixed_by_the_key_and_cover_every_shard() {
        // Pinned: a change of hash would move files between CI runners.
        let keys: Vec<String> = (0..300).map(|i| format!("fixtures/f{i}.json")).collect();
        let mut counts = [0usize; 3];
        for k in &keys {
            let s = shard_of(k, 3);
            assert!((1..=3).contains(&s));
            assert_eq!(s, shard_of(k, 3));
            counts[(s - 1) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 60), "{counts:?}");
        assert_eq!(shard_of("anything", 1), 1);
        // 1 + (first 8 bytes of sha256, big-endian) mod N, as documented.
        assert_eq!(shard_of("fixtures/runs/pass.json", 3), 3);
        assert_eq!(shard_of("fixtures/runs/pass.json", 7), 5);
    }

    #[test]
    fn junit_escapes_markup_and_drops_control_characters() {
        let suite = SuiteInfo {
            name: "diag.replay".into(),
            timestamp: "2026-01-02T03:04:05".into(),
            hostname: "host".into(),
            seconds: 1.5,
            properties: vec![("shard".into(), "1/2".into())],
        };
        let cases = vec![
            Case {
                name: "a&b<c>.json".into(),
                seconds: 0.25,
                outcome: CaseOutcome::Failure {
                    kind: "mismatch",
                    message: "answer: \"x\" <y> \u{1}".into(),
                    details: "]]> & <z>".into(),
                },
            },
            Case {
                name: "ok.json".into(),
                seconds: 0.0,
                outcome: CaseOutcome::Passed,
            },
        ];
        let xml = String::from_utf8(junit_xml(&suite, &cases).unwrap()).unwrap();
        assert!(xml.contains("name=\"a&amp;b&lt;c&gt;.json\""), "{xml}");
        assert!(xml.contains("&quot;x&quot; &lt;y&gt; \u{FFFD}"), "{xml}");
        assert!(xml.contains("]]&gt; &amp; &lt;z&gt;"), "{xml}");
        assert!(!xml.contains('\u{1}'));
        assert!(
            xml.contains("tests=\"2\" failures=\"1\" errors=\"0\""),
            "{xml}"
        );
    }
}
