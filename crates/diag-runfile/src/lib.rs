//! Run files (`diag_run_v2`; `diag_run_v1` still loads): a self-contained JSON record of one
//! run — question, identity, the limits it ran under, tool catalog, every model and tool
//! exchange in order, and the expected result — and the tape that replays one offline.
//! Hand-written run files (no `request_sha256`, no `limits`) are how scenarios are authored.

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod ci;
pub mod export;
pub mod resume;
pub mod tape;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use thiserror::Error;

pub use tape::{Divergence, RecordedModel, RecordedTools, Recorder, Tape};

use diag_core::agent::AgentRole;
use diag_core::clock::Timestamp;
use diag_core::de::Object;
use diag_core::limits::Limits;
use diag_core::model::{
    ChatResponse, ErrorClass, FinishReason, Fit, ModelError, StructuredOutput, ToolCall, Usage,
};
use diag_core::protocol::{InvocationStatus, Verdict};
use diag_core::tools::ToolSpec;
use diag_diagnosis::topology::NODES;

/// The format version this build writes (and reads).
pub const FORMAT: &str = "diag_run_v2";

/// The earlier format, still read: it has no `limits` (a `limits` member is ignored, as any
/// unknown member), so it replays under [`Limits::DEFAULT`], the limits every run had
/// before they were recorded.
pub const FORMAT_V1: &str = "diag_run_v1";

/// The formats this build reads.
pub const FORMATS: [&str; 2] = [FORMAT_V1, FORMAT];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFile {
    pub format: String,
    #[serde(deserialize_with = "question")]
    pub question: String,
    pub session_id: String,
    pub run_id: String,
    pub started_at: Timestamp,
    /// The limits the run ran under; absent in v1 files, in hand-written files and in files
    /// exported from a store (which does not keep them): then [`Limits::DEFAULT`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub limits: Option<Limits>,
    #[serde(default, deserialize_with = "objects")]
    pub tools: Vec<ToolSpec>,
    #[serde(default)]
    pub exchanges: Vec<Exchange>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
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
    #[serde(deserialize_with = "named")]
    pub agent: AgentRole,
    pub round: u32,
    pub attempt: u32,
    pub turn: u32,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "sha256_hex"
    )]
    pub request_sha256: Option<String>,
    /// The version of the agent's prompt the request was built with (absent in files
    /// written before it was recorded and in hand-written ones: then the Composer's is
    /// version 2, `composer_answer_v1`, and every other agent's its newest). A replay builds
    /// the request with the same version; a version this diag does not embed is refused
    /// when the file is loaded.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub prompt_version: Option<u32>,
    /// The request's `max_tokens` (absent in hand-written files: the replay's own limits
    /// apply). A replay asks for the same.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub max_tokens: Option<u32>,
    /// What the request was fitted to (context size, completion tokens asked for), when the
    /// model's context size was known; a replay fits the same way.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub fit: Option<Fit>,
    /// The Executor's evidence turn (its evidence document asked for with no tools offered);
    /// absent otherwise. A replay has the turn when its recording holds one.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "only_true"
    )]
    pub evidence_turn: bool,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub response: Option<RecordedResponse>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub error: Option<RecordedError>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedResponse {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, deserialize_with = "objects")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default = "default_finish")]
    pub finish_reason: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub usage: Option<Usage>,
    /// How the output contract was sent (`json_schema`, `json_object_schema`, `json_object`,
    /// `off`); absent when the request had none, and in files written before it was recorded.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "named_some"
    )]
    pub structured_output: Option<StructuredOutput>,
}

fn default_finish() -> String {
    "stop".to_string()
}

// Field rules of `docs/schema/diag_run_v1.json` that the types alone do not carry. They run
// inside deserialization, so a refusal names the field's path like any type error.

/// An optional member that, when present, is an object: the schema has no `null` there.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Object::<T>::deserialize(d).map(|o| Some(o.0))
}

/// An optional member that, when present, is not `null`: the schema gives it one type only.
fn not_null<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A marker that is `true` when present: the schema has no `false` there.
fn only_true<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match bool::deserialize(d)? {
        true => Ok(true),
        false => Err(D::Error::custom("must be `true` when present")),
    }
}

