//! `diag replay FILE|DIR…`: replays run files offline, compares each with its `expected`,
//! prints a summary table (or `--json`), and exits 5 on any mismatch or divergence.
//!
//! At CI scale: `--jobs N` replays N files at once (each in a task of its own; results are
//! reported in file order whatever order they finish in), `--shard K/N` keeps the files of one
//! of N stable shards (see `diag_runfile::ci`), and `--junit FILE` writes JUnit XML.

use diag_tools::walk::Skip;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use futures::stream::{self, StreamExt};
use tokio_util::sync::CancellationToken;

use super::common::{interrupt_handler, runtime_with_workers, write_json, write_text};
use super::live::load_run_file;
use super::{CommandContext, CommandError, Exit};
use diag_ask::replay::{compare, replay_until};
use diag_ask::setup::RandomIds;
use diag_core::store::Store;
use diag_core::text::one_line;
use diag_report::Format;
use diag_runfile::ci::{self as replay_ci, Case, FileResult, FileVerdict, Shard, SuiteInfo};
use diag_runfile::{strip_bom, RunFile};

/// Replay run files (or folders of them) offline and compare each with its expected result.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Run files, or folders searched recursively for *.json run files
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// Print a JSON document (schema diag.replay.v1) instead of the table
    #[arg(long)]
    pub json: bool,
    /// Write a report of each replayed run into DIR (created if missing), named after the run
    /// file: `pass.json` gives `pass.html` (a second `pass.json` elsewhere gives `pass-2.html`)
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// The format of the reports of --report-dir
    #[arg(long, value_enum, default_value = "html", requires = "report_dir")]
    pub report_format: super::report_file::ReportFormat,
    /// Rewrite each file's `expected` from the actual result (for authoring, or to accept an
    /// intended change)
    #[arg(long)]
    pub update: bool,
    /// Replay N files at once (default: the number of cores); output keeps the files' order
    #[arg(long, value_name = "N")]
    pub jobs: Option<String>,
    /// Replay only shard K of N: each file belongs to one shard, fixed by a hash of its path
    /// (relative to the working directory), so N runners with the same arguments together
    /// replay every file once
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
    /// Also write the results as JUnit XML to FILE (one test case per run file)
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// How deep `replay` walks a folder of run files.
const MAX_FOLDER_DEPTH: usize = 32;

/// Every run file named, folders expanded recursively in sorted order through the one
/// directory walk (`diag_tools::walk`: symlinked folders are not walked, so a link cycle
/// cannot loop).
fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CommandError> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), CommandError> {
        let walked = diag_tools::walk::files_under(dir, MAX_FOLDER_DEPTH);
        // A folder that cannot be read is an error, as before; a link to a folder or a
        // special file is passed over.
        if let Some((p, reason)) = walked
            .skipped
            .iter()
            .find(|(_, r)| matches!(r, Skip::Unreadable(_) | Skip::TooDeep(_)))
        {
            return Err(CommandError::usage(format!(
                "{}: cannot read: {reason}",
                p.display()
            )));
        }
        out.extend(
            walked
                .files
                .into_iter()
                .filter(|p| p.extension().is_some_and(|x| x == "json") && is_run_file(p)),
        );
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out)?;
        } else if p.exists() {
            out.push(p.clone());
        } else {
            return Err(CommandError::usage(format!(
                "{}: no such file or folder",
                p.display()
            )));
        }
    }
    Ok(out)
}

/// In a folder, JSON documents that say they are something else (such as model-server
/// fixtures) are skipped; a file named directly is always tried. A `.json` file that cannot be
/// read or parsed cannot say what it is, so it is tried and reported: a truncated run file in
/// a CI folder must fail the replay, not vanish from it.
fn is_run_file(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return true;
    };
    match serde_json::from_str::<serde_json::Value>(strip_bom(&text)) {
        Err(_) => true,
        Ok(v) => v
            .get("format")
            .and_then(|f| f.as_str())
            .is_some_and(|f| f.starts_with("diag_run_")),
    }
}

/// Replays one file; `None` when Ctrl-C came before it started.
async fn replay_one(
    path: PathBuf,
    store: Store,
    update: bool,
    cancel: CancellationToken,
) -> Option<FileResult> {
    if cancel.is_cancelled() {
        return None;
    }
    let started = std::time::Instant::now();
    let mut result = replay_file(path, store, update, &cancel).await;
    result.seconds = started.elapsed().as_secs_f64();
    Some(result)
}

