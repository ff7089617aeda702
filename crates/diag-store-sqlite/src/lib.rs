//! `diag-store-sqlite`: the run store: every diagnosis run and its whole trace in one SQLite
//! file, written as the run happens, readable afterwards (`diag trace`, `diag runs`,
//! `diag export`). It implements diag-core's run store port ([`diag_store::RunReader`]
//! in `read.rs`, [`diag_store::RunWriter`] in `write.rs`,
//! [`diag_store::RunMaintenance`] in `gc.rs`): the SQL and the connection handling; the
//! rules that hold for every backend are the port's.
//!
//! **Architecture invariant:** this crate depends on `diag-core` (contracts, agent runtime
//! records, ports), never on `diag-diagnosis`: the store persists the plain records of
//! `diag_store::records` and cannot name the diagnosis graph's state (a `use` of it does
//! not compile). rusqlite is a dependency of this crate only.
//!
//! # Guarantees
//!
//! - **As it happens.** Each model call (its agent step and exchange together) and each tool
//!   invocation is committed in its own transaction the moment it is reported.
//!   Orchestration events are held while deterministic nodes run and committed before the
//!   next agent node waits on a model (the recorder both stores share,
//!   `diag_store::recorder`), so a killed process leaves its
//!   partial trace behind.
//! - **Crash and interruption.** WAL mode with `synchronous = NORMAL`: a killed process
//!   loses nothing it committed (a power cut may lose the last transactions, never
//!   consistency). Checkpoints, the only fsyncs, run on a background thread
//!   (`checkpoint.rs`), so no commit waits for the disk. A run left RUNNING by a process that no longer exists is marked FAILED
//!   with failure `interrupted` the next time any process opens the store; runs of live
//!   processes are left alone (`diag-owner` decides liveness).
//! - **Concurrent writers.** Several processes may write one file. Every write is a
//!   `BEGIN IMMEDIATE` transaction, so writers queue on the busy timeout (5 s by default)
//!   instead of failing on a lock upgrade; readers never block writers.
//! - **Failures are values.** Every write returns [`SqliteError`]; nothing here panics on
//!   I/O. The recorder's hooks (`diag_store::Recorder`) cannot return errors, so they keep the first one
//!   for the caller to collect.
//! - **No secrets.** The store writes only what the caller hands it; no record type carries
//!   an API key or an authorization header, and the store adds no environment, config or
//!   header data of its own.
//! - **Bounded size.** [`SqliteStore::gc`] deletes old runs with everything they own (foreign keys
//!   `ON DELETE CASCADE`), then runs an incremental vacuum and a truncating checkpoint.
//!
//! # Schema (version [`SCHEMA_VERSION`], `PRAGMA user_version`)
//!
//! | table | key | one row per |
//! | --- | --- | --- |
//! | `diagnosis_run` | `run_id` | run: lifecycle, answer, counts, verdict, self-evaluation, owner pid |
//! | `orchestration_event` | `(run_id, seq)` | node attempt |
//! | `agent_step` | `(run_id, seq)` | model call: agent, round, attempt, turn, status, tokens, prompt audit |
//! | `model_exchange` | `(run_id, seq)` | model call: canonical request JSON, its sha256, response or error JSON |
//! | `tool_invocation` | `(run_id, invocation_id)` | tool call, `seq` keeps recording order |
//! | `evaluation` | `run_id` | evaluated (SUCCESS) run |
//! | `tool_catalog` | `sha256` | distinct tool catalog, shared by the runs that offered it |
//! | `endpoint_learning` | `(base_url, model)` | model endpoint: what it taught |
//! | `run_endpoint` | `(run_id, base_url, model)` | endpoint a run's models used, as remembered when it started |
//! | `run_alert` | `run_id` | run that investigated an alert group |
//! | `alert_queue` | `id` (`identity` unique) | notification delivered to `diag serve` |
//!
//! `docs/SCHEMA.md` documents every column and has sqlite3 queries for common questions.

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod alerts;
mod blobs;
mod checkpoint;
mod driver;
mod error;
mod gc;
mod heartbeat;
mod import;
mod learnings;
mod packed;
mod read;
mod records;
mod schema;
mod write;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use diag_store::backend::Held;
use diag_store::{RecordError, RunWriter};

pub use error::SqliteError;
pub use records::SqliteGcReport;
pub use schema::SCHEMA_VERSION;

use diag_graph::clock::{Clock, SystemClock};

