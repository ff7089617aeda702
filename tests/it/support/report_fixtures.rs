//! Stored runs to report on: replays of committed run files into a hermetic store, and a
//! hostile run whose tool output, claim and answer carry markup, scripts, `javascript:`
//! links and a remote image.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::cli_env::{repo_file, TestEnv};

/// The demo incident of the README.
pub const DEMO: &str = "fixtures/incident-checkout-502.json";
/// A Fallback run: the Gatekeeper refuses every claim, the pre-verification Fallback answers.
pub const FALLBACK: &str = "fixtures/runs/gatekeeper_reject.json";
/// Two evidence rounds: 12 node executions.
pub const EVIDENCE_RETRY: &str = "fixtures/runs/evidence_retry.json";

/// Hostile text, put into a tool output, a claim and the answer. Every piece would run a
/// script, fetch something or navigate if a report let it through as markup.
pub const HOSTILE: &str = "<script>window.__pwned = true; document.title = 'pwned'</script> \
<img src=x onerror=\"window.__pwned = true\"> <a href=\"javascript:window.__pwned=true\">click</a> \
[open me](javascript:window.__pwned=true) ![a tracker](https://evil.example/pixel.png) \
<iframe src=\"https://evil.example/frame\"></iframe> <style>body{display:none}</style> \
<link rel=stylesheet href=https://evil.example/x.css> <svg onload=\"window.__pwned=true\"></svg>";

/// More hostile Markdown, for the answer only: raw HTML around an image, a reference link to
/// `javascript:` and a remote autolink.
pub const HOSTILE_ANSWER_TAIL: &str =
    "<div>\n\n![an inner image](https://evil.example/inner.png)\n\n</div>\n\n\
[a link]: javascript:window.__pwned=true\n\nSee [a link] and <https://evil.example/auto>.\n";

/// The hostile answer: a grounded sentence citing c1, then [`HOSTILE`] and
/// [`HOSTILE_ANSWER_TAIL`].
pub fn hostile_answer() -> String {
    format!(
        "checkout-service answers 502 because of payment-service [c1].\n\n{HOSTILE}\n\n{HOSTILE_ANSWER_TAIL}"
    )
}

/// Replays `file` with `ask --fixture` and returns the run id.
pub fn replay(env: &TestEnv, file: &Path) -> String {
    let doc = env.ask_fixture_json(file, &[]);
    doc["run_id"].as_str().expect("run_id").to_string()
}

/// Replays a committed run file and returns the run id.
pub fn replay_repo(env: &TestEnv, repo_path: &str) -> String {
    replay(env, &repo_file(repo_path))
}

fn edit_content(exchange: &mut Value, edit: impl FnOnce(&mut Value)) {
    let content = exchange["response"]["content"]
        .as_str()
        .expect("model content")
        .to_string();
    let mut doc: Value = serde_json::from_str(&content).expect("content is JSON");
    edit(&mut doc);
    exchange["response"]["content"] = Value::String(doc.to_string());
}

/// `tests/fixtures/runs/pass.json` with [`HOSTILE`] in the log line the claim quotes, in the
/// claim's text and in the answer ([`hostile_answer`], which also cites the claim). The quote
/// itself is unchanged, so the Gatekeeper still passes the claim. The log line also holds
/// [`HOSTILE_ANSWER_TAIL`] (on one line), so every salient token of the answer (its URLs,
/// hosts and identifiers) occurs in the evidence of the allowed claim: the answer grounding
/// check accepts the answer, and the report shows hostile but accepted content.
pub fn hostile_run_file(env: &TestEnv) -> PathBuf {
    let mut run: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_file("tests/fixtures/runs/pass.json")).expect("pass.json"),
    )
    .expect("pass.json is JSON");
    for x in run["exchanges"].as_array_mut().expect("exchanges") {
        match (x["kind"].as_str(), x["agent"].as_str()) {
            (Some("tool"), _) => {
                let line = x["output"]["matches"][0]["line"]
                    .as_str()
                    .expect("log line")
                    .to_string();
                let tail = HOSTILE_ANSWER_TAIL.split_whitespace().collect::<Vec<_>>();
                x["output"]["matches"][0]["line"] =
                    Value::String(format!("{HOSTILE} {line} {HOSTILE} {}", tail.join(" ")));
            }
            (Some("model"), Some("executor"))
                if x["response"]["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("executor_evidence_v2")) =>
            {
                edit_content(x, |doc| {
                    let text = doc["claims"][0]["text"].as_str().unwrap_or("").to_string();
                    doc["claims"][0]["text"] = Value::String(format!("{text} {HOSTILE}"));
                });
            }
            (Some("model"), Some("composer")) => {
                edit_content(x, |doc| {
                    doc["answer_markdown"] = Value::String(hostile_answer());
                });
            }
            _ => {}
        }
    }
    let path = env.path("hostile.json");
    std::fs::write(&path, serde_json::to_string_pretty(&run).expect("JSON")).expect("write");
    path
}
