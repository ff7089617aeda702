//! The scan of one stream of lines: the query is searched over large buffers, as ripgrep
//! does, and a line is looked at only around a hit.
//!
//! - **Finding.** A query without letters (`502`, `10.0.0.7:5432`) is a plain substring found
//!   with `memchr::memmem` (SIMD). A literal with letters is matched case-insensitively by the
//!   `regex` crate, whose literal prefilters search the buffer for the case variants of a
//!   prefix without lowering anything; a regular expression likewise. The search runs over
//!   the whole buffer of complete lines; a hit is then widened to its line (`memrchr` and
//!   `memchr` for `\n`). A regular expression that matches across a newline is checked again
//!   on the line alone; a file where that keeps happening is searched line by line.
//! - **Line numbers** are counted (`\n` bytes, vectorised) only up to the hits that are kept,
//!   and not at all once the kept matches are full.
//! - **Times** are read only for the lines that matched: a line's own time, or, for a line
//!   without one (a stack frame), the nearest timestamped line above it, found by walking
//!   back, never further than the point up to which the last time is already known. Every
//!   byte is walked back over at most once.
//! - **Parts.** A large file is scanned in parts at once ([`super::split`]), each by its own
//!   scanner ([`scan_part`]), which also counts the lines of its part so that the parts after
//!   it can number theirs. What a scan finds does not depend on where its reads happen to end,
//!   which is what makes the parts' results add up to the sequential scan's.

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};

use memchr::memmem;
use regex::bytes::{Regex, RegexBuilder};

use super::timefmt::TimeReader;
use diag_core::clock::Timestamp;
use diag_core::tools::args::prefix_at_boundary;

/// Bytes read per `read` call; a few dozen in unit tests, so that reads end mid-line and
/// mid-match all the time there.
const CHUNK: usize = if cfg!(test) { 61 } else { 1024 * 1024 };
/// Regex hits that spanned a newline and failed on their line alone, before a file is
/// searched line by line instead.
const SPAN_RECHECKS: u32 = 64;

/// How a line matches the query.
pub enum Matcher {
    /// The empty query: every line.
    All,
    /// A query that can never match a line (it contains a newline).
    Never,
    /// A substring without case variants.
    Bytes(Box<memmem::Finder<'static>>),
    /// An ASCII substring with letters, matched ASCII-case-insensitively.
    Caseless(Caseless),
    /// A case-insensitive literal or a regular expression.
    Regex(Regex),
}

impl Matcher {
    /// `query` as a case-insensitive substring, or with `regex` as a case-insensitive
    /// regular expression (`^`/`$` at line ends) compiled within `size_limit` bytes.
    pub fn new(query: &str, regex: bool, size_limit: usize) -> Result<Matcher, regex::Error> {
        if !regex {
            if query.is_empty() {
                return Ok(Matcher::All);
            }
            if query.contains('\n') {
                return Ok(Matcher::Never);
            }
            if query.chars().all(caseless) {
                return Ok(Matcher::Bytes(Box::new(
                    memmem::Finder::new(query.as_bytes()).into_owned(),
                )));
            }
            if query.is_ascii() {
                return Ok(Matcher::Caseless(Caseless::new(query.as_bytes())));
            }
        }
        let pattern = if regex {
            query.to_string()
        } else {
            regex::escape(query)
        };
        RegexBuilder::new(&pattern)
            .case_insensitive(true)
            .multi_line(true)
            .crlf(true)
            .size_limit(size_limit)
            .dfa_size_limit(size_limit)
            .build()
            .map(Matcher::Regex)
    }

    /// The first hit starting at or after `from`, as (start, end).
    fn find(&self, hay: &[u8], from: usize) -> Option<(usize, usize)> {
        match self {
            Matcher::All => (from < hay.len()).then_some((from, from)),
            Matcher::Never => None,
            Matcher::Bytes(f) => f
                .find(&hay[from..])
                .map(|i| (from + i, from + i + f.needle().len())),
            Matcher::Caseless(c) => c.find(hay, from).map(|i| (i, i + c.needle.len())),
            Matcher::Regex(re) => re.find_at(hay, from).map(|m| (m.start(), m.end())),
        }
    }

