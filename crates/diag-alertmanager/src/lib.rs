//! Alerts from Prometheus' Alertmanager (openspec/specs/alerts/spec.md), as plain data: the
//! alerts its API v2 lists (`GET /api/v2/alerts`) and the notifications its webhook receiver
//! sends (payload version 4), parsed strictly; alerts grouped as Alertmanager groups them;
//! the identity by which a group is investigated once; and the question a group asks.
//!
//! Nothing here does I/O: the command line fetches the API's answer and `diag serve` reads a
//! webhook's body, then hand the bytes to [`parse_api_alerts`] and [`parse_webhook`].
//!
//! Rules, written once for both routes:
//! - an alert must have at least one label, a fingerprint and a `startsAt`; a document with
//!   an alert that breaks this is refused whole, so nothing of it is stored half-way;
//! - a group's alerts are ordered by fingerprint, and its identity ([`AlertGroup::identity`])
//!   hashes the group key, the notification's status and each alert's fingerprint and
//!   `startsAt`, so the same alerts delivered again are recognised, and an alert that fires
//!   anew (a later `startsAt`) is a new group;
//! - the question ([`AlertQuestion`]) says only what the alert says (its labels, annotations,
//!   times and expression), so every fact in it is one the operator's question shows, and the
//!   Planner gets the window to search as RFC 3339 times.
//!
//! Its own crate, pure, below the run store (which keeps alert groups and the notification
//! queue) and the services that fetch and receive alerts (`diag-alerts`).

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use diag_graph::clock::Timestamp;
use diag_records::text::one_line;

/// The labels an investigation groups by when `--group-by` does not say: the alert's name and
/// the label that names its service (`service`, else `job`).
pub const DEFAULT_GROUP_BY: &[&str] = &["alertname", "service", "job"];

/// How far before an alert started its investigation looks, when not configured.
pub const DEFAULT_LOOKBACK: Duration = Duration::from_secs(15 * 60);

/// The webhook payload version diag takes (Alertmanager 0.16 and later send it).
pub const WEBHOOK_VERSION: &str = "4";

/// Most characters of one label value or annotation quoted into a question.
const QUOTED_CHARS: usize = 400;

/// Whether an alert fires or has resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertStatus {
    Firing,
    Resolved,
}

impl AlertStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Firing => "firing",
            AlertStatus::Resolved => "resolved",
        }
    }

    /// The status a stored text names.
    pub fn parse(text: &str) -> Option<AlertStatus> {
        match text {
            "firing" => Some(AlertStatus::Firing),
            "resolved" => Some(AlertStatus::Resolved),
            _ => None,
        }
    }
}

impl fmt::Display for AlertStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One alert, as diag keeps it (with its run, and in the queue of `diag serve`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alert {
    /// Alertmanager's fingerprint of the label set.
    pub fingerprint: String,
    pub status: AlertStatus,
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    pub starts_at: Timestamp,
    /// When it resolved (or will, by its timeout); `None` when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<Timestamp>,
    /// The link back to what fired it (Prometheus' graph URL, holding the expression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator_url: Option<String>,
}

impl Alert {
    /// The alert's name (`alertname`), or `""`.
    pub fn name(&self) -> &str {
        self.labels.get("alertname").map_or("", String::as_str)
    }

    /// The service the alert is about: its `service` label, else `job`, `app`, `namespace`.
    pub fn service(&self) -> Option<&str> {
        ["service", "job", "app", "namespace"]
            .iter()
            .find_map(|k| self.labels.get(*k))
            .map(String::as_str)
            .filter(|s| !s.trim().is_empty())
    }

    /// The PromQL expression that fired it, read from a Prometheus `generatorURL`
    /// (`…/graph?g0.expr=…`).
    pub fn expression(&self) -> Option<String> {
        let url = self.generator_url.as_deref()?;
        let (_, query) = url.split_once('?')?;
        let query = query.split('#').next().unwrap_or("");
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "g0.expr")
            .map(|(_, v)| v.into_owned())
            .filter(|v| !v.trim().is_empty())
    }
}

/// Alerts investigated together, in fingerprint order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertGroup {
    /// Alertmanager's `groupKey` for a webhook's group; for the API's alerts, the grouping
    /// labels as `{alertname="…", service="…"}`.
    pub group_key: String,
    pub alerts: Vec<Alert>,
}

