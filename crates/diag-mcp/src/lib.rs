//! `diag-mcp`: diag as a Model Context Protocol server over stdio (`diag mcp`), so another
//! agent can ask it for a verified diagnosis. The command line opens the store, builds the
//! live run's dependencies and handles Ctrl-C; [`serve`] is the session.
//!
//! Tools: `diagnose` (one run of the real ask path, stored; its answer, status, verdict and
//! the allowed claims with their evidence as structured content), `trace` (`diag trace
//! --json`), `runs` (`diag runs --json`) and `report` (the Markdown report). The protocol is
//! `rmcp`'s server side over stdin/stdout, so stdout carries nothing but MCP messages; logs go
//! to stderr (`DIAG_LOG`).
//!
//! - Progress: a `diagnose` request that carries a progress token gets one
//!   `notifications/progress` when each node starts and one when it ends, in order, all sent
//!   before the result.
//! - Cancellation: `notifications/cancelled` for a `diagnose` request cancels its run exactly
//!   as Ctrl-C cancels `diag ask`: the run is stored FAILED (`interrupted`) with its partial
//!   trace. Ctrl-C (SIGINT) to `diag mcp` cancels every run in progress the same way and
//!   exits 130; the end of stdin ends the session (runs still going are cancelled after the
//!   SDK's grace period) and exits 0. The process waits for every run to be stored.
//! - Bad requests: unknown tools, malformed arguments and unknown run ids are MCP errors
//!   (`-32602`, invalid params), checked before anything is written.

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, Peer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use diag_ask::live::{check_session, first_model_error, shown_verdict};
use diag_ask::{ask, AskDeps, AskError, AskOptions, AskOutcome, AskRequest};
use diag_core::graph::{Event, NodeKind, NoopObserver, Observer};
use diag_core::protocol::{Verdict, VerifiedExecutorOutput};
use diag_core::store::{RunFilter, RunStatus, Store, StoreError};
use diag_core::text::one_line;
use diag_diagnosis::composer_input::allowed_claims;
use diag_diagnosis::{AgentStatus, Status};
use diag_report::{Format, ReportError};

/// The schema name of the `diagnose` tool's structured result.
pub const DIAGNOSE_SCHEMA: &str = "diag.mcp.diagnose.v1";

/// The JSON Schema of that result (`docs/schema/mcp-diagnose.v1.json`), offered to clients as
/// the tool's `outputSchema`.
const DIAGNOSE_OUTPUT_SCHEMA: &str = include_str!("../../../docs/schema/mcp-diagnose.v1.json");

/// How many diagnoses may run at once (each is a run of its own; the bound only keeps a
/// runaway client from starting an unbounded number).
const RUN_SLOTS: u32 = 64;

/// How long the server waits, at the end of the session, for runs still going to be stored.
pub const RUN_DRAIN: Duration = Duration::from_secs(30);

/// The most runs the `runs` tool lists at once.
const MAX_RUNS_LISTED: usize = 1000;

/// Why a session ended badly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the MCP session did not start: {0}")]
    NotStarted(String),
    /// Runs still going when the session ended were not stored in time.
    #[error(
        "runs still in progress after {} s were left RUNNING; the next diag that opens the \
         store marks them FAILED (interrupted)",
        RUN_DRAIN.as_secs()
    )]
    Undrained,
}

/// Serves one MCP session over stdin/stdout until stdin ends or `interrupted` is cancelled
/// (Ctrl-C: every run in progress is cancelled and stored FAILED), then waits for every run
/// to be stored. `deps` is what a diagnosis runs with, or why diagnoses are unavailable.
pub async fn serve(
    deps: Result<Arc<AskDeps>, String>,
    store: Store,
    interrupted: CancellationToken,
) -> Result<(), ServeError> {
    let runs = Arc::new(Semaphore::new(RUN_SLOTS as usize));
    let server = DiagServer {
        deps,
        store,
        runs: runs.clone(),
    };
    // The session gets a child token: the SDK cancels the token it was given when the
    // session ends.
    let served = server
        .serve_with_ct(rmcp::transport::stdio_pipes(), interrupted.child_token())
        .await;
    let result = match served {
        Ok(running) => {
            tracing::info!("MCP session started");
            let quit = running.waiting().await;
            tracing::info!(?quit, "MCP session ended");
            Ok(())
        }
        Err(e) => Err(ServeError::NotStarted(one_line(&e.to_string(), 300))),
    };
    // Runs cancelled by the end of the session finish storing themselves.
    let drained = tokio::time::timeout(RUN_DRAIN, runs.acquire_many(RUN_SLOTS)).await;
    if drained.is_err() {
        return Err(ServeError::Undrained);
    }
    result
}

