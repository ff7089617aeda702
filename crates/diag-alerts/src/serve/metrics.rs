//! `GET /metrics` of `diag serve`, in Prometheus' text format (version 0.0.4), encoded by the
//! Prometheus project's `prometheus-client` (openspec/specs/alerts/spec.md, "Metrics").
//!
//! The series:
//! - `diag_serve_queue_notifications{state}`: the store's queue by state, read at each scrape
//!   (so every instance on one PostgreSQL store shows the same shared queue);
//! - `diag_serve_store_up`: 1 when the store answered that read, 0 when it did not;
//! - `diag_serve_notifications_total{result}`: webhook notifications taken by this process,
//!   `queued` or `duplicate`;
//! - `diag_serve_webhook_refused_total{reason}`: webhook requests refused, by reason;
//! - `diag_serve_investigations_total{status,verdict}`: runs this process finished, by final
//!   status and verdict (`none` when there is none);
//! - `diag_serve_investigation_duration_seconds`: their durations, a histogram;
//! - `diag_serve_model_calls_total{agent}` and `diag_serve_model_tokens_total{agent,kind}`:
//!   the model calls of those runs and their prompt and completion tokens, by agent;
//! - `diag_serve_connections_open` and `diag_serve_connections_refused_total`: connections
//!   held now, and those closed at once past `max_connections`;
//! - `diag_build_info{version}`: 1.
//!
//! Counters count from the process's start, as Prometheus expects (`rate()` and `increase()`
//! read across restarts). Nothing here carries a token, a question or an alert's labels.

use prometheus_client::encoding::{prometheus_text, EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use diag_core::agent::AgentRole;
use diag_core::store::alerts::QueueCounts;
use diag_core::store::RunStatus;

/// The `Content-Type` of the answer.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Upper bounds of the duration histogram's buckets, in seconds: from a replayed run to a
/// slow model's several minutes.
const DURATION_BUCKETS: [f64; 12] = [
    0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];

/// Why the webhook refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Refusal {
    /// No or a wrong bearer token (401).
    unauthorized,
    /// Larger than `max_body_bytes` (413).
    too_large,
    /// Not sent within `body_read_timeout_secs` (408).
    body_timeout,
    /// The connection failed while the body was read (400).
    unreadable,
    /// Past `max_requests_per_sec` (429).
    rate_limited,
    /// Not an Alertmanager notification (400).
    bad_document,
    /// The queue holds `max_queue` (503).
    queue_full,
    /// The store could not be written (503).
    store_unavailable,
}

impl Refusal {
    /// The reason as `/metrics` labels it (`unauthorized`, `bad_document`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::unauthorized => "unauthorized",
            Refusal::too_large => "too_large",
            Refusal::body_timeout => "body_timeout",
            Refusal::unreadable => "unreadable",
            Refusal::rate_limited => "rate_limited",
            Refusal::bad_document => "bad_document",
            Refusal::queue_full => "queue_full",
            Refusal::store_unavailable => "store_unavailable",
        }
    }
}

