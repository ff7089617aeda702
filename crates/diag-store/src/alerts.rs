//! Alerts in the run store (openspec/specs/alerts/spec.md, openspec/specs/run-store/spec.md
//! "Alerts and the alert queue"): the alert group a run investigated, kept with the run, and
//! the durable queue of `diag serve`, where the notifications Alertmanager delivers wait until
//! one process investigates them.
//!
//! The rules, written once for every backend:
//! - a run's alerts are recorded while it is RUNNING, once; a group counts as investigated when
//!   a RUNNING or finished run holds its identity, except a run that ended FAILED
//!   `interrupted` (it did not finish its work) ([`AlertStore::investigated_run`]): a live
//!   process investigating a group now counts, so two `diag investigate` started by cron do
//!   not both investigate it;
//! - a notification is queued once per identity ([`diag_alertmanager::AlertGroup::identity`]): a
//!   delivery Alertmanager repeats is [`Enqueued::Duplicate`] and nothing is written;
//! - a queue holds at most `max_pending` notifications waiting or being investigated; past that
//!   a new one is [`Enqueued::Full`] and nothing is written (the webhook answers 503 and
//!   Alertmanager delivers again later);
//! - a resolved notification is recorded (state `resolved`) and never investigated;
//! - a claim belongs to this process (`diag_owner::Owner`) with a lease the handle's heartbeat
//!   renews, as a RUNNING run's does; a claim whose owner is gone (`diag_owner::is_gone`) is
//!   claimable again, and its attempt counts: after [`MAX_ATTEMPTS`] claims the notification
//!   ends `failed` instead of being claimed once more (a notification that kills its
//!   investigator cannot loop forever);
//! - the database hands out each notification to one claimant at a time (SQLite: one
//!   `BEGIN IMMEDIATE` writer; PostgreSQL: `FOR UPDATE SKIP LOCKED`);
//! - only the owner of a claim can end it ([`AlertStore::end_claim`]) or add a run to it
//!   ([`AlertStore::claim_started_run`]); a released claim is queued again with its attempt
//!   given back, while an investigated one is `done` and a failed one `failed`, with its
//!   failure as one bounded line ([`failure_text`]).
//!
//! What a backend does around its SQL for these rules is written below once, as plain
//! functions over plain data: the checks of what is written ([`check_run_alerts`],
//! [`check_notification`]), how a claim treats each candidate ([`consider`]), the refusal of
//! a write that needs a claim ([`not_claimed`]), and how the stored texts read back
//! ([`decode_group`], [`decode_runs`], [`QueueRow::decode`]).

use serde::{Deserialize, Serialize};

use super::sql::{Driver, Param, Statements, Tx};
use super::{RecordError, StoreError};
use diag_alertmanager::{Alert, AlertGroup, AlertStatus};
use diag_graph::clock::Timestamp;

/// How many times a notification is claimed before it ends `failed`.
pub const MAX_ATTEMPTS: u32 = 3;

/// Where a run's alerts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertSource {
    /// `diag investigate alertmanager` read them from the API v2.
    Api,
    /// `diag serve` received them from the webhook receiver.
    Webhook,
}

impl AlertSource {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertSource::Api => "api",
            AlertSource::Webhook => "webhook",
        }
    }

    pub fn parse(text: &str) -> Result<AlertSource, RecordError> {
        super::codec::enum_str("alert source", text)
    }
}

/// The alert group a run investigated, as kept with the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAlerts {
    /// [`AlertGroup::identity`].
    pub identity: String,
    pub source: AlertSource,
    pub group: AlertGroup,
}

impl RunAlerts {
    pub fn new(source: AlertSource, group: AlertGroup) -> RunAlerts {
        RunAlerts {
            identity: group.identity(),
            source,
            group,
        }
    }
}

/// A notification delivered to `diag serve`, to be queued ([`NewNotification::new`] fills
/// its identity and status from its group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNotification {
    /// [`AlertGroup::identity`] of `group`.
    pub identity: String,
    /// Firing: investigated; resolved: recorded only.
    pub status: AlertStatus,
    pub receiver: String,
    pub group: AlertGroup,
    pub received_at: Timestamp,
}

impl NewNotification {
    /// The notification of `group` delivered to `receiver` at `received_at`: its identity and
    /// status are the group's.
    pub fn new(receiver: String, group: AlertGroup, received_at: Timestamp) -> NewNotification {
        NewNotification {
            identity: group.identity(),
            status: group.status(),
            receiver,
            group,
            received_at,
        }
    }
}