/// The MCP server: the shared dependencies of every run (or why there are none: no usable
/// model configuration), the store, and the run slots.
#[derive(Clone)]
struct DiagServer {
    deps: Result<Arc<AskDeps>, String>,
    store: Store,
    runs: Arc<Semaphore>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiagnoseArgs {
    question: String,
    #[serde(default)]
    session: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunIdArgs {
    run_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunsArgs {
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

const DIAGNOSE_DESCRIPTION: &str = "Diagnose a production problem with diag (\"why does \
checkout return 502 since 14:00?\"). diag runs one fixed, audited graph of agents over the \
read-only tools it is configured with (logs, metrics, runbooks, MCP servers), and its answer \
holds only verified claims: every claim in `claims` is bound to a recorded tool output \
(invocation id, JSON Pointer, quoted text) and checked by deterministic code; a claim that \
could not be bound is never shown. `verified` is true only when the run succeeded, its \
effective verdict is PASS and no Fallback answered. `degraded: true` means a Fallback \
answered: diag could not verify a diagnosis, and the answer says what is missing; it is not a \
diagnosis and must not be presented as one. Status FAILED (`isError`) means the run itself \
failed (`failure` says why). Every run is stored: pass `run_id` to the trace and report \
tools. Only the question is sent to the models. Takes a minute or more; sends progress \
notifications node by node and can be cancelled.";

const TRACE_DESCRIPTION: &str = "The stored trace of a diag run, as `diag trace --json` \
prints it (schema diag.trace.v1): the run row, every node attempt, model call and tool call, \
the grounding of each claim and the evaluation.";

const RUNS_DESCRIPTION: &str = "Recent diag runs, newest first, as `diag runs --json` prints \
them (schema diag.runs.v2): run and session ids, status, question, verdict, degraded.";

const REPORT_DESCRIPTION: &str = "The Markdown report of a stored diag run (as `diag report \
RUN_ID --format md`): header, answer, the claims with their evidence, grounding figures, \
timeline and tool calls; for a ticket or a chat.";

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The four tools, as `tools/list` shows them.
fn tools() -> Vec<Tool> {
    let run_id = json!({
        "type": "object",
        "properties": {
            "run_id": {"type": "string", "minLength": 1, "description": "A run id, as diagnose and runs return it"}
        },
        "required": ["run_id"],
        "additionalProperties": false
    });
    let read_only = ToolAnnotations::new()
        .read_only(true)
        .destructive(false)
        .idempotent(true)
        .open_world(false);
    let mut diagnose = Tool::new(
        "diagnose",
        DIAGNOSE_DESCRIPTION,
        object(json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "minLength": 1, "description": "The operator's question, in plain words"},
                "session": {"type": "string", "minLength": 1, "description": "Group this run with earlier runs of the same session (a new session otherwise)"}
            },
            "required": ["question"],
            "additionalProperties": false
        })),
    )
    .with_title("Verified diagnosis")
    .with_annotations(
        // It stores a run and calls the model endpoints; it changes nothing it diagnoses.
        ToolAnnotations::new()
            .read_only(false)
            .destructive(false)
            .idempotent(false)
            .open_world(true),
    );
    if let Ok(Value::Object(schema)) = serde_json::from_str::<Value>(DIAGNOSE_OUTPUT_SCHEMA) {
        diagnose = diagnose.with_raw_output_schema(Arc::new(schema));
    }
    vec![
        diagnose,
        Tool::new("trace", TRACE_DESCRIPTION, object(run_id.clone()))
            .with_title("Trace of a diag run")
            .with_annotations(read_only.clone()),
        Tool::new(
            "runs",
            RUNS_DESCRIPTION,
            object(json!({
                "type": "object",
                "properties": {
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RUNS_LISTED, "default": 20, "description": "At most this many runs"},
                    "session": {"type": "string", "description": "Only runs of this session"},
                    "status": {"enum": ["running", "success", "failed"], "description": "Only runs with this status"}
                },
                "additionalProperties": false
            })),
        )
        .with_title("Recent diag runs")
        .with_annotations(read_only.clone()),
        Tool::new("report", REPORT_DESCRIPTION, object(run_id))
            .with_title("Report of a diag run")
            .with_annotations(read_only),
    ]
}

/// Arguments of `tool`, refused (invalid params) when they do not have its shape.
fn arguments<T: for<'de> Deserialize<'de>>(
    tool: &str,
    args: Option<JsonObject>,
) -> Result<T, McpError> {
    serde_json::from_value(Value::Object(args.unwrap_or_default())).map_err(|e| {
        McpError::invalid_params(
            format!(
                "tool `{tool}`: invalid arguments: {}",
                one_line(&e.to_string(), 200)
            ),
            None,
        )
    })
}

fn invalid(message: String) -> McpError {
    McpError::invalid_params(message, None)
}

