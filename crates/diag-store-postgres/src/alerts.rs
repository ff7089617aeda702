//! Alerts (`run_alert`, `alert_queue`), schema version 3; the rules are diag-core's
//! (`diag_store::alerts`). Many processes on many machines claim from one queue: a
//! claim looks at the candidates one at a time in id order with
//! `FOR UPDATE SKIP LOCKED`, so a row another claimant is looking at is passed over rather
//! than waited for, and two claimants never take the same notification; the owner of a
//! claimed row is judged in Rust (`diag_owner::is_gone`) and the row updated in the same
//! transaction. Queueing takes a transaction-level advisory lock, so the duplicate check and
//! the bound on pending notifications hold against concurrent deliveries.

use tokio_postgres::Row;

use super::error::PgError;
use super::tx::Tx;
use super::PgStore;
use diag_alertmanager::AlertStatus;
use diag_graph::clock::Timestamp;
use diag_owner::{Owner, RunOwner};
use diag_store::alerts::{
    self, alerts_text, check_notification, check_run_alerts, consider, decode_group, decode_runs,
    failure_text, Consider, QueueRow, QUEUE_COLUMNS,
};
use diag_store::{
    AlertStore, ClaimEnd, Claimed, Enqueued, NewNotification, QueueCounts, QueueEntry, QueueState,
    RecordError, RunAlerts, StoreError, INTERRUPTED,
};

/// The advisory lock key of queueing ("dgaq" in ASCII), apart from the migrations' key.
const QUEUE_LOCK: i64 = 0x6467_6171;

fn queue_row(r: &Row) -> QueueRow {
    QueueRow {
        id: r.get(0),
        identity: r.get(1),
        state: r.get(2),
        status: r.get(3),
        receiver: r.get(4),
        group_key: r.get(5),
        alerts: r.get(6),
        received_at: r.get(7),
        attempts: r.get(8),
        runs: r.get(9),
        failure: r.get(10),
        owner_host: r.get(11),
        owner_pid: r.get(12),
        lease_expires_at: r.get(13),
        updated_at: r.get(14),
    }
}

fn decode_entries(rows: Vec<Row>) -> Result<Vec<QueueEntry>, StoreError> {
    Ok(rows
        .iter()
        .map(|r| queue_row(r).decode())
        .collect::<Result<Vec<_>, _>>()
        .map_err(PgError::from)?)
}

/// Whether the owner of a claimed row (`owner_host`, `owner_pid`, `owner_token`,
/// `lease_expires_at` at columns `at..at + 4`) is gone at `now`; a claim without an owner
/// cannot be renewed by anyone and counts as gone.
fn owner_gone(r: &Row, at: usize, now: Timestamp) -> bool {
    let host: Option<String> = r.get(at);
    let Some(pid) = r.get::<_, Option<i64>>(at + 1) else {
        return true;
    };
    let token: Option<String> = r.get(at + 2);
    let lease: Option<String> = r.get(at + 3);
    let owner = RunOwner {
        host: host.as_deref(),
        pid,
        token: token.as_deref(),
        lease_expires_at: lease
            .as_deref()
            .and_then(|t| Timestamp::parse_rfc3339(t).ok()),
    };
    diag_owner::is_gone(&owner, now)
}

impl PgStore {
    /// Locks notification `id` for this transaction; its stored runs when this process holds
    /// its claim, the refusal ([`alerts::require_claimed`]) otherwise.
    fn held_claim(&self, tx: &mut Tx<'_>, id: i64, op: &'static str) -> Result<String, PgError> {
        let me = Owner::current();
        let pid = i64::from(me.pid);
        let row = tx
            .query_opt(
                "SELECT state, (owner_host = $2 AND owner_pid = $3 \
                 AND owner_token IS NOT DISTINCT FROM $4), runs \
                 FROM alert_queue WHERE id = $1 FOR UPDATE",
                &[&id, &me.host, &pid, &me.token],
            )
            .map_err(|e| self.err(op, &e))?;
        let Some(row) = row else {
            return Err(alerts::not_claimed(id, None, false).into());
        };
        let state: String = row.get(0);
        let mine: Option<bool> = row.get(1);
        alerts::require_claimed(id, Some(&state), mine.unwrap_or(false))?;
        Ok(row.get(2))
    }

