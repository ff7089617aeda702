//! Reads: one run, a filtered list of runs (newest first), and a run's trace rows in their
//! recorded order. Every trace read is scoped to one `run_id`: no query here can return a row
//! of another run, even of the same session.

use std::collections::HashMap;

use rusqlite::{params, OptionalExtension, Row};

use super::records::{
    EvaluationRow, Reuse, RunFilter, RunRow, RunStatus, StoredExchange, StoredStep,
};
use super::{SqliteError, SqliteStore};
use diag_graph::{Detail, Event};
use diag_records::invocation::{InvocationStatus, ToolInvocation};
use diag_records::step::PromptAudit;
use diag_records::step::{AgentStepRecord, ModelExchange};
use diag_store::codec::{self, enum_str, json, time};
use diag_store::sql::RunListing;
use diag_store::{RecordError, RunReader, StoreError};

/// A column that failed to decode, kept apart from SQLite errors until the row is done.
type Decoded<T> = Result<T, SqliteError>;

const RUN_COLUMNS: &str = "r.run_id, r.session_id, r.question, r.status, r.failure, r.answer, \
     r.started_at, r.finished_at, r.duration_ms, r.prompt_tokens, r.completion_tokens, \
     r.step_count, r.tool_count, r.degraded, r.effective_verdict, r.fallback_kind, r.path, \
     r.self_evaluation, c.catalog, r.owner_pid, r.created_at, r.limits, r.resumed_from, \
     r.reused_model_calls, r.reused_tool_calls, r.reuse_stopped, r.answer_zstd, \
     r.self_evaluation_zstd, r.replay_of \
     FROM diagnosis_run r JOIN tool_catalog c ON c.sha256 = r.tools_sha256";

/// The raw text columns of a run row; decoded after the SQLite cursor is done.
struct RawRun {
    run_id: String,
    session_id: String,
    question: String,
    status: String,
    failure: Option<String>,
    answer: Option<String>,
    started_at: String,
    finished_at: Option<String>,
    duration_ms: Option<u64>,
    prompt_tokens: u64,
    completion_tokens: u64,
    step_count: u64,
    tool_count: u64,
    degraded: bool,
    effective_verdict: Option<String>,
    fallback_kind: Option<String>,
    path: Option<String>,
    self_evaluation: Option<String>,
    catalog: String,
    owner_pid: u32,
    created_at: String,
    limits: Option<String>,
    resumed_from: Option<String>,
    reused_model_calls: Option<u32>,
    reused_tool_calls: Option<u32>,
    reuse_stopped: Option<String>,
    answer_zstd: Option<Vec<u8>>,
    self_evaluation_zstd: Option<Vec<u8>>,
    replay_of: Option<String>,
}

fn raw_run(r: &Row<'_>) -> rusqlite::Result<RawRun> {
    Ok(RawRun {
        run_id: r.get(0)?,
        session_id: r.get(1)?,
        question: r.get(2)?,
        status: r.get(3)?,
        failure: r.get(4)?,
        answer: r.get(5)?,
        started_at: r.get(6)?,
        finished_at: r.get(7)?,
        duration_ms: r.get(8)?,
        prompt_tokens: r.get(9)?,
        completion_tokens: r.get(10)?,
        step_count: r.get(11)?,
        tool_count: r.get(12)?,
        degraded: r.get(13)?,
        effective_verdict: r.get(14)?,
        fallback_kind: r.get(15)?,
        path: r.get(16)?,
        self_evaluation: r.get(17)?,
        catalog: r.get(18)?,
        owner_pid: r.get(19)?,
        created_at: r.get(20)?,
        limits: r.get(21)?,
        resumed_from: r.get(22)?,
        reused_model_calls: r.get(23)?,
        reused_tool_calls: r.get(24)?,
        reuse_stopped: r.get(25)?,
        answer_zstd: r.get(26)?,
        self_evaluation_zstd: r.get(27)?,
        replay_of: r.get(28)?,
    })
}