/// An array of objects.
fn objects<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    let items = Vec::<Object<T>>::deserialize(d)?;
    Ok(items.into_iter().map(|o| o.0).collect())
}

/// A unit-variant enum read from a string only: serde would also take `{"planner": null}`.
fn named<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(d: D) -> Result<T, D::Error> {
    let name = String::deserialize(d)?;
    T::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(&name))
        .map_err(D::Error::custom)
}

/// [`named`], or `null`.
fn named_or_null<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(name) => {
            T::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(&name))
                .map(Some)
                .map_err(D::Error::custom)
        }
    }
}

/// The question needs a character other than white space: Unicode white space or U+FEFF,
/// the union of Rust's and ECMA-262's `\s` (schema: `pattern: [^\s\u0085]`).
fn question<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let q = String::deserialize(d)?;
    if q.chars().all(|c| c.is_whitespace() || c == '\u{feff}') {
        return Err(D::Error::custom(
            "empty (the question needs a non-space character)",
        ));
    }
    Ok(q)
}

/// 64 lowercase hexadecimal digits (schema: `^[0-9a-f]{64}$`).
fn sha256_hex<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let h = String::deserialize(d)?;
    if h.len() != 64 || !h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(D::Error::custom(format!(
            "invalid value {h:?}, expected 64 lowercase hexadecimal digits"
        )));
    }
    Ok(Some(h))
}

/// The statuses a finished run can have.
pub const EXPECTED_STATUSES: [&str; 2] = ["SUCCESS", "FAILED"];

fn one_of(found: &str, allowed: &[&str]) -> String {
    let list: Vec<String> = allowed.iter().map(|a| format!("`{a}`")).collect();
    format!(
        "unknown variant `{found}`, expected one of {}",
        list.join(", ")
    )
}

fn expected_status<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if !EXPECTED_STATUSES.contains(&s.as_str()) {
        return Err(D::Error::custom(one_of(&s, &EXPECTED_STATUSES)));
    }
    Ok(s)
}

/// A node path names nodes of the diagnosis graph only.
fn node_path<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct Node(String);
    impl<'de> Deserialize<'de> for Node {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let s = String::deserialize(d)?;
            if !NODES.contains(&s.as_str()) {
                return Err(D::Error::custom(one_of(&s, &NODES)));
            }
            Ok(Node(s))
        }
    }
    // Through a sequence of `Node`, so a refusal names its index (`expected.path[2]`).
    Ok(Vec::<Node>::deserialize(d)?
        .into_iter()
        .map(|n| n.0)
        .collect())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedError {
    #[serde(deserialize_with = "named")]
    pub class: ErrorClass,
    pub message: String,
    /// The HTTP status of the refused request, when there was one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub status: Option<u16>,
    /// For a context overflow: the context size the server (or the configuration) stated.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub context_tokens: Option<u32>,
    /// Token counts the server reported for the failed request.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub usage: Option<Usage>,
    /// How the output contract was sent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "named_some"
    )]
    pub structured_output: Option<StructuredOutput>,
}

/// [`named`], as a present optional value.
fn named_some<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    named(d).map(Some)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRecord {
    pub invocation_id: String,
    pub tool_name: String,
    #[serde(default)]
    pub arguments: Value,
    pub output: Value,
    #[serde(deserialize_with = "named")]
    pub status: InvocationStatus,
    /// A plan step diag ran before the Executor's first turn (recorded with the agent
    /// `planner`); absent for a call a model asked for. A replay runs the plan's steps when
    /// its recording holds such calls.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "only_true"
    )]
    pub plan_step: bool,
}

/// What a replay must reproduce.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    #[serde(deserialize_with = "expected_status")]
    pub status: String,
    #[serde(deserialize_with = "node_path")]
    pub path: Vec<String>,
    #[serde(default, deserialize_with = "named_or_null")]
    pub effective_verdict: Option<Verdict>,
    pub degraded: bool,
    #[serde(default)]
    pub answer: Option<String>,
}