/// The environment variable that overrides [`SqliteStore::default_path`] (the CLI's `--db` wins
/// over both).
pub const DB_ENV: &str = diag_records::env_vars::EnvVars::DIAG_DB;

/// How a store is opened.
#[derive(Clone)]
pub struct StoreOptions {
    /// How long a write waits for another writer's lock before it fails as busy.
    pub busy_timeout: Duration,
    /// Where the store's own timestamps come from (a sweep's `finished_at`, an evaluation's
    /// `created_at`, the gc cutoff, a lease's expiry).
    pub clock: Arc<dyn Clock>,
    /// How long the lease of a run this process creates lasts (`diag-owner`); renewed every
    /// third of it while the handle lives.
    pub lease: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            busy_timeout: Duration::from_secs(5),
            clock: Arc::new(SystemClock::new()),
            lease: diag_owner::lease_duration(),
        }
    }
}

/// A handle on one store file. Cheap to clone; clones share one connection, so writes of one
/// process are serialized here and only different processes contend for SQLite's lock.
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

struct Shared {
    // Declared first so it stops (and closes its connection) before the writer's connection
    // closes and, as the last one, checkpoints the WAL away.
    checkpointer: Option<checkpoint::Checkpointer>,
    conn: Mutex<Connection>,
    path: PathBuf,
    read_only: bool,
    clock: Arc<dyn Clock>,
    /// Orchestration events reported through a run's recorder and not yet committed, per
    /// run (see `diag_store::recorder`). Every finish of a run commits its held events with it.
    held: Held<write::EventRow>,
    /// The leases of this handle's runs and alert claims, and their heartbeat, started with its
    /// first run or claim.
    leases: diag_owner::Leases,
}

/// The first bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Why `path` holds no database at all, when it surely does not: a folder, or a non-empty
/// regular file that does not start with [`SQLITE_HEADER`] (a text file given as `--db`).
/// `None` for everything else (nothing there, an empty file SQLite makes a database of, a file
/// that cannot be read, which SQLite then reports), so a real but damaged database is still
/// called corrupt.
fn not_a_database(path: &Path) -> Option<&'static str> {
    use std::io::Read;
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_dir() {
        return Some("it is a folder");
    }
    if !meta.is_file() || meta.len() == 0 {
        return None;
    }
    let mut head = [0u8; 16];
    let mut file = std::fs::File::open(path).ok()?;
    let read = file.read(&mut head).ok()?;
    (read < head.len() || &head != SQLITE_HEADER).then_some("it is not an SQLite database")
}

impl SqliteStore {
    /// `$XDG_DATA_HOME/diag/diag.db`, else `$HOME/.local/share/diag/diag.db`; `None` when
    /// neither variable gives an absolute path. The XDG rule is applied on every platform so
    /// the location is the same wherever `diag` runs and is documented in one sentence.
    pub fn default_path() -> Option<PathBuf> {
        default_path_from(
            std::env::var_os(diag_records::env_vars::EnvVars::XDG_DATA_HOME),
            std::env::var_os(diag_records::env_vars::EnvVars::HOME),
        )
    }

