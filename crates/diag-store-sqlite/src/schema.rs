//! The schema and its migrations. `PRAGMA user_version` holds the schema version; migration
//! `i` (0-based) takes the file from version `i` to `i + 1` inside one `BEGIN IMMEDIATE`
//! transaction, so a crash leaves either the old or the new schema, and two processes opening
//! a new file at once migrate it exactly once. A file whose version is newer than
//! [`SCHEMA_VERSION`] is refused and left untouched: there are no downgrades.
//!
//! Migrations are append-only: a released migration is never edited, a change is a new entry.
//! `docs/SCHEMA.md` describes the resulting tables column by column.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::SqliteError;

/// Version 1: every table, `STRICT` so SQLite itself rejects a value of the wrong type.
///
/// `diagnosis_run` is listed newest first by its rowid (creation order), which needs no
/// index of its own and puts a replayed run (whose `started_at` is the recorded, pinned
/// time) on top where its operator expects it; `created_at` is the store's wall time, used
/// for retention by age. Its indexes are kept to what a write must maintain anyway: the
/// session lookup, and a partial index of the RUNNING runs that the sweep on every open
/// reads (it stays tiny, since finished runs leave it).
///
/// Child tables are `WITHOUT ROWID` with a primary key that starts with `run_id`: a run's
/// trace is stored contiguously, read with one range scan, and deleted by the cascade
/// through that same key, with no second index to maintain.
const V1: &str = r#"
CREATE TABLE tool_catalog (
    sha256  TEXT PRIMARY KEY,
    catalog TEXT NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE diagnosis_run (
    run_id            TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL,
    question          TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('RUNNING', 'SUCCESS', 'FAILED')),
    failure           TEXT,
    answer            TEXT,
    started_at        TEXT NOT NULL,
    finished_at       TEXT,
    duration_ms       INTEGER,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    step_count        INTEGER NOT NULL DEFAULT 0,
    tool_count        INTEGER NOT NULL DEFAULT 0,
    degraded          INTEGER NOT NULL DEFAULT 0 CHECK (degraded IN (0, 1)),
    effective_verdict TEXT CHECK (effective_verdict IN ('PASS', 'LOW_CONFID', 'REJECT')),
    fallback_kind     TEXT CHECK (fallback_kind IN ('pre_verification', 'post_verification')),
    path              TEXT,
    self_evaluation   TEXT,
    tools_sha256      TEXT NOT NULL REFERENCES tool_catalog (sha256),
    owner_pid         INTEGER NOT NULL,
    owner_token       TEXT,
    created_at        TEXT NOT NULL
) STRICT;

CREATE INDEX diagnosis_run_session ON diagnosis_run (session_id);
CREATE INDEX diagnosis_run_running ON diagnosis_run (owner_pid) WHERE status = 'RUNNING';