/// An unknown run is the client's mistake, with what to do about it as data.
fn unknown_run(run_id: &str) -> McpError {
    McpError::invalid_params(
        diag_core::store::unknown_run_message(run_id),
        Some(json!({ "hints": [diag_core::store::UNKNOWN_RUN_HINT] })),
    )
}

/// A store that cannot be read is the server's failure, with the store's hint as data.
fn store_error(e: &StoreError) -> McpError {
    let data = e.kind().hint().map(|hint| json!({ "hints": [hint] }));
    McpError::internal_error(e.to_string(), data)
}

impl ServerHandler for DiagServer {
    fn get_info(&self) -> ServerConfig {
        let mut instructions = "diag answers diagnosis questions about production systems \
            with verified claims only. Call `diagnose` with the question; read `verified`, \
            `degraded` and `claims` before relying on the answer (a degraded answer is a \
            Fallback, not a diagnosis). `trace`, `report` and `runs` read stored runs."
            .to_string();
        if let Err(reason) = &self.deps {
            instructions.push_str(&format!(
                " `diagnose` is unavailable on this server: {reason}. `trace`, `report` and \
                 `runs` work."
            ));
        }
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("diag", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let result = match request.name.as_ref() {
            "diagnose" => {
                let args: DiagnoseArgs = arguments("diagnose", request.arguments)?;
                self.diagnose(args, context).await?
            }
            "trace" => {
                let args: RunIdArgs = arguments("trace", request.arguments)?;
                let doc = diag_report::documents::trace_json(&self.store, &args.run_id)
                    .map_err(|e| store_error(&e))?
                    .ok_or_else(|| unknown_run(&args.run_id))?;
                CallToolResult::structured(doc)
            }
            "runs" => {
                let args: RunsArgs = arguments("runs", request.arguments)?;
                self.runs(args)?
            }
            "report" => {
                let args: RunIdArgs = arguments("report", request.arguments)?;
                let text = diag_report::stored_report(&self.store, &args.run_id, Format::Md)
                    .map_err(|e| match e {
                        ReportError::Store(e) => store_error(&e),
                        other => McpError::internal_error(other.to_string(), None),
                    })?
                    .ok_or_else(|| unknown_run(&args.run_id))?;
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            other => {
                return Err(invalid(format!(
                    "unknown tool `{}` (tools: diagnose, trace, runs, report)",
                    one_line(other, 80)
                )))
            }
        };
        Ok(result.into())
    }
}

impl DiagServer {
    fn runs(&self, args: RunsArgs) -> Result<CallToolResult, McpError> {
        let limit = args.limit.unwrap_or(20);
        if !(1..=MAX_RUNS_LISTED).contains(&limit) {
            return Err(invalid(format!(
                "tool `runs`: limit must be from 1 to {MAX_RUNS_LISTED}"
            )));
        }
        let status = match &args.status {
            Some(s) => Some(s.parse::<RunStatus>().map_err(|_| {
                invalid(format!(
                    "tool `runs`: unknown status `{}` (expected running, success or failed)",
                    one_line(s, 40)
                ))
            })?),
            None => None,
        };
        let rows = self
            .store
            .list_runs(&RunFilter {
                session_id: args.session,
                status,
                limit: Some(limit),
            })
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(CallToolResult::structured(
            diag_report::documents::runs_json(&rows),
        ))
    }

    /// One diagnosis: the arguments are checked before anything is stored, then the run goes
    /// through [`ask`] like `diag ask`'s, cancelled by the request's cancellation.
    async fn diagnose(
        &self,
        args: DiagnoseArgs,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        if args.question.trim().is_empty() {
            return Err(invalid(
                "tool `diagnose`: the question is empty".to_string(),
            ));
        }
        if let Some(session) = &args.session {
            check_session(session).map_err(|e| invalid(format!("tool `diagnose`: session {e}")))?;
        }
        let deps = match &self.deps {
            Ok(deps) => deps,
            Err(reason) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "diag cannot diagnose: {reason}. Start `diag mcp` with `--config FILE` \
                     naming a configuration with a model endpoint ([models.NAME] base_url, \
                     model, api_key_env), as in fixtures/demo/diag.toml; trace, runs and \
                     report work without one."
                ))]))
            }
        };
        let Ok(_slot) = self.runs.clone().try_acquire_owned() else {
            return Err(McpError::internal_error(
                format!("{RUN_SLOTS} diagnoses are already running; try again when one ends"),
                None,
            ));
        };
        let progress = context.meta.get_progress_token().map(|token| {
            let (tx, rx) = mpsc::unbounded_channel();
            let sender = tokio::spawn(send_progress(context.peer.clone(), rx));
            (
                NodeProgress {
                    token,
                    tx,
                    count: 0,
                },
                sender,
            )
        });
        let (mut observer, sender) = match progress {
            Some((observer, sender)) => (Some(observer), Some(sender)),
            None => (None, None),
        };
        let mut silent = NoopObserver;
        let progress: &mut dyn Observer<Status> = match observer.as_mut() {
            Some(o) => o,
            None => &mut silent,
        };
        let outcome = ask(
            deps,
            AskRequest {
                question: args.question,
                session_id: args.session,
                run_id: None,
            },
            AskOptions::new(progress).cancel(Some(&context.ct)),
        )
        .await;
        // Every progress notification is out before the result.
        drop(observer);
        if let Some(sender) = sender {
            let _ = sender.await;
        }
        let outcome = outcome.map_err(|e| match e {
            AskError::EmptyQuestion => invalid("tool `diagnose`: the question is empty".into()),
            AskError::Store(e) => McpError::internal_error(
                format!(
                    "the run could not be stored: {}",
                    one_line(&e.to_string(), 300)
                ),
                None,
            ),
        })?;
        if outcome.interrupted() {
            tracing::info!(run_id = %outcome.run_id, "diagnosis cancelled; stored FAILED (interrupted)");
        }
        let model_error = first_model_error(&self.store, &outcome.run_id);
        let doc = diagnose_result(&outcome, model_error);
        Ok(if outcome.status() == RunStatus::Success {
            CallToolResult::structured(doc)
        } else {
            CallToolResult::structured_error(doc)
        })
    }
}