impl AlertGroup {
    /// A group of `alerts` under `group_key`, its alerts put in fingerprint order.
    pub fn new(group_key: String, mut alerts: Vec<Alert>) -> AlertGroup {
        alerts.sort_by(|a, b| {
            (a.fingerprint.as_str(), a.starts_at).cmp(&(b.fingerprint.as_str(), b.starts_at))
        });
        AlertGroup { group_key, alerts }
    }

    /// The status of the notification: firing while any alert fires.
    pub fn status(&self) -> AlertStatus {
        if self.alerts.iter().any(|a| a.status == AlertStatus::Firing) {
            AlertStatus::Firing
        } else {
            AlertStatus::Resolved
        }
    }

    /// Identifies the group for "investigated once": the sha256 (hex) of the group key, the
    /// status, and each alert's fingerprint and `startsAt`, in fingerprint order.
    pub fn identity(&self) -> String {
        let mut text = format!(
            "diag-alert-group-v1\n{}\n{}\n",
            self.group_key,
            self.status()
        );
        for a in &self.alerts {
            text.push_str(&format!("{}@{}\n", a.fingerprint, a.starts_at));
        }
        diag_records::hash::sha256_hex(text.as_bytes())
    }

    /// When the group's first alert started.
    pub fn starts_at(&self) -> Option<Timestamp> {
        self.alerts.iter().map(|a| a.starts_at).min()
    }

    /// A one-line name for tables: the first alert's name and service.
    pub fn title(&self) -> String {
        let Some(first) = self.alerts.first() else {
            return one_line(&self.group_key, 80);
        };
        let name = if first.name().is_empty() {
            "(unnamed)"
        } else {
            first.name()
        };
        let mut title = one_line(name, 80);
        if let Some(service) = first.service() {
            title.push_str(&format!(" {}", one_line(service, 60)));
        }
        if self.alerts.len() > 1 {
            title.push_str(&format!(" (+{})", self.alerts.len() - 1));
        }
        title
    }
}

/// Why an Alertmanager document was refused (one line each).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum AlertError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not an Alertmanager {what}: {detail}")]
    Shape { what: &'static str, detail: String },
    #[error("unknown webhook payload version {0:?} (diag takes version \"4\")")]
    Version(String),
    #[error("alert {index} has no labels")]
    NoLabels { index: usize },
    #[error("alert {index} has no fingerprint")]
    NoFingerprint { index: usize },
    #[error("alert {index}: {field} is not an RFC 3339 time: {value:?}")]
    Time {
        index: usize,
        field: &'static str,
        value: String,
    },
    #[error("alert {index}: unknown status {value:?}")]
    Status { index: usize, value: String },
}

/// An alert as both of Alertmanager's documents write it (API v2's `gettableAlert`, webhook
/// v4's `alerts[]`); what differs is read beside it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireAlert {
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    starts_at: Option<String>,
    #[serde(default)]
    ends_at: Option<String>,
    #[serde(default, rename = "generatorURL")]
    generator_url: Option<String>,
    #[serde(default)]
    fingerprint: Option<String>,
    /// Webhook: `"firing"`/`"resolved"`; API v2: `{"state": …, "silencedBy": […], …}`.
    #[serde(default)]
    status: Option<serde_json::Value>,
}

/// Alertmanager writes an unknown time as the zero time (`0001-01-01T00:00:00Z`).
fn wire_time(
    index: usize,
    field: &'static str,
    value: Option<&str>,
) -> Result<Option<Timestamp>, AlertError> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let t = Timestamp::parse_rfc3339(value).map_err(|_| AlertError::Time {
        index,
        field,
        value: one_line(value, 60),
    })?;
    Ok((t.unix_ms() > 0).then_some(t))
}

impl WireAlert {
    fn into_alert(self, index: usize, status: AlertStatus) -> Result<Alert, AlertError> {
        if self.labels.is_empty() {
            return Err(AlertError::NoLabels { index });
        }
        let fingerprint = self
            .fingerprint
            .filter(|f| !f.trim().is_empty())
            .ok_or(AlertError::NoFingerprint { index })?;
        let starts_at =
            wire_time(index, "startsAt", self.starts_at.as_deref())?.ok_or(AlertError::Time {
                index,
                field: "startsAt",
                value: self.starts_at.unwrap_or_default(),
            })?;
        let ends_at = wire_time(index, "endsAt", self.ends_at.as_deref())?;
        Ok(Alert {
            fingerprint,
            status,
            labels: self.labels,
            annotations: self.annotations,
            starts_at,
            ends_at,
            generator_url: self.generator_url.filter(|u| !u.is_empty()),
        })
    }
}