CREATE TABLE orchestration_event (
    run_id      TEXT NOT NULL REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    node        TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    round       INTEGER NOT NULL,
    status      TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    duration_ms INTEGER NOT NULL,
    detail      TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE agent_step (
    run_id            TEXT NOT NULL REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    seq               INTEGER NOT NULL,
    agent             TEXT NOT NULL,
    round             INTEGER NOT NULL,
    attempt           INTEGER NOT NULL,
    turn              INTEGER NOT NULL,
    status            TEXT NOT NULL,
    model             TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    finish_reason     TEXT,
    duration_ms       INTEGER NOT NULL,
    prompt_id         TEXT NOT NULL,
    prompt_version    INTEGER NOT NULL,
    prompt_sha256     TEXT NOT NULL,
    prompt_size       INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE tool_invocation (
    run_id        TEXT NOT NULL REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    invocation_id TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    session_id    TEXT NOT NULL,
    agent         TEXT NOT NULL,
    round         INTEGER NOT NULL,
    tool_name     TEXT NOT NULL,
    arguments     TEXT NOT NULL,
    output        TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('ok', 'error', 'blocked')),
    duration_ms   INTEGER NOT NULL,
    PRIMARY KEY (run_id, invocation_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE model_exchange (
    run_id         TEXT NOT NULL REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    seq            INTEGER NOT NULL,
    agent          TEXT NOT NULL,
    round          INTEGER NOT NULL,
    attempt        INTEGER NOT NULL,
    turn           INTEGER NOT NULL,
    request        TEXT NOT NULL,
    request_sha256 TEXT NOT NULL,
    response       TEXT,
    error          TEXT,
    CHECK ((response IS NULL) <> (error IS NULL)),
    PRIMARY KEY (run_id, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE evaluation (
    run_id     TEXT PRIMARY KEY REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    metrics    TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT, WITHOUT ROWID;
"#;

/// Version 2: the limits a run ran under (the run file's `limits` object, JSON text), so an
/// export records them and its replay runs under them. Runs stored before have none (NULL),
/// and export as files that record none, which replay under the defaults those runs had.
const V2: &str = r#"
ALTER TABLE diagnosis_run ADD COLUMN limits TEXT;
"#;

/// Version 3, resumed runs (`diag ask --resume`): the run a run resumed, and what it reused
/// of it. All nullable, so every run stored before reads as one started afresh.
/// `resumed_from` is plain text, not a foreign key: the original run may be deleted by `gc`
/// while the fact that this run continued it stays true. Reuse is a prefix of the run's calls,
/// so two counts say which model calls and tool calls were reused; `reuse_stopped` says why
/// reuse ended early.
const V3: &str = r#"
ALTER TABLE diagnosis_run ADD COLUMN resumed_from TEXT;
ALTER TABLE diagnosis_run ADD COLUMN reused_model_calls INTEGER;
ALTER TABLE diagnosis_run ADD COLUMN reused_tool_calls INTEGER;
ALTER TABLE diagnosis_run ADD COLUMN reuse_stopped TEXT;
"#;

/// Version 4, content-addressed request storage (`blobs.rs`): the large parts of model requests stored
/// once per store, keyed by sha256, and referenced from the exchange rows.
///
/// `blob` holds the parts; `blob_ref` their reference counts, a narrow table of its own so
/// that counting a reference writes one small page rather than the page of a large body.
/// The counts are kept by triggers on `model_exchange` (insert, delete, the cascade of a
/// deleted run, and the migration's update), each counting an exchange once per distinct
/// blob it names; the partial index finds the blobs no exchange names any more, for `gc`.
/// The migration's Rust step ([`crate::blobs::convert_exchanges`]) then converts every
/// exchange stored whole.
const V4_REQUEST_BLOBS: &str = r#"
CREATE TABLE blob (
    id     INTEGER PRIMARY KEY,
    sha256 TEXT NOT NULL UNIQUE,
    body   TEXT NOT NULL
) STRICT;

CREATE TABLE blob_ref (
    id   INTEGER PRIMARY KEY REFERENCES blob (id) ON DELETE CASCADE,
    refs INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE INDEX blob_ref_unused ON blob_ref (id) WHERE refs <= 0;

ALTER TABLE model_exchange ADD COLUMN request_blobs TEXT;

CREATE TRIGGER model_exchange_blobs_insert AFTER INSERT ON model_exchange
WHEN new.request_blobs IS NOT NULL BEGIN
    UPDATE blob_ref SET refs = refs + 1
    WHERE id IN (SELECT value ->> 1 FROM json_each(new.request_blobs));
END;

CREATE TRIGGER model_exchange_blobs_delete AFTER DELETE ON model_exchange
WHEN old.request_blobs IS NOT NULL BEGIN
    UPDATE blob_ref SET refs = refs - 1
    WHERE id IN (SELECT value ->> 1 FROM json_each(old.request_blobs));
END;

CREATE TRIGGER model_exchange_blobs_update AFTER UPDATE OF request_blobs ON model_exchange
BEGIN
    UPDATE blob_ref SET refs = refs - 1
    WHERE old.request_blobs IS NOT NULL
      AND id IN (SELECT value ->> 1 FROM json_each(old.request_blobs));
    UPDATE blob_ref SET refs = refs + 1
    WHERE new.request_blobs IS NOT NULL
      AND id IN (SELECT value ->> 1 FROM json_each(new.request_blobs));
END;
"#;

/// Version 5, compressed texts (`packed.rs`): a zstd sibling for each large per-run text;
/// and an index on the status, so that `diag runs --status` walks it instead of the table.
/// When the sibling holds a frame, the text column holds `''` (so `model_exchange`'s check
/// that exactly one of response and error is set still holds); rows written before keep
/// their plain texts.
const V5_PACKED_TEXTS: &str = r#"
ALTER TABLE model_exchange ADD COLUMN response_zstd BLOB;
ALTER TABLE tool_invocation ADD COLUMN output_zstd BLOB;
ALTER TABLE diagnosis_run ADD COLUMN self_evaluation_zstd BLOB;
ALTER TABLE diagnosis_run ADD COLUMN answer_zstd BLOB;

CREATE INDEX diagnosis_run_status ON diagnosis_run (status);
"#;

/// Version 6: a run's owner holds a lease (`diag-owner`): its host id and the time until which
/// it vouches to be alive, renewed by its heartbeat. Rows written before keep NULL in both and
/// are judged by the pid rule, as before.
const V6_LEASES: &str = r#"
ALTER TABLE diagnosis_run ADD COLUMN owner_host TEXT;
ALTER TABLE diagnosis_run ADD COLUMN lease_expires_at TEXT;
"#;

/// Version 7, what model endpoints taught (`learnings.rs`): one row per endpoint (base URL
/// without credentials, query or fragment, and model name) with the structured-output form it
/// takes, its context size and when it last taught something; and, per run, what the store
/// remembered of its models' endpoints when it started (deleted with the run). Runs stored
/// before have no such rows.
const V7_ENDPOINT_LEARNINGS: &str = r#"
CREATE TABLE endpoint_learning (
    base_url       TEXT NOT NULL,
    model          TEXT NOT NULL,
    form           TEXT,
    context_tokens INTEGER,
    learned_at     TEXT NOT NULL,
    PRIMARY KEY (base_url, model)
) STRICT, WITHOUT ROWID;

CREATE TABLE run_endpoint (
    run_id         TEXT NOT NULL REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    base_url       TEXT NOT NULL,
    model          TEXT NOT NULL,
    form           TEXT,
    context_tokens INTEGER,
    learned_at     TEXT,
    PRIMARY KEY (run_id, base_url, model)
) STRICT, WITHOUT ROWID;
"#;

/// Version 8, alerts (`alerts.rs`; the rules are `diag_store::alerts`): the alert group
/// a run investigated (`run_alert`, one per run, deleted with it, found by identity), and the
/// durable queue of `diag serve` (`alert_queue`, one row per notification identity). A
/// notification's runs are a JSON array of run ids, not foreign keys: `gc` may delete a run
/// while the fact that a claim started it stays. `AUTOINCREMENT` so a queue id is never used
/// twice. The partial index holds the notifications a claim looks at.
const V8_ALERTS: &str = r#"
CREATE TABLE run_alert (
    run_id      TEXT PRIMARY KEY REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    identity    TEXT NOT NULL,
    source      TEXT NOT NULL CHECK (source IN ('api', 'webhook')),
    group_key   TEXT NOT NULL,
    alerts      TEXT NOT NULL,
    recorded_at TEXT NOT NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX run_alert_identity ON run_alert (identity);

CREATE TABLE alert_queue (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    identity         TEXT NOT NULL UNIQUE,
    state            TEXT NOT NULL
                     CHECK (state IN ('queued', 'claimed', 'done', 'resolved', 'failed')),
    status           TEXT NOT NULL CHECK (status IN ('firing', 'resolved')),
    receiver         TEXT NOT NULL,
    group_key        TEXT NOT NULL,
    alerts           TEXT NOT NULL,
    received_at      TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    runs             TEXT NOT NULL DEFAULT '[]',
    owner_host       TEXT,
    owner_pid        INTEGER,
    owner_token      TEXT,
    lease_expires_at TEXT,
    failure          TEXT,
    updated_at       TEXT NOT NULL
) STRICT;

CREATE INDEX alert_queue_pending ON alert_queue (id) WHERE state IN ('queued', 'claimed');
"#;

/// Version 9, the sampling parameters an endpoint refused (`learnings.rs`): `refuses_temperature`
/// and `refuses_seed`, 1 once the endpoint refused the parameter and NULL otherwise, on what
/// endpoints taught and on what each run started with. Rows written before have NULL in both:
/// nothing refused.
const V9_SAMPLING_REFUSALS: &str = r#"
ALTER TABLE endpoint_learning ADD COLUMN refuses_temperature INTEGER CHECK (refuses_temperature = 1);
ALTER TABLE endpoint_learning ADD COLUMN refuses_seed INTEGER CHECK (refuses_seed = 1);
ALTER TABLE run_endpoint ADD COLUMN refuses_temperature INTEGER CHECK (refuses_temperature = 1);
ALTER TABLE run_endpoint ADD COLUMN refuses_seed INTEGER CHECK (refuses_seed = 1);
"#;

/// Version 10: the recorded run a run replays (`diag replay`, `ask --fixture`), so `diag runs`
/// tells replays from live runs. Plain text, not a foreign key: the recording's run is most
/// often in another store. Runs stored before read as live (NULL).
const V10_REPLAY_OF: &str = r#"
ALTER TABLE diagnosis_run ADD COLUMN replay_of TEXT;
"#;

/// One schema migration: its SQL, then, for a migration that moves data SQL alone cannot
/// (it must keep bytes exact), a step in Rust, in the same transaction.
pub(crate) struct Migration {
    pub sql: &'static str,
    pub then: Option<fn(&Connection) -> rusqlite::Result<()>>,
}

impl Migration {
    const fn sql(sql: &'static str) -> Migration {
        Migration { sql, then: None }
    }
}

/// The ordered migrations; entry `i` moves the schema from version `i` to `i + 1`.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration::sql(V1),
    Migration::sql(V2),
    Migration::sql(V3),
    Migration {
        sql: V4_REQUEST_BLOBS,
        then: Some(crate::blobs::convert_exchanges),
    },
    Migration::sql(V5_PACKED_TEXTS),
    Migration::sql(V6_LEASES),
    Migration::sql(V7_ENDPOINT_LEARNINGS),
    Migration::sql(V8_ALERTS),
    Migration::sql(V9_SAMPLING_REFUSALS),
    Migration::sql(V10_REPLAY_OF),
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

pub(crate) fn user_version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
}

/// Refuses a file that holds tables but no diag schema version before anything is written
/// to it: opening someone else's SQLite database must not switch it to WAL mode (or touch it
/// at all). The migration checks again under the write lock.
pub(crate) fn refuse_foreign(conn: &Connection, path: &Path) -> Result<(), SqliteError> {
    let fail = |e| SqliteError::sqlite(path, "read the schema version", e);
    // One statement, so one snapshot: another process creating the store commits its tables
    // and its version together, and two separate reads could see one without the other.
    let (version, tables): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version), \
             (SELECT count(*) FROM sqlite_schema WHERE type = 'table')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(fail)?;
    if version == 0 && tables > 0 {
        return Err(SqliteError::ForeignDatabase {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Brings the file to [`SCHEMA_VERSION`], or refuses a newer or foreign file.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), SqliteError> {
    migrate_to(conn, path, MIGRATIONS)
}

/// Applies `migrations` (a prefix of [`MIGRATIONS`]; tests build a store of an older schema
/// with one) from the file's version on.
pub(crate) fn migrate_to(
    conn: &mut Connection,
    path: &Path,
    migrations: &[Migration],
) -> Result<(), SqliteError> {
    let open_err = |e| SqliteError::sqlite(path, "read the schema version", e);
    let found = user_version(conn).map_err(open_err)?;
    if found > SCHEMA_VERSION {
        return Err(SqliteError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found as usize >= migrations.len() {
        return Ok(());
    }
    for (index, migration) in migrations.iter().enumerate().skip(found as usize) {
        let target = index as u32 + 1;
        let fail = |e| SqliteError::Migration {
            path: path.to_path_buf(),
            version: target,
            source: e,
        };
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| SqliteError::sqlite(path, "start the schema migration", e))?;
        // Another process may have migrated while this one waited for the write lock.
        let current = user_version(&tx).map_err(fail)?;
        if current >= target {
            continue;
        }
        if current == 0 {
            let tables: i64 = tx
                .query_row(
                    "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
                    [],
                    |r| r.get(0),
                )
                .map_err(fail)?;
            if tables > 0 {
                return Err(SqliteError::ForeignDatabase {
                    path: path.to_path_buf(),
                });
            }
        }
        tx.execute_batch(migration.sql).map_err(fail)?;
        if let Some(then) = migration.then {
            then(&tx).map_err(fail)?;
        }
        tx.pragma_update(None, "user_version", target)
            .map_err(fail)?;
        tx.commit().map_err(fail)?;
    }
    Ok(())
}

/// For a file this process cannot write: reads work only at exactly the current version.
pub(crate) fn check_read_only(conn: &Connection, path: &Path) -> Result<(), SqliteError> {
    let found =
        user_version(conn).map_err(|e| SqliteError::sqlite(path, "read the schema version", e))?;
    if found > SCHEMA_VERSION {
        return Err(SqliteError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found < SCHEMA_VERSION {
        return Err(SqliteError::ReadOnlyNeedsMigration {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::NewRun;
    use crate::SqliteStore;
    use diag_graph::clock::Timestamp;
    use diag_store::Store;
    use serde_json::json;

    fn new_run(run_id: &str, limits: Option<serde_json::Value>) -> NewRun {
        NewRun {
            run_id: run_id.into(),
            session_id: "ses-1".into(),
            question: "why does checkout return 502?".into(),
            started_at: Timestamp::parse_rfc3339("2026-11-30T14:00:00Z").unwrap(),
            tools: Vec::new(),
            limits,
            resumed_from: None,
            replay_of: None,
        }
    }

    #[test]
    fn a_run_keeps_the_limits_it_was_created_with() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(SqliteStore::open(dir.path().join("runs.db")).unwrap());
        let limits = json!({"max_turns": 1, "max_tool_calls": 20, "tool_timeout_secs": 5});
        store
            .create_run(new_run("run-limits", Some(limits.clone())))
            .unwrap();
        store.create_run(new_run("run-none", None)).unwrap();
        let got = |id: &str| store.get_run(id).unwrap().unwrap().limits;
        assert_eq!(got("run-limits"), Some(limits));
        assert_eq!(got("run-none"), None);
    }

    /// A store written at version 1 (before limits were kept) opens, migrates, and its runs
    /// read back with no limits; new runs keep theirs.
    #[test]
    fn a_version_1_store_migrates_and_its_runs_have_no_limits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(V1).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.execute_batch(
                "INSERT INTO tool_catalog VALUES ('c0', '[]');
                 INSERT INTO diagnosis_run (run_id, session_id, question, status, started_at,
                     tools_sha256, owner_pid, created_at)
                 VALUES ('run-old', 'ses-1', 'q?', 'FAILED', '2026-11-30T14:00:00.000Z',
                     'c0', 1, '2026-11-30T14:00:00.000Z');",
            )
            .unwrap();
        }
        let store = Store::new(SqliteStore::open(&path).unwrap());
        let old = store.get_run("run-old").unwrap().unwrap();
        assert_eq!(old.limits, None);
        assert_eq!(old.question, "q?");
        let limits = json!({"max_turns": 3});
        store
            .create_run(new_run("run-new", Some(limits.clone())))
            .unwrap();
        assert_eq!(
            store.get_run("run-new").unwrap().unwrap().limits,
            Some(limits)
        );
        drop(store);
        let conn = Connection::open(&path).unwrap();
        assert_eq!(user_version(&conn).unwrap(), SCHEMA_VERSION);
    }
}
