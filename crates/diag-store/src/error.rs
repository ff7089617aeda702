//! The run store's error, one type for every backend: what kind of failure it is (so the
//! command line picks an exit code and a hint without knowing the backend) and the backend's
//! own error, whose message is one line naming the store and what went wrong. The failures of
//! a record rather than of a store (an unknown run, a row already recorded, a run in the wrong
//! state, a record refused or a stored row unreadable) are [`RecordError`], written here once
//! and carried inside each backend's error.

use std::fmt;

/// What kind of failure a store error is. Every backend error maps to one; an error a
/// backend cannot place is [`StoreErrorKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// No store there (a missing file, a database without diag's schema).
    Missing,
    /// The store was written by a newer diag (its schema version is newer).
    NewerSchema,
    /// A database that is not a diag run store.
    Foreign,
    /// The store cannot be written (a read-only file, a read-only transaction, no privilege).
    ReadOnly,
    /// Another writer held the store past the busy timeout.
    Busy,
    /// The disk holding the store is full.
    Full,
    /// The store's file is damaged.
    Corrupt,
    /// The server cannot be reached.
    Unreachable,
    /// The server refused the connection (credentials, TLS).
    Refused,
    /// No run with that id.
    UnknownRun,
    /// A run or a row with that id is already stored.
    Duplicate,
    /// The run is not in the state the write needs (not RUNNING; not SUCCESS for an
    /// evaluation).
    WrongState,
    /// A record refused before it reached the store.
    Invalid,
    /// A stored row that cannot be read back.
    Decode,
    /// Anything else (the backend's own message says what).
    Other,
}

impl StoreErrorKind {
    /// What the user can do about a store error of this kind; `None` where the message says
    /// it all (a record refused, a run in the wrong state) or where nothing general helps.
    pub fn hint(self) -> Option<&'static str> {
        match self {
            StoreErrorKind::Missing => {
                Some("diag ask creates the store; check --db, DIAG_DB or [store] path")
            }
            StoreErrorKind::ReadOnly => {
                Some("make the store and its folder writable, or give another with --db")
            }
            StoreErrorKind::Busy => Some("another diag holds the store's write lock: try again"),
            StoreErrorKind::Full => Some("free space on that disk, or delete old runs with diag gc"),
            StoreErrorKind::Corrupt => Some(
                "copy the runs that still read with diag store copy, or start a new store with --db",
            ),
            StoreErrorKind::Unreachable => {
                Some("check that the server is running and the URL's host and port")
            }
            StoreErrorKind::NewerSchema
            | StoreErrorKind::Foreign
            | StoreErrorKind::Refused
            | StoreErrorKind::UnknownRun
            | StoreErrorKind::Duplicate
            | StoreErrorKind::WrongState
            | StoreErrorKind::Invalid
            | StoreErrorKind::Decode
            | StoreErrorKind::Other => None,
        }
    }
}

/// A run store error: its kind and the backend's error.
pub struct StoreError {
    kind: StoreErrorKind,
    error: Box<dyn std::error::Error + Send + Sync>,
}

impl StoreError {
    pub fn new(
        kind: StoreErrorKind,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError {
            kind,
            error: Box::new(error),
        }
    }

    /// A record refused before it reached any store.
    pub fn invalid(message: impl Into<String>) -> Self {
        RecordError::Invalid(message.into()).into()
    }

    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// True when the store is not there.
    pub fn is_missing(&self) -> bool {
        self.kind == StoreErrorKind::Missing
    }

    /// The backend's own error, when it is a `T`.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.error.downcast_ref::<T>()
    }
}

impl fmt::Debug for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {:?}", self.kind, self.error)
    }
}