/// What queueing a notification did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// Written, with its queue id.
    Queued(i64),
    /// Already in the queue (any state) under that id; nothing written.
    Duplicate(i64),
    /// The queue holds `max_pending` notifications; nothing written.
    Full,
}

/// Where a queued notification stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueState {
    /// Waiting for a process to claim it.
    Queued,
    /// A process investigates it.
    Claimed,
    /// Investigated: its run finished (SUCCESS or FAILED).
    Done,
    /// A resolved notification, recorded only.
    Resolved,
    /// Given up: claimed [`MAX_ATTEMPTS`] times without an end, or its run could not start.
    Failed,
}

impl QueueState {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueState::Queued => "queued",
            QueueState::Claimed => "claimed",
            QueueState::Done => "done",
            QueueState::Resolved => "resolved",
            QueueState::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Result<QueueState, RecordError> {
        super::codec::enum_str("queue state", text)
    }
}

/// A notification this process claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub id: i64,
    pub identity: String,
    pub group: AlertGroup,
    /// Which claim this is (1 for the first).
    pub attempt: u32,
    /// The runs earlier claims started (a claim whose owner died leaves its run, swept
    /// FAILED `interrupted`).
    pub earlier_runs: Vec<String>,
}

/// How a claim ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimEnd<'a> {
    /// The run finished (SUCCESS or FAILED): the notification is done.
    Investigated { run_id: &'a str },
    /// The notification cannot be investigated (its run could not even start): `failed`.
    Failed { failure: &'a str },
    /// Given back unfinished (a draining process): queued again, this attempt not counted.
    Released,
}

/// One queued notification, as `diag serve status`, `diag store copy` and the tests read the
/// queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    pub id: i64,
    pub identity: String,
    pub state: QueueState,
    pub status: AlertStatus,
    /// The Alertmanager receiver that delivered it.
    pub receiver: String,
    pub group: AlertGroup,
    pub received_at: Timestamp,
    pub attempts: u32,
    /// The runs its claims started, oldest first; each one a stored run.
    pub runs: Vec<String>,
    pub failure: Option<String>,
    /// Who holds its claim (state `claimed` only).
    pub claim: Option<ClaimHolder>,
    /// When its state last changed (for a claim: when it was claimed, or its run added).
    pub updated_at: Timestamp,
}

/// The process that holds a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimHolder {
    /// The host id of the process (`diag_owner`), when it recorded one.
    pub host: Option<String>,
    pub pid: i64,
    /// Until when its lease holds, unless its heartbeat renews it.
    pub lease_expires_at: Option<Timestamp>,
}

/// How many notifications are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QueueCounts {
    pub queued: u64,
    pub claimed: u64,
    pub done: u64,
    pub resolved: u64,
    pub failed: u64,
}

impl QueueCounts {
    /// Waiting or being investigated: what `max_pending` bounds.
    pub fn pending(&self) -> u64 {
        self.queued + self.claimed
    }
}

/// What the store keeps of alerts: a run's alert group, and the queue of `diag serve`.
pub trait AlertStore: Send + Sync {
    /// Records the alert group `run_id` investigates; the run must be RUNNING, and a run
    /// records one group.
    fn record_run_alerts(&self, run_id: &str, alerts: &RunAlerts) -> Result<(), StoreError>;
    /// The alert group a run investigated, if it investigated one.
    fn run_alerts(&self, run_id: &str) -> Result<Option<RunAlerts>, StoreError>;
    /// The newest run that investigates (RUNNING) or investigated the group of `identity`,
    /// a run FAILED `interrupted` not counted.
    fn investigated_run(&self, identity: &str) -> Result<Option<String>, StoreError>;

