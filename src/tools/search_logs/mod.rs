//! `search_logs`: finds lines in the log files named in the config (files, directories walked
//! recursively, glob patterns), plain text or JSON lines, optionally gzip-compressed.
//!
//! What a diagnosis needs from logs is a small, exact, reproducible excerpt, so the search is
//! built around bounds rather than features:
//!
//! - **Order.** Files are searched in sorted path order and lines in file order; the search
//!   stops at `limit + 1` matches. The output is therefore the *first* `limit` matches in
//!   (path, line number) order, and `"truncated": true` says more exist.
//! - **Memory.** Files are streamed through a `BufReader`; a physical line is read into memory
//!   only up to `max_scan_line_bytes` (the rest of it is neither kept nor searched), so a huge
//!   file or a file without newlines never loads whole.
//! - **Long lines.** A matching line longer than `max_line_bytes` is cut at a character
//!   boundary and its match carries `"line_truncated": true` (the key is absent otherwise).
//!   The top-level `truncated` speaks only about matches left out, so a model can tell "there
//!   is more" from "this line is longer".
//! - **Bad bytes.** Invalid UTF-8 is converted lossily (U+FFFD), never an error. A file with a
//!   NUL byte in its first 8 KiB (after decompression) is binary and skipped.
//! - **Files that go away.** A file that vanishes between listing and reading, a broken
//!   symlink, an unreadable directory or a read error mid-file does not fail the search: the
//!   file is listed under `"skipped": [{"file", "reason"}]` (at most 100 entries; the key is
//!   absent when nothing was skipped) and the matches found before a mid-file error are kept.
//!
//! Output: `{"matches": [{"file", "line_no", "timestamp", "line"}], "truncated": bool}` plus
//! the optional keys above. `timestamp` is the line's own time normalized to RFC 3339 UTC, or
//! `null`: for JSON lines the `ts`, `time`, `timestamp` or `@timestamp` field (an RFC 3339 /
//! ISO-8601 string, or epoch seconds, milliseconds, microseconds or nanoseconds by magnitude);
//! for plain text a leading ISO-8601 timestamp (optionally after `[`; `T` or space separator;
//! `.` or `,` fraction; `Z`, `±HH:MM`, `±HHMM` or no offset, which is read as UTC).
//!
//! Filters: `query` is a case-insensitive substring, or with `regex: true` a case-insensitive
//! regular expression (`(?-i)` turns case sensitivity back on) compiled with a size limit.
//! `since`/`until` (RFC 3339, both inclusive) keep lines whose time is in the window; a line
//! without its own timestamp (a stack trace under a log record) takes the time of the nearest
//! timestamped line above it in the same file, and a line with neither is left out when a
//! window is given. `service` keeps a JSON line whose `service` (or `service.name`) field names
//! the service; a line without that field is kept when the file name, or a directory between
//! the configured source and the file, names it. "Names" means equal, or followed by `-`, `_`
//! or `.`, ignoring case: service `checkout` matches `checkout.log.gz`, `checkout-2026.log`,
//! `checkout/app.log` and `{"service": "checkout-service"}`, not `payment-checkout.log`.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use regex::bytes::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use time::{Date, Month, PrimitiveDateTime, Time, UtcOffset};

use super::args::{bounded, invalid, prefix_at_boundary, Args};
use super::{Tool, ToolContext, ToolError, ToolFuture, ToolSpec};
use crate::clock::Timestamp;

/// The bytes sniffed for NUL to call a file binary (as git and ripgrep do).
const BINARY_SNIFF_BYTES: usize = 8 * 1024;
/// How many skip notes an output carries at most; a glob over a huge tree must not flood it.
const MAX_SKIPPED_NOTES: usize = 100;
/// Directory depth walked below a configured directory; guards against pathological trees.
const MAX_DEPTH: usize = 32;
/// How often (in lines) a running search checks whether its caller gave up.
const CANCEL_CHECK_LINES: u64 = 4096;

