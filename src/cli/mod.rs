//! The `diag` command line: clap definitions, one file per subcommand, and the single place
//! where errors become one line on stderr and an exit code.

mod ask;
mod common;
mod completions;
mod context;
mod eval;
mod exit;
mod export;
mod gc;
mod graph;
mod investigate;
mod live;
mod mcp;
mod progress;
mod replay;
mod report;
mod report_file;
mod runs;
mod serve;
mod serve_status;
mod store_copy;
mod trace;
mod usage;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

pub use context::CommandContext;
pub use exit::Exit;

/// diag: diagnosis runs whose every claim is bound to a recorded tool output.
///
/// Exit codes: 0 success; 1 internal error; 2 usage, configuration or input error; 3 run
/// FAILED; 4 under --strict, success but degraded or not PASS (eval: a run not grounded); 5 replay: a run file did not
/// reproduce its expected result, or (replay and ask --fixture) the run left its recording;
/// 6 the run store was busy or unreachable (try again); 7 ask: no model answered; 130 interrupted (the run is stored FAILED with its partial trace).
#[derive(Debug, Parser)]
#[command(name = "diag", version, about, long_about = None, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Printed after `--help`.
pub const EXIT_CODES: &str = "Exit codes:
  0    success
  1    internal error
  2    usage, configuration or input error
  3    the run ended FAILED (its deadline, [limits] run_timeout_secs, included)
  4    --strict: the run succeeded but was degraded or its verdict was not PASS
       (eval --strict: a run did not reach a grounded root cause)
  5    replay: a run file did not reproduce its expected result, or (replay and
       ask --fixture) the run left its recording (divergence)
  6    the run store stayed locked by another writer or its server could not be
       reached; nothing changed, and trying again may work
  7    ask: no model answered (every model call failed); the Fallback's answer
       is stored and is not a diagnosis
  130  interrupted (Ctrl-C); the run is stored FAILED with its partial trace

Database: --db, else DIAG_DB, else [store] path of the configuration file, else the
user's data directory. trace, report, runs, export and gc never create it.

Environment: DIAG_DB (database path), DIAG_CONFIG (configuration file), DIAG_LOG (log
filter for stderr, e.g. `info` or `diag=debug`).";

/// Flags every subcommand accepts.
#[derive(Debug, Args, Clone)]
pub struct GlobalArgs {
    /// The run store: a SQLite file, or a postgres:// URL [default: DIAG_DB, then [store] url
    /// or path of the config, then the user's data directory]
    // DIAG_DB is read by `CommandContext::db_location`, not by clap: an empty DIAG_DB means "unset"
    // there, where clap would refuse it as an empty --db.
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub db: Option<PathBuf>,
    /// The configuration file [default: DIAG_CONFIG, then ~/.config/diag/config.toml]
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print only the result: no progress, no timeline (an answer that is degraded or not a
    /// verified PASS adds one `diag: verdict …` line on stderr)
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// No live progress indicator
    #[arg(long, global = true)]
    pub no_progress: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Ask(ask::AskArgs),
    Replay(replay::ReplayArgs),
    Eval(eval::EvalArgs),
    Investigate(investigate::InvestigateArgs),
    Trace(trace::TraceArgs),
    Report(report::ReportArgs),
    Runs(runs::RunsArgs),
    Export(export::ExportArgs),
    Graph(graph::GraphArgs),
    Gc(gc::GcArgs),
    Store(store_copy::StoreArgs),
    Mcp(mcp::McpArgs),
    Serve(serve::ServeArgs),
    Completions(completions::CompletionsArgs),
    Man(completions::ManArgs),
}

/// A failure the CLI reports: one line, and the exit code its kind decides.
///
/// What the user can do about it is data (`hints`), not text baked into the message: the
/// terminal gets `message (hint; hint)` on one line (see `Display`), and `diag mcp` sends the
/// hints as structured error data. `kind` says what a caller may act on without reading the
/// text (an MCP client's mistake versus the server's).
#[derive(Debug)]
pub struct CommandError {
    pub exit: Exit,
    pub kind: ErrorKind,
    pub message: String,
    pub hints: Vec<String>,
    /// The error this one reports, kept for `DIAG_LOG` and for callers that look inside.
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// How to give diag a configuration: the hint of every command that needs one and has none.
pub(crate) const CONFIG_HINT: &str = "pass --config FILE or create ~/.config/diag/config.toml, \
     as in the commented example fixtures/demo/diag.toml";

/// What kind of failure a `CommandError` is, where a caller needs to tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A run id that is not in the store.
    UnknownRun,
    /// Everything else: the exit code says whether it was the user's input or diag's fault.
    Other,
}

impl CommandError {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        CommandError {
            exit,
            kind: ErrorKind::Other,
            message: message.into(),
            hints: Vec::new(),
            source: None,
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }

    /// A usage, configuration or input error whose message is `source`'s, kept inside.
    pub fn usage_from(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        let mut e = Self::usage(source.to_string());
        e.source = Some(Box::new(source));
        e
    }

    /// A run id the store does not have (shown bounded: the id came from the user).
    pub fn unknown_run(run_id: &str) -> Self {
        let mut e = Self::usage(diag_core::store::unknown_run_message(run_id))
            .hint(diag_core::store::UNKNOWN_RUN_HINT);
        e.kind = ErrorKind::UnknownRun;
        e
    }

    /// Adds what the user can do about it.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }

