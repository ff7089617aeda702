//! What each model endpoint taught, shared by the models of one process: the
//! [`EndpointMemory`] (the `auto` structured-output rung, the context size, the refused
//! sampling parameters, keyed by [`Endpoint`]), the [`LearnedSink`] told of each change (the
//! run store keeps it for the next process), and the per-model `structured_output`
//! [`StructuredOutputSetting`] whose `auto` steps down one form at a time.
//!
//! The memory is a value, not process state: whoever sets up the models (`diag-ask`'s
//! `setup`, once per `diag ask`, `diag mcp` or `diag eval` process) makes one and hands it to
//! every model adapter, so the models sharing an endpoint share what it taught; a test makes
//! its own. How an OpenAI-compatible server is asked for each form, and how its refusals and
//! context-length errors read, is the adapter's (`diag-model-openai`'s `wire`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::StructuredOutput;
pub use diag_records::endpoint::{Endpoint, Learned};

/// The per-model `structured_output` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutputSetting {
    /// Start with `json_schema` and step down, once per endpoint (for every model sharing the
    /// [`EndpointMemory`]), each time the server refuses the form it was sent.
    #[default]
    Auto,
    /// Always `json_schema` (strict where the schema allows it).
    JsonSchema,
    /// `json_object` with the schema; plain `json_object` if the server refuses the schema.
    JsonObject,
    /// Never send `response_format`.
    Off,
}

impl StructuredOutputSetting {
    pub fn as_str(self) -> &'static str {
        match self {
            StructuredOutputSetting::Auto => "auto",
            StructuredOutputSetting::JsonSchema => "json_schema",
            StructuredOutputSetting::JsonObject => "json_object",
            StructuredOutputSetting::Off => "off",
        }
    }

    /// The form to try first.
    pub fn first(self) -> StructuredOutput {
        match self {
            StructuredOutputSetting::Auto | StructuredOutputSetting::JsonSchema => {
                StructuredOutput::JsonSchema
            }
            StructuredOutputSetting::JsonObject => StructuredOutput::JsonObjectSchema,
            StructuredOutputSetting::Off => StructuredOutput::Off,
        }
    }

    /// The form to use after the server refused `refused`, if this setting allows one.
    pub fn after_refusal(self, refused: StructuredOutput) -> Option<StructuredOutput> {
        let next = match refused {
            StructuredOutput::JsonSchema => StructuredOutput::JsonObjectSchema,
            StructuredOutput::JsonObjectSchema => StructuredOutput::JsonObject,
            StructuredOutput::JsonObject => StructuredOutput::Off,
            StructuredOutput::Off => return None,
        };
        match (self, next) {
            (StructuredOutputSetting::Auto, next) => Some(next),
            (StructuredOutputSetting::JsonObject, StructuredOutput::JsonObject) => Some(next),
            _ => None,
        }
    }
}

/// Told what an endpoint taught, each time it teaches something new: `learned` is all that
/// endpoint taught so far. Implemented at the edge (the run store keeps it); a sink must not
/// fail the model call that taught it, so it reports its own failures.
pub trait LearnedSink: Send + Sync {
    fn learned(&self, endpoint: &Endpoint, learned: Learned);
}

/// What each endpoint (its base URL and model name, [`Endpoint`]) taught, shared by the
/// models that hold a clone: cloning is cheap and every clone reads and writes the same table.
/// A new one (`default`) knows nothing and tells no one; [`EndpointMemory::remembering`]
/// starts from what was learned before and tells its [`LearnedSink`] what is learned anew.
#[derive(Clone, Default)]
pub struct EndpointMemory {
    table: Arc<Mutex<HashMap<Endpoint, Learned>>>,
    sink: Option<Arc<dyn LearnedSink>>,
}

impl std::fmt::Debug for EndpointMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointMemory")
            .field("table", &self.table)
            .field("sink", &self.sink.is_some())
            .finish()
    }
}

impl EndpointMemory {
    /// A memory that starts from `known` (what the endpoints taught before) and tells `sink`
    /// each change that is learned from now on.
    pub fn remembering(
        known: impl IntoIterator<Item = (Endpoint, Learned)>,
        sink: Option<Arc<dyn LearnedSink>>,
    ) -> EndpointMemory {
        EndpointMemory {
            table: Arc::new(Mutex::new(known.into_iter().collect())),
            sink,
        }
    }

