use super::*;
use crate::search_logs::name_names_service;
use crate::search_logs::scan::{At, Hit, Matcher, Outside, ServiceFilter};
use crate::search_logs::timefmt::{FileFormat, LogZone, TimeReader};
use diag_core::clock::Timestamp;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};

/// 2026-11-30T14:00:00Z
const T0: i64 = 1_796_047_200_000;

fn times() -> TimeReader {
    TimeReader::new(FileFormat::Auto, LogZone::UTC, Timestamp::from_unix_ms(T0))
}

fn spec<'a>(m: &'a Matcher, times: &'a TimeReader, cancel: &'a AtomicBool) -> ScanSpec<'a> {
    ScanSpec {
        matcher: m,
        times,
        since: None,
        until: None,
        outside: Outside::Exclude,
        service: None,
        keep: 1000,
        count_cap: u64::MAX,
        max_scan_line_bytes: 48,
        max_line_bytes: 24,
        cancel,
    }
}

fn ts(secs: i64) -> String {
    Timestamp::from_unix_ms(T0 + secs * 1000).to_string()
}

#[test]
fn a_part_starts_at_the_next_line_start() {
    let m = Matcher::new("x", false, 1 << 20).unwrap();
    let (t, cancel) = (times(), AtomicBool::new(false));
    let s = spec(&m, &t, &cancel);
    let text: &[u8] = b"aaaa\nbbbb\r\ncc\n\ndd";
    let end = text.len() as u64;
    let at = |p: u64| part_start(&s, &text, p, end).unwrap();
    // A line start is kept; inside a line, the next one.
    assert_eq!(at(5), Some(5));
    assert_eq!(at(1), Some(5));
    assert_eq!(at(4), Some(5));
    assert_eq!(at(6), Some(11));
    assert_eq!(at(10), Some(11));
    assert_eq!(at(12), Some(14));
    // The empty line is a line.
    assert_eq!(at(14), Some(14));
    assert_eq!(at(15), Some(15));
    // Inside the last line there is no next one.
    assert_eq!(at(16), None);
    assert_eq!(at(0), None);
    assert_eq!(at(end), None);
    // Not past the range's end.
    assert_eq!(part_start(&s, &text, 6, 11).unwrap(), None);
    assert_eq!(part_start(&s, &text, 6, 12).unwrap(), Some(11));
}

#[test]
fn a_line_longer_than_the_reach_drops_the_cut() {
    let m = Matcher::new("x", false, 1 << 20).unwrap();
    let (t, cancel) = (times(), AtomicBool::new(false));
    let s = spec(&m, &t, &cancel);
    let mut text = vec![b'a'; SPLIT_REACH as usize + 10];
    text.extend_from_slice(b"\nnext\n");
    let end = text.len() as u64;
    assert_eq!(part_start(&s, &&text[..], 3, end).unwrap(), None);
    // Within reach it is found, however many reads it takes.
    let at = end - 6 - 1000;
    assert_eq!(part_start(&s, &&text[..], at, end).unwrap(), Some(end - 5));
}

#[test]
fn under_a_window_a_part_starts_at_a_line_with_its_own_time() {
    let m = Matcher::new("x", false, 1 << 20).unwrap();
    let (t, cancel) = (times(), AtomicBool::new(false));
    let mut s = spec(&m, &t, &cancel);
    s.since = Some(Timestamp::from_unix_ms(T0));
    let long = "y".repeat(60);
    let text = format!(
        "{} first\n\tat frame one\n\tat frame two\r\n{} {long}\n{long} {}\ncaused by\n{} second\r\nlast\n",
        ts(1),
        // A time beyond the first 48 bytes of a line is not read.
        "untimed",
        ts(2),
        ts(3),
    );
    let b = text.as_bytes();
    let end = b.len() as u64;
    let second = text.find(&format!("{} second", ts(3))).unwrap() as u64;
    assert_eq!(part_start(&s, &b, 1, end).unwrap(), Some(second));
    assert_eq!(part_start(&s, &b, second, end).unwrap(), Some(second));
    assert_eq!(part_start(&s, &b, second + 1, end).unwrap(), None);
    // A long line whose first bytes hold a time starts a part.
    let timed_long = format!("\tat x\n{} {long}\n", ts(5));
    let b = timed_long.as_bytes();
    assert_eq!(part_start(&s, &b, 1, b.len() as u64).unwrap(), Some(6));
    // Without a window any line start will do.
    s.since = None;
    assert_eq!(
        part_start(&s, &text.as_bytes(), 1, end).unwrap(),
        text.find('\n').map(|i| i as u64 + 1)
    );
}

