//! What model endpoints taught (`endpoint_learning`) and what each run started with
//! (`run_endpoint`), schema versions 2 and 4 (the refused sampling parameters); the rules are diag-core's
//! (`diag_store::learnings`).

use tokio_postgres::Row;

use super::error::PgError;
use super::PgStore;
use diag_records::endpoint::SamplingParameter;
use diag_store::codec::stored_int;
use diag_store::learnings::{self, form_text};
use diag_store::{EndpointLearning, EndpointLearnings, StoreError};

/// The columns of a learning, in the order [`decode`] reads them.
const COLUMNS: &str =
    "base_url, model, form, context_tokens, learned_at, refuses_temperature, refuses_seed";

fn decode(r: &Row) -> Result<EndpointLearning, PgError> {
    let form: Option<String> = r.get(2);
    let at: Option<String> = r.get(4);
    Ok(learnings::decode(
        r.get(0),
        r.get(1),
        form.as_deref(),
        r.get(3),
        [r.get(5), r.get(6)],
        at.as_deref(),
    )?)
}

fn decode_all(rows: Vec<Row>) -> Result<Vec<EndpointLearning>, StoreError> {
    Ok(rows.iter().map(decode).collect::<Result<Vec<_>, _>>()?)
}

impl EndpointLearnings for PgStore {
    fn endpoint_learnings(&self) -> Result<Vec<EndpointLearning>, StoreError> {
        decode_all(self.rows(
            "read what endpoints taught",
            &format!(
                "SELECT {COLUMNS} FROM endpoint_learning \
                 ORDER BY base_url COLLATE \"C\", model COLLATE \"C\""
            ),
            &[],
        )?)
    }

    fn upsert_endpoint_learning(&self, l: &EndpointLearning) -> Result<(), StoreError> {
        let at = l.learned_at.map(|t| t.to_string());
        let context = l.context_tokens.map(|n| stored_int(u64::from(n)));
        let form = form_text(l.structured_output);
        let temperature = l.refuses(SamplingParameter::Temperature);
        let seed = l.refuses(SamplingParameter::Seed);
        Ok(self.write("keep what an endpoint taught", |tx| {
            tx.execute(
                "INSERT INTO endpoint_learning (base_url, model, form, context_tokens, \
                 learned_at, refuses_temperature, refuses_seed) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (base_url, model) DO UPDATE SET \
                 form = coalesce(excluded.form, endpoint_learning.form), \
                 context_tokens = coalesce(excluded.context_tokens, \
                 endpoint_learning.context_tokens), \
                 refuses_temperature = coalesce(excluded.refuses_temperature, \
                 endpoint_learning.refuses_temperature), \
                 refuses_seed = coalesce(excluded.refuses_seed, endpoint_learning.refuses_seed), \
                 learned_at = excluded.learned_at",
                &[
                    &l.endpoint.base_url,
                    &l.endpoint.model,
                    &form,
                    &context,
                    &at,
                    &temperature,
                    &seed,
                ],
            )
            .map(|_| ())
            .map_err(|e| self.err("keep what an endpoint taught", &e))
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
        decode_all(self.rows(
            "read the run's endpoints",
            &format!(
                "SELECT {COLUMNS} FROM run_endpoint \
                 WHERE run_id = $1 ORDER BY base_url COLLATE \"C\", model COLLATE \"C\""
            ),
            &[&run_id],
        )?)
    }
}
