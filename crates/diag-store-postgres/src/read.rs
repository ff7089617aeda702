//! Reads: one run, a filtered list of runs (newest first), and a run's trace rows in their
//! recorded order. Every trace read is scoped to one `run_id`.

use tokio_postgres::Row;

use super::error::PgError;
use super::records::{
    EvaluationRow, Reuse, RunFilter, RunRow, RunStatus, StoredExchange, StoredStep,
};
use super::{wait, PgStore};
use diag_graph::Event;
use diag_records::invocation::ToolInvocation;
use diag_records::model::ChatRequest;
use diag_records::step::{AgentStepRecord, ModelExchange};
use diag_store::codec::{self, enum_str, json, time};
use diag_store::sql::RunListing;
use diag_store::{RecordError, RunReader, StoreError};

type Decoded<T> = Result<T, PgError>;

fn count(what: &'static str, v: i64) -> Decoded<u64> {
    u64::try_from(v).map_err(|e| RecordError::decode(what, e).into())
}

fn small(what: &'static str, v: i64) -> Decoded<u32> {
    u32::try_from(v).map_err(|e| RecordError::decode(what, e).into())
}

const RUN_COLUMNS: &str = "run_id, session_id, question, status, failure, answer, started_at, \
     finished_at, duration_ms, prompt_tokens, completion_tokens, step_count, tool_count, \
     degraded, effective_verdict, fallback_kind, path, self_evaluation, tools, owner_pid, \
     created_at, limits, resumed_from, reuse, replay_of FROM diagnosis_run";

fn run_row(r: &Row) -> Decoded<RunRow> {
    let opt = |i: usize| r.get::<_, Option<String>>(i);
    Ok(RunRow {
        run_id: r.get(0),
        session_id: r.get(1),
        question: r.get(2),
        status: r
            .get::<_, String>(3)
            .parse::<RunStatus>()
            .map_err(|e| RecordError::decode("run status", e))?,
        failure: opt(4),
        answer: opt(5),
        started_at: time("run started_at", r.get(6))?,
        finished_at: opt(7)
            .as_deref()
            .map(|t| time("run finished_at", t))
            .transpose()?,
        duration_ms: r
            .get::<_, Option<i64>>(8)
            .map(|d| count("run duration", d))
            .transpose()?,
        prompt_tokens: count("prompt tokens", r.get(9))?,
        completion_tokens: count("completion tokens", r.get(10))?,
        step_count: count("step count", r.get(11))?,
        tool_count: count("tool count", r.get(12))?,
        degraded: r.get(13),
        effective_verdict: opt(14)
            .as_deref()
            .map(|v| enum_str("effective verdict", v))
            .transpose()?,
        fallback_kind: opt(15)
            .as_deref()
            .map(|k| enum_str("fallback kind", k))
            .transpose()?,
        path: json("run path", r.get(16))?,
        self_evaluation: opt(17)
            .as_deref()
            .map(|e| json("self evaluation", e))
            .transpose()?,
        tools: json("tool catalog", r.get(18))?,
        owner_pid: small("owner pid", r.get(19))?,
        created_at: time("run created_at", r.get(20))?,
        limits: opt(21)
            .as_deref()
            .map(|l| json("run limits", l))
            .transpose()?,
        resumed_from: opt(22),
        reuse: opt(23)
            .as_deref()
            .map(|u| json::<Reuse>("run reuse", u))
            .transpose()?,
        replay_of: opt(24),
    })
}