/// How Alertmanager's API v2 says an alert stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiState {
    Active,
    /// Silenced or inhibited.
    Suppressed {
        silenced: bool,
        inhibited: bool,
    },
    Unprocessed,
}

/// One alert the API listed, with how it stands and which receivers it goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedAlert {
    pub alert: Alert,
    pub state: ApiState,
    pub receivers: Vec<String>,
}

/// Parses the body of `GET /api/v2/alerts`.
pub fn parse_api_alerts(body: &[u8]) -> Result<Vec<ListedAlert>, AlertError> {
    let raw: Vec<serde_json::Value> = serde_json::from_slice(body).map_err(|e| {
        if e.is_data() {
            AlertError::Shape {
                what: "API v2 alert list",
                detail: one_line(&e.to_string(), 200),
            }
        } else {
            AlertError::NotJson(one_line(&e.to_string(), 200))
        }
    })?;
    raw.into_iter()
        .enumerate()
        .map(|(index, value)| {
            let receivers = value
                .get("receivers")
                .and_then(|r| r.as_array())
                .map(|r| {
                    r.iter()
                        .filter_map(|x| x.get("name").and_then(|n| n.as_str()))
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let wire: WireAlert = serde_json::from_value(value).map_err(|e| AlertError::Shape {
                what: "API v2 alert",
                detail: format!("alert {index}: {}", one_line(&e.to_string(), 200)),
            })?;
            let state = api_state(index, wire.status.as_ref())?;
            // The API lists the alerts that have not resolved; each fires.
            let status = AlertStatus::Firing;
            Ok(ListedAlert {
                alert: wire.into_alert(index, status)?,
                state,
                receivers,
            })
        })
        .collect()
}

fn api_state(index: usize, status: Option<&serde_json::Value>) -> Result<ApiState, AlertError> {
    let Some(status) = status else {
        return Ok(ApiState::Active);
    };
    let state = status
        .get("state")
        .and_then(|s| s.as_str())
        .unwrap_or("active");
    let non_empty = |k: &str| {
        status
            .get(k)
            .and_then(|v| v.as_array())
            .is_some_and(|a| !a.is_empty())
    };
    match state {
        "active" => Ok(ApiState::Active),
        "suppressed" => Ok(ApiState::Suppressed {
            silenced: non_empty("silencedBy"),
            inhibited: non_empty("inhibitedBy"),
        }),
        "unprocessed" => Ok(ApiState::Unprocessed),
        other => Err(AlertError::Status {
            index,
            value: one_line(other, 40),
        }),
    }
}

/// One webhook notification (payload version 4): the group Alertmanager sent, its alerts
/// split by status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookNotification {
    pub receiver: String,
    /// The notification's status: `firing` while any of its alerts fires.
    pub status: AlertStatus,
    pub group_key: String,
    /// The group's alerts that fire (what an investigation looks at).
    pub firing: AlertGroup,
    /// The group's alerts that have resolved.
    pub resolved: AlertGroup,
    /// How many alerts Alertmanager left out of the payload (`max_alerts`).
    pub truncated_alerts: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePayload {
    version: Option<serde_json::Value>,
    #[serde(default)]
    group_key: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    receiver: Option<String>,
    #[serde(default)]
    truncated_alerts: Option<u64>,
    alerts: Option<Vec<WireAlert>>,
}

/// Parses a webhook body (payload version 4). The whole notification is refused when any part
/// of it is (an unknown version, an alert without labels, a time that is not one).
pub fn parse_webhook(body: &[u8]) -> Result<WebhookNotification, AlertError> {
    let wire: WirePayload = serde_json::from_slice(body).map_err(|e| {
        if e.is_data() {
            AlertError::Shape {
                what: "webhook payload",
                detail: one_line(&e.to_string(), 200),
            }
        } else {
            AlertError::NotJson(one_line(&e.to_string(), 200))
        }
    })?;
    let version = match &wire.version {
        Some(serde_json::Value::String(v)) => v.clone(),
        Some(other) => other.to_string(),
        None => {
            return Err(AlertError::Shape {
                what: "webhook payload",
                detail: "no `version`".into(),
            })
        }
    };
    if version != WEBHOOK_VERSION {
        return Err(AlertError::Version(one_line(&version, 20)));
    }
    let shape = |detail: &str| AlertError::Shape {
        what: "webhook payload",
        detail: detail.into(),
    };
    let group_key = wire
        .group_key
        .filter(|k| !k.is_empty())
        .ok_or_else(|| shape("no `groupKey`"))?;
    let alerts = wire.alerts.ok_or_else(|| shape("no `alerts`"))?;
    if alerts.is_empty() {
        return Err(shape("`alerts` is empty"));
    }
    let mut firing = Vec::new();
    let mut resolved = Vec::new();
    for (index, a) in alerts.into_iter().enumerate() {
        let status = match a.status.as_ref().and_then(|s| s.as_str()) {
            Some(s) => AlertStatus::parse(s).ok_or_else(|| AlertError::Status {
                index,
                value: one_line(s, 40),
            })?,
            None => {
                return Err(AlertError::Status {
                    index,
                    value: String::new(),
                })
            }
        };
        let alert = a.into_alert(index, status)?;
        match status {
            AlertStatus::Firing => firing.push(alert),
            AlertStatus::Resolved => resolved.push(alert),
        }
    }
    let status = match wire.status.as_deref() {
        Some(s) => AlertStatus::parse(s)
            .ok_or_else(|| shape(&format!("unknown status {:?}", one_line(s, 40))))?,
        None => return Err(shape("no `status`")),
    };
    Ok(WebhookNotification {
        receiver: wire.receiver.unwrap_or_default(),
        status,
        firing: AlertGroup::new(group_key.clone(), firing),
        resolved: AlertGroup::new(group_key.clone(), resolved),
        group_key,
        truncated_alerts: wire.truncated_alerts.unwrap_or(0),
    })
}

/// Groups alerts by the values of the labels `by` (a label an alert lacks groups as empty),
/// as Alertmanager's `group_by` does. Groups come in the order of their first `startsAt`,
/// then of their key.
pub fn group_alerts(alerts: Vec<Alert>, by: &[String]) -> Vec<AlertGroup> {
    let mut groups: BTreeMap<String, Vec<Alert>> = BTreeMap::new();
    for alert in alerts {
        let key = by
            .iter()
            .filter_map(|l| alert.labels.get(l).map(|v| format!("{l}={v:?}")))
            .collect::<Vec<_>>()
            .join(", ");
        groups.entry(format!("{{{key}}}")).or_default().push(alert);
    }
    let mut groups: Vec<AlertGroup> = groups
        .into_iter()
        .map(|(key, alerts)| AlertGroup::new(key, alerts))
        .collect();
    groups.sort_by(|a, b| (a.starts_at(), &a.group_key).cmp(&(b.starts_at(), &b.group_key)));
    groups
}

/// The question an alert group asks, and the window it looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertQuestion {
    pub text: String,
    /// The start of the window: the first alert's `startsAt` less the look-back.
    pub since: Timestamp,
    pub service: Option<String>,
}

/// The question for `group`: what fires, for which service, since when, what the alert says
/// of itself, the expression that fired it, and the window to look at (from `lookback`
/// before the first alert started). Only the alert's own words and values are in it.
pub fn question_for(group: &AlertGroup, lookback: Duration) -> AlertQuestion {
    let first = group.alerts.first();
    let starts = group.starts_at().unwrap_or(Timestamp::from_unix_ms(0));
    let since = Timestamp::from_unix_ms(
        starts
            .unix_ms()
            .saturating_sub(i64::try_from(lookback.as_millis()).unwrap_or(i64::MAX)),
    );
    let service = first.and_then(|a| a.service()).map(str::to_string);
    let name = first
        .map(Alert::name)
        .filter(|n| !n.is_empty())
        .unwrap_or("(unnamed)");
    let mut text = format!("Why is the alert {} firing", one_line(name, 120));
    if let Some(s) = &service {
        text.push_str(&format!(" for {}", one_line(s, 120)));
    }
    text.push_str(&format!(" since {starts}?"));
    if group.alerts.len() > 1 {
        text.push_str(&format!(
            " {} alerts fire in this group.",
            group.alerts.len()
        ));
    }
    if let Some(a) = first {
        for key in ["summary", "description"] {
            if let Some(v) = a.annotations.get(key).filter(|v| !v.trim().is_empty()) {
                text.push_str(&format!(" {}: {}", capitalised(key), sentence(v)));
            }
        }
        let labels: Vec<String> = a
            .labels
            .iter()
            .map(|(k, v)| format!("{}={}", one_line(k, 60), one_line(v, 120)))
            .collect();
        text.push_str(&format!(" Labels: {}.", labels.join(", ")));
        if let Some(expr) = a.expression() {
            text.push_str(&format!(" Alert expression: {}", sentence(&expr)));
        }
    }
    text.push_str(&format!(
        " Look at {since} and later ({} before it started).",
        human_duration(lookback)
    ));
    AlertQuestion {
        text,
        since,
        service,
    }
}

fn capitalised(word: &str) -> String {
    let mut c = word.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// A quoted value as one line ending in a full stop.
fn sentence(v: &str) -> String {
    let line = diag_records::text::collapse_whitespace(&one_line(v.trim(), QUOTED_CHARS));
    if line.ends_with(['.', '!', '?', '…']) {
        line
    } else {
        format!("{line}.")
    }
}

fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => "0 s".to_string(),
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    const WEBHOOK: &str = r#"{
      "version": "4", "groupKey": "{}:{alertname=\"CheckoutHigh502Rate\"}", "truncatedAlerts": 0,
      "status": "firing", "receiver": "diag",
      "groupLabels": {"alertname": "CheckoutHigh502Rate"}, "commonLabels": {}, "commonAnnotations": {},
      "externalURL": "http://am:9093",
      "alerts": [
        {"status": "firing", "labels": {"alertname": "CheckoutHigh502Rate", "service": "checkout-service"},
         "annotations": {"summary": "checkout returns 502 for 5% of requests"},
         "startsAt": "2026-12-03T19:58:00.123456789Z", "endsAt": "0001-01-01T00:00:00Z",
         "generatorURL": "http://prom:9090/graph?g0.expr=sum%28rate%28http_requests_total%7Bcode%3D%22502%22%7D%5B5m%5D%29%29+%3E+0.05&g0.tab=1",
         "fingerprint": "b2"},
        {"status": "resolved", "labels": {"alertname": "CheckoutHigh502Rate", "service": "checkout-service", "pod": "a"},
         "annotations": {}, "startsAt": "2026-12-03T19:50:00Z", "endsAt": "2026-12-03T19:55:00Z",
         "generatorURL": "", "fingerprint": "a1"}
      ]}"#;

    #[test]
    fn a_webhook_notification_is_read_with_its_alerts_split_by_status() {
        let n = parse_webhook(WEBHOOK.as_bytes()).unwrap();
        assert_eq!(n.status, AlertStatus::Firing);
        assert_eq!(n.receiver, "diag");
        assert_eq!(n.firing.alerts.len(), 1);
        assert_eq!(n.resolved.alerts.len(), 1);
        let a = &n.firing.alerts[0];
        assert_eq!(a.starts_at, ts("2026-12-03T19:58:00.123Z"));
        assert_eq!(a.ends_at, None, "the zero time is no time");
        assert_eq!(
            a.expression().as_deref(),
            Some("sum(rate(http_requests_total{code=\"502\"}[5m])) > 0.05")
        );
        assert_eq!(n.resolved.alerts[0].generator_url, None);
        assert_eq!(
            n.resolved.alerts[0].ends_at,
            Some(ts("2026-12-03T19:55:00Z"))
        );
    }

    #[test]
    fn a_bad_webhook_is_refused_whole_with_one_line() {
        type Expect = fn(&AlertError) -> bool;
        let cases: [(&str, Expect); 6] = [
            ("{", |e| matches!(e, AlertError::NotJson(_))),
            (
                r#"{"version":"3","groupKey":"k","status":"firing","alerts":[]}"#,
                |e| matches!(e, AlertError::Version(v) if v == "3"),
            ),
            (r#"{"groupKey":"k","status":"firing","alerts":[]}"#, |e| {
                matches!(e, AlertError::Shape { .. })
            }),
            (
                r#"{"version":"4","groupKey":"k","status":"firing","alerts":[{"status":"firing","labels":{},"fingerprint":"f","startsAt":"2026-12-03T19:58:00Z"}]}"#,
                |e| matches!(e, AlertError::NoLabels { index: 0 }),
            ),
            (
                r#"{"version":"4","groupKey":"k","status":"firing","alerts":[{"status":"firing","labels":{"a":"b"},"fingerprint":"f","startsAt":"yesterday"}]}"#,
                |e| {
                    matches!(
                        e,
                        AlertError::Time {
                            field: "startsAt",
                            ..
                        }
                    )
                },
            ),
            (
                r#"{"version":"4","groupKey":"k","status":"firing","alerts":[{"status":"burning","labels":{"a":"b"},"fingerprint":"f","startsAt":"2026-12-03T19:58:00Z"}]}"#,
                |e| matches!(e, AlertError::Status { .. }),
            ),
        ];
        for (body, expected) in cases {
            let e = parse_webhook(body.as_bytes()).unwrap_err();
            assert!(expected(&e), "{body}: {e:?}");
            assert!(!e.to_string().contains('\n'));
        }
    }

    #[test]
    fn the_identity_changes_with_a_new_start_and_not_with_the_order_of_alerts() {
        let n = parse_webhook(WEBHOOK.as_bytes()).unwrap();
        let mut both: Vec<Alert> = n.firing.alerts.clone();
        both.extend(n.resolved.alerts.clone());
        let a = AlertGroup::new("k".into(), both.clone());
        both.reverse();
        let b = AlertGroup::new("k".into(), both.clone());
        assert_eq!(a.identity(), b.identity());
        assert_eq!(a.alerts[0].fingerprint, "a1");
        both[0].starts_at = ts("2026-12-03T21:00:00Z");
        assert_ne!(
            AlertGroup::new("k".into(), both.clone()).identity(),
            a.identity()
        );
        assert_ne!(
            AlertGroup::new("other".into(), both).identity(),
            b.identity()
        );
    }

    #[test]
    fn api_alerts_keep_their_state_and_group_by_labels() {
        let body = r#"[
          {"labels":{"alertname":"A","service":"x"},"annotations":{},"startsAt":"2026-12-03T10:00:00Z","endsAt":"2026-12-03T11:00:00Z","fingerprint":"1","receivers":[{"name":"r"}],"status":{"state":"active","silencedBy":[],"inhibitedBy":[]},"updatedAt":"2026-12-03T10:00:00Z"},
          {"labels":{"alertname":"A","service":"x","pod":"p2"},"startsAt":"2026-12-03T09:00:00Z","fingerprint":"2","status":{"state":"suppressed","silencedBy":["s"],"inhibitedBy":[]}},
          {"labels":{"alertname":"B"},"startsAt":"2026-12-03T08:00:00Z","fingerprint":"3","status":{"state":"unprocessed"}}
        ]"#;
        let listed = parse_api_alerts(body.as_bytes()).unwrap();
        assert_eq!(listed[0].state, ApiState::Active);
        assert_eq!(listed[0].receivers, ["r"]);
        assert_eq!(
            listed[1].state,
            ApiState::Suppressed {
                silenced: true,
                inhibited: false
            }
        );
        assert_eq!(listed[2].state, ApiState::Unprocessed);
        let by: Vec<String> = DEFAULT_GROUP_BY.iter().map(|s| s.to_string()).collect();
        let groups = group_alerts(listed.into_iter().map(|l| l.alert).collect(), &by);
        let keys: Vec<&str> = groups.iter().map(|g| g.group_key.as_str()).collect();
        assert_eq!(
            keys,
            [r#"{alertname="B"}"#, r#"{alertname="A", service="x"}"#]
        );
        assert_eq!(groups[1].alerts.len(), 2);
        assert!(parse_api_alerts(b"{}").is_err());
        assert!(matches!(
            parse_api_alerts(
                br#"[{"labels":{},"fingerprint":"1","startsAt":"2026-12-03T10:00:00Z"}]"#
            ),
            Err(AlertError::NoLabels { index: 0 })
        ));
    }

    #[test]
    fn the_question_says_what_the_alert_says_and_the_window() {
        let n = parse_webhook(WEBHOOK.as_bytes()).unwrap();
        let q = question_for(&n.firing, Duration::from_secs(15 * 60));
        assert_eq!(q.service.as_deref(), Some("checkout-service"));
        assert_eq!(q.since, ts("2026-12-03T19:43:00.123Z"));
        assert_eq!(
            q.text,
            "Why is the alert CheckoutHigh502Rate firing for checkout-service since \
             2026-12-03T19:58:00.123Z? Summary: checkout returns 502 for 5% of requests. \
             Labels: alertname=CheckoutHigh502Rate, service=checkout-service. Alert expression: \
             sum(rate(http_requests_total{code=\"502\"}[5m])) > 0.05. Look at \
             2026-12-03T19:43:00.123Z and later (15 min before it started)."
        );
    }
}
