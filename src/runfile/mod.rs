//! Run files (`diag_run_v1`): a self-contained JSON record of one run — question, identity,
//! tool catalog, every model and tool exchange in order, and the expected result — and the
//! tape that replays one offline. Hand-written run files (no `request_sha256`) are how
//! scenarios are authored.

pub mod tape;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

pub use tape::{Divergence, RecordedModel, RecordedTools, Recorder, Tape};

use crate::agent::AgentRole;
use crate::clock::Timestamp;
use crate::model::{ChatResponse, ErrorClass, FinishReason, ModelError, ToolCall, Usage};
use crate::protocol::{InvocationStatus, Verdict};
use crate::tools::ToolSpec;

/// The only format version this build reads and writes.
pub const FORMAT: &str = "diag_run_v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFile {
    pub format: String,
    pub question: String,
    pub session_id: String,
    pub run_id: String,
    pub started_at: Timestamp,
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    #[serde(default)]
    pub exchanges: Vec<Exchange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Expected>,
}

/// One recorded exchange, in the order it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Exchange {
    Model(ModelRecord),
    Tool(ToolRecord),
}

/// One model call: a response or an error, never both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRecord {
    pub agent: AgentRole,
    pub round: u32,
    pub attempt: u32,
    pub turn: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<RecordedResponse>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RecordedError>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedResponse {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default = "default_finish")]
    pub finish_reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

fn default_finish() -> String {
    "stop".to_string()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedError {
    pub class: ErrorClass,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRecord {
    pub invocation_id: String,
    pub tool_name: String,
    #[serde(default)]
    pub arguments: Value,
    pub output: Value,
    pub status: InvocationStatus,
}

/// What a replay must reproduce.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    pub status: String,
    pub path: Vec<String>,
    #[serde(default)]
    pub effective_verdict: Option<Verdict>,
    pub degraded: bool,
    #[serde(default)]
    pub answer: Option<String>,
}

impl RecordedResponse {
    pub fn from_response(r: &ChatResponse) -> Self {
        RecordedResponse {
            content: r.content.clone(),
            tool_calls: r.tool_calls.clone(),
            finish_reason: r.finish_reason.as_str().to_string(),
            usage: r.usage,
        }
    }

    pub fn to_response(&self) -> ChatResponse {
        ChatResponse {
            content: self.content.clone().filter(|c| !c.is_empty()),
            tool_calls: self.tool_calls.clone(),
            finish_reason: FinishReason::parse(Some(&self.finish_reason)),
            usage: self.usage,
        }
    }
}

impl RecordedError {
    pub fn to_error(&self) -> ModelError {
        ModelError {
            class: self.class,
            message: self.message.clone(),
            retry_after: None,
        }
    }
}

/// Why a run file could not be loaded; the message is one line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RunFileError {
    #[error("{file}: not valid JSON ({reason})")]
    Malformed { file: String, reason: String },
    #[error("{file}: unknown run file format `{found}` (this diag reads `{FORMAT}`)")]
    UnknownFormat { file: String, found: String },
    #[error("{file}: {reason}")]
    Invalid { file: String, reason: String },
}

impl RunFile {
    /// Parses a run file, rejecting any format other than `diag_run_v1` before reading the
    /// rest, and checking that every model exchange has exactly one of response and error.
    pub fn parse(text: &str, file: &str) -> Result<RunFile, RunFileError> {
        let value: Value = serde_json::from_str(text).map_err(|e| RunFileError::Malformed {
            file: file.to_string(),
            reason: one_line(&e.to_string()),
        })?;
        let found = match value.get("format") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => {
                return Err(RunFileError::Invalid {
                    file: file.to_string(),
                    reason: "missing field `format`".into(),
                })
            }
        };
        if found != FORMAT {
            return Err(RunFileError::UnknownFormat {
                file: file.to_string(),
                found: one_line(&found.chars().take(40).collect::<String>()),
            });
        }
        // serde quotes what the file holds (an unknown variant, say), which may be long or
        // carry control characters: the message is made one bounded line.
        let run: RunFile = serde_json::from_value(value).map_err(|e| RunFileError::Invalid {
            file: file.to_string(),
            reason: one_line(&e.to_string()),
        })?;
        for (i, x) in run.exchanges.iter().enumerate() {
            if let Exchange::Model(m) = x {
                if m.response.is_some() == m.error.is_some() {
                    return Err(RunFileError::Invalid {
                        file: file.to_string(),
                        reason: format!(
                            "exchanges[{i}]: a model exchange has exactly one of `response` and `error`"
                        ),
                    });
                }
            }
        }
        if run.question.trim().is_empty() {
            return Err(RunFileError::Invalid {
                file: file.to_string(),
                reason: "`question` is empty".into(),
            });
        }
        Ok(run)
    }

    /// The run file as pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// The longest text a loader error quotes from the file, in characters.
const ERROR_TEXT_MAX: usize = 200;

/// Control characters escaped (`\n`, `\u{1b}`), cut at [`ERROR_TEXT_MAX`] characters: what a
/// run file says never breaks the one-line error or writes to the terminal.
fn one_line(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == ERROR_TEXT_MAX {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"{"format": "diag_run_v1", "question": "why 502?",
        "session_id": "s", "run_id": "r", "started_at": "2026-11-30T14:05:00Z",
        "exchanges": [
          {"kind": "model", "agent": "planner", "round": 1, "attempt": 1, "turn": 1,
           "response": {"content": "{}"}},
          {"kind": "tool", "invocation_id": "inv-1", "tool_name": "search_logs",
           "arguments": {"query": "502"}, "output": {"matches": []}, "status": "ok"},
          {"kind": "model", "agent": "verifier", "round": 1, "attempt": 1, "turn": 1,
           "error": {"class": "transient", "message": "HTTP 503"}}]}"#;

    #[test]
    fn a_hand_written_run_file_loads_and_round_trips() {
        let run = RunFile::parse(MINIMAL, "m.json").unwrap();
        assert_eq!(run.exchanges.len(), 3);
        let again = RunFile::parse(&run.to_json(), "m.json").unwrap();
        assert_eq!(run, again);
    }

    #[test]
    fn bad_files_are_rejected_with_one_line() {
        let unknown = MINIMAL.replace("diag_run_v1", "diag_run_v9");
        let both = MINIMAL.replace(
            r#""response": {"content": "{}"}"#,
            r#""response": {"content": "{}"}, "error": {"class": "permanent", "message": "x"}"#,
        );
        type Check = fn(&RunFileError) -> bool;
        let cases: Vec<(&str, Check)> = vec![
            ("{\"format\": \"diag_run_v1\", \"quest", |e| {
                matches!(e, RunFileError::Malformed { .. })
            }),
            ("", |e| matches!(e, RunFileError::Malformed { .. })),
            (
                &unknown,
                |e| matches!(e, RunFileError::UnknownFormat { found, .. } if found == "diag_run_v9"),
            ),
            ("{\"question\": \"q\"}", |e| {
                matches!(e, RunFileError::Invalid { .. })
            }),
            (&both, |e| matches!(e, RunFileError::Invalid { .. })),
            ("[1,2]", |e| matches!(e, RunFileError::Invalid { .. })),
        ];
        for (text, ok) in cases {
            let e = RunFile::parse(text, "f.json").unwrap_err();
            assert!(ok(&e), "{e:?}");
            assert!(!e.to_string().contains('\n'), "{e}");
            assert!(e.to_string().starts_with("f.json: "), "{e}");
        }
    }
}