/// Bounds of one search. The defaults suit a model's context window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSearchLimits {
    /// Matches returned when the call gives no `limit`.
    pub default_limit: usize,
    /// The largest `limit` honoured; a larger one is capped, not rejected.
    pub max_limit: usize,
    /// Matching lines longer than this (in bytes) are cut.
    pub max_line_bytes: usize,
    /// How much of one physical line is read and searched; the rest is skipped unread.
    pub max_scan_line_bytes: usize,
    /// Files searched at most per call; the rest are left out and `truncated` is set.
    pub max_files: usize,
    /// Size limit of the compiled query (the `regex` crate's `size_limit`).
    pub max_regex_bytes: usize,
    /// Longest accepted `query`, in characters.
    pub max_query_chars: usize,
}

impl Default for LogSearchLimits {
    fn default() -> Self {
        LogSearchLimits {
            default_limit: 50,
            max_limit: 500,
            max_line_bytes: 4 * 1024,
            max_scan_line_bytes: 1024 * 1024,
            max_files: 10_000,
            max_regex_bytes: 1024 * 1024,
            max_query_chars: 1024,
        }
    }
}

/// A validated `search_logs` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogQuery {
    pub query: String,
    pub regex: bool,
    pub service: Option<String>,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    pub limit: usize,
}

impl LogQuery {
    /// A substring query with no filters and the default limit.
    pub fn new(query: impl Into<String>, limits: &LogSearchLimits) -> Self {
        LogQuery {
            query: query.into(),
            regex: false,
            service: None,
            since: None,
            until: None,
            limit: limits.default_limit,
        }
    }

    /// Reads and checks a call's JSON arguments.
    pub fn from_arguments(arguments: &Value, limits: &LogSearchLimits) -> Result<Self, ToolError> {
        let args = Args::new(
            arguments,
            &["query", "regex", "service", "since", "until", "limit"],
        )?;
        let query = args.req_str("query")?;
        if query.chars().count() > limits.max_query_chars {
            return Err(invalid(format!(
                "parameter 'query' is longer than {} characters",
                limits.max_query_chars
            )));
        }
        let time = |key: &str| -> Result<Option<Timestamp>, ToolError> {
            args.opt_str(key)?
                .map(|s| {
                    Timestamp::parse_rfc3339(s.trim()).map_err(|e| {
                        invalid(format!(
                            "parameter '{key}' must be an RFC 3339 time such as \
                             2026-11-30T14:00:00Z, got '{}': {e}",
                            bounded(s, 64)
                        ))
                    })
                })
                .transpose()
        };
        let since = time("since")?;
        let until = time("until")?;
        if let (Some(s), Some(u)) = (since, until) {
            if s > u {
                return Err(invalid(format!("'since' ({s}) is after 'until' ({u})")));
            }
        }
        let service = args
            .opt_str("service")?
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let limit = args
            .opt_positive_int("limit")?
            .map(|n| {
                usize::try_from(n)
                    .unwrap_or(usize::MAX)
                    .min(limits.max_limit)
            })
            .unwrap_or(limits.default_limit);
        Ok(LogQuery {
            query: query.to_string(),
            regex: args.opt_bool("regex")?.unwrap_or(false),
            service,
            since,
            until,
            limit,
        })
    }
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogMatch {
    pub file: String,
    /// 1-based physical line number in the (decompressed) file.
    pub line_no: u64,
    pub timestamp: Option<Timestamp>,
    pub line: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub line_truncated: bool,
}

/// A file (or source) that could not be searched, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedFile {
    pub file: String,
    pub reason: String,
}

/// The result of one search, serialized as the tool's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogSearchOutput {
    pub matches: Vec<LogMatch>,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedFile>,
}

/// The `search_logs` tool over a fixed list of sources.
#[derive(Clone)]
pub struct SearchLogs {
    inner: Arc<Inner>,
}

struct Inner {
    sources: Vec<PathBuf>,
    limits: LogSearchLimits,
}