    /// Opens (creating if needed) the store at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, SqliteError> {
        SqliteStore::open_with(path, StoreOptions::default())
    }

    /// Opens the store: creates the parent folders, sets WAL mode, `synchronous = NORMAL`,
    /// foreign keys and the busy timeout, migrates the schema, then marks the runs of dead
    /// processes FAILED (`interrupted`).
    ///
    /// A file without any write permission bit is opened read-only, even by root: reads
    /// work, every write fails with [`SqliteError::ReadOnly`].
    pub fn open_with(
        path: impl AsRef<Path>,
        options: StoreOptions,
    ) -> Result<SqliteStore, SqliteError> {
        SqliteStore::open_mode(path.as_ref(), options, true)
    }

    /// Opens the store at `path` only if the file is already there: creates no folder and no
    /// file, and fails with [`SqliteError::Missing`] otherwise. Read-only commands (`trace`,
    /// `runs`, `export`, `gc`) open the store this way, so a mistyped path never leaves an
    /// empty database behind. An existing file is opened exactly as [`SqliteStore::open_with`]
    /// opens it.
    pub fn open_existing(
        path: impl AsRef<Path>,
        options: StoreOptions,
    ) -> Result<SqliteStore, SqliteError> {
        SqliteStore::open_mode(path.as_ref(), options, false)
    }

    fn open_mode(
        path: &Path,
        options: StoreOptions,
        create: bool,
    ) -> Result<SqliteStore, SqliteError> {
        let path = path.to_path_buf();
        let missing = |path: &Path, empty: bool| SqliteError::Missing {
            path: path.to_path_buf(),
            empty,
        };
        if !create && std::fs::symlink_metadata(&path).is_err() {
            return Err(missing(&path, false));
        }
        // An empty file holds no store yet: a command that only reads leaves it empty (SQLite
        // would write its schema into it); one that stores runs makes it a store.
        if !create && std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == 0) {
            return Err(missing(&path, true));
        }
        if let Some(what) = not_a_database(&path) {
            return Err(SqliteError::NotAStore { path, what });
        }
        if let Some(parent) = path
            .parent()
            .filter(|p| create && !p.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent).map_err(|source| SqliteError::CreateDir {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let write_protected = std::fs::metadata(&path)
            .map(|m| m.permissions().readonly())
            .unwrap_or(false);
        let flags = if write_protected {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else if create {
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let open_err = |source| SqliteError::Open {
            path: path.clone(),
            source,
        };
        let mut conn = Connection::open_with_flags(&path, flags).map_err(|e| {
            // Removed between the check above and the open: still "missing", never created.
            if !create && std::fs::symlink_metadata(&path).is_err() {
                missing(&path, false)
            } else {
                open_err(e)
            }
        })?;
        conn.busy_timeout(options.busy_timeout).map_err(open_err)?;
        // SQLite falls back to read-only by itself when the OS refuses write access.
        let read_only = write_protected || conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(true);
        // The statements of the write path are few and hot; keep them all prepared.
        conn.set_prepared_statement_cache_capacity(64);
        if !read_only {
            schema::refuse_foreign(&conn, &path)?;
        }
        configure(&conn, &path, read_only)?;
        if read_only {
            schema::check_read_only(&conn, &path)?;
        } else {
            schema::migrate(&mut conn, &path)?;
        }
        let checkpointer = if read_only {
            None
        } else {
            checkpoint::Checkpointer::start(&path)
        };
        let store = SqliteStore {
            shared: Arc::new(Shared {
                checkpointer,
                conn: Mutex::new(conn),
                path,
                read_only,
                clock: options.clock,
                held: Held::default(),
                leases: diag_owner::Leases::new(options.lease),
            }),
        };
        tracing::debug!(path = %store.shared.path.display(), read_only, "run store opened");
        if !read_only {
            match store.sweep_interrupted() {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    runs = n,
                    "runs of dead processes marked FAILED (interrupted)"
                ),
                // The sweep is housekeeping: when it cannot write (another writer held the
                // lock past the timeout, the disk is full) the runs stay RUNNING until a later
                // open sweeps them, and this store still opens, so that `trace` can read and
                // `gc` can free space. A write that matters fails on its own, with its error.
                Err(e) => tracing::warn!(error = %e, "interrupted runs not swept this time"),
            }
        }
        Ok(store)
    }

    /// Creates the store file at `path` with the schema of version `version` only (the first
    /// `version` migrations), as a diag of that version would have. For tests of the
    /// migrations that build a store of an older schema; the application never calls it.
    #[doc(hidden)]
    pub fn create_at_schema_version(path: &Path, version: u32) -> Result<(), SqliteError> {
        let upto = usize::try_from(version)
            .ok()
            .filter(|v| *v <= schema::MIGRATIONS.len())
            .ok_or_else(|| RecordError::Invalid(format!("no schema version {version}")))?;
        let mut conn = Connection::open(path).map_err(|source| SqliteError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        schema::refuse_foreign(&conn, path)?;
        configure(&conn, path, false)?;
        schema::migrate_to(&mut conn, path, &schema::MIGRATIONS[..upto])
    }

    /// The file this store reads and writes.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// True when the file was opened read-only (writes fail with [`SqliteError::ReadOnly`]).
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    /// Size in bytes of the database file plus its WAL, as it is on disk now.
    pub fn file_bytes(&self) -> u64 {
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let mut wal = self.shared.path.clone().into_os_string();
        wal.push("-wal");
        size(&self.shared.path) + size(Path::new(&wal))
    }

    /// Copies the WAL into the database and truncates it. Returns false when a reader kept
    /// the checkpoint from completing.
    pub fn checkpoint(&self) -> Result<bool, SqliteError> {
        let conn = self.lock();
        // A checkpoint already running (the background one, or another process's) makes
        // SQLite answer busy at once, without its busy handler; it finishes in milliseconds,
        // so this waits for it within the busy timeout, as a write would.
        let deadline = std::time::Instant::now() + conn_busy_timeout(&conn);
        loop {
            let busy = match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            }) {
                Ok(busy) => busy != 0,
                Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => true,
                Err(e) => return Err(self.err("checkpoint the WAL", e)),
            };
            if !busy {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// `PRAGMA integrity_check`: `"ok"` for a healthy file, otherwise SQLite's findings.
    pub fn integrity_check(&self) -> Result<String, SqliteError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare("PRAGMA integrity_check")
            .map_err(|e| self.err("check integrity", e))?;
        let lines = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.err("check integrity", e))?;
        Ok(lines.join("\n"))
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while the lock was held cannot leave a transaction open (the guard rolls
        // back on drop), so the connection behind a poisoned lock is still sound.
        self.shared
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn err(&self, op: &'static str, e: rusqlite::Error) -> SqliteError {
        SqliteError::sqlite(&self.shared.path, op, e)
    }

    fn now(&self) -> diag_graph::clock::Timestamp {
        self.shared.clock.now()
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction: it takes the write lock up front, so a
    /// concurrent writer makes this wait on the busy timeout rather than fail mid-way.
    fn write<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Connection) -> Result<T, SqliteError>,
    ) -> Result<T, SqliteError> {
        self.write_as(op, f)
    }

    /// [`Self::write`] for a write whose error says more than this store's error (a finish's
    /// [`diag_store::FinishError`]).
    fn write_as<T, E: From<SqliteError>>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Connection) -> Result<T, E>,
    ) -> Result<T, E> {
        if self.shared.read_only {
            return Err(SqliteError::ReadOnly {
                path: self.shared.path.clone(),
                op,
            }
            .into());
        }
        let conn = self.lock();
        // BEGIN and COMMIT run as cached statements: preparing them anew for every one of a
        // run's many small transactions was a measurable share of the write path.
        conn.prepare_cached("BEGIN IMMEDIATE")
            .and_then(|mut s| s.execute([]))
            .map_err(|e| self.err(op, e))?;
        let _rollback = RollbackGuard(&conn);
        let value = f(&conn)?;
        conn.prepare_cached("COMMIT")
            .and_then(|mut s| s.execute([]))
            .map_err(|e| self.err(op, e))?;
        if let Some(checkpointer) = &self.shared.checkpointer {
            checkpointer.committed();
        }
        Ok(value)
    }
}

