//! The routes of `diag serve`.
//!
//! - `POST /alertmanager` (and `POST /`): Alertmanager's webhook. In order: the bearer token
//!   (401), the body's size (413), the request rate (429 with `Retry-After`), the document
//!   (400, `diag_core::alert::parse_webhook`), then one `enqueue` in the store: 202
//!   `{"queued": ID, "duplicate": BOOL, "status": "firing"|"resolved"}`, or 503 with
//!   `Retry-After` when the queue is full or the store cannot be written (Alertmanager
//!   delivers again). A refused request stores nothing.
//! - `GET /runs/RUN_ID/report`: the stored run's report, HTML (`?format=md`: Markdown); 404
//!   for an unknown run. It opens by a signed link (`?expires=…&sig=…`, [`crate::links`]:
//!   403 for another run, a changed expiry or an expired link) or with the read token; the
//!   webhook token gets 403. Every answer is `Cache-Control: private`, `Referrer-Policy:
//!   no-referrer`, with the file reports' Content-Security-Policy.
//! - `GET /metrics`: no token; Prometheus' text format ([`super::metrics`]).
//! - `GET /healthz`: no token; `{"status": "ok", "queue": {counts}}`, 503 when the store
//!   does not answer.
//!
//! Every error is one line of JSON, `{"error": "…"}`. The store's calls are synchronous (a
//! SQLite file, or the PostgreSQL handle's own runtime): they run on tokio's blocking threads,
//! so a slow store never stalls the server's other requests.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use diag_core::alert::{parse_webhook, AlertStatus};
use diag_core::store::alerts::{Enqueued, NewNotification};
use diag_core::text::one_line;
use diag_report::Format;

use super::limits::{authorized, read_body, retry_after_secs, BodyError};
use super::metrics::{self, Refusal, Taken};
use super::Shared;
use crate::links::{self, LinkCheck};

/// How long Alertmanager is asked to wait when the queue is full or the store unavailable.
const RETRY_AFTER_BUSY_SECS: u64 = 10;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/alertmanager", post(webhook))
        .route("/", post(webhook))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/runs/{run_id}/report", get(report))
        .fallback(not_found)
        .with_state(shared)
}

/// The address a request came from (set on every connection).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub std::net::SocketAddr);

/// The one line an error response says, kept with the response for the log.
#[derive(Debug, Clone)]
struct ErrorLine(String);

/// One line of JSON: `{"error": "…"}`.
fn error(status: StatusCode, message: &str) -> Response {
    let line = one_line(message, 300);
    let mut r = (status, Json(json!({ "error": line.clone() }))).into_response();
    r.extensions_mut().insert(ErrorLine(line));
    r
}

/// Logs a refused request: at info level, and as a line on stderr (`diag serve: refused
/// POST /alertmanager from 10.0.0.7:51234: 401 unauthorized: …`) so that an operator sees why
/// deliveries fail. What it names: the method, the route, the peer's address, the status,
/// the reason and diag's own message; never a header, so never a token. Requests refused
/// for the rate (429) are only counted and logged at debug level: a flood must not flood
/// stderr too.
fn log_refusal(
    shared: &Shared,
    method: &str,
    route: &str,
    peer: Option<Peer>,
    reason: &str,
    response: &Response,
) {
    let status = response.status().as_u16();
    let message = response
        .extensions()
        .get::<ErrorLine>()
        .map_or("", |l| l.0.as_str());
    let from = peer.map_or_else(|| "an unknown address".to_string(), |p| p.0.to_string());
    let line = format!("refused {method} {route} from {from}: {status} {reason}: {message}");
    if reason == "rate_limited" {
        tracing::debug!(peer = %from, status, reason, "{line}");
        return;
    }
    tracing::info!(peer = %from, status, reason, "{line}");
    (shared.server.events)(line);
}

