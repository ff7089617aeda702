//! What the commands that run questions share (`ask`, `eval`, `mcp`, `replay`, `investigate`,
//! `serve`): the endpoints' memory a live run uses, the run files they load, the errors of the
//! secrets `[serve]` and `[notify]` name.

use super::{CommandError, Exit};
use diag_alerts::secrets::SecretError;
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

/// A token, link key or webhook target that cannot be used: the configuration's (exit 2, with
/// its hint), or diag's when no random link key could be drawn.
impl From<SecretError> for CommandError {
    fn from(e: SecretError) -> Self {
        let exit = if e.internal {
            Exit::Internal
        } else {
            Exit::Usage
        };
        let error = CommandError::new(exit, e.message);
        match e.hint {
            Some(h) => error.hint(h),
            None => error,
        }
    }
}

/// A configuration that cannot set up a live run, as one usage line naming the file; `ask`
/// (`fixture_hint`) adds that a recorded run replays without one.
pub fn setup_error(
    path: &std::path::Path,
    e: &diag_ask::setup::SetupError,
    fixture_hint: bool,
) -> CommandError {
    let error = CommandError::usage(format!("config {}: {e}", path.display()));
    if fixture_hint && matches!(e, diag_ask::setup::SetupError::NoModel) {
        error.hint("or replay a recorded run with --fixture FILE")
    } else {
        error
    }
}
