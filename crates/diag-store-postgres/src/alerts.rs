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
use super::PgStore;
use diag_alertmanager::AlertStatus;
use diag_graph::clock::Timestamp;
use diag_owner::{Owner, RunOwner};
use diag_store::alerts::{
    self, alerts_text, check_notification, check_run_alerts, consider, decode_group, decode_runs,
    Consider, QueueRow, QUEUE_COLUMNS,
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

/// This process as the queue stores a claim's owner.
fn me(owner: &Owner) -> alerts::ClaimOwner<'_> {
    alerts::ClaimOwner {
        host: &owner.host,
        pid: owner.pid,
        token: owner.token.as_deref(),
    }
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

impl PgStore {}

impl PgStore {}

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
        alerts::claim_started_run(self, me(Owner::current()), id, run_id)
    }

    fn end_claim(&self, id: i64, end: ClaimEnd<'_>) -> Result<(), StoreError> {
        alerts::end_claim(self, me(Owner::current()), id, end)
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
        alerts::import_run_alerts(self, run_id, a)
    }

    fn import_notification(&self, entry: &QueueEntry) -> Result<bool, StoreError> {
        alerts::import_notification(self, entry)
    }
}