impl SearchLogs {
    /// `sources` are files, directories (searched recursively) or glob patterns; a source that
    /// does not exist is reported under `skipped` at search time, so a log directory that
    /// appears later is picked up without a restart.
    pub fn new(sources: Vec<PathBuf>, limits: LogSearchLimits) -> Self {
        SearchLogs {
            inner: Arc::new(Inner { sources, limits }),
        }
    }

    pub fn limits(&self) -> &LogSearchLimits {
        &self.inner.limits
    }

    /// Runs a search on the calling thread (it blocks on file I/O).
    pub fn search(&self, query: &LogQuery) -> Result<LogSearchOutput, ToolError> {
        self.inner.search(query, &AtomicBool::new(false))
    }
}

impl Tool for SearchLogs {
    fn spec(&self) -> ToolSpec {
        let l = &self.inner.limits;
        ToolSpec {
            name: "search_logs".into(),
            description: format!(
                "Search the configured log files (plain text and JSON lines, gzip included) for \
                 lines containing a text. Returns the first matches in file and line order with \
                 each line's timestamp; 'truncated' is true when more lines matched. Lines \
                 longer than {} bytes are cut and marked line_truncated.",
                l.max_line_bytes
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "Text to find, case-insensitive. With regex=true, a \
                            regular expression (Rust syntax), also case-insensitive unless it \
                            starts with (?-i)."
                    },
                    "regex": {
                        "type": "boolean",
                        "description": "Treat query as a regular expression.",
                        "default": false
                    },
                    "service": {
                        "type": "string",
                        "description": "Only lines of this service: the 'service' field of a \
                            JSON line, otherwise a log file or directory named after it \
                            (checkout.log, checkout-*.log, checkout/)."
                    },
                    "since": {
                        "type": "string",
                        "format": "date-time",
                        "description": "RFC 3339; only lines at or after this time."
                    },
                    "until": {
                        "type": "string",
                        "format": "date-time",
                        "description": "RFC 3339; only lines at or before this time."
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": l.max_limit,
                        "default": l.default_limit,
                        "description": "Maximum number of matches to return."
                    }
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        }
    }

    fn call<'a>(&'a self, arguments: &'a Value, _cx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let query = LogQuery::from_arguments(arguments, &self.inner.limits)?;
            let inner = Arc::clone(&self.inner);
            // File I/O blocks, so it runs off the async workers. If the caller gives up (the
            // registry's timeout drops this future), the guard raises the flag and the search
            // stops at its next check instead of reading on for nobody.
            let cancel = Arc::new(AtomicBool::new(false));
            let guard = CancelOnDrop(Arc::clone(&cancel));
            let result = tokio::task::spawn_blocking(move || inner.search(&query, &cancel)).await;
            drop(guard);
            let output =
                result.map_err(|e| ToolError::Failed(format!("log search stopped: {e}")))??;
            serde_json::to_value(output)
                .map_err(|e| ToolError::Failed(format!("log search output: {e}")))
        })
    }
}

struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A file to search and the configured source it was found under (for service names).
struct Listed {
    root: PathBuf,
}

struct Search<'q> {
    limits: &'q LogSearchLimits,
    query: &'q LogQuery,
    pattern: Regex,
    /// Lowercased service filter.
    service: Option<String>,
    matches: Vec<LogMatch>,
    skipped: Vec<SkippedFile>,
    truncated: bool,
}

impl Search<'_> {
    fn skip(&mut self, file: &Path, reason: impl Into<String>) {
        if self.skipped.len() < MAX_SKIPPED_NOTES {
            self.skipped.push(SkippedFile {
                file: display(file),
                reason: bounded(&reason.into(), 200),
            });
        }
    }

    fn full(&self) -> bool {
        self.matches.len() > self.query.limit
    }
}