    /// Queues a notification, once per identity, while fewer than `max_pending` wait or are
    /// investigated (a resolved one is recorded `resolved` and does not count against it).
    fn enqueue(&self, n: &NewNotification, max_pending: u64) -> Result<Enqueued, StoreError>;
    /// Claims the oldest notification that waits, or whose claim's owner is gone, for this
    /// process; `None` when there is none. A notification claimed [`MAX_ATTEMPTS`] times
    /// already ends `failed` instead, and the next one is looked at.
    fn claim(&self) -> Result<Option<Claimed>, StoreError>;
    /// Adds the run a claim started to its notification (before the run does anything).
    fn claim_started_run(&self, id: i64, run_id: &str) -> Result<(), StoreError>;
    /// Ends a claim this process holds; refused (wrong state) when it holds none on `id`.
    fn end_claim(&self, id: i64, end: ClaimEnd<'_>) -> Result<(), StoreError>;
    /// One notification of the queue.
    fn queue_entry(&self, id: i64) -> Result<Option<QueueEntry>, StoreError>;
    /// The whole queue, oldest first.
    fn queue_entries(&self) -> Result<Vec<QueueEntry>, StoreError>;
    /// How many notifications are in each state.
    fn queue_counts(&self) -> Result<QueueCounts, StoreError>;

    /// Copies a run's alert group from another store (`diag store copy`): the run must be
    /// stored here, finished; `false` when it already has its alerts.
    fn import_run_alerts(&self, run_id: &str, alerts: &RunAlerts) -> Result<bool, StoreError>;
    /// Copies a notification from another store's queue (`diag store copy`) under a new id,
    /// in its state (a `claimed` one is refused: its claim belongs to a process of the other
    /// store), with its runs as far as they are stored here; `false` when a notification of
    /// its identity is already here.
    fn import_notification(&self, entry: &QueueEntry) -> Result<bool, StoreError>;
}

/// Most characters of a notification's stored failure.
pub const FAILURE_CHARS: usize = 500;

/// A failure as a notification keeps it: one line of at most [`FAILURE_CHARS`] characters.
pub fn failure_text(failure: &str) -> String {
    diag_records::text::one_line(failure.trim(), FAILURE_CHARS)
}

/// The failure of a notification given up after `attempts` claims without an end.
pub fn gave_up(attempts: u32) -> String {
    format!("claimed {attempts} times without an end (its investigator stopped each time)")
}

/// A run's alerts are recorded under their group's identity.
pub fn check_run_alerts(alerts: &RunAlerts) -> Result<(), RecordError> {
    check_identity("run alerts", &alerts.identity, &alerts.group)
}

/// A notification is queued under its group's identity and with its group's status.
pub fn check_notification(n: &NewNotification) -> Result<(), RecordError> {
    check_identity("alert notification", &n.identity, &n.group)?;
    if n.status != n.group.status() {
        return Err(RecordError::Invalid(format!(
            "an alert notification said {} of a group that is {}",
            n.status,
            n.group.status()
        )));
    }
    Ok(())
}

fn check_identity(what: &str, identity: &str, group: &AlertGroup) -> Result<(), RecordError> {
    if identity.trim().is_empty() || identity != group.identity() {
        return Err(RecordError::Invalid(format!(
            "{what} must carry the identity of their alert group"
        )));
    }
    Ok(())
}

/// A group's alerts as a store keeps them: canonical JSON of the array.
pub fn alerts_text(group: &AlertGroup) -> Result<String, RecordError> {
    super::codec::canonical(&group.alerts)
}

/// A group read back from its stored key and alerts.
pub fn decode_group(group_key: String, alerts: &str) -> Result<AlertGroup, RecordError> {
    Ok(AlertGroup {
        group_key,
        alerts: super::codec::json::<Vec<Alert>>("alerts", alerts)?,
    })
}

/// A run's alerts read back from their stored columns.
pub fn decode_run_alerts(
    identity: String,
    source: &str,
    group_key: String,
    alerts: &str,
) -> Result<RunAlerts, RecordError> {
    Ok(RunAlerts {
        identity,
        source: AlertSource::parse(source)?,
        group: decode_group(group_key, alerts)?,
    })
}

/// The runs of a notification as a store keeps them: a JSON array of run ids.
pub fn runs_text(runs: &[String]) -> String {
    serde_json::Value::from(runs.to_vec()).to_string()
}

/// The runs of a notification read back.
pub fn decode_runs(text: &str) -> Result<Vec<String>, RecordError> {
    super::codec::json("alert notification runs", text)
}

/// A stored count of attempts read back.
pub fn decode_attempts(attempts: i64) -> Result<u32, RecordError> {
    u32::try_from(attempts).map_err(|e| RecordError::decode("alert notification attempts", e))
}

/// What a claim does with a notification it looks at, in id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Consider {
    /// Claim it.
    Take,
    /// Claimed [`MAX_ATTEMPTS`] times already: end it `failed` with this failure, and look at
    /// the next one.
    GiveUp(String),
    /// Not claimable (another process investigates it, or it is finished): look at the next.
    Pass,
}

