//! The run store's error, one type for every backend: what kind of failure it is (so the
//! command line picks an exit code and a hint without knowing the backend) and the backend's
//! own error, whose message is one line naming the store and what went wrong.

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
        StoreError::new(StoreErrorKind::Invalid, Invalid(message.into()))
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

/// A record refused before it reached the store.
#[derive(Debug, thiserror::Error)]
#[error("invalid record: {0}")]
pub struct Invalid(pub String);
