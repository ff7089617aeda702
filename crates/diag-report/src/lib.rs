//! `diag-report`: what a reader sees of a run. The terminal text of `diag ask` and `diag
//! trace` ([`terminal`]), and reports of a stored run for people who were not at the
//! terminal: one self-contained HTML file (`html`) and GitHub-flavoured Markdown for a ticket
//! or a CI comment (`markdown`).
//!
//! Pure functions: the stored records (run row, events, model calls, tool invocations) and
//! the compiled topology in, one `String` out. No clock, no locale, no I/O, no randomness:
//! the same run gives byte-identical reports.
//!
//! Everything a model or a tool wrote is untrusted. In HTML it is escaped, the answer's
//! Markdown is rendered with raw HTML turned into text, images turned into text and links
//! kept only for `http`, `https` and `mailto`; the page carries a Content-Security-Policy
//! that allows no script, no fetch and no external style (`default-src 'none'`). In
//! Markdown, the same rules keep anything a renderer would execute or fetch out of the file.

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod documents;
pub mod html;
pub mod markdown;
pub mod svg;
pub mod terminal;
pub mod timeline;
pub mod view;

use diag_core::agent::content_calls::answer_tool_calls;
use diag_core::agent::runtime::AgentStepRecord;
use diag_core::graph::{Event, GraphShape};
use diag_core::protocol::ToolInvocation;
use diag_core::store::RunRow;
use diag_core::store::{Store, StoreError};

/// One model call and how many tool calls its answer requested.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCall {
    pub step: AgentStepRecord,
    /// Tool calls in the model's answer, its own or written in its content (0 for a failed
    /// call or a final answer); these are the next invocations of the run, in order.
    pub tool_calls: usize,
}

/// A stored run, as the store hands it back.
#[derive(Debug, Clone, PartialEq)]
pub struct RunData {
    pub run: RunRow,
    pub events: Vec<Event<String>>,
    pub model_calls: Vec<ModelCall>,
    pub invocations: Vec<ToolInvocation>,
    /// The alert group the run investigated (`diag investigate`, `diag serve`).
    pub alerts: Option<diag_core::store::alerts::RunAlerts>,
}

/// Reads everything a report of `run_id` shows from the store; `None` for an unknown run.
/// (The one function here that does I/O: rendering stays a pure function of what it reads.)
pub fn from_store(store: &Store, run_id: &str) -> Result<Option<RunData>, StoreError> {
    let Some(run) = store.get_run(run_id)? else {
        return Ok(None);
    };
    let events = store.events(&run.run_id)?;
    let steps = store.agent_steps(&run.run_id)?;
    let exchanges = store.exchanges(&run.run_id)?;
    let invocations = store.invocations(&run.run_id)?;
    let alerts = store.run_alerts(&run.run_id)?;
    let model_calls = steps
        .into_iter()
        .map(|s| ModelCall {
            tool_calls: exchanges.iter().find(|x| x.seq == s.seq).map_or(0, |x| {
                x.exchange
                    .outcome
                    .as_ref()
                    .map_or(0, |r| answer_tool_calls(&x.exchange.request.tools, r).len())
            }),
            step: s.step,
        })
        .collect();
    Ok(Some(RunData {
        run,
        events,
        model_calls,
        invocations,
        alerts,
    }))
}

/// A report format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One self-contained HTML file.
    Html,
    /// GitHub-flavoured Markdown.
    Md,
}

impl Format {
    /// The format a file name asks for: `.html`/`.htm` or `.md`/`.markdown`
    /// (case-insensitive); `None` for anything else.
    pub fn from_path(path: &std::path::Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "html" | "htm" => Some(Format::Html),
            "md" | "markdown" => Some(Format::Md),
            _ => None,
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Format::Html => "html",
            Format::Md => "md",
        }
    }
}

/// Renders a report of `data` in `format`; `shape` is the compiled topology (the HTML graph).
pub fn render(format: Format, data: &RunData, shape: &GraphShape) -> String {
    match format {
        Format::Html => html::render(data, shape),
        Format::Md => markdown::render(data),
    }
}

/// Why a stored run's report cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The diagnosis topology does not compile (a defect of this build, not of the run).
    #[error("topology does not compile: {0}")]
    Topology(String),
}

/// The report of stored run `run_id` in `format`, as `diag report` writes it and `diag mcp`'s
/// `report` tool returns it; `None` for an unknown run.
pub fn stored_report(
    store: &Store,
    run_id: &str,
    format: Format,
) -> Result<Option<String>, ReportError> {
    let Some(data) = from_store(store, run_id)? else {
        return Ok(None);
    };
    let shape = diag_diagnosis::topology::shape()
        .map_err(|e| ReportError::Topology(e.to_string()))?
        .shape();
    Ok(Some(render(format, &data, &shape)))
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than tab and newline have no business in a report.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Whether a link target may stay a link: `http`, `https`, `mailto` or a fragment of this
/// page. Everything else (`javascript:`, `data:`, `file:`, relative paths) is shown as text.
pub fn safe_link(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    if let Some(fragment) = lower.strip_prefix('#') {
        return fragment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    }
    (lower.starts_with("https://") || lower.starts_with("http://") || lower.starts_with("mailto:"))
        && !url.chars().any(|c| c.is_control() || c.is_whitespace())
}

/// A duration for people: `850 ms`, `12.4 s`, `3 min 5 s`.
pub fn human_ms(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{}.{} s", ms / 1000, (ms % 1000) / 100)
    } else {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_kept_only_for_safe_schemes() {
        for ok in [
            "https://x.example/a",
            "http://x",
            "mailto:a@b",
            "#c1",
            "#inv-3",
        ] {
            assert!(safe_link(ok), "{ok}");
        }
        for bad in [
            "javascript:alert(1)",
            " JavaScript:alert(1)",
            "data:text/html,x",
            "file:///etc/passwd",
            "//evil.example/x",
            "relative/path",
            "vbscript:x",
            "#a\"b",
            "https://x.example/a b",
        ] {
            assert!(!safe_link(bad), "{bad}");
        }
    }

    #[test]
    fn durations_read_the_same_everywhere() {
        assert_eq!(human_ms(0), "0 ms");
        assert_eq!(human_ms(1_234), "1.2 s");
        assert_eq!(human_ms(185_000), "3 min 5 s");
    }

    #[test]
    fn html_escapes_markup_and_quotes() {
        assert_eq!(
            escape_html("<a href=\"x\" onclick='y'>&\u{1b}"),
            "&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;\u{FFFD}"
        );
    }
}
