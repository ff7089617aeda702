//! `diag serve`: Alertmanager's webhook receiver (payload version 4), with a durable queue in
//! the run store and workers that investigate what it holds (openspec/specs/alerts/spec.md,
//! "diag serve").
//!
//! The parts:
//! - [`http`]: the routes. `POST /alertmanager` (and `POST /`) checks the bearer token, the
//!   body's size and the request rate, parses the notification, queues it once per identity
//!   and answers at once (202); `GET /runs/RUN_ID/report` serves a stored run's report;
//!   `GET /healthz` says the server is up and how the queue stands.
//! - [`limits`]: what bounds a request: the body limit, the token bucket of the request rate,
//!   the constant-time token check.
//! - [`worker`]: `concurrency` loops, each claiming one notification from the store at a time
//!   (the database hands out work, so several instances on one PostgreSQL store share it),
//!   investigating it through [`crate::investigate`] and ending the claim.
//! - here: starting all of it on a listener, and the shutdown: stop accepting, stop
//!   claiming, wait up to `drain` for the runs in flight, then interrupt them (FAILED
//!   `interrupted`) and give their notifications back to the queue.
//!
//! Nothing here prints: what happens is told to the caller's [`EventSink`] as one line each,
//! and logged with `tracing`. The token is never logged, stored or echoed.

pub mod conn;
pub mod http;
pub mod limits;
pub mod metrics;
pub mod worker;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use diag_ask::AskDeps;
use diag_core::clock::Clock;
use diag_core::store::Store;

use crate::links::ReportLinks;
use crate::notify::NotifyTarget;

/// How often an idle worker looks at the queue without being woken (work another instance
/// queued, a claim whose owner's lease ran out).
pub const POLL: Duration = Duration::from_secs(1);

/// How long the HTTP side has, once the workers are done, to answer what it had accepted.
pub const HTTP_GRACE: Duration = Duration::from_secs(5);

/// The bounds and settings of one server (`[serve]` of the configuration).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The bearer token the webhook requires; `None`: no token (only when the configuration
    /// says `allow_no_token = true`). It never opens a report.
    pub token: Option<String>,
    /// Largest webhook body taken; a larger one gets 413.
    pub max_body_bytes: usize,
    /// Webhook requests taken per second (a burst of as many); more get 429.
    pub max_requests_per_sec: u32,
    /// Notifications waiting or being investigated at most; past it the webhook gets 503.
    pub max_queue: u64,
    /// Runs this process investigates at once.
    pub concurrency: u32,
    /// How long a shutdown waits for the runs in flight before it interrupts them.
    pub drain: Duration,
    /// How far before an alert started its question looks.
    pub lookback: Duration,
    /// How often an idle worker looks at the queue unwoken ([`POLL`]).
    pub poll: Duration,
    /// A token that opens any run's report (`Authorization: Bearer`), never the webhook.
    pub read_token: Option<String>,
    /// What signs and checks report links.
    pub links: ReportLinks,
    /// How long a connection has to send a whole request head, from when it waits for one
    /// (a new connection, or a kept-alive one between requests).
    pub header_read_timeout: Duration,
    /// How long a request has to send its whole body.
    pub body_read_timeout: Duration,
    /// Connections open at once at most.
    pub max_connections: usize,
}

/// Where the server tells what happens: one line each (a run started or finished, a
/// warning), for the command line to show.
pub type EventSink = Arc<dyn Fn(String) + Send + Sync>;

/// What a server works with.
pub struct Server {
    /// The dependencies of a live run (models, tools, store, clock, ids).
    pub deps: Arc<AskDeps>,
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    /// The result webhook, when configured.
    pub notify: Option<NotifyTarget>,
    pub settings: Settings,
    pub events: EventSink,
}

/// How a server is stopped: `stop` (the first SIGTERM or Ctrl-C) stops accepting and
/// claiming and lets the runs in flight finish within the drain time; `interrupt` (a second
/// signal, or the drain time over) interrupts them at once.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    pub stop: CancellationToken,
    pub interrupt: CancellationToken,
}

/// What a finished server did while it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    /// Runs interrupted because the drain time ran out (their notifications are queued
    /// again).
    pub interrupted: usize,
}

#[derive(Debug, Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {detail}")]
    Listen { addr: String, detail: String },
    #[error("the HTTP server failed: {0}")]
    Http(String),
}

