//! One worker of `diag serve`: claims a notification from the store's queue, investigates its
//! group, ends the claim; when the queue has nothing for it, waits for a wake-up from the
//! webhook or [`super::POLL`].
//!
//! The claim is the store's (`AlertStore::claim`: one claimant at a time, SQLite's one writer
//! or PostgreSQL's `FOR UPDATE SKIP LOCKED`), under this process's lease, which the store
//! handle's heartbeat renews. The run's id is drawn first and added to the claim before the
//! run exists, so a process that dies mid-run leaves a claim that names its run: the next
//! claimant (this host at once, another after the lease) sweeps that run FAILED
//! `interrupted` and investigates again in a new run.
//!
//! How a claim ends: the run finished (SUCCESS or FAILED) → `Investigated`; the run was
//! interrupted by the shutdown → `Released` (queued again, the attempt given back); no run
//! could be started at all → `Failed`, with why, and without the run id drawn for it (the
//! store keeps on a notification only runs that exist).

use std::sync::Arc;

use diag_core::alert::AlertGroup;
use diag_core::graph::NoopObserver;
use diag_core::store::alerts::{not_started, AlertSource, ClaimEnd, Claimed};
use diag_core::store::{RecordError, StoreError};
use diag_core::text::one_line;

use super::metrics::FinishedRun;
use super::Shared;
use crate::investigate::{investigate, GroupRun};
use crate::notify;

/// What one worker did.
#[derive(Debug, Default)]
pub(crate) struct WorkerEnd {
    /// Runs interrupted by the shutdown.
    pub interrupted: usize,
}

/// A store call on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(one_line(&e.to_string(), 300)),
        Err(e) => Err(one_line(&e.to_string(), 300)),
    }
}

fn is_not_claimed(e: &StoreError) -> bool {
    matches!(
        e.downcast_ref::<RecordError>(),
        Some(RecordError::NotClaimed { .. })
    )
}

/// The loop of worker `index`, until the shutdown stops claiming.
pub(crate) async fn work(shared: Arc<Shared>, index: u32) -> WorkerEnd {
    let mut end = WorkerEnd::default();
    let stop = shared.shutdown.stop.clone();
    let say = |line: String| (shared.server.events)(line);
    loop {
        if stop.is_cancelled() {
            break;
        }
        let store = shared.server.store.clone();
        match blocking(move || store.claim()).await {
            Ok(Some(claimed)) => {
                // An earlier claimant died mid-run: its run is swept FAILED (interrupted)
                // before the group is investigated again, and once more after (its lease may
                // have outlived the claim's by the moment between the claim and the run).
                let reclaimed = !claimed.earlier_runs.is_empty();
                if reclaimed {
                    sweep(&shared).await;
                }
                if run_claimed(&shared, index, claimed).await {
                    end.interrupted += 1;
                }
                if reclaimed {
                    sweep(&shared).await;
                }
            }
            Ok(None) => idle(&shared).await,
            Err(e) => {
                say(format!("warning: claiming from the queue: {e}"));
                idle(&shared).await;
            }
        }
    }
    end
}

/// Waits for a wake-up, the poll interval or the shutdown; after a poll interval with no
/// wake-up, sweeps runs whose owner is gone (another instance that died).
async fn idle(shared: &Shared) {
    let polled = tokio::select! {
        _ = shared.wake.notified() => false,
        _ = tokio::time::sleep(shared.server.settings.poll) => true,
        _ = shared.shutdown.stop.cancelled() => false,
    };
    if polled {
        sweep(shared).await;
    }
}

/// Marks FAILED (`interrupted`) the runs whose owner is gone.
async fn sweep(shared: &Shared) {
    let store = shared.server.store.clone();
    if let Err(e) = blocking(move || store.sweep_interrupted()).await {
        (shared.server.events)(format!("warning: sweeping interrupted runs: {e}"));
    }
}

