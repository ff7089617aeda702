//! Store errors. Each one reads as a single line that names the database file and what went
//! wrong, so the command line can print it as is; SQLite's own codes are mapped to the few
//! cases an operator can act on (read-only file, busy lock, full disk, corrupt file).

use std::path::{Path, PathBuf};

use diag_store::{FinishError, RecordError, StoreError, StoreErrorKind};
use rusqlite::ffi;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SqliteError {
    #[error("cannot create the folder {} for the run store: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// No file there, or (`empty`) an empty one, which a reading command leaves empty.
    #[error(
        "no run store at {}{}",
        .path.display(),
        if *.empty { " (the file is empty)" } else { "" }
    )]
    Missing { path: PathBuf, empty: bool },
    #[error("cannot open the run store {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error(
        "the run store {} has schema version {found}, newer than the {supported} this diag \
         knows; use a newer diag (the file was left untouched)",
        path.display()
    )]
    NewerSchema {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("{} is an SQLite database but not a diag run store (it has tables of its own)", path.display())]
    ForeignDatabase { path: PathBuf },
    /// A path that holds no database at all: a folder, or a file that does not start as
    /// every SQLite database does. Left untouched.
    #[error(
        "{} is not a diag run store ({what}): give the path of a run store, or a new file name \
         for one",
        path.display()
    )]
    NotAStore { path: PathBuf, what: &'static str },
    #[error(
        "the run store {} is read-only and needs schema version {supported} (it has {found})",
        path.display()
    )]
    ReadOnlyNeedsMigration {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("migration to schema version {version} of {} failed: {source}", path.display())]
    Migration {
        path: PathBuf,
        version: u32,
        source: rusqlite::Error,
    },
    #[error("cannot {op}: the run store {} is read-only", path.display())]
    ReadOnly { path: PathBuf, op: &'static str },
    #[error(
        "cannot {op}: the run store {} stayed locked by another writer past the busy timeout",
        path.display()
    )]
    Busy { path: PathBuf, op: &'static str },
    #[error("cannot {op}: the disk holding the run store {} is full", path.display())]
    DiskFull { path: PathBuf, op: &'static str },
    #[error("cannot {op}: the run store {} is corrupt: {detail}", path.display())]
    Corrupt {
        path: PathBuf,
        op: &'static str,
        detail: String,
    },
    #[error("cannot {op} in the run store {}: {source}", path.display())]
    Sqlite {
        path: PathBuf,
        op: &'static str,
        source: rusqlite::Error,
    },
    /// A failure of the record rather than of the store, the same on every backend.
    #[error(transparent)]
    Record(#[from] RecordError),
}

impl SqliteError {
    /// Maps an SQLite failure during `op` on the store at `path` to the case an operator can
    /// act on; everything else keeps SQLite's own message.
    pub(crate) fn sqlite(path: &Path, op: &'static str, e: rusqlite::Error) -> Self {
        let path = path.to_path_buf();
        match e.sqlite_error_code() {
            Some(ffi::ErrorCode::ReadOnly) => SqliteError::ReadOnly { path, op },
            Some(ffi::ErrorCode::DatabaseBusy) | Some(ffi::ErrorCode::DatabaseLocked) => {
                SqliteError::Busy { path, op }
            }
            Some(ffi::ErrorCode::DiskFull) => SqliteError::DiskFull { path, op },
            Some(ffi::ErrorCode::DatabaseCorrupt) | Some(ffi::ErrorCode::NotADatabase) => {
                SqliteError::Corrupt {
                    path,
                    op,
                    detail: e.to_string(),
                }
            }
            _ => SqliteError::Sqlite {
                path,
                op,
                source: e,
            },
        }
    }

    /// True when SQLite refused a write because a constraint failed with this extended code.
    pub(crate) fn is_constraint(e: &rusqlite::Error, extended: i32) -> bool {
        e.sqlite_error().is_some_and(|f| {
            f.code == ffi::ErrorCode::ConstraintViolation && f.extended_code == extended
        })
    }
}

/// The port's error: each case as the kind an operator acts on.
impl From<SqliteError> for StoreError {
    fn from(e: SqliteError) -> Self {
        use StoreErrorKind as K;
        let kind = match &e {
            SqliteError::Missing { .. } => K::Missing,
            SqliteError::NewerSchema { .. } => K::NewerSchema,
            SqliteError::ForeignDatabase { .. } | SqliteError::NotAStore { .. } => K::Foreign,
            SqliteError::ReadOnly { .. } | SqliteError::ReadOnlyNeedsMigration { .. } => {
                K::ReadOnly
            }
            SqliteError::Busy { .. } => K::Busy,
            SqliteError::DiskFull { .. } => K::Full,
            SqliteError::Corrupt { .. } => K::Corrupt,
            SqliteError::Record(r) => r.kind(),
            SqliteError::CreateDir { .. }
            | SqliteError::Open { .. }
            | SqliteError::Migration { .. }
            | SqliteError::Sqlite { .. } => K::Other,
        };
        StoreError::new(kind, e)
    }
}

/// A failure of the finishing transaction itself: the run's error.
impl From<SqliteError> for FinishError {
    fn from(e: SqliteError) -> Self {
        FinishError::Run(e.into())
    }
}