/// Rolls the open transaction back unless it was committed (after COMMIT the connection is
/// in autocommit mode again and this does nothing), so an error (or a panic) in the
/// middle of a write leaves neither a half-written change nor the write lock behind.
pub(crate) struct RollbackGuard<'a>(pub(crate) &'a Connection);

impl Drop for RollbackGuard<'_> {
    fn drop(&mut self) {
        if !self.0.is_autocommit() {
            let _ = self.0.execute_batch("ROLLBACK");
        }
    }
}

fn default_path_from(
    xdg_data_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    // The XDG rule: a relative value is invalid and ignored.
    let absolute = |v: std::ffi::OsString| {
        let p = PathBuf::from(v);
        p.is_absolute().then_some(p)
    };
    let data = xdg_data_home.and_then(absolute).or_else(|| {
        home.and_then(absolute)
            .map(|h| h.join(".local").join("share"))
    })?;
    Some(data.join("diag").join("diag.db"))
}

/// The busy timeout a store was opened with (SQLite keeps it; `PRAGMA busy_timeout` reads
/// it back in milliseconds).
fn conn_busy_timeout(conn: &Connection) -> Duration {
    conn.query_row("PRAGMA busy_timeout", [], |r| r.get::<_, u64>(0))
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(5))
}

/// The page size of a new store file, in bytes (see `configure`).
pub(crate) const PAGE_SIZE: i64 = 8192;

