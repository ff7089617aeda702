//! The values the store takes and hands back: the run store port's plain records
//! (`diag_store::records`: a new run, the summary that finishes it, the stored run row,
//! the stored forms of steps and exchanges, list filters), and the gc report of this store.

use serde::Serialize;

pub use diag_store::records::*;

/// What `gc` did, with what only this store knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SqliteGcReport {
    pub runs_deleted: u64,
    /// Database plus WAL file size before and after.
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// False when a reader kept the final checkpoint from completing; the WAL is then
    /// truncated by a later checkpoint.
    pub checkpoint_complete: bool,
}