impl RawRun {
    fn decode(self) -> Decoded<RunRow> {
        let answer = crate::packed::unpack(self.answer, self.answer_zstd)
            .map_err(|e| RecordError::decode("run answer", e))?;
        // The self-evaluation was compressed against the answer (`packed.rs`).
        let self_evaluation = crate::packed::unpack_with(
            self.self_evaluation,
            self.self_evaluation_zstd,
            answer.as_deref().unwrap_or_default().as_bytes(),
        )
        .map_err(|e| RecordError::decode("self evaluation", e))?;
        Ok(RunRow {
            status: self
                .status
                .parse::<RunStatus>()
                .map_err(|e| RecordError::decode("run status", e))?,
            started_at: time("run started_at", &self.started_at)?,
            finished_at: self
                .finished_at
                .as_deref()
                .map(|t| time("run finished_at", t))
                .transpose()?,
            effective_verdict: self
                .effective_verdict
                .as_deref()
                .map(|v| enum_str("effective verdict", v))
                .transpose()?,
            fallback_kind: self
                .fallback_kind
                .as_deref()
                .map(|k| enum_str("fallback kind", k))
                .transpose()?,
            path: self
                .path
                .as_deref()
                .map(|p| json("run path", p))
                .transpose()?
                .unwrap_or_default(),
            self_evaluation: self_evaluation
                .as_deref()
                .map(|e| json("self evaluation", e))
                .transpose()?,
            tools: json("tool catalog", &self.catalog)?,
            limits: self
                .limits
                .as_deref()
                .map(|l| json("run limits", l))
                .transpose()?,
            created_at: time("run created_at", &self.created_at)?,
            run_id: self.run_id,
            session_id: self.session_id,
            question: self.question,
            failure: self.failure,
            answer,
            duration_ms: self.duration_ms,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            step_count: self.step_count,
            tool_count: self.tool_count,
            degraded: self.degraded,
            owner_pid: self.owner_pid,
            reuse: match (self.reused_model_calls, self.reused_tool_calls) {
                (Some(model_calls), Some(tool_calls)) => Some(Reuse {
                    model_calls,
                    tool_calls,
                    stopped: self.reuse_stopped,
                }),
                _ => None,
            },
            resumed_from: self.resumed_from,
            replay_of: self.replay_of,
        })
    }
}

impl SqliteStore {
    /// Runs `sql` with `params` and decodes each row with `row` then `decode`.
    fn query<R, T>(
        &self,
        op: &'static str,
        sql: &str,
        params: impl rusqlite::Params,
        row: impl FnMut(&Row<'_>) -> rusqlite::Result<R>,
        decode: impl Fn(R) -> Decoded<T>,
    ) -> Result<Vec<T>, StoreError> {
        let raw: Vec<R> = {
            let conn = self.lock();
            let mut stmt = conn.prepare_cached(sql).map_err(|e| self.err(op, e))?;
            let rows = stmt
                .query_map(params, row)
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(op, e))?;
            rows
        };
        raw.into_iter()
            .map(|r| decode(r).map_err(StoreError::from))
            .collect()
    }
}

impl RunReader for SqliteStore {
    fn describe(&self) -> String {
        self.path().display().to_string()
    }

    /// How many runs the store holds.
    fn count_runs(&self) -> Result<u64, StoreError> {
        let conn = self.lock();
        conn.prepare_cached("SELECT count(*) FROM diagnosis_run")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(|e| self.err("count runs", e).into())
    }

    /// One run, or `None` when no run has this id.
    fn get_run(&self, run_id: &str) -> Result<Option<RunRow>, StoreError> {
        let raw = {
            let conn = self.lock();
            let sql = format!("SELECT {RUN_COLUMNS} WHERE r.run_id = ?1");
            conn.prepare_cached(&sql)
                .and_then(|mut s| s.query_row([run_id], raw_run).optional())
                .map_err(|e| self.err("read a run", e))?
        };
        Ok(raw.map(RawRun::decode).transpose()?)
    }

    /// Runs matching `filter`, newest first: most recently created first, so a replayed run
    /// (whose start time is the recorded one) is listed where its operator looks for it.
    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, StoreError> {
        // One statement per combination of filters (`diag_store::sql::RunListing`), so that
        // the planner walks its index (`diagnosis_run_session`, `diagnosis_run_status`)
        // newest first; `(?2 IS NULL OR status = ?2)` would scan the whole table for a status
        // no run has.
        let clause = RunListing::of(filter).clause(&crate::driver::STATEMENTS);
        let sql = format!("SELECT {RUN_COLUMNS} WHERE {clause} ORDER BY r.rowid DESC LIMIT ?3");
        let limit = filter
            .limit
            .map(|l| i64::try_from(l).unwrap_or(i64::MAX))
            .unwrap_or(-1);
        self.query(
            "list runs",
            &sql,
            params![filter.session_id, filter.status.map(|s| s.as_str()), limit],
            raw_run,
            RawRun::decode,
        )
    }

