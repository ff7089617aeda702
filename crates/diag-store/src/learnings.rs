//! What model endpoints taught, kept in the run store (openspec/specs/run-store/spec.md,
//! "What endpoints taught"): one row per [`Endpoint`] (base URL and model name) with the
//! structured-output form it takes, its context size and when that was last learned, so that
//! a later process against the same endpoint starts where the last one stopped; and, per run,
//! what the store remembered of the endpoints the run's models use when it started, so that
//! `diag trace` of an old run shows what that run used.
//!
//! The rules, written once for every backend:
//! - the key is [`Endpoint::new`]'s: a base URL without userinfo, query or fragment (checked
//!   again here before anything is written, so no backend stores a credential);
//! - a learning merges into what is stored: a field it leaves `None` keeps the stored value
//!   (a form only steps down and a context size is only ever stated, so two processes that
//!   learn different things of one endpoint both keep theirs), a refused sampling parameter
//!   is added to those stored (a refusal is never forgotten), and its time replaces the
//!   stored time;
//! - the sink that writes what a model learns (diag-core's `StoreSink`): a failed write never
//!   fails a diagnosis; it is logged (`tracing`) and kept for its owner to show;
//! - replays neither read nor write any of it (they build no endpoint memory from a store
//!   and record no endpoints).

use serde::{Deserialize, Serialize};

use super::codec::stored_int;
use super::sql::{Driver, Param};
use super::{RecordError, Store, StoreError};
use diag_graph::clock::Timestamp;
use diag_records::endpoint::{Endpoint, Learned, RefusedSampling, SamplingParameter};
use diag_records::model::StructuredOutput;

/// What one endpoint taught, as a store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointLearning {
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// The structured-output form it takes (`None`: none learned).
    pub structured_output: Option<StructuredOutput>,
    /// The context size it stated.
    pub context_tokens: Option<u32>,
    /// The sampling parameters it refused (`["temperature"]`), never sent to it again.
    #[serde(default)]
    pub refused_sampling: RefusedSampling,
    /// When it last taught something; `None` in a run's record of an endpoint the store knew
    /// nothing of.
    pub learned_at: Option<Timestamp>,
}

impl EndpointLearning {
    /// What was learned, as an [`EndpointMemory`] holds it.
    pub fn learned(&self) -> Learned {
        Learned {
            form: self.structured_output,
            context_tokens: self.context_tokens,
            refused_sampling: self.refused_sampling,
        }
    }

    /// Nothing known of `endpoint`.
    pub fn unknown(endpoint: Endpoint) -> EndpointLearning {
        EndpointLearning {
            endpoint,
            structured_output: None,
            context_tokens: None,
            refused_sampling: RefusedSampling::default(),
            learned_at: None,
        }
    }

    /// The stored flag of a sampling parameter: `Some(true)` when refused, else `None` (a
    /// write of `None` keeps what is stored: a refusal is never forgotten).
    pub fn refuses(&self, p: SamplingParameter) -> Option<bool> {
        self.refused_sampling.refuses(p).then_some(true)
    }
}

/// The stored text of a structured-output form.
pub fn form_text(form: Option<StructuredOutput>) -> Option<&'static str> {
    form.map(StructuredOutput::as_str)
}

fn form_of(text: Option<&str>) -> Result<Option<StructuredOutput>, RecordError> {
    text.map(|t| super::codec::enum_str("structured output form", t))
        .transpose()
}

/// A learning from its stored columns (`base_url`, `model`, `form`, `context_tokens`,
/// `refuses_temperature`, `refuses_seed`, `learned_at`), as every backend keeps them.
pub fn decode(
    base_url: String,
    model: String,
    form: Option<&str>,
    context_tokens: Option<i64>,
    refuses: [Option<bool>; 2],
    learned_at: Option<&str>,
) -> Result<EndpointLearning, RecordError> {
    let [temperature, seed] = refuses.map(|r| r == Some(true));
    Ok(EndpointLearning {
        endpoint: Endpoint { base_url, model },
        structured_output: form_of(form)?,
        context_tokens: context_tokens
            .map(|n| u32::try_from(n).map_err(|e| RecordError::decode("context tokens", e)))
            .transpose()?,
        refused_sampling: RefusedSampling { temperature, seed },
        learned_at: learned_at
            .map(|t| super::codec::time("endpoint learned_at", t))
            .transpose()?,
    })
}

