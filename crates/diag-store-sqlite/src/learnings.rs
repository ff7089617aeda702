//! What model endpoints taught (`endpoint_learning`) and what each run started with
//! (`run_endpoint`), schema versions 7 and 9 (the refused sampling parameters); the rules are diag-core's
//! (`diag_store::learnings`).

use rusqlite::{params, Row};

use super::{SqliteError, SqliteStore};
use diag_records::endpoint::SamplingParameter;
use diag_store::codec::stored_int;
use diag_store::learnings::{self, form_text};
use diag_store::{EndpointLearning, EndpointLearnings, StoreError};

/// The columns of a learning, in the order [`raw`] reads them.
const COLUMNS: &str =
    "base_url, model, form, context_tokens, learned_at, refuses_temperature, refuses_seed";

/// The raw columns of a learning, decoded once the cursor is done.
type Raw = (
    String,
    String,
    Option<String>,
    Option<i64>,
    Option<String>,
    [Option<bool>; 2],
);

fn raw(r: &Row<'_>) -> rusqlite::Result<Raw> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        [r.get(5)?, r.get(6)?],
    ))
}

fn decode(
    (base_url, model, form, context, at, refuses): Raw,
) -> Result<EndpointLearning, SqliteError> {
    Ok(learnings::decode(
        base_url,
        model,
        form.as_deref(),
        context,
        refuses,
        at.as_deref(),
    )?)
}

impl SqliteStore {
    fn learnings_of(
        &self,
        op: &'static str,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<EndpointLearning>, StoreError> {
        let rows: Vec<Raw> = {
            let conn = self.lock();
            let mut stmt = conn.prepare_cached(sql).map_err(|e| self.err(op, e))?;
            let rows = stmt
                .query_map(params, raw)
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(op, e))?;
            rows
        };
        Ok(rows
            .into_iter()
            .map(decode)
            .collect::<Result<Vec<_>, _>>()?)
    }
}

impl EndpointLearnings for SqliteStore {
    fn endpoint_learnings(&self) -> Result<Vec<EndpointLearning>, StoreError> {
        self.learnings_of(
            "read what endpoints taught",
            &format!("SELECT {COLUMNS} FROM endpoint_learning ORDER BY base_url, model"),
            [],
        )
    }

    fn upsert_endpoint_learning(&self, l: &EndpointLearning) -> Result<(), StoreError> {
        let at = l.learned_at.map(|t| t.to_string());
        let context = l.context_tokens.map(|n| stored_int(u64::from(n)));
        Ok(self.write("keep what an endpoint taught", |tx| {
            tx.prepare_cached(
                "INSERT INTO endpoint_learning (base_url, model, form, context_tokens, \
                 learned_at, refuses_temperature, refuses_seed) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT (base_url, model) DO UPDATE SET \
                 form = coalesce(excluded.form, form), \
                 context_tokens = coalesce(excluded.context_tokens, context_tokens), \
                 refuses_temperature = coalesce(excluded.refuses_temperature, \
                 refuses_temperature), \
                 refuses_seed = coalesce(excluded.refuses_seed, refuses_seed), \
                 learned_at = excluded.learned_at",
            )
            .and_then(|mut s| {
                s.execute(params![
                    l.endpoint.base_url,
                    l.endpoint.model,
                    form_text(l.structured_output),
                    context,
                    at,
                    l.refuses(SamplingParameter::Temperature),
                    l.refuses(SamplingParameter::Seed),
                ])
            })
            .map(|_| ())
            .map_err(|e| self.err("keep what an endpoint taught", e))
        })?)
    }

    fn record_run_endpoints(
        &self,
        run_id: &str,
        endpoints: &[EndpointLearning],
    ) -> Result<(), StoreError> {
        learnings::record_run_endpoints(self, run_id, endpoints)
    }

    fn run_endpoints(&self, run_id: &str) -> Result<Vec<EndpointLearning>, StoreError> {
        self.learnings_of(
            "read the run's endpoints",
            &format!(
                "SELECT {COLUMNS} FROM run_endpoint WHERE run_id = ?1 ORDER BY base_url, model"
            ),
            [run_id],
        )
    }
}