async fn replay_file(
    path: PathBuf,
    store: Store,
    update: bool,
    cancel: &CancellationToken,
) -> FileResult {
    let file = path.display().to_string();
    let mut result = FileResult::new(file.clone());
    let run: RunFile = match load_run_file(&path) {
        Ok(r) => r,
        Err(e) => {
            result.error = Some(e.to_string());
            return result;
        }
    };
    let replayed = match replay_until(&run, &store, Arc::new(RandomIds), Some(cancel)).await {
        Ok(r) => r,
        Err(e) => {
            result.error = Some(e.to_string());
            return result;
        }
    };
    result.run_id = Some(replayed.outcome.run_id.clone());
    result.status = Some(replayed.actual.status.clone());
    result.path = replayed.actual.path.clone();
    result.divergence = replayed.divergence.as_ref().map(|d| d.to_string());
    if replayed.divergence.is_some() {
        result.result = FileVerdict::Diverged;
        return result;
    }
    if update {
        let mut updated = run.clone();
        updated.expected = Some(replayed.actual.clone());
        if updated.expected != run.expected {
            if let Err(e) = crate::output_file::write_output(&path, updated.to_json().as_bytes()) {
                result.error = Some(format!("{file}: cannot write: {e}"));
                return result;
            }
            result.result = FileVerdict::Updated;
            return result;
        }
        result.result = FileVerdict::Ok;
        return result;
    }
    match &run.expected {
        None => {
            result.error = Some(format!(
                "{file}: no `expected` to compare with (use --update)"
            ));
        }
        Some(expected) => {
            result.mismatches = compare(expected, &replayed.actual);
            result.result = if result.mismatches.is_empty() {
                FileVerdict::Ok
            } else {
                FileVerdict::Mismatch
            };
        }
    }
    result
}