/// What endpoints taught, in a store: every backend implements it with its SQL only.
/// [`EndpointLearnings::record_run_endpoints`] on any backend: the run must be RUNNING (even
/// when there is nothing to write), and an endpoint is recorded once per run.
pub fn record_run_endpoints<D: Driver>(
    d: &D,
    run_id: &str,
    endpoints: &[EndpointLearning],
) -> Result<(), StoreError> {
    let sql = d.statements();
    d.write("record the run's endpoints", |tx| {
        let status = tx.query(sql.run_status, &[Param::Text(run_id)])?;
        let status = status
            .first()
            .map(|r| r.text(0, "run status"))
            .transpose()?;
        crate::backend::require_running(run_id, status)?;
        for l in endpoints {
            let at = l.learned_at.map(|t| t.to_string());
            let params = [
                Param::Text(run_id),
                Param::Text(&l.endpoint.base_url),
                Param::Text(&l.endpoint.model),
                Param::opt_text(form_text(l.structured_output)),
                Param::opt_int(l.context_tokens.map(|n| stored_int(u64::from(n)))),
                Param::opt_text(at.as_deref()),
                Param::opt_bool(l.refuses(SamplingParameter::Temperature)),
                Param::opt_bool(l.refuses(SamplingParameter::Seed)),
            ];
            if !tx.insert(sql.record_run_endpoint, &params)? {
                return Err(RecordError::Duplicate {
                    what: "run endpoint",
                    run_id: run_id.to_string(),
                    key: l.endpoint.to_string(),
                }
                .into());
            }
        }
        Ok(())
    })
}

pub trait EndpointLearnings: Send + Sync {
    /// Everything the store remembers, by base URL then model.
    fn endpoint_learnings(&self) -> Result<Vec<EndpointLearning>, StoreError>;
    /// Merges `learning` into the stored row of its endpoint (creating it): its `Some` fields
    /// replace the stored ones, its `None` fields keep them, its refused sampling parameters
    /// are added to the stored ones ([`EndpointLearning::refuses`]), its time replaces the
    /// stored time. Called by [`Store::learn_endpoint`], which checks the key and the time.
    fn upsert_endpoint_learning(&self, learning: &EndpointLearning) -> Result<(), StoreError>;
    /// Stores with a RUNNING run what the store remembered of its endpoints when it started
    /// (one row per endpoint, written once).
    fn record_run_endpoints(
        &self,
        run_id: &str,
        endpoints: &[EndpointLearning],
    ) -> Result<(), StoreError>;
    /// What a run recorded with [`EndpointLearnings::record_run_endpoints`], by base URL then
    /// model (empty for a run that recorded none: a replay, or a run stored before).
    fn run_endpoints(&self, run_id: &str) -> Result<Vec<EndpointLearning>, StoreError>;
}

impl Store {
    /// Keeps what `endpoint` taught, learned at `at`.
    pub fn learn_endpoint(
        &self,
        endpoint: &Endpoint,
        learned: Learned,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let learning = EndpointLearning {
            endpoint: checked(endpoint)?,
            structured_output: learned.form,
            context_tokens: learned.context_tokens,
            refused_sampling: learned.refused_sampling,
            learned_at: Some(at),
        };
        self.upsert_endpoint_learning(&learning)
    }

    /// What the store remembers of `endpoint`, if anything.
    pub fn endpoint_learning(
        &self,
        endpoint: &Endpoint,
    ) -> Result<Option<EndpointLearning>, StoreError> {
        let endpoint = checked(endpoint)?;
        Ok(self
            .endpoint_learnings()?
            .into_iter()
            .find(|l| l.endpoint == endpoint))
    }

    /// Records with the RUNNING run `run_id` what the store remembers of each of `used` (the
    /// endpoints of its models) now, at its start; an endpoint it knows nothing of is
    /// recorded as such.
    pub fn record_started_endpoints(
        &self,
        run_id: &str,
        used: &[Endpoint],
    ) -> Result<(), StoreError> {
        let known = self.endpoint_learnings()?;
        let mut rows: Vec<EndpointLearning> = Vec::new();
        for endpoint in used {
            let endpoint = checked(endpoint)?;
            if rows.iter().any(|r| r.endpoint == endpoint) {
                continue;
            }
            rows.push(
                known
                    .iter()
                    .find(|l| l.endpoint == endpoint)
                    .cloned()
                    .unwrap_or_else(|| EndpointLearning::unknown(endpoint)),
            );
        }
        rows.sort_by(|a, b| a.endpoint.cmp(&b.endpoint));
        self.record_run_endpoints(run_id, &rows)
    }
}

/// The key as it may be stored: refused when its URL still holds what [`Endpoint::new`]
/// strips (a hand-built key), or when it is blank.
fn checked(endpoint: &Endpoint) -> Result<Endpoint, StoreError> {
    let clean = Endpoint::new(&endpoint.base_url, &endpoint.model);
    if clean.base_url.is_empty() || clean.model.is_empty() {
        return Err(StoreError::invalid(
            "an endpoint learning needs a base URL and a model name",
        ));
    }
    Ok(clean)
}