    fn set_runs(
        &self,
        tx: &mut Tx<'_>,
        id: i64,
        runs: &[String],
        op: &'static str,
    ) -> Result<(), PgError> {
        let text = alerts::runs_text(runs);
        let now = self.now().to_string();
        tx.execute(
            "UPDATE alert_queue SET runs = $2, updated_at = $3 WHERE id = $1",
            &[&id, &text, &now],
        )
        .map(|_| ())
        .map_err(|e| self.err(op, &e))
    }
}

impl PgStore {
    /// `runs` as far as each one is a stored run, inside the caller's transaction.
    fn stored_runs(
        &self,
        tx: &mut Tx<'_>,
        runs: &[String],
        op: &'static str,
    ) -> Result<Vec<String>, PgError> {
        let mut kept = Vec::new();
        for run in runs {
            let exists = tx
                .query_opt("SELECT 1 FROM diagnosis_run WHERE run_id = $1", &[run])
                .map_err(|e| self.err(op, &e))?;
            if exists.is_some() {
                kept.push(run.clone());
            }
        }
        Ok(kept)
    }
}

impl AlertStore for PgStore {
    fn record_run_alerts(&self, run_id: &str, a: &RunAlerts) -> Result<(), StoreError> {
        check_run_alerts(a).map_err(PgError::from)?;
        let text = alerts_text(&a.group).map_err(PgError::from)?;
        let now = self.now().to_string();
        let op = "record the run's alerts";
        Ok(self.write(op, |tx| {
            self.running(tx, run_id)?;
            match tx.execute(
                "INSERT INTO run_alert (run_id, identity, source, group_key, alerts, \
                 recorded_at) VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &run_id,
                    &a.identity,
                    &a.source.as_str(),
                    &a.group.group_key,
                    &text,
                    &now,
                ],
            ) {
                Ok(_) => Ok(()),
                Err(e) if PgError::is_unique_violation(&e) => Err(RecordError::Duplicate {
                    what: "alert group",
                    run_id: run_id.to_string(),
                    key: a.identity.clone(),
                }
                .into()),
                Err(e) => Err(self.err(op, &e)),
            }
        })?)
    }

    fn run_alerts(&self, run_id: &str) -> Result<Option<RunAlerts>, StoreError> {
        let rows = self.rows(
            "read the run's alerts",
            "SELECT identity, source, group_key, alerts FROM run_alert WHERE run_id = $1",
            &[&run_id],
        )?;
        Ok(rows
            .first()
            .map(|r| {
                let source: String = r.get(1);
                let text: String = r.get(3);
                alerts::decode_run_alerts(r.get(0), &source, r.get(2), &text)
            })
            .transpose()
            .map_err(PgError::from)?)
    }

    fn investigated_run(&self, identity: &str) -> Result<Option<String>, StoreError> {
        let rows = self.rows(
            "find the run that investigated an alert group",
            "SELECT r.run_id FROM run_alert a JOIN diagnosis_run r ON r.run_id = a.run_id \
             WHERE a.identity = $1 AND (r.status IN ('SUCCESS', 'RUNNING') \
             OR (r.status = 'FAILED' AND r.failure IS DISTINCT FROM $2)) \
             ORDER BY r.started_at COLLATE \"C\" DESC, r.run_id COLLATE \"C\" DESC LIMIT 1",
            &[&identity, &INTERRUPTED],
        )?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    fn enqueue(&self, n: &NewNotification, max_pending: u64) -> Result<Enqueued, StoreError> {
        check_notification(n).map_err(PgError::from)?;
        let text = alerts_text(&n.group).map_err(PgError::from)?;
        let now = self.now().to_string();
        let received_at = n.received_at.to_string();
        let op = "queue an alert notification";
        Ok(self.write(op, |tx| {
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&QUEUE_LOCK])
                .map_err(|e| self.err(op, &e))?;
            let existing = tx
                .query_opt(
                    "SELECT id FROM alert_queue WHERE identity = $1",
                    &[&n.identity],
                )
                .map_err(|e| self.err(op, &e))?;
            if let Some(row) = existing {
                return Ok(Enqueued::Duplicate(row.get(0)));
            }
            let state = if n.status == AlertStatus::Resolved {
                QueueState::Resolved
            } else {
                let pending: i64 = tx
                    .query_opt(
                        "SELECT count(*) FROM alert_queue WHERE state IN ('queued', 'claimed')",
                        &[],
                    )
                    .map_err(|e| self.err(op, &e))?
                    .map_or(0, |r| r.get(0));
                if u64::try_from(pending).unwrap_or(0) >= max_pending {
                    return Ok(Enqueued::Full);
                }
                QueueState::Queued
            };
            let row = tx
                .query_opt(
                    "INSERT INTO alert_queue (identity, state, status, receiver, group_key, \
                     alerts, received_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                     RETURNING id",
                    &[
                        &n.identity,
                        &state.as_str(),
                        &n.status.as_str(),
                        &n.receiver,
                        &n.group.group_key,
                        &text,
                        &received_at,
                        &now,
                    ],
                )
                .map_err(|e| self.err(op, &e))?;
            match row {
                Some(row) => Ok(Enqueued::Queued(row.get(0))),
                None => Err(RecordError::Invalid(
                    "the alert queue returned no id for a new notification".into(),
                )
                .into()),
            }
        })?)
    }

    fn claim(&self) -> Result<Option<Claimed>, StoreError> {
        let me = Owner::current();
        let pid = i64::from(me.pid);
        let now = self.now();
        let updated_at = now.to_string();
        let lease = self.shared.leases.expiry(now);
        let op = "claim an alert notification";
        let claimed = self.write(op, |tx| {
            let mut after = i64::MIN;
            loop {
                let Some(row) = tx
                    .query_opt(
                        "SELECT id, state, attempts, owner_host, owner_pid, owner_token, \
                         lease_expires_at FROM alert_queue \
                         WHERE state IN ('queued', 'claimed') AND id > $1 \
                         ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
                        &[&after],
                    )
                    .map_err(|e| self.err(op, &e))?
                else {
                    return Ok(None);
                };
                let id: i64 = row.get(0);
                after = id;
                let state = QueueState::parse(row.get(1))?;
                let attempts = alerts::decode_attempts(row.get(2))?;
                let gone = state == QueueState::Claimed && owner_gone(&row, 3, now);
                match consider(state, attempts, gone) {
                    Consider::Pass => {}
                    Consider::GiveUp(failure) => {
                        tx.execute(
                            "UPDATE alert_queue SET state = 'failed', failure = $2, \
                             updated_at = $3 WHERE id = $1",
                            &[&id, &failure, &updated_at],
                        )
                        .map_err(|e| self.err(op, &e))?;
                    }
                    Consider::Take => {
                        let taken = tx
                            .query_opt(
                                "UPDATE alert_queue SET state = 'claimed', \
                                 attempts = attempts + 1, owner_host = $2, owner_pid = $3, \
                                 owner_token = $4, lease_expires_at = $5, updated_at = $6 \
                                 WHERE id = $1 RETURNING identity, group_key, alerts, runs",
                                &[&id, &me.host, &pid, &me.token, &lease, &updated_at],
                            )
                            .map_err(|e| self.err(op, &e))?;
                        let Some(taken) = taken else {
                            continue;
                        };
                        let text: String = taken.get(2);
                        let runs: String = taken.get(3);
                        return Ok(Some(Claimed {
                            id,
                            identity: taken.get(0),
                            group: decode_group(taken.get(1), &text)?,
                            attempt: attempts + 1,
                            earlier_runs: decode_runs(&runs)?,
                        }));
                    }
                }
            }
        })?;
        if claimed.is_some() {
            // The claim's lease is renewed by the handle's heartbeat, as a run's is.
            self.start_heartbeat();
        }
        Ok(claimed)
    }

    fn claim_started_run(&self, id: i64, run_id: &str) -> Result<(), StoreError> {
        let op = "add a run to an alert notification";
        Ok(self.write(op, |tx| {
            let runs = self.held_claim(tx, id, op)?;
            let mut runs = decode_runs(&runs)?;
            runs.push(run_id.to_string());
            self.set_runs(tx, id, &runs, op)
        })?)
    }

    fn end_claim(&self, id: i64, end: ClaimEnd<'_>) -> Result<(), StoreError> {
        let op = "end the claim of an alert notification";
        let now = self.now().to_string();
        Ok(self.write(op, |tx| {
            let runs = self.held_claim(tx, id, op)?;
            let done = match end {
                ClaimEnd::Investigated { run_id } => {
                    let mut runs = decode_runs(&runs)?;
                    if !runs.iter().any(|r| r == run_id) {
                        runs.push(run_id.to_string());
                        self.set_runs(tx, id, &runs, op)?;
                    }
                    tx.execute(
                        "UPDATE alert_queue SET state = 'done', updated_at = $2 WHERE id = $1",
                        &[&id, &now],
                    )
                }
                ClaimEnd::Failed { failure } => {
                    // A run id drawn for a run that never started is not kept.
                    let runs = decode_runs(&runs)?;
                    let stored = self.stored_runs(tx, &runs, op)?;
                    if stored != runs {
                        self.set_runs(tx, id, &stored, op)?;
                    }
                    tx.execute(
                        "UPDATE alert_queue SET state = 'failed', failure = $2, updated_at = $3 \
                         WHERE id = $1",
                        &[&id, &failure_text(failure), &now],
                    )
                }
                ClaimEnd::Released => tx.execute(
                    "UPDATE alert_queue SET state = 'queued', \
                     attempts = greatest(attempts - 1, 0), owner_host = NULL, owner_pid = NULL, \
                     owner_token = NULL, lease_expires_at = NULL, updated_at = $2 WHERE id = $1",
                    &[&id, &now],
                ),
            };
            done.map(|_| ()).map_err(|e| self.err(op, &e))
        })?)
    }

    fn queue_entry(&self, id: i64) -> Result<Option<QueueEntry>, StoreError> {
        Ok(decode_entries(self.rows(
            "read an alert notification",
            &format!("SELECT {QUEUE_COLUMNS} FROM alert_queue WHERE id = $1"),
            &[&id],
        )?)?
        .pop())
    }

    fn queue_entries(&self) -> Result<Vec<QueueEntry>, StoreError> {
        decode_entries(self.rows(
            "read the alert queue",
            &format!("SELECT {QUEUE_COLUMNS} FROM alert_queue ORDER BY id"),
            &[],
        )?)
    }

    fn queue_counts(&self) -> Result<QueueCounts, StoreError> {
        let rows = self.rows(
            "count the alert queue",
            "SELECT state, count(*) FROM alert_queue GROUP BY state",
            &[],
        )?;
        Ok(
            alerts::decode_counts(rows.iter().map(|r| (r.get(0), r.get(1))))
                .map_err(PgError::from)?,
        )
    }

    fn import_run_alerts(&self, run_id: &str, a: &RunAlerts) -> Result<bool, StoreError> {
        check_run_alerts(a).map_err(PgError::from)?;
        let text = alerts_text(&a.group).map_err(PgError::from)?;
        let now = self.now().to_string();
        let op = "copy a run's alerts";
        Ok(self.write(op, |tx| {
            let status: Option<String> = tx
                .query_opt(
                    "SELECT status FROM diagnosis_run WHERE run_id = $1 FOR SHARE",
                    &[&run_id],
                )
                .map_err(|e| self.err(op, &e))?
                .map(|r| r.get(0));
            alerts::require_copied_run(run_id, status.as_deref())?;
            let n = tx
                .execute(
                    "INSERT INTO run_alert (run_id, identity, source, group_key, alerts, \
                     recorded_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (run_id) DO NOTHING",
                    &[
                        &run_id,
                        &a.identity,
                        &a.source.as_str(),
                        &a.group.group_key,
                        &text,
                        &now,
                    ],
                )
                .map_err(|e| self.err(op, &e))?;
            Ok(n == 1)
        })?)
    }

    fn import_notification(&self, entry: &QueueEntry) -> Result<bool, StoreError> {
        alerts::check_importable(entry).map_err(PgError::from)?;
        let text = alerts_text(&entry.group).map_err(PgError::from)?;
        let op = "copy an alert notification";
        Ok(self.write(op, |tx| {
            let runs = self.stored_runs(tx, &entry.runs, op)?;
            let n = tx
                .execute(
                    "INSERT INTO alert_queue (identity, state, status, receiver, group_key, \
                     alerts, received_at, attempts, runs, failure, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                     ON CONFLICT (identity) DO NOTHING",
                    &[
                        &entry.identity,
                        &entry.state.as_str(),
                        &entry.status.as_str(),
                        &entry.receiver,
                        &entry.group.group_key,
                        &text,
                        &entry.received_at.to_string(),
                        &i64::from(entry.attempts),
                        &alerts::runs_text(&runs),
                        &entry.failure,
                        &entry.updated_at.to_string(),
                    ],
                )
                .map_err(|e| self.err(op, &e))?;
            Ok(n == 1)
        })?)
    }
}
