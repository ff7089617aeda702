//! The schema and its versioned migrations. The version is the one row of `diag_schema`;
//! migrations run in one transaction under a transaction-level advisory lock, so processes
//! that open a new database at the same time create it once and the others wait and then see
//! it. A database that has tables but no `diag_schema` is someone else's and is refused
//! untouched; so is a store of a newer schema version.
//!
//! Tables mirror the SQLite store's concepts (docs/SCHEMA.md); the trace rows keep each
//! record as the JSON text of its serialized form, so that what is read back is exactly what
//! was recorded (exports are byte-identical across backends), with the columns that queries
//! need (status, session, counts, the node of an event) beside it.

use tokio_postgres::Client;

use super::error::PgError;
use super::wait;

/// Version 1.
const V1: &str = r#"
CREATE TABLE diag_schema (version integer NOT NULL);
INSERT INTO diag_schema (version) VALUES (0);

CREATE TABLE diagnosis_run (
    run_id            text PRIMARY KEY,
    created_seq       bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    session_id        text NOT NULL,
    question          text NOT NULL,
    status            text NOT NULL CHECK (status IN ('RUNNING', 'SUCCESS', 'FAILED')),
    failure           text,
    answer            text,
    started_at        text NOT NULL,
    finished_at       text,
    duration_ms       bigint,
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    step_count        bigint NOT NULL DEFAULT 0,
    tool_count        bigint NOT NULL DEFAULT 0,
    degraded          boolean NOT NULL DEFAULT false,
    effective_verdict text,
    fallback_kind     text,
    path              text NOT NULL DEFAULT '[]',
    self_evaluation   text,
    tools             text NOT NULL,
    limits            text,
    owner_host        text NOT NULL,
    owner_pid         bigint NOT NULL,
    owner_token       text,
    lease_expires_at  text NOT NULL,
    created_at        text NOT NULL,
    resumed_from      text,
    reuse             text
);
CREATE INDEX diagnosis_run_session ON diagnosis_run (session_id, created_seq);
CREATE INDEX diagnosis_run_status ON diagnosis_run (status, created_seq);
CREATE INDEX diagnosis_run_created ON diagnosis_run (created_at);

