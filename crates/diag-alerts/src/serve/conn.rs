//! The connections of `diag serve`: accepting them, bounding them, serving HTTP/1.1 on each.
//!
//! What bounds a connection (openspec/specs/alerts/spec.md, "Connection limits"):
//! - a cap on open connections (a semaphore of `max_connections` permits): one accepted past
//!   it is closed at once, so the process's file descriptors are never all taken by clients;
//! - hyper's header-read timeout: a connection has `header_read_timeout` to send a whole
//!   request head, counted from when it waits for one: after it was accepted, and again
//!   after each answer on a kept-alive connection. A connection that sends nothing, that
//!   dribbles its head, or that sits idle between requests is closed when it runs out; this
//!   one timer is the idle keep-alive timeout too;
//! - the body-read timeout, in the webhook route (a body that takes longer gets 408).
//!
//! Shutdown: the listener is dropped (no new connection), each connection finishes the
//! request it is answering and is closed (hyper-util's `GracefulShutdown`).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;

/// How long the accept loop waits after the listener failed to accept (out of file
/// descriptors, a connection reset before it was accepted) before it tries again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The bounds of the connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

/// Accepts connections on `listener` and serves `app` on each until `stop`, then waits for
/// the connections to finish what they answer.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: ConnLimits,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::select! {
                    _ = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    _ = stop.cancelled() => break,
                }
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // At the cap: closed at once, before a byte is read.
            metrics.connection_refused();
            drop(stream);
            continue;
        };
        metrics.connection_opened();
        // Every request knows the address it came from, for the lines that log refusals.
        let service =
            TowerToHyperService::new(app.clone().layer(axum::Extension(super::http::Peer(peer))));
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        let metrics = metrics.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a connection ended with an error");
            }
            metrics.connection_closed();
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