    pub fn is_match(&self, line: &[u8]) -> bool {
        match self {
            Matcher::All => true,
            Matcher::Never => false,
            Matcher::Bytes(f) => f.find(line).is_some(),
            Matcher::Caseless(c) => c.find(line, 0).is_some(),
            Matcher::Regex(re) => re.is_match(line),
        }
    }
}

/// An ASCII needle found case-insensitively (ASCII case: `k` does not match the Kelvin sign).
///
/// The two rarest bytes of the needle (by a frequency ranking of log text, letters folded)
/// are looked for together, 64 positions at a time, in a loop the compiler turns into SIMD
/// compares; only a block where both appear at their offsets is checked position by position.
/// For a needle with a rare letter or two (`PoolExhausted`: `x`, `h`) this runs near memory
/// speed, faster than a case-insensitive regex, which must try the case variants of a prefix.
pub struct Caseless {
    /// Lowercase.
    needle: Vec<u8>,
    /// Offsets of the two anchor bytes in the needle, their lowercase values, and the bit
    /// that folds case (0x20 for letters, 0 otherwise).
    anchors: [(usize, u8, u8); 2],
}

impl Caseless {
    fn new(needle: &[u8]) -> Caseless {
        let needle = needle.to_ascii_lowercase();
        let mut order: Vec<usize> = (0..needle.len()).collect();
        order.sort_by_key(|&i| (log_byte_rank(needle[i]), i));
        let first = order.first().copied().unwrap_or(0);
        // The second anchor: the rarest byte at another offset (another byte if possible).
        let second = order
            .iter()
            .copied()
            .find(|&i| needle[i] != needle[first])
            .or_else(|| order.get(1).copied())
            .unwrap_or(first);
        let anchor = |i: usize| {
            let b = needle.get(i).copied().unwrap_or(0);
            (i, b, if b.is_ascii_lowercase() { 0x20 } else { 0 })
        };
        Caseless {
            anchors: [anchor(first), anchor(second)],
            needle,
        }
    }

    fn at(&self, hay: &[u8], p: usize) -> bool {
        hay[p..p + self.needle.len()].eq_ignore_ascii_case(&self.needle)
    }

    fn find(&self, hay: &[u8], from: usize) -> Option<usize> {
        const BLOCK: usize = 64;
        let n = self.needle.len();
        if n == 0 {
            return (from <= hay.len()).then_some(from);
        }
        if hay.len() < n || from > hay.len() - n {
            return None;
        }
        // Candidate starts are `from..=last`.
        let last = hay.len() - n;
        let [(i1, b1, f1), (i2, b2, f2)] = self.anchors;
        let mut p = from;
        while p + BLOCK <= last + 1 {
            let a = &hay[p + i1..p + i1 + BLOCK];
            let b = &hay[p + i2..p + i2 + BLOCK];
            let any = a.iter().zip(b).fold(0u8, |acc, (&x, &y)| {
                acc | (u8::from((x | f1) == b1) & u8::from((y | f2) == b2))
            });
            if any != 0 {
                for (j, (&x, &y)) in a.iter().zip(b).enumerate() {
                    if (x | f1) == b1 && (y | f2) == b2 && self.at(hay, p + j) {
                        return Some(p + j);
                    }
                }
            }
            p += BLOCK;
        }
        (p..=last).find(|&q| self.at(hay, q))
    }
}

/// How common a (lowercase) byte is in log text: higher is more common. Bytes not listed
/// (upper ASCII, control bytes, rare punctuation) rank 0.
fn log_byte_rank(b: u8) -> u8 {
    const COMMON: &[u8] = b" e0t1a2o3is4rn5:6-c7l8.9dup/m=h_g\"f,bwykv[]()x'jqz";
    COMMON
        .iter()
        .position(|&c| c == b)
        .map_or(0, |i| 255 - (i as u8) * 4)
}

/// A character that has no other case (digits, punctuation, most symbols).
fn caseless(c: char) -> bool {
    let mut lower = c.to_lowercase();
    let mut upper = c.to_uppercase();
    lower.next() == Some(c)
        && lower.next().is_none()
        && upper.next() == Some(c)
        && upper.next().is_none()
}

/// What to do with a hit whose time is outside the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outside {
    /// Leave it out (a full scan).
    Exclude,
    /// Stop: the region was chosen by time order, so the file is not in order.
    Abort,
}

/// The service filter as it applies to one file.
#[derive(Clone, Copy)]
pub struct ServiceFilter<'a> {
    /// Lowercase service name.
    pub service: &'a str,
    /// Whether the file's path names the service (for lines without a `service` field).
    pub path_names_it: bool,
    pub field_names_it: fn(&str, &str) -> bool,
}