    /// The orchestration events of a run, by `seq`. The status is the string the graph
    /// recorded (e.g. `COMPLETED`).
    fn events(&self, run_id: &str) -> Result<Vec<Event<String>>, StoreError> {
        self.query(
            "read orchestration events",
            "SELECT seq, node, attempt, round, status, started_at, duration_ms, detail \
             FROM orchestration_event WHERE run_id = ?1 ORDER BY seq",
            [run_id],
            |r| {
                Ok((
                    r.get::<_, u32>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, u32>(2)?,
                    r.get::<_, u32>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, u64>(6)?,
                    r.get::<_, String>(7)?,
                ))
            },
            |(seq, node, attempt, round, status, started_at, duration_ms, detail)| {
                Ok(Event {
                    seq,
                    node,
                    attempt,
                    round,
                    status,
                    started_at: time("event started_at", &started_at)?,
                    duration_ms,
                    detail: json::<Detail>("event detail", &detail)?,
                })
            },
        )
    }

    /// The agent steps (model calls) of a run, in call order.
    fn agent_steps(&self, run_id: &str) -> Result<Vec<StoredStep>, StoreError> {
        type Raw = (
            u32,
            [String; 4],
            [u32; 3],
            [u64; 3],
            Option<String>,
            PromptAudit,
        );
        self.query(
            "read agent steps",
            "SELECT seq, agent, status, model, prompt_id, round, attempt, turn, \
             prompt_tokens, completion_tokens, duration_ms, finish_reason, prompt_version, \
             prompt_sha256, prompt_size FROM agent_step WHERE run_id = ?1 ORDER BY seq",
            [run_id],
            |r| -> rusqlite::Result<Raw> {
                Ok((
                    r.get(0)?,
                    [r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?],
                    [r.get(5)?, r.get(6)?, r.get(7)?],
                    [r.get(8)?, r.get(9)?, r.get(10)?],
                    r.get(11)?,
                    PromptAudit {
                        prompt_id: String::new(),
                        version: r.get(12)?,
                        sha256: r.get(13)?,
                        size: r.get(14)?,
                    },
                ))
            },
            |(
                seq,
                [agent, status, model, prompt_id],
                [round, attempt, turn],
                [pt, ct, ms],
                finish,
                mut prompt,
            )| {
                prompt.prompt_id = prompt_id;
                Ok(StoredStep {
                    seq,
                    step: AgentStepRecord {
                        agent: enum_str("agent role", &agent)?,
                        round,
                        attempt,
                        turn,
                        status: enum_str("step status", &status)?,
                        model,
                        prompt_tokens: pt,
                        completion_tokens: ct,
                        finish_reason: finish
                            .as_deref()
                            .map(|f| enum_str("finish reason", f))
                            .transpose()?,
                        duration_ms: ms,
                        prompt,
                    },
                })
            },
        )
    }