/// How a claim treats a notification in `state` claimed `attempts` times so far, whose claim's
/// owner (if it is claimed) is gone or not by `diag_owner::is_gone`.
pub fn consider(state: QueueState, attempts: u32, owner_gone: bool) -> Consider {
    let claimable = match state {
        QueueState::Queued => true,
        QueueState::Claimed => owner_gone,
        QueueState::Done | QueueState::Resolved | QueueState::Failed => false,
    };
    if !claimable {
        Consider::Pass
    } else if attempts >= MAX_ATTEMPTS {
        Consider::GiveUp(gave_up(attempts))
    } else {
        Consider::Take
    }
}

/// Why a write that needs this process's claim on notification `id` was refused, by its
/// stored state (`None`: no such notification) and whether this process owns it.
pub fn not_claimed(id: i64, state: Option<&str>, mine: bool) -> RecordError {
    let state = match state {
        None => "unknown".to_string(),
        Some("claimed") if !mine => "claimed by another process".to_string(),
        Some(s) => s.to_string(),
    };
    RecordError::NotClaimed { id, state }
}

/// `Ok` when notification `id` is claimed by this process, its refusal ([`not_claimed`])
/// otherwise.
pub fn require_claimed(id: i64, state: Option<&str>, mine: bool) -> Result<(), RecordError> {
    match state {
        Some("claimed") if mine => Ok(()),
        other => Err(not_claimed(id, other, mine)),
    }
}

/// The columns of a [`QueueRow`], in its order, for a backend's `SELECT`.
pub const QUEUE_COLUMNS: &str = "id, identity, state, status, receiver, group_key, alerts, \
     received_at, attempts, runs, failure, owner_host, owner_pid, lease_expires_at, updated_at";

/// One queue row as a backend reads it ([`QUEUE_COLUMNS`]), to be decoded once the cursor is
/// done.
#[derive(Debug, Clone)]
pub struct QueueRow {
    pub id: i64,
    pub identity: String,
    pub state: String,
    pub status: String,
    pub receiver: String,
    pub group_key: String,
    pub alerts: String,
    pub received_at: String,
    pub attempts: i64,
    pub runs: String,
    pub failure: Option<String>,
    pub owner_host: Option<String>,
    pub owner_pid: Option<i64>,
    pub lease_expires_at: Option<String>,
    pub updated_at: String,
}

impl QueueRow {
    pub fn decode(self) -> Result<QueueEntry, RecordError> {
        let state = QueueState::parse(&self.state)?;
        let claim = match (state, self.owner_pid) {
            (QueueState::Claimed, Some(pid)) => Some(ClaimHolder {
                host: self.owner_host,
                pid,
                lease_expires_at: self
                    .lease_expires_at
                    .as_deref()
                    .map(|t| super::codec::time("alert notification lease", t))
                    .transpose()?,
            }),
            _ => None,
        };
        Ok(QueueEntry {
            id: self.id,
            identity: self.identity,
            state,
            status: AlertStatus::parse(&self.status)
                .ok_or_else(|| RecordError::decode("alert status", &self.status))?,
            receiver: self.receiver,
            group: decode_group(self.group_key, &self.alerts)?,
            received_at: super::codec::time("alert notification received_at", &self.received_at)?,
            attempts: decode_attempts(self.attempts)?,
            runs: decode_runs(&self.runs)?,
            failure: self.failure,
            claim,
            updated_at: super::codec::time("alert notification updated_at", &self.updated_at)?,
        })
    }
}

/// A notification another store holds, checked before it is copied in: its identity is its
/// group's, and it is not `claimed`.
pub fn check_importable(entry: &QueueEntry) -> Result<(), RecordError> {
    check_identity("alert notification", &entry.identity, &entry.group)?;
    if entry.state == QueueState::Claimed {
        return Err(RecordError::Invalid(format!(
            "alert notification {} is claimed by a process of its store; it is copied once \
             its claim ends",
            entry.id
        )));
    }
    Ok(())
}

/// A run's alerts are copied after the run, and only once it is finished (`status` is the
/// stored status of `run_id`, `None` for an unknown run).
pub fn require_copied_run(run_id: &str, status: Option<&str>) -> Result<(), RecordError> {
    match status {
        None => Err(RecordError::Invalid(format!(
            "the alerts of run {run_id} are copied after the run"
        ))),
        Some("RUNNING") => Err(RecordError::Invalid(format!(
            "run {run_id} is RUNNING: its alerts are copied once it is finished"
        ))),
        Some(_) => Ok(()),
    }
}

