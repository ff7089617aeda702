//! One large plain file searched by several threads at once, with the sequential scan's
//! result.
//!
//! The range `[from, to)` is cut into a few parts per thread (no smaller than 4 MiB), which
//! the threads take in file order as they finish the ones before. Each cut is moved
//! forward to the next line start (the byte after a `\n`); under a time window, further to
//! the next line that has its own time, so that no part begins with lines that would take
//! their time from a line in the part before it. A cut that finds no such line within
//! [`SPLIT_REACH`] bytes is dropped (its neighbours' parts grow instead). The parts are read
//! with positional reads (`pread`), never through a memory map, and scanned on scoped threads,
//! each part into its own [`Found`].
//!
//! The parts are then merged in file order as if one scan had read them one after another:
//!
//! - kept matches are taken from the parts in order until `keep` is reached; a part's line
//!   numbers are counted from its own start (its thread counts every line of it) and shifted
//!   by the lines of the parts before it;
//! - counts and untimed lines are summed. A part that would take the count to `count_cap`
//!   ends the scan there: if a part before it counted anything, that part is scanned again
//!   alone with the exact remaining cap and room, so where the sequential scan stops (and
//!   what it kept and counted until then) is reproduced, `capped` included; the parts after
//!   it are stopped as soon as that is known;
//! - a part that ends in a time-order violation, a read error or a cancellation ends the
//!   merged scan the same way, with what the parts before it and the part itself found
//!   before that point; a read error's position ("line N", or "byte N" once lines are no
//!   longer counted) is the one the sequential scan would give.

use std::fs::File;
use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::scan::{self, Found, Origin, ScanSpec, Stop};

/// How far past a cut a line start (and, under a window, a timestamped line) is looked for
/// before the cut is dropped.
pub const SPLIT_REACH: u64 = 4 * 1024 * 1024;
/// First read when looking for a part start.
const FIRST_READ: usize = 16 * 1024;
/// Parts per thread: the threads take the parts in file order as they finish the ones before,
/// so a thread slowed down (by another process on its core) leaves more of the parts to the
/// others instead of holding up the whole search.
const PARTS_PER_THREAD: usize = 4;
/// Parts are no smaller than this (unless a file is searched in parts at all below it).
const MIN_PART_BYTES: u64 = 4 * 1024 * 1024;

/// Bytes read at explicit offsets, so that several threads can read one file at once without
/// sharing a file position.
pub trait ReadAt: Sync {
    /// Reads into `buf` from `offset`; `Ok(0)` at the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl ReadAt for File {
    #[cfg(unix)]
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }

    #[cfg(windows)]
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::windows::fs::FileExt::seek_read(self, buf, offset)
    }

    #[cfg(not(any(unix, windows)))]
    fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<usize> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "positional reads are not supported on this platform",
        ))
    }
}

impl ReadAt for &[u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

/// `[pos, end)` of a source as a stream.
struct RangeReader<'a> {
    src: &'a dyn ReadAt,
    pos: u64,
    end: u64,
}

impl Read for RangeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.end.saturating_sub(self.pos)).unwrap_or(usize::MAX);
        let n = buf.len().min(left);
        if n == 0 {
            return Ok(0);
        }
        let got = self.src.read_at(&mut buf[..n], self.pos)?;
        self.pos += got as u64;
        Ok(got)
    }
}

/// Scans bytes `[from, to)` of `src` on the calling thread; `head` holds its first bytes,
/// already read (used when `from` is 0).
pub fn range_scan(
    spec: &ScanSpec,
    src: &dyn ReadAt,
    head: &[u8],
    from: u64,
    to: u64,
    origin: Origin,
    found: &mut Found,
) -> Result<(), Stop> {
    let (pre, read_from) = head_part(head, from, to);
    let mut input = RangeReader {
        src,
        pos: read_from,
        end: to,
    };
    scan::scan(spec, pre, &mut input, origin, found)
}

