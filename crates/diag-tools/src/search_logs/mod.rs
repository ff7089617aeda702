//! `search_logs`: finds lines in the log files named in the config (files, directories walked
//! recursively, glob patterns), plain text or JSON lines, optionally gzip-compressed, in the
//! timestamp formats services write ([`timefmt`]).
//!
//! What a diagnosis needs from logs is a small, exact, reproducible excerpt of files that may
//! be gigabytes long, so the search is built around bounds and around not reading what it
//! does not need:
//!
//! - **Order.** Files are listed in sorted path order and lines kept in file order: the output
//!   is the *first* `limit` matches in (path, line) order. Several files are searched at once
//!   (one thread per core); their results are put back in path order, so the output does not
//!   depend on which thread finished first.
//! - **Counts.** Every matching line is counted, not only the ones shown: `matches_found`
//!   says how many lines matched (every filter applied) and `more_matches` whether more
//!   matched than `limit` let through. Counting stops at `count_cap` lines, and
//!   `"matches_found_is_lower_bound": true` then says the count is a floor. When the tool
//!   registry later cuts the output to fit `max_output_bytes`, it says so separately
//!   (`"output_truncated": true`, `"matches_shown": N`), so "more lines matched" and "the
//!   answer was cut" are never the same flag.
//! - **Speed.** The query is searched over large buffers and lines are looked at only around
//!   a hit ([`scan`]); a time window in a large time-ordered file is found by binary search
//!   on byte offsets and only the window is read ([`window`]). A large plain file (or window)
//!   is searched in parts, split at line starts, by every thread, and the parts' results are
//!   merged into exactly the sequential scan's ([`split`]), so one big file uses every core.
//! - **Memory.** Files are read 1 MiB at a time; a physical line is searched only up
//!   to `max_scan_line_bytes` (the rest of it is neither kept nor searched), so a huge file
//!   or a file without newlines never loads whole.
//! - **Long lines.** A matching line longer than `max_line_bytes` is cut at a character
//!   boundary and its match carries `"line_truncated": true` (the key is absent otherwise).
//! - **Bad bytes.** Invalid UTF-8 is converted lossily (U+FFFD), never an error. A file with a
//!   NUL byte in its first 8 KiB (after decompression) is binary and skipped.
//! - **Files that go away.** A file that vanishes between listing and reading, a broken
//!   symlink, an unreadable directory or a read error mid-file does not fail the search: the
//!   file is listed under `"skipped": [{"file", "reason"}]` (at most 100 entries; the key is
//!   absent when nothing was skipped) and the matches found before a mid-file error are kept.
//!
//! Output: `{"matches": [{"file", "line_no", "timestamp", "line"}], "matches_found": N,
//! "more_matches": bool}` plus the optional keys above and `"untimed_lines": N` under a time
//! window. `timestamp` is the line's own time normalized to RFC 3339 UTC with milliseconds,
//! or `null`. `line_no` is the 1-based line number, or `null` for a match found after the
//! window search skipped the start of a file without counting its lines; such a match
//! carries `"byte_offset"` (the line's offset in the file) instead.
//!
//! Filters: `query` is a case-insensitive substring, or with `regex: true` a case-insensitive
//! regular expression (`(?-i)` turns case sensitivity back on; `^` and `$` match at line
//! ends) compiled with a size limit. `since`/`until` (RFC 3339, both inclusive) keep lines
//! whose time is in the window; a line without its own timestamp (a stack trace under a log
//! record) takes the time of the nearest timestamped line above it in the same file. A
//! matching line with neither is left out of a window and counted in `untimed_lines`, so a
//! window over a file whose times cannot be read says so instead of returning nothing
//! silently. `service` keeps a JSON line whose `service` (or `service.name`) field names the
//! service; a line without that field is kept when the file name, or a directory between the
//! configured source and the file, names it. "Names" means equal, or followed by `-`, `_` or
//! `.`, ignoring case: service `checkout` matches `checkout.log.gz`, `checkout-2026.log`,
//! `checkout/app.log` and `{"service": "checkout-service"}`, not `payment-checkout.log`.