#[test]
fn under_a_service_filter_a_json_line_needs_its_time_field() {
    let m = Matcher::new("x", false, 1 << 20).unwrap();
    let (t, cancel) = (times(), AtomicBool::new(false));
    let mut s = spec(&m, &t, &cancel);
    s.since = Some(Timestamp::from_unix_ms(T0));
    s.max_scan_line_bytes = 200;
    s.service = Some(ServiceFilter {
        service: "checkout",
        path_names_it: true,
        field_names_it: name_names_service,
    });
    let text = format!(
        "{{\"ts\":\"{}\",\"msg\":\"a\"}}\n{{\"ts\":\"never\",\"msg\":\"{} b\"}}\n{{\"ts\":\"{}\",\"msg\":\"c\"}}\n",
        ts(1),
        ts(2),
        ts(3)
    );
    let b = text.as_bytes();
    let third = text.rfind("{\"ts\"").unwrap() as u64;
    let second = text.find("{\"ts\":\"never").unwrap() as u64;
    let first_line_time = t.line_time(&b[second as usize..third as usize - 1]);
    if first_line_time.is_some() {
        // The line's own time is its JSON field's, which it lacks: not a part start.
        assert_eq!(part_start(&s, &b, 2, b.len() as u64).unwrap(), Some(third));
    }
    s.service = None;
    let want = if first_line_time.is_some() {
        second
    } else {
        third
    };
    assert_eq!(part_start(&s, &b, 2, b.len() as u64).unwrap(), Some(want));
}

#[test]
fn split_points_increase_inside_the_range() {
    let m = Matcher::new("x", false, 1 << 20).unwrap();
    let (t, cancel) = (times(), AtomicBool::new(false));
    let s = spec(&m, &t, &cancel);
    let text = "0123456789\n".repeat(100);
    let b = text.as_bytes();
    let cuts = split_points(&s, &b, 0, b.len() as u64, 4);
    assert_eq!(cuts, [275, 550, 825]);
    // More parts than lines: each line start once.
    let cuts = split_points(&s, &b, 0, 33, 8);
    assert_eq!(cuts, [11, 22]);
    assert!(split_points(&s, &b, 0, b.len() as u64, 1).is_empty());
    assert!(split_points(&s, &b, 11, 11, 4).is_empty());
}

#[test]
fn a_large_range_is_searched_in_parts_with_the_sequential_result() {
    let m = Matcher::new("needle", false, 1 << 20).unwrap();
    let (t, cancel) = (times(), AtomicBool::new(false));
    let s = ScanSpec {
        keep: 5,
        ..spec(&m, &t, &cancel)
    };
    let text: String = (0..400)
        .map(|i| {
            if i % 37 == 0 {
                format!("{} line {i} needle\n", ts(i))
            } else {
                format!("{} line {i}\n", ts(i))
            }
        })
        .collect();
    let b = text.as_bytes();
    let origin = Origin {
        offset: 0,
        lines_before: Some(0),
    };
    let mut seq = Found::default();
    range_scan(&s, &b, &[], 0, u64::MAX, origin, &mut seq).unwrap();
    let mut par = Found::default();
    range_scan_split(
        &s,
        &b,
        &[],
        0,
        u64::MAX,
        b.len() as u64,
        3,
        1,
        origin,
        &mut par,
    )
    .unwrap();
    assert_eq!(par.hits, seq.hits);
    assert_eq!((par.count, par.capped), (seq.count, seq.capped));
    assert_eq!(seq.count, 11);
    assert_eq!(seq.hits.last().unwrap().line_no, Some(149));
}

#[test]
fn a_cancelled_search_stops_in_every_part() {
    let m = Matcher::new("a", false, 1 << 20).unwrap();
    let (t, cancel) = (times(), AtomicBool::new(true));
    let s = spec(&m, &t, &cancel);
    let text = "a\n".repeat(100);
    let b = text.as_bytes();
    let origin = Origin {
        offset: 0,
        lines_before: Some(0),
    };
    let mut par = Found::default();
    let r = scan_split(&s, &b, &[], 0, 200, &[50, 100], 2, origin, &mut par);
    assert!(matches!(r, Err(Stop::Cancelled)));
}

