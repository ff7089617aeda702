//! Alerts (`run_alert`, `alert_queue`), schema version 8; the rules are diag-core's
//! (`diag_store::alerts`). Every write of the queue is one `BEGIN IMMEDIATE`
//! transaction, so the store's one writer at a time is also what hands each notification to
//! one claimant: a claim reads the candidates and takes one under the write lock.

use rusqlite::{ffi, params, OptionalExtension, Row};

use super::{SqliteError, SqliteStore};
use diag_alertmanager::AlertStatus;
use diag_owner::{Owner, RunOwner};
use diag_store::alerts::{
    self, alerts_text, check_notification, check_run_alerts, consider, decode_group, decode_runs,
    Consider, QueueRow, QUEUE_COLUMNS,
};
use diag_store::backend;
use diag_store::{
    AlertStore, ClaimEnd, Claimed, Enqueued, NewNotification, QueueCounts, QueueEntry, QueueState,
    RecordError, RunAlerts, StoreError, INTERRUPTED,
};

fn queue_row(r: &Row<'_>) -> rusqlite::Result<QueueRow> {
    Ok(QueueRow {
        id: r.get(0)?,
        identity: r.get(1)?,
        state: r.get(2)?,
        status: r.get(3)?,
        receiver: r.get(4)?,
        group_key: r.get(5)?,
        alerts: r.get(6)?,
        received_at: r.get(7)?,
        attempts: r.get(8)?,
        runs: r.get(9)?,
        failure: r.get(10)?,
        owner_host: r.get(11)?,
        owner_pid: r.get(12)?,
        lease_expires_at: r.get(13)?,
        updated_at: r.get(14)?,
    })
}

/// This process as the queue stores a claim's owner.
fn me(owner: &Owner) -> alerts::ClaimOwner<'_> {
    alerts::ClaimOwner {
        host: &owner.host,
        pid: owner.pid,
        token: owner.token.as_deref(),
    }
}

impl SqliteStore {
    fn entries(
        &self,
        op: &'static str,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<QueueEntry>, StoreError> {
        let rows: Vec<QueueRow> = {
            let conn = self.lock();
            let mut stmt = conn.prepare_cached(sql).map_err(|e| self.err(op, e))?;
            let rows = stmt
                .query_map(params, queue_row)
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(op, e))?;
            rows
        };
        Ok(rows
            .into_iter()
            .map(QueueRow::decode)
            .collect::<Result<Vec<_>, _>>()
            .map_err(SqliteError::from)?)
    }
}

/// One candidate of a claim, as read under the write lock.
struct Candidate {
    id: i64,
    state: String,
    attempts: i64,
    host: Option<String>,
    pid: Option<i64>,
    token: Option<String>,
    lease: Option<String>,
}

impl Candidate {
    /// Whether the owner of its claim is gone (`diag_owner::is_gone`); a claim without an
    /// owner cannot be renewed by anyone and counts as gone.
    fn owner_gone(&self, now: diag_graph::clock::Timestamp) -> bool {
        let Some(pid) = self.pid else {
            return true;
        };
        let owner = RunOwner {
            host: self.host.as_deref(),
            pid,
            token: self.token.as_deref(),
            lease_expires_at: self
                .lease
                .as_deref()
                .and_then(|t| diag_graph::clock::Timestamp::parse_rfc3339(t).ok()),
        };
        diag_owner::is_gone(&owner, now)
    }
}