use crate::confine::{Confinement, Refused, OUTSIDE};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Cursor, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::{json, Value};

use diag_core::clock::Timestamp;
use diag_core::tools::args::{bounded, invalid, Args};
use diag_core::tools::{Tool, ToolContext, ToolError, ToolFuture, ToolSpec};

pub mod scan;
pub mod split;
pub mod timefmt;
pub mod window;

use scan::{Found, Matcher, Origin, Outside, ScanSpec, ServiceFilter, Stop};
pub use timefmt::LogZone;
use timefmt::TimeReader;
use window::{NoPlan, WindowLimits};

/// The bytes sniffed for NUL to call a file binary (as git and ripgrep do).
const BINARY_SNIFF_BYTES: usize = 8 * 1024;
/// How many skip notes an output carries at most; a glob over a huge tree must not flood it.
const MAX_SKIPPED_NOTES: usize = 100;
/// Directory depth walked below a configured directory; guards against pathological trees.
const MAX_DEPTH: usize = 32;

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
    /// Files searched at most per call; the rest are left out and noted.
    pub max_files: usize,
    /// Size limit of the compiled query (the `regex` crate's `size_limit`).
    pub max_regex_bytes: usize,
    /// Longest accepted `query`, in characters.
    pub max_query_chars: usize,
    /// Matching lines counted at most; `matches_found` is then a lower bound.
    pub count_cap: u64,
    /// Files at least this large are searched for a time window by binary search; smaller
    /// ones are read whole (which is as fast).
    pub window_search_min_bytes: u64,
    /// The binary search reads linearly once its bounds are this close.
    pub window_granularity_bytes: u64,
    /// Probes that check a file's time order before a binary search.
    pub order_probes: u64,
    /// The furthest a probe reads to find a timestamped line.
    pub max_probe_bytes: usize,
    /// Threads a search uses: files searched at once, and the parts of a large file searched
    /// at once by the threads that have no file left; 0 means one per core.
    pub threads: usize,
    /// A plain file (or the window of one) at least this large is searched in parts split at
    /// line starts, by its own thread and the search's threads that have no file left to
    /// search, with the same result as one thread reading it; `u64::MAX` never splits.
    pub split_min_bytes: u64,
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
            count_cap: 1_000_000,
            window_search_min_bytes: 4 * 1024 * 1024,
            window_granularity_bytes: 64 * 1024,
            order_probes: 32,
            max_probe_bytes: 4 * 1024 * 1024,
            threads: 0,
            split_min_bytes: 32 * 1024 * 1024,
        }
    }
}

/// A configured log source: a file, a directory or a glob pattern, and the zone of the times
/// its lines write without an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSource {
    pub path: PathBuf,
    pub zone: LogZone,
}