/// A file whose reads fail from one offset on (bytes before it are read).
struct Failing<'a> {
    data: &'a [u8],
    fail_at: u64,
}

impl ReadAt for Failing<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if offset >= self.fail_at && offset < self.data.len() as u64 {
            return Err(io::Error::other("injected"));
        }
        let stop = usize::try_from(self.fail_at)
            .unwrap_or(usize::MAX)
            .max(offset as usize);
        let part = &self.data[..stop.min(self.data.len())];
        (&part).read_at(buf, offset)
    }
}

/// One generated line.
#[derive(Debug, Clone)]
enum Line {
    /// A line with a time `step` seconds after the previous one (negative: back in time).
    Timed {
        step: i8,
        text: u8,
    },
    /// A line without a time (a stack frame).
    Untimed {
        text: u8,
    },
    /// A JSON line, with or without a `service` field and a time.
    Json {
        step: i8,
        service: bool,
        text: u8,
    },
    /// A line longer than the bytes searched of a line, with the text at its end.
    Long {
        timed: bool,
        len: u8,
        text: u8,
    },
    Empty,
}

const TEXTS: [&str; 6] = [
    "needle",
    "NeEdLe in a haystack",
    "nothing here",
    "upstream returned 502",
    "xxx marks the needle 502",
    "",
];

fn gen_line() -> impl Strategy<Value = Line> {
    prop_oneof![
        5 => (-2i8..6, 0u8..6).prop_map(|(step, text)| Line::Timed { step, text }),
        3 => (0u8..6).prop_map(|text| Line::Untimed { text }),
        1 => (-1i8..4, any::<bool>(), 0u8..6)
            .prop_map(|(step, service, text)| Line::Json { step, service, text }),
        1 => (any::<bool>(), 20u8..120, 0u8..6)
            .prop_map(|(timed, len, text)| Line::Long { timed, len, text }),
        1 => Just(Line::Empty),
    ]
}

/// The text of `lines` and the range of seconds their times span.
fn render(lines: &[Line], crlf: &[bool], trailing: bool) -> (String, i64, i64) {
    let mut out = String::new();
    let mut t: i64 = 0;
    let (mut lo, mut hi) = (0, 0);
    for (i, l) in lines.iter().enumerate() {
        let mut stamp = |step: i8| {
            t += i64::from(step);
            lo = lo.min(t);
            hi = hi.max(t);
            ts(t)
        };
        match l {
            Line::Timed { step, text } => {
                out.push_str(&format!("{} INFO {}", stamp(*step), TEXTS[*text as usize]))
            }
            Line::Untimed { text } => out.push_str(&format!("\tat {}", TEXTS[*text as usize])),
            Line::Json {
                step,
                service,
                text,
            } => {
                let svc = if *service {
                    ",\"service\":\"checkout-api\""
                } else {
                    ""
                };
                out.push_str(&format!(
                    "{{\"ts\":\"{}\"{svc},\"msg\":\"{}\"}}",
                    stamp(*step),
                    TEXTS[*text as usize]
                ))
            }
            Line::Long { timed, len, text } => {
                let head = if *timed { stamp(0) } else { "pad".into() };
                out.push_str(&format!(
                    "{head} {} {}",
                    "y".repeat(*len as usize),
                    TEXTS[*text as usize]
                ))
            }
            Line::Empty => {}
        }
        if i + 1 < lines.len() || trailing {
            out.push_str(if crlf[i % crlf.len()] { "\r\n" } else { "\n" });
        }
    }
    (out, lo, hi)
}

/// What a scan ended with, comparably.
#[derive(Debug, PartialEq, Eq)]
enum End {
    Done,
    Cancelled,
    Disorder,
    Read(At),
}

fn end(r: Result<(), Stop>) -> End {
    match r {
        Ok(()) => End::Done,
        Err(Stop::Cancelled) => End::Cancelled,
        Err(Stop::Disorder) => End::Disorder,
        Err(Stop::Read { after, .. }) => End::Read(after),
    }
}

