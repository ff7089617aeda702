//! `diag-bench logs`: `search_logs` against ripgrep on a generated 1 GiB log.
//!
//! The corpus is generated once under `--dir` (default `/tmp/diag-bench-logs`) from a fixed
//! seed, so every run searches the same bytes:
//!
//! - `app/app.log`: 1 GiB of a Java service's log4j lines (`2026-11-01 00:00:00,123 INFO
//!   [thread] logger - message`), with stack traces under its errors, spanning 30 days;
//! - `formats/`: 1 GiB in four files of 256 MiB, each in another format: an nginx combined
//!   access log, RFC 3164 syslog, JSON lines and Kubernetes klog.
//!
//! Each case runs the tool in-process (`SearchLogs::search`, the tool's whole work: listing,
//! format detection, the scan, the output) and `rg` as a process on the same files and
//! query, `--runs` times each after one warm-up (warm page cache); the median is reported,
//! with the match counts of both, which must agree.
//!
//! One file alone: the first 400 MB of `app/app.log` (cut at a line end, copied once to
//! `one/app.log`) searched for a rare literal, `search_logs` (which searches one large file
//! in parts on every core) against `rg -c -i -F` and against `search_logs` on one thread,
//! the best of at least three runs each after a warm-up; the split search's output must equal
//! the one-thread output. `--one-file` runs this case alone. `--write FILE` replaces the section
//! between `<!-- log-search:begin -->` and `<!-- log-search:end -->` of FILE (appends it when
//! absent). Nothing here is asserted by tests.

use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use diag_core::clock::Timestamp;
use diag_tools::search_logs::{LogQuery, LogSearchLimits, SearchLogs};
use serde_json::{json, Value};

const GIB: u64 = 1 << 30;
/// Bump when the generator changes, so an old corpus is regenerated.
const CORPUS_VERSION: &str = "diag-bench-logs v1";
const BEGIN: &str = "<!-- log-search:begin -->";
const END: &str = "<!-- log-search:end -->";
/// 2026-11-01T00:00:00Z
const START_MS: i64 = 1_793_491_200_000;

/// xorshift64*: a fixed, dependency-free generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

#[derive(Clone, Copy)]
enum Format {
    Log4j,
    Nginx,
    Syslog,
    Json,
    Klog,
}

struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    milli: u32,
}