impl AlertStore for SqliteStore {
    fn record_run_alerts(&self, run_id: &str, a: &RunAlerts) -> Result<(), StoreError> {
        check_run_alerts(a).map_err(SqliteError::from)?;
        let text = alerts_text(&a.group).map_err(SqliteError::from)?;
        let now = self.now().to_string();
        let op = "record the run's alerts";
        Ok(self.write(op, |tx| {
            backend::require_running(run_id, self.run_status(tx, run_id)?)?;
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO run_alert (run_id, identity, source, group_key, alerts, \
                     recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        run_id,
                        a.identity,
                        a.source.as_str(),
                        a.group.group_key,
                        text,
                        now
                    ])
                });
            match inserted {
                Ok(_) => Ok(()),
                Err(e) if SqliteError::is_constraint(&e, ffi::SQLITE_CONSTRAINT_PRIMARYKEY) => {
                    Err(RecordError::Duplicate {
                        what: "alert group",
                        run_id: run_id.to_string(),
                        key: a.identity.clone(),
                    }
                    .into())
                }
                Err(e) => Err(self.err(op, e)),
            }
        })?)
    }

    fn run_alerts(&self, run_id: &str) -> Result<Option<RunAlerts>, StoreError> {
        let op = "read the run's alerts";
        let raw: Option<(String, String, String, String)> = {
            let conn = self.lock();
            conn.prepare_cached(
                "SELECT identity, source, group_key, alerts FROM run_alert WHERE run_id = ?1",
            )
            .and_then(|mut s| {
                s.query_row([run_id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .optional()
            })
            .map_err(|e| self.err(op, e))?
        };
        Ok(raw
            .map(|(identity, source, key, text)| {
                alerts::decode_run_alerts(identity, &source, key, &text)
            })
            .transpose()
            .map_err(SqliteError::from)?)
    }

    fn investigated_run(&self, identity: &str) -> Result<Option<String>, StoreError> {
        let conn = self.lock();
        Ok(conn
            .prepare_cached(
                "SELECT r.run_id FROM run_alert a JOIN diagnosis_run r ON r.run_id = a.run_id \
                 WHERE a.identity = ?1 AND (r.status IN ('SUCCESS', 'RUNNING') \
                 OR (r.status = 'FAILED' AND r.failure IS NOT ?2)) \
                 ORDER BY r.started_at DESC, r.run_id DESC LIMIT 1",
            )
            .and_then(|mut s| {
                s.query_row(params![identity, INTERRUPTED], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| self.err("find the run that investigated an alert group", e))?)
    }

    fn enqueue(&self, n: &NewNotification, max_pending: u64) -> Result<Enqueued, StoreError> {
        check_notification(n).map_err(SqliteError::from)?;
        let text = alerts_text(&n.group).map_err(SqliteError::from)?;
        let now = self.now().to_string();
        let op = "queue an alert notification";
        Ok(self.write(op, |tx| {
            let existing: Option<i64> = tx
                .prepare_cached("SELECT id FROM alert_queue WHERE identity = ?1")
                .and_then(|mut s| s.query_row([&n.identity], |r| r.get(0)).optional())
                .map_err(|e| self.err(op, e))?;
            if let Some(id) = existing {
                return Ok(Enqueued::Duplicate(id));
            }
            let state = if n.status == AlertStatus::Resolved {
                QueueState::Resolved
            } else {
                let pending: i64 = tx
                    .prepare_cached(
                        "SELECT count(*) FROM alert_queue WHERE state IN ('queued', 'claimed')",
                    )
                    .and_then(|mut s| s.query_row([], |r| r.get(0)))
                    .map_err(|e| self.err(op, e))?;
                if u64::try_from(pending).unwrap_or(0) >= max_pending {
                    return Ok(Enqueued::Full);
                }
                QueueState::Queued
            };
            tx.prepare_cached(
                "INSERT INTO alert_queue (identity, state, status, receiver, group_key, alerts, \
                 received_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    n.identity,
                    state.as_str(),
                    n.status.as_str(),
                    n.receiver,
                    n.group.group_key,
                    text,
                    n.received_at.to_string(),
                    now
                ])
            })
            .map_err(|e| self.err(op, e))?;
            Ok(Enqueued::Queued(tx.last_insert_rowid()))
        })?)
    }

    fn claim(&self) -> Result<Option<Claimed>, StoreError> {
        let me = Owner::current();
        let now = self.now();
        let updated_at = now.to_string();
        let lease = self.shared.leases.expiry(now);
        let op = "claim an alert notification";
        let claimed = self.write(op, |tx| {
            let candidates: Vec<Candidate> = tx
                .prepare_cached(
                    "SELECT id, state, attempts, owner_host, owner_pid, owner_token, \
                     lease_expires_at FROM alert_queue INDEXED BY alert_queue_pending \
                     WHERE state IN ('queued', 'claimed') ORDER BY id",
                )
                .and_then(|mut s| {
                    s.query_map([], |r| {
                        Ok(Candidate {
                            id: r.get(0)?,
                            state: r.get(1)?,
                            attempts: r.get(2)?,
                            host: r.get(3)?,
                            pid: r.get(4)?,
                            token: r.get(5)?,
                            lease: r.get(6)?,
                        })
                    })
                    .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                })
                .map_err(|e| self.err(op, e))?;
            for c in candidates {
                let state = QueueState::parse(&c.state)?;
                let attempts = alerts::decode_attempts(c.attempts)?;
                let gone = state == QueueState::Claimed && c.owner_gone(now);
                match consider(state, attempts, gone) {
                    Consider::Pass => continue,
                    Consider::GiveUp(failure) => {
                        tx.prepare_cached(
                            "UPDATE alert_queue SET state = 'failed', failure = ?2, \
                             updated_at = ?3 WHERE id = ?1",
                        )
                        .and_then(|mut s| s.execute(params![c.id, failure, updated_at]))
                        .map_err(|e| self.err(op, e))?;
                    }
                    Consider::Take => {
                        tx.prepare_cached(
                            "UPDATE alert_queue SET state = 'claimed', attempts = attempts + 1, \
                             owner_host = ?2, owner_pid = ?3, owner_token = ?4, \
                             lease_expires_at = ?5, updated_at = ?6 WHERE id = ?1",
                        )
                        .and_then(|mut s| {
                            s.execute(params![c.id, me.host, me.pid, me.token, lease, updated_at])
                        })
                        .map_err(|e| self.err(op, e))?;
                        let (identity, key, text, runs): (String, String, String, String) = tx
                            .prepare_cached(
                                "SELECT identity, group_key, alerts, runs FROM alert_queue \
                                 WHERE id = ?1",
                            )
                            .and_then(|mut s| {
                                s.query_row([c.id], |r| {
                                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                                })
                            })
                            .map_err(|e| self.err(op, e))?;
                        return Ok(Some(Claimed {
                            id: c.id,
                            identity,
                            group: decode_group(key, &text)?,
                            attempt: attempts + 1,
                            earlier_runs: decode_runs(&runs)?,
                        }));
                    }
                }
            }
            Ok(None)
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
        Ok(self
            .entries(
                "read an alert notification",
                &format!("SELECT {QUEUE_COLUMNS} FROM alert_queue WHERE id = ?1"),
                [id],
            )?
            .pop())
    }

    fn queue_entries(&self) -> Result<Vec<QueueEntry>, StoreError> {
        self.entries(
            "read the alert queue",
            &format!("SELECT {QUEUE_COLUMNS} FROM alert_queue ORDER BY id"),
            [],
        )
    }

    fn queue_counts(&self) -> Result<QueueCounts, StoreError> {
        let op = "count the alert queue";
        let rows: Vec<(String, i64)> = {
            let conn = self.lock();
            let mut stmt = conn
                .prepare_cached("SELECT state, count(*) FROM alert_queue GROUP BY state")
                .map_err(|e| self.err(op, e))?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(op, e))?;
            rows
        };
        Ok(alerts::decode_counts(rows).map_err(SqliteError::from)?)
    }

    fn import_run_alerts(&self, run_id: &str, a: &RunAlerts) -> Result<bool, StoreError> {
        alerts::import_run_alerts(self, run_id, a)
    }

    fn import_notification(&self, entry: &QueueEntry) -> Result<bool, StoreError> {
        alerts::import_notification(self, entry)
    }
}