impl Inner {
    fn search(&self, query: &LogQuery, cancel: &AtomicBool) -> Result<LogSearchOutput, ToolError> {
        let pattern_text = if query.regex {
            query.query.clone()
        } else {
            regex::escape(&query.query)
        };
        let pattern = RegexBuilder::new(&pattern_text)
            .case_insensitive(true)
            .size_limit(self.limits.max_regex_bytes)
            .dfa_size_limit(self.limits.max_regex_bytes)
            .build()
            .map_err(|e| invalid(format!("invalid regex: {}", bounded(&e.to_string(), 300))))?;
        let mut s = Search {
            limits: &self.limits,
            query,
            pattern,
            service: query.service.as_ref().map(|s| s.to_lowercase()),
            matches: Vec::new(),
            skipped: Vec::new(),
            truncated: false,
        };

        let files = self.list_files(&mut s);
        for (path, listed) in &files {
            if cancel.load(Ordering::Relaxed) || s.full() {
                break;
            }
            search_file(&mut s, path, listed, cancel);
        }
        if s.full() {
            s.matches.truncate(query.limit);
            s.truncated = true;
        }
        Ok(LogSearchOutput {
            matches: s.matches,
            truncated: s.truncated,
            skipped: s.skipped,
        })
    }

    /// Every file under every source, deduplicated and sorted by path (a `BTreeMap`), so the
    /// search order does not depend on the order a directory happens to list its entries.
    fn list_files(&self, s: &mut Search) -> BTreeMap<PathBuf, Listed> {
        let mut files = BTreeMap::new();
        for source in &self.sources {
            let text = source.to_string_lossy();
            let is_pattern =
                text.contains(['*', '?', '[']) && fs::symlink_metadata(source).is_err();
            if !is_pattern {
                add_path(s, &mut files, source, source, 0);
                continue;
            }
            match glob::glob(&text) {
                Err(e) => s.skip(source, format!("invalid glob pattern: {e}")),
                Ok(paths) => {
                    let root = glob_root(source);
                    let mut any = false;
                    for entry in paths {
                        any = true;
                        match entry {
                            Ok(p) => add_path(s, &mut files, &p, &root, 0),
                            Err(e) => s.skip(e.path(), describe_io(e.error())),
                        }
                    }
                    if !any {
                        s.skip(source, "no file matches the pattern");
                    }
                }
            }
        }
        if files.len() > self.limits.max_files {
            let first_left_out = nth_key(&files, self.limits.max_files);
            let rest = files.split_off(&first_left_out);
            s.truncated = true;
            s.skip(
                &first_left_out,
                format!(
                    "more than {} files: this and {} later files were not searched",
                    self.limits.max_files,
                    rest.len() - 1
                ),
            );
        }
        files
    }
}

fn nth_key(files: &BTreeMap<PathBuf, Listed>, n: usize) -> PathBuf {
    files.keys().nth(n).cloned().unwrap_or_default()
}

/// The leading components of a glob that contain no pattern character: the directory the
/// pattern is "about", below which directory names may name a service.
fn glob_root(pattern: &Path) -> PathBuf {
    pattern
        .components()
        .take_while(|c| !c.as_os_str().to_string_lossy().contains(['*', '?', '[']))
        .collect()
}

fn add_path(
    s: &mut Search,
    files: &mut BTreeMap<PathBuf, Listed>,
    path: &Path,
    root: &Path,
    depth: usize,
) {
    // `metadata` follows symlinks: a link to a log file is searched, a broken link is noted.
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return s.skip(path, describe_io(&e)),
    };
    if meta.is_file() {
        files.entry(path.to_path_buf()).or_insert(Listed {
            root: root.to_path_buf(),
        });
    } else if meta.is_dir() {
        walk(s, files, path, root, depth);
    } else {
        // FIFOs, sockets and devices could block a read forever.
        s.skip(path, "not a regular file");
    }
}