pub fn cmd_replay(
    g: &CommandContext,
    args: &ReplayArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let jobs = match &args.jobs {
        Some(text) => replay_ci::parse_jobs(text).map_err(CommandError::usage)?,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let shard = match &args.shard {
        Some(text) => Some(replay_ci::parse_shard(text).map_err(CommandError::usage)?),
        None => None,
    };
    let files = expand(&args.paths)?;
    if files.is_empty() {
        return Err(CommandError::usage("no run files found"));
    }
    // An empty shard is not an error: with few files, some of N runners get none, and they
    // must pass (an empty summary, an empty JUnit suite, exit 0).
    let files = match shard {
        Some(shard) => replay_ci::in_shard(files, shard, std::env::current_dir().ok().as_deref()),
        None => files,
    };
    let report_names = match &args.report_dir {
        Some(dir) => {
            if dir.exists() && !dir.is_dir() {
                return Err(CommandError::usage(format!(
                    "{}: cannot write reports there: it is not a folder",
                    dir.display()
                )));
            }
            std::fs::create_dir_all(dir).map_err(|e| {
                CommandError::usage(format!("{}: cannot create the folder: {e}", dir.display()))
            })?;
            replay_ci::report_names(&files, Format::from(args.report_format).extension())
        }
        None => Vec::new(),
    };
    let store = g.store()?;
    // Worker threads: one per job, at most one per core, at least the two every command's
    // runtime has. More jobs than cores still run concurrently, interleaved.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = runtime_with_workers(jobs.min(cores).max(2))?;
    let total = files.len();
    let cancel = CancellationToken::new();
    let started = std::time::Instant::now();
    let results: Vec<Option<FileResult>> = rt.block_on(async {
        let on_ctrl_c = interrupt_handler(cancel.clone())?;
        // Each file is a task of its own (so files replay on several threads at once);
        // `buffered` starts at most `jobs` of them and yields results in file order.
        let results = stream::iter(files)
            .map(|p| {
                let file = p.display().to_string();
                let task = tokio::spawn(replay_one(p, store.clone(), args.update, cancel.clone()));
                async move {
                    match task.await {
                        Ok(r) => r,
                        Err(e) => Some(FileResult::error(file, format!("replay failed: {e}"))),
                    }
                }
            })
            .buffered(jobs)
            .collect()
            .await;
        on_ctrl_c.abort();
        Ok::<_, CommandError>(results)
    })?;
    let seconds = started.elapsed().as_secs_f64();
    if cancel.is_cancelled() {
        // Files that finished before Ctrl-C are stored as usual; the ones in flight are
        // stored FAILED (`interrupted`); the rest were not started.
        let started = results.iter().flatten().count();
        return Err(CommandError::new(
            Exit::Interrupted,
            format!(
                "interrupted after {started} of {total} run file(s); a replay cut short is \
                 stored FAILED (interrupted)"
            ),
        ));
    }
    let results: Vec<FileResult> = results.into_iter().flatten().collect();
    // One report per replayed run, whatever its result: a mismatch is when a CI reader
    // most needs one.
    let mut report_errors = Vec::new();
    if let Some(dir) = &args.report_dir {
        for (r, name) in results.iter().zip(&report_names) {
            if let Some(run_id) = &r.run_id {
                let path = dir.join(name);
                if let Err(e) =
                    super::report_file::write_file(&store, run_id, args.report_format.into(), &path)
                {
                    report_errors.push(e);
                }
            }
        }
    }
    if let Some(path) = &args.junit {
        if let Err(e) = write_junit(path, &results, shard, jobs, seconds) {
            report_errors.push(e);
        }
    }
    let failed = results.iter().filter(|r| r.failed()).count();
    let errors = results
        .iter()
        .filter(|r| matches!(r.result, FileVerdict::Error))
        .count();
    if args.json {
        write_json(out, &replay_ci::document(&results, failed))?;
    } else {
        write_text(out, &table(&results, failed))?;
    }
    if let Some(first) = report_errors.first() {
        for e in &report_errors[1..] {
            let _ = writeln!(std::io::stderr(), "diag: {e}");
        }
        if failed == 0 {
            return Err(CommandError::usage(first.message.clone()));
        }
        let _ = writeln!(std::io::stderr(), "diag: {}", first.message);
    }
    if failed == 0 {
        Ok(())
    } else if errors == failed {
        Err(CommandError::new(
            Exit::Usage,
            format!("{errors} run file(s) could not be replayed"),
        ))
    } else {
        Err(CommandError::new(
            Exit::ReplayMismatch,
            format!(
                "{failed} of {} run file(s) did not reproduce",
                results.len()
            ),
        ))
    }
}

fn write_junit(
    path: &Path,
    results: &[FileResult],
    shard: Option<Shard>,
    jobs: usize,
    seconds: f64,
) -> Result<(), CommandError> {
    let now = time::OffsetDateTime::now_utc();
    let timestamp = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    );
    let suite = SuiteInfo::replay(shard, jobs, seconds, timestamp, hostname());
    let cases: Vec<Case> = results.iter().map(FileResult::junit_case).collect();
    let cannot = |e: std::io::Error| {
        CommandError::usage(format!("{}: cannot write JUnit XML: {e}", path.display()))
    };
    let xml = replay_ci::junit_xml(&suite, &cases).map_err(cannot)?;
    crate::output_file::write_output(path, &xml).map_err(cannot)
}

/// This machine's name, or `localhost` when it has none to give.
fn hostname() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

fn table(results: &[FileResult], failed: usize) -> String {
    use std::fmt::Write as _;
    let width = results
        .iter()
        .map(|r| r.file.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 60);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<width$}  {:<8}  {:<7}  path",
        "file", "result", "status"
    );
    for r in results {
        let result = match r.result {
            FileVerdict::Ok => "ok",
            FileVerdict::Updated => "updated",
            FileVerdict::Mismatch => "MISMATCH",
            FileVerdict::Diverged => "DIVERGED",
            FileVerdict::Error => "ERROR",
        };
        let _ = writeln!(
            out,
            "{:<width$}  {:<8}  {:<7}  {}",
            one_line(&r.file, width),
            result,
            r.status.as_deref().unwrap_or("-"),
            r.path.join(" → ")
        );
        for m in &r.mismatches {
            let (expected, actual, at) =
                diag_report::terminal::diff_excerpts(&m.expected, &m.actual, 200);
            match at {
                Some(at) => {
                    let _ = writeln!(out, "    {} (first difference at character {at}):", m.field);
                }
                None => {
                    let _ = writeln!(out, "    {}:", m.field);
                }
            }
            let _ = writeln!(out, "      - expected: {expected}");
            let _ = writeln!(out, "      + actual:   {actual}");
        }
        if let Some(d) = &r.divergence {
            let _ = writeln!(out, "    diverged at {}", one_line(d, 200));
        }
        if let Some(e) = &r.error {
            let _ = writeln!(out, "    {}", one_line(e, 200));
        }
    }
    let _ = writeln!(out, "{} passed, {} failed", results.len() - failed, failed);
    out
}
