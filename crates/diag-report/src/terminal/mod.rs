//! Human output: the run header, the event timeline, tool invocations, the answer and its
//! computed values, as plain text for a terminal or a CI log. Pure functions over records;
//! the CLI prints them.

use std::fmt::{Display, Write as _};

pub mod grounding;

use diag_core::agent::runtime::{ModelExchange, PLAN_STEP_AGENT};
use diag_core::graph::{DetailValue, Event};
use diag_core::model::ModelError;
use diag_core::protocol::derivation::CheckedDerivation;
use diag_core::protocol::gatekeeper::CheckedBinding;
use diag_core::protocol::{GatekeeperRaw, ToolInvocation};

/// The run facts shown in a header.
pub struct Header<'a> {
    pub run_id: &'a str,
    pub session_id: &'a str,
    pub status: &'a str,
    pub question: &'a str,
    pub started_at: String,
    pub duration_ms: Option<u64>,
    pub effective_verdict: Option<&'a str>,
    pub degraded: bool,
    pub failure: Option<&'a str>,
}

/// Makes a one-line field safe to print: control characters become spaces, long text is cut.
pub use diag_core::text::one_line;

pub fn header(h: &Header<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "run      {}", h.run_id);
    let _ = writeln!(out, "session  {}", h.session_id);
    let _ = writeln!(out, "question {}", one_line(h.question, 200));
    let _ = write!(out, "status   {}", h.status);
    if let Some(f) = h.failure {
        let _ = write!(out, " ({})", one_line(f, 160));
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "verdict  {}{}",
        h.effective_verdict.unwrap_or("none"),
        if h.degraded {
            " (degraded: fallback answer)"
        } else {
            ""
        }
    );
    let _ = write!(out, "started  {}", h.started_at);
    if let Some(ms) = h.duration_ms {
        let _ = write!(out, "  duration {ms} ms");
    }
    out.push('\n');
    out
}

