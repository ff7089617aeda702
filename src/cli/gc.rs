//! `diag gc`: deletes old runs with everything they own, so the database does not grow
//! without bound.

use std::io::Write;
use std::time::Duration;

use clap::Args;

use super::common::{parse_duration, write_text};
use super::{CommandContext, CommandError};

/// Delete old runs and everything they own (events, steps, tool calls, exchanges).
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Delete runs created longer ago than this (e.g. 30d, 12h, 1h30m, 90s)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub older_than: Option<Duration>,
    /// Keep only the newest N runs
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// List the runs these rules would delete, one id a line, and change nothing
    #[arg(long)]
    pub dry_run: bool,
}

pub fn cmd_gc(g: &CommandContext, args: &GcArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    if args.older_than.is_none() && args.keep.is_none() {
        return Err(CommandError::usage(
            "say what to delete: --older-than DURATION and/or --keep N",
        ));
    }
    let store = g.required_store()?;
    if args.dry_run {
        let ids = store
            .gc_preview(args.older_than, args.keep)
            .map_err(CommandError::from)?;
        let mut text: String = ids
            .iter()
            .map(|id| format!("{}\n", diag_core::text::one_line(id, usize::MAX)))
            .collect();
        text.push_str(&format!(
            "would delete {} run(s); nothing was changed (without --dry-run, runs of processes \
             that are gone are first marked FAILED and may be deleted too)\n",
            ids.len()
        ));
        return write_text(out, &text);
    }
    let report = store
        .gc(args.older_than, args.keep)
        .map_err(CommandError::from)?;
    write_text(
        out,
        &format!(
            "deleted {} run(s); database {} -> {} bytes\n",
            report.runs_deleted, report.bytes_before, report.bytes_after
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(2 * 604_800)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2d12h"), Ok(Duration::from_secs(216_000)));
        assert_eq!(
            parse_duration("1w2d3h4m5s"),
            Ok(Duration::from_secs(
                604_800 + 2 * 86_400 + 3 * 3600 + 4 * 60 + 5
            ))
        );
        // Each unit once, from the largest down; no spaces, signs or fractions.
        for bad in [
            "", "d", "10", "10y", "-1d", "1.5h", "30m1h", "1h1h", "1h 30m", "1h30", "h30m",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
