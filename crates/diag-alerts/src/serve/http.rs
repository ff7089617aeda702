//! The routes of `diag serve`.
//!
//! - `POST /alertmanager` (and `POST /`): Alertmanager's webhook. In order: the bearer token
//!   (401), the body's size (413), the request rate (429 with `Retry-After`), the document
//!   (400, `diag_core::alert::parse_webhook`), then one `enqueue` in the store: 202
//!   `{"queued": ID, "duplicate": BOOL, "status": "firing"|"resolved"}`, or 503 with
//!   `Retry-After` when the queue is full or the store cannot be written (Alertmanager
//!   delivers again). A refused request stores nothing.
//! - `GET /runs/RUN_ID/report`: the stored run's report, HTML (`?format=md`: Markdown); 404
//!   for an unknown run.
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
use super::Shared;

/// How long Alertmanager is asked to wait when the queue is full or the store unavailable.
const RETRY_AFTER_BUSY_SECS: u64 = 10;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/alertmanager", post(webhook))
        .route("/", post(webhook))
        .route("/healthz", get(healthz))
        .route("/runs/{run_id}/report", get(report))
        .fallback(not_found)
        .with_state(shared)
}

/// One line of JSON: `{"error": "…"}`.
fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": one_line(message, 300) }))).into_response()
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
    let (parts, body) = request.into_parts();
    if !token_ok(&shared, &parts.headers) {
        return unauthorized();
    }
    let settings = &shared.server.settings;
    let body = match read_body(&parts.headers, body, settings.max_body_bytes).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!(
                    "the body is larger than {} bytes ([serve] max_body_bytes)",
                    settings.max_body_bytes
                ),
            )
        }
        Err(BodyError::Unreadable(e)) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("the body could not be read: {e}"),
            )
        }
    };
    if let Err(wait) = shared.rate.take(Instant::now()) {
        return with_retry_after(
            error(
                StatusCode::TOO_MANY_REQUESTS,
                &format!(
                    "more than {} requests a second ([serve] max_requests_per_sec)",
                    settings.max_requests_per_sec
                ),
            ),
            retry_after_secs(wait),
        );
    }
    let notification = match parse_webhook(&body) {
        Ok(n) => n,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
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
    let busy = |message: String| {
        with_retry_after(
            error(StatusCode::SERVICE_UNAVAILABLE, &message),
            RETRY_AFTER_BUSY_SECS,
        )
    };
    match queued {
        Ok(Ok(Enqueued::Queued(id))) => {
            if status == AlertStatus::Firing {
                shared.wake.notify_one();
            }
            tracing::info!(id, %status, "alert notification queued");
            accepted(id, false, status)
        }
        Ok(Ok(Enqueued::Duplicate(id))) => accepted(id, true, status),
        Ok(Ok(Enqueued::Full)) => busy(format!(
            "the queue holds {max_queue} notifications ([serve] max_queue); try again later"
        )),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "a notification could not be queued");
            (shared.server.events)(format!(
                "warning: a notification could not be queued: {}",
                one_line(&e.to_string(), 300)
            ));
            busy(format!("the run store is unavailable: {e}"))
        }
        Err(e) => busy(format!("the notification could not be queued: {e}")),
    }
}

fn accepted(id: i64, duplicate: bool, status: AlertStatus) -> Response {
    (
        StatusCode::ACCEPTED,
        Json(json!({ "queued": id, "duplicate": duplicate, "status": status.as_str() })),
    )
        .into_response()
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

async fn report(
    State(shared): State<Arc<Shared>>,
    Path(run_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if !token_ok(&shared, &headers) {
        return unauthorized();
    }
    let format = match query.get("format").map(String::as_str) {
        None | Some("html") => Format::Html,
        Some("md") => Format::Md,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "unknown report format {:?} (html or md)",
                    one_line(other, 20)
                ),
            )
        }
    };
    let store = shared.server.store.clone();
    let id = run_id.clone();
    let rendered =
        tokio::task::spawn_blocking(move || diag_report::stored_report(&store, &id, format)).await;
    match rendered {
        Ok(Ok(Some(text))) => {
            let content_type = match format {
                Format::Html => "text/html; charset=utf-8",
                Format::Md => "text/markdown; charset=utf-8",
            };
            let mut r = Response::new(Body::from(text));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            r.headers_mut().insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            r
        }
        Ok(Ok(None)) => error(
            StatusCode::NOT_FOUND,
            &format!("no run {}", one_line(&run_id, 80)),
        ),
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}
