//! `diag serve`: Alertmanager's webhook receiver (the server is diag-alerts' `serve`, the
//! tokens and link key its `secrets`). Here: the configuration, the store, the runtime, the
//! signals, and the exit codes (openspec/specs/alerts/spec.md, "diag serve").

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::common::runtime;
use super::context::LoadedConfig;
use super::live::{remembered_endpoints, warn_unkept};
use super::{CommandContext, CommandError, Exit};
use diag_alerts::config::DEFAULT_LISTEN;
use diag_alerts::secrets::{notify_target, read_token, report_links, token};
use diag_alerts::serve::{self, Server, Settings, Shutdown};
use diag_ask::live::live_deps;
use diag_ask::setup;
use diag_core::clock::{Clock, SystemClock};
use diag_core::text::one_line;

/// Receive Alertmanager's webhook and investigate each alert group in the background.
///
/// Routes: POST /alertmanager (also POST /), Alertmanager's webhook (payload version 4),
/// with `Authorization: Bearer TOKEN`, the token read from the variable `[serve] token_env`
/// names (default DIAG_SERVE_TOKEN), at least 32 bytes unless `[serve] allow_short_token =
/// true`: the notification is queued in the run store and answered 202 at once. GET /runs/RUN_ID/report (?format=md for Markdown): a run's report; it opens by
/// the signed link a `[notify]` post carries (…?expires=…&sig=…, valid `[serve]
/// report_link_ttl`, default 30d) or with the read token (`[serve] read_token_env`), never
/// with the webhook token. Links are signed with the key in `[serve] link_key_env` (default
/// DIAG_SERVE_LINK_KEY, at least 32 bytes); without it a random key is drawn at start and the
/// links stop opening when diag serve stops. GET /healthz and GET /metrics (Prometheus text
/// format): no token.
///
/// `[serve]` sets the bounds: max_body_bytes (1 MiB: 413 past it), max_requests_per_sec (20:
/// 429), max_queue (1000: 503), concurrency (2 runs at once), drain_secs (30), lookback_secs
/// (900), header_read_timeout_secs (10: a connection that sends no whole request head in time,
/// new or idle between requests, is closed), body_read_timeout_secs (30: 408),
/// max_connections (512: one more is closed at once).
///
/// `diag serve status` lists the queue (add --json).
///
/// Prints `diag serve: listening on http://ADDR` on stderr when ready, a line per run, and a
/// line per refused request (route, peer address, status, reason; never a token). Listens on
/// 127.0.0.1 unless `--listen` says otherwise (0.0.0.0:9464 for an Alertmanager on another
/// host).
/// SIGTERM or Ctrl-C: stop accepting, finish the runs in flight within drain_secs, then
/// interrupt the rest (stored FAILED `interrupted`, their notifications queued again); a
/// second signal interrupts at once.
///
/// Exit codes: 0 when stopped by SIGTERM or Ctrl-C (after draining); 2 for bad usage or
/// configuration, no token set, a read token that is unset or equal to the webhook token, a
/// link key shorter than 32 bytes, or an address that cannot be listened on; 6 when the run
/// store cannot be reached at start; 1 for an internal error (the HTTP server failed).
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServeArgs {
    #[command(subcommand)]
    pub command: Option<ServeCommand>,
    // Its help names the default from the constant: `listen_help`.
    #[arg(long, value_name = "ADDR", help = listen_help())]
    pub listen: Option<String>,
}

/// An address to listen on: `HOST:PORT` (a name, an IPv4 address or a bracketed IPv6 one,
/// and a port), or a one-line refusal naming where it came from and what to write instead.
fn check_listen(listen: &str, from: &str) -> Result<String, CommandError> {
    let ok = listen
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if ok {
        Ok(listen.to_string())
    } else {
        Err(CommandError::usage(format!(
            "{from} {}: not HOST:PORT (e.g. 127.0.0.1:9095; 0.0.0.0:9095 listens on every \
             interface, for an Alertmanager on another host)",
            one_line(listen, 80)
        )))
    }
}

/// `--listen`'s help, its default the configuration's.
fn listen_help() -> String {
    format!(
        "Listen on this address (HOST:PORT; port 0 picks a free one) instead of `[serve] \
         listen` (default {DEFAULT_LISTEN})"
    )
}

#[derive(Debug, Subcommand)]
pub enum ServeCommand {
    /// List the alert queue: waiting, claimed (process, since, lease), done (with the run),
    /// failed (with why), resolved
    Status(StatusArgs),
}