/// The settings of one scan.
#[derive(Clone, Copy)]
pub struct ScanSpec<'a> {
    pub matcher: &'a Matcher,
    pub times: &'a TimeReader,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    pub outside: Outside,
    pub service: Option<ServiceFilter<'a>>,
    /// Matches to keep (the rest are only counted).
    pub keep: usize,
    /// Stop counting at this many matches.
    pub count_cap: u64,
    pub max_scan_line_bytes: usize,
    pub max_line_bytes: usize,
    pub cancel: &'a AtomicBool,
}

impl ScanSpec<'_> {
    /// Whether a time window applies.
    pub fn window(&self) -> bool {
        self.since.is_some() || self.until.is_some()
    }
}

/// A kept match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// 1-based line number, when the scan started at a known line.
    pub line_no: Option<u64>,
    /// Byte offset of the line in the (decompressed) file.
    pub offset: u64,
    pub timestamp: Option<Timestamp>,
    pub line: String,
    pub line_truncated: bool,
}

/// What a scan found.
#[derive(Debug, Default)]
pub struct Found {
    pub hits: Vec<Hit>,
    /// Lines that matched every filter.
    pub count: u64,
    /// Lines that matched the query and service but have no time (under a window).
    pub untimed: u64,
    /// The scan stopped at `count_cap`.
    pub capped: bool,
}

/// Why a scan ended early.
#[derive(Debug)]
pub enum Stop {
    Cancelled,
    /// A hit was outside the window under [`Outside::Abort`].
    Disorder,
    /// A read failed; what was found before it is kept.
    Read {
        after: At,
        error: io::Error,
    },
}

/// Where a read failed: after this many lines when they were being counted, else after the
/// complete lines that end before this byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    pub line: Option<u64>,
    pub byte: u64,
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(n) => write!(f, "line {n}"),
            None => write!(f, "byte {}", self.byte),
        }
    }
}

/// Where a stream starts in its file.
#[derive(Debug, Clone, Copy)]
pub struct Origin {
    pub offset: u64,
    /// Lines before the stream, when known.
    pub lines_before: Option<u64>,
}

/// Scans `input` (preceded by `head`, bytes already read from it) to its end.
pub fn scan(
    spec: &ScanSpec,
    head: &[u8],
    input: &mut dyn Read,
    origin: Origin,
    found: &mut Found,
) -> Result<(), Stop> {
    let mut s = Scanner::new(spec, head, origin, None);
    s.run(input, found)
}

/// Scans one part of a file searched in parts ([`super::split`]): as [`scan`], except that
/// lines are counted to the end of the part even once its matches are kept (the parts after
/// it need the count to number their lines), and the scan also stops, as cancelled, once
/// `halt` is raised (an earlier part has decided the result). Returns the lines the part
/// holds (counted from `origin.lines_before`) when it was scanned to its end with lines known.
pub fn scan_part(
    spec: &ScanSpec,
    head: &[u8],
    input: &mut dyn Read,
    origin: Origin,
    halt: &AtomicBool,
    found: &mut Found,
) -> (Result<(), Stop>, Option<u64>) {
    let mut s = Scanner::new(spec, head, origin, Some(halt));
    let r = s.run(input, found);
    let lines = match (&r, s.lines_before) {
        (Ok(()), Some(n)) if !found.capped => Some(n + count_newlines(s.uncounted())),
        _ => None,
    };
    (r, lines)
}

struct Scanner<'a, 'b> {
    spec: &'a ScanSpec<'b>,
    data: Buf,
    /// File offset of `data[0]`.
    base: u64,
    /// Lines before `counted_to` (`None` once unknown or no longer needed).
    lines_before: Option<u64>,
    counted_to: usize,
    /// Every line starting before `known_pos` has been accounted for in `known_ts`: the time of
    /// the last timestamped line among them.
    known_pos: usize,
    known_ts: Option<Timestamp>,
    span_rechecks: u32,
    line_mode: bool,
    /// A part of a split scan: lines are counted to the end, and this flag stops it too.
    halt: Option<&'a AtomicBool>,
    /// A read that failed after the end of a long line was read: reported once the lines
    /// read after that end are searched.
    failed: Option<io::Error>,
}

