//! The JSON Schemas sent as `response_format` agree with the parsers: every reply the fixture
//! library's agents give that their node accepted (the attempt ended COMPLETED) is valid
//! under the schema that went with its request, and the schemas are valid JSON Schema, in
//! their plain form and in the strict form a `json_schema` server gets. A schema tighter than
//! its parser would make a constrained model unable to say what the contract allows.

use std::path::PathBuf;
use std::sync::Arc;

use diag_ask::replay::replay;
use diag_core::ids::SequentialIds;
use diag_core::protocol::parse::json_document;
use diag_model_openai::wire::strict_schema;
use diag_runfile::RunFile;
use serde_json::Value;

fn run_files() -> Vec<PathBuf> {
    let root = diag_testkit::repo().join("fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.push(root.join("incident-checkout-502.json"));
    files.sort();
    files
}

#[tokio::test]
async fn every_accepted_reply_in_the_library_is_valid_under_the_schema_sent_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = diag_testkit::open_sqlite(dir.path().join("runs.db")).unwrap();
    let ids = Arc::new(SequentialIds::default());
    let mut checked = std::collections::BTreeMap::<String, usize>::new();
    for file in run_files() {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let run = RunFile::parse(&std::fs::read_to_string(&file).unwrap(), &name).unwrap();
        let replayed = replay(&run, &store, ids.clone()).await.unwrap();
        assert_eq!(replayed.divergence, None, "{name}");
        let run_id = &replayed.outcome.run_id;
        let events = store.events(run_id).unwrap();
        for x in store.exchanges(run_id).unwrap() {
            let x = x.exchange;
            let Ok(response) = &x.outcome else { continue };
            let (Some(content), Some(contract)) = (&response.content, &x.request.response_format)
            else {
                continue;
            };
            if !response.tool_calls.is_empty() {
                continue;
            }
            let accepted = events.iter().any(|e| {
                e.node == x.agent.as_str()
                    && e.round == x.round
                    && e.attempt == x.attempt
                    && e.status == "COMPLETED"
            });
            if !accepted {
                continue;
            }
            let doc = Value::Object(json_document(content).unwrap());
            for (form, schema) in [
                ("plain", contract.schema.clone()),
                ("strict", strict_schema(&contract.schema).0),
            ] {
                jsonschema::meta::validate(&schema)
                    .unwrap_or_else(|e| panic!("{name}: {form} {}: {e}", contract.name));
                let validator = jsonschema::validator_for(&schema).unwrap();
                // The strict form wants every property, `null` for an absent optional one,
                // which is what a strict server produces; the parser reads it as absent.
                let doc = if form == "strict" {
                    with_nulls(&doc, &schema)
                } else {
                    doc.clone()
                };
                let errors: Vec<String> = validator
                    .iter_errors(&doc)
                    .map(|e| format!("{} at {}", e, e.instance_path()))
                    .collect();
                assert!(
                    errors.is_empty(),
                    "{name}: {} reply of {} r{} a{} refused by its {form} schema: {errors:#?}",
                    contract.name,
                    x.agent,
                    x.round,
                    x.attempt
                );
            }
            *checked.entry(contract.name.clone()).or_default() += 1;
        }
    }
    for contract in [
        "planner_plan_v1",
        "executor_evidence_v2",
        "verifier_verdict_v1",
        "composer_answer_v1",
    ] {
        assert!(
            checked.get(contract).copied().unwrap_or(0) >= 3,
            "{contract}: {checked:?}"
        );
    }
}

/// `doc` with `null` for every property its (strict) schema lists and it leaves out.
fn with_nulls(doc: &Value, schema: &Value) -> Value {
    match (doc, schema) {
        (Value::Object(m), _) => {
            let variants: Vec<&Value> = match schema.get("anyOf").and_then(Value::as_array) {
                Some(a) => a.iter().collect(),
                None => vec![schema],
            };
            // The variant whose properties cover the document's keys.
            let s = variants
                .into_iter()
                .find(|s| {
                    s.get("properties")
                        .and_then(Value::as_object)
                        .is_some_and(|p| m.keys().all(|k| p.contains_key(k)))
                        && s.pointer("/properties/tool/enum/0")
                            .is_none_or(|t| m.get("tool") == Some(t))
                })
                .unwrap_or(schema);
            let mut out = serde_json::Map::new();
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, p) in props {
                    let v = m.get(k).map_or(Value::Null, |v| with_nulls(v, p));
                    out.insert(k.clone(), v);
                }
            }
            for (k, v) in m {
                out.entry(k.clone()).or_insert_with(|| v.clone());
            }
            Value::Object(out)
        }
        (Value::Array(a), _) => {
            let items = schema
                .get("items")
                .or_else(|| {
                    schema
                        .get("anyOf")
                        .and_then(Value::as_array)
                        .and_then(|v| v.iter().find_map(|s| s.get("items")))
                })
                .cloned()
                .unwrap_or(Value::Null);
            Value::Array(a.iter().map(|v| with_nulls(v, &items)).collect())
        }
        (other, _) => other.clone(),
    }
}
