//! What several subcommands share: opening the store, the async runtime, JSON output.

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::{io_error, CommandError, Exit, GlobalArgs};
use crate::store::{Store, StoreError};

/// The database path: `--db`, else a non-empty `DIAG_DB`, else the user's data directory.
pub fn db_path(g: &GlobalArgs) -> Result<PathBuf, CommandError> {
    g.db.clone().or_else(Store::path_from_env).ok_or_else(|| {
        CommandError::usage("no database path: set --db PATH or DIAG_DB (HOME is not set)")
    })
}

pub fn open_store(g: &GlobalArgs) -> Result<Store, CommandError> {
    let path = db_path(g)?;
    Store::open(&path).map_err(store_error)
}

/// Store errors are about the user's file (unwritable, full, foreign, too new): input errors.
pub fn store_error(e: StoreError) -> CommandError {
    CommandError::usage(e.to_string())
}

/// A small multi-threaded runtime: model calls, tool calls and replays run concurrently.
pub fn runtime() -> Result<tokio::runtime::Runtime, CommandError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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
