//! The grounding corpora of `fixtures/grounding/` (issue 28, "Grounding by facts"), replayed
//! over the README's incident (`fixtures/incident-checkout-502.json`):
//!
//! - every honest answer, swapped in as the Composer's answer, is the run's answer: SUCCESS,
//!   PASS, not degraded, every salient token bound;
//! - every adversarial answer, given twice (the technical retry gets the same answer), is
//!   refused both times naming its token, and neither the post-verification Fallback that
//!   answers instead nor the HTML report's answer section shows the token;
//! - every honest claim text, swapped in for one of c1…c7, is accepted with the other six;
//! - every adversarial claim text is refused by the Gatekeeper with `unbound_token` naming its
//!   token, and neither Fallback built for that run shows the token.
//!
//! A swapped exchange carries no `request_sha256`, so the replay answers it without checking
//! the request (`runfile::tape`). How a case is written: `fixtures/grounding/README.md`.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};
use tempfile::TempDir;

use diag_ask::replay::{compare, replay, Replayed};
use diag_core::ids::SequentialIds;
use diag_core::protocol::gatekeeper::normalize;
use diag_core::protocol::{
    parse_executor, validate_run_with_question, ToolInvocation, Verdict, VerifierResult,
};
use diag_core::store::Store;
use diag_diagnosis::composer_input::allowed_claims;
use diag_diagnosis::topology;
use diag_diagnosis::{
    build_verified_input, consulted_tools, fallback_post, fallback_pre, render_answer, FallbackKind,
};
use diag_report::{render, Format};
use diag_runfile::RunFile;
use diag_testkit::builders::inv;
use diag_testkit::repo;

const INCIDENT: &str = "fixtures/incident-checkout-502.json";
const RUN: &str = "run-corpus";

/// The corpora must stay at least this large (issue 28).
const MIN_HONEST_ANSWERS: usize = 60;
const MIN_HONEST_CLAIMS: usize = 20;

#[derive(Debug, Deserialize)]
struct Refused {
    kind: String,
    text: String,
}

