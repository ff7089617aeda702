//! What model endpoints taught (`endpoint_learning`) and what each run started with
//! (`run_endpoint`), schema version 2; the rules are diag-core's
//! (`diag_core::store::learnings`).

use tokio_postgres::Row;

use super::error::PgError;
use super::PgStore;
use diag_core::store::codec::stored_int;
use diag_core::store::learnings::{self, form_text};
use diag_core::store::{EndpointLearning, EndpointLearnings, RecordError, StoreError};

fn decode(r: &Row) -> Result<EndpointLearning, PgError> {
    let form: Option<String> = r.get(2);
    let at: Option<String> = r.get(4);
    Ok(learnings::decode(
        r.get(0),
        r.get(1),
        form.as_deref(),
        r.get(3),
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
            "SELECT base_url, model, form, context_tokens, learned_at FROM endpoint_learning \
             ORDER BY base_url COLLATE \"C\", model COLLATE \"C\"",
            &[],
        )?)
    }

    fn upsert_endpoint_learning(&self, l: &EndpointLearning) -> Result<(), StoreError> {
        let at = l.learned_at.map(|t| t.to_string());
        let context = l.context_tokens.map(|n| stored_int(u64::from(n)));
        let form = form_text(l.structured_output);
        Ok(self.write("keep what an endpoint taught", |tx| {
            tx.execute(
                "INSERT INTO endpoint_learning (base_url, model, form, context_tokens, \
                 learned_at) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (base_url, model) DO UPDATE SET \
                 form = coalesce(excluded.form, endpoint_learning.form), \
                 context_tokens = coalesce(excluded.context_tokens, \
                 endpoint_learning.context_tokens), \
                 learned_at = excluded.learned_at",
                &[
                    &l.endpoint.base_url,
                    &l.endpoint.model,
                    &form,
                    &context,
                    &at,
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
        Ok(self.write("record the run's endpoints", |tx| {
            self.running(tx, run_id)?;
            for l in endpoints {
                let form = form_text(l.structured_output);
                let context = l.context_tokens.map(|n| stored_int(u64::from(n)));
                let at = l.learned_at.map(|t| t.to_string());
                match tx.execute(
                    "INSERT INTO run_endpoint (run_id, base_url, model, form, context_tokens, \
                     learned_at) VALUES ($1, $2, $3, $4, $5, $6)",
                    &[
                        &run_id,
                        &l.endpoint.base_url,
                        &l.endpoint.model,
                        &form,
                        &context,
                        &at,
                    ],
                ) {
                    Ok(_) => {}
                    Err(e) if PgError::is_unique_violation(&e) => {
                        return Err(RecordError::Duplicate {
                            what: "run endpoint",
                            run_id: run_id.to_string(),
                            key: l.endpoint.to_string(),
                        }
                        .into())
                    }
                    Err(e) => return Err(self.err("record the run's endpoints", &e)),
                }
            }
            Ok(())
        })?)
    }

    fn run_endpoints(&self, run_id: &str) -> Result<Vec<EndpointLearning>, StoreError> {
        decode_all(self.rows(
            "read the run's endpoints",
            "SELECT base_url, model, form, context_tokens, learned_at FROM run_endpoint \
             WHERE run_id = $1 ORDER BY base_url COLLATE \"C\", model COLLATE \"C\"",
            &[&run_id],
        )?)
    }
}