/// The backend's one line.
impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// A failure of a record, the same on every backend and with the same message: each backend's
/// error carries it whole (`#[error(transparent)]`), so a refusal reads alike on SQLite and
/// PostgreSQL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("unknown run {0}")]
    UnknownRun(String),
    #[error("run {0} already exists")]
    DuplicateRun(String),
    #[error("{what} {key} of run {run_id} is already recorded")]
    Duplicate {
        what: &'static str,
        run_id: String,
        key: String,
    },
    #[error("run {run_id} is {status}, not RUNNING; it cannot be finished again")]
    NotRunning { run_id: String, status: String },
    #[error("run {run_id} is {status}; only a SUCCESS run is evaluated")]
    NotEvaluable { run_id: String, status: String },
    /// A write that needs a claim this process holds on a queued alert notification
    /// (`alerts.rs`): `state` is where the notification stands (`unknown` when there is none).
    #[error("alert notification {id} is {state}, not claimed by this process")]
    NotClaimed { id: i64, state: String },
    /// A record refused before it reached the store.
    #[error("invalid record: {0}")]
    Invalid(String),
    /// A stored row that cannot be read back.
    #[error("stored {what} cannot be read back: {detail}")]
    Decode { what: &'static str, detail: String },
}

impl RecordError {
    /// What kind of store failure this is.
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            RecordError::UnknownRun(_) => StoreErrorKind::UnknownRun,
            RecordError::DuplicateRun(_) | RecordError::Duplicate { .. } => {
                StoreErrorKind::Duplicate
            }
            RecordError::NotRunning { .. }
            | RecordError::NotEvaluable { .. }
            | RecordError::NotClaimed { .. } => StoreErrorKind::WrongState,
            RecordError::Invalid(_) => StoreErrorKind::Invalid,
            RecordError::Decode { .. } => StoreErrorKind::Decode,
        }
    }

    /// A stored `what` that cannot be read back, and why.
    pub fn decode(what: &'static str, detail: impl ToString) -> Self {
        RecordError::Decode {
            what,
            detail: detail.to_string(),
        }
    }
}

/// A record's failure met before any backend (the recorder's, the port's rules).
impl From<RecordError> for StoreError {
    fn from(e: RecordError) -> Self {
        StoreError::new(e.kind(), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_error_keeps_its_message_and_has_its_kind() {
        let run = || "r".to_string();
        let cases = [
            (
                RecordError::UnknownRun(run()),
                StoreErrorKind::UnknownRun,
                "unknown run r",
            ),
            (
                RecordError::DuplicateRun(run()),
                StoreErrorKind::Duplicate,
                "run r already exists",
            ),
            (
                RecordError::Duplicate {
                    what: "event",
                    run_id: run(),
                    key: "3".into(),
                },
                StoreErrorKind::Duplicate,
                "event 3 of run r is already recorded",
            ),
            (
                RecordError::NotRunning {
                    run_id: run(),
                    status: "FAILED".into(),
                },
                StoreErrorKind::WrongState,
                "run r is FAILED, not RUNNING; it cannot be finished again",
            ),
            (
                RecordError::NotEvaluable {
                    run_id: run(),
                    status: "FAILED".into(),
                },
                StoreErrorKind::WrongState,
                "run r is FAILED; only a SUCCESS run is evaluated",
            ),
            (
                RecordError::NotClaimed {
                    id: 7,
                    state: "done".into(),
                },
                StoreErrorKind::WrongState,
                "alert notification 7 is done, not claimed by this process",
            ),
            (
                RecordError::Invalid("no".into()),
                StoreErrorKind::Invalid,
                "invalid record: no",
            ),
            (
                RecordError::decode("run path", "not JSON"),
                StoreErrorKind::Decode,
                "stored run path cannot be read back: not JSON",
            ),
        ];
        for (record, kind, message) in cases {
            assert_eq!(record.kind(), kind, "{message}");
            let store = StoreError::from(record.clone());
            assert_eq!(
                (store.kind(), store.to_string()),
                (kind, message.to_string())
            );
            assert_eq!(store.downcast_ref::<RecordError>(), Some(&record));
        }
        let invalid = StoreError::invalid("no answer");
        assert_eq!(invalid.kind(), StoreErrorKind::Invalid);
        assert_eq!(invalid.to_string(), "invalid record: no answer");
    }
}