    /// Ends the command with an exit code but nothing more to say (the output said it).
    pub fn silent(exit: Exit) -> Self {
        Self::new(exit, "")
    }
}

impl std::error::Error for CommandError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A configuration file that cannot be read or is invalid: the user's input.
impl From<diag_ask::config::ConfigError> for CommandError {
    fn from(e: diag_ask::config::ConfigError) -> Self {
        CommandError::usage_from(e)
    }
}

/// A run file that cannot be read: the user's input.
impl From<diag_runfile::RunFileError> for CommandError {
    fn from(e: diag_runfile::RunFileError) -> Self {
        CommandError::usage_from(e)
    }
}

/// A scenario folder that cannot be used: the user's input.
impl From<diag_eval::scenario::ScenarioError> for CommandError {
    fn from(e: diag_eval::scenario::ScenarioError) -> Self {
        CommandError::usage_from(e)
    }
}

/// Writing the command's output failed: a closed pipe ends the command quietly (`diag runs |
/// head`), anything else is diag's failure.
impl From<std::io::Error> for CommandError {
    fn from(e: std::io::Error) -> Self {
        io_error(e)
    }
}

/// The one line the terminal shows: the message, then the hints in parentheses.
impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        if !self.hints.is_empty() {
            write!(f, " ({})", self.hints.join("; "))?;
        }
        Ok(())
    }
}

fn init_logging() {
    // Logs go to stderr only when asked for, so stdout stays the command's output.
    if let Ok(filter) = std::env::var(diag_core::env_vars::EnvVars::DIAG_LOG) {
        if let Ok(filter) = tracing_subscriber::EnvFilter::try_new(filter) {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .without_time()
                .try_init();
        }
    }
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let parsed = usage::command()
        .try_get_matches()
        .and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Success
            };
            let args: Vec<String> = std::env::args_os()
                .skip(1)
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            match usage::printed(&e, &args) {
                usage::Printed::Clap => {
                    let _ = e.print();
                }
                usage::Printed::Line(line) => {
                    let _ = writeln!(std::io::stderr(), "diag: {line}");
                }
            }
            return code.into();
        }
    };
    init_logging();
    let ctx =
        CommandContext::new(cli.global).with_fixture_hint(matches!(cli.command, Command::Ask(_)));
    let result = if let Command::Mcp(args) = &cli.command {
        // stdout is the MCP channel, written by the server's own transport: it must not be
        // locked here.
        mcp::cmd_mcp(&ctx, args)
    } else {
        let mut stdout = std::io::stdout().lock();
        run(&ctx, cli.command, &mut stdout).and_then(|()| stdout.flush().map_err(io_error))
    };
    match result {
        Ok(()) => Exit::Success.into(),
        Err(e) => {
            if !e.message.is_empty() {
                let _ = writeln!(std::io::stderr(), "diag: {e}");
            }
            e.exit.into()
        }
    }
}

/// Runs one subcommand with the context the global options resolve to.
fn run(g: &CommandContext, command: Command, out: &mut dyn Write) -> Result<(), CommandError> {
    match command {
        Command::Ask(args) => ask::cmd_ask(g, &args, out),
        Command::Replay(args) => replay::cmd_replay(g, &args, out),
        Command::Eval(args) => eval::cmd_eval(g, &args, out),
        Command::Investigate(args) => investigate::cmd_investigate(g, &args, out),
        Command::Trace(args) => trace::cmd_trace(g, &args, out),
        Command::Report(args) => report::cmd_report(g, &args, out),
        Command::Runs(args) => runs::cmd_runs(g, &args, out),
        Command::Export(args) => export::cmd_export(g, &args, out),
        Command::Graph(args) => graph::cmd_graph(&args, out),
        Command::Gc(args) => gc::cmd_gc(g, &args, out),
        Command::Store(args) => store_copy::cmd_store(g, &args, out),
        Command::Mcp(args) => mcp::cmd_mcp(g, &args),
        Command::Serve(args) => match &args.command {
            Some(serve::ServeCommand::Status(status)) => {
                serve_status::cmd_status(g, status.json, out)
            }
            None => serve::cmd_serve(g, &args),
        },
        Command::Completions(args) => completions::cmd_completions(&args, out),
        Command::Man(args) => completions::cmd_man(&args, out),
    }
}

/// A broken pipe (`diag graph | head`) is not an error; anything else on stdout is.
pub(crate) fn io_error(e: std::io::Error) -> CommandError {
    let mut error = if e.kind() == std::io::ErrorKind::BrokenPipe {
        CommandError::new(Exit::Success, "")
    } else {
        CommandError::new(Exit::Internal, format!("cannot write output: {e}"))
    };
    error.source = Some(Box::new(e));
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_follow_the_message_on_one_line() {
        let e = CommandError::usage("no model endpoint is configured")
            .hint("pass --config FILE")
            .hint("or replay a recorded run with --fixture FILE");
        assert_eq!(
            e.to_string(),
            "no model endpoint is configured (pass --config FILE; or replay a recorded run with --fixture FILE)"
        );
        assert_eq!(CommandError::usage("plain").to_string(), "plain");
    }

    #[test]
    fn an_unknown_run_is_a_kind_with_its_hint_as_data() {
        let e = CommandError::unknown_run("run-1\nforged");
        assert_eq!(e.kind, ErrorKind::UnknownRun);
        assert_eq!(e.exit, Exit::Usage);
        assert_eq!(e.hints, ["diag runs lists the stored runs"]);
        assert!(!e.to_string().contains('\n'), "{e}");
        assert_eq!(CommandError::usage("x").kind, ErrorKind::Other);
    }
}