/// Investigates one claimed notification and ends its claim; `true` when the shutdown
/// interrupted its run.
async fn run_claimed(shared: &Shared, index: u32, claimed: Claimed) -> bool {
    let server = &shared.server;
    let say = |line: String| (server.events)(line);
    let id = claimed.id;
    let group: AlertGroup = claimed.group;
    let title = one_line(&group.title(), 120);
    let run_id = server.deps.ids.run_id();
    {
        let store = server.store.clone();
        let run = run_id.clone();
        match tokio::task::spawn_blocking(move || store.claim_started_run(id, &run)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if is_not_claimed(&e) => {
                // The lease ran out and another process holds it now: it is theirs.
                say(format!(
                    "notification {id} ({title}) was claimed by another process"
                ));
                return false;
            }
            Ok(Err(e)) => {
                say(format!(
                    "warning: notification {id} ({title}): {}",
                    one_line(&e.to_string(), 300)
                ));
                end_claim(shared, id, &title, Ended::Released).await;
                return false;
            }
            Err(e) => {
                say(format!("warning: notification {id} ({title}): {e}"));
                return false;
            }
        }
    }
    let attempt = if claimed.attempt > 1 {
        format!(" (attempt {})", claimed.attempt)
    } else {
        String::new()
    };
    say(format!("{title}: run {run_id} started{attempt}"));
    tracing::info!(worker = index, id, run_id = %run_id, "investigating an alert notification");
    let outcome = investigate(
        GroupRun {
            deps: &server.deps,
            lookback: server.settings.lookback,
            source: AlertSource::Webhook,
            cancel: Some(&shared.shutdown.interrupt),
            run_id: Some(run_id.clone()),
        },
        &group,
        // The runs of a server have no terminal to show progress on.
        &mut NoopObserver,
    )
    .await;
    match outcome {
        Ok(o) if o.interrupted => {
            say(format!(
                "{title}: run {} interrupted; the notification is queued again",
                o.run_id
            ));
            end_claim(shared, id, &title, Ended::Released).await;
            true
        }
        Ok(o) => {
            say(format!("{title}: run {} {}", o.run_id, o.status.as_str()));
            end_claim(shared, id, &title, Ended::Investigated(o.run_id.clone())).await;
            count_finished(shared, &o.run_id).await;
            if let Some(target) = &server.notify {
                let message = notify::message(target, &group, &o, server.clock.now());
                if let Err(e) = notify::post(target, &message).await {
                    say(format!("warning: {e}"));
                }
            }
            for w in &o.warnings {
                say(format!("warning: run {}: {}", o.run_id, one_line(w, 300)));
            }
            false
        }
        Err(e) => {
            let failure = e.to_string();
            say(format!(
                "{title}: no run could be started: {}",
                one_line(&failure, 300)
            ));
            // The run id drawn for it is not kept: the store keeps only runs that exist.
            end_claim(shared, id, &title, Ended::Failed(not_started(&failure))).await;
            false
        }
    }
}

/// Counts a finished run in the metrics, as the store holds it (its status, verdict,
/// duration and model calls).
async fn count_finished(shared: &Shared, run_id: &str) {
    let store = shared.server.store.clone();
    let id = run_id.to_string();
    let read = blocking(move || {
        let Some(run) = store.get_run(&id)? else {
            return Ok(None);
        };
        let steps = store.agent_steps(&id)?;
        Ok(Some(FinishedRun {
            status: run.status,
            verdict: run.effective_verdict.map(|v| v.as_str()),
            duration_secs: run.duration_ms.unwrap_or(0) as f64 / 1000.0,
            calls: steps
                .iter()
                .map(|s| (s.step.agent, s.step.prompt_tokens, s.step.completion_tokens))
                .collect(),
        }))
    })
    .await;
    match read {
        Ok(Some(run)) => shared.metrics.finished(&run),
        Ok(None) => {}
        Err(e) => (shared.server.events)(format!(
            "warning: run {run_id} could not be counted in the metrics: {e}"
        )),
    }
}

enum Ended {
    Investigated(String),
    Failed(String),
    Released,
}

async fn end_claim(shared: &Shared, id: i64, title: &str, ended: Ended) {
    let store = shared.server.store.clone();
    let result = tokio::task::spawn_blocking(move || {
        let end = match &ended {
            Ended::Investigated(run_id) => ClaimEnd::Investigated { run_id },
            Ended::Failed(failure) => ClaimEnd::Failed { failure },
            Ended::Released => ClaimEnd::Released,
        };
        store.end_claim(id, end)
    })
    .await;
    let problem = match result {
        Ok(Ok(())) => return,
        Ok(Err(e)) if is_not_claimed(&e) => format!(
            "its claim had passed to another process ({})",
            one_line(&e.to_string(), 200)
        ),
        Ok(Err(e)) => one_line(&e.to_string(), 300),
        Err(e) => one_line(&e.to_string(), 300),
    };
    (shared.server.events)(format!(
        "warning: notification {id} ({title}) could not be ended: {problem}"
    ));
}