/// One field that differs from `expected`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    pub field: &'static str,
    pub expected: String,
    pub actual: String,
}

/// Field-by-field differences between expected and actual.
pub fn compare(expected: &Expected, actual: &Expected) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let mut check = |field: &'static str, e: String, a: String| {
        if e != a {
            out.push(Mismatch {
                field,
                expected: e,
                actual: a,
            });
        }
    };
    check("status", expected.status.clone(), actual.status.clone());
    check("path", expected.path.join(" → "), actual.path.join(" → "));
    let verdict = |v: &Option<Verdict>| v.map_or("none".to_string(), |v| v.as_str().to_string());
    check(
        "effective_verdict",
        verdict(&expected.effective_verdict),
        verdict(&actual.effective_verdict),
    );
    check(
        "degraded",
        expected.degraded.to_string(),
        actual.degraded.to_string(),
    );
    check(
        "answer",
        expected.answer.clone().unwrap_or_default(),
        actual.answer.clone().unwrap_or_default(),
    );
    out
}

impl RecordedResponse {
    pub fn from_response(r: &ChatResponse) -> Self {
        RecordedResponse {
            content: r.content.clone(),
            tool_calls: r.tool_calls.clone(),
            finish_reason: r.finish_reason.as_str().to_string(),
            usage: r.usage,
            structured_output: r.structured_output,
        }
    }

    pub fn to_response(&self) -> ChatResponse {
        ChatResponse {
            content: self.content.clone().filter(|c| !c.is_empty()),
            tool_calls: self.tool_calls.clone(),
            finish_reason: FinishReason::parse(Some(&self.finish_reason)),
            usage: self.usage,
            structured_output: self.structured_output,
        }
    }
}

impl RecordedError {
    pub fn from_error(e: &ModelError) -> Self {
        RecordedError {
            class: e.class,
            message: e.message.clone(),
            status: e.status,
            context_tokens: e.context_tokens,
            usage: e.usage,
            structured_output: e.structured_output,
        }
    }

    pub fn to_error(&self) -> ModelError {
        let mut e = ModelError::permanent(self.message.clone());
        e.class = self.class;
        e.status = self.status;
        e.context_tokens = self.context_tokens;
        e.usage = self.usage;
        e.structured_output = self.structured_output;
        e
    }
}

/// The version of the agent's prompt a recorded request was built with: the embedded prompt
/// its system message is, `None` when it is none of them.
pub fn prompt_version_of(agent: AgentRole, request: &diag_core::model::ChatRequest) -> Option<u32> {
    let first = request.messages.first()?;
    if first.role != diag_core::model::Role::System {
        return None;
    }
    diag_core::agent::prompts::version_of(agent, first.content.as_deref()?)
}

/// Why a run file could not be loaded; the message is one line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RunFileError {
    #[error("{file}: not valid JSON ({reason})")]
    Malformed { file: String, reason: String },
    #[error(
        "{file}: unknown run file format `{found}` (this diag reads `{FORMAT}` and `{FORMAT_V1}`)"
    )]
    UnknownFormat { file: String, found: String },
    #[error("{file}: {reason}")]
    Invalid { file: String, reason: String },
}