fn with_retry_after(mut response: Response, secs: u64) -> Response {
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

fn unauthorized() -> Response {
    let mut r = error(
        StatusCode::UNAUTHORIZED,
        "a bearer token is required (Authorization: Bearer …)",
    );
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// Whether the request may go on: no token configured, or the right one sent.
fn token_ok(shared: &Shared, headers: &HeaderMap) -> bool {
    match &shared.server.settings.token {
        None => true,
        Some(token) => authorized(headers, token),
    }
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such route")
}

async fn webhook(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let peer = request.extensions().get::<Peer>().copied();
    let route = if request.uri().path() == "/" {
        "/"
    } else {
        "/alertmanager"
    };
    let response = take_webhook(&shared, request).await;
    if let Some(reason) = response.extensions().get::<Refusal>() {
        shared.metrics.refused(*reason);
        log_refusal(&shared, "POST", route, peer, reason.as_str(), &response);
    }
    response
}

/// A refusal, marked with its reason for the metrics.
fn refused(reason: Refusal, response: Response) -> Response {
    let mut response = response;
    response.extensions_mut().insert(reason);
    response
}

async fn take_webhook(shared: &Shared, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if !token_ok(shared, &parts.headers) {
        return refused(Refusal::unauthorized, unauthorized());
    }
    let settings = &shared.server.settings;
    let read = tokio::time::timeout(
        settings.body_read_timeout,
        read_body(&parts.headers, body, settings.max_body_bytes),
    )
    .await;
    let body = match read {
        Err(_) => {
            return refused(
                Refusal::body_timeout,
                error(
                    StatusCode::REQUEST_TIMEOUT,
                    &format!(
                        "the body was not sent within {} s ([serve] body_read_timeout_secs)",
                        settings.body_read_timeout.as_secs()
                    ),
                ),
            )
        }
        Ok(Ok(b)) => b,
        Ok(Err(BodyError::TooLarge)) => {
            return refused(
                Refusal::too_large,
                error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!(
                        "the body is larger than {} bytes ([serve] max_body_bytes)",
                        settings.max_body_bytes
                    ),
                ),
            )
        }
        Ok(Err(BodyError::Unreadable(e))) => {
            return refused(
                Refusal::unreadable,
                error(
                    StatusCode::BAD_REQUEST,
                    &format!("the body could not be read: {e}"),
                ),
            )
        }
    };
    if let Err(wait) = shared.rate.take(Instant::now()) {
        return refused(
            Refusal::rate_limited,
            with_retry_after(
                error(
                    StatusCode::TOO_MANY_REQUESTS,
                    &format!(
                        "more than {} requests a second ([serve] max_requests_per_sec)",
                        settings.max_requests_per_sec
                    ),
                ),
                retry_after_secs(wait),
            ),
        );
    }
    let notification = match parse_webhook(&body) {
        Ok(n) => n,
        Err(e) => {
            return refused(
                Refusal::bad_document,
                error(StatusCode::BAD_REQUEST, &e.to_string()),
            )
        }
    };
    // A firing notification queues its firing alerts; one whose alerts have all resolved is
    // recorded as resolved, never investigated.
    let group = if notification.firing.alerts.is_empty() {
        notification.resolved
    } else {
        notification.firing
    };
    let record = NewNotification::new(notification.receiver, group, shared.server.clock.now());
    let status = record.status;
    let store = shared.server.store.clone();
    let max_queue = settings.max_queue;
    let queued = tokio::task::spawn_blocking(move || store.enqueue(&record, max_queue)).await;
    let busy = |reason: Refusal, message: String| {
        refused(
            reason,
            with_retry_after(
                error(StatusCode::SERVICE_UNAVAILABLE, &message),
                RETRY_AFTER_BUSY_SECS,
            ),
        )
    };
    match queued {
        Ok(Ok(Enqueued::Queued(id))) => {
            if status == AlertStatus::Firing {
                shared.wake.notify_one();
            }
            tracing::info!(id, %status, "alert notification queued");
            shared.metrics.taken(Taken::queued);
            accepted(id, false, status)
        }
        Ok(Ok(Enqueued::Duplicate(id))) => {
            shared.metrics.taken(Taken::duplicate);
            accepted(id, true, status)
        }
        Ok(Ok(Enqueued::Full)) => busy(
            Refusal::queue_full,
            format!(
                "the queue holds {max_queue} notifications ([serve] max_queue); try again later"
            ),
        ),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "a notification could not be queued");
            (shared.server.events)(format!(
                "warning: a notification could not be queued: {}",
                one_line(&e.to_string(), 300)
            ));
            busy(
                Refusal::store_unavailable,
                format!("the run store is unavailable: {e}"),
            )
        }
        Err(e) => busy(
            Refusal::store_unavailable,
            format!("the notification could not be queued: {e}"),
        ),
    }
}