fn detail_text<O>(e: &Event<O>) -> String {
    e.detail
        .iter()
        .map(|(k, v)| match v {
            DetailValue::Bool(b) => format!("{k}={b}"),
            DetailValue::Int(i) => format!("{k}={i}"),
            DetailValue::Text(t) => format!("{k}={}", one_line(t, 60)),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The event timeline: one line per node attempt.
pub fn timeline<O: Display>(events: &[Event<O>]) -> String {
    let mut out = String::from("timeline\n");
    let _ = writeln!(
        out,
        "  {:>3}  {:<15} {:>3} {:>3}  {:<20} {:>8}  detail",
        "#", "node", "att", "rnd", "status", "ms"
    );
    for e in events {
        let _ = writeln!(
            out,
            "  {:>3}  {:<15} {:>3} {:>3}  {:<20} {:>8}  {}",
            e.seq,
            e.node,
            e.attempt,
            e.round,
            e.status.to_string(),
            e.duration_ms,
            detail_text(e)
        );
    }
    out
}

/// The tool invocations of a run, one line each, arguments compact and bounded.
pub fn invocations(list: &[ToolInvocation]) -> String {
    let mut out = String::from("tool calls\n");
    if list.is_empty() {
        out.push_str("  (none)\n");
    }
    for i in list {
        // A plan step diag ran before the Executor's first turn says so.
        let from = if i.agent == PLAN_STEP_AGENT {
            "plan step  "
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {:<7} r{} {:<20} {:<7} {:>6} ms  {from}{}",
            i.invocation_id,
            i.round,
            one_line(&i.tool_name, 40),
            i.status.as_str(),
            i.duration_ms,
            one_line(&i.arguments.to_string(), 100)
        );
    }
    out
}

/// The model calls that failed, one line each: where in the run, the failure class, the
/// reported tokens and the context size when known, then the endpoint's message (bounded; the
/// adapter already removed anything that looks like a key). Empty when none failed.
pub fn model_failures(failed: &[(&ModelExchange, &ModelError)]) -> String {
    if failed.is_empty() {
        return String::new();
    }
    let mut out = String::from("failed model calls\n");
    for (x, e) in failed {
        let mut numbers = Vec::new();
        if let Some(u) = e.usage {
            numbers.push(format!("prompt {} tokens", u.prompt_tokens));
        }
        if let Some(n) = e.context_tokens {
            numbers.push(format!("context {n} tokens"));
        }
        if let Some(form) = e.structured_output {
            numbers.push(format!("response_format {}", form.as_str()));
        }
        let numbers = if numbers.is_empty() {
            String::new()
        } else {
            format!(" ({})", numbers.join(", "))
        };
        let _ = writeln!(
            out,
            "  {:<9} r{} a{} t{}  {}{}\n    {}",
            x.agent.as_str(),
            x.round,
            x.attempt,
            x.turn,
            e.class.as_str(),
            numbers,
            one_line(&e.message, 300)
        );
    }
    out
}

/// Two texts that differ, made printable on one line each so the difference shows: short,
/// visibly different texts as they are (see [`one_line`]); otherwise a window of `max`
/// characters around the first difference on both sides, newlines and tabs written `\n` and
/// `\t`, with the character position of that difference. A long answer changed near its end,
/// or changed only in a line break, would otherwise print as two identical lines.
pub fn diff_excerpts(expected: &str, actual: &str, max: usize) -> (String, String, Option<usize>) {
    let (e, a) = (one_line(expected, max), one_line(actual, max));
    let fits = expected.chars().count() <= max && actual.chars().count() <= max;
    if fits && e != a {
        return (e, a, None);
    }
    let at = expected
        .chars()
        .zip(actual.chars())
        .position(|(x, y)| x != y)
        .unwrap_or_else(|| expected.chars().count().min(actual.chars().count()));
    let start = at.saturating_sub(max / 3);
    let window = |s: &str| {
        let mut out = String::new();
        if start > 0 {
            out.push('…');
        }
        for (shown, c) in s.chars().skip(start).enumerate() {
            if shown >= max {
                out.push('…');
                break;
            }
            match c {
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                c if c.is_control() => out.push(' '),
                c => out.push(c),
            }
        }
        out
    };
    (window(expected), window(actual), Some(at))
}

/// The bindings the Gatekeeper refused, one line each (claim, invocation, tool, pointer,
/// reason), so an operator sees why a claim did not reach the answer. Empty when none failed.
/// What stands for a binding's pointer that did not resolve in the recorded output.
pub const POINTER_NOT_FOUND: &str = "(pointer not found)";

/// A binding's pointer as it may be shown beside an answer or in a report: only when it
/// resolves in the recorded output of the invocation it names (openspec/specs/verified-evidence/spec.md,
/// "Nothing model-written that failed a check is shown"). A pointer that names nothing is
/// model-written text no check vouched for (`/db-1 disk failed at 13:55, replace it now` is a
/// valid RFC 6901 pointer).
pub fn shown_pointer<'b>(b: &'b CheckedBinding, invocations: &[ToolInvocation]) -> Option<&'b str> {
    let mut found = invocations
        .iter()
        .filter(|i| i.invocation_id == b.source_invocation_id);
    let (Some(inv), None) = (found.next(), found.next()) else {
        return None;
    };
    diag_core::protocol::json_pointer::resolve(&inv.output, &b.raw_path)
        .ok()
        .map(|_| b.raw_path.as_str())
}

pub fn refused_bindings(raw: Option<&GatekeeperRaw>, invocations: &[ToolInvocation]) -> String {
    let Some(raw) = raw else {
        return String::new();
    };
    let refused: Vec<_> = raw.checked_bindings.iter().filter(|b| !b.passed).collect();
    // Claims refused although every binding passed: for what they say (openspec/specs/verified-evidence/spec.md).
    let for_content: Vec<_> = raw
        .refused_claims
        .iter()
        .filter(|c| c.code != diag_core::protocol::gatekeeper::ClaimRefusal::FailedBinding)
        .collect();
    if refused.is_empty() && for_content.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    if !for_content.is_empty() {
        let _ = writeln!(
            out,
            "gatekeeper refused {} claim(s) for what they say",
            for_content.len()
        );
        for c in &for_content {
            let token = c.token.as_ref().map_or(String::new(), |t| {
                format!(" {} `{}`", t.kind.as_str(), one_line(&t.text, 60))
            });
            let _ = writeln!(
                out,
                "  {:<7} {}{token}",
                one_line(&c.claim_id, 20),
                c.code.as_str()
            );
        }
    }
    if refused.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "gatekeeper refused {} of {} binding(s)",
        refused.len(),
        raw.checked_bindings.len()
    );
    for b in refused {
        let _ = writeln!(
            out,
            "  {:<7} {:<7} {:<20} {:<24} {}",
            one_line(&b.claim_id, 20),
            one_line(&b.source_invocation_id, 20),
            one_line(&b.tool_name, 40),
            shown_pointer(b, invocations)
                .map_or_else(|| POINTER_NOT_FOUND.to_string(), |p| one_line(p, 60)),
            one_line(b.failure.as_deref().unwrap_or("failed"), 40)
        );
    }
    out
}

/// The answer block; the answer was already rendered safe when it was produced, and is
/// cleaned again here because a stored answer may come from an older or foreign file.
pub fn answer(text: Option<&str>) -> String {
    match text {
        Some(a) => format!("answer\n{}\n", diag_diagnosis::render_answer(a).trim_end()),
        None => "answer\n  (none)\n".to_string(),
    }
}