/// The failure a notification keeps when no run could be started for it.
pub fn not_started(failure: &str) -> String {
    format!("no run could be started: {}", failure.trim())
}

/// Counts by state read back as `(state, count)` rows.
pub fn decode_counts(
    rows: impl IntoIterator<Item = (String, i64)>,
) -> Result<QueueCounts, RecordError> {
    let mut counts = QueueCounts::default();
    for (state, n) in rows {
        let n = u64::try_from(n).map_err(|e| RecordError::decode("queue count", e))?;
        match QueueState::parse(&state)? {
            QueueState::Queued => counts.queued = n,
            QueueState::Claimed => counts.claimed = n,
            QueueState::Done => counts.done = n,
            QueueState::Resolved => counts.resolved = n,
            QueueState::Failed => counts.failed = n,
        }
    }
    Ok(counts)
}

/// The process that asks for a write on a claim, as the queue stores its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimOwner<'a> {
    pub host: &'a str,
    pub pid: u32,
    pub token: Option<&'a str>,
}

/// The stored runs of notification `id` when `me` holds its claim, inside the caller's
/// transaction; refused ([`require_claimed`]) otherwise.
fn held_runs(
    tx: &mut dyn Tx,
    sql: &Statements,
    id: i64,
    me: ClaimOwner<'_>,
) -> Result<Vec<String>, StoreError> {
    let rows = tx.query(
        sql.held_claim,
        &[
            Param::Int(id),
            Param::Text(me.host),
            Param::Int(i64::from(me.pid)),
            Param::opt_text(me.token),
        ],
    )?;
    let Some(row) = rows.first() else {
        return Err(not_claimed(id, None, false).into());
    };
    let state = row.text(0, "alert notification state")?;
    let mine = row.int(1, "alert notification owner")? != 0;
    require_claimed(id, Some(&state), mine)?;
    Ok(decode_runs(&row.text(2, "alert notification runs")?)?)
}

fn set_runs<D: Driver>(d: &D, tx: &mut dyn Tx, id: i64, runs: &[String]) -> Result<(), StoreError> {
    let (runs, now) = (runs_text(runs), d.now().to_string());
    let params = [Param::Int(id), Param::Text(&runs), Param::Text(&now)];
    tx.execute(d.statements().set_claim_runs, &params)?;
    Ok(())
}

/// `runs` as far as each one is a stored run, inside the caller's transaction.
fn stored_runs(
    tx: &mut dyn Tx,
    sql: &Statements,
    runs: &[String],
) -> Result<Vec<String>, StoreError> {
    let mut kept = Vec::new();
    for run in runs {
        if !tx.query(sql.run_exists, &[Param::Text(run)])?.is_empty() {
            kept.push(run.clone());
        }
    }
    Ok(kept)
}

/// [`AlertStore::claim_started_run`] on any backend.
pub fn claim_started_run<D: Driver>(
    d: &D,
    me: ClaimOwner<'_>,
    id: i64,
    run_id: &str,
) -> Result<(), StoreError> {
    d.write("add a run to an alert notification", |tx| {
        let mut runs = held_runs(tx, d.statements(), id, me)?;
        runs.push(run_id.to_string());
        set_runs(d, tx, id, &runs)
    })
}

/// [`AlertStore::end_claim`] on any backend: an investigated notification keeps its run and
/// is done; a failed one keeps only the runs that were stored (a run id drawn for a run that
/// never started is not kept) and its failure; a released one is queued again, the attempt
/// not counted.
pub fn end_claim<D: Driver>(
    d: &D,
    me: ClaimOwner<'_>,
    id: i64,
    end: ClaimEnd<'_>,
) -> Result<(), StoreError> {
    let now = d.now().to_string();
    let sql = d.statements();
    d.write("end the claim of an alert notification", |tx| {
        let runs = held_runs(tx, sql, id, me)?;
        match end {
            ClaimEnd::Investigated { run_id } => {
                if !runs.iter().any(|r| r == run_id) {
                    let mut runs = runs;
                    runs.push(run_id.to_string());
                    set_runs(d, tx, id, &runs)?;
                }
                tx.execute(sql.claim_done, &[Param::Int(id), Param::Text(&now)])?;
            }
            ClaimEnd::Failed { failure } => {
                let stored = stored_runs(tx, sql, &runs)?;
                if stored != runs {
                    set_runs(d, tx, id, &stored)?;
                }
                let failure = failure_text(failure);
                let params = [Param::Int(id), Param::Text(&failure), Param::Text(&now)];
                tx.execute(sql.claim_failed, &params)?;
            }
            ClaimEnd::Released => {
                tx.execute(sql.claim_released, &[Param::Int(id), Param::Text(&now)])?;
            }
        }
        Ok(())
    })
}

