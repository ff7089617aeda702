//! `diag mcp`: diag as an MCP server over stdio (the server itself is the `diag-mcp` crate).
//! Here: the store, the live run's dependencies (or why diagnoses are unavailable), Ctrl-C,
//! and the exit codes.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::common::{interrupt_handler, runtime};
use super::live::{remembered_endpoints, warn_unkept};
use super::{CommandContext, CommandError, Exit, CONFIG_HINT};
use diag_ask::live::live_deps;
use diag_ask::setup;
use diag_core::clock::{Clock, SystemClock};
use diag_mcp::ServeError;

/// Serve diag as an MCP server over stdio (tools: diagnose, trace, runs, report).
///
/// Add it to an MCP client as the command `diag` with the arguments `--config FILE mcp`
/// (README: "Serving diag over MCP"). stdout carries only MCP messages; logs go to stderr
/// when DIAG_LOG is set. The model endpoints and tools are the configuration's, as for
/// `diag ask`; every diagnosis is stored as a run.
#[derive(Debug, Args)]
pub struct McpArgs {}

/// Runs the server until stdin ends (exit 0) or Ctrl-C (exit 130).
///
/// Without a usable model configuration the server still starts: `trace`, `runs` and
/// `report` need no model, and `diagnose` answers a tool error that names what is missing
/// and how to configure it (an MCP client shows that to its user; a process that exits at
/// start shows only "Connection closed").
pub fn cmd_mcp(g: &CommandContext, _args: &McpArgs) -> Result<(), CommandError> {
    let config = match g.config_file() {
        None => Err(format!("no model endpoint is configured: {CONFIG_HINT}")),
        Some(_) => g.config().map_err(|e| e.message),
    };
    let store = g.store()?;
    let rt = runtime()?;
    let result = rt.block_on(async {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        // What the endpoints taught earlier processes, and kept for later ones.
        let (memory, learnings) = remembered_endpoints(&store);
        let env = match &config {
            Ok(c) => setup::live_with(&c.config, clock.clone(), &memory)
                .await
                .map_err(|e| format!("config {}: {e}", c.path.display())),
            Err(e) => Err(e.clone()),
        };
        let deps = match &env {
            Ok(env) => Ok(Arc::new(live_deps(env, clock, &store))),
            Err(reason) => {
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "diag: warning: diagnose is unavailable ({reason}); trace, runs and report \
                     are served"
                );
                Err(reason.clone())
            }
        };
        let result = serve(deps, store.clone()).await;
        if let Ok(env) = env {
            env.shutdown().await;
        }
        warn_unkept(&learnings);
        result
    });
    // A read of stdin that is still pending must not hold the process.
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// One session; Ctrl-C cancels it, and with it every run in progress.
async fn serve(
    deps: Result<Arc<diag_ask::AskDeps>, String>,
    store: diag_core::store::Store,
) -> Result<(), CommandError> {
    let interrupted = CancellationToken::new();
    let on_ctrl_c = interrupt_handler(interrupted.clone())?;
    let served = diag_mcp::serve(deps, store, interrupted.clone()).await;
    on_ctrl_c.abort();
    match served {
        Err(e @ ServeError::Undrained) => Err(CommandError::new(Exit::Internal, e.to_string())),
        _ if interrupted.is_cancelled() => Err(CommandError::new(
            Exit::Interrupted,
            "interrupted; runs in progress are stored as FAILED with their partial trace",
        )),
        Err(e @ ServeError::NotStarted(_)) => Err(CommandError::usage(e.to_string())),
        Ok(()) => Ok(()),
    }
}