fn found_before(pre_hits: usize, pre_count: u64) -> Found {
    let hit = Hit {
        line_no: None,
        offset: 0,
        timestamp: None,
        line: "before".into(),
        line_truncated: false,
    };
    Found {
        hits: vec![hit; pre_hits.min(pre_count as usize)],
        count: pre_count,
        untimed: 0,
        capped: false,
    }
}

/// Line starts of `text`.
fn line_starts(text: &[u8]) -> Vec<u64> {
    std::iter::once(0)
        .chain(memchr::memchr_iter(b'\n', text).map(|i| i as u64 + 1))
        .filter(|&s| s < text.len() as u64)
        .collect()
}

/// The seeded configuration of the properties here: the same cases on every run (unless
/// `PROPTEST_RNG_SEED` names others), 256 of them unless `PROPTEST_CASES` says otherwise.
fn config(seed: u64) -> Config {
    let default = Config::default();
    Config {
        rng_seed: match default.rng_seed {
            RngSeed::Random => RngSeed::Fixed(seed),
            explicit => explicit,
        },
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..default
    }
}

#[derive(Debug, Clone)]
struct Case {
    lines: Vec<Line>,
    crlf: Vec<bool>,
    trailing: bool,
    query: u8,
    keep: usize,
    count_cap: u64,
    /// (since, until) as fractions of the times' span, in 1/8.
    window: Option<(Option<u8>, Option<u8>)>,
    abort: bool,
    service: Option<bool>,
    max_scan: usize,
    /// Where the range starts and ends, as line indexes (`None`: the file's ends).
    range: (Option<prop::sample::Index>, Option<prop::sample::Index>),
    head: usize,
    lines_known: Option<u64>,
    pre: (usize, u64),
    cuts: Vec<prop::sample::Index>,
    raw_cuts: bool,
    fail: Option<prop::sample::Index>,
    threads: usize,
}

fn gen_case() -> impl Strategy<Value = Case> {
    (
        (
            prop::collection::vec(gen_line(), 0..40),
            prop::collection::vec(any::<bool>(), 1..4),
            any::<bool>(),
            0u8..5,
            prop_oneof![Just(0usize), Just(1), 2usize..6, Just(1000)],
            prop_oneof![Just(1u64), 2u64..8, Just(u64::MAX)],
            prop::option::of((prop::option::of(0u8..9), prop::option::of(0u8..9))),
            any::<bool>(),
            prop::option::of(any::<bool>()),
        ),
        (
            prop_oneof![Just(40usize), 41usize..100, Just(1 << 20)],
            (
                prop::option::of(any::<prop::sample::Index>()),
                prop::option::of(any::<prop::sample::Index>()),
            ),
            prop_oneof![Just(0usize), 1usize..200, Just(1 << 16)],
            prop::option::of(0u64..5),
            (0usize..3, 0u64..4),
            prop::collection::vec(any::<prop::sample::Index>(), 1..6),
            any::<bool>(),
            prop::option::weighted(0.2, any::<prop::sample::Index>()),
            1usize..4,
        ),
    )
        .prop_map(
            |(
                (lines, crlf, trailing, query, keep, count_cap, window, abort, service),
                (max_scan, range, head, lines_known, pre, cuts, raw_cuts, fail, threads),
            )| Case {
                lines,
                crlf,
                trailing,
                query,
                keep,
                count_cap,
                window,
                abort,
                service,
                max_scan,
                range,
                head,
                lines_known,
                pre,
                cuts,
                raw_cuts,
                fail,
                threads,
            },
        )
}

fn matcher(query: u8) -> Matcher {
    match query {
        0 => Matcher::new("needle", false, 1 << 20),
        1 => Matcher::new("502", false, 1 << 20),
        2 => Matcher::new("", false, 1 << 20),
        3 => Matcher::new("ne+dle|x{3}", true, 1 << 20),
        _ => Matcher::new("NÉEDLE|needle", true, 1 << 20),
    }
    .unwrap()
}