impl LogSource {
    /// A source whose local times are UTC.
    pub fn utc(path: impl Into<PathBuf>) -> Self {
        LogSource {
            path: path.into(),
            zone: LogZone::UTC,
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

    fn window(&self) -> bool {
        self.since.is_some() || self.until.is_some()
    }
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogMatch {
    pub file: String,
    /// 1-based physical line number in the (decompressed) file, when it was counted.
    pub line_no: Option<u64>,
    /// The line's byte offset in the file, given when `line_no` is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub byte_offset: Option<u64>,
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
    /// Lines that matched every filter, in every file searched.
    pub matches_found: u64,
    /// More lines matched than `limit` let through.
    pub more_matches: bool,
    /// Counting stopped at the count cap: `matches_found` is a floor.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub matches_found_is_lower_bound: bool,
    /// Under a time window: lines that matched but have no readable time, neither their own
    /// nor one above them in their file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untimed_lines: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedFile>,
}

/// The `search_logs` tool over a fixed list of sources.
#[derive(Clone)]
pub struct SearchLogs {
    inner: Arc<Inner>,
}

struct Inner {
    sources: Vec<LogSource>,
    limits: LogSearchLimits,
    /// Folders links in the sources may lead to (`allow_link_targets`).
    link_targets: Vec<PathBuf>,
}

impl SearchLogs {
    /// `sources` are files, directories (searched recursively) or glob patterns whose local
    /// times are UTC; a source that does not exist is reported under `skipped` at search
    /// time, so a log directory that appears later is picked up without a restart.
    pub fn new(sources: Vec<PathBuf>, limits: LogSearchLimits) -> Self {
        Self::with_sources(sources.into_iter().map(LogSource::utc).collect(), limits)
    }

    /// Sources with their own time zones.
    pub fn with_sources(sources: Vec<LogSource>, limits: LogSearchLimits) -> Self {
        SearchLogs {
            inner: Arc::new(Inner {
                sources,
                limits,
                link_targets: Vec::new(),
            }),
        }
    }

    /// Folders the sources' links may lead to (Kubernetes' `/var/log/containers/*.log` link
    /// into `/var/log/pods`): a file whose resolved location is under none of the sources
    /// and none of these is skipped ([`crate::confine`]).
    pub fn with_link_targets(self, link_targets: Vec<PathBuf>) -> Self {
        let inner = Inner {
            sources: self.inner.sources.clone(),
            limits: self.inner.limits.clone(),
            link_targets,
        };
        SearchLogs {
            inner: Arc::new(inner),
        }
    }

    pub fn limits(&self) -> &LogSearchLimits {
        &self.inner.limits
    }

    /// Runs a search on the calling thread (it blocks on file I/O). `now` places times
    /// written without a year when a file's modification time cannot be read.
    pub fn search(&self, query: &LogQuery, now: Timestamp) -> Result<LogSearchOutput, ToolError> {
        self.inner.search(query, &AtomicBool::new(false), now)
    }
}

impl Tool for SearchLogs {
    fn spec(&self) -> ToolSpec {
        let l = &self.inner.limits;
        ToolSpec {
            name: "search_logs".into(),
            description: format!(
                "Search the configured log files (plain text and JSON lines, gzip included; \
                 ISO 8601, syslog, nginx/Apache, log4j, klog, logcat and epoch timestamps are \
                 read) for lines containing a text. Returns the first matches in file and line \
                 order with each line's timestamp (UTC). 'matches_found' counts every line that \
                 matched; 'more_matches' is true when more lines matched than 'limit' returned \
                 (narrow the query or the time window to see them). If the answer was too big \
                 for the output limit, 'output_truncated' is true and 'matches_shown' says how \
                 many matches were kept. With since/until, 'untimed_lines' counts matching \
                 lines left out because no time could be read for them. Lines longer than {} \
                 bytes are cut and marked line_truncated.",
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

    fn call<'a>(&'a self, arguments: &'a Value, cx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let query = LogQuery::from_arguments(arguments, &self.inner.limits)?;
            let inner = Arc::clone(&self.inner);
            let now = cx.clock.now();
            // File I/O blocks, so it runs off the async workers. If the caller gives up (the
            // registry's timeout drops this future), the guard raises the flag and the search
            // stops at its next check instead of reading on for nobody.
            let cancel = Arc::new(AtomicBool::new(false));
            let guard = CancelOnDrop(Arc::clone(&cancel));
            let result =
                tokio::task::spawn_blocking(move || inner.search(&query, &cancel, now)).await;
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

/// A file to search: the configured source it was found under (for service names and its
/// zone).
struct Listed {
    root: PathBuf,
    source: usize,
}

/// Skip notes, bounded.
#[derive(Default)]
struct Notes {
    skipped: Vec<SkippedFile>,
}

impl Notes {
    fn skip(&mut self, file: &Path, reason: impl Into<String>) {
        if self.skipped.len() < MAX_SKIPPED_NOTES {
            self.skipped.push(SkippedFile {
                file: display(file),
                reason: bounded(&reason.into(), 200),
            });
        }
    }
}

/// What one file gave.
#[derive(Default)]
struct FileOutcome {
    matches: Vec<LogMatch>,
    found: Found,
    notes: Notes,
}

/// Everything a file search needs besides the file.
struct Ctx<'a> {
    query: &'a LogQuery,
    matcher: &'a Matcher,
    /// Lowercased service filter.
    service: Option<String>,
    cancel: &'a AtomicBool,
    now: Timestamp,
    /// Where files may be read from.
    confine: &'a Confinement,
    /// Threads of the search not searching a file (file workers that found no file left):
    /// a large file borrows them to search its parts ([`split`]), so a search never runs
    /// more threads than it may.
    spare: &'a AtomicUsize,
    /// Threads the search may use.
    threads: usize,
}

/// The merge of file results in path order, as they arrive.
struct Merge {
    results: Vec<Option<FileOutcome>>,
    frontier: usize,
    kept: usize,
    found: u64,
}

impl Inner {
    fn search(
        &self,
        query: &LogQuery,
        cancel: &AtomicBool,
        now: Timestamp,
    ) -> Result<LogSearchOutput, ToolError> {
        let matcher = Matcher::new(&query.query, query.regex, self.limits.max_regex_bytes)
            .map_err(|e| invalid(format!("invalid regex: {}", bounded(&e.to_string(), 300))))?;
        let mut notes = Notes::default();
        let confine = Confinement::new(
            self.sources.iter().map(|s| s.path.as_path()),
            self.link_targets.iter().map(PathBuf::as_path),
        );
        let files: Vec<(PathBuf, Listed)> =
            self.list_files(&mut notes, &confine).into_iter().collect();
        let all_threads = self.threads();
        let file_threads = all_threads.min(files.len()).max(1);
        let spare = AtomicUsize::new(all_threads - file_threads);
        let cx = Ctx {
            query,
            matcher: &matcher,
            service: query.service.as_ref().map(|s| s.to_lowercase()),
            cancel,
            now,
            confine: &confine,
            spare: &spare,
            threads: all_threads,
        };
        let n = files.len();
        let merge = Mutex::new(Merge {
            results: (0..n).map(|_| None).collect(),
            frontier: 0,
            kept: 0,
            found: 0,
        });
        // Files after `filled` need not keep matches (the ones before fill `limit`); files
        // after `stopped` need not be searched (the ones before reach the count cap).
        let filled = AtomicUsize::new(usize::MAX);
        let stopped = AtomicUsize::new(usize::MAX);
        let next = AtomicUsize::new(0);
        let worker = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n || cancel.load(Ordering::Relaxed) {
                // Free for the parts of a large file still being searched.
                cx.spare.fetch_add(1, Ordering::Relaxed);
                break;
            }
            if i > stopped.load(Ordering::Acquire) {
                continue;
            }
            let keep = if i > filled.load(Ordering::Acquire) {
                0
            } else {
                query.limit
            };
            let (path, listed) = &files[i];
            let outcome = self.search_file(&cx, path, listed, keep);
            let mut m = merge.lock().unwrap_or_else(|e| e.into_inner());
            m.results[i] = Some(outcome);
            while m.frontier < n {
                let Some(r) = m.results[m.frontier].as_ref() else {
                    break;
                };
                let (kept, found) = (r.matches.len(), r.found.count);
                m.kept += kept;
                m.found = m.found.saturating_add(found);
                if m.kept >= query.limit && filled.load(Ordering::Relaxed) == usize::MAX {
                    filled.store(m.frontier, Ordering::Release);
                }
                if m.found >= self.limits.count_cap && stopped.load(Ordering::Relaxed) == usize::MAX
                {
                    stopped.store(m.frontier, Ordering::Release);
                }
                m.frontier += 1;
            }
        };
        let threads = file_threads;
        if threads == 1 {
            worker();
        } else {
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(worker);
                }
            });
        }
        let merge = merge.into_inner().unwrap_or_else(|e| e.into_inner());
        let last = stopped.load(Ordering::Acquire);
        let mut out = LogSearchOutput {
            matches: Vec::new(),
            matches_found: 0,
            more_matches: false,
            matches_found_is_lower_bound: false,
            untimed_lines: None,
            skipped: notes.skipped,
        };
        let mut untimed: u64 = 0;
        for (i, r) in merge.results.into_iter().enumerate() {
            if i > last {
                break;
            }
            let Some(r) = r else { continue };
            let room = query.limit.saturating_sub(out.matches.len());
            out.matches.extend(r.matches.into_iter().take(room));
            out.matches_found = out.matches_found.saturating_add(r.found.count);
            untimed = untimed.saturating_add(r.found.untimed);
            for note in r.notes.skipped {
                if out.skipped.len() < MAX_SKIPPED_NOTES {
                    out.skipped.push(note);
                }
            }
        }
        if out.matches_found >= self.limits.count_cap {
            out.matches_found = self.limits.count_cap;
            out.matches_found_is_lower_bound = true;
        }
        out.more_matches = out.matches_found > out.matches.len() as u64;
        if query.window() {
            out.untimed_lines = Some(untimed);
        }
        Ok(out)
    }

    fn search_file(&self, cx: &Ctx, path: &Path, listed: &Listed, keep: usize) -> FileOutcome {
        let mut out = FileOutcome::default();
        // What is opened is what is checked: a file replaced by a link after listing is not
        // read.
        let file = match cx.confine.open(path) {
            Ok(f) => f,
            Err(Refused::Outside) => {
                out.notes.skip(path, OUTSIDE);
                return out;
            }
            Err(Refused::Io(e)) => {
                out.notes.skip(path, describe_io(&e));
                return out;
            }
        };
        let meta = file.metadata().ok();
        let size = meta.as_ref().map_or(0, |m| m.len());
        // Times without a year are placed by the file's modification time (else the window's
        // end, else the run clock).
        let reference = meta
            .and_then(|m| m.modified().ok())
            .and_then(system_time_ms)
            .map(Timestamp::from_unix_ms)
            .or(cx.query.until)
            .or(cx.query.since)
            .unwrap_or(cx.now);
        let mut raw_head = Vec::new();
        if let Err(e) = (&file)
            .take(timefmt::DETECT_BYTES as u64)
            .read_to_end(&mut raw_head)
        {
            out.notes.skip(path, describe_io(&e));
            return out;
        }
        let is_gzip = raw_head.starts_with(&[0x1f, 0x8b]);
        let zone = self
            .sources
            .get(listed.source)
            .map_or(LogZone::UTC, |s| s.zone.clone());
        let service = cx.service.as_deref().map(|svc| ServiceFilter {
            service: svc,
            path_names_it: path_names_service(path, &listed.root, svc),
            field_names_it: name_names_service,
        });
        if is_gzip {
            // Multi-member: `cat a.gz b.gz` and some rotators produce concatenated members.
            let mut decoder = flate2::read::MultiGzDecoder::new(Cursor::new(raw_head).chain(&file));
            let mut head = Vec::new();
            // A stream damaged within the head still gives the lines before the damage
            // (`read_to_end` keeps what it read); the error is reported after them.
            let mut damaged = (&mut decoder)
                .take(timefmt::DETECT_BYTES as u64)
                .read_to_end(&mut head)
                .err();
            if head.is_empty() {
                if let Some(e) = damaged {
                    out.notes.skip(
                        path,
                        format!("read error before line 1: {}", describe_io(&e)),
                    );
                    return out;
                }
            }
            if is_binary(&head) {
                out.notes.skip(path, "binary file");
                return out;
            }
            let times = TimeReader::detect(&head, zone, reference);
            let spec = self.spec(cx, &times, service, keep, Outside::Exclude);
            let r = match damaged.take() {
                Some(e) => {
                    let mut failing = FailingReader(Some(e));
                    scan::scan(&spec, &head, &mut failing, origin(0, keep), &mut out.found)
                }
                None => scan::scan(&spec, &head, &mut decoder, origin(0, keep), &mut out.found),
            };
            self.finish(&mut out, path, r);
        } else {
            if is_binary(&raw_head) {
                out.notes.skip(path, "binary file");
                return out;
            }
            let times = TimeReader::detect(&raw_head, zone, reference);
            self.search_plain(
                cx, &mut out, path, &file, size, &raw_head, &times, service, keep,
            );
        }
        let label = display(path);
        out.matches = std::mem::take(&mut out.found.hits)
            .into_iter()
            .map(|h| LogMatch {
                file: label.clone(),
                line_no: h.line_no,
                byte_offset: if h.line_no.is_none() {
                    Some(h.offset)
                } else {
                    None
                },
                timestamp: h.timestamp,
                line: h.line,
                line_truncated: h.line_truncated,
            })
            .collect();
        out
    }

    /// A plain file: the window by binary search when it pays and the file is in order,
    /// else the whole file.
    #[allow(clippy::too_many_arguments)]
    fn search_plain(
        &self,
        cx: &Ctx,
        out: &mut FileOutcome,
        path: &Path,
        file: &File,
        size: u64,
        head: &[u8],
        times: &TimeReader,
        service: Option<ServiceFilter>,
        keep: usize,
    ) {
        let q = cx.query;
        if q.window() && size >= self.limits.window_search_min_bytes {
            let limits = WindowLimits {
                granularity: self.limits.window_granularity_bytes,
                order_probes: self.limits.order_probes,
                max_probe_bytes: self.limits.max_probe_bytes,
                max_scan_line_bytes: self.limits.max_scan_line_bytes,
            };
            match window::plan(file, size, times, q.since, q.until, &limits) {
                Ok(plan) => {
                    let spec = self.spec(cx, times, service, keep, Outside::Abort);
                    let r = if plan.start == plan.head_end {
                        // The window starts at the first timestamped line: read from the
                        // top, counting lines.
                        self.range_scan(
                            cx,
                            &spec,
                            file,
                            head,
                            (0, plan.end),
                            size,
                            origin(0, keep),
                            &mut out.found,
                        )
                    } else {
                        // The lines before the first timestamped one have no time: count
                        // the matches among them, then read the window alone.
                        let head_spec = ScanSpec { keep: 0, ..spec };
                        self.range_scan(
                            cx,
                            &head_spec,
                            file,
                            head,
                            (0, plan.head_end),
                            size,
                            origin(0, 0),
                            &mut out.found,
                        )
                        .and_then(|()| {
                            let o = Origin {
                                offset: plan.start,
                                lines_before: None,
                            };
                            let range = (plan.start, plan.end);
                            self.range_scan(cx, &spec, file, &[], range, size, o, &mut out.found)
                        })
                    };
                    match r {
                        Err(Stop::Disorder) => {
                            // The window held a line out of order: read everything.
                            out.found = Found::default();
                        }
                        r => return self.finish(out, path, r),
                    }
                }
                // A read error while probing (a file truncated by its rotator, say): the
                // whole-file scan below reads what there is and reports its own errors.
                Err(NoPlan::Io | NoPlan::Unordered | NoPlan::NoTimes) => {}
            }
        }
        let spec = self.spec(cx, times, service, keep, Outside::Exclude);
        let r = self.range_scan(
            cx,
            &spec,
            file,
            head,
            (0, u64::MAX),
            size,
            origin(0, keep),
            &mut out.found,
        );
        self.finish(out, path, r);
    }

    /// Scans bytes `[range.0, range.1)` of a plain file of `size` bytes (`head`: its first
    /// bytes, already read); a large range in parts at once ([`split`]).
    #[allow(clippy::too_many_arguments)]
    fn range_scan(
        &self,
        cx: &Ctx,
        spec: &ScanSpec,
        file: &File,
        head: &[u8],
        range: (u64, u64),
        size: u64,
        origin: Origin,
        found: &mut Found,
    ) -> Result<(), Stop> {
        // This thread and the spare ones, at most as many as the search may use.
        let extra = take_up_to(cx.spare, cx.threads.saturating_sub(1));
        let r = split::range_scan_split(
            spec,
            file,
            head,
            range.0,
            range.1,
            size,
            1 + extra,
            self.limits.split_min_bytes,
            origin,
            found,
        );
        cx.spare.fetch_add(extra, Ordering::Relaxed);
        r
    }

    /// Threads a search uses: `limits.threads`, or one per core.
    fn threads(&self) -> usize {
        match self.limits.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            t => t,
        }
    }

    fn spec<'a>(
        &'a self,
        cx: &'a Ctx,
        times: &'a TimeReader,
        service: Option<ServiceFilter<'a>>,
        keep: usize,
        outside: Outside,
    ) -> ScanSpec<'a> {
        ScanSpec {
            matcher: cx.matcher,
            times,
            since: cx.query.since,
            until: cx.query.until,
            outside,
            service,
            keep,
            count_cap: self.limits.count_cap,
            max_scan_line_bytes: self.limits.max_scan_line_bytes,
            max_line_bytes: self.limits.max_line_bytes,
            cancel: cx.cancel,
        }
    }

    fn finish(&self, out: &mut FileOutcome, path: &Path, r: Result<(), Stop>) {
        if let Err(Stop::Read { after, error }) = r {
            out.notes.skip(
                path,
                format!("read error after {after}: {}", describe_io(&error)),
            );
        }
    }
}

