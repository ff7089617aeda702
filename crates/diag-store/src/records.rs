//! The values a run store takes and hands back: a new run, the summary that finishes it, the
//! stored run row, the stored forms of steps and exchanges, and list filters. Plain data over
//! the contracts and the agent runtime's records: nothing here knows the diagnosis graph (its
//! state is turned into a [`RunSummary`] by `diag_diagnosis::evaluation::run_summary`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use diag_graph::clock::Timestamp;
use diag_records::fallback::FallbackKind;
use diag_records::step::{AgentStepRecord, ModelExchange};
use diag_records::tool::ToolSpec;
use diag_records::verdict::Verdict;

/// The lifecycle of a run. Diagnosis quality is not a status: it lives in the verdict
/// fields and `degraded`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunStatus {
    Running,
    Success,
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "RUNNING",
            RunStatus::Success => "SUCCESS",
            RunStatus::Failed => "FAILED",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = String;

    /// Case-insensitive, so `diag runs --status failed` works.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "RUNNING" => Ok(RunStatus::Running),
            "SUCCESS" => Ok(RunStatus::Success),
            "FAILED" => Ok(RunStatus::Failed),
            _ => Err(format!(
                "unknown run status `{s}` (expected RUNNING, SUCCESS or FAILED)"
            )),
        }
    }
}

/// The failure text of a run whose process died while it was RUNNING.
pub const INTERRUPTED: &str = "interrupted";

/// What is known when a run starts.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    pub run_id: String,
    pub session_id: String,
    pub question: String,
    pub started_at: Timestamp,
    /// The tool catalog offered to the agents (the run file's `tools`).
    pub tools: Vec<ToolSpec>,
    /// The limits the run runs under, as the run file's `limits` object (opaque to the
    /// store, which keeps and returns it as given); `None` when they are not known (a replay
    /// of a file that records none).
    pub limits: Option<serde_json::Value>,
    /// The FAILED run this one resumes (`diag ask --resume`), whose stored exchanges it
    /// reuses before it goes live; `None` for a run started afresh.
    pub resumed_from: Option<String>,
    /// The recorded run this one replays (the run file's `run_id`: `diag replay`, `ask
    /// --fixture`); `None` for a live run.
    pub replay_of: Option<String>,
}

/// How much of the original run a resumed run reused. Reuse is always a prefix: the first
/// `model_calls` model calls and the first `tool_calls` tool calls of the resumed run were
/// served from the original run's stored exchanges, every later call was made live.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Reuse {
    pub model_calls: u32,
    pub tool_calls: u32,
    /// Why reuse stopped before the original run's exchanges ran out (a divergence, or a
    /// recorded failed call that is made again live), naming the exchange; `None` when the
    /// stored exchanges were used up (or the run ended before it needed the rest).
    pub stopped: Option<String>,
}

/// What the caller knows when a run ends. Token, step and tool counts are not here: the
/// store counts them from the rows it recorded, so they always agree with the stored trace.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunSummary {
    /// Required, non-blank, for a SUCCESS run; usually `None` for a FAILED one.
    pub answer: Option<String>,
    pub finished_at: Option<Timestamp>,
    pub duration_ms: Option<u64>,
    pub degraded: bool,
    pub effective_verdict: Option<Verdict>,
    pub fallback_kind: Option<FallbackKind>,
    pub self_evaluation: Option<serde_json::Value>,
    /// For a resumed run: what it reused of the original run.
    pub reuse: Option<Reuse>,
}

/// One stored run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub run_id: String,
    pub session_id: String,
    pub question: String,
    pub status: RunStatus,
    pub failure: Option<String>,
    pub answer: Option<String>,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    pub duration_ms: Option<u64>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Model calls (agent steps) recorded for the run.
    pub step_count: u64,
    /// Tool invocations recorded for the run.
    pub tool_count: u64,
    pub degraded: bool,
    pub effective_verdict: Option<Verdict>,
    pub fallback_kind: Option<FallbackKind>,
    /// The executed node sequence, from the stored events; empty until the run ends.
    pub path: Vec<String>,
    pub self_evaluation: Option<serde_json::Value>,
    pub tools: Vec<ToolSpec>,
    /// The limits the run ran under (the run file's `limits` object), as the run was
    /// created with them; `None` for runs stored before limits were kept, and for replays of
    /// files that record none.
    pub limits: Option<serde_json::Value>,
    /// The process that wrote the run (used to tell interrupted runs from live ones).
    pub owner_pid: u32,
    /// When the store created the row, by the store's own clock (retention goes by this).
    pub created_at: Timestamp,
    /// The run this one resumed (`diag ask --resume`), if any.
    pub resumed_from: Option<String>,
    /// The recorded run this one replays, if it is a replay.
    pub replay_of: Option<String>,
    /// What a resumed run reused of the original; `None` for other runs, and for a resumed
    /// run until it has finished.
    pub reuse: Option<Reuse>,
}

/// A stored agent step: its 1-based position among the run's model calls, and the record.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredStep {
    pub seq: u32,
    pub step: AgentStepRecord,
}

/// A stored model exchange with the sha256 of its canonical request.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredExchange {
    pub seq: u32,
    pub request_sha256: String,
    pub exchange: ModelExchange,
}

/// Everything a store holds of one run, read back whole: what `diag store copy` carries
/// from one store to another, through the port's records rather than any backend's columns,
/// so that the copy reads back (and exports) exactly as the original.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRun {
    pub run: RunRow,
    pub events: Vec<diag_graph::Event<String>>,
    pub steps: Vec<StoredStep>,
    pub exchanges: Vec<StoredExchange>,
    pub invocations: Vec<diag_records::invocation::ToolInvocation>,
    pub evaluation: Option<EvaluationRow>,
}

/// A run's evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct EvaluationRow {
    pub run_id: String,
    pub metrics: serde_json::Value,
    pub created_at: Timestamp,
}

/// Which runs `list_runs` returns, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    pub session_id: Option<String>,
    pub status: Option<RunStatus>,
    /// At most this many; `None` is all.
    pub limit: Option<usize>,
}

/// The owner columns of one RUNNING run as a store reads them back, with the run's id
/// (`diag_owner::gone_runs` judges them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOwner {
    pub run_id: String,
    /// `None` for rows written before host ids were kept.
    pub host: Option<String>,
    pub pid: i64,
    pub token: Option<String>,
    /// RFC 3339; `None` for rows written before leases were kept.
    pub lease_expires_at: Option<String>,
}