impl<'a, 'b> Scanner<'a, 'b> {
    fn new(
        spec: &'a ScanSpec<'b>,
        head: &[u8],
        origin: Origin,
        halt: Option<&'a AtomicBool>,
    ) -> Self {
        let mut data = Buf::default();
        data.extend_from_slice(head);
        Scanner {
            spec,
            data,
            base: origin.offset,
            lines_before: origin.lines_before,
            counted_to: 0,
            known_pos: 0,
            known_ts: None,
            span_rechecks: 0,
            line_mode: false,
            halt,
            failed: None,
        }
    }
}

impl Scanner<'_, '_> {
    fn halted(&self) -> bool {
        self.spec.cancel.load(Ordering::Relaxed)
            || self.halt.is_some_and(|h| h.load(Ordering::Relaxed))
    }

    /// The bytes of `data` whose newlines are not yet in `lines_before`.
    fn uncounted(&self) -> &[u8] {
        self.data_or_empty(self.counted_to, self.data.len())
    }

    fn run(&mut self, input: &mut dyn Read, found: &mut Found) -> Result<(), Stop> {
        // Room for a read after the head too, however long the head is: a read into a full
        // buffer would look like the end of the input.
        let cap = (CHUNK + self.spec.max_scan_line_bytes + 1).max(self.data.len() + CHUNK);
        let mut pos = 0;
        let mut eof = false;
        // A failed read ends the stream: the complete lines before it are still searched.
        let mut failed: Option<io::Error> = None;
        let max = self.spec.max_scan_line_bytes;
        loop {
            if self.halted() {
                return Err(Stop::Cancelled);
            }
            // Move the unfinished line to the front and read more.
            if pos > 0 {
                self.discard(pos);
                pos = 0;
            }
            if let Some(error) = self.failed.take() {
                eof = true;
                failed = Some(error);
            } else if !eof {
                let want = cap.min(self.data.len() + CHUNK);
                match self.data.read_from(input, want) {
                    Ok(0) => eof = true,
                    Ok(_) => {}
                    Err(error) => {
                        eof = true;
                        failed = Some(error);
                    }
                }
            }
            if let Some(error) = failed.take() {
                let complete = memchr::memrchr(b'\n', &self.data).map_or(0, |i| i + 1);
                self.search(complete, found)?;
                if found.capped {
                    // The count stopped before the failed read: the scan ends there, as it
                    // does when the read that reaches the cap succeeds.
                    return Ok(());
                }
                self.discard(complete);
                if self.data.len() > max + 1 {
                    // A long line's searched bytes were read: it is a line, as it is when
                    // the read that fails comes while skipping the rest of it.
                    self.long_head(found)?;
                    if found.capped {
                        return Ok(());
                    }
                }
                return Err(Stop::Read {
                    after: self.position(),
                    error,
                });
            }
            if self.data.is_empty() && eof {
                return Ok(());
            }
            let complete = if eof {
                self.data.len()
            } else {
                match memchr::memrchr(b'\n', &self.data) {
                    Some(i) => i + 1,
                    // Two bytes more than a line is searched: the line is cut whatever its
                    // last bytes (a line of `max_scan_line_bytes` and a `\r` is not), so it
                    // reads the same wherever a read happened to end.
                    None if self.data.len() > max + 1 => {
                        self.long_line(input, found)?;
                        if found.capped {
                            return Ok(());
                        }
                        continue;
                    }
                    None => continue,
                }
            };
            self.search(complete, found)?;
            if found.capped {
                return Ok(());
            }
            pos = complete;
            if eof {
                return Ok(());
            }
        }
    }

    fn position(&self) -> At {
        At {
            line: self
                .lines_before
                .map(|n| n + count_newlines(self.uncounted())),
            byte: self.base,
        }
    }

    /// Drops `data[..pos]` (whole lines), keeping the line count and the last known time.
    fn discard(&mut self, pos: usize) {
        if let Some(n) = self.lines_before.as_mut() {
            *n += count_newlines(&self.data[self.counted_to..pos]);
        }
        if self.spec.window() {
            if let Some(t) = self.last_time_between(self.known_pos, pos) {
                self.known_ts = Some(t);
            }
        }
        self.data.copy_within(pos.., 0);
        self.data.truncate(self.data.len() - pos);
        self.base += pos as u64;
        self.counted_to = 0;
        self.known_pos = 0;
    }