impl RunFile {
    /// Parses a run file: one leading UTF-8 byte order mark is skipped; any format other than
    /// `diag_run_v2` and `diag_run_v1` is refused before the rest is read; then every value
    /// must be one its schema (`docs/schema/diag_run_v2.json`, `…/diag_run_v1.json`) allows,
    /// and a refusal names the file and the path of the value (`run.json: exchanges[0].agent:
    /// unknown variant …`), on one line. A v1 file has no limits (`limits` is `None`, a
    /// `limits` member in it is ignored as unknown): it replays under [`Limits::DEFAULT`].
    pub fn parse(text: &str, file: &str) -> Result<RunFile, RunFileError> {
        let text = strip_bom(text);
        let mut value: Value = serde_json::from_str(text).map_err(|e| RunFileError::Malformed {
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
        if !FORMATS.contains(&found.as_str()) {
            return Err(RunFileError::UnknownFormat {
                file: file.to_string(),
                found: one_line(&found.chars().take(40).collect::<String>()),
            });
        }
        let invalid = |reason: String| RunFileError::Invalid {
            file: file.to_string(),
            reason: one_line(&reason),
        };
        // Exchanges are read one by one below: `kind` picks the record type, and the path of
        // a refusal inside one keeps its index (serde's tagged enums would lose the path).
        let exchanges = value.as_object_mut().and_then(|m| m.remove("exchanges"));
        if found == FORMAT_V1 {
            if let Some(m) = value.as_object_mut() {
                m.remove("limits");
            }
        }
        let mut run: RunFile = from_value_at("", value).map_err(invalid)?;
        if let Some(exchanges) = exchanges {
            let items: Vec<Value> = from_value_at("exchanges", exchanges).map_err(invalid)?;
            run.exchanges = items
                .into_iter()
                .enumerate()
                .map(|(i, x)| exchange_at(i, x))
                .collect::<Result<_, _>>()
                .map_err(invalid)?;
            one_prompt_version_per_agent(&run.exchanges).map_err(invalid)?;
        }
        Ok(run)
    }

    /// The limits the run ran under: the recorded ones, else today's defaults.
    pub fn limits(&self) -> Limits {
        self.limits.unwrap_or(Limits::DEFAULT)
    }

    /// The run file as pretty JSON with a trailing newline, always in the current format
    /// (a v1 file read and written again becomes a v2 file without `limits`, which means
    /// the same defaults).
    pub fn to_json(&self) -> String {
        // A file keeps the version it was loaded as, so `to_json` of a loaded file loads back
        // as the same value; a v1 value that carries limits (only code builds one) is written
        // as v2, since v1 would drop them.
        let current;
        let file = if self.format == FORMAT || (self.format == FORMAT_V1 && self.limits.is_none()) {
            self
        } else {
            current = RunFile {
                format: FORMAT.to_string(),
                ..self.clone()
            };
            &current
        };
        let mut s = serde_json::to_string_pretty(file).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// Rewrites a `diag_run_v1` file as `diag_run_v2` by a text edit that leaves every other
/// byte as it was: the `format` value becomes `diag_run_v2`, and a one-line `limits` member
/// with [`Limits::DEFAULT`] (the limits a v1 file replays under) follows it. `Ok(None)`: the
/// file is already v2. The result is checked: it loads, and it is the v1 file as loaded with
/// only `format` and `limits` set, so it replays exactly as the v1 file did.
pub fn upgrade_v1(text: &str, file: &str) -> Result<Option<String>, RunFileError> {
    let before = RunFile::parse(text, file)?;
    if before.format == FORMAT {
        return Ok(None);
    }
    let invalid = |reason: &str| RunFileError::Invalid {
        file: file.to_string(),
        reason: reason.to_string(),
    };
    let doc: Value =
        serde_json::from_str(strip_bom(text)).map_err(|e| RunFileError::Malformed {
            file: file.to_string(),
            reason: one_line(&e.to_string()),
        })?;
    if doc.get("limits").is_some() {
        return Err(invalid(
            "limits: a v1 file with a `limits` member is ambiguous (v1 ignores it); remove it \
             or write the file as v2 by hand",
        ));
    }
    let format = regex::Regex::new(r#""format"\s*:\s*"diag_run_v1""#)
        .map_err(|e| invalid(&e.to_string()))?;
    let mut matches = format.find_iter(text);
    let (Some(found), None) = (matches.next(), matches.next()) else {
        return Err(invalid(
            "the `format` member cannot be told apart in the text; upgrade the file by hand",
        ));
    };
    let limits = serde_json::to_string(&Limits::DEFAULT).map_err(|e| invalid(&e.to_string()))?;
    let line_start = text[..found.start()].rfind('\n').map_or(0, |i| i + 1);
    let indent = &text[line_start..found.start()];
    let separator = if indent.chars().all(|c| c == ' ' || c == '\t') && line_start > 0 {
        format!(",\n{indent}")
    } else {
        ", ".to_string()
    };
    // The format member keeps its own spacing: only its value changes.
    let format_member = found.as_str().replacen(FORMAT_V1, FORMAT, 1);
    let after = format!(
        "{}{format_member}{separator}\"limits\": {limits}{}",
        &text[..found.start()],
        &text[found.end()..]
    );
    let upgraded = RunFile::parse(&after, file)?;
    let expected = RunFile {
        format: FORMAT.to_string(),
        limits: Some(Limits::DEFAULT),
        ..before
    };
    if upgraded != expected {
        return Err(invalid(
            "the upgraded text does not load as the same run; upgrade the file by hand",
        ));
    }
    Ok(Some(after))
}

/// The text without one leading UTF-8 byte order mark (Windows editors write one).
pub fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Deserializes `value`, found at `at` in the file, into `T`; an error reads
/// `PATH: problem`, with the path of the offending value inside the file.
fn from_value_at<T: serde::de::DeserializeOwned>(at: &str, value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let path = match (at, inner.as_str()) {
            (at, "." | "?") => at.to_string(),
            ("", inner) => inner.to_string(),
            (at, inner) if inner.starts_with('[') => format!("{at}{inner}"),
            (at, inner) => format!("{at}.{inner}"),
        };
        let problem = e.into_inner().to_string();
        if path.is_empty() {
            problem
        } else {
            format!("{path}: {problem}")
        }
    })
}

/// Exchange `i`: a model call (exactly one of response and error) or a tool call.
fn exchange_at(i: usize, x: Value) -> Result<Exchange, String> {
    let here = format!("exchanges[{i}]");
    let kind = x.get("kind").map(|k| (k.as_str(), k.clone()));
    match kind {
        Some((Some("model"), _)) => {
            let m: ModelRecord = from_value_at(&here, x)?;
            if m.response.is_some() == m.error.is_some() {
                return Err(format!(
                    "{here}: a model exchange has exactly one of `response` and `error`"
                ));
            }
            if let Some(v) = m.prompt_version {
                if diag_core::agent::prompts::prompt_version(m.agent, v).is_none() {
                    let known = diag_core::agent::prompts::versions(m.agent)
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(format!(
                        "{here}.prompt_version: this diag has no version {v} of the {} prompt \
                         (it has {known})",
                        m.agent
                    ));
                }
            }
            Ok(Exchange::Model(m))
        }
        Some((Some("tool"), _)) => Ok(Exchange::Tool(from_value_at(&here, x)?)),
        // serde's own words for a wrong or unknown kind, at the kind.
        Some((_, k)) => {
            let e = serde_json::from_value::<Exchange>(serde_json::json!({ "kind": k }));
            Err(format!(
                "{here}.kind: {}",
                e.err().map_or_else(String::new, |e| e.to_string())
            ))
        }
        // Not an object (serde would read an array as a tagged sequence), or no kind.
        None => {
            from_value_at::<serde_json::Map<String, Value>>(&here, x.clone())?;
            from_value_at(&here, x)
        }
    }
}

/// A run builds every request of one agent with one prompt: a file whose exchanges of one
/// agent name two versions is refused at the second.
fn one_prompt_version_per_agent(exchanges: &[Exchange]) -> Result<(), String> {
    let mut seen: Vec<(AgentRole, u32)> = Vec::new();
    for (i, x) in exchanges.iter().enumerate() {
        let Exchange::Model(m) = x else { continue };
        let Some(v) = m.prompt_version else { continue };
        match seen.iter().find(|(a, _)| *a == m.agent) {
            Some((_, first)) if *first != v => {
                return Err(format!(
                    "exchanges[{i}].prompt_version: version {v} of the {} prompt, where an \
                     earlier exchange of the run names version {first}",
                    m.agent
                ))
            }
            Some(_) => {}
            None => seen.push((m.agent, v)),
        }
    }
    Ok(())
}

/// The longest text a loader error quotes from the file, in characters.
const ERROR_TEXT_MAX: usize = 200;

/// Control characters escaped (`\n`, `\u{1b}`), cut at [`ERROR_TEXT_MAX`] characters: what a
/// run file says never breaks the one-line error or writes to the terminal.
fn one_line(text: &str) -> String {
    let mut out = String::new();
    for c in diag_core::text::bounded(text, ERROR_TEXT_MAX).chars() {
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

    fn error_of(doc: &str) -> String {
        RunFile::parse(doc, "m.json").unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_path_of_the_bad_value() {
        let cases = [
            (
                MINIMAL.replace("2026-11-30T14:05:00Z", "yesterday"),
                "m.json: started_at: not an RFC 3339 date-time (",
            ),
            (
                MINIMAL.replace("\"planner\"", "\"wizard\""),
                "m.json: exchanges[0].agent: unknown variant `wizard`, expected one of `planner`",
            ),
            (
                MINIMAL.replace("\"transient\"", "\"flaky\""),
                "m.json: exchanges[2].error.class: unknown variant `flaky`",
            ),
            (
                MINIMAL.replace("\"ok\"}", "\"fine\"}"),
                "m.json: exchanges[1].status: unknown variant `fine`",
            ),
            (
                MINIMAL.replace("\"kind\": \"tool\"", "\"kind\": \"toll\""),
                "m.json: exchanges[1].kind: unknown variant `toll`, expected `model` or `tool`",
            ),
            (
                MINIMAL.replace("\"round\": 1", "\"round\": -1"),
                "m.json: exchanges[0].round: invalid value: integer `-1`",
            ),
            (
                MINIMAL.replace("\"why 502?\"", "\" \\n \""),
                "m.json: question: empty",
            ),
            (
                MINIMAL.replace("\"exchanges\": [", "\"expected\": {\"status\": \"DEGRADED\", \"path\": [], \"degraded\": false}, \"exchanges\": ["),
                "m.json: expected.status: unknown variant `DEGRADED`, expected one of `SUCCESS`, `FAILED`",
            ),
            (
                MINIMAL.replace("\"exchanges\": [", "\"expected\": {\"status\": \"FAILED\", \"path\": [\"planner\", \"wizard\"], \"degraded\": false}, \"exchanges\": ["),
                "m.json: expected.path[1]: unknown variant `wizard`",
            ),
            (
                MINIMAL.replace("\"exchanges\": [", "\"expected\": null, \"exchanges\": ["),
                "m.json: expected: invalid type: null",
            ),
            (
                MINIMAL.replace("\"turn\": 1,\n           \"response\"", "\"turn\": 1, \"request_sha256\": \"ABC\", \"response\""),
                "m.json: exchanges[0].request_sha256: invalid value \"ABC\"",
            ),
            (
                MINIMAL.replace("\"content\": \"{}\"", "\"content\": \"{}\", \"usage\": null"),
                "m.json: exchanges[0].response.usage: invalid type: null",
            ),
            (
                MINIMAL.replace("\"exchanges\": [", "\"exchanges\": 7, \"x\": ["),
                "m.json: exchanges: invalid type: integer `7`",
            ),
            (
                MINIMAL.replace("{\"kind\": \"tool\"", "[\"tool\"").replace("\"status\": \"ok\"}", "\"ok\"]").replace(": {\"matches\": []}", "").replace("\"invocation_id\": \"inv-1\", \"tool_name\": \"search_logs\",\n           \"arguments\": {\"query\": \"502\"}, \"output\",", ""),
                "m.json: exchanges[1]: invalid type: sequence",
            ),
        ];
        for (doc, want) in cases {
            let e = error_of(&doc);
            assert!(e.starts_with(want), "{e}\n  does not start with\n{want}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_leading_byte_order_mark_is_skipped() {
        let with_bom = format!("\u{feff}{MINIMAL}");
        let run = RunFile::parse(&with_bom, "m.json").unwrap();
        assert_eq!(run, RunFile::parse(MINIMAL, "m.json").unwrap());
        // Only one, and only at the start.
        let twice = format!("\u{feff}{with_bom}");
        assert!(matches!(
            RunFile::parse(&twice, "m.json"),
            Err(RunFileError::Malformed { .. })
        ));
        assert_eq!(strip_bom("a\u{feff}"), "a\u{feff}");
    }
}
