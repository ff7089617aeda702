//! HTML reports in a real browser: headless Chromium (Debian's `chromium`) loads each report
//! from a file URL with networking disabled (`--host-resolver-rules="MAP * ~NOTFOUND"`,
//! `--proxy-server=127.0.0.1:9`, so any attempted fetch would fail and be seen), and the
//! tests check over the DevTools protocol that the page rendered (a screenshot that is not
//! blank), that every in-page link (every `[cN]` citation among them) resolves to an
//! element, that the page requested nothing but itself and raised no console error, and that
//! hostile model and tool text ran nothing and fetched nothing.

use crate::support::browser;
use crate::support::cli_env;
use crate::support::report_fixtures;

use std::path::{Path, PathBuf};

use cli_env::TestEnv;
use report_fixtures::{hostile_run_file, replay, replay_repo, DEMO, EVIDENCE_RETRY, FALLBACK};

fn write_report(env: &TestEnv, run_id: &str, name: &str) -> PathBuf {
    let path = env.path(name);
    env.run(&["report", run_id, "-o", path.to_str().unwrap()])
        .expect(0)
        .wrote(path.to_str().unwrap());
    path
}

/// Loads a report and checks what every report must satisfy; returns the DOM findings.
#[track_caller]
fn check_page(path: &Path) -> serde_json::Value {
    let page = browser::load(path);
    let own = format!("file://{}", path.canonicalize().unwrap().display());
    assert_eq!(
        page.requests,
        vec![own.clone()],
        "{}: the page requested something besides itself",
        path.display()
    );
    assert!(
        page.errors.is_empty(),
        "{}: console errors: {:#?}",
        path.display(),
        page.errors
    );
    let dom = &page.dom;
    assert_eq!(
        dom["dangling"],
        serde_json::json!([]),
        "{}: links to nothing",
        path.display()
    );
    assert_eq!(dom["scripts"], 0);
    assert_eq!(dom["images"], 0);
    assert_eq!(dom["iframes"], 0);
    assert_eq!(dom["handlers"], serde_json::json!([]));
    assert_eq!(dom["javascript_urls"], serde_json::json!([]));
    // Nothing on the page loads anything: the only element with an address besides the
    // links is the empty `data:` icon that keeps the browser from asking for a favicon.
    assert_eq!(dom["fetched"], serde_json::json!(["link data:,"]));
    assert_eq!(dom["pwned"], false);
    // Element ids are unique, so a link cannot land on the wrong element.
    let ids: Vec<&str> = dom["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "duplicate ids: {ids:?}");
    // It rendered: a screenshot of the viewport with many colours, not one blank page.
    let (colours, width, height) = browser::png_colours(&page.screenshot);
    assert_eq!((width, height), (1280, 900));
    assert!(
        colours > 50,
        "{}: the screenshot looks blank ({colours} colours)",
        path.display()
    );
    assert!(dom["text_chars"].as_u64().unwrap() > 500);
    page.dom
}

#[test]
fn demo_fallback_and_retry_reports_render_offline_and_every_citation_resolves() {
    let env = TestEnv::new();
    for (file, name, citations) in [
        (DEMO, "demo.html", 9usize),
        (FALLBACK, "fallback.html", 0),
        (EVIDENCE_RETRY, "retry.html", 1),
    ] {
        let run = replay_repo(&env, file);
        let path = write_report(&env, &run, name);
        let dom = check_page(&path);
        let cites = dom["cites"].as_array().unwrap();
        assert!(
            cites.len() >= citations,
            "{name}: {} citation links, expected at least {citations}",
            cites.len()
        );
        for c in cites {
            assert!(c.as_str().unwrap().starts_with("#claim-"), "{c}");
        }
    }
}

#[test]
fn hostile_content_runs_nothing_and_fetches_nothing_in_the_browser() {
    let env = TestEnv::new();
    let file = hostile_run_file(&env);
    let run = replay(&env, &file);
    let path = write_report(&env, &run, "hostile.html");
    let dom = check_page(&path);
    // The hostile text is on the page, as text: in the answer (as the Composer wrote it and
    // the answer grounding check accepted it), the claim's text and the tool output.
    let text = |section: &str| {
        dom["section_text"][section]
            .as_str()
            .unwrap_or_else(|| panic!("no section {section}"))
            .to_string()
    };
    let script = "<script>window.__pwned = true; document.title = 'pwned'</script>";
    let answer = text("sec-answer");
    for needle in [
        script,
        "<img src=x onerror=\"window.__pwned = true\">",
        "<svg onload=\"window.__pwned=true\"></svg>",
        "[image not loaded: https://evil.example/inner.png]",
        "javascript:window.__pwned=true",
    ] {
        assert!(answer.contains(needle), "{needle} in the answer: {answer}");
    }
    assert!(text("sec-claims").contains(script), "the claim's text");
    assert!(text("sec-tools").contains(script), "the tool output");
    assert_eq!(
        dom["remote_links"],
        serde_json::json!(["https://evil.example/auto"]),
        "the only link out is the answer's https autolink, a plain link that loads nothing"
    );
    assert!(!dom["title"].as_str().unwrap().contains("pwned"));
    let cites = dom["cites"].as_array().unwrap();
    assert!(!cites.is_empty());
    assert!(cites.iter().all(|c| c == "#claim-c1"), "{cites:?}");
}

/// The harness itself sees what it is meant to catch: on a page without diag's policy, a
/// remote image is requested, a script runs and logs an error, and a link to a missing id
/// is found dangling.
#[test]
fn the_browser_harness_sees_requests_scripts_errors_and_dangling_links() {
    let env = TestEnv::new();
    let path = env.path("control.html");
    std::fs::write(
        &path,
        "<!DOCTYPE html><html><head><title>control</title></head><body>\
         <p><a href=\"#nowhere\">x</a></p><img src=\"https://evil.example/pixel.png\">\
         <script>window.__pwned = true; console.error('control error');</script></body></html>",
    )
    .unwrap();
    let page = browser::load(&path);
    assert!(
        page.requests
            .iter()
            .any(|r| r == "https://evil.example/pixel.png"),
        "{:?}",
        page.requests
    );
    assert!(
        page.errors.iter().any(|e| e.contains("control error")),
        "{:?}",
        page.errors
    );
    assert_eq!(page.dom["dangling"], serde_json::json!(["#nowhere"]));
    assert_eq!(page.dom["pwned"], true);
    assert_eq!(page.dom["scripts"], 1);
}