/// The `diagnose` tool's structured result (`docs/schema/mcp-diagnose.v1.json`).
fn diagnose_result(outcome: &AskOutcome, model_error: Option<String>) -> Value {
    let state = &outcome.state;
    let verdict = shown_verdict(outcome);
    let success = outcome.status() == RunStatus::Success;
    // Claims only from a run that ended well and whose Verifier completed: what it allowed,
    // each with the evidence it was bound to.
    let claims: Vec<Value> = match &state.round.verifier_result {
        Some(result) if success && state.round.verifier_status == Some(AgentStatus::Completed) => {
            let empty = VerifiedExecutorOutput::default();
            let verified = state
                .round
                .verified_executor_output
                .as_ref()
                .unwrap_or(&empty);
            allowed_claims(result, verified, &state.round.verified_evidence)
                .into_iter()
                .map(|c| {
                    json!({
                        "claim_id": c.claim_id,
                        "text": c.text,
                        "evidence": c.evidence.into_iter().map(|e| json!({
                            "invocation_id": e.source_invocation_id,
                            "tool_name": e.tool_name,
                            "json_pointer": e.raw_path,
                            "quote": e.matched_text,
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect()
        }
        _ => Vec::new(),
    };
    json!({
        "schema": DIAGNOSE_SCHEMA,
        "run_id": outcome.run_id,
        "session_id": outcome.session_id,
        "status": outcome.status().as_str(),
        "verified": success && !state.degraded && verdict == Some(Verdict::Pass),
        "answer": outcome.answer(),
        "failure": outcome.failure(),
        "effective_verdict": verdict.map(|v| v.as_str()),
        "degraded": state.degraded,
        "fallback_kind": state.fallback_kind.map(|k| k.as_str()),
        "claims": claims,
        "model_error": model_error,
        "warnings": outcome.warnings,
    })
}

/// Sends the progress notifications of one request, in order, until the run drops its
/// sender. A client that went away only ends the sending.
async fn send_progress(
    peer: Peer<RoleServer>,
    mut rx: mpsc::UnboundedReceiver<ProgressNotificationParam>,
) {
    while let Some(param) = rx.recv().await {
        if let Err(e) = peer.notify_progress(param).await {
            tracing::debug!(error = %e, "progress notification not sent");
            break;
        }
    }
}

/// The graph's observer for one request with a progress token: a notification when a node
/// starts and one when it ends; `progress` counts them, so it grows with every notification.
struct NodeProgress {
    token: ProgressToken,
    tx: mpsc::UnboundedSender<ProgressNotificationParam>,
    count: u32,
}

impl NodeProgress {
    fn send(&mut self, message: String) {
        self.count += 1;
        let param = ProgressNotificationParam::new(self.token.clone(), f64::from(self.count))
            .with_message(message);
        // The sender task ends only after this observer is dropped, or when the client is gone.
        let _ = self.tx.send(param);
    }
}

impl Observer<Status> for NodeProgress {
    fn node_started(&mut self, node: &str, _kind: NodeKind, attempt: u32, round: u32) {
        self.send(format!("{node} started (round {round}, attempt {attempt})"));
    }

    fn event(&mut self, event: &Event<Status>) {
        self.send(format!(
            "{} {} in {} ms (round {}, attempt {})",
            event.node, event.status, event.duration_ms, event.round, event.attempt
        ));
    }
}