fn accepted(id: i64, duplicate: bool, status: AlertStatus) -> Response {
    (
        StatusCode::ACCEPTED,
        Json(json!({ "queued": id, "duplicate": duplicate, "status": status.as_str() })),
    )
        .into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let store = shared.server.store.clone();
    let counts = match tokio::task::spawn_blocking(move || store.queue_counts()).await {
        Ok(Ok(counts)) => Some(counts),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "the queue could not be read for /metrics");
            None
        }
        Err(_) => None,
    };
    match shared.metrics.render(counts) {
        Ok(text) => {
            let mut r = Response::new(Body::from(text));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            r
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    let store = shared.server.store.clone();
    match tokio::task::spawn_blocking(move || store.queue_counts()).await {
        Ok(Ok(counts)) => (
            StatusCode::OK,
            Json(json!({ "status": "ok", "queue": counts })),
        )
            .into_response(),
        Ok(Err(e)) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("the run store is unavailable: {e}"),
        ),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// Who may read a report: a signed link to that run, or the read token. The webhook token
/// never opens one (403, so that a reader is not told to send it). `None`: the request may
/// read it; else the refusal.
fn report_refusal(
    shared: &Shared,
    run_id: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Option<Response> {
    let settings = &shared.server.settings;
    let forbidden = |message: &str| error(StatusCode::FORBIDDEN, message);
    match (query.get("expires"), query.get("sig")) {
        (Some(expires), Some(sig)) => {
            let now = shared.server.clock.now();
            return match links::check(&settings.links.key, run_id, expires, sig, now) {
                LinkCheck::Valid => None,
                LinkCheck::Expired => Some(forbidden("this report link has expired")),
                LinkCheck::Forged => Some(forbidden("this report link is not valid")),
            };
        }
        (None, None) => {}
        _ => {
            return Some(forbidden(
                "this report link is not valid (it needs both expires and sig)",
            ))
        }
    }
    if headers.contains_key(header::AUTHORIZATION) {
        if let Some(read) = &settings.read_token {
            if authorized(headers, read) {
                return None;
            }
        }
        if let Some(webhook) = &settings.token {
            if authorized(headers, webhook) {
                return Some(forbidden(
                    "the webhook token does not open reports (use a report link or the read token)",
                ));
            }
        }
        return Some(forbidden("this token does not open reports"));
    }
    let mut r = error(
        StatusCode::UNAUTHORIZED,
        "a report opens by its link (expires and sig) or with the read token",
    );
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Some(r)
}

async fn report(
    State(shared): State<Arc<Shared>>,
    Path(run_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    peer: Option<axum::Extension<Peer>>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = report_refusal(&shared, &run_id, &query, &headers) {
        let reason = match refused.status() {
            StatusCode::UNAUTHORIZED => "unauthorized",
            _ => "forbidden",
        };
        let route = format!("/runs/{}/report", one_line(&run_id, 80));
        log_refusal(&shared, "GET", &route, peer.map(|p| p.0), reason, &refused);
        return with_report_headers(refused);
    }
    let format = match query.get("format").map(String::as_str) {
        None | Some("html") => Format::Html,
        Some("md") => Format::Md,
        Some(other) => {
            return with_report_headers(error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "unknown report format {:?} (html or md)",
                    one_line(other, 20)
                ),
            ))
        }
    };
    let store = shared.server.store.clone();
    let id = run_id.clone();
    let rendered =
        tokio::task::spawn_blocking(move || diag_report::stored_report(&store, &id, format)).await;
    let response = match rendered {
        Ok(Ok(Some(text))) => {
            let content_type = match format {
                Format::Html => "text/html; charset=utf-8",
                Format::Md => "text/markdown; charset=utf-8",
            };
            let mut r = Response::new(Body::from(text));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            r
        }
        Ok(Ok(None)) => error(
            StatusCode::NOT_FOUND,
            &format!("no run {}", one_line(&run_id, 80)),
        ),
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    with_report_headers(response)
}

/// What every answer of the report route carries: kept out of shared caches, no referrer
/// (the link is the authority: it must not leak to a page the report links to), and the
/// file reports' Content-Security-Policy (nothing loads or runs).
fn with_report_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(diag_report::html::CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}