    /// What `endpoint` taught so far.
    pub fn learned(&self, endpoint: &Endpoint) -> Learned {
        self.table
            .lock()
            .map(|t| t.get(endpoint).copied().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Records what `endpoint` taught; a change is told to the sink (outside the lock).
    pub fn learn(&self, endpoint: &Endpoint, update: impl FnOnce(&mut Learned)) {
        let changed = match self.table.lock() {
            Ok(mut t) => {
                let entry = t.entry(endpoint.clone()).or_default();
                let before = *entry;
                update(entry);
                (*entry != before).then_some(*entry)
            }
            Err(_) => None,
        };
        if let (Some(learned), Some(sink)) = (changed, &self.sink) {
            sink.learned(endpoint, learned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_memory_is_shared_by_its_clones_only() {
        let memory = EndpointMemory::default();
        let clone = memory.clone();
        let m = Endpoint::new("http://h/v1", "m");
        let other = Endpoint::new("http://h/v1", "other");
        assert_eq!(memory.learned(&m), Learned::default());
        clone.learn(&m, |l| {
            l.form = Some(StructuredOutput::JsonObject);
        });
        memory.learn(&m, |l| l.context_tokens = Some(2048));
        let both = Learned {
            form: Some(StructuredOutput::JsonObject),
            context_tokens: Some(2048),
            ..Learned::default()
        };
        assert_eq!(memory.learned(&m), both);
        assert_eq!(clone.learned(&m), both);
        assert_eq!(memory.learned(&other), Learned::default());
        assert_eq!(
            EndpointMemory::default().learned(&m),
            Learned::default(),
            "another memory knows nothing of it"
        );
    }

    #[test]
    fn a_remembering_memory_starts_from_what_it_knew_and_tells_its_sink_each_change() {
        struct Told(Mutex<Vec<(Endpoint, Learned)>>);
        impl LearnedSink for Told {
            fn learned(&self, endpoint: &Endpoint, learned: Learned) {
                self.0.lock().unwrap().push((endpoint.clone(), learned));
            }
        }
        let told = Arc::new(Told(Mutex::new(Vec::new())));
        let m = Endpoint::new("http://h/v1", "m");
        let known = Learned {
            form: Some(StructuredOutput::JsonObjectSchema),
            ..Learned::default()
        };
        let memory = EndpointMemory::remembering([(m.clone(), known)], Some(told.clone()));
        assert_eq!(
            memory.learned(&m),
            known,
            "what was known is not told again"
        );
        assert!(told.0.lock().unwrap().is_empty());
        memory.learn(&m, |l| l.form = Some(StructuredOutput::JsonObjectSchema));
        assert!(told.0.lock().unwrap().is_empty(), "no change, nothing told");
        memory
            .clone()
            .learn(&m, |l| l.form = Some(StructuredOutput::JsonObject));
        let now = Learned {
            form: Some(StructuredOutput::JsonObject),
            ..Learned::default()
        };
        assert_eq!(*told.0.lock().unwrap(), vec![(m, now)]);
    }

    #[test]
    fn auto_steps_down_one_form_at_a_time_and_explicit_settings_do_not() {
        use StructuredOutput::*;
        let auto = StructuredOutputSetting::Auto;
        assert_eq!(auto.first(), JsonSchema);
        assert_eq!(auto.after_refusal(JsonSchema), Some(JsonObjectSchema));
        assert_eq!(auto.after_refusal(JsonObjectSchema), Some(JsonObject));
        assert_eq!(auto.after_refusal(JsonObject), Some(Off));
        assert_eq!(auto.after_refusal(Off), None);
        let schema = StructuredOutputSetting::JsonSchema;
        assert_eq!(schema.after_refusal(JsonSchema), None);
        let object = StructuredOutputSetting::JsonObject;
        assert_eq!(object.first(), JsonObjectSchema);
        assert_eq!(object.after_refusal(JsonObjectSchema), Some(JsonObject));
        assert_eq!(object.after_refusal(JsonObject), None);
        assert_eq!(StructuredOutputSetting::Off.first(), Off);
    }
}