/// The answer's computed values, after the answer: `computed values` then one line each,
/// `d1: 96 % = 48 / 50 × 100 (c6, c4)`, and how many stored ones are not shown. Empty when
/// the answer has none.
pub fn derivations(shown: &[CheckedDerivation], left_out: usize) -> String {
    if shown.is_empty() && left_out == 0 {
        return String::new();
    }
    let mut out = String::from("computed values\n");
    for d in shown {
        let _ = writeln!(
            out,
            "  {}: {}",
            one_line(&d.id, 32),
            one_line(&d.shown(), 400)
        );
    }
    if left_out > 0 {
        let _ = writeln!(
            out,
            "  ({left_out} more stored computed value(s) not shown)"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use diag_core::clock::Timestamp;
    use diag_core::graph::Detail;

    #[test]
    fn differences_show_even_far_into_a_long_text_or_in_a_line_break() {
        // Short and visibly different: as they are.
        assert_eq!(
            diff_excerpts("PASS", "REJECT", 200),
            ("PASS".to_string(), "REJECT".to_string(), None)
        );
        // Different only past the cut: a window around the difference.
        let long = "x".repeat(300);
        let (e, a, at) = diff_excerpts(
            &format!("{long} peak hours"),
            &format!("{long} PEAK hours"),
            40,
        );
        assert_eq!(at, Some(301));
        assert!(e.starts_with('…') && e.contains("x peak hours"), "{e}");
        assert!(a.starts_with('…') && a.contains("x PEAK hours"), "{a}");
        assert_ne!(e, a);
        // Different only in a line break: the break is written out.
        let (e, a, at) = diff_excerpts("one\ntwo", "one two", 200);
        assert_eq!(at, Some(3));
        assert_eq!((e.as_str(), a.as_str()), ("one\\ntwo", "one two"));
        // One text a prefix of the other: the difference is where the shorter one ends.
        let (_, _, at) = diff_excerpts("same", "same, longer", 200);
        assert_eq!(at, None, "short and visibly different");
        let (e, a, at) = diff_excerpts(&"y".repeat(250), &format!("{}!", "y".repeat(250)), 30);
        assert_eq!(at, Some(250));
        assert_ne!(e, a);
    }

    #[test]
    fn failed_model_calls_show_class_numbers_and_the_message_on_bounded_lines() {
        use diag_core::agent::AgentRole;
        use diag_core::model::{ChatRequest, ErrorClass, ModelError, StructuredOutput, Usage};
        assert_eq!(model_failures(&[]), "");
        let mut e = ModelError::from_status(
            400,
            format!(
                "HTTP 400 Bad Request: maximum context length is 512 tokens\n{}",
                "x".repeat(400)
            ),
        );
        e.class = ErrorClass::ContextOverflow;
        e.context_tokens = Some(512);
        e.usage = Some(Usage {
            prompt_tokens: 1300,
            completion_tokens: 0,
        });
        e.structured_output = Some(StructuredOutput::JsonObjectSchema);
        let x = ModelExchange {
            agent: AgentRole::Planner,
            round: 1,
            attempt: 1,
            turn: 1,
            request: ChatRequest::new(Vec::new()),
            outcome: Err(e.clone()),
        };
        let text = model_failures(&[(&x, &e)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "failed model calls");
        assert_eq!(
            lines[1],
            "  planner   r1 a1 t1  context_overflow (prompt 1300 tokens, context 512 tokens, \
             response_format json_object_schema)"
        );
        assert!(lines[2]
            .starts_with("    HTTP 400 Bad Request: maximum context length is 512 tokens x"));
        assert_eq!(lines.len(), 3, "the message stays on one line");
        assert!(lines[2].chars().count() <= 4 + 301);
    }

    #[test]
    fn timeline_lines_are_fixed_and_bounded() {
        let mut detail = Detail::default();
        detail.insert("reason", "prose_around_json");
        let e = Event {
            seq: 1,
            node: "planner".to_string(),
            attempt: 2,
            round: 1,
            status: "INVALID_OUTPUT".to_string(),
            started_at: Timestamp::from_unix_ms(0),
            duration_ms: 12,
            detail,
        };
        let t = timeline(&[e]);
        assert!(t.contains("planner"), "{t}");
        assert!(t.contains("INVALID_OUTPUT"));
        assert!(t.contains("reason=prose_around_json"));
        assert_eq!(t.lines().count(), 3);
    }

    #[test]
    fn one_line_strips_controls_and_cuts() {
        assert_eq!(one_line("a\u{1b}[2Jb\nc", 100), "a [2Jb c");
        assert_eq!(one_line("abcdef", 3), "abc…");
    }
}