/// Connection settings. `foreign_keys` is per connection and off by default in SQLite, so
/// it is set on every open; WAL mode is persistent but setting it again is free.
fn configure(conn: &Connection, path: &Path, read_only: bool) -> Result<(), SqliteError> {
    let fail = |op, e| SqliteError::sqlite(path, op, e);
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(|e| fail("enable foreign keys", e))?;
    if read_only {
        return Ok(());
    }
    // auto_vacuum is fixed when page 1 is first written, which setting WAL mode does on a
    // new file, so it goes first. On an existing file it changes nothing, which is right both
    // for a store created earlier and for a racing second opener of a new one. It is read
    // first and only set when not yet INCREMENTAL (2): setting it again is a write
    // transaction, which made every open — `diag trace` included — create the WAL and pay
    // five fsyncs between the write and the checkpoint on close.
    // The page size, like auto_vacuum, is fixed by the first write of a new file. 8 KiB
    // rather than SQLite's 4 KiB: the child tables are WITHOUT ROWID, whose rows stay on
    // their b-tree page only up to about a quarter of a page and spill the rest into
    // overflow pages of their own; a model exchange row (its request skeleton and
    // compressed response) is often just over 1 KB, and at 4 KiB a recorded run took twice
    // its payload in pages (docs/BENCHMARKS.md). Existing files keep the size they have.
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .map_err(|e| fail("read the page count", e))?;
    if pages == 0 {
        conn.pragma_update(None, "page_size", PAGE_SIZE)
            .map_err(|e| fail("set the page size", e))?;
    }
    let auto_vacuum: i64 = conn
        .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
        .map_err(|e| fail("read the vacuum mode", e))?;
    if auto_vacuum != 2 {
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
            .map_err(|e| fail("enable incremental vacuum", e))?;
    }
    // Switching a new file to WAL needs its lock for a moment, and SQLite answers busy at
    // once, without its busy handler, while another process holds it (several processes
    // creating one store together, each migrating it in turn): wait for it within the busy
    // timeout, as a write would.
    let deadline = std::time::Instant::now() + conn_busy_timeout(conn);
    let mode: String = loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)) {
            Ok(mode) => break mode,
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(fail("enable WAL mode", e)),
        }
    };
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(RecordError::Invalid(format!(
            "{} cannot use WAL mode (journal mode stays {mode})",
            path.display()
        ))
        .into());
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(|e| fail("set synchronous mode", e))?;
    // Checkpoints normally run on the store's background thread (checkpoint.rs); this is the
    // safety net should it fall behind. A checkpoint costs two fsyncs however few pages it
    // copies, so even here 4096 pages (16 MiB of WAL) beat SQLite's default of 1000.
    conn.pragma_update(None, "wal_autocheckpoint", 4096)
        .map_err(|e| fail("set the checkpoint interval", e))?;
    // After a large transaction the WAL file is cut back to this size at the next
    // checkpoint instead of staying at its high-water mark.
    conn.pragma_update(None, "journal_size_limit", 32 * 1024 * 1024)
        .map_err(|e| fail("limit the WAL size", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_path_follows_the_xdg_rule() {
        let os = |s: &str| Some(std::ffi::OsString::from(s));
        assert_eq!(
            default_path_from(os("/data"), os("/home/sre")),
            Some(PathBuf::from("/data/diag/diag.db"))
        );
        assert_eq!(
            default_path_from(None, os("/home/sre")),
            Some(PathBuf::from("/home/sre/.local/share/diag/diag.db"))
        );
        assert_eq!(
            default_path_from(os("relative/dir"), os("/home/sre")),
            Some(PathBuf::from("/home/sre/.local/share/diag/diag.db")),
            "a relative XDG_DATA_HOME is ignored"
        );
        assert_eq!(default_path_from(os(""), None), None);
        assert_eq!(default_path_from(None, os("rel")), None);
    }

    #[test]
    fn open_existing_creates_nothing_and_opens_what_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no").join("such").join("diag.db");
        match SqliteStore::open_existing(&path, StoreOptions::default()) {
            Err(e @ SqliteError::Missing { .. }) => {
                assert_eq!(e.to_string(), format!("no run store at {}", path.display()))
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("a missing store opened"),
        }
        assert!(!dir.path().join("no").exists(), "no folder was created");
        // A missing file in an existing folder: still nothing created.
        let path = dir.path().join("diag.db");
        assert!(matches!(
            SqliteStore::open_existing(&path, StoreOptions::default()),
            Err(SqliteError::Missing { .. })
        ));
        assert!(!path.exists());
        // An empty file is no store either, and stays empty.
        std::fs::write(&path, b"").unwrap();
        match SqliteStore::open_existing(&path, StoreOptions::default()) {
            Err(e @ SqliteError::Missing { empty: true, .. }) => assert_eq!(
                e.to_string(),
                format!("no run store at {} (the file is empty)", path.display())
            ),
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("an empty file opened as a store"),
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        // Once a store is there, it opens and reads like any other.
        drop(SqliteStore::open(&path).unwrap());
        let store = SqliteStore::open_existing(&path, StoreOptions::default()).unwrap();
        use diag_store::{RunFilter, RunReader};
        assert!(store.list_runs(&RunFilter::default()).unwrap().is_empty());
    }
}
