//! What several subcommands share: store errors, the async runtime, JSON output, durations
//! as arguments (read and written as the configuration's, `diag_ask::config`).

use std::io::Write;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::{io_error, CommandError, Exit};
pub use diag_ask::config::{format_duration, parse_duration};
use diag_core::store::{StoreError, StoreErrorKind};

/// Store errors, of either backend, are about the user's store: input errors (exit 2), each
/// kind with what the user can do about it (openspec/specs/command-line/spec.md, "Store
/// errors").
impl From<StoreError> for CommandError {
    fn from(e: StoreError) -> Self {
        let hint = e.kind().hint();
        let exit = match e.kind() {
            StoreErrorKind::Busy | StoreErrorKind::Unreachable => Exit::StoreUnavailable,
            _ => Exit::Usage,
        };
        let mut error = CommandError::usage_from(e);
        error.exit = exit;
        match hint {
            Some(h) => error.hint(h),
            None => error,
        }
    }
}

/// A stored run that cannot be exported as a run file.
impl From<diag_runfile::export::ExportError> for CommandError {
    fn from(e: diag_runfile::export::ExportError) -> Self {
        use diag_runfile::export::ExportError;
        match e {
            ExportError::Store(e) => e.into(),
            ExportError::UnknownRun(run_id) => CommandError::unknown_run(&run_id),
            other => CommandError::usage(other.to_string()),
        }
    }
}

/// The ask service's errors, as every command that runs a question reports them.
impl From<diag_ask::AskError> for CommandError {
    fn from(e: diag_ask::AskError) -> Self {
        match e {
            diag_ask::AskError::EmptyQuestion => CommandError::usage("the question is empty"),
            diag_ask::AskError::Store(e) => e.into(),
        }
    }
}

/// A small multi-threaded runtime: model calls, tool calls and replays run concurrently.
pub fn runtime() -> Result<tokio::runtime::Runtime, CommandError> {
    runtime_with_workers(2)
}

/// A multi-threaded runtime with `workers` worker threads (at least one).
pub fn runtime_with_workers(workers: usize) -> Result<tokio::runtime::Runtime, CommandError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .enable_all()
        .build()
        .map_err(|e| CommandError::new(Exit::Internal, format!("cannot start the runtime: {e}")))
}

/// Writes a JSON document and a newline.
pub fn write_json<T: Serialize>(out: &mut dyn Write, value: &T) -> Result<(), CommandError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CommandError::new(Exit::Internal, format!("cannot encode JSON: {e}")))?;
    out.write_all(text.as_bytes()).map_err(io_error)?;
    out.write_all(b"\n").map_err(io_error)
}

pub fn write_text(out: &mut dyn Write, text: &str) -> Result<(), CommandError> {
    out.write_all(text.as_bytes()).map_err(io_error)
}

/// Cancels `cancel` on Ctrl-C (SIGINT). Commands register it before their first run is
/// created: `tokio::signal::ctrl_c()` registers only when first polled, and a SIGINT that came
/// before that would kill the process with the run left RUNNING.
pub fn interrupt_handler(
    cancel: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, CommandError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut sigint = signal(SignalKind::interrupt())
            .map_err(|e| CommandError::new(Exit::Internal, format!("cannot handle Ctrl-C: {e}")))?;
        Ok(tokio::spawn(async move {
            if sigint.recv().await.is_some() {
                cancel.cancel();
            }
        }))
    }
    #[cfg(not(unix))]
    {
        Ok(tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.cancel();
            }
        }))
    }
}

/// A duration on the command line: read by [`parse_duration`], shown (as a clap default) by
/// [`format_duration`], so a default is written once, as a `Duration` constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationArg(pub Duration);

impl std::fmt::Display for DurationArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

/// clap's value parser of a [`DurationArg`].
pub fn parse_duration_arg(s: &str) -> Result<DurationArg, String> {
    parse_duration(s).map(DurationArg)
}