/// Takes up to `n` from `counter`; returns how many it took.
fn take_up_to(counter: &AtomicUsize, n: usize) -> usize {
    let mut have = counter.load(Ordering::Relaxed);
    loop {
        let take = have.min(n);
        if take == 0 {
            return 0;
        }
        match counter.compare_exchange_weak(have, have - take, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => return take,
            Err(now) => have = now,
        }
    }
}

/// Where a scan from the top of a file starts; lines are counted only when matches are kept.
fn origin(offset: u64, keep: usize) -> Origin {
    Origin {
        offset,
        lines_before: (keep > 0).then_some(0),
    }
}

/// A reader whose next read fails with a stored error (then ends).
struct FailingReader(Option<io::Error>);

impl Read for FailingReader {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        match self.0.take() {
            Some(e) => Err(e),
            None => Ok(0),
        }
    }
}

fn is_binary(head: &[u8]) -> bool {
    memchr::memchr(0, &head[..head.len().min(BINARY_SNIFF_BYTES)]).is_some()
}

fn system_time_ms(t: SystemTime) -> Option<i64> {
    let ms = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).ok()?,
        Err(e) => -i64::try_from(e.duration().as_millis()).ok()?,
    };
    Some(ms)
}

impl Inner {
    /// Every file under every source, deduplicated and sorted by path (a `BTreeMap`), so the
    /// search order does not depend on the order a directory happens to list its entries.
    fn list_files(&self, s: &mut Notes, confine: &Confinement) -> BTreeMap<PathBuf, Listed> {
        let mut files = BTreeMap::new();
        for (index, source) in self.sources.iter().enumerate() {
            let source = &source.path;
            let text = source.to_string_lossy();
            let is_pattern =
                text.contains(['*', '?', '[']) && fs::symlink_metadata(source).is_err();
            if !is_pattern {
                add_path(s, &mut files, source, source, index);
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
                            Ok(p) => add_path(s, &mut files, &p, &root, index),
                            Err(e) => s.skip(e.path(), describe_io(e.error())),
                        }
                    }
                    if !any {
                        s.skip(source, "no file matches the pattern");
                    }
                }
            }
        }
        // A link that leads outside every source and allowed target is listed as skipped.
        files.retain(|path, _| {
            let inside = confine.admits(path);
            if !inside {
                s.skip(path, OUTSIDE);
            }
            inside
        });
        if files.len() > self.limits.max_files {
            let first_left_out = nth_key(&files, self.limits.max_files);
            let rest = files.split_off(&first_left_out);
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
    s: &mut Notes,
    files: &mut BTreeMap<PathBuf, Listed>,
    path: &Path,
    root: &Path,
    source: usize,
) {
    // `metadata` follows symlinks: a link to a log file is searched, a broken link is noted.
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return s.skip(path, describe_io(&e)),
    };
    if meta.is_file() {
        files.entry(path.to_path_buf()).or_insert(Listed {
            root: root.to_path_buf(),
            source,
        });
    } else if meta.is_dir() {
        walk(s, files, path, root, source);
    } else {
        // FIFOs, sockets and devices could block a read forever.
        s.skip(path, "not a regular file");
    }
}