/// List the alert queue of `diag serve`: waiting, claimed (process, since, lease), done (with
/// the run), failed (with why), resolved.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print a JSON document (schema diag.serve_status.v1) instead of the table
    #[arg(long)]
    pub json: bool,
}

fn say(quiet: bool, line: &str) {
    if !quiet {
        let _ = writeln!(std::io::stderr(), "diag serve: {}", one_line(line, 400));
    }
}

pub fn cmd_serve(g: &CommandContext, args: &ServeArgs) -> Result<(), CommandError> {
    let LoadedConfig {
        config,
        alerts,
        path,
    } = g.config()?;
    let listen = match &args.listen {
        Some(l) => check_listen(l, "--listen")?,
        None => check_listen(&alerts.serve.listen, "[serve] listen")?,
    };
    let token = token(alerts)?;
    let read_token = read_token(alerts, token.as_deref())?;
    let links = report_links(alerts)?;
    let notify = notify_target(alerts, Some(links.clone()))?;
    let store = g.store()?;
    let rt = runtime()?;
    let quiet = g.quiet();
    let s = &alerts.serve;
    let settings = Settings {
        token,
        max_body_bytes: usize::try_from(s.max_body_bytes).unwrap_or(usize::MAX),
        max_requests_per_sec: s.max_requests_per_sec,
        max_queue: s.max_queue,
        concurrency: s.concurrency,
        drain: Duration::from_secs(s.drain_secs),
        lookback: Duration::from_secs(s.lookback_secs),
        poll: serve::POLL,
        read_token,
        links,
        header_read_timeout: Duration::from_secs(s.header_read_timeout_secs),
        body_read_timeout: Duration::from_secs(s.body_read_timeout_secs),
        max_connections: usize::try_from(s.max_connections).unwrap_or(usize::MAX),
    };
    let result = rt.block_on(async {
        let shutdown = Shutdown::default();
        // Registered before anything runs: a signal that came earlier would kill the process.
        let signals = signal_handler(shutdown.clone(), quiet)?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let (memory, learnings) = remembered_endpoints(&store);
        let env = setup::live_with(config, clock.clone(), &memory)
            .await
            .map_err(|e| super::live::setup_error(path, &e, false))?;
        let deps = Arc::new(live_deps(&env, clock.clone(), &store));
        let listener = serve::bind(&listen)
            .await
            .map_err(|e| CommandError::usage(e.to_string()))?;
        let addr = serve::local_addr(&listener).map_err(|e| CommandError::usage(e.to_string()))?;
        // Tests and scripts read this line: the real port when 0 was asked for.
        let _ = writeln!(std::io::stderr(), "diag serve: listening on http://{addr}");
        let server = Server {
            deps,
            store: store.clone(),
            clock,
            notify,
            settings,
            events: Arc::new(move |line: String| say(quiet, &line)),
        };
        let served = serve::run(server, listener, shutdown).await;
        signals.abort();
        env.shutdown().await;
        warn_unkept(&learnings);
        match served {
            Ok(drained) => {
                say(
                    quiet,
                    &if drained.interrupted > 0 {
                        format!(
                            "stopped; {} run(s) interrupted and queued again",
                            drained.interrupted
                        )
                    } else {
                        "stopped".to_string()
                    },
                );
                Ok(())
            }
            Err(e) => Err(CommandError::new(Exit::Internal, e.to_string())),
        }
    });
    rt.shutdown_timeout(Duration::from_secs(2));
    result
}

/// SIGTERM or SIGINT: the first stops the server (it drains), a second interrupts the runs
/// in flight at once.
fn signal_handler(
    shutdown: Shutdown,
    quiet: bool,
) -> Result<tokio::task::JoinHandle<()>, CommandError> {
    use tokio::signal::unix::{signal, SignalKind};
    let cannot = |e: std::io::Error| {
        CommandError::new(Exit::Internal, format!("cannot handle signals: {e}"))
    };
    let mut term = signal(SignalKind::terminate()).map_err(cannot)?;
    let mut int = signal(SignalKind::interrupt()).map_err(cannot)?;
    Ok(tokio::spawn(async move {
        let mut received = 0;
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            received += 1;
            if received == 1 {
                say(
                    quiet,
                    "stopping: no new requests; draining the runs in flight",
                );
                shutdown.stop.cancel();
            } else {
                say(quiet, "interrupting the runs in flight");
                shutdown.interrupt.cancel();
                return;
            }
        }
    }))
}