fn walk(
    s: &mut Search,
    files: &mut BTreeMap<PathBuf, Listed>,
    dir: &Path,
    root: &Path,
    depth: usize,
) {
    if depth >= MAX_DEPTH {
        return s.skip(
            dir,
            format!("deeper than {MAX_DEPTH} directories; not searched"),
        );
    }
    let entries = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => return s.skip(dir, describe_io(&e)),
    };
    let mut children = Vec::new();
    for entry in entries {
        match entry {
            Ok(e) => children.push(e),
            Err(e) => s.skip(dir, describe_io(&e)),
        }
    }
    children.sort_by_key(|e| e.file_name());
    for child in children {
        let path = child.path();
        let is_symlink = child.file_type().map(|t| t.is_symlink()).unwrap_or(false);
        if is_symlink && fs::metadata(&path).map(|m| m.is_dir()).unwrap_or(false) {
            // A symlinked directory can form a cycle; configured sources name real folders.
            s.skip(&path, "symlinked directory not followed");
            continue;
        }
        add_path(s, files, &path, root, depth + 1);
    }
}

/// An I/O error as a stable, short reason (the OS text varies between platforms).
fn describe_io(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "not found (deleted, or a broken symlink)".to_string(),
        io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => e.to_string(),
    }
}

fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn search_file(s: &mut Search, path: &Path, listed: &Listed, cancel: &AtomicBool) {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return s.skip(path, describe_io(&e)),
    };
    let mut raw = BufReader::with_capacity(64 * 1024, file);
    let is_gzip = match raw.fill_buf() {
        Ok(head) => head.starts_with(&[0x1f, 0x8b]),
        Err(e) => return s.skip(path, describe_io(&e)),
    };
    let mut reader: Box<dyn Read> = if is_gzip {
        // Multi-member: `cat a.gz b.gz` and some rotators produce concatenated members.
        Box::new(flate2::bufread::MultiGzDecoder::new(raw))
    } else {
        Box::new(raw)
    };
    let mut head = Vec::with_capacity(BINARY_SNIFF_BYTES);
    if let Err(e) = reader
        .by_ref()
        .take(BINARY_SNIFF_BYTES as u64)
        .read_to_end(&mut head)
    {
        return s.skip(
            path,
            format!("read error before line 1: {}", describe_io(&e)),
        );
    }
    if memchr::memchr(0, &head).is_some() {
        return s.skip(path, "binary file");
    }
    let mut lines = BufReader::with_capacity(64 * 1024, Cursor::new(head).chain(reader));

    let file_names_service = s
        .service
        .as_deref()
        .is_some_and(|svc| path_names_service(path, &listed.root, svc));
    let window = s.query.since.is_some() || s.query.until.is_some();
    let file_label = display(path);
    let mut buf = Vec::new();
    let mut line_no: u64 = 0;
    // The time of the nearest timestamped line so far: continuation lines inherit it.
    let mut last_ts: Option<Timestamp> = None;

    loop {
        if line_no.is_multiple_of(CANCEL_CHECK_LINES) && cancel.load(Ordering::Relaxed) {
            return;
        }
        let dropped = match read_line_bounded(&mut lines, &mut buf, s.limits.max_scan_line_bytes) {
            Ok(Some(d)) => d,
            Ok(None) => return,
            Err(e) => {
                let reason = format!("read error after line {line_no}: {}", describe_io(&e));
                return s.skip(path, reason);
            }
        };
        line_no += 1;
        let line = trim_newline(&buf);
        let is_match = s.pattern.is_match(line);
        // Without a window, non-matching lines need no parsing at all: the common fast path.
        if !is_match && !window {
            continue;
        }
        let meta = line_meta(line);
        if meta.timestamp.is_some() {
            last_ts = meta.timestamp;
        }
        if !is_match {
            continue;
        }
        if window {
            let Some(t) = meta.timestamp.or(last_ts) else {
                continue;
            };
            if s.query.since.is_some_and(|since| t < since)
                || s.query.until.is_some_and(|until| t > until)
            {
                continue;
            }
        }
        if let Some(svc) = s.service.as_deref() {
            let keep = match &meta.service {
                Some(field) => name_names_service(field, svc),
                None => file_names_service,
            };
            if !keep {
                continue;
            }
        }
        let text = String::from_utf8_lossy(line);
        let shown = prefix_at_boundary(&text, s.limits.max_line_bytes);
        s.matches.push(LogMatch {
            file: file_label.clone(),
            line_no,
            timestamp: meta.timestamp,
            line: shown.to_string(),
            line_truncated: dropped > 0 || shown.len() < text.len(),
        });
        if s.full() {
            return;
        }
    }
}