    /// A line longer than the buffer: its first `max_scan_line_bytes` are the line, the rest
    /// is read and dropped.
    fn long_line(&mut self, input: &mut dyn Read, found: &mut Found) -> Result<(), Stop> {
        let max = self.spec.max_scan_line_bytes;
        self.long_head(found)?;
        if found.capped {
            // The rest of the line is not needed.
            return Ok(());
        }
        let mut rest = self.data.split_off(max);
        self.data.clear();
        // Skip to the end of this line.
        let mut skipped = max as u64;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &rest) {
                skipped += i as u64 + 1;
                self.data.extend_from_slice(&rest[i + 1..]);
                break;
            }
            skipped += rest.len() as u64;
            rest.clear();
            match read_into(input, &mut rest, CHUNK) {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) => {
                    let Some(i) = memchr::memchr(b'\n', &rest) else {
                        return Err(Stop::Read {
                            after: self.position(),
                            error,
                        });
                    };
                    // The line's end was read before the failure: the lines read after it
                    // are searched, then the failure is reported.
                    skipped += i as u64 + 1;
                    self.data.extend_from_slice(&rest[i + 1..]);
                    self.failed = Some(error);
                    break;
                }
            }
        }
        self.base += skipped;
        if let Some(n) = self.lines_before.as_mut() {
            *n += 1;
        }
        self.counted_to = 0;
        self.known_pos = 0;
        Ok(())
    }

    /// Matches the searched bytes of the long line at the front of `data` (or, under a window,
    /// reads its time for the lines below it).
    fn long_head(&mut self, found: &mut Found) -> Result<(), Stop> {
        let max = self.spec.max_scan_line_bytes;
        if self.spec.matcher.is_match(&self.data[..max]) {
            self.take(0, max, max, true, found)?;
        } else if self.spec.window() {
            if let Some(t) = self.spec.times.line_time(&self.data[..max]) {
                self.known_ts = Some(t);
            }
        }
        Ok(())
    }

    /// Searches the complete lines in `data[..end]`.
    fn search(&mut self, end: usize, found: &mut Found) -> Result<(), Stop> {
        let mut at = 0;
        while at < end {
            if self.line_mode {
                let le = memchr::memchr(b'\n', &self.data[at..end]).map_or(end, |i| at + i);
                let content = self.content_end(at, le);
                if self.spec.matcher.is_match(&self.data[at..content]) {
                    self.hit(at, le, found)?;
                    if found.capped {
                        return Ok(());
                    }
                }
                at = le + 1;
                continue;
            }
            let Some((s, e)) = self.spec.matcher.find(&self.data[..end], at) else {
                break;
            };
            if s >= end {
                break;
            }
            let ls = memchr::memrchr(b'\n', &self.data[at..s]).map_or(at, |i| at + i + 1);
            let le = memchr::memchr(b'\n', &self.data[s..end]).map_or(end, |i| s + i);
            let content = self.content_end(ls, le);
            let is_match = if e <= content {
                true
            } else {
                let again = self.spec.matcher.is_match(&self.data[ls..content]);
                if !again {
                    self.span_rechecks += 1;
                    self.line_mode = self.span_rechecks >= SPAN_RECHECKS;
                }
                again
            };
            if is_match {
                self.hit(ls, le, found)?;
                if found.capped {
                    return Ok(());
                }
            }
            at = le + 1;
        }
        Ok(())
    }

    /// The end of what is searched of the line `[ls, le)`: at most `max_scan_line_bytes`,
    /// without a trailing `\r`.
    fn content_end(&self, ls: usize, le: usize) -> usize {
        let end = le.min(ls + self.spec.max_scan_line_bytes);
        if end == le && end > ls && self.data[end - 1] == b'\r' {
            end - 1
        } else {
            end
        }
    }

    /// Applies the service and time filters to the matching line `data[ls..le]` and counts
    /// or keeps it.
    fn hit(&mut self, ls: usize, le: usize, found: &mut Found) -> Result<(), Stop> {
        let content = self.content_end(ls, le);
        let cut = content < le && !(content + 1 == le && self.data[content] == b'\r');
        self.take(ls, content, le + 1, cut, found)
    }

    /// `data[ls..content]` is a matching line, `next` the start of the line after it.
    fn take(
        &mut self,
        ls: usize,
        content: usize,
        next: usize,
        cut: bool,
        found: &mut Found,
    ) -> Result<(), Stop> {
        let spec = self.spec;
        let keeping = found.hits.len() < spec.keep;
        let window = spec.window();
        let line = &self.data[ls..content];
        let mut own: Option<Option<Timestamp>> = None;
        if let Some(f) = &spec.service {
            let (time, field) = match spec.times.json_meta(line) {
                Some((t, svc)) => (Some(t), svc),
                None => (None, None),
            };
            own = time;
            let keep = match field {
                Some(svc) => (f.field_names_it)(&svc, f.service),
                None => f.path_names_it,
            };
            if !keep {
                return Ok(());
            }
        }
        let own = if keeping || window {
            own.unwrap_or_else(|| spec.times.line_time(line))
        } else {
            None
        };
        let mut verdict = Ok(true);
        if window {
            // A time written with a zone of several meanings is not inherited from above.
            let unplaceable = own.is_none() && spec.times.unplaceable(line);
            let effective = if unplaceable {
                None
            } else {
                own.or_else(|| self.time_above(ls))
            };
            verdict = match effective {
                None => Ok(false),
                Some(t)
                    if spec.since.is_some_and(|s| t < s) || spec.until.is_some_and(|u| t > u) =>
                {
                    match spec.outside {
                        Outside::Exclude => Ok(false),
                        Outside::Abort => Err(Stop::Disorder),
                    }
                }
                Some(_) => Ok(true),
            };
            if effective.is_none() {
                found.untimed += 1;
            }
            // Lines below this one inherit its time.
            match own {
                Some(t) => {
                    self.known_pos = next;
                    self.known_ts = Some(t);
                }
                None => {
                    self.known_pos = ls;
                    self.known_ts = effective;
                }
            }
        }
        if !verdict? {
            return Ok(());
        }
        found.count += 1;
        if keeping {
            let line = &self.data[ls..content];
            let line_no = self
                .lines_before
                .map(|n| n + count_newlines(self.data_or_empty(self.counted_to, ls)) + 1);
            let text = String::from_utf8_lossy(line);
            let shown = prefix_at_boundary(&text, spec.max_line_bytes);
            found.hits.push(Hit {
                line_no,
                offset: self.base + ls as u64,
                timestamp: own,
                line: shown.to_string(),
                line_truncated: cut || shown.len() < text.len(),
            });
            if let Some(n) = line_no {
                self.lines_before = Some(n - 1);
                self.counted_to = ls;
            }
            if found.hits.len() >= spec.keep && self.halt.is_none() {
                // Line numbers are no longer needed.
                self.lines_before = None;
            }
        }
        if found.count >= spec.count_cap {
            found.capped = true;
        }
        Ok(())
    }

    fn data_or_empty(&self, from: usize, to: usize) -> &[u8] {
        self.data.get(from..to).unwrap_or(&[])
    }

    /// The time of the nearest timestamped line above `ls`.
    fn time_above(&self, ls: usize) -> Option<Timestamp> {
        if ls <= self.known_pos {
            return self.known_ts;
        }
        self.last_time_between(self.known_pos, ls).or(self.known_ts)
    }

    /// The time of the last timestamped line starting in `data[from..to)` (both line starts).
    fn last_time_between(&self, from: usize, to: usize) -> Option<Timestamp> {
        let data = &self.data;
        let mut end = to.min(data.len());
        while end > from {
            let line_end = if data[end - 1] == b'\n' { end - 1 } else { end };
            let start =
                memchr::memrchr(b'\n', &data[from..line_end]).map_or(from, |i| from + i + 1);
            let content = self.content_end(start, line_end);
            if let Some(t) = self.spec.times.line_time(&data[start..content]) {
                return Some(t);
            }
            end = start;
        }
        None
    }
}

