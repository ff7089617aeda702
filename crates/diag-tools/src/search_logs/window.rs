//! Time windows in logarithmic time: where a window starts and ends in a time-ordered file,
//! found by binary search on byte offsets instead of reading the file.
//!
//! A probe at an offset reads a little of the file there (16 KiB, doubling up to
//! [`WindowLimits::max_probe_bytes`]), skips to the next line start and reads the time of the
//! first line that has one. Lines are the scan's lines: bytes between `\n`s, searched and read
//! at most `max_scan_line_bytes` deep, a trailing `\r` ignored.
//!
//! Order is checked, not assumed. Before searching, [`WindowLimits::order_probes`] probes
//! spread evenly over the file and its last timestamped line must be in time order; every
//! probe of the binary search and every line of its final linear step must agree with them;
//! and the scan of the window then checks that every line it returns really is in the window
//! (see `Outside::Abort`). Any disagreement, a probe that finds no time within its reach, or a
//! file without any timestamped line gives [`NoPlan`], and the caller scans the whole file.
//! What this cannot see is a stretch out of order that lies wholly between two probes outside
//! the window: the price of not reading the file. A log written by one process in time order
//! has none.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

use super::timefmt::TimeReader;
use diag_core::clock::Timestamp;

/// First read of a probe.
const PROBE_BYTES: usize = 16 * 1024;

/// The knobs of the window search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowLimits {
    /// The binary search stops when its bounds are this close and reads the rest linearly.
    pub granularity: u64,
    /// Probes spread over the file to check its order before searching.
    pub order_probes: u64,
    /// The furthest a probe reads to find a timestamped line.
    pub max_probe_bytes: usize,
    /// Lines are read this deep, as the scan reads them.
    pub max_scan_line_bytes: usize,
}

/// Where to scan: lines before `head_end` have no time (they precede the first timestamped
/// line); the window's lines are `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub head_end: u64,
    pub start: u64,
    pub end: u64,
}

/// Why a file is scanned whole instead.
#[derive(Debug)]
pub enum NoPlan {
    /// Probes saw the file go back in time.
    Unordered,
    /// No timestamped line within a probe's reach (or none in the file).
    NoTimes,
    /// A read failed (the whole-file scan will report it).
    Io,
}

impl From<io::Error> for NoPlan {
    fn from(_: io::Error) -> Self {
        NoPlan::Io
    }
}

/// Finds the window `[since, until]` (inclusive) of `file` (`size` bytes).
pub fn plan(
    file: &File,
    size: u64,
    times: &TimeReader,
    since: Option<Timestamp>,
    until: Option<Timestamp>,
    limits: &WindowLimits,
) -> Result<Plan, NoPlan> {
    let mut p = Prober {
        file,
        size,
        times,
        limits,
        seen: Vec::new(),
        buf: Vec::new(),
    };
    let (first, _) = p.timed_at(0)?.ok_or(NoPlan::NoTimes)?;
    let probes = limits.order_probes.max(1);
    for k in 1..probes {
        let at =
            u64::try_from(u128::from(size) * u128::from(k) / u128::from(probes)).unwrap_or(size);
        p.timed_at(at)?;
    }
    p.last_timed()?;
    p.check_order()?;
    let start = match since {
        None => first,
        Some(s) => p.lower_bound(first, |t| t >= s)?,
    };
    let end = match until {
        None => size,
        Some(_) if start >= size => size,
        Some(u) => p.lower_bound(start, |t| t > u)?,
    };
    p.check_order()?;
    Ok(Plan {
        head_end: first,
        start,
        end: end.max(start),
    })
}

struct Prober<'a> {
    file: &'a File,
    size: u64,
    times: &'a TimeReader,
    limits: &'a WindowLimits,
    /// Every timestamped line seen: (line start, time).
    seen: Vec<(u64, Timestamp)>,
    buf: Vec<u8>,
}