/// The bytes of `head` that a range from `from` starts with, and where reading goes on.
fn head_part(head: &[u8], from: u64, to: u64) -> (&[u8], u64) {
    if from == 0 {
        let n = usize::try_from(to).map_or(head.len(), |t| t.min(head.len()));
        (&head[..n], n as u64)
    } else {
        (&[][..], from)
    }
}

/// Scans `[from, to)` as [`range_scan`] does, by `threads` threads at once when there are
/// several and the range (clipped to `size`, the file's size) holds at least `min_bytes`.
#[allow(clippy::too_many_arguments)]
pub fn range_scan_split(
    spec: &ScanSpec,
    src: &dyn ReadAt,
    head: &[u8],
    from: u64,
    to: u64,
    size: u64,
    threads: usize,
    min_bytes: u64,
    origin: Origin,
    found: &mut Found,
) -> Result<(), Stop> {
    let end = to.min(size);
    if threads > 1 && end > from && end - from >= min_bytes {
        let by_size = usize::try_from((end - from) / MIN_PART_BYTES).unwrap_or(usize::MAX);
        let parts = (threads * PARTS_PER_THREAD).min(by_size).max(threads);
        let cuts = split_points(spec, src, from, end, parts);
        if !cuts.is_empty() {
            return scan_split(spec, src, head, from, to, &cuts, threads, origin, found);
        }
    }
    range_scan(spec, src, head, from, to, origin, found)
}

/// The starts of parts 2..=`parts` of `[from, to)`: even cuts moved to part starts
/// ([`part_start`]), increasing, strictly inside the range; a cut that finds none is left
/// out.
pub fn split_points(
    spec: &ScanSpec,
    src: &dyn ReadAt,
    from: u64,
    to: u64,
    parts: usize,
) -> Vec<u64> {
    let mut cuts: Vec<u64> = Vec::new();
    if to <= from || parts < 2 {
        return cuts;
    }
    let len = u128::from(to - from);
    for k in 1..parts {
        let even = from + u64::try_from(len * k as u128 / parts as u128).unwrap_or(0);
        let floor = cuts.last().copied().unwrap_or(from);
        if even <= floor {
            continue;
        }
        // A read error here is met again, and reported, by the scan.
        if let Ok(Some(p)) = part_start(spec, src, even, to) {
            if p > floor && p < to {
                cuts.push(p);
            }
        }
    }
    cuts
}

/// Where a part may start at or after `at` (> 0), before `to`: the first line start (`at`
/// itself when the byte before it is a `\n`); under a time window, the first line start
/// whose line has its own time, as the scan reads it (its first `max_scan_line_bytes`, a
/// trailing `\r` dropped from a line that fits; under a service filter a JSON line's time
/// field must be readable too). `None` when there is none within [`SPLIT_REACH`] bytes.
pub fn part_start(spec: &ScanSpec, src: &dyn ReadAt, at: u64, to: u64) -> io::Result<Option<u64>> {
    if at == 0 || at >= to {
        return Ok(None);
    }
    let base = at - 1;
    let reach = usize::try_from((to - base).min(SPLIT_REACH + 1)).unwrap_or(usize::MAX);
    let max = spec.max_scan_line_bytes;
    let mut buf: Vec<u8> = Vec::new();
    let mut want = FIRST_READ.min(reach);
    loop {
        fill(src, base, &mut buf, want)?;
        // The buffer ends at `to` (or at the end of the file), or at the reach.
        let at_end = buf.len() < want || want == reach && reach as u64 == to - base;
        let full = buf.len() >= reach;
        let Some(nl) = memchr::memchr(b'\n', &buf) else {
            if at_end || full {
                return Ok(None);
            }
            want = (want * 2).min(reach);
            continue;
        };
        let mut ls = nl + 1;
        if !spec.window() {
            return Ok((ls < buf.len() || !at_end).then_some(base + ls as u64));
        }
        let mut need_more = false;
        while ls < buf.len() {
            let rest = &buf[ls..];
            let (content, next) = match memchr::memchr(b'\n', rest) {
                Some(i) => (line_content(&rest[..i], max, true), Some(ls + i + 1)),
                None if rest.len() > max => (line_content(rest, max, false), None),
                None if at_end => (line_content(rest, max, true), None),
                None => {
                    need_more = true;
                    break;
                }
            };
            if has_own_time(spec, content) {
                return Ok(Some(base + ls as u64));
            }
            match next {
                Some(n) => ls = n,
                None => {
                    need_more = !at_end;
                    break;
                }
            }
        }
        if !need_more && at_end || full {
            return Ok(None);
        }
        want = (want * 2).min(reach);
    }
}