/// What queueing a notification did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Taken {
    queued,
    duplicate,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabel {
    result: Taken,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabel {
    reason: Refusal,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RunLabels {
    status: &'static str,
    verdict: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AgentLabel {
    agent: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TokenLabels {
    agent: &'static str,
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// One finished run, as the metrics count it.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedRun {
    pub status: RunStatus,
    /// The verdict's name (`PASS`, …), `None` when the run has none.
    pub verdict: Option<&'static str>,
    pub duration_secs: f64,
    /// `(agent, prompt tokens, completion tokens)` per model call.
    pub calls: Vec<(AgentRole, u64, u64)>,
}

/// The metrics of one `diag serve` process.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    queue: Family<StateLabel, Gauge>,
    store_up: Gauge,
    notifications: Family<ResultLabel, Counter>,
    refused: Family<ReasonLabel, Counter>,
    investigations: Family<RunLabels, Counter>,
    duration: Histogram,
    model_calls: Family<AgentLabel, Counter>,
    model_tokens: Family<TokenLabels, Counter>,
    connections_open: Gauge,
    connections_refused: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let queue = Family::<StateLabel, Gauge>::default();
        registry.register(
            "diag_serve_queue_notifications",
            "Notifications in the store's alert queue, by state",
            queue.clone(),
        );
        let store_up = Gauge::default();
        registry.register(
            "diag_serve_store_up",
            "1 when the run store answered the last scrape's queue read, else 0",
            store_up.clone(),
        );
        let notifications = Family::<ResultLabel, Counter>::default();
        registry.register(
            "diag_serve_notifications",
            "Webhook notifications taken, by result (queued or duplicate)",
            notifications.clone(),
        );
        let refused = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "diag_serve_webhook_refused",
            "Webhook requests refused, by reason",
            refused.clone(),
        );
        let investigations = Family::<RunLabels, Counter>::default();
        registry.register(
            "diag_serve_investigations",
            "Investigations finished by this process, by final status and verdict",
            investigations.clone(),
        );
        let duration = Histogram::new(DURATION_BUCKETS);
        registry.register(
            "diag_serve_investigation_duration_seconds",
            "How long finished investigations took",
            duration.clone(),
        );
        let model_calls = Family::<AgentLabel, Counter>::default();
        registry.register(
            "diag_serve_model_calls",
            "Model calls of finished investigations, by agent",
            model_calls.clone(),
        );
        let model_tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "diag_serve_model_tokens",
            "Model tokens of finished investigations, by agent and kind (prompt or completion)",
            model_tokens.clone(),
        );
        let connections_open = Gauge::default();
        registry.register(
            "diag_serve_connections_open",
            "HTTP connections open now",
            connections_open.clone(),
        );
        let connections_refused = Counter::default();
        registry.register(
            "diag_serve_connections_refused",
            "Connections closed as soon as accepted, past max_connections",
            connections_refused.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register("diag_build_info", "The diag build serving", build);
        Metrics {
            registry,
            queue,
            store_up,
            notifications,
            refused,
            investigations,
            duration,
            model_calls,
            model_tokens,
            connections_open,
            connections_refused,
        }
    }

    pub fn taken(&self, taken: Taken) {
        self.notifications
            .get_or_create(&ResultLabel { result: taken })
            .inc();
    }

    pub fn refused(&self, reason: Refusal) {
        self.refused.get_or_create(&ReasonLabel { reason }).inc();
    }

    pub fn connection_opened(&self) {
        self.connections_open.inc();
    }

    pub fn connection_closed(&self) {
        self.connections_open.dec();
    }

    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    pub fn finished(&self, run: &FinishedRun) {
        self.investigations
            .get_or_create(&RunLabels {
                status: run.status.as_str(),
                verdict: run.verdict.unwrap_or("none"),
            })
            .inc();
        self.duration.observe(run.duration_secs);
        for (agent, prompt, completion) in &run.calls {
            let agent = agent.as_str();
            self.model_calls.get_or_create(&AgentLabel { agent }).inc();
            for (kind, n) in [("prompt", prompt), ("completion", completion)] {
                self.model_tokens
                    .get_or_create(&TokenLabels { agent, kind })
                    .inc_by(*n);
            }
        }
    }

    /// The text a scrape gets, with the queue as `counts` says (`None`: the store did not
    /// answer; the queue's series keep their last values and `diag_serve_store_up` is 0).
    pub fn render(&self, counts: Option<QueueCounts>) -> Result<String, std::fmt::Error> {
        match counts {
            Some(c) => {
                for (state, n) in [
                    ("queued", c.queued),
                    ("claimed", c.claimed),
                    ("done", c.done),
                    ("resolved", c.resolved),
                    ("failed", c.failed),
                ] {
                    self.queue
                        .get_or_create(&StateLabel { state })
                        .set(i64::try_from(n).unwrap_or(i64::MAX));
                }
                self.store_up.set(1);
            }
            None => {
                self.store_up.set(0);
            }
        }
        let mut text = String::new();
        prometheus_text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_series_read_as_prometheus_text() {
        let m = Metrics::new();
        m.taken(Taken::queued);
        m.taken(Taken::queued);
        m.taken(Taken::duplicate);
        m.refused(Refusal::unauthorized);
        m.finished(&FinishedRun {
            status: RunStatus::Success,
            verdict: Some("PASS"),
            duration_secs: 3.0,
            calls: vec![(AgentRole::Planner, 100, 20), (AgentRole::Planner, 50, 5)],
        });
        let text = m
            .render(Some(QueueCounts {
                queued: 4,
                claimed: 1,
                done: 7,
                resolved: 0,
                failed: 2,
            }))
            .unwrap();
        for line in [
            "diag_serve_queue_notifications{state=\"queued\"} 4",
            "diag_serve_queue_notifications{state=\"failed\"} 2",
            "diag_serve_store_up 1",
            "diag_serve_notifications_total{result=\"queued\"} 2",
            "diag_serve_notifications_total{result=\"duplicate\"} 1",
            "diag_serve_webhook_refused_total{reason=\"unauthorized\"} 1",
            "diag_serve_investigations_total{status=\"SUCCESS\",verdict=\"PASS\"} 1",
            "diag_serve_investigation_duration_seconds_bucket{le=\"5\"} 1",
            "diag_serve_investigation_duration_seconds_bucket{le=\"2.5\"} 0",
            "diag_serve_investigation_duration_seconds_count 1",
            "diag_serve_model_calls_total{agent=\"planner\"} 2",
            "diag_serve_model_tokens_total{agent=\"planner\",kind=\"prompt\"} 150",
            "diag_serve_model_tokens_total{agent=\"planner\",kind=\"completion\"} 25",
            "# TYPE diag_serve_investigation_duration_seconds histogram",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        assert!(text.contains("diag_build_info{version=\""), "{text}");
        let down = m.render(None).unwrap();
        assert!(down.lines().any(|l| l == "diag_serve_store_up 0"), "{down}");
    }
}
