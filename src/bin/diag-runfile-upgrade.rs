//! `diag-runfile-upgrade PATH…`: rewrites every `diag_run_v1` run file under the given files
//! and folders as `diag_run_v2`, in place, by [`diag_runfile::upgrade_v1`]: the `format` value
//! changes and a `limits` member with today's defaults (what a v1 file replays under) follows
//! it; every other byte stays. Files already v2 and JSON files that are not run files are left
//! alone. Deterministic: files are visited in path order, and running it twice changes nothing
//! the second time. Exit 0 when every run file found is v2 afterwards, 2 when one could not be
//! upgraded (named on stderr).

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use diag_runfile::{strip_bom, upgrade_v1};
use diag_tools::walk::Skip;

/// The `.json` files under `path`, through diag's one directory walk (symlinked folders are
/// not walked, so a link cycle cannot loop).
fn json_files(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let walked = diag_tools::walk::files_under(path, 32);
    if let Some((p, reason)) = walked
        .skipped
        .iter()
        .find(|(_, r)| matches!(r, Skip::Unreadable(_) | Skip::TooDeep(_)))
    {
        return Err(std::io::Error::other(format!("{}: {reason}", p.display())));
    }
    out.extend(
        walked
            .files
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "json")),
    );
    Ok(())
}

/// Whether the text is a JSON object whose `format` is `diag_run_v1`.
fn is_v1(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(strip_bom(text))
        .ok()
        .is_some_and(|v| v.get("format").and_then(|f| f.as_str()) == Some("diag_run_v1"))
}

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if args.is_empty() {
        eprintln!("usage: diag-runfile-upgrade PATH…");
        return ExitCode::from(2);
    }
    let mut files = Vec::new();
    for arg in &args {
        if let Err(e) = json_files(arg, &mut files) {
            eprintln!("diag-runfile-upgrade: {}: {e}", arg.display());
            return ExitCode::from(2);
        }
    }
    let (mut upgraded, mut failed) = (0, 0);
    for path in &files {
        let name = path.display().to_string();
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        if !is_v1(&text) {
            continue;
        }
        match upgrade_v1(&text, &name) {
            Ok(Some(new)) => match diag::output_file::write_output(path, new.as_bytes()) {
                Ok(()) => {
                    upgraded += 1;
                    println!("{name}: diag_run_v1 → diag_run_v2");
                }
                Err(e) => {
                    failed += 1;
                    eprintln!("diag-runfile-upgrade: {name}: cannot write: {e}");
                }
            },
            Ok(None) => {}
            Err(e) => {
                failed += 1;
                eprintln!("diag-runfile-upgrade: {e}");
            }
        }
    }
    println!("{upgraded} upgraded, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}