/// What the scan searches of a line (without its `\n`): its first `max` bytes, or the whole
/// line without a trailing `\r` when it fits (`whole`: the line's end is known).
fn line_content(line: &[u8], max: usize, whole: bool) -> &[u8] {
    if whole && line.len() <= max {
        line.strip_suffix(b"\r").unwrap_or(line)
    } else {
        &line[..max.min(line.len())]
    }
}

/// Whether a line gives its own time to itself and to the untimed lines below it, whatever
/// is above it.
fn has_own_time(spec: &ScanSpec, line: &[u8]) -> bool {
    spec.times.line_time(line).is_some()
        && (spec.service.is_none() || spec.times.json_meta(line).is_none_or(|(t, _)| t.is_some()))
}

/// Reads `[base + buf.len(), base + want)` into `buf` (fewer bytes only at the end).
fn fill(src: &dyn ReadAt, base: u64, buf: &mut Vec<u8>, want: usize) -> io::Result<()> {
    let mut have = buf.len();
    buf.resize(want.max(have), 0);
    while have < buf.len() {
        match src.read_at(&mut buf[have..], base + have as u64) {
            Ok(0) => break,
            Ok(n) => have += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                buf.truncate(have);
                return Err(e);
            }
        }
    }
    buf.truncate(have);
    Ok(())
}

/// What one part gave.
struct PartOutcome {
    found: Found,
    result: Result<(), Stop>,
    /// The lines of the part, when it was scanned to its end with lines counted.
    lines: Option<u64>,
}