fn trim_newline(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Reads one line (without its `\n`) into `buf`, keeping at most `max` bytes of it and
/// consuming the rest unread. Returns the number of bytes dropped, or `None` at end of input.
fn read_line_bounded<R: BufRead>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<u64>> {
    buf.clear();
    let mut dropped: u64 = 0;
    let mut any = false;
    loop {
        let available = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(any.then_some(dropped));
        }
        any = true;
        let (chunk, used, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (&available[..i], i + 1, true),
            None => (available, available.len(), false),
        };
        let take = max.saturating_sub(buf.len()).min(chunk.len());
        buf.extend_from_slice(&chunk[..take]);
        dropped += (chunk.len() - take) as u64;
        r.consume(used);
        if done {
            return Ok(Some(dropped));
        }
    }
}

/// Whether a name (a file or directory name, or a JSON `service` value) names `service`
/// (lowercase): equal, or `service` followed by `-`, `_` or `.`.
fn name_names_service(name: &str, service: &str) -> bool {
    let name = name.to_lowercase();
    match name.strip_prefix(service) {
        Some("") => true,
        Some(rest) => rest.starts_with(['-', '_', '.']),
        None => false,
    }
}

/// The file name and the directories between the configured source and the file are checked;
/// the source's own path is not, so `/var/log/...` does not make every file a "log" service.
fn path_names_service(path: &Path, root: &Path, service: &str) -> bool {
    let below = path.strip_prefix(root).unwrap_or(path);
    let mut names: Vec<String> = below
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if names.is_empty() {
        // The source is the file itself.
        names.extend(path.file_name().map(|n| n.to_string_lossy().into_owned()));
    }
    names.iter().any(|n| name_names_service(n, service))
}

/// What a line says about itself: its time and, for JSON lines, its service.
#[derive(Debug, Default, PartialEq)]
struct LineMeta {
    timestamp: Option<Timestamp>,
    service: Option<String>,
}

/// Only the fields the filters need; serde skips the rest of the object without building it.
#[derive(Deserialize)]
struct JsonFields {
    ts: Option<Value>,
    time: Option<Value>,
    timestamp: Option<Value>,
    #[serde(rename = "@timestamp")]
    at_timestamp: Option<Value>,
    service: Option<Value>,
}

fn line_meta(line: &[u8]) -> LineMeta {
    let first = line.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        if let Ok(fields) = serde_json::from_slice::<JsonFields>(line) {
            let timestamp = [
                fields.ts,
                fields.time,
                fields.timestamp,
                fields.at_timestamp,
            ]
            .into_iter()
            .flatten()
            .find_map(|v| json_time(&v));
            let service = match fields.service {
                Some(Value::String(s)) => Some(s),
                Some(Value::Object(o)) => o.get("name").and_then(Value::as_str).map(str::to_string),
                _ => None,
            };
            return LineMeta { timestamp, service };
        }
    }
    LineMeta {
        timestamp: leading_timestamp(line),
        service: None,
    }
}

fn json_time(v: &Value) -> Option<Timestamp> {
    match v {
        Value::String(s) => {
            let (t, rest) = parse_iso(s.as_bytes())?;
            rest.is_empty().then_some(t)
        }
        Value::Number(n) => {
            let x = n.as_f64()?;
            // Epoch numbers carry their unit only in their size; these ranges do not overlap
            // for any date between 1973 and 5138.
            let ms = match x.abs() {
                a if a < 1e11 => x * 1e3,
                a if a < 1e14 => x,
                a if a < 1e17 => x / 1e3,
                _ => x / 1e6,
            };
            ms.is_finite()
                .then(|| Timestamp::from_unix_ms(ms.floor() as i64))
        }
        _ => None,
    }
}

