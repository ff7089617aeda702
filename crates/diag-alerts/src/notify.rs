//! Where a result goes besides the store: a generic webhook (`[notify]` of the
//! configuration), so a chat or ticket system can pick up each diagnosis. One JSON `POST` per
//! finished run (schema [`NOTIFY_SCHEMA`]): the alert, the run's status, verdict and answer,
//! a Markdown comment ready to post, and the report's link. No vendor SDKs: a receiver that
//! wants Slack's or a tracker's shape maps this one.
//!
//! A delivery that fails is one warning line; it never changes the run, which is stored
//! before anything is sent.

use std::time::Duration;

use serde::Serialize;

use diag_core::alert::AlertGroup;
use diag_core::clock::Timestamp;
use diag_core::text::one_line;

use crate::investigate::GroupOutcome;
use crate::links::ReportLinks;

/// The `schema` member of a result webhook's body.
pub const NOTIFY_SCHEMA: &str = "diag.alert_result.v1";

/// Where results are posted.
#[derive(Debug, Clone)]
pub struct NotifyTarget {
    pub url: String,
    /// Sent as `Authorization: Bearer <token>`; read from the environment variable the
    /// configuration names, never stored.
    pub token: Option<String>,
    /// The root under which `diag serve` serves reports (`…/runs/RUN_ID/report`), for the
    /// link; `None`: no link.
    pub report_base: Option<String>,
    /// What signs each link so that it opens that one report in a browser
    /// ([`crate::links`]); `None`: a bare link, which opens only with `diag serve`'s read
    /// token.
    pub links: Option<ReportLinks>,
}

impl NotifyTarget {
    /// The link to `run_id`'s report made at `now`, if the target has a report root.
    pub fn report_url(&self, run_id: &str, now: Timestamp) -> Option<String> {
        let base = self.report_base.as_ref()?;
        let query = self
            .links
            .as_ref()
            .map(|l| l.query(run_id, now))
            .unwrap_or_default();
        Some(format!(
            "{}/runs/{run_id}/report{query}",
            base.trim_end_matches('/')
        ))
    }
}

/// The body of one result webhook.
#[derive(Debug, Clone, Serialize)]
pub struct ResultMessage {
    pub schema: &'static str,
    pub run_id: String,
    pub alert: AlertSummary,
    pub status: diag_core::store::RunStatus,
    pub verdict: Option<diag_core::protocol::Verdict>,
    pub degraded: bool,
    pub answer: Option<String>,
    pub failure: Option<String>,
    pub report_url: Option<String>,
    /// The same, as a Markdown comment.
    pub markdown: String,
}

/// The alert a result is about.
#[derive(Debug, Clone, Serialize)]
pub struct AlertSummary {
    pub title: String,
    pub group_key: String,
    pub identity: String,
    pub fingerprints: Vec<String>,
    pub starts_at: Option<diag_core::clock::Timestamp>,
}

/// The result message for `group`'s run, made at `now` (when its report link's time starts).
pub fn message(
    target: &NotifyTarget,
    group: &AlertGroup,
    outcome: &GroupOutcome,
    now: Timestamp,
) -> ResultMessage {
    let report_url = target.report_url(&outcome.run_id, now);
    let title = group.title();
    let mut markdown = format!("### diag: {}\n\n", markdown_text(&title));
    markdown.push_str(&format!(
        "Run `{}`: **{}**",
        outcome.run_id,
        outcome.status.as_str()
    ));
    if let Some(v) = outcome.verdict {
        markdown.push_str(&format!(", verdict **{}**", v.as_str()));
    }
    if outcome.degraded {
        markdown.push_str(" (a Fallback answered)");
    }
    markdown.push_str("\n\n");
    match (&outcome.answer, &outcome.failure) {
        (Some(answer), _) => {
            for line in answer.lines() {
                markdown.push_str("> ");
                markdown.push_str(&markdown_text(line));
                markdown.push('\n');
            }
        }
        (None, Some(f)) => markdown.push_str(&format!("Failed: {}\n", markdown_text(f))),
        (None, None) => {}
    }
    if let Some(url) = &report_url {
        markdown.push_str(&format!("\n[Report]({url})\n"));
    }
    ResultMessage {
        schema: NOTIFY_SCHEMA,
        run_id: outcome.run_id.clone(),
        alert: AlertSummary {
            title,
            group_key: group.group_key.clone(),
            identity: group.identity(),
            fingerprints: group.alerts.iter().map(|a| a.fingerprint.clone()).collect(),
            starts_at: group.starts_at(),
        },
        status: outcome.status,
        verdict: outcome.verdict,
        degraded: outcome.degraded,
        answer: outcome.answer.clone(),
        failure: outcome.failure.clone(),
        report_url,
        markdown,
    }
}

/// Text a Markdown renderer shows as written: no HTML, links or images of its own.
fn markdown_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in diag_core::text::controls_to_spaces(s).chars() {
        if matches!(
            c,
            '<' | '>' | '[' | ']' | '!' | '`' | '*' | '_' | '\\' | '|'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Posts `message` to the target; `Err` is one line for a warning.
pub async fn post(target: &NotifyTarget, message: &ResultMessage) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("diag/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| one_line(&e.to_string(), 200))?;
    let mut request = client.post(&target.url).json(message);
    if let Some(token) = &target.token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(|e| {
        format!(
            "result webhook {}: {}",
            one_line(&target.url, 120),
            one_line(&e.to_string(), 200)
        )
    })?;
    if !response.status().is_success() {
        return Err(format!(
            "result webhook {} answered HTTP {}",
            one_line(&target.url, 120),
            response.status().as_u16()
        ));
    }
    Ok(())
}
