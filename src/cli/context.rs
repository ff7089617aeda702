//! The command line's one context: the global options, the configuration and the run store,
//! each resolved at most once per process and handed to every subcommand (as jj's
//! `CommandHelper` or cargo's `GlobalContext`).
//!
//! The configuration file is located once (`--config`, `DIAG_CONFIG`, the user's config
//! folder). A command that runs questions loads the whole file ([`CommandContext::config`]);
//! a command that only reads the store reads its `[store]` table alone, so a log folder that
//! is gone or a model being edited never keeps an operator from past runs. The store's
//! location is resolved once (`--db`, else a non-empty `DIAG_DB`, else `[store]`, else the
//! user's data directory) from whichever of the two the command read first, and the store is
//! opened once.

use std::cell::OnceCell;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{CommandError, GlobalArgs, CONFIG_HINT};
use crate::stores::OpenOptions;
use diag_alerts::config::AlertsConfig;
use diag_ask::config::{Config, StoreConfig};
use diag_core::store::Store;
use diag_store_sqlite::{SqliteStore, DB_ENV};

/// Where the database location came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbOrigin {
    /// `--db PATH`.
    Flag,
    /// A non-empty `DIAG_DB`.
    Env,
    /// `[store] path` (or `url`) of the configuration file.
    Config,
    /// The user's data directory (`SqliteStore::default_path`).
    Default,
}

/// The database to use and why.
#[derive(Debug, Clone)]
pub struct DbLocation {
    pub path: PathBuf,
    pub origin: DbOrigin,
}

/// A loaded configuration file, its alert sections and where it was.
#[derive(Debug)]
pub struct LoadedConfig {
    pub config: Config,
    /// `[notify]` and `[serve]`, diag-alerts' sections, checked with the rest of the file.
    pub alerts: AlertsConfig,
    pub path: PathBuf,
}

/// What every subcommand receives: the global options, and the configuration and store they
/// resolve to, each worked out once, when first asked for.
#[derive(Debug)]
pub struct CommandContext {
    global: GlobalArgs,
    config_file: OnceCell<Option<PathBuf>>,
    config: OnceCell<LoadedConfig>,
    /// `[store]` read alone, for a command that did not load the whole file.
    store_section: OnceCell<StoreConfig>,
    location: OnceCell<DbLocation>,
    store: OnceCell<Store>,
    /// Whether the command can replay a recorded run instead (`ask --fixture`), so a missing
    /// configuration may suggest it; no other command has `--fixture`.
    fixture_hint: bool,
}

/// `cell`'s value, computing it with `init` the first time (failures are not kept).
fn get_or_try<T, E>(cell: &OnceCell<T>, init: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
    if let Some(value) = cell.get() {
        return Ok(value);
    }
    let value = init()?;
    Ok(cell.get_or_init(|| value))
}

impl CommandContext {
    pub fn new(global: GlobalArgs) -> Self {
        CommandContext {
            global,
            config_file: OnceCell::new(),
            config: OnceCell::new(),
            store_section: OnceCell::new(),
            location: OnceCell::new(),
            store: OnceCell::new(),
            fixture_hint: false,
        }
    }

    /// The context of a command that takes `--fixture FILE` (`ask`): a missing configuration
    /// suggests it.
    pub fn with_fixture_hint(mut self, yes: bool) -> Self {
        self.fixture_hint = yes;
        self
    }

    /// `--quiet`.
    pub fn quiet(&self) -> bool {
        self.global.quiet
    }

    /// One line on stderr saying what a command wrote (`diag: wrote r.html (…)`), so that a
    /// file written where stdout would have gone is not silent; none under `--quiet`.
    pub fn confirm(&self, line: &str) {
        if !self.global.quiet {
            let _ = writeln!(
                std::io::stderr(),
                "diag: {}",
                diag_core::text::one_line(line, 400)
            );
        }
    }

    /// Whether a live progress line is shown: not under `--quiet`, `--no-progress` or a
    /// command's `--json`.
    pub fn show_progress(&self, json: bool) -> bool {
        !(self.global.quiet || self.global.no_progress || json)
    }

    /// The configuration file: `--config`, then `DIAG_CONFIG`, then the user's config folder
    /// if a file is there.
    pub fn config_file(&self) -> Option<&Path> {
        self.config_file
            .get_or_init(|| Config::locate(self.global.config.as_deref()))
            .as_deref()
    }

    /// The whole configuration a live run uses, loaded and validated.
    pub fn config(&self) -> Result<&LoadedConfig, CommandError> {
        get_or_try(&self.config, || {
            let Some(path) = self.config_file() else {
                let e = CommandError::usage("no model endpoint is configured").hint(CONFIG_HINT);
                return Err(if self.fixture_hint {
                    e.hint("or replay a recorded run with --fixture FILE")
                } else {
                    e
                });
            };
            let config = Config::load(path)?;
            Ok(LoadedConfig {
                alerts: AlertsConfig::of(&config)?,
                config,
                path: path.to_path_buf(),
            })
        })
    }