/// A timestamp at the start of a plain-text line, optionally after whitespace and one `[`.
fn leading_timestamp(line: &[u8]) -> Option<Timestamp> {
    let start = line.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = &line[start..];
    let rest = rest.strip_prefix(b"[").unwrap_or(rest);
    let (t, after) = parse_iso(rest)?;
    // `2026-11-30T14:00:00Z123` is not a timestamp followed by text.
    match after.first() {
        Some(b) if b.is_ascii_alphanumeric() => None,
        _ => Some(t),
    }
}

/// Parses `YYYY-MM-DD[T ]HH:MM:SS[(.|,)fraction][Z|±HH:MM|±HHMM|±HH]` at the start of `s`;
/// returns the time and what follows it. No offset means UTC.
fn parse_iso(s: &[u8]) -> Option<(Timestamp, &[u8])> {
    let mut p = Cursor0 { s, i: 0 };
    let year = p.digits(4)? as i32;
    p.byte(b'-')?;
    let month = p.digits(2)? as u8;
    p.byte(b'-')?;
    let day = p.digits(2)? as u8;
    match p.peek()? {
        b'T' | b't' | b' ' => p.i += 1,
        _ => return None,
    }
    let hour = p.digits(2)? as u8;
    p.byte(b':')?;
    let minute = p.digits(2)? as u8;
    p.byte(b':')?;
    let second = p.digits(2)? as u8;
    let mut milli: u16 = 0;
    if matches!(p.peek(), Some(b'.' | b',')) && p.s.get(p.i + 1).is_some_and(u8::is_ascii_digit) {
        p.i += 1;
        let mut scale = 100u16;
        while let Some(d) = p.peek().filter(u8::is_ascii_digit) {
            milli += u16::from(d - b'0') * scale;
            scale /= 10;
            p.i += 1;
        }
    }
    let offset = match p.peek() {
        Some(b'Z' | b'z') => {
            p.i += 1;
            UtcOffset::UTC
        }
        Some(sign @ (b'+' | b'-')) => {
            let save = p.i;
            p.i += 1;
            let parsed = (|| {
                let h = p.digits(2)? as i8;
                let m = if p.peek() == Some(b':') {
                    p.i += 1;
                    p.digits(2)? as i8
                } else {
                    p.digits(2).map_or(0, |m| m as i8)
                };
                let (h, m) = if sign == b'-' { (-h, -m) } else { (h, m) };
                UtcOffset::from_hms(h, m, 0).ok()
            })();
            match parsed {
                Some(o) => o,
                None => {
                    p.i = save;
                    UtcOffset::UTC
                }
            }
        }
        _ => UtcOffset::UTC,
    };
    let date = Date::from_calendar_date(year, Month::try_from(month).ok()?, day).ok()?;
    // A leap second (`:60`) is read as the last millisecond of its minute.
    let (second, milli) = if second == 60 {
        (59, 999)
    } else {
        (second, milli)
    };
    let time = Time::from_hms_milli(hour, minute, second, milli).ok()?;
    let t = PrimitiveDateTime::new(date, time).assume_offset(offset);
    let ms = t.unix_timestamp_nanos() / 1_000_000;
    Some((Timestamp::from_unix_ms(i64::try_from(ms).ok()?), &s[p.i..]))
}

