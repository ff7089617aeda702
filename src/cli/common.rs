//! What several subcommands share: opening the store, the async runtime, JSON output.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::{io_error, CommandError, Exit, GlobalArgs};
use crate::stores::OpenOptions;
use diag_ask::config::Config;
use diag_core::store::{Store, StoreError, StoreErrorKind};
use diag_store_sqlite::{SqliteStore, DB_ENV};

/// Where the database path came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbOrigin {
    /// `--db PATH`.
    Flag,
    /// A non-empty `DIAG_DB`.
    Env,
    /// `[store] path` of the configuration file.
    Config,
    /// The user's data directory (`Store::default_path`).
    Default,
}

/// The database to use and why.
#[derive(Debug, Clone)]
pub struct DbLocation {
    pub path: PathBuf,
    pub origin: DbOrigin,
}

/// The database path: `--db`, else a non-empty `DIAG_DB`, else `[store] path` of the
/// configuration file, else the user's data directory. `config` is the configuration the
/// command already loaded; without one, the configuration file is located (`--config`,
/// `DIAG_CONFIG`, the user's config folder) and only its `[store]` is read, and only when
/// neither `--db` nor `DIAG_DB` decides.
pub fn db_location(g: &GlobalArgs, config: Option<&Config>) -> Result<DbLocation, CommandError> {
    let at = |path: PathBuf, origin| {
        refuse_url(&path, origin)?;
        Ok(DbLocation { path, origin })
    };
    if let Some(path) = &g.db {
        return at(path.clone(), DbOrigin::Flag);
    }
    if let Some(path) = std::env::var_os(DB_ENV).filter(|v| !v.is_empty()) {
        return at(PathBuf::from(path), DbOrigin::Env);
    }
    let from_config = match config {
        Some(c) => c
            .store
            .url
            .clone()
            .map(PathBuf::from)
            .or_else(|| c.store.path.clone()),
        // Commands that only read the store look at `[store]` alone (Config::store_path_of).
        None => match Config::locate(g.config.as_deref()) {
            Some(file) => Config::store_path_of(&file)?,
            None => None,
        },
    };
    if let Some(path) = from_config {
        return at(path, DbOrigin::Config);
    }
    match SqliteStore::default_path() {
        Some(path) => at(path, DbOrigin::Default),
        None => Err(CommandError::usage("no database path: HOME is not set")
            .hint("set --db PATH or DIAG_DB")),
    }
}

/// A database location written as a URL other than PostgreSQL's is refused before anything
/// is created: taken as a path, `mysql://diag@host/db` would become a folder `mysql:` holding
/// a new SQLite file, and the runs would silently land there. Only the scheme is named in the
/// message: the rest of a URL may hold a password.
fn refuse_url(path: &std::path::Path, origin: DbOrigin) -> Result<(), CommandError> {
    let Some(scheme) = diag_ask::config::url_scheme(path) else {
        return Ok(());
    };
    if crate::stores::is_postgres(path) {
        return Ok(());
    }
    let source = match origin {
        DbOrigin::Flag => "--db",
        DbOrigin::Env => "DIAG_DB",
        DbOrigin::Config => "[store] path",
        DbOrigin::Default => "the default database location",
    };
    Err(CommandError::usage(format!(
        "{source} is a {scheme}:// URL; diag stores runs in a SQLite file or a PostgreSQL database"
    ))
    .hint("give the path of a SQLite file (--db ./runs.db) or a postgres:// URL"))
}

/// Opens (creating if needed) the store of a command that writes runs (`ask`, `replay`).
pub fn open_store(g: &GlobalArgs, config: Option<&Config>) -> Result<Store, CommandError> {
    let at = db_location(g, config)?;
    crate::stores::open(&at.path, &open_options(g, config)?).map_err(CommandError::from)
}

/// The store options of the configuration (`[store] password_env`), read from `config` or,
/// for a command that loaded none, from the configuration file's `[store]` alone.
pub fn open_options(g: &GlobalArgs, config: Option<&Config>) -> Result<OpenOptions, CommandError> {
    let store = match config {
        Some(c) => c.store.clone(),
        None => match Config::locate(g.config.as_deref()) {
            Some(file) => Config::store_of(&file)?,
            None => Default::default(),
        },
    };
    Ok(OpenOptions {
        password_env: store.password_env,
    })
}

/// Opens the store of a command that only reads or prunes it (`trace`, `runs`, `export`,
/// `gc`): never creates a file or a folder. `Ok(None)` when there is no store at the default
/// path (a machine where diag never stored a run); a missing store anywhere the user named
/// (`--db`, `DIAG_DB`, `[store] path`) is an error, because it is most likely a typo.
pub fn open_existing_store(g: &GlobalArgs) -> Result<Option<Store>, CommandError> {
    let at = db_location(g, None)?;
    match crate::stores::open_existing(&at.path, &open_options(g, None)?) {
        Ok(store) => Ok(Some(store)),
        Err(e) if e.is_missing() && at.origin == DbOrigin::Default => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Like [`open_existing_store`], for commands that have nothing to do without a store: a
/// missing store is an error wherever it was expected.
pub fn require_existing_store(g: &GlobalArgs) -> Result<Store, CommandError> {
    let at = db_location(g, None)?;
    crate::stores::open_existing(&at.path, &open_options(g, None)?).map_err(CommandError::from)
}

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

/// `<number><unit>` with unit s, m, h, d or w.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 30d, 12h, 45m or 90s"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(format!("`{s}` is not a duration like 30d, 12h, 45m or 90s")),
    };
    n.checked_mul(secs)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("`{s}` is too long"))
}