    /// The model exchanges of a run, in call order. Each request text is rebuilt from its
    /// skeleton and blobs (`blobs.rs`) and checked against its stored sha256: a request that
    /// does not match is reported as a corrupt store, never handed on.
    fn exchanges(&self, run_id: &str) -> Result<Vec<StoredExchange>, StoreError> {
        const OP: &str = "read model exchanges";
        struct Raw {
            seq: u32,
            agent: String,
            position: [u32; 3],
            request: String,
            request_sha256: String,
            response: Option<String>,
            error: Option<String>,
            request_blobs: Option<String>,
            response_zstd: Option<Vec<u8>>,
        }
        let (raw, bodies) = {
            let conn = self.lock();
            // One read transaction, so that the rows and the blobs they name are one
            // snapshot even while another process deletes runs.
            conn.prepare_cached("BEGIN")
                .and_then(|mut s| s.execute([]))
                .map_err(|e| self.err(OP, e))?;
            let _end = crate::RollbackGuard(&conn);
            let raw: Vec<Raw> = conn
                .prepare_cached(
                    "SELECT seq, agent, round, attempt, turn, request, request_sha256, \
                     response, error, request_blobs, response_zstd \
                     FROM model_exchange WHERE run_id = ?1 ORDER BY seq",
                )
                .and_then(|mut stmt| {
                    stmt.query_map([run_id], |r| {
                        Ok(Raw {
                            seq: r.get(0)?,
                            agent: r.get(1)?,
                            position: [r.get(2)?, r.get(3)?, r.get(4)?],
                            request: r.get(5)?,
                            request_sha256: r.get(6)?,
                            response: r.get(7)?,
                            error: r.get(8)?,
                            request_blobs: r.get(9)?,
                            response_zstd: r.get(10)?,
                        })
                    })?
                    .collect::<Result<Vec<_>, _>>()
                })
                .map_err(|e| self.err(OP, e))?;
            let mut bodies: HashMap<i64, String> = HashMap::new();
            if raw.iter().any(|r| r.request_blobs.is_some()) {
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT DISTINCT b.id, b.body FROM model_exchange m, \
                         json_each(m.request_blobs) j, blob b \
                         WHERE m.run_id = ?1 AND m.request_blobs IS NOT NULL \
                         AND b.id = j.value ->> 1",
                    )
                    .map_err(|e| self.err(OP, e))?;
                let rows = stmt
                    .query_map([run_id], |r| Ok((r.get(0)?, r.get(1)?)))
                    .and_then(|rows| rows.collect::<Result<Vec<(i64, String)>, _>>())
                    .map_err(|e| self.err(OP, e))?;
                bodies.extend(rows);
            }
            (raw, bodies)
        };
        let corrupt = |seq: u32, detail: String| SqliteError::Corrupt {
            path: self.path().to_path_buf(),
            op: OP,
            detail: format!("the request of model exchange {seq} of run {run_id}: {detail}"),
        };
        raw.into_iter()
            .map(|raw| {
                let text =
                    crate::blobs::rebuild(&raw.request, raw.request_blobs.as_deref(), &bodies)
                        .map_err(|detail| corrupt(raw.seq, detail))?;
                if diag_records::hash::sha256_hex(text.as_bytes()) != raw.request_sha256 {
                    return Err(corrupt(
                        raw.seq,
                        "the rebuilt text does not match its request_sha256".to_string(),
                    ));
                }
                let response =
                    crate::packed::unpack_with(raw.response, raw.response_zstd, text.as_bytes())
                        .map_err(|detail| SqliteError::Corrupt {
                            path: self.path().to_path_buf(),
                            op: OP,
                            detail: format!(
                                "the response of model exchange {} of run {run_id}: {detail}",
                                raw.seq
                            ),
                        })?;
                let outcome = codec::outcome(response, raw.error)?;
                let [round, attempt, turn] = raw.position;
                Ok(StoredExchange {
                    seq: raw.seq,
                    request_sha256: raw.request_sha256,
                    exchange: ModelExchange {
                        agent: enum_str("agent role", &raw.agent)?,
                        round,
                        attempt,
                        turn,
                        request: json("model request", &text)?,
                        outcome,
                    },
                })
            })
            .map(|r| r.map_err(StoreError::from))
            .collect()
    }

    /// The tool invocations of `run_id` only, in recording order.
    fn invocations(&self, run_id: &str) -> Result<Vec<ToolInvocation>, StoreError> {
        type Raw = (
            String,
            String,
            String,
            String,
            u32,
            String,
            String,
            String,
            String,
            u64,
            Option<Vec<u8>>,
        );
        self.query(
            "read tool invocations",
            "SELECT run_id, invocation_id, session_id, agent, round, tool_name, arguments, \
             output, status, duration_ms, output_zstd FROM tool_invocation WHERE run_id = ?1 \
             ORDER BY seq",
            [run_id],
            |r| -> rusqlite::Result<Raw> {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                    r.get(10)?,
                ))
            },
            |(
                run_id,
                invocation_id,
                session_id,
                agent,
                round,
                tool_name,
                args,
                out,
                status,
                ms,
                out_zstd,
            )| {
                let out = crate::packed::unpack(Some(out), out_zstd)
                    .map_err(|e| RecordError::decode("tool output", e))?
                    .unwrap_or_default();
                Ok(ToolInvocation {
                    run_id,
                    session_id,
                    invocation_id,
                    agent,
                    round,
                    tool_name,
                    arguments: json("tool arguments", &args)?,
                    output: json("tool output", &out)?,
                    status: enum_str::<InvocationStatus>("invocation status", &status)?,
                    duration_ms: ms,
                })
            },
        )
    }

    /// The evaluation of a run, if it has one.
    fn evaluation(&self, run_id: &str) -> Result<Option<EvaluationRow>, StoreError> {
        let rows = self.query(
            "read an evaluation",
            "SELECT run_id, metrics, created_at FROM evaluation WHERE run_id = ?1",
            [run_id],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            },
            |(run_id, metrics, created_at)| {
                Ok(EvaluationRow {
                    run_id,
                    metrics: json("evaluation metrics", &metrics)?,
                    created_at: time("evaluation created_at", &created_at)?,
                })
            },
        )?;
        Ok(rows.into_iter().next())
    }
}
