//! Alerts in the run store (openspec/specs/alerts/spec.md, openspec/specs/run-store/spec.md
//! "Alerts and the alert queue"): the alert group a run investigated, kept with the run, and
//! the durable queue of `diag serve`, where the notifications Alertmanager delivers wait until
//! one process investigates them.
//!
//! The rules, written once for every backend:
//! - a run's alerts are recorded while it is RUNNING, once; a group counts as investigated when
//!   a finished run holds its identity, except a run that ended FAILED `interrupted` (it did
//!   not finish its work) ([`AlertStore::investigated_run`]);
//! - a notification is queued once per identity ([`crate::alert::AlertGroup::identity`]): a
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
//! - only the owner of a claim can end it ([`AlertStore::end_claim`]).

use serde::{Deserialize, Serialize};

use super::{RecordError, StoreError};
use crate::alert::{AlertGroup, AlertStatus};
use crate::clock::Timestamp;

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

/// A notification delivered to `diag serve`, to be queued.
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

/// One queued notification, as `diag serve` and the tests read the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    pub id: i64,
    pub identity: String,
    pub state: QueueState,
    pub status: AlertStatus,
    pub group_key: String,
    pub received_at: Timestamp,
    pub attempts: u32,
    /// The runs its claims started, oldest first.
    pub runs: Vec<String>,
    pub failure: Option<String>,
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
    /// The newest finished run that investigated the group of `identity`, a run FAILED
    /// `interrupted` not counted.
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
}
