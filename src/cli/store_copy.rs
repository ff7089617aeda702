//! `diag store copy --from A --to B`: copies the finished runs of one run store into another
//! (SQLite to PostgreSQL and back, or between two of a kind). Each run goes through the run
//! store port's records, read whole from A and written in one transaction into B, so the copy
//! exports byte for byte as the original. Idempotent and resumable: a run already in B is
//! left as it is, so a copy that was interrupted is finished by running it again. RUNNING
//! runs are not copied (they are not final); they are counted. A run's alert group
//! (`run_alert`) goes with it, and then the queue of `diag serve` (`alert_queue`): each
//! notification once per identity, in its state, with the runs it names as far as they were
//! copied; a claimed one is not copied (its claim belongs to a process on the source), and
//! is counted.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::common::write_text;
use super::{CommandContext, CommandError};
use diag_core::store::{QueueState, RunFilter, RunStatus};

/// Work on whole run stores.
#[derive(Debug, Args)]
pub struct StoreArgs {
    #[command(subcommand)]
    pub command: StoreCommand,
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy the finished runs of one store into another (idempotent, resumable)
    Copy(CopyArgs),
}

#[derive(Debug, Args)]
pub struct CopyArgs {
    /// The store to copy from (a SQLite file or a postgres:// URL); it must exist and is only
    /// read
    #[arg(long, value_name = "PATH|URL")]
    pub from: PathBuf,
    /// The store to copy into (created if it is a new SQLite file or an empty database)
    #[arg(long, value_name = "PATH|URL")]
    pub to: PathBuf,
}

pub fn cmd_store(
    g: &CommandContext,
    args: &StoreArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    match &args.command {
        StoreCommand::Copy(copy) => cmd_copy(g, copy, out),
    }
}

fn cmd_copy(g: &CommandContext, args: &CopyArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    for (flag, location) in [("--from", &args.from), ("--to", &args.to)] {
        if let Some(scheme) = diag_ask::config::url_scheme(location) {
            if !crate::stores::is_postgres(location) {
                return Err(CommandError::usage(format!(
                    "{flag} is a {scheme}:// URL; diag stores runs in a SQLite file or a \
                     PostgreSQL database"
                )));
            }
        }
    }
    if args.from == args.to {
        return Err(CommandError::usage("--from and --to name the same store"));
    }
    let options = g.open_options()?;
    let from = crate::stores::open_existing(&args.from, &options)?;
    let to = crate::stores::open(&args.to, &options)?;
    let mut ids: Vec<(String, RunStatus)> = from
        .list_runs(&RunFilter::default())?
        .into_iter()
        .map(|r| (r.run_id, r.status))
        .collect();
    // Oldest first, so the copy lists its runs in the original's order.
    ids.reverse();
    let (mut copied, mut present, mut running) = (0u64, 0u64, 0u64);
    for (run_id, status) in ids {
        if status == RunStatus::Running {
            running += 1;
            continue;
        }
        if to.get_run(&run_id)?.is_some() {
            present += 1;
        } else {
            let Some(whole) = from.read_whole(&run_id)? else {
                // Deleted from the source meanwhile (gc): nothing to copy.
                continue;
            };
            if to.import_run(&whole)? {
                copied += 1;
            } else {
                present += 1;
            }
        }
        // The alert group the run investigated goes with it (also for a run an interrupted
        // copy left without it).
        if let Some(alerts) = from.run_alerts(&run_id)? {
            to.import_run_alerts(&run_id, &alerts)?;
        }
    }
    // Then the queue of `diag serve`, after the runs its notifications name.
    let (mut queued, mut queue_present, mut claimed) = (0u64, 0u64, 0u64);
    for entry in from.queue_entries()? {
        if entry.state == QueueState::Claimed {
            claimed += 1;
        } else if to.import_notification(&entry)? {
            queued += 1;
        } else {
            queue_present += 1;
        }
    }
    write_text(
        out,
        &format!(
            "copied {copied} run(s) from {} to {}; {present} already there; {running} RUNNING not copied\n\
             copied {queued} alert notification(s); {queue_present} already there; {claimed} claimed not copied\n",
            from.describe(),
            to.describe()
        ),
    )
}
