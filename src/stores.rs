//! Which run store a location names: a path is a SQLite file (the embedded default,
//! `diag-store-sqlite`), a `postgres://` or `postgresql://` URL is a PostgreSQL database
//! (`diag-store-postgres`). Opening returns the port's one handle, [`Store`]; everything
//! after that is the same whichever backend it is.

use std::path::Path;
use std::sync::Arc;

use diag_core::clock::Clock;
use diag_core::store::{Store, StoreError};
use diag_store_postgres::{PgOptions, PgStore};
use diag_store_sqlite::{SqliteStore, StoreOptions};

/// Options a command opens its store with; the rest is each backend's default.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// `[store] password_env`: the variable holding a PostgreSQL password.
    pub password_env: Option<String>,
}

/// The PostgreSQL URL `location` is, if it is one.
fn postgres_url(location: &Path) -> Option<&str> {
    location
        .to_str()
        .filter(|l| diag_store_postgres::is_postgres_url(l))
}

/// True when `location` names a PostgreSQL database.
pub fn is_postgres(location: &Path) -> bool {
    postgres_url(location).is_some()
}

fn pg_options(options: &OpenOptions) -> PgOptions {
    PgOptions {
        password_env: options.password_env.clone(),
        ..PgOptions::default()
    }
}

/// Opens (creating if needed) the store at `location`.
pub fn open(location: &Path, options: &OpenOptions) -> Result<Store, StoreError> {
    Ok(match postgres_url(location) {
        Some(url) => Store::new(PgStore::open(url, pg_options(options))?),
        None => Store::new(SqliteStore::open(location)?),
    })
}

/// [`open`] with the store's own timestamps (a sweep's `finished_at`, an evaluation's
/// `created_at`, the gc cutoff, a lease's expiry) taken from `clock`: how a test puts either
/// backend at a moment of its choosing.
pub fn open_with_clock(
    location: &Path,
    options: &OpenOptions,
    clock: Arc<dyn Clock>,
) -> Result<Store, StoreError> {
    Ok(match postgres_url(location) {
        Some(url) => Store::new(PgStore::open(
            url,
            PgOptions {
                clock,
                ..pg_options(options)
            },
        )?),
        None => Store::new(SqliteStore::open_with(
            location,
            StoreOptions {
                clock,
                ..StoreOptions::default()
            },
        )?),
    })
}

/// Opens the store at `location` only if it is there: creates nothing.
pub fn open_existing(location: &Path, options: &OpenOptions) -> Result<Store, StoreError> {
    Ok(match postgres_url(location) {
        Some(url) => Store::new(PgStore::open_existing(url, pg_options(options))?),
        None => Store::new(SqliteStore::open_existing(
            location,
            StoreOptions::default(),
        )?),
    })
}