/// The files of a folder source, through the one directory walk ([`crate::walk`]).
fn walk(
    s: &mut Notes,
    files: &mut BTreeMap<PathBuf, Listed>,
    dir: &Path,
    root: &Path,
    source: usize,
) {
    let walked = crate::walk::files_under(dir, MAX_DEPTH);
    for (path, reason) in walked.skipped {
        s.skip(&path, reason.to_string());
    }
    for path in walked.files {
        files.entry(path).or_insert(Listed {
            root: root.to_path_buf(),
            source,
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Files searched in parts (every file split, by the threads that have no file left) give
    /// the output of files each read by one thread.
    #[test]
    fn files_searched_in_parts_give_the_one_thread_output() {
        let dir = tempfile::TempDir::new().unwrap();
        let mut paths = Vec::new();
        for (k, lines) in [(0, 3000), (1, 10), (2, 2500)] {
            let text: String = (0..lines)
                .map(|i| {
                    let t = Timestamp::from_unix_ms(1_796_047_200_000 + i * 1000);
                    match i % 97 {
                        0 => format!("{t} ERROR pool exhausted in file {k}\n"),
                        1 => "\tat c.e.Pool.get(Pool.java:42) exhausted\n".to_string(),
                        _ => format!("{t} INFO request {i} ok\n"),
                    }
                })
                .collect();
            let path = dir.path().join(format!("app-{k}.log"));
            fs::write(&path, text).unwrap();
            paths.push(path);
        }
        let now = Timestamp::from_unix_ms(1_796_047_200_000);
        let run = |split_min_bytes: u64, threads: usize, query: &LogQuery| {
            let limits = LogSearchLimits {
                split_min_bytes,
                threads,
                window_search_min_bytes: 1,
                ..LogSearchLimits::default()
            };
            SearchLogs::new(paths.clone(), limits)
                .search(query, now)
                .unwrap()
        };
        let limits = LogSearchLimits::default();
        let mut queries = vec![LogQuery::new("exhausted", &limits)];
        let mut q = LogQuery::new("exhausted", &limits);
        q.limit = 500;
        q.since = Some(Timestamp::from_unix_ms(1_796_047_200_000 + 1_000_000));
        queries.push(q);
        let mut q = LogQuery::new("", &limits);
        q.limit = 3;
        queries.push(q);
        for query in &queries {
            let want = run(u64::MAX, 1, query);
            assert!(want.matches_found > 0);
            for threads in [2, 3, 5] {
                assert_eq!(run(1, threads, query), want, "{threads} threads, {query:?}");
            }
        }
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
}