/// [`AlertStore::import_run_alerts`] on any backend: whether the run's alerts were copied
/// (`false`: it had them already).
pub fn import_run_alerts<D: Driver>(
    d: &D,
    run_id: &str,
    alerts: &RunAlerts,
) -> Result<bool, StoreError> {
    check_run_alerts(alerts)?;
    let text = alerts_text(&alerts.group)?;
    let now = d.now().to_string();
    let sql = d.statements();
    d.write("copy a run's alerts", |tx| {
        let status = tx.query(sql.run_status, &[Param::Text(run_id)])?;
        let status = status
            .first()
            .map(|r| r.text(0, "run status"))
            .transpose()?;
        require_copied_run(run_id, status.as_deref())?;
        let params = [
            Param::Text(run_id),
            Param::Text(&alerts.identity),
            Param::Text(alerts.source.as_str()),
            Param::Text(&alerts.group.group_key),
            Param::Text(&text),
            Param::Text(&now),
        ];
        Ok(tx.execute(sql.copy_run_alerts, &params)? == 1)
    })
}

/// [`AlertStore::import_notification`] on any backend: whether the notification was copied
/// (`false`: its identity is queued already). It keeps the runs this store holds.
pub fn import_notification<D: Driver>(d: &D, entry: &QueueEntry) -> Result<bool, StoreError> {
    check_importable(entry)?;
    let text = alerts_text(&entry.group)?;
    let sql = d.statements();
    d.write("copy an alert notification", |tx| {
        let runs = runs_text(&stored_runs(tx, sql, &entry.runs)?);
        let (received, updated) = (entry.received_at.to_string(), entry.updated_at.to_string());
        let params = [
            Param::Text(&entry.identity),
            Param::Text(entry.state.as_str()),
            Param::Text(entry.status.as_str()),
            Param::Text(&entry.receiver),
            Param::Text(&entry.group.group_key),
            Param::Text(&text),
            Param::Text(&received),
            Param::Int(i64::from(entry.attempts)),
            Param::Text(&runs),
            Param::opt_text(entry.failure.as_deref()),
            Param::Text(&updated),
        ];
        Ok(tx.execute(sql.copy_notification, &params)? == 1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_takes_what_waits_or_was_left_and_gives_up_after_max_attempts() {
        use QueueState::*;
        assert_eq!(consider(Queued, 0, false), Consider::Take);
        assert_eq!(consider(Claimed, 1, false), Consider::Pass);
        assert_eq!(consider(Claimed, 1, true), Consider::Take);
        assert_eq!(consider(Claimed, MAX_ATTEMPTS - 1, true), Consider::Take);
        assert_eq!(
            consider(Claimed, MAX_ATTEMPTS, true),
            Consider::GiveUp(
                "claimed 3 times without an end (its investigator stopped each time)".into()
            )
        );
        for finished in [Done, Resolved, Failed] {
            assert_eq!(consider(finished, 0, true), Consider::Pass);
        }
    }

    #[test]
    fn only_this_processs_claim_is_accepted() {
        assert!(require_claimed(1, Some("claimed"), true).is_ok());
        let refused = |state, mine| require_claimed(4, state, mine).unwrap_err().to_string();
        assert_eq!(
            refused(Some("claimed"), false),
            "alert notification 4 is claimed by another process, not claimed by this process"
        );
        assert_eq!(
            refused(Some("done"), true),
            "alert notification 4 is done, not claimed by this process"
        );
        assert_eq!(
            refused(None, true),
            "alert notification 4 is unknown, not claimed by this process"
        );
    }

    #[test]
    fn a_failure_is_kept_as_one_bounded_line() {
        assert_eq!(failure_text(" no\nmodel "), "no model");
        assert_eq!(
            failure_text(&"x".repeat(900)).chars().count(),
            FAILURE_CHARS + 1
        );
        assert_eq!(
            decode_runs(&runs_text(&["a".into(), "b\"".into()])).unwrap(),
            ["a", "b\""]
        );
    }
}
