//! What the commands that run questions share (`ask`, `eval`, `mcp`, `replay`, `investigate`,
//! `serve`): the configuration a live run uses, the run files they load, the result webhook.

use diag_alerts::notify::NotifyTarget;
use diag_ask::config::Config;
use diag_runfile::RunFile;
use std::path::PathBuf;

use super::{CommandError, GlobalArgs};

/// Loads a run file, naming the file in every error.
pub fn load_run_file(path: &std::path::Path) -> Result<RunFile, CommandError> {
    let name = path.display().to_string();
    let text = std::fs::read(path)
        .map_err(|e| CommandError::usage(format!("{name}: cannot read: {e}")))?;
    let text = String::from_utf8(text)
        .map_err(|_| CommandError::usage(format!("{name}: not a run file (not UTF-8 text)")))?;
    Ok(RunFile::parse(&text, &name)?)
}

/// The configuration a live run uses (`--config`, `DIAG_CONFIG`, the user's config folder).
pub fn live_config(g: &GlobalArgs) -> Result<(Config, PathBuf), CommandError> {
    let Some(path) = Config::locate(g.config.as_deref()) else {
        return Err(CommandError::usage("no model endpoint is configured")
            .hint(super::CONFIG_HINT)
            .hint("or replay a recorded run with --fixture FILE"));
    };
    let config = Config::load(&path)?;
    Ok((config, path))
}

/// The models' memory of what endpoints taught, loaded from `store` (what earlier processes
/// learned) and kept there as it learns (stamped by the system clock), with the sink whose
/// failures [`warn_unkept`] shows. Live runs only: a replay never reads or writes it.
pub fn remembered_endpoints(
    store: &diag_core::store::Store,
) -> (
    diag_core::model::EndpointMemory,
    std::sync::Arc<diag_core::store::StoreSink>,
) {
    store.endpoint_memory(std::sync::Arc::new(diag_core::clock::SystemClock::new()))
}

/// One `diag: warning:` line on stderr per failure to read or keep what endpoints taught
/// (the diagnosis went on without it).
pub fn warn_unkept(sink: &diag_core::store::StoreSink) {
    use std::io::Write as _;
    for failure in sink.failures() {
        let _ = writeln!(
            std::io::stderr(),
            "diag: warning: {}",
            diag_core::text::one_line(&failure, 300)
        );
    }
}

/// The configured result webhook, with its token read from the environment.
pub fn notify_target(config: &Config) -> Result<Option<NotifyTarget>, CommandError> {
    let Some(n) = &config.notify else {
        return Ok(None);
    };
    let token = match &n.token_env {
        Some(var) => Some(std::env::var(var).map_err(|_| {
            CommandError::usage(format!("[notify] token_env names {var}, which is not set"))
        })?),
        None => None,
    };
    Ok(Some(NotifyTarget {
        url: n.url.trim().to_string(),
        token,
        report_base: n.report_base_url.clone(),
    }))
}