impl Prober<'_> {
    /// Reads `[from, from + len)` (clipped to the file) into `buf`.
    fn read(&mut self, from: u64, len: usize) -> io::Result<()> {
        let len = usize::try_from(self.size.saturating_sub(from)).map_or(len, |n| n.min(len));
        self.buf.resize(len, 0);
        let mut f = self.file;
        f.seek(SeekFrom::Start(from))?;
        f.read_exact(&mut self.buf)
    }

    fn line_time(&self, line: &[u8]) -> Option<Timestamp> {
        let line = &line[..line.len().min(self.limits.max_scan_line_bytes)];
        let line = if line.len() < self.limits.max_scan_line_bytes {
            line.strip_suffix(b"\r").unwrap_or(line)
        } else {
            line
        };
        self.times.line_time(line)
    }

    /// The first timestamped line starting at or after `offset`: (its start, its time), or
    /// `None` when there is none before the end of the file.
    fn timed_at(&mut self, offset: u64) -> Result<Option<(u64, Timestamp)>, NoPlan> {
        if offset >= self.size {
            return Ok(None);
        }
        let from = offset.saturating_sub(1);
        let mut span = PROBE_BYTES;
        loop {
            self.read(from, span)?;
            let at_eof = from + self.buf.len() as u64 >= self.size;
            // The byte before `offset` tells whether `offset` starts a line.
            let mut i = if offset == 0 {
                Some(0)
            } else {
                memchr::memchr(b'\n', &self.buf).map(|k| k + 1)
            };
            while let Some(start) = i.filter(|s| *s < self.buf.len()) {
                let (end, complete) = match memchr::memchr(b'\n', &self.buf[start..]) {
                    Some(k) => (start + k, true),
                    None => (self.buf.len(), at_eof),
                };
                if !complete {
                    break;
                }
                if let Some(t) = self.line_time(&self.buf[start..end]) {
                    let at = from + start as u64;
                    self.seen.push((at, t));
                    return Ok(Some((at, t)));
                }
                i = Some(end + 1);
            }
            if at_eof {
                return Ok(None);
            }
            if span >= self.limits.max_probe_bytes {
                return Err(NoPlan::NoTimes);
            }
            span = (span * 2).min(self.limits.max_probe_bytes);
        }
    }

    /// The last timestamped line of the file.
    fn last_timed(&mut self) -> Result<Option<(u64, Timestamp)>, NoPlan> {
        let mut span = PROBE_BYTES;
        loop {
            let from = self.size.saturating_sub(span as u64);
            self.read(from, span)?;
            let mut end = self.buf.len();
            while end > 0 {
                let line_end = if self.buf[end - 1] == b'\n' {
                    end - 1
                } else {
                    end
                };
                let start = match memchr::memrchr(b'\n', &self.buf[..line_end]) {
                    Some(k) => k + 1,
                    // The first line in the buffer is whole only at the start of the file.
                    None if from == 0 => 0,
                    None => break,
                };
                if let Some(t) = self.line_time(&self.buf[start..line_end]) {
                    let at = from + start as u64;
                    self.seen.push((at, t));
                    return Ok(Some((at, t)));
                }
                end = start;
            }
            if from == 0 {
                return Ok(None);
            }
            if span >= self.limits.max_probe_bytes {
                return Err(NoPlan::NoTimes);
            }
            span = (span * 2).min(self.limits.max_probe_bytes);
        }
    }

    /// Every timestamped line seen so far is in time order.
    fn check_order(&mut self) -> Result<(), NoPlan> {
        self.seen.sort_unstable();
        self.seen.dedup();
        if self
            .seen
            .windows(2)
            .all(|w| w[0].1 <= w[1].1 && w[0].0 != w[1].0)
        {
            Ok(())
        } else {
            Err(NoPlan::Unordered)
        }
    }

    /// The start of the first timestamped line at or after `lo` whose time satisfies `pred`
    /// (false for every time before it: the file is in order), or the file size when none
    /// does. `lo` is the start of a timestamped line.
    fn lower_bound(&mut self, lo: u64, pred: impl Fn(Timestamp) -> bool) -> Result<u64, NoPlan> {
        let Some((first, t)) = self.timed_at(lo)? else {
            return Ok(self.size);
        };
        if pred(t) {
            return Ok(first);
        }
        let (mut lo, mut hi) = (first, self.size);
        while hi - lo > self.limits.granularity.max(1) {
            let mid = lo + (hi - lo) / 2;
            match self.timed_at(mid)? {
                Some((_, t)) if pred(t) => hi = mid,
                None => hi = mid,
                Some((at, _)) if at >= hi => return Err(NoPlan::Unordered),
                Some((at, _)) => lo = at,
            }
        }
        self.linear(lo, pred)
    }

    /// Reads the lines from `pos` (a line start) on and returns the start of the first
    /// timestamped one whose time satisfies `pred`; times must not go back on the way.
    fn linear(&mut self, mut pos: u64, pred: impl Fn(Timestamp) -> bool) -> Result<u64, NoPlan> {
        let mut last: Option<Timestamp> = None;
        let mut span = PROBE_BYTES;
        while pos < self.size {
            self.read(pos, span)?;
            let at_eof = pos + self.buf.len() as u64 >= self.size;
            let mut start = 0;
            let mut advanced = false;
            while start < self.buf.len() {
                let (end, complete) = match memchr::memchr(b'\n', &self.buf[start..]) {
                    Some(k) => (start + k, true),
                    None => (self.buf.len(), at_eof),
                };
                if !complete {
                    break;
                }
                if let Some(t) = self.line_time(&self.buf[start..end]) {
                    let at = pos + start as u64;
                    self.seen.push((at, t));
                    if last.is_some_and(|l| t < l) {
                        return Err(NoPlan::Unordered);
                    }
                    last = Some(t);
                    if pred(t) {
                        return Ok(at);
                    }
                }
                start = end + 1;
                advanced = true;
            }
            if at_eof {
                break;
            }
            if advanced {
                pos += start as u64;
                span = PROBE_BYTES.max(span / 2);
            } else if span >= self.limits.max_probe_bytes {
                return Err(NoPlan::NoTimes);
            } else {
                span = (span * 2).min(self.limits.max_probe_bytes);
            }
        }
        Ok(self.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search_logs::timefmt::{FileFormat, Kind, LogZone};
    use std::io::Write;

    fn limits(granularity: u64, order_probes: u64) -> WindowLimits {
        WindowLimits {
            granularity,
            order_probes,
            max_probe_bytes: 1 << 20,
            max_scan_line_bytes: 1 << 20,
        }
    }

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn file(text: &str) -> (tempfile::NamedTempFile, u64) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        (f, text.len() as u64)
    }

    #[test]
    fn finds_the_window_of_an_ordered_file() {
        let mut text = String::from("banner without time\n");
        for m in 0..60 {
            text.push_str(&format!("2026-11-30T14:{m:02}:00Z line {m}\n\tframe {m}\n"));
        }
        let (f, size) = file(&text);
        let times = TimeReader::new(
            FileFormat::Fixed {
                kind: Kind::Iso,
                skip: 0,
            },
            LogZone::UTC,
            t("2026-12-01T00:00:00Z"),
        );
        let offset = |needle: &str| text.find(needle).unwrap() as u64;
        for g in [1, 7, 64, 1 << 20] {
            let p = plan(
                f.as_file(),
                size,
                &times,
                Some(t("2026-11-30T14:10:00Z")),
                Some(t("2026-11-30T14:20:30Z")),
                &limits(g, 8),
            )
            .unwrap();
            assert_eq!(p.head_end, offset("2026-11-30T14:00:00Z"));
            assert_eq!(p.start, offset("2026-11-30T14:10:00Z"));
            assert_eq!(p.end, offset("2026-11-30T14:21:00Z"));
            // Before the first and after the last line.
            let p = plan(
                f.as_file(),
                size,
                &times,
                Some(t("2026-11-30T15:00:00Z")),
                None,
                &limits(g, 8),
            )
            .unwrap();
            assert_eq!((p.start, p.end), (size, size));
            let p = plan(
                f.as_file(),
                size,
                &times,
                None,
                Some(t("2026-11-30T13:00:00Z")),
                &limits(g, 8),
            )
            .unwrap();
            assert_eq!((p.start, p.end), (p.head_end, p.head_end));
        }
    }

    #[test]
    fn a_file_that_goes_back_has_no_plan() {
        let mut text = String::new();
        for m in (0..30).chain(0..30) {
            text.push_str(&format!("2026-11-30T14:{m:02}:00Z line {m}\n"));
        }
        let (f, size) = file(&text);
        let times = TimeReader::new(
            FileFormat::Fixed {
                kind: Kind::Iso,
                skip: 0,
            },
            LogZone::UTC,
            t("2026-12-01T00:00:00Z"),
        );
        let r = plan(
            f.as_file(),
            size,
            &times,
            Some(t("2026-11-30T14:10:00Z")),
            None,
            &limits(1, 4),
        );
        assert!(matches!(r, Err(NoPlan::Unordered)), "{r:?}");
        let (f, size) = file("no time\nat all\n");
        let r = plan(
            f.as_file(),
            size,
            &times,
            Some(t("2026-11-30T14:10:00Z")),
            None,
            &limits(1, 4),
        );
        assert!(matches!(r, Err(NoPlan::NoTimes)), "{r:?}");
    }
}
