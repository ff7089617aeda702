//! Store errors. Each reads as one line naming the store (`user@host:port/database`, never a
//! password) and what went wrong; the server's own codes are mapped to the cases an operator
//! can act on (unreachable server, refused credentials, missing database, not a diag store,
//! newer schema), and a failed TLS handshake to what is wrong with the certificate (untrusted,
//! for another host, expired) or with `PGSSLROOTCERT`.

use diag_store::{FinishError, RecordError, StoreError, StoreErrorKind};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum PgError {
    #[error("the run store URL is not a PostgreSQL URL diag can use: {0}")]
    Url(String),
    #[error("cannot reach the PostgreSQL run store at {target}: {detail}")]
    Unreachable { target: String, detail: String },
    #[error(
        "the PostgreSQL server at {target} refused the credentials of user {user}: {detail} \
         (diag takes the password from PGPASSWORD, the variable `[store] password_env` names, or \
         ~/.pgpass)"
    )]
    Credentials {
        target: String,
        user: String,
        detail: String,
    },
    #[error("cannot connect to the PostgreSQL run store at {target} over TLS: {detail}")]
    Tls { target: String, detail: String },
    #[error(
        "the PostgreSQL server at {target} accepts user {user} over TLS only: {detail} (drop \
         sslmode=disable from the URL)"
    )]
    TlsRequired {
        target: String,
        user: String,
        detail: String,
    },
    #[error("cannot use the CA certificates of PGSSLROOTCERT: {0}")]
    RootCert(String),
    #[error("no run store at {target}: {detail}")]
    Missing { target: String, detail: String },
    #[error(
        "the run store {target} has schema version {found}, newer than the {supported} this diag \
         knows; use a newer diag (the database was left untouched)"
    )]
    NewerSchema {
        target: String,
        found: u32,
        supported: u32,
    },
    #[error(
        "{target} is a PostgreSQL database but not a diag run store (it has tables of its own)"
    )]
    ForeignDatabase { target: String },
    #[error("cannot {op}: the PostgreSQL run store at {target} refused the write ({detail})")]
    ReadOnly {
        target: String,
        op: &'static str,
        detail: String,
    },
    #[error("cannot {op} in the PostgreSQL run store at {target}: {detail}")]
    Postgres {
        target: String,
        op: &'static str,
        detail: String,
    },
    /// A failure of the record rather than of the store, the same on every backend.
    #[error(transparent)]
    Record(#[from] RecordError),
}

impl PgError {
    /// What kind of store failure this is, for the command line (exit code, hint).
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            // A URL diag cannot use never reached a server: nothing refused it.
            PgError::Url(_) => StoreErrorKind::Other,
            PgError::Credentials { .. }
            | PgError::Tls { .. }
            | PgError::TlsRequired { .. }
            | PgError::RootCert(_) => StoreErrorKind::Refused,
            PgError::Unreachable { .. } => StoreErrorKind::Unreachable,
            PgError::Missing { .. } => StoreErrorKind::Missing,
            PgError::NewerSchema { .. } => StoreErrorKind::NewerSchema,
            PgError::ForeignDatabase { .. } => StoreErrorKind::Foreign,
            PgError::ReadOnly { .. } => StoreErrorKind::ReadOnly,
            PgError::Postgres { .. } => StoreErrorKind::Other,
            PgError::Record(r) => r.kind(),
        }
    }
}

/// The port's error: this store's kind of failure, with this error inside (its message is
/// the store error's; `StoreError::downcast_ref::<PgError>` gets it back).
impl From<PgError> for StoreError {
    fn from(e: PgError) -> Self {
        StoreError::new(e.kind(), e)
    }
}

/// A failure of the finishing transaction itself: the run's error.
impl From<PgError> for FinishError {
    fn from(e: PgError) -> Self {
        FinishError::Run(e.into())
    }
}

/// SQLSTATE codes diag tells apart.
pub(crate) mod code {
    pub const UNIQUE_VIOLATION: &str = "23505";
    pub const INVALID_PASSWORD: &str = "28P01";
    pub const INVALID_AUTHORIZATION: &str = "28000";
    pub const INVALID_CATALOG_NAME: &str = "3D000";
    pub const READ_ONLY_TRANSACTION: &str = "25006";
    pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
}

impl PgError {
    /// A driver error during `op`, as one line: the server's message when it sent one, the
    /// driver's otherwise (neither carries the password).
    pub(crate) fn postgres(target: &str, op: &'static str, e: &tokio_postgres::Error) -> Self {
        let target = target.to_string();
        match e.as_db_error() {
            Some(db) => {
                let detail = db.message().to_string();
                match db.code().code() {
                    code::READ_ONLY_TRANSACTION | code::INSUFFICIENT_PRIVILEGE => {
                        PgError::ReadOnly { target, op, detail }
                    }
                    _ => PgError::Postgres { target, op, detail },
                }
            }
            None => PgError::Postgres {
                target,
                op,
                detail: one_line(&e.to_string()),
            },
        }
    }

    pub(crate) fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
        e.as_db_error()
            .is_some_and(|db| db.code().code() == code::UNIQUE_VIOLATION)
    }
}

/// The first line of a message, trimmed (driver errors may chain causes over lines).
pub(crate) fn one_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().trim().to_string()
}