struct Cursor0<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor0<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn byte(&mut self, b: u8) -> Option<()> {
        (self.peek()? == b).then(|| self.i += 1)
    }

    fn digits(&mut self, n: usize) -> Option<u32> {
        let d = self.s.get(self.i..self.i + n)?;
        if !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.i += n;
        Some(d.iter().fold(0, |acc, b| acc * 10 + u32::from(b - b'0')))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Option<String> {
        leading_timestamp(s.as_bytes()).map(|t| t.to_string())
    }

    #[test]
    fn leading_timestamps_in_common_shapes() {
        let cases = [
            (
                "2026-11-30T14:02:03Z error",
                Some("2026-11-30T14:02:03.000Z"),
            ),
            (
                "2026-11-30T14:02:03.456789Z x",
                Some("2026-11-30T14:02:03.456Z"),
            ),
            (
                "2026-11-30 14:02:03,120 ERROR",
                Some("2026-11-30T14:02:03.120Z"),
            ),
            (
                "[2026-11-30T16:02:03+02:00] x",
                Some("2026-11-30T14:02:03.000Z"),
            ),
            (
                "2026-11-30T16:02:03+0200 x",
                Some("2026-11-30T14:02:03.000Z"),
            ),
            ("2026-11-30T14:02:03", Some("2026-11-30T14:02:03.000Z")),
            (
                "  2026-11-30T14:02:03-01:00",
                Some("2026-11-30T15:02:03.000Z"),
            ),
            ("2026-11-30T14:02:03Zabc", None),
            ("2026-13-30T14:02:03Z", None),
            ("Nov 30 14:02:03 host x", None),
            ("error at 2026-11-30T14:02:03Z", None),
            ("", None),
        ];
        for (line, want) in cases {
            assert_eq!(ts(line).as_deref(), want, "{line}");
        }
    }

    #[test]
    fn json_line_metadata() {
        let m = line_meta(br#"{"ts":"2026-11-30T14:00:00Z","service":"checkout","msg":"x"}"#);
        assert_eq!(m.timestamp.unwrap().to_string(), "2026-11-30T14:00:00.000Z");
        assert_eq!(m.service.as_deref(), Some("checkout"));
        let m = line_meta(br#"{"time":1796047200,"service":{"name":"pay"}}"#);
        assert_eq!(m.timestamp.unwrap().to_string(), "2026-11-30T14:00:00.000Z");
        assert_eq!(m.service.as_deref(), Some("pay"));
        let m = line_meta(br#"{"timestamp":1796047200123}"#);
        assert_eq!(m.timestamp.unwrap().to_string(), "2026-11-30T14:00:00.123Z");
        // Not JSON after all: falls back to plain text.
        assert_eq!(line_meta(b"{ broken").timestamp, None);
    }

    #[test]
    fn service_names() {
        for (name, svc, want) in [
            ("checkout.log.gz", "checkout", true),
            ("Checkout-2026.log", "checkout", true),
            ("checkout", "checkout", true),
            ("checkout_service", "checkout", true),
            ("payment-checkout.log", "checkout", false),
            ("checkoutx.log", "checkout", false),
        ] {
            assert_eq!(name_names_service(name, svc), want, "{name}");
        }
        let root = Path::new("/var/log");
        assert!(path_names_service(
            Path::new("/var/log/checkout/app.log"),
            root,
            "checkout"
        ));
        assert!(!path_names_service(
            Path::new("/var/log/app.log"),
            root,
            "log"
        ));
        assert!(path_names_service(
            Path::new("/x/checkout.log"),
            Path::new("/x/checkout.log"),
            "checkout"
        ));
    }

    #[test]
    fn bounded_line_reader() {
        let mut r = BufReader::with_capacity(4, &b"abcdefgh\r\nij\n\nk"[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line_bounded(&mut r, &mut buf, 3).unwrap(), Some(6));
        assert_eq!(buf, b"abc");
        assert_eq!(read_line_bounded(&mut r, &mut buf, 3).unwrap(), Some(0));
        assert_eq!(buf, b"ij");
        assert_eq!(read_line_bounded(&mut r, &mut buf, 3).unwrap(), Some(0));
        assert_eq!(buf, b"");
        assert_eq!(read_line_bounded(&mut r, &mut buf, 3).unwrap(), Some(0));
        assert_eq!(buf, b"k");
        assert_eq!(read_line_bounded(&mut r, &mut buf, 3).unwrap(), None);
    }
}