/// Scans a generated file once sequentially and once in parts cut at the case's points, and
/// compares everything the scans give.
fn parts_equal_sequential(case: &Case) -> Result<(), TestCaseError> {
    let (text, lo, hi) = render(&case.lines, &case.crlf, case.trailing);
    let b = text.as_bytes();
    let len = b.len() as u64;
    let m = matcher(case.query);
    let t = times();
    let cancel = AtomicBool::new(false);
    let at_eighth =
        |k: u8| Timestamp::from_unix_ms(T0 + (lo + (hi - lo) * i64::from(k) / 8) * 1000 - 500);
    let service = case.service.map(|path_names_it| ServiceFilter {
        service: "checkout",
        path_names_it,
        field_names_it: name_names_service,
    });
    let (since, until) = match case.window {
        Some((s, u)) => (
            s.map(at_eighth),
            u.map(|k| Timestamp::from_unix_ms(at_eighth(k).unix_ms() + 1000)),
        ),
        None => (None, None),
    };
    let s = ScanSpec {
        since,
        until,
        outside: if case.abort {
            Outside::Abort
        } else {
            Outside::Exclude
        },
        service,
        keep: case.keep,
        count_cap: case.count_cap,
        max_scan_line_bytes: case.max_scan,
        ..spec(&m, &t, &cancel)
    };
    let starts = line_starts(b);
    let pick = |i: &Option<prop::sample::Index>, none: u64| match i {
        Some(i) if !starts.is_empty() => starts[i.index(starts.len())],
        _ => none,
    };
    let (mut from, mut to) = (pick(&case.range.0, 0), pick(&case.range.1, u64::MAX));
    if to < from {
        std::mem::swap(&mut from, &mut to);
    }
    let head = &b[..case.head.min(b.len())];
    let origin = Origin {
        offset: from,
        lines_before: case.lines_known.map(|n| {
            if from == 0 {
                n
            } else {
                n + b[..from as usize].iter().filter(|&&c| c == b'\n').count() as u64
            }
        }),
    };
    let end_at = to.min(len);
    // Cuts: positions anywhere, moved to part starts as the search moves them; or (without a
    // window) line starts taken as they are.
    let mut cuts: Vec<u64> = Vec::new();
    if end_at > from + 1 {
        for c in &case.cuts {
            let raw = from + 1 + c.index((end_at - from - 1) as usize) as u64;
            let p = if case.raw_cuts && !s.window() {
                starts.iter().copied().find(|&st| st >= raw)
            } else {
                part_start(&s, &b, raw, end_at).unwrap()
            };
            if let Some(p) = p.filter(|&p| p > from && p < end_at) {
                cuts.push(p);
            }
        }
    }
    cuts.sort_unstable();
    cuts.dedup();
    let fail_at = case.fail.as_ref().map(|i| {
        if len == 0 {
            return 0;
        }
        // The head was read before: reads fail after it.
        (i.index(len as usize) as u64).max(head.len() as u64)
    });
    let failing = Failing {
        data: b,
        fail_at: fail_at.unwrap_or(u64::MAX),
    };
    let src: &dyn ReadAt = &failing;
    let (pre_hits, pre_count) = case.pre;
    let mut seq = found_before(pre_hits, pre_count);
    let seq_end = end(range_scan(&s, src, head, from, to, origin, &mut seq));
    let mut par = found_before(pre_hits, pre_count);
    let par_end = end(scan_split(
        &s,
        src,
        head,
        from,
        to,
        &cuts,
        case.threads,
        origin,
        &mut par,
    ));
    let what = format!("cuts {cuts:?} range {from}..{to} fail {fail_at:?}\n{text:?}");
    prop_assert_eq!(&par_end, &seq_end, "{}", what);
    prop_assert_eq!(&par.hits, &seq.hits, "{}", what);
    prop_assert_eq!(par.count, seq.count, "{}", what);
    prop_assert_eq!(par.untimed, seq.untimed, "{}", what);
    prop_assert_eq!(par.capped, seq.capped, "{}", what);
    // And the production cuts.
    for threads in 2..4 {
        let mut par = found_before(pre_hits, pre_count);
        let r = range_scan_split(&s, src, head, from, to, len, threads, 0, origin, &mut par);
        prop_assert_eq!(&end(r), &seq_end, "{} threads\n{}", threads, what);
        prop_assert_eq!(&par.hits, &seq.hits, "{} threads\n{}", threads, what);
        prop_assert_eq!(
            (par.count, par.untimed, par.capped),
            (seq.count, seq.untimed, seq.capped)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(0x5917_7A11))]

    #[test]
    fn a_file_searched_in_parts_gives_the_sequential_result(case in gen_case()) {
        parts_equal_sequential(&case)?;
    }
}