    /// `[store]`: the loaded configuration's, else the configuration file's `[store]` read
    /// alone (the rest of the file unchecked), else nothing configured.
    fn store_config(&self) -> Result<&StoreConfig, CommandError> {
        if let Some(loaded) = self.config.get() {
            return Ok(&loaded.config.store);
        }
        get_or_try(&self.store_section, || match self.config_file() {
            Some(file) => Ok(Config::store_of(file)?),
            None => Ok(StoreConfig::default()),
        })
    }

    /// The database location: `--db`, else a non-empty `DIAG_DB`, else `[store]` of the
    /// configuration, else the user's data directory. The configuration is read only when
    /// neither `--db` nor `DIAG_DB` decides.
    pub fn db_location(&self) -> Result<&DbLocation, CommandError> {
        get_or_try(&self.location, || {
            let at = |path: PathBuf, origin| {
                refuse_url(&path, origin)?;
                Ok(DbLocation { path, origin })
            };
            if let Some(path) = &self.global.db {
                return at(path.clone(), DbOrigin::Flag);
            }
            // DIAG_DB is read here, not by clap: an empty DIAG_DB means "unset".
            if let Some(path) = std::env::var_os(DB_ENV).filter(|v| !v.is_empty()) {
                return at(PathBuf::from(path), DbOrigin::Env);
            }
            if let Some(path) = self.store_config()?.location() {
                return at(path, DbOrigin::Config);
            }
            match SqliteStore::default_path() {
                Some(path) => at(path, DbOrigin::Default),
                None => Err(CommandError::usage("no database path: HOME is not set")
                    .hint("set --db PATH or DIAG_DB")),
            }
        })
    }

    /// The options the store opens with (`[store] password_env`).
    pub fn open_options(&self) -> Result<OpenOptions, CommandError> {
        Ok(OpenOptions {
            password_env: self.store_config()?.password_env.clone(),
        })
    }

    /// The store of a command that writes runs, created if it is not there.
    pub fn store(&self) -> Result<Store, CommandError> {
        if let Some(store) = self.store.get() {
            return Ok(store.clone());
        }
        let (at, options) = (self.db_location()?, self.open_options()?);
        Ok(self.keep(crate::stores::open(&at.path, &options)?))
    }

    /// The store of a command that only reads or prunes it: creates nothing. `Ok(None)` when
    /// there is no store at the default location (a machine where diag never stored a run);
    /// a missing store anywhere the user named (`--db`, `DIAG_DB`, `[store]`) is an error,
    /// because it is most likely a typo.
    pub fn existing_store(&self) -> Result<Option<Store>, CommandError> {
        self.open_existing(|at| at.origin == DbOrigin::Default)
    }

    /// Like [`CommandContext::existing_store`], for a command that has nothing to do without
    /// a store: missing is an error wherever it was expected.
    pub fn required_store(&self) -> Result<Store, CommandError> {
        if let Some(store) = self.store.get() {
            return Ok(store.clone());
        }
        let (at, options) = (self.db_location()?, self.open_options()?);
        Ok(self.keep(crate::stores::open_existing(&at.path, &options)?))
    }

    /// The store of a command that needs a run already stored (`ask --resume`): `Ok(None)`
    /// when there is no store wherever it was expected.
    pub fn store_with_runs(&self) -> Result<Option<Store>, CommandError> {
        self.open_existing(|_| true)
    }

    /// Opens the store if it is there; a missing one is `Ok(None)` where `missing_is_none`.
    fn open_existing(
        &self,
        missing_is_none: impl FnOnce(&DbLocation) -> bool,
    ) -> Result<Option<Store>, CommandError> {
        if let Some(store) = self.store.get() {
            return Ok(Some(store.clone()));
        }
        let (at, options) = (self.db_location()?, self.open_options()?);
        match crate::stores::open_existing(&at.path, &options) {
            Ok(store) => Ok(Some(self.keep(store))),
            Err(e) if e.is_missing() && missing_is_none(at) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The store, opened once: later calls get the same handle.
    fn keep(&self, store: Store) -> Store {
        self.store.get_or_init(|| store).clone()
    }
}

/// A database location written as a URL other than PostgreSQL's is refused before anything
/// is created: taken as a path, `mysql://diag@host/db` would become a folder `mysql:` holding
/// a new SQLite file, and the runs would silently land there. Only the scheme is named in the
/// message: the rest of a URL may hold a password.
fn refuse_url(path: &Path, origin: DbOrigin) -> Result<(), CommandError> {
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