fn civil(ms: i64) -> Civil {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    Civil {
        year,
        month,
        day,
        hour: (rem / 3_600_000) as u32,
        minute: (rem / 60_000 % 60) as u32,
        second: (rem / 1000 % 60) as u32,
        milli: (rem % 1000) as u32,
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Rare words planted at fixed intervals: the "rare literal" cases search for them.
const RARE_EVERY: u64 = 400_000;

/// Writes `bytes` of `format` lines to `path` over 30 days from [`START_MS`]; returns the time
/// of the last line (Unix ms).
fn generate(path: &Path, format: Format, bytes: u64, seed: u64) -> Result<i64, String> {
    let file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut rng = Rng(seed);
    let mut written: u64 = 0;
    let mut t = START_MS;
    // About 30 days over the file, whatever its size: the mean gap per line.
    let lines_estimate = bytes / 140;
    let mean_gap = (30 * 86_400_000 / lines_estimate.max(1)).max(1);
    let mut n: u64 = 0;
    let services = ["checkout", "payment", "inventory", "shipping", "auth"];
    let threads = [
        "http-nio-8080-exec-1",
        "http-nio-8080-exec-7",
        "scheduler-2",
        "kafka-consumer-0",
    ];
    let loggers = [
        "c.e.checkout.OrderService",
        "c.e.payment.PaymentClient",
        "c.e.inventory.StockCache",
        "o.h.engine.jdbc.spi.SqlExceptionHelper",
        "c.e.web.RequestLogFilter",
    ];
    let paths = [
        "/api/checkout",
        "/api/cart",
        "/api/products/4711",
        "/healthz",
        "/api/orders",
    ];
    let agents = [
        "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        "curl/8.5.0",
        "kube-probe/1.29",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15",
    ];
    let mut line = String::with_capacity(1024);
    while written < bytes {
        t += rng.below(2 * mean_gap) as i64;
        n += 1;
        let c = civil(t);
        let rare = n.is_multiple_of(RARE_EVERY);
        line.clear();
        use std::fmt::Write as _;
        let roll = rng.below(1000);
        let _ = match format {
            Format::Log4j => {
                let head = format!(
                    "{:04}-{:02}-{:02} {:02}:{:02}:{:02},{:03}",
                    c.year, c.month, c.day, c.hour, c.minute, c.second, c.milli
                );
                let thread = rng.pick(&threads);
                let logger = rng.pick(&loggers);
                if rare {
                    writeln!(line, "{head} ERROR [{thread}] {logger} - HikariPool-1 - PoolExhaustedException: connection is not available, request timed out after 30000ms (total=50, active=50, idle=0, waiting={})", rng.below(300))
                } else if roll < 8 {
                    let _ = writeln!(line, "{head} ERROR [{thread}] {logger} - upstream payment-service returned 502 for order ord-{}: Connection refused", rng.below(1_000_000));
                    let _ = writeln!(line, "java.net.ConnectException: Connection refused\n\tat java.base/sun.nio.ch.Net.connect0(Native Method)\n\tat java.base/sun.nio.ch.Net.connect(Net.java:579)\n\tat c.e.payment.PaymentClient.charge(PaymentClient.java:{})", 80 + rng.below(40));
                    Ok(())
                } else if roll < 60 {
                    writeln!(line, "{head} WARN  [{thread}] {logger} - slow query took {}ms: select * from orders where customer_id = ?", 500 + rng.below(5000))
                } else if roll < 300 {
                    writeln!(
                        line,
                        "{head} DEBUG [{thread}] {logger} - cache hit key=product:{} ttl={}s",
                        rng.below(100_000),
                        rng.below(3600)
                    )
                } else {
                    writeln!(line, "{head} INFO  [{thread}] {logger} - order ord-{} placed total={}.{:02} EUR items={} customer=cus-{}", rng.below(1_000_000), rng.below(500), rng.below(100), 1 + rng.below(9), rng.below(100_000))
                }
            }
            Format::Nginx => {
                let status = if rare {
                    599
                } else if roll < 10 {
                    502
                } else if roll < 40 {
                    404
                } else {
                    200
                };
                let agent = if rare {
                    "PoolExhaustedProbe/1.0"
                } else {
                    rng.pick(&agents)
                };
                writeln!(
                    line,
                    "10.{}.{}.{} - - [{:02}/{}/{:04}:{:02}:{:02}:{:02} +0000] \"{} {}?id={} HTTP/1.1\" {status} {} \"-\" \"{agent}\"",
                    rng.below(256), rng.below(256), rng.below(256),
                    c.day, MONTHS[(c.month - 1) as usize], c.year, c.hour, c.minute, c.second,
                    if roll.is_multiple_of(3) { "POST" } else { "GET" }, rng.pick(&paths), rng.below(100_000), rng.below(20_000)
                )
            }
            Format::Syslog => {
                let msg = if rare {
                    "kernel: Out of memory: PoolExhausted killed process 4242 (java)".to_string()
                } else if roll < 20 {
                    format!("sshd[{}]: Failed password for invalid user admin from 203.0.113.{} port {} ssh2", rng.below(65536), rng.below(256), 1024 + rng.below(60000))
                } else if roll < 500 {
                    format!(
                        "CRON[{}]: (root) CMD (run-parts /etc/cron.hourly)",
                        rng.below(65536)
                    )
                } else {
                    format!(
                        "systemd[1]: Started Session {} of User deploy.",
                        rng.below(100_000)
                    )
                };
                writeln!(
                    line,
                    "{} {:>2} {:02}:{:02}:{:02} web{:02} {msg}",
                    MONTHS[(c.month - 1) as usize],
                    c.day,
                    c.hour,
                    c.minute,
                    c.second,
                    rng.below(8)
                )
            }
            Format::Json => {
                let (level, msg) = if rare {
                    ("error", "PoolExhausted: no connection available")
                } else if roll < 10 {
                    ("error", "charge failed: upstream timeout")
                } else {
                    ("info", "charge ok")
                };
                writeln!(
                    line,
                    "{{\"ts\":\"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z\",\"level\":\"{level}\",\"service\":\"{}-service\",\"msg\":\"{msg}\",\"amount\":{}.{:02},\"trace_id\":\"{:016x}\"}}",
                    c.year, c.month, c.day, c.hour, c.minute, c.second, c.milli,
                    rng.pick(&services), rng.below(500), rng.below(100), rng.next()
                )
            }
            Format::Klog => {
                let (sev, msg) = if rare {
                    ('E', "PoolExhausted: leader election lost".to_string())
                } else if roll < 10 {
                    ('E', format!("error retrieving resource lock kube-system/kube-controller-manager: context deadline exceeded (attempt {})", rng.below(100)))
                } else {
                    (
                        'I',
                        format!(
                            "Syncing deployment default/{}-{} replicas={}",
                            rng.pick(&services),
                            rng.below(1000),
                            rng.below(10)
                        ),
                    )
                };
                writeln!(
                    line,
                    "{sev}{:02}{:02} {:02}:{:02}:{:02}.{:03}{:03}       1 controller.go:{}] {msg}",
                    c.month,
                    c.day,
                    c.hour,
                    c.minute,
                    c.second,
                    c.milli,
                    rng.below(1000),
                    100 + rng.below(900)
                )
            }
        };
        w.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
        written += line.len() as u64;
    }
    w.flush().map_err(|e| e.to_string())?;
    drop(w);
    // Times without a year are placed by the file's time: the last line's, as a real log.
    let mtime = std::time::UNIX_EPOCH + Duration::from_millis(t as u64 + 60_000);
    File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(mtime))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(t)
}

struct Corpus {
    app: PathBuf,
    app_last: i64,
    formats: PathBuf,
    format_files: Vec<(PathBuf, &'static str, i64)>,
}

fn corpus(dir: &Path, size: u64) -> Result<Corpus, String> {
    let marker = dir.join("CORPUS");
    let want = format!("{CORPUS_VERSION} size={size}\n");
    let files: [(&str, Format, &'static str); 4] = [
        ("formats/access.log", Format::Nginx, "nginx combined"),
        ("formats/syslog", Format::Syslog, "RFC 3164 syslog"),
        ("formats/payment.jsonl", Format::Json, "JSON lines"),
        ("formats/kube-controller-manager.log", Format::Klog, "klog"),
    ];
    let lasts = dir.join("LAST_TIMES");
    let fresh = fs::read_to_string(&marker).ok().as_deref() == Some(want.as_str());
    if !fresh {
        eprintln!(
            "diag-bench logs: generating {} of logs under {}",
            human(2 * size),
            dir.display()
        );
        fs::create_dir_all(dir.join("app")).map_err(|e| e.to_string())?;
        fs::create_dir_all(dir.join("formats")).map_err(|e| e.to_string())?;
        let mut times = vec![generate(
            &dir.join("app/app.log"),
            Format::Log4j,
            size,
            0x00C0_FFEE,
        )?];
        for (i, (rel, format, _)) in files.iter().enumerate() {
            times.push(generate(
                &dir.join(rel),
                *format,
                size / 4,
                0xBEEF + i as u64,
            )?);
        }
        let text: Vec<String> = times.iter().map(i64::to_string).collect();
        fs::write(&lasts, text.join("\n")).map_err(|e| e.to_string())?;
        fs::write(&marker, &want).map_err(|e| e.to_string())?;
    }
    let times: Vec<i64> = fs::read_to_string(&lasts)
        .map_err(|e| e.to_string())?
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    if times.len() != 5 {
        return Err(format!(
            "{}: unreadable; delete {} to regenerate",
            lasts.display(),
            dir.display()
        ));
    }
    Ok(Corpus {
        app: dir.join("app/app.log"),
        app_last: times[0],
        formats: dir.join("formats"),
        format_files: files
            .iter()
            .zip(&times[1..])
            .map(|((rel, _, name), t)| (dir.join(rel), *name, *t))
            .collect(),
    })
}

fn human(bytes: u64) -> String {
    if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time_it<T>(
    runs: usize,
    mut f: impl FnMut() -> Result<T, String>,
) -> Result<(Duration, T), String> {
    let mut last = f()?; // warm-up
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        last = f()?;
        times.push(t0.elapsed());
    }
    Ok((median(times), last))
}

fn rg(args: &[&str], paths: &[&Path]) -> Result<u64, String> {
    let out = Command::new("rg")
        .args(args)
        .args(paths)
        .output()
        .map_err(|e| format!("cannot run rg (apt-get install -y ripgrep): {e}"))?;
    // Exit 1 is "no match".
    if !out.status.success() && out.status.code() != Some(1) {
        return Err(format!(
            "rg failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // `-c` prints N for one file, path:N per file for several.
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.rsplit(':').next()?.trim().parse::<u64>().ok())
        .sum())
}

fn search(tool: &SearchLogs, query: &LogQuery) -> Result<Value, String> {
    let now = Timestamp::from_unix_ms(START_MS + 40 * 86_400_000);
    let out = tool.search(query, now).map_err(|e| e.to_string())?;
    serde_json::to_value(out).map_err(|e| e.to_string())
}

fn size_of(paths: &[&Path]) -> u64 {
    paths
        .iter()
        .flat_map(|p| {
            if p.is_dir() {
                fs::read_dir(p)
                    .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
                    .unwrap_or_default()
            } else {
                vec![p.to_path_buf()]
            }
        })
        .filter_map(|p| fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// Reads every byte of the paths (the `cat > /dev/null` baseline).
fn read_all(paths: &[&Path]) -> Result<u64, String> {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    for p in paths {
        let files: Vec<PathBuf> = if p.is_dir() {
            let mut v: Vec<PathBuf> = fs::read_dir(p)
                .map_err(|e| e.to_string())?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            v.sort();
            v
        } else {
            vec![p.to_path_buf()]
        };
        for f in files {
            let mut file = File::open(&f).map_err(|e| e.to_string())?;
            loop {
                let n = file.read(&mut buf).map_err(|e| e.to_string())?;
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
        }
    }
    Ok(total)
}

/// The size of the one-file case.
const ONE_FILE_BYTES: u64 = 400_000_000;

/// The first [`ONE_FILE_BYTES`] of the log4j file, to its next line end, as `one/app.log`
/// (copied once).
fn one_file(dir: &Path, c: &Corpus) -> Result<PathBuf, String> {
    let path = dir.join("one/app.log");
    let marker = dir.join("one/SOURCE");
    let source_len = fs::metadata(&c.app).map_err(|e| e.to_string())?.len();
    let want = format!("{CORPUS_VERSION} bytes={ONE_FILE_BYTES} of {source_len}\n");
    if fs::read_to_string(&marker).ok().as_deref() == Some(want.as_str()) && path.is_file() {
        return Ok(path);
    }
    fs::create_dir_all(dir.join("one")).map_err(|e| e.to_string())?;
    let mut input = File::open(&c.app).map_err(|e| e.to_string())?;
    let mut out =
        BufWriter::with_capacity(1 << 20, File::create(&path).map_err(|e| e.to_string())?);
    let mut buf = vec![0u8; 1 << 20];
    let mut written: u64 = 0;
    loop {
        let n = input.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        if written + n as u64 >= ONE_FILE_BYTES {
            let from = usize::try_from(ONE_FILE_BYTES.saturating_sub(written)).unwrap_or(n);
            let cut = chunk[from.min(n)..]
                .iter()
                .position(|&b| b == b'\n')
                .map(|i| from + i + 1);
            if let Some(cut) = cut {
                out.write_all(&chunk[..cut]).map_err(|e| e.to_string())?;
                break;
            }
        }
        out.write_all(chunk).map_err(|e| e.to_string())?;
        written += n as u64;
    }
    out.flush().map_err(|e| e.to_string())?;
    drop(out);
    let mtime = fs::metadata(&c.app)
        .and_then(|m| m.modified())
        .map_err(|e| e.to_string())?;
    File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_modified(mtime))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    fs::write(&marker, want).map_err(|e| e.to_string())?;
    Ok(path)
}

/// One large file searched for a rare literal: `search_logs` against `rg -c -i -F` and
/// against itself on one thread, best of `runs` (at least 3) after a warm-up, interleaved.
fn bench_one_file(dir: &Path, c: &Corpus, runs: usize) -> Result<Value, String> {
    let path = one_file(dir, c)?;
    let q = "PoolExhausted";
    let limits = LogSearchLimits::default();
    let tool = SearchLogs::new(vec![path.clone()], limits.clone());
    let one_thread = SearchLogs::new(
        vec![path.clone()],
        LogSearchLimits {
            split_min_bytes: u64::MAX,
            ..limits.clone()
        },
    );
    let query = LogQuery::new(q, &limits);
    let flags = ["-c", "-i", "-F"];
    let mut args: Vec<&str> = flags.to_vec();
    args.push(q);
    let paths: [&Path; 1] = [&path];
    let mut out = search(&tool, &query)?; // warm-up
    let mut seq = search(&one_thread, &query)?;
    let mut rg_count = rg(&args, &paths)?;
    let same = out == seq;
    let (mut d, mut r, mut s1) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs.max(3) {
        let t0 = Instant::now();
        out = search(&tool, &query)?;
        d.push(t0.elapsed());
        let t0 = Instant::now();
        rg_count = rg(&args, &paths)?;
        r.push(t0.elapsed());
        let t0 = Instant::now();
        seq = search(&one_thread, &query)?;
        s1.push(t0.elapsed());
    }
    let best = |v: &[Duration]| v.iter().min().copied().unwrap_or_default();
    let (t_diag, t_rg, t_seq) = (best(&d), best(&r), best(&s1));
    let ratio = t_rg.as_secs_f64() / t_diag.as_secs_f64();
    let ms = |t: Duration| t.as_secs_f64() * 1e3;
    eprintln!(
        "diag-bench logs: one file of {} ({q}): search_logs {:.1} ms (one thread {:.1} ms), \
         rg -c -i -F {:.1} ms: rg time / search_logs time = {ratio:.2} (goal >= 1.0: {})",
        human(size_of(&paths)),
        ms(t_diag),
        ms(t_seq),
        ms(t_rg),
        if ratio >= 1.0 { "met" } else { "missed" }
    );
    Ok(json!({
        "bytes": size_of(&paths), "query": q, "rg_flags": flags.join(" "),
        "runs": runs.max(3),
        "diag_ms": ms(t_diag), "rg_ms": ms(t_rg), "one_thread_ms": ms(t_seq),
        "ratio": ratio, "goal": 1.0, "met": ratio >= 1.0,
        "diag_count": out["matches_found"], "rg_count": rg_count,
        "same_output_as_one_thread": same && out == seq,
    }))
}

/// Runs the benchmark; returns its figures as JSON.
pub fn bench_logs(
    dir: &Path,
    size_mib: u64,
    runs: usize,
    one_file_only: bool,
    write: Option<&Path>,
) -> Result<Value, String> {
    let size = size_mib << 20;
    let c = corpus(dir, size)?;
    if one_file_only {
        if write.is_some() {
            return Err("--write needs every case: leave out --one-file".into());
        }
        return Ok(json!({"one_file": bench_one_file(dir, &c, runs)?}));
    }
    let rg_version = Command::new("rg")
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .map_err(|e| format!("cannot run rg (apt-get install -y ripgrep): {e}"))?;
    let load_average = fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let limits = LogSearchLimits::default();
    let mut scans = Vec::new();
    // (corpus, paths, query, rg flags)
    let app: &Path = &c.app;
    let formats: &Path = &c.formats;
    let cases: [(&str, &[&Path], &str, &[&str]); 7] = [
        ("rare literal", &[app], "PoolExhausted", &["-c", "-F", "-i"]),
        (
            "rare literal, case-sensitive rg",
            &[app],
            "PoolExhausted",
            &["-c", "-F"],
        ),
        (
            "no match",
            &[app],
            "NoSuchThingAnywhere",
            &["-c", "-F", "-i"],
        ),
        (
            "frequent literal (0.8 % of lines)",
            &[app],
            "Connection refused",
            &["-c", "-F", "-i"],
        ),
        (
            "literal without letters",
            &[app],
            "returned 502 for",
            &["-c", "-F", "-i"],
        ),
        (
            "rare literal, 4 files",
            &[formats],
            "PoolExhausted",
            &["-c", "-F", "-i"],
        ),
        (
            "no match, 4 files",
            &[formats],
            "NoSuchThingAnywhere",
            &["-c", "-F", "-i"],
        ),
    ];
    for (name, paths, q, flags) in cases {
        let bytes = size_of(paths);
        let tool = SearchLogs::new(
            paths.iter().map(|p| p.to_path_buf()).collect(),
            limits.clone(),
        );
        let query = LogQuery::new(q, &limits);
        let mut args: Vec<&str> = flags.to_vec();
        args.push(q);
        // Interleaved, so a change in the machine's load hits all three alike.
        let (mut d, mut r, mut c) = (Vec::new(), Vec::new(), Vec::new());
        let mut out = search(&tool, &query)?; // warm-up
        let mut rg_count = rg(&args, paths)?;
        read_all(paths)?;
        for _ in 0..runs {
            let t0 = Instant::now();
            out = search(&tool, &query)?;
            d.push(t0.elapsed());
            let t0 = Instant::now();
            rg_count = rg(&args, paths)?;
            r.push(t0.elapsed());
            let t0 = Instant::now();
            read_all(paths)?;
            c.push(t0.elapsed());
        }
        let (t_diag, t_rg, t_cat) = (median(d), median(r), median(c));
        let found = out["matches_found"].as_u64().unwrap_or(0);
        let gbps = |t: Duration| bytes as f64 / t.as_secs_f64() / 1e9;
        scans.push(json!({
            "case": name, "query": q, "bytes": bytes,
            "rg_flags": flags.join(" "),
            "diag_ms": t_diag.as_secs_f64() * 1e3, "rg_ms": t_rg.as_secs_f64() * 1e3,
            "read_ms": t_cat.as_secs_f64() * 1e3,
            "diag_gbps": gbps(t_diag), "rg_gbps": gbps(t_rg), "read_gbps": gbps(t_cat),
            "ratio": t_rg.as_secs_f64() / t_diag.as_secs_f64(),
            "diag_count": found, "rg_count": rg_count,
        }));
    }
    // Windows: the last ten minutes of each file, with a query that hits often.
    let mut windows = Vec::new();
    let mut window_cases: Vec<(PathBuf, &str, i64, &str)> =
        vec![(c.app.clone(), "log4j (1 GiB)", c.app_last, "error")];
    for (p, name, last) in &c.format_files {
        window_cases.push((p.clone(), name, *last, ""));
    }
    for (path, name, last, q) in window_cases {
        let since = Timestamp::from_unix_ms(last - 10 * 60_000);
        let tool = SearchLogs::new(vec![path.clone()], limits.clone());
        let mut query = LogQuery::new(q, &limits);
        query.since = Some(since);
        let (t, out) = time_it(runs, || search(&tool, &query))?;
        // The same window read whole, for the check and the comparison.
        let full_limits = LogSearchLimits {
            window_search_min_bytes: u64::MAX,
            ..limits.clone()
        };
        let full_tool = SearchLogs::new(vec![path.clone()], full_limits);
        let t0 = Instant::now();
        let full = search(&full_tool, &query)?;
        let t_full = t0.elapsed();
        windows.push(json!({
            "file": name, "bytes": size_of(&[&path]), "query": q, "since": since.to_string(),
            "ms": t.as_secs_f64() * 1e3, "full_scan_ms": t_full.as_secs_f64() * 1e3,
            "matches_found": out["matches_found"], "full_scan_matches_found": full["matches_found"],
            "untimed_lines": out["untimed_lines"],
        }));
    }
    let one = bench_one_file(dir, &c, runs)?;
    let result = json!({"rg_version": rg_version, "runs": runs, "load_average": load_average,
               "scans": scans, "one_file": one, "windows": windows});
    if let Some(file) = write {
        write_section(file, &result)?;
    }
    Ok(result)
}

fn f1(v: &Value) -> String {
    format!("{:.1}", v.as_f64().unwrap_or(0.0))
}

fn f2(v: &Value) -> String {
    format!("{:.2}", v.as_f64().unwrap_or(0.0))
}

fn write_section(file: &Path, r: &Value) -> Result<(), String> {
    let mut s = String::new();
    s.push_str(&format!("{BEGIN}\n## Log search\n\n"));
    s.push_str(&format!(
        "Generated by `diag-bench logs --write docs/BENCHMARKS.md` (release build) on {}: `search_logs` \
         in-process against {} as a process, on the same files and query, median of {} runs after \
         a warm-up (warm page cache), the three timings of a case interleaved run by run; {} cores, \
         load average {} at the start (a shared virtual machine: figures move between runs). The corpus is generated from a fixed seed under \
         `/tmp/diag-bench-logs` (never committed): `app/app.log`, 1 GiB of log4j lines with stack \
         traces over 30 days, and `formats/`, 1 GiB in four files (nginx combined, RFC 3164 syslog, \
         JSON lines, klog). `search_logs` is always case-insensitive, so its \"same query\" is \
         `rg -c -F -i`; the case-sensitive `rg -F` is shown once for reference. \"read\" is reading \
         the files into a buffer and nothing else (`cat > /dev/null`).\n\n",
        today(),
        r["rg_version"].as_str().unwrap_or("rg"),
        r["runs"],
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        r["load_average"].as_str().unwrap_or("?"),
    ));
    s.push_str("ripgrep reads one file through a memory map on one thread; `search_logs` copies every byte out of the page cache with `pread` (it does not memory-map log files: a file truncated while mapped, by copytruncate rotation, would kill the process with SIGBUS) and always matches case-insensitively, but searches a large file in parts on every core. Windows are answered by binary search on byte offsets (some 60 probe reads of 16 KiB), then only the window is read; \"read whole\" is the same query with the binary search turned off, every line's time then read.\n\n");
    s.push_str("| scan | bytes | `search_logs` | `rg` | read | diag ÷ rg throughput | goal ≥ 0.8 | lines counted (diag / rg) |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for x in r["scans"].as_array().into_iter().flatten() {
        let ratio = x["ratio"].as_f64().unwrap_or(0.0);
        s.push_str(&format!(
            "| {} (`{}`, rg `{}`) | {} | {} ms, {} GB/s | {} ms, {} GB/s | {} GB/s | {:.2} | {} | {} / {} |\n",
            x["case"].as_str().unwrap_or(""),
            x["query"].as_str().unwrap_or(""),
            x["rg_flags"].as_str().unwrap_or(""),
            human(x["bytes"].as_u64().unwrap_or(0)),
            f1(&x["diag_ms"]), f2(&x["diag_gbps"]),
            f1(&x["rg_ms"]), f2(&x["rg_gbps"]),
            f2(&x["read_gbps"]),
            ratio,
            if x["rg_flags"].as_str() == Some("-c -F") {
                "(reference)"
            } else if ratio >= 0.8 {
                "met"
            } else {
                "**missed**"
            },
            x["diag_count"], x["rg_count"],
        ));
    }
    let one = &r["one_file"];
    s.push_str(&format!(
        "\nOne file alone: the first {} of `app/app.log`, searched for a rare literal; `search_logs` searches one large file in parts on every core (split at line starts, results merged into the sequential scan's), \"one thread\" is the same search with the split turned off. Best of {} runs each after a warm-up, interleaved.\n\n",
        human(one["bytes"].as_u64().unwrap_or(0)),
        one["runs"],
    ));
    s.push_str("| one file | bytes | `search_logs` | one thread | `rg` | rg time ÷ diag time | goal ≥ 1.0 | lines counted (diag / rg) | same output as one thread |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    s.push_str(&format!(
        "| rare literal (`{}`, rg `{}`) | {} | {} ms | {} ms | {} ms | {:.2} | {} | {} / {} | {} |\n",
        one["query"].as_str().unwrap_or(""),
        one["rg_flags"].as_str().unwrap_or(""),
        human(one["bytes"].as_u64().unwrap_or(0)),
        f1(&one["diag_ms"]),
        f1(&one["one_thread_ms"]),
        f1(&one["rg_ms"]),
        one["ratio"].as_f64().unwrap_or(0.0),
        if one["met"].as_bool() == Some(true) { "met" } else { "**missed**" },
        one["diag_count"],
        one["rg_count"],
        if one["same_output_as_one_thread"].as_bool() == Some(true) { "yes" } else { "**no**" },
    ));
    s.push_str("\n| window: last 10 minutes of | bytes | query | `search_logs` | goal < 20 ms | same window read whole | matches (window / whole) | untimed |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for x in r["windows"].as_array().into_iter().flatten() {
        let ms = x["ms"].as_f64().unwrap_or(f64::MAX);
        s.push_str(&format!(
            "| {} | {} | {} | {} ms | {} | {} ms | {} / {} | {} |\n",
            x["file"].as_str().unwrap_or(""),
            human(x["bytes"].as_u64().unwrap_or(0)),
            match x["query"].as_str().unwrap_or("") {
                "" => "(every line)".to_string(),
                q => format!("`{q}`"),
            },
            f2(&x["ms"]),
            if ms < 20.0 { "met" } else { "**missed**" },
            f1(&x["full_scan_ms"]),
            x["matches_found"],
            x["full_scan_matches_found"],
            x["untimed_lines"],
        ));
    }
    s.push_str(&format!("\n{END}\n"));
    let old = fs::read_to_string(file).unwrap_or_default();
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(a), Some(b)) if a < b => {
            // One blank line between this section and the next.
            let rest = old[b + END.len()..].trim_start_matches('\n');
            let gap = if rest.is_empty() { "" } else { "\n" };
            format!("{}{s}{gap}{rest}", &old[..a])
        }
        _ => format!("{}\n{}", old.trim_end(), s),
    };
    fs::write(file, new).map_err(|e| format!("{}: {e}", file.display()))
}

fn today() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let c = civil(ms);
    format!("{:04}-{:02}-{:02}", c.year, c.month, c.day)
}