/// How many connections the kernel queues for the accept loop: a burst of new connections
/// (thousands of clients at once) waits there rather than in SYN retries. The kernel caps it
/// at `net.core.somaxconn`.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds the listening socket (`127.0.0.1:0` picks a free port: [`local_addr`] says which),
/// with a backlog of [`LISTEN_BACKLOG`].
pub async fn bind(addr: &str) -> Result<tokio::net::TcpListener, ServeError> {
    let failed = |detail: String| ServeError::Listen {
        addr: diag_core::text::one_line(addr, 100),
        detail,
    };
    let at = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| failed(e.to_string()))?
        .next()
        .ok_or_else(|| failed("the address resolves to nothing".into()))?;
    let socket = if at.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(|e| failed(e.to_string()))?;
    socket
        .set_reuseaddr(true)
        .map_err(|e| failed(e.to_string()))?;
    socket.bind(at).map_err(|e| failed(e.to_string()))?;
    socket
        .listen(LISTEN_BACKLOG)
        .map_err(|e| failed(e.to_string()))
}

/// The address a listener is bound to.
pub fn local_addr(listener: &tokio::net::TcpListener) -> Result<SocketAddr, ServeError> {
    listener.local_addr().map_err(|e| ServeError::Listen {
        addr: "the bound socket".into(),
        detail: e.to_string(),
    })
}

/// What the routes and the workers share.
pub(crate) struct Shared {
    pub server: Server,
    /// Wakes an idle worker when a notification was queued.
    pub wake: Notify,
    pub rate: limits::RateLimiter,
    pub shutdown: Shutdown,
    pub metrics: Arc<metrics::Metrics>,
}

/// Serves on `listener` until `shutdown.stop`, then drains: the HTTP side stops accepting,
/// the workers stop claiming, the runs in flight get `settings.drain` to finish, and what is
/// still running then is interrupted and its notification given back to the queue.
pub async fn run(
    server: Server,
    listener: tokio::net::TcpListener,
    shutdown: Shutdown,
) -> Result<Drained, ServeError> {
    let rate = limits::RateLimiter::new(server.settings.max_requests_per_sec);
    let concurrency = server.settings.concurrency.max(1);
    let drain = server.settings.drain;
    let limits = conn::ConnLimits {
        max_connections: server.settings.max_connections,
        header_read_timeout: server.settings.header_read_timeout,
    };
    let metrics = Arc::new(metrics::Metrics::new());
    let shared = Arc::new(Shared {
        server,
        wake: Notify::new(),
        rate,
        shutdown: shutdown.clone(),
        metrics: metrics.clone(),
    });

    let mut workers = tokio::task::JoinSet::new();
    for index in 0..concurrency {
        workers.spawn(worker::work(shared.clone(), index));
    }
    let app = http::router(shared.clone());
    let stop = shutdown.stop.clone();
    let mut http = tokio::spawn(conn::serve(listener, app, limits, metrics, stop));

    let mut http_done = false;
    tokio::select! {
        biased;
        _ = shutdown.stop.cancelled() => {}
        ended = &mut http => {
            http_done = true;
            if !shutdown.stop.is_cancelled() {
                // The server ended without being asked: stop the rest and say why.
                shutdown.stop.cancel();
                shutdown.interrupt.cancel();
                while workers.join_next().await.is_some() {}
                return Err(ServeError::Http(match ended {
                    Ok(()) => "it stopped".into(),
                    Err(e) => e.to_string(),
                }));
            }
        }
    }
    shared.wake.notify_waiters();

    // Drain: the runs in flight may finish within `drain`; then they are interrupted.
    let mut interrupted = 0;
    let deadline = tokio::time::sleep(drain);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            joined = workers.join_next() => match joined {
                None => break,
                Some(Ok(w)) => interrupted += w.interrupted,
                Some(Err(_)) => {}
            },
            _ = &mut deadline, if !shutdown.interrupt.is_cancelled() => {
                shutdown.interrupt.cancel();
            }
            _ = shutdown.interrupt.cancelled(), if !shutdown.interrupt.is_cancelled() => {}
        }
    }
    // Whatever the HTTP side still holds (a request waiting on the store) gets a moment.
    if !http_done && tokio::time::timeout(HTTP_GRACE, &mut http).await.is_err() {
        http.abort();
    }
    Ok(Drained { interrupted })
}
