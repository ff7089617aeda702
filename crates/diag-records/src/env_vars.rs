//! Every environment variable diag reads, in one table (in the manner of uv's `EnvVars`).
//! Code reads a variable only through these constants;
//! `tests::no_module_reads_an_environment_variable_by_literal_name` keeps it so.
//!
//! One more is read by a name that is not diag's: the model endpoint's API key, from the
//! variable the configuration names (`api_key_env`, `crates/diag-model-openai/src/lib.rs`).

/// The environment variables diag reads.
pub struct EnvVars;

impl EnvVars {
    /// The run store's path, when `--db` is not given (it overrides `[store] path` and the
    /// data folder). Empty counts as unset.
    pub const DIAG_DB: &'static str = "DIAG_DB";

    /// This machine's id as a run owner (default: `/etc/machine-id`); processes on machines
    /// that share a run store must have distinct ids.
    pub const DIAG_HOST_ID: &'static str = "DIAG_HOST_ID";

    /// How long a run's lease lasts, in milliseconds (default 60000); a live run renews it every
    /// third of that, and a run whose owner elsewhere let it expire is swept `interrupted`.
    pub const DIAG_STORE_LEASE_MS: &'static str = "DIAG_STORE_LEASE_MS";

    /// A PostgreSQL run store's password, when its URL has none (libpq's variable).
    pub const PGPASSWORD: &'static str = "PGPASSWORD";
    /// The PostgreSQL password file (default `~/.pgpass`).
    pub const PGPASSFILE: &'static str = "PGPASSFILE";
    /// The PostgreSQL user, when the run store's URL names none.
    pub const PGUSER: &'static str = "PGUSER";
    /// PEM certificates a PostgreSQL server's TLS certificate may chain to, beside the webpki
    /// roots.
    pub const PGSSLROOTCERT: &'static str = "PGSSLROOTCERT";
    /// The login name, the last fallback for a PostgreSQL user.
    pub const USER: &'static str = "USER";

    /// `diag investigate alertmanager`'s bearer token, for an Alertmanager behind a proxy
    /// that asks for one.
    pub const DIAG_ALERTMANAGER_TOKEN: &'static str = "DIAG_ALERTMANAGER_TOKEN";
    /// `diag investigate alertmanager`'s basic-auth user (with
    /// [`EnvVars::DIAG_ALERTMANAGER_PASSWORD`]).
    pub const DIAG_ALERTMANAGER_USER: &'static str = "DIAG_ALERTMANAGER_USER";
    /// `diag investigate alertmanager`'s basic-auth password.
    pub const DIAG_ALERTMANAGER_PASSWORD: &'static str = "DIAG_ALERTMANAGER_PASSWORD";

    /// The configuration file, when `--config` is not given. Empty counts as unset.
    pub const DIAG_CONFIG: &'static str = "DIAG_CONFIG";

    /// The log filter (`tracing-subscriber` `EnvFilter` syntax) for diag's own log on stderr.
    pub const DIAG_LOG: &'static str = "DIAG_LOG";

    /// The base of the default store folder (`$XDG_DATA_HOME/diag/`).
    pub const XDG_DATA_HOME: &'static str = "XDG_DATA_HOME";

    /// The base of the default configuration folder (`$XDG_CONFIG_HOME/diag/`).
    pub const XDG_CONFIG_HOME: &'static str = "XDG_CONFIG_HOME";

    /// The home folder: `~/.local/share` and `~/.config` when the XDG variables are unset.
    pub const HOME: &'static str = "HOME";

    /// Passed from diag's environment to every MCP server it starts (what a program needs to
    /// run); the server's environment is otherwise cleared and holds only what its
    /// configuration names.
    pub const MCP_PASSED: &'static [&'static str] = &[
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR",
        "TZ",
    ];
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every `.rs` file under `dir`.
    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn no_module_reads_an_environment_variable_by_literal_name() {
        // Every crate of the workspace: this crate is crates/diag-records. Test code is not
        // diag's: a crate's `tests/` and the diag-testkit crate read the harness's own
        // variables (`PROPTEST_CASES`, `DIAG_PEERS_DIR`).
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = Vec::new();
        sources(&root.join("src"), &mut files);
        sources(&root.join("crates"), &mut files);
        files.retain(|f| {
            let parts: Vec<_> = f.strip_prefix(&root).unwrap().iter().collect();
            !matches!(parts[..], [c, k, ..] if c == "crates" && k == "diag-testkit")
                && !matches!(parts[..], [c, _, t, ..] if c == "crates" && t == "tests")
        });
        let read = regex::Regex::new(r#"\bvar(_os)?\(\s*""#).unwrap();
        let mut offenders = Vec::new();
        for file in &files {
            if file.ends_with("env_vars.rs") {
                continue;
            }
            let text = std::fs::read_to_string(file).unwrap();
            for (n, line) in text.lines().enumerate() {
                if read.is_match(line) {
                    offenders.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "read these through diag_records::env_vars::EnvVars:\n{}",
            offenders.join("\n")
        );
        assert!(
            files.len() > 50,
            "the scan found the sources ({})",
            files.len()
        );
    }

    #[test]
    fn the_check_catches_a_literal_read() {
        let read = regex::Regex::new(r#"\bvar(_os)?\(\s*""#).unwrap();
        assert!(read.is_match(r#"std::env::var("DIAG_LOG")"#));
        assert!(read.is_match(r#"std::env::var_os("HOME")"#));
        assert!(!read.is_match("std::env::var_os(EnvVars::HOME)"));
    }
}