CREATE TABLE orchestration_event (
    run_id text NOT NULL REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    seq    bigint NOT NULL,
    node   text NOT NULL,
    record text NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE agent_step (
    run_id            text NOT NULL REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    seq               bigint NOT NULL,
    prompt_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    record            text NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE model_exchange (
    run_id         text NOT NULL REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    seq            bigint NOT NULL,
    agent          text NOT NULL,
    round          bigint NOT NULL,
    attempt        bigint NOT NULL,
    turn           bigint NOT NULL,
    request        text NOT NULL,
    request_sha256 text NOT NULL,
    response       text,
    error          text,
    PRIMARY KEY (run_id, seq),
    CHECK ((response IS NULL) <> (error IS NULL))
);

CREATE TABLE tool_invocation (
    run_id        text NOT NULL REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    invocation_id text NOT NULL,
    seq           bigint NOT NULL,
    record        text NOT NULL,
    PRIMARY KEY (run_id, invocation_id),
    UNIQUE (run_id, seq)
);

CREATE TABLE evaluation (
    run_id     text PRIMARY KEY REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    metrics    text NOT NULL,
    created_at text NOT NULL
);
"#;

/// Version 2, what model endpoints taught (`learnings.rs`; the SQLite store's version 7):
/// one row per endpoint (base URL without credentials, query or fragment, and model name) and,
/// per run, what the store remembered of its models' endpoints when it started.
const V2_ENDPOINT_LEARNINGS: &str = r#"
CREATE TABLE endpoint_learning (
    base_url       text NOT NULL,
    model          text NOT NULL,
    form           text,
    context_tokens bigint,
    learned_at     text NOT NULL,
    PRIMARY KEY (base_url, model)
);

CREATE TABLE run_endpoint (
    run_id         text NOT NULL REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    base_url       text NOT NULL,
    model          text NOT NULL,
    form           text,
    context_tokens bigint,
    learned_at     text,
    PRIMARY KEY (run_id, base_url, model)
);
"#;

/// Version 3, alerts (`alerts.rs`; the SQLite store's version 8): the alert group a run
/// investigated (`run_alert`, deleted with its run) and the durable queue of `diag serve`
/// (`alert_queue`), whose runs are a JSON array of run ids, not foreign keys (`gc` may delete
/// a run while the fact that a claim started it stays).
const V3_ALERTS: &str = r#"
CREATE TABLE run_alert (
    run_id      text PRIMARY KEY REFERENCES diagnosis_run (run_id) ON DELETE CASCADE,
    identity    text NOT NULL,
    source      text NOT NULL CHECK (source IN ('api', 'webhook')),
    group_key   text NOT NULL,
    alerts      text NOT NULL,
    recorded_at text NOT NULL
);
CREATE INDEX run_alert_identity ON run_alert (identity);

CREATE TABLE alert_queue (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    identity         text NOT NULL UNIQUE,
    state            text NOT NULL
                     CHECK (state IN ('queued', 'claimed', 'done', 'resolved', 'failed')),
    status           text NOT NULL CHECK (status IN ('firing', 'resolved')),
    receiver         text NOT NULL,
    group_key        text NOT NULL,
    alerts           text NOT NULL,
    received_at      text NOT NULL,
    attempts         bigint NOT NULL DEFAULT 0,
    runs             text NOT NULL DEFAULT '[]',
    owner_host       text,
    owner_pid        bigint,
    owner_token      text,
    lease_expires_at text,
    failure          text,
    updated_at       text NOT NULL
);
CREATE INDEX alert_queue_pending ON alert_queue (id) WHERE state IN ('queued', 'claimed');
"#;

/// Version 4, the sampling parameters an endpoint refused (`learnings.rs`; the SQLite store's
/// version 9): `refuses_temperature` and `refuses_seed`, `true` once the endpoint refused the
/// parameter and NULL otherwise, on what endpoints taught and on what each run started with.
/// Rows written before have NULL in both: nothing refused.
const V4_SAMPLING_REFUSALS: &str = r#"
ALTER TABLE endpoint_learning ADD COLUMN refuses_temperature boolean;
ALTER TABLE endpoint_learning ADD COLUMN refuses_seed boolean;
ALTER TABLE run_endpoint ADD COLUMN refuses_temperature boolean;
ALTER TABLE run_endpoint ADD COLUMN refuses_seed boolean;
"#;

/// Version 5, the recorded run a run replays (`diag replay`, `ask --fixture`; the SQLite
/// store's version 10): plain text, not a foreign key. Runs stored before read as live.
const V5_REPLAY_OF: &str = r#"
ALTER TABLE diagnosis_run ADD COLUMN replay_of text;
"#;

/// The ordered migrations; entry `i` moves the schema from version `i` to `i + 1`.
/// Append-only: a released migration is never edited.
const MIGRATIONS: &[&str] = &[
    V1,
    V2_ENDPOINT_LEARNINGS,
    V3_ALERTS,
    V4_SAMPLING_REFUSALS,
    V5_REPLAY_OF,
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Whether `diag_schema` exists, and how many tables the schema holds, from the catalog by
/// the statement's snapshot. (`to_regclass` is not used: it looks names up without a lock, so
/// it may answer from a cache that has not yet seen another session's committed CREATE.)
const EXISTS_AND_TABLES: &str = "SELECT \
     count(*) FILTER (WHERE tablename = 'diag_schema') > 0, count(*) \
     FROM pg_catalog.pg_tables WHERE schemaname = current_schema()";

/// The advisory lock key of migrations ("diag" in ASCII).
const MIGRATION_LOCK: i64 = 0x6469_6167;

/// Brings the schema to [`SCHEMA_VERSION`] (creating it only when `create`), or refuses the
/// database.
pub(crate) fn prepare(client: &mut Client, target: &str, create: bool) -> Result<(), PgError> {
    let fail = |op, e: tokio_postgres::Error| PgError::postgres(target, op, &e);
    if let Some(found) = read_version(client, target, create)? {
        if found == SCHEMA_VERSION {
            return Ok(());
        }
        if found > SCHEMA_VERSION {
            return Err(PgError::NewerSchema {
                target: target.to_string(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
    } else if !create {
        return Err(PgError::Missing {
            target: target.to_string(),
            detail: "the database holds no diag schema (a command that writes runs creates it)"
                .into(),
        });
    }
    let tx = wait(client.transaction()).map_err(|e| fail("migrate the schema", e))?;
    wait(tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]))
        .map_err(|e| fail("migrate the schema", e))?;
    // Under the lock: another process may have created or migrated it meanwhile.
    let found = match version_in(&tx, target)? {
        Some(v) => v,
        None => {
            if has_foreign_tables(&tx, target)? {
                return Err(PgError::ForeignDatabase {
                    target: target.to_string(),
                });
            }
            0
        }
    };
    if found > SCHEMA_VERSION {
        return Err(PgError::NewerSchema {
            target: target.to_string(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i as i32 + 1;
        wait(tx.batch_execute(sql)).map_err(|e| fail("migrate the schema", e))?;
        wait(tx.execute("UPDATE diag_schema SET version = $1", &[&version]))
            .map_err(|e| fail("migrate the schema", e))?;
    }
    wait(tx.commit()).map_err(|e| fail("migrate the schema", e))?;
    Ok(())
}

/// The schema version, `None` when there is no `diag_schema` table; a database with tables
/// of its own and no diag schema is refused here already when only read (nothing is written to it). One
/// statement, so one snapshot: another process creating the store commits its tables and its
/// version together, and two separate reads could see the tables without the version.
fn read_version(client: &mut Client, target: &str, create: bool) -> Result<Option<u32>, PgError> {
    let fail = |e: tokio_postgres::Error| PgError::postgres(target, "read the schema version", &e);
    let row = wait(client.query_one(EXISTS_AND_TABLES, &[])).map_err(fail)?;
    let (exists, tables): (bool, i64) = (row.get(0), row.get(1));
    if !exists {
        // Without the migration lock another process may be creating the store right now, so
        // only a reader decides here; a writer decides under the lock (`prepare`).
        if tables > 0 && !create {
            return Err(PgError::ForeignDatabase {
                target: target.to_string(),
            });
        }
        return Ok(None);
    }
    let row = wait(client.query_opt("SELECT version FROM diag_schema", &[])).map_err(fail)?;
    let version: i32 = row.map(|r| r.get(0)).unwrap_or(0);
    Ok(Some(u32::try_from(version).unwrap_or(0)))
}

fn version_in(tx: &tokio_postgres::Transaction<'_>, target: &str) -> Result<Option<u32>, PgError> {
    let fail = |e: tokio_postgres::Error| PgError::postgres(target, "read the schema version", &e);
    let exists: bool = wait(tx.query_one(EXISTS_AND_TABLES, &[]))
        .map_err(fail)?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let row = wait(tx.query_opt("SELECT version FROM diag_schema", &[])).map_err(fail)?;
    let version: i32 = row.map(|r| r.get(0)).unwrap_or(0);
    Ok(Some(u32::try_from(version).unwrap_or(0)))
}

/// True when the schema diag would use (the first of the search path) holds any table.
fn has_foreign_tables(tx: &tokio_postgres::Transaction<'_>, target: &str) -> Result<bool, PgError> {
    let row = wait(tx.query_one(
        "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema()",
        &[],
    ))
    .map_err(|e| PgError::postgres(target, "read the schema version", &e))?;
    Ok(row.get::<_, i64>(0) > 0)
}
