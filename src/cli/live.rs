//! What the commands that run questions share (`ask`, `eval`, `mcp`, `replay`): the
//! configuration a live run uses, its dependencies, the run files they load, and how a run's
//! outcome is shown.

use std::path::PathBuf;
use std::sync::Arc;

use diag_ask::config::Config;
use diag_ask::setup;
use diag_ask::setup::RandomIds;
use diag_ask::{production_nodes, AskDeps, AskOutcome};
use diag_core::clock::Clock;
use diag_core::protocol::Verdict;
use diag_core::store::Store;
use diag_report::terminal as render;
use diag_runfile::RunFile;

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

/// A session id names runs to group them and to filter `diag runs --session`: a blank one, or
/// one with control characters, would group nothing a user could type again. The error
/// starts with the quoted id.
pub fn check_session(session: &str) -> Result<(), String> {
    if session.trim().is_empty() || session.chars().any(char::is_control) {
        return Err(format!(
            "{:?}: a session id must be non-blank printable text",
            render::one_line(session, 80)
        ));
    }
    Ok(())
}

/// The dependencies of a live run: the production nodes over the configured models and
/// tools. `diag ask` and `diag mcp` build their runs with this one function.
pub fn live_deps(env: &setup::LiveEnvironment, clock: Arc<dyn Clock>, store: &Store) -> AskDeps {
    AskDeps {
        nodes: production_nodes(),
        models: env.models.clone(),
        tools: env.tools.clone(),
        limits: env.limits,
        record_limits: true,
        clock,
        ids: Arc::new(RandomIds),
        store: store.clone(),
    }
}

/// The effective verdict an answer may show: only one the Verifier completed in the final
/// round (a Fallback before it invents none).
pub fn shown_verdict(outcome: &AskOutcome) -> Option<Verdict> {
    outcome.state.round.effective_verdict.filter(|_| {
        outcome.state.round.verifier_status == Some(diag_diagnosis::AgentStatus::Completed)
    })
}

/// The first failed model call of a run, on one line: `agent (class): message`.
pub fn first_model_error(store: &Store, run_id: &str) -> Option<String> {
    let exchanges = store.exchanges(run_id).ok()?;
    exchanges.iter().find_map(|x| match &x.exchange.outcome {
        Err(e) => Some(format!(
            "{} ({}): {}",
            x.exchange.agent,
            e.class,
            render::one_line(&e.message, 160)
        )),
        Ok(_) => None,
    })
}