#[derive(Debug, Deserialize)]
struct HonestAnswer {
    id: String,
    style: String,
    answer: String,
    cited_claims: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct AdversarialAnswer {
    id: String,
    shape: String,
    answer: String,
    cited_claims: Vec<String>,
    refused: Refused,
    absent: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct HonestClaim {
    id: String,
    style: String,
    claim_id: String,
    text: String,
}

#[derive(Debug, Deserialize)]
struct AdversarialClaim {
    id: String,
    shape: String,
    claim_id: String,
    text: String,
    refused: Refused,
    absent: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Corpus<H, A> {
    incident: String,
    honest: Vec<H>,
    adversarial: Vec<A>,
}

fn corpus<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = repo().join("fixtures/grounding").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn answers() -> Corpus<HonestAnswer, AdversarialAnswer> {
    let c: Corpus<HonestAnswer, AdversarialAnswer> = corpus("answers.json");
    assert_eq!(c.incident, INCIDENT);
    c
}

fn claims() -> Corpus<HonestClaim, AdversarialClaim> {
    let c: Corpus<HonestClaim, AdversarialClaim> = corpus("claims.json");
    assert_eq!(c.incident, INCIDENT);
    c
}

/// The incident's run file as JSON.
fn incident_doc() -> Value {
    let text = std::fs::read_to_string(repo().join(INCIDENT)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn exchanges(doc: &mut Value) -> &mut Vec<Value> {
    doc["exchanges"].as_array_mut().unwrap()
}

fn position(doc: &Value, agent: &str) -> usize {
    doc["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .position(|x| x["agent"] == agent)
        .unwrap_or_else(|| panic!("the incident has no {agent} exchange"))
}

/// The Executor's evidence document: its last model exchange, the one without tool calls.
fn evidence_position(doc: &Value) -> usize {
    doc["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .rposition(|x| x["agent"] == "executor")
        .unwrap()
}

/// The incident with the Composer's answer replaced by `answer` citing `cited`, `times`
/// times (a second time as the technical retry), none of them checked against the request.
fn with_composer_answer(answer: &str, cited: &[String], times: u32) -> Value {
    let mut doc = incident_doc();
    let at = position(&doc, "composer");
    let content = json!({
        "schema": "composer_answer_v1",
        "answer_markdown": answer,
        "cited_claims": cited,
    })
    .to_string();
    let xs = exchanges(&mut doc);
    let mut x = xs[at].clone();
    x["response"]["content"] = Value::String(content);
    x.as_object_mut().unwrap().remove("request_sha256");
    xs.truncate(at);
    for attempt in 1..=times {
        let mut retry = x.clone();
        retry["attempt"] = attempt.into();
        xs.push(retry);
    }
    doc
}

/// The Executor's evidence document of the incident, parsed as JSON.
fn evidence_document(doc: &Value) -> Value {
    let at = evidence_position(doc);
    serde_json::from_str(
        doc["exchanges"][at]["response"]["content"]
            .as_str()
            .unwrap(),
    )
    .unwrap()
}

/// The incident with claim `claim_id`'s text replaced by `text`; no later model exchange is
/// checked against its request.
fn with_claim_text(claim_id: &str, text: &str) -> Value {
    let mut doc = incident_doc();
    let at = evidence_position(&doc);
    let mut evidence = evidence_document(&doc);
    let claim = evidence["claims"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["claim_id"] == claim_id)
        .unwrap_or_else(|| panic!("the incident has no claim {claim_id}"));
    claim["text"] = Value::String(text.to_string());
    let xs = exchanges(&mut doc);
    xs[at]["response"]["content"] = Value::String(evidence.to_string());
    for x in xs.iter_mut().skip(at) {
        if let Some(o) = x.as_object_mut() {
            o.remove("request_sha256");
        }
    }
    doc
}

/// Replays `doc` into a store of its own; the directory lives as long as the store.
async fn replay_doc(doc: &Value, name: &str) -> (TempDir, Store, Replayed) {
    let run = RunFile::parse(&doc.to_string(), name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let dir = TempDir::new().unwrap();
    let store = diag_testkit::open_sqlite(dir.path().join("runs.db")).unwrap();
    let r = replay(&run, &store, Arc::new(SequentialIds::default()))
        .await
        .unwrap();
    (dir, store, r)
}

/// The HTML report's answer section of the stored run.
fn html_answer_section(store: &Store, run_id: &str) -> String {
    let data = diag_report::from_store(store, run_id).unwrap().unwrap();
    let shape = topology::shape().unwrap().shape();
    let html = render(Format::Html, &data, &shape);
    let start = html
        .find("<section id=\"sec-answer\">")
        .expect("an answer section");
    let end = start + html[start..].find("</section>").unwrap();
    html[start..end].to_string()
}

/// Text as a reader sees it, for the absence checks: tags removed, the HTML entities the
/// report writes decoded, invisible characters dropped, full-width forms folded to ASCII,
/// lowercased.
fn seen(text: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            '\u{00AD}' | '\u{200B}'..='\u{200F}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' => {}
            '\u{FF01}'..='\u{FF5E}' => out.push(char::from_u32(c as u32 - 0xFEE0).unwrap()),
            c => out.push(c),
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
        .to_lowercase()
}

/// Whether `text`, as seen, shows `needle` as a whole word (no letter or digit right before
/// or after).
fn shows(text: &str, needle: &str) -> bool {
    let (text, needle) = (seen(text), seen(needle));
    text.match_indices(&needle).any(|(i, m)| {
        let before = text[..i].chars().next_back();
        let after = text[i + m.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// The incident's tool exchanges as this test's recorded invocations.
fn invocations(doc: &Value) -> Vec<ToolInvocation> {
    doc["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["kind"] == "tool")
        .map(|x| {
            inv(
                RUN,
                x["invocation_id"].as_str().unwrap(),
                x["tool_name"].as_str().unwrap(),
                x["arguments"].clone(),
                x["output"].clone(),
            )
        })
        .collect()
}

fn fail_report(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} of the {what} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn honest_answers_pass_without_degradation() {
    let corpus = answers();
    assert!(corpus.honest.len() >= MIN_HONEST_ANSWERS);
    let mut failures = Vec::new();
    for case in &corpus.honest {
        let name = format!("answers.json honest {} ({})", case.id, case.style);
        let doc = with_composer_answer(&case.answer, &case.cited_claims, 1);
        let (_dir, store, r) = replay_doc(&doc, &name).await;
        let s = &r.outcome.state;
        let got = (
            r.divergence.as_ref().map(ToString::to_string),
            r.actual.status.as_str(),
            r.actual.effective_verdict.map(|v| v.as_str()),
            r.actual.degraded,
            s.fallback_kind,
        );
        if got != (None, "SUCCESS", Some("PASS"), false, None) {
            let composer: Vec<Value> = store
                .events(&r.outcome.run_id)
                .unwrap()
                .into_iter()
                .filter(|e| e.node == "composer")
                .map(|e| serde_json::to_value(&e.detail).unwrap())
                .collect();
            failures.push(format!(
                "{name}: {got:?}, path {:?}, composer events {composer:?}",
                r.actual.path
            ));
            continue;
        }
        if r.actual.answer.as_deref() != Some(render_answer(&case.answer).as_str()) {
            failures.push(format!("{name}: the answer is not the case's answer"));
            continue;
        }
        match &s.round.answer_grounding {
            Some(g) if g.tokens_unbound == 0 && g.tokens_checked > 0 => {}
            other => failures.push(format!("{name}: answer grounding {other:?}")),
        }
    }
    eprintln!(
        "grounding corpus: {} honest answers checked, {} failed",
        corpus.honest.len(),
        failures.len()
    );
    fail_report("honest answers", &failures);
}

#[tokio::test]
async fn adversarial_answers_are_refused_and_not_shown() {
    let corpus = answers();
    let mut failures = Vec::new();
    for case in &corpus.adversarial {
        let name = format!("answers.json adversarial {} ({})", case.id, case.shape);
        let doc = with_composer_answer(&case.answer, &case.cited_claims, 2);
        let (_dir, store, r) = replay_doc(&doc, &name).await;
        let s = &r.outcome.state;
        let got = (
            r.divergence.as_ref().map(ToString::to_string),
            r.actual.path.last().map(String::as_str),
            s.fallback_kind,
            r.actual.degraded,
        );
        if got
            != (
                None,
                Some("fallback"),
                Some(FallbackKind::PostVerification),
                true,
            )
        {
            failures.push(format!("{name}: {got:?}, path {:?}", r.actual.path));
            continue;
        }
        // Both Composer events refuse the answer naming the token, its kind and its line.
        let named: Vec<(Value, Value, Value, bool)> = store
            .events(&r.outcome.run_id)
            .unwrap()
            .into_iter()
            .filter(|e| e.node == "composer")
            .map(|e| {
                let d = serde_json::to_value(&e.detail).unwrap();
                let line_ok = d["line"].as_i64().is_some_and(|l| l >= 1);
                (
                    d["reason"].clone(),
                    d["token_kind"].clone(),
                    d["token"].clone(),
                    line_ok,
                )
            })
            .collect();
        let want = (
            json!("unbound_answer_token"),
            json!(case.refused.kind),
            json!(case.refused.text),
            true,
        );
        if named != [want.clone(), want] {
            failures.push(format!("{name}: composer events {named:?}"));
            continue;
        }
        let answer = r.actual.answer.clone().unwrap_or_default();
        let html = html_answer_section(&store, &r.outcome.run_id);
        for token in &case.absent {
            if shows(&answer, token) {
                failures.push(format!("{name}: the Fallback answer shows {token:?}"));
            }
            if shows(&html, token) {
                failures.push(format!("{name}: the HTML answer section shows {token:?}"));
            }
        }
    }
    eprintln!(
        "grounding corpus: {} adversarial answers checked, {} failed",
        corpus.adversarial.len(),
        failures.len()
    );
    fail_report("adversarial answers", &failures);
}

#[tokio::test]
async fn honest_claim_texts_are_accepted() {
    let corpus = claims();
    assert!(corpus.honest.len() >= MIN_HONEST_CLAIMS);
    let expected = RunFile::parse(&incident_doc().to_string(), INCIDENT)
        .unwrap()
        .expected
        .unwrap();
    let mut failures = Vec::new();
    for case in &corpus.honest {
        let name = format!(
            "claims.json honest {} ({}, {})",
            case.id, case.claim_id, case.style
        );
        let doc = with_claim_text(&case.claim_id, &case.text);
        let (_dir, _store, r) = replay_doc(&doc, &name).await;
        let raw = r.outcome.state.round.gatekeeper_raw.clone();
        let accepted = raw.as_ref().map(|g| g.accepted_claims().len());
        if accepted != Some(7) {
            let refused = raw.map(|g| g.refused_claims);
            failures.push(format!("{name}: refused {refused:?}"));
            continue;
        }
        let diff = compare(&expected, &r.actual);
        if r.divergence.is_some() || !diff.is_empty() {
            failures.push(format!(
                "{name}: divergence {:?}, differs {diff:?}",
                r.divergence
            ));
        }
    }
    eprintln!(
        "grounding corpus: {} honest claim texts checked, {} failed",
        corpus.honest.len(),
        failures.len()
    );
    fail_report("honest claim texts", &failures);
}

#[test]
fn adversarial_claim_texts_are_refused_and_not_shown() {
    let corpus = claims();
    let doc = incident_doc();
    let question = doc["question"].as_str().unwrap().to_string();
    let invs = invocations(&doc);
    let tools = consulted_tools(RUN, &invs);
    let mut failures = Vec::new();
    for case in &corpus.adversarial {
        let name = format!(
            "claims.json adversarial {} ({}, {})",
            case.id, case.claim_id, case.shape
        );
        let changed = with_claim_text(&case.claim_id, &case.text);
        let output = parse_executor(&evidence_document(&changed).to_string())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let raw = validate_run_with_question(RUN, &question, &output, &invs);
        let refused = serde_json::to_value(&raw.refused_claims).unwrap();
        let want = json!([{"claim_id": case.claim_id, "code": "unbound_token",
                           "token": {"kind": case.refused.kind, "text": case.refused.text}}]);
        if refused != want {
            failures.push(format!("{name}: refused {refused}"));
            continue;
        }
        // The Fallbacks built for such a run: the pre-verification one (codes and tool names
        // only) and the post-verification one over what the Gatekeeper accepted.
        let status = normalize(Some(&raw));
        let reason = status.as_str().to_ascii_lowercase();
        let mut shown: Vec<(String, String)> = ["gatekeeper", "verified_input", "verifier"]
            .iter()
            .map(|stage| {
                (
                    format!("fallback_pre({stage})"),
                    fallback_pre(stage, &reason, &tools, "run-1"),
                )
            })
            .collect();
        match build_verified_input(&output, &raw, status) {
            Ok((vout, evidence)) => {
                let result = VerifierResult {
                    verdict: Verdict::Pass,
                    groundedness: 0.9,
                    claim_checks: Vec::new(),
                    facts: Vec::new(),
                    allowed_claims: raw
                        .accepted_claims()
                        .into_iter()
                        .map(String::from)
                        .collect(),
                    missing_information: Vec::new(),
                    recommendations: Vec::new(),
                    rationale: String::new(),
                };
                let post = fallback_post(
                    Some(Verdict::LowConfid),
                    &allowed_claims(&result, &vout, &evidence),
                    &[],
                    &[],
                );
                shown.push(("fallback_post".into(), post));
            }
            Err(e) => failures.push(format!("{name}: no verified projection: {e:?}")),
        }
        for (what, text) in &shown {
            for token in &case.absent {
                if shows(text, token) {
                    failures.push(format!("{name}: {what} shows {token:?}"));
                }
            }
        }
    }
    eprintln!(
        "grounding corpus: {} adversarial claim texts checked, {} failed",
        corpus.adversarial.len(),
        failures.len()
    );
    fail_report("adversarial claim texts", &failures);
}