/// Scans `[from, to)` in parts starting at `cuts` (increasing line starts strictly inside
/// the range; under a window, lines with their own time) on `threads` threads, which take
/// the parts in order, and merges the parts into `found` as the sequential scan of the range
/// would have left it.
#[allow(clippy::too_many_arguments)]
pub fn scan_split(
    spec: &ScanSpec,
    src: &dyn ReadAt,
    head: &[u8],
    from: u64,
    to: u64,
    cuts: &[u64],
    threads: usize,
    origin: Origin,
    found: &mut Found,
) -> Result<(), Stop> {
    // The room and the cap left by what `found` already holds.
    let keep = spec.keep.saturating_sub(found.hits.len());
    let cap = spec.count_cap.saturating_sub(found.count);
    let part_spec = ScanSpec {
        keep,
        count_cap: cap,
        ..*spec
    };
    let bounds: Vec<(u64, u64)> = std::iter::once(from)
        .chain(cuts.iter().copied())
        .zip(cuts.iter().copied().chain(std::iter::once(to)))
        .collect();
    // `halts[i]` stops part i once a part before it has ended the scan.
    let halts: Vec<AtomicBool> = bounds.iter().map(|_| AtomicBool::new(false)).collect();
    // Part `i` scanned with `spec`, its lines counted from `lines_before`.
    let scan_one = |spec: &ScanSpec, i: usize, lines_before: Option<u64>, halt: &AtomicBool| {
        let (start, end) = bounds[i];
        let (pre, read_from) = head_part(head, start, end);
        let mut input = RangeReader {
            src,
            pos: read_from,
            end,
        };
        let o = Origin {
            offset: start,
            lines_before,
        };
        let mut f = Found::default();
        let (result, lines) = scan::scan_part(spec, pre, &mut input, o, halt, &mut f);
        PartOutcome {
            found: f,
            result,
            lines,
        }
    };
    let run = |i: usize| -> PartOutcome {
        let part = scan_one(&part_spec, i, origin.lines_before.map(|_| 0), &halts[i]);
        if part.found.capped || part.result.is_err() {
            for h in &halts[i + 1..] {
                h.store(true, Ordering::Relaxed);
            }
        }
        part
    };
    let next = AtomicUsize::new(0);
    let worker = || -> Vec<(usize, PartOutcome)> {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= bounds.len() {
                return done;
            }
            done.push((i, run(i)));
        }
    };
    let mut outcomes: Vec<(usize, PartOutcome)> = std::thread::scope(|s| {
        let handles: Vec<_> = (1..threads.clamp(1, bounds.len()))
            .map(|_| s.spawn(worker))
            .collect();
        let mut all = worker();
        for h in handles {
            all.extend(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        all
    });
    outcomes.sort_unstable_by_key(|(i, _)| *i);
    let mut merged = Merged {
        keep,
        cap,
        kept: 0,
        counted: 0,
        lines: origin.lines_before,
        lines_known: origin.lines_before.is_some(),
    };
    for (i, part) in outcomes {
        let crossing = part.found.count > 0 && merged.counted + part.found.count >= cap;
        let part = if crossing && merged.counted > 0 {
            // This part reaches the cap after what the parts before it counted: scan it again
            // alone, with the room and cap left, to stop where the sequential scan stops.
            let exact = ScanSpec {
                keep: keep.saturating_sub(merged.kept),
                count_cap: cap - merged.counted,
                ..*spec
            };
            let lines_before = merged.lines.filter(|_| merged.lines_known);
            let part = scan_one(&exact, i, lines_before, &AtomicBool::new(false));
            // Numbered from the file's start already.
            merged.lines = lines_before.map(|_| 0);
            part
        } else {
            part
        };
        let end = merged.add(part, found);
        if end.is_some() {
            return end.unwrap_or(Ok(()));
        }
    }
    Ok(())
}

/// The merge of the parts so far, relative to what `found` held before.
struct Merged {
    keep: usize,
    cap: u64,
    kept: usize,
    counted: u64,
    /// Lines before the next part, when known.
    lines: Option<u64>,
    /// Whether the sequential scan would still be counting lines.
    lines_known: bool,
}

impl Merged {
    /// Adds the next part; `Some` when the scan ends with it.
    fn add(&mut self, part: PartOutcome, found: &mut Found) -> Option<Result<(), Stop>> {
        let PartOutcome {
            found: f,
            result,
            lines,
        } = part;
        let room = self.keep - self.kept;
        let shift = self.lines;
        for mut hit in f.hits.into_iter().take(room) {
            if let (Some(n), Some(s)) = (hit.line_no, shift) {
                hit.line_no = Some(n + s);
            }
            found.hits.push(hit);
            self.kept += 1;
        }
        if self.keep > 0 && self.kept >= self.keep {
            // The sequential scan stops counting lines once its matches are kept.
            self.lines_known = false;
        }
        found.count = found.count.saturating_add(f.count);
        found.untimed = found.untimed.saturating_add(f.untimed);
        self.counted = self.counted.saturating_add(f.count);
        if f.capped || (f.count > 0 && self.counted >= self.cap) {
            found.capped = true;
            return Some(Ok(()));
        }
        match result {
            Ok(()) => {}
            Err(Stop::Read { mut after, error }) => {
                after.line = match (after.line, shift) {
                    (Some(n), Some(s)) if self.lines_known => Some(n + s),
                    _ => None,
                };
                return Some(Err(Stop::Read { after, error }));
            }
            Err(stop) => return Some(Err(stop)),
        }
        self.lines = match (self.lines, lines) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        None
    }
}

#[cfg(test)]
mod tests;