impl PgStore {
    pub(crate) fn rows(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, PgError> {
        let mut client = self.lock();
        let rows = wait(client.query(sql, params));
        client.note(rows).map_err(|e| self.err(op, &e))
    }

    /// Every run id, oldest first (what `diag store copy` walks).
    pub fn run_ids(&self) -> Result<Vec<String>, PgError> {
        Ok(self
            .rows(
                "list run ids",
                "SELECT run_id FROM diagnosis_run ORDER BY created_seq",
                &[],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }
}

impl RunReader for PgStore {
    fn describe(&self) -> String {
        format!("postgres://{}", self.target())
    }

    /// How many runs the store holds.
    fn count_runs(&self) -> Result<u64, StoreError> {
        let rows = self.rows("count runs", "SELECT count(*) FROM diagnosis_run", &[])?;
        Ok(rows
            .first()
            .map(|r| count("run count", r.get(0)))
            .unwrap_or(Ok(0))?)
    }

    /// One run, or `None` when no run has this id.
    fn get_run(&self, run_id: &str) -> Result<Option<RunRow>, StoreError> {
        let sql = format!("SELECT {RUN_COLUMNS} WHERE run_id = $1");
        Ok(self
            .rows("read a run", &sql, &[&run_id])?
            .first()
            .map(run_row)
            .transpose()?)
    }

    /// Runs matching `filter`, newest first (most recently created first).
    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, StoreError> {
        let clause = RunListing::of(filter).clause(&crate::driver::STATEMENTS);
        let sql = format!("SELECT {RUN_COLUMNS} WHERE {clause} ORDER BY created_seq DESC LIMIT $3");
        let limit = filter.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        let status = filter.status.map(|s| s.as_str());
        Ok(self
            .rows("list runs", &sql, &[&filter.session_id, &status, &limit])?
            .iter()
            .map(run_row)
            .collect::<Decoded<_>>()?)
    }

    /// The orchestration events of a run, by `seq`.
    fn events(&self, run_id: &str) -> Result<Vec<Event<String>>, StoreError> {
        Ok(self
            .rows(
                "read orchestration events",
                "SELECT record FROM orchestration_event WHERE run_id = $1 ORDER BY seq",
                &[&run_id],
            )?
            .iter()
            .map(|r| json("event", r.get(0)).map_err(PgError::from))
            .collect::<Decoded<_>>()?)
    }

    /// The agent steps (model calls) of a run, in call order.
    fn agent_steps(&self, run_id: &str) -> Result<Vec<StoredStep>, StoreError> {
        Ok(self
            .rows(
                "read agent steps",
                "SELECT seq, record FROM agent_step WHERE run_id = $1 ORDER BY seq",
                &[&run_id],
            )?
            .iter()
            .map(|r| {
                Ok(StoredStep {
                    seq: small("step seq", r.get(0))?,
                    step: json::<AgentStepRecord>("agent step", r.get(1))?,
                })
            })
            .collect::<Decoded<_>>()?)
    }

    /// The model exchanges of a run, in call order.
    fn exchanges(&self, run_id: &str) -> Result<Vec<StoredExchange>, StoreError> {
        Ok(self
            .rows(
            "read model exchanges",
            "SELECT seq, agent, round, attempt, turn, request, request_sha256, response, error \
             FROM model_exchange WHERE run_id = $1 ORDER BY seq",
            &[&run_id],
        )?
        .iter()
        .map(|r| {
            let outcome = codec::outcome(r.get(7), r.get(8))?;
            Ok(StoredExchange {
                seq: small("exchange seq", r.get(0))?,
                request_sha256: r.get(6),
                exchange: ModelExchange {
                    agent: enum_str("exchange agent", r.get(1))?,
                    round: small("exchange round", r.get(2))?,
                    attempt: small("exchange attempt", r.get(3))?,
                    turn: small("exchange turn", r.get(4))?,
                    request: json::<ChatRequest>("model request", r.get(5))?,
                    outcome,
                },
            })
        })
        .collect::<Decoded<_>>()?)
    }

    /// The tool invocations of a run, in recording order.
    fn invocations(&self, run_id: &str) -> Result<Vec<ToolInvocation>, StoreError> {
        Ok(self
            .rows(
                "read tool invocations",
                "SELECT record FROM tool_invocation WHERE run_id = $1 ORDER BY seq",
                &[&run_id],
            )?
            .iter()
            .map(|r| json("tool invocation", r.get(0)).map_err(PgError::from))
            .collect::<Decoded<_>>()?)
    }

    /// The evaluation of a run, if it has one.
    fn evaluation(&self, run_id: &str) -> Result<Option<EvaluationRow>, StoreError> {
        Ok(self
            .rows(
                "read an evaluation",
                "SELECT metrics, created_at FROM evaluation WHERE run_id = $1",
                &[&run_id],
            )?
            .first()
            .map(|r| -> Decoded<EvaluationRow> {
                Ok(EvaluationRow {
                    run_id: run_id.to_string(),
                    metrics: json("evaluation metrics", r.get(0))?,
                    created_at: time("evaluation created_at", r.get(1))?,
                })
            })
            .transpose()?)
    }
}