/// The scanner's buffer: bytes `[..len]` of a vector whose room after them stays initialized
/// from one fill to the next, so that a read goes straight into it (std's `read_to_end`
/// zeroes the room before reading from anything but a file, which cost as much as a tenth of
/// a scan).
#[derive(Default)]
struct Buf {
    bytes: Vec<u8>,
    len: usize,
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl std::ops::DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len]
    }
}

impl Buf {
    /// Initialized room for at least `n` bytes; grown by doubling, so that a small file does
    /// not pay for zeroing a large buffer.
    fn room(&mut self, n: usize) {
        if self.bytes.len() < n {
            let grown = (self.bytes.len() * 2).max(64 * 1024).max(n);
            self.bytes.resize(grown, 0);
        }
    }

    fn extend_from_slice(&mut self, more: &[u8]) {
        let end = self.len + more.len();
        self.room(end);
        self.bytes[self.len..end].copy_from_slice(more);
        self.len = end;
    }

    fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    /// Removes and returns `[at..]`.
    fn split_off(&mut self, at: usize) -> Vec<u8> {
        let tail = self[at..].to_vec();
        self.len = at;
        tail
    }

    /// Appends bytes read from `input` until `want` bytes are held or the input ends; returns
    /// how many were read (0: the end). On an error, the bytes read before it are kept.
    fn read_from(&mut self, input: &mut dyn Read, want: usize) -> io::Result<usize> {
        let start = self.len;
        while self.len < want {
            // While the room grows, a read is no larger than the room made so far: a small
            // file is read without zeroing room it does not need.
            let limit = want.min(self.len + self.bytes.len().max(64 * 1024));
            self.room(limit);
            match input.read(&mut self.bytes[self.len..limit]) {
                Ok(0) => break,
                Ok(n) => self.len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.len - start)
    }
}

/// Appends up to `want - buf.len()` bytes read from `input` (fewer only at its end); returns
/// how many. On an error, the bytes read before it stay in `buf`.
fn read_into(input: &mut dyn Read, buf: &mut Vec<u8>, want: usize) -> io::Result<usize> {
    let old = buf.len();
    if want <= old {
        return Ok(0);
    }
    buf.reserve(want - old);
    input.take((want - old) as u64).read_to_end(buf)
}

/// `\n` bytes in `data`. Counted into four 16-byte rows of byte counters (vector compares
/// and adds), which are summed only every 255 blocks of 64 bytes, before a counter could
/// overflow.
pub fn count_newlines(data: &[u8]) -> u64 {
    const LANES: usize = 16;
    const ROWS: usize = 4;
    let mut n: u64 = 0;
    let mut groups = data.chunks_exact(LANES * ROWS * 255);
    for group in &mut groups {
        let mut acc = [[0u8; LANES]; ROWS];
        for block in group.chunks_exact(LANES * ROWS) {
            for (row, bytes) in acc.iter_mut().zip(block.chunks_exact(LANES)) {
                for (a, &b) in row.iter_mut().zip(bytes) {
                    *a += u8::from(b == b'\n');
                }
            }
        }
        n += acc.iter().flatten().map(|&a| u64::from(a)).sum::<u64>();
    }
    n + groups.remainder().iter().filter(|&&b| b == b'\n').count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search_logs::timefmt::{FileFormat, LogZone};

    fn spec<'a>(m: &'a Matcher, times: &'a TimeReader, cancel: &'a AtomicBool) -> ScanSpec<'a> {
        ScanSpec {
            matcher: m,
            times,
            since: None,
            until: None,
            outside: Outside::Exclude,
            service: None,
            keep: 100,
            count_cap: u64::MAX,
            max_scan_line_bytes: 64,
            max_line_bytes: 32,
            cancel,
        }
    }

    fn run(spec: &ScanSpec, text: &[u8]) -> Found {
        let mut found = Found::default();
        let origin = Origin {
            offset: 0,
            lines_before: Some(0),
        };
        scan(spec, &[], &mut &text[..], origin, &mut found).unwrap();
        found
    }

    fn lines(f: &Found) -> Vec<(u64, String)> {
        f.hits
            .iter()
            .map(|h| (h.line_no.unwrap(), h.line.clone()))
            .collect()
    }

    #[test]
    fn newline_counts() {
        let mut v = vec![b'a'; 1000];
        for i in (0..1000).step_by(7) {
            v[i] = b'\n';
        }
        assert_eq!(
            count_newlines(&v),
            v.iter().filter(|&&b| b == b'\n').count() as u64
        );
        assert_eq!(count_newlines(b""), 0);
        // Every byte a newline, over several groups of 255 blocks (no lane overflows).
        for len in [64 * 255 - 1, 64 * 255, 2 * 64 * 255 + 17, 100_003] {
            assert_eq!(count_newlines(&vec![b'\n'; len]), len as u64);
            let mixed: Vec<u8> = (0..len)
                .map(|i| if i % 3 == 0 { b'\n' } else { b'x' })
                .collect();
            assert_eq!(count_newlines(&mixed), len.div_ceil(3) as u64);
        }
    }

    #[test]
    fn literal_regex_and_empty_queries_find_lines_with_numbers() {
        let times = TimeReader::new(FileFormat::Auto, LogZone::UTC, Timestamp::from_unix_ms(0));
        let cancel = AtomicBool::new(false);
        let text = b"alpha 502\r\nbeta\nGamma 502 502\n\ndelta ERROR\nlast 502";
        let m = Matcher::new("502", false, 1 << 20).unwrap();
        assert!(matches!(m, Matcher::Bytes(_)));
        let f = run(&spec(&m, &times, &cancel), text);
        assert_eq!(
            lines(&f),
            [
                (1, "alpha 502".into()),
                (3, "Gamma 502 502".into()),
                (6, "last 502".into())
            ]
        );
        assert_eq!(f.count, 3);
        let m = Matcher::new("error", false, 1 << 20).unwrap();
        assert_eq!(
            lines(&run(&spec(&m, &times, &cancel), text)),
            [(5, "delta ERROR".into())]
        );
        let m = Matcher::new("", false, 1 << 20).unwrap();
        assert_eq!(run(&spec(&m, &times, &cancel), text).count, 6);
        let m = Matcher::new("^$", true, 1 << 20).unwrap();
        assert_eq!(
            lines(&run(&spec(&m, &times, &cancel), text)),
            [(4, String::new())]
        );
        // A regex hit across lines is checked on its line alone.
        let m = Matcher::new(r"beta\s+gamma", true, 1 << 20).unwrap();
        assert_eq!(run(&spec(&m, &times, &cancel), text).count, 0);
        // "beta\n" matches `a\s` only across its newline.
        let m = Matcher::new(r"a\s", true, 1 << 20).unwrap();
        assert_eq!(
            lines(&run(&spec(&m, &times, &cancel), text)),
            [
                (1, "alpha 502".into()),
                (3, "Gamma 502 502".into()),
                (5, "delta ERROR".into())
            ]
        );
        let m = Matcher::new("a\nb", false, 1 << 20).unwrap();
        assert_eq!(run(&spec(&m, &times, &cancel), text).count, 0);
    }

    #[test]
    fn caseless_finds_every_occurrence_like_a_lowercase_search() {
        let hay = b"xx PoolExhausted yy poolexhausted POOLEXHAUSTED-tail PoolExhauste".repeat(7);
        for needle in [
            "PoolExhausted",
            "exh",
            "x",
            "d-t",
            "ail po",
            "zz",
            "POOLEXHAUSTED-TAIL",
        ] {
            let c = Caseless::new(needle.as_bytes());
            let lower_hay = hay.to_ascii_lowercase();
            let lower = needle.to_ascii_lowercase();
            let want: Vec<usize> = (0..=lower_hay.len().saturating_sub(lower.len()))
                .filter(|&i| lower_hay[i..].starts_with(lower.as_bytes()))
                .collect();
            let mut got = Vec::new();
            let mut from = 0;
            while let Some(i) = c.find(&hay, from) {
                got.push(i);
                from = i + 1;
            }
            assert_eq!(got, want, "{needle}");
        }
        let m = Matcher::new("PoolExhausted", false, 1 << 20).unwrap();
        assert!(matches!(m, Matcher::Caseless(_)));
        assert!(m.is_match(b"HikariPool-1 - POOLEXHAUSTED"));
        assert!(!m.is_match(b"pool exhausted"));
        // Non-ASCII queries keep Unicode case folding.
        let m = Matcher::new("été", false, 1 << 20).unwrap();
        assert!(matches!(m, Matcher::Regex(_)));
        assert!(m.is_match("ÉTÉ".as_bytes()));
    }

    #[test]
    fn long_lines_are_cut_for_search_and_display() {
        let times = TimeReader::new(FileFormat::Auto, LogZone::UTC, Timestamp::from_unix_ms(0));
        let cancel = AtomicBool::new(false);
        let long = format!("{}needle\nshort needle\n", "x".repeat(100));
        let m = Matcher::new("needle", false, 1 << 20).unwrap();
        let f = run(&spec(&m, &times, &cancel), long.as_bytes());
        // The needle beyond 64 bytes of the first line is not searched.
        assert_eq!(lines(&f), [(2, "short needle".into())]);
        let m = Matcher::new("xxx", false, 1 << 20).unwrap();
        let f = run(&spec(&m, &times, &cancel), long.as_bytes());
        assert_eq!(f.hits[0].line, "x".repeat(32));
        assert!(f.hits[0].line_truncated);
    }
}
