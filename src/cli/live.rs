//! What the commands that run questions share (`ask`, `eval`, `mcp`, `replay`, `investigate`,
//! `serve`): the configuration a live run uses, the run files they load, the result webhook.

use super::CommandError;
use diag_alerts::config::AlertsConfig;
use diag_alerts::links::{LinkKey, ReportLinks};
use diag_alerts::notify::NotifyTarget;
use diag_runfile::RunFile;

/// Loads a run file, naming the file in every error.
pub fn load_run_file(path: &std::path::Path) -> Result<RunFile, CommandError> {
    let name = path.display().to_string();
    let text = std::fs::read(path)
        .map_err(|e| CommandError::usage(format!("{name}: cannot read: {e}")))?;
    let text = String::from_utf8(text)
        .map_err(|_| CommandError::usage(format!("{name}: not a run file (not UTF-8 text)")))?;
    Ok(RunFile::parse(&text, &name)?)
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
    diag_core::store::endpoint_memory(
        store,
        std::sync::Arc::new(diag_core::clock::SystemClock::new()),
    )
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

/// How long a report link opens (`[serve] report_link_ttl`).
pub fn report_link_ttl(config: &AlertsConfig) -> Result<std::time::Duration, CommandError> {
    let ttl = super::common::parse_duration(&config.serve.report_link_ttl)
        .map_err(|e| CommandError::usage(format!("[serve] report_link_ttl: {e}")))?;
    if ttl.is_zero() {
        return Err(CommandError::usage(
            "[serve] report_link_ttl: a report link must open for some time (at least 1s)",
        ));
    }
    Ok(ttl)
}

/// The report link key from the variable `[serve] link_key_env` names, if it is set; one
/// shorter than [`diag_alerts::links::MIN_KEY_BYTES`] is refused (the key is never shown).
pub fn link_key_from_env(config: &AlertsConfig) -> Result<Option<LinkKey>, CommandError> {
    let var = config.serve.link_key_env.trim();
    let Some(secret) = std::env::var_os(var).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    use std::os::unix::ffi::OsStrExt as _;
    LinkKey::from_secret(secret.as_bytes())
        .map(Some)
        .map_err(|e| {
            CommandError::usage(format!(
                "[serve] link_key_env names {}: {e}",
                diag_core::text::one_line(var, 80)
            ))
            .hint("set it to a long random string, e.g. the output of `openssl rand -hex 32`")
        })
}

/// The configured result webhook, with its token read from the environment. Its report
/// links are signed with `links` (`diag serve`'s), or else with the key `[serve]
/// link_key_env` names when it is set, so that they open in `diag serve`; without either
/// they open only with the read token.
pub fn notify_target(
    config: &AlertsConfig,
    links: Option<ReportLinks>,
) -> Result<Option<NotifyTarget>, CommandError> {
    let Some(n) = &config.notify else {
        return Ok(None);
    };
    let links = match (links, link_key_from_env(config)?) {
        (Some(l), _) => Some(l),
        (None, Some(key)) => Some(ReportLinks {
            key,
            ttl: report_link_ttl(config)?,
        }),
        (None, None) => None,
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
        links,
    }))
}
