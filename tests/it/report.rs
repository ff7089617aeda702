//! `diag report`, `ask --report` and `replay --report-dir` through the real binary, offline:
//! snapshots of both formats for the demo incident and a Fallback run, byte-identical output
//! under other time zones and locales, the Markdown read back by a CommonMark parser (its
//! tables round-trip, it holds no HTML but diag's own `<details>`, no image and no unsafe
//! link), hostile content neutralised, an answer's computed values under it (and in `diag
//! trace`), and the command's errors.

use std::path::Path;

use pulldown_cmark::{Event, Parser, Tag, TagEnd};

use crate::support::cli_env;
use crate::support::report_fixtures;
use cli_env::{repo_file, TestEnv};
use report_fixtures::{
    hostile_answer, hostile_run_file, replay, replay_repo, DEMO, EVIDENCE_RETRY, FALLBACK,
};

#[track_caller]
fn snapshot(env: &TestEnv, name: &str, text: &str) {
    let mut settings = insta::Settings::clone_current();
    for (re, to) in env.filters() {
        settings.add_filter(&re, to);
    }
    settings.bind(|| insta::assert_snapshot!(name, text));
}

fn report(env: &TestEnv, run_id: &str, format: &str) -> String {
    let out = env.run(&["report", run_id, "--format", format]);
    out.expect(0).quiet_stderr();
    out.stdout
}

fn gfm() -> pulldown_cmark::Options {
    diag_report::markdown::gfm_options()
}

/// The tables of a Markdown document as rows of cell texts (header row first).
fn tables(md: &str) -> Vec<Vec<Vec<String>>> {
    let mut tables = Vec::new();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row: Vec<String> = Vec::new();
    let mut cell: Option<String> = None;
    for ev in Parser::new_ext(md, gfm()) {
        match ev {
            Event::Start(Tag::Table(_)) => rows = Vec::new(),
            Event::End(TagEnd::Table) => tables.push(std::mem::take(&mut rows)),
            Event::Start(Tag::TableHead) | Event::Start(Tag::TableRow) => row = Vec::new(),
            Event::End(TagEnd::TableHead) | Event::End(TagEnd::TableRow) => {
                rows.push(std::mem::take(&mut row))
            }
            Event::Start(Tag::TableCell) => cell = Some(String::new()),
            Event::End(TagEnd::TableCell) => row.push(cell.take().unwrap_or_default()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(c) = cell.as_mut() {
                    c.push_str(&t);
                }
            }
            _ => {}
        }
    }
    tables
}

/// Every HTML fragment, image and link target in a Markdown document.
fn markup(md: &str) -> (Vec<String>, usize, Vec<String>) {
    let mut html = Vec::new();
    let mut images = 0;
    let mut links = Vec::new();
    for ev in Parser::new_ext(md, gfm()) {
        match ev {
            Event::Html(h) | Event::InlineHtml(h) => html.push(h.trim().to_string()),
            Event::Start(Tag::Image { .. }) => images += 1,
            Event::Start(Tag::Link { dest_url, .. }) => links.push(dest_url.to_string()),
            _ => {}
        }
    }
    (html, images, links)
}

/// The only HTML the Markdown report may hold: diag's own evidence folds.
#[track_caller]
fn assert_markdown_is_inert(md: &str) {
    let (html, images, links) = markup(md);
    for h in &html {
        let rest = h
            .replace("</details>", "")
            .replace("<sub>", "")
            .replace("</sub>", "");
        let rest = rest.trim();
        assert!(
            rest.is_empty()
                || (rest.starts_with("<details><summary>")
                    && rest.ends_with("</summary>")
                    && !rest["<details><summary>".len()..rest.len() - "</summary>".len()]
                        .contains('<')),
            "raw HTML in the Markdown report: {h}"
        );
    }
    assert_eq!(images, 0, "an image in the Markdown report");
    for l in &links {
        assert!(
            diag_report::safe_link(l),
            "an unsafe link in the Markdown report: {l}"
        );
    }
}

/// Every tag in the HTML report is one diag writes, with no event handler and no script
/// URL: model and tool text only ever appears escaped.
#[track_caller]
fn assert_html_is_diags_own(html: &str) {
    const TAGS: &[&str] = &[
        "html",
        "head",
        "meta",
        "link",
        "title",
        "style",
        "body",
        "main",
        "header",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "dl",
        "div",
        "dt",
        "dd",
        "span",
        "nav",
        "a",
        "section",
        "p",
        "ul",
        "ol",
        "li",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "code",
        "pre",
        "strong",
        "em",
        "del",
        "blockquote",
        "hr",
        "br",
        "article",
        "mark",
        "details",
        "summary",
        "footer",
        "svg",
        "defs",
        "marker",
        "path",
        "g",
        "text",
        "rect",
        "line",
        "circle",
        "i",
        "input",
    ];
    let tag = regex::Regex::new(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)([^>]*)>").unwrap();
    let handler = regex::Regex::new(r"\son[a-z]+\s*=").unwrap();
    for m in tag.captures_iter(html) {
        let name = m[2].to_ascii_lowercase();
        assert!(
            TAGS.contains(&name.as_str()),
            "a <{name}> tag in the HTML report: {}",
            &m[0]
        );
        let attrs = m[3].to_ascii_lowercase();
        assert!(!handler.is_match(&attrs), "an event handler: {}", &m[0]);
        assert!(!attrs.contains("javascript:"), "a script URL: {}", &m[0]);
        if name == "link" {
            assert_eq!(&m[0], "<link rel=\"icon\" href=\"data:,\">");
        }
    }
    assert!(!html.contains("<!DOCTYPE html>\n<html") || html.starts_with("<!DOCTYPE html>\n"));
}

#[test]
fn demo_reports_match_their_snapshots_and_do_not_depend_on_time_zone_or_locale() {
    let env = TestEnv::new();
    let run = replay_repo(&env, DEMO);
    let html = report(&env, &run, "html");
    let md = report(&env, &run, "md");
    snapshot(&env, "demo_html", &html);
    snapshot(&env, "demo_md", &md);
    // Byte-identical again, and under another zone and locale.
    assert_eq!(report(&env, &run, "html"), html);
    for (tz, lang) in [
        ("Asia/Kolkata", "de_DE.UTF-8"),
        ("America/St_Johns", "ar_EG.UTF-8"),
    ] {
        for format in ["html", "md"] {
            let out = env.run_with(&["report", &run, "--format", format], |c| {
                c.env("TZ", tz).env("LC_ALL", lang).env("LANG", lang);
            });
            out.expect(0);
            assert_eq!(
                &out.stdout,
                if format == "html" { &html } else { &md },
                "{format} under TZ={tz} LC_ALL={lang}"
            );
        }
    }
    // What a reader needs is there.
    for needle in [
        "why does checkout-service return 502 since 14:00?",
        "href=\"#claim-c1\"",
        "id=\"claim-c7\"",
        "<mark>",
        "class=\"timeline\"",
        "class=\"graph\"",
        "id=\"inv-7\"",
        "Content-Security-Policy",
    ] {
        assert!(html.contains(needle), "{needle}");
    }
    assert_html_is_diags_own(&html);
    assert!(html.len() < 1_000_000, "{} bytes", html.len());
}

#[test]
fn fallback_reports_match_their_snapshots_and_show_refusal_codes() {
    let env = TestEnv::new();
    let run = replay_repo(&env, FALLBACK);
    let html = report(&env, &run, "html");
    let md = report(&env, &run, "md");
    snapshot(&env, "fallback_html", &html);
    snapshot(&env, "fallback_md", &md);
    assert!(
        md.contains("**degraded** (pre-verification fallback)"),
        "{md}"
    );
    assert!(md.contains("❌ refused"), "{md}");
    assert!(
        html.contains("badge b-fail\">refused"),
        "refused claim cards"
    );
    assert!(
        html.contains("<code>quote_not_found</code>")
            || html.contains("<code>path_not_found</code>"),
        "refusal codes are shown"
    );
    assert_markdown_is_inert(&md);
    assert_html_is_diags_own(&html);
}

/// The grounding table of a Markdown report as (label, value) pairs.
fn grounding_rows(md: &str) -> Vec<(String, String)> {
    tables(md)
        .into_iter()
        .find(|t| t.first().is_some_and(|h| h == &["figure", "value"]))
        .map(|t| {
            t.into_iter()
                .skip(1)
                .map(|r| (r[0].clone(), r[1].clone()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn grounding_figures_agree_with_trace_and_refusals_name_their_code() {
    let env = TestEnv::new();
    // The figure of the run's evaluation (as `trace --json` reads it) under each label.
    let labels = [
        ("claims_bound", "grounding: claims bound"),
        ("claims_refused", "grounding: claims refused"),
        ("claim_tokens_checked", "grounding: claim tokens checked"),
        ("claim_tokens_unbound", "grounding: claim tokens unbound"),
        ("answer_tokens_checked", "grounding: answer tokens checked"),
        ("answer_tokens_unbound", "grounding: answer tokens unbound"),
        ("items_dropped", "grounding: verifier items dropped"),
    ];
    for file in [
        DEMO,
        "fixtures/runs/gatekeeper_unbound_token.json",
        "fixtures/runs/composer_unbound_token.json",
        "fixtures/runs/gatekeeper_half_bound_claim.json",
    ] {
        let run = replay_repo(&env, file);
        let trace = env.run(&["trace", &run, "--json"]);
        trace.expect(0);
        let figures = trace.json()["evaluation"]["grounding"].clone();
        let md = report(&env, &run, "md");
        let html = report(&env, &run, "html");
        let rows = grounding_rows(&md);
        for (key, label) in labels {
            let want = figures[key]
                .as_u64()
                .unwrap_or_else(|| panic!("{file}: no {key} in {figures}"));
            let got: Vec<&str> = rows
                .iter()
                .filter(|(l, _)| l == label)
                .map(|(_, v)| v.as_str())
                .collect();
            assert_eq!(got, [want.to_string()], "{file}: {label}");
            assert!(
                html.contains(&format!("<tr><th>{label}</th><td>{want}</td></tr>")),
                "{file}: {label} in HTML"
            );
        }
        assert_markdown_is_inert(&md);
        assert_html_is_diags_own(&html);
    }

    // A claim refused for a token no evidence holds (c3 adds a `v2.3.1` deploy at 13:58):
    // its code, the token and its kind; never the claim's text.
    let run = replay_repo(&env, "fixtures/runs/gatekeeper_unbound_token.json");
    let md = report(&env, &run, "md");
    let html = report(&env, &run, "html");
    let trace = env.run(&["trace", &run, "--json"]).json();
    let refused: Vec<&serde_json::Value> = trace["grounding"]["claims"]
        .as_array()
        .expect("claims")
        .iter()
        .filter(|c| c["code"] == "unbound_token")
        .collect();
    assert!(!refused.is_empty(), "{trace}");
    for c in refused {
        let id = c["claim_id"].as_str().unwrap();
        let token = c["token"].as_str().unwrap();
        let kind = c["token_kind"].as_str().unwrap();
        assert!(
            html.contains(&format!(
                "<code>unbound_token: {} ({kind})</code>",
                diag_report::escape_html(token)
            )),
            "{id}: {html}"
        );
        let item = md
            .lines()
            .find(|l| l.starts_with(&format!("- **{id}** · ❌ refused")))
            .unwrap_or_else(|| panic!("{id}: no claim item in {md}"));
        assert!(item.contains("unbound\\_token"), "{item}");
    }
    for report in [&md, &html] {
        assert!(
            !report.contains("exhausted after the v2.3.1 deploy"),
            "{report}"
        );
    }
}

#[test]
fn markdown_tables_round_trip_through_a_commonmark_parser() {
    let env = TestEnv::new();
    for file in [DEMO, FALLBACK, EVIDENCE_RETRY] {
        let run = replay_repo(&env, file);
        let md = report(&env, &run, "md");
        assert_markdown_is_inert(&md);
        let trace = env.run(&["trace", &run, "--json"]);
        trace.expect(0);
        let trace = trace.json();
        let events = trace["events"].as_array().expect("events");
        let steps = trace["agent_steps"].as_array().expect("steps");
        let invocations = trace["tool_invocations"].as_array().expect("invocations");

        let tables = tables(&md);
        let timeline = tables
            .iter()
            .find(|t| {
                t.first()
                    .is_some_and(|h| h.get(1).map(String::as_str) == Some("kind"))
            })
            .unwrap_or_else(|| panic!("{file}: no timeline table in\n{md}"));
        assert_eq!(
            timeline[0],
            [
                "#",
                "kind",
                "what",
                "status",
                "round",
                "attempt",
                "start (step)",
                "length (step)"
            ],
            "{file}"
        );
        let body = &timeline[1..];
        assert_eq!(
            body.len(),
            events.len() + steps.len() + invocations.len(),
            "{file}"
        );
        // Node rows, in order, carry each event's node, status, round and attempt.
        let nodes: Vec<Vec<String>> = body
            .iter()
            .filter(|r| r[1] == "node")
            .map(|r| vec![r[2].clone(), r[3].clone(), r[4].clone(), r[5].clone()])
            .collect();
        let expected: Vec<Vec<String>> = events
            .iter()
            .map(|e| {
                vec![
                    e["node"].as_str().unwrap().to_string(),
                    e["status"].as_str().unwrap().to_string(),
                    e["round"].to_string(),
                    e["attempt"].to_string(),
                ]
            })
            .collect();
        assert_eq!(nodes, expected, "{file}");
        // Tool rows name each invocation and its status, in recording order.
        let tools: Vec<(String, String)> = body
            .iter()
            .filter(|r| r[1] == "tool call")
            .map(|r| (r[2].clone(), r[3].clone()))
            .collect();
        let expected: Vec<(String, String)> = invocations
            .iter()
            .map(|i| {
                (
                    format!(
                        "{} {}",
                        i["invocation_id"].as_str().unwrap(),
                        i["tool_name"].as_str().unwrap()
                    ),
                    i["status"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(tools, expected, "{file}");
        // Grounding figures: one row per figure, two cells each.
        let grounding = tables
            .iter()
            .find(|t| t.first().is_some_and(|h| h == &["figure", "value"]))
            .unwrap_or_else(|| panic!("{file}: no grounding table"));
        assert!(grounding.iter().all(|r| r.len() == 2));
        assert!(grounding.iter().any(|r| r[0] == "effective verdict"));
    }
}

/// A stored run whose answer has computed values (its Composer audit's checked derivations):
/// `diag trace` prints them after the answer, `--json` carries them in the self-evaluation, and
/// both reports list them under the answer, the claim with a card linked.
#[test]
fn trace_and_reports_show_the_answers_computed_values() {
    let env = TestEnv::new();
    let run = "run-derivations";
    let answer = "Checkout failed for 96 % [d1] of requests [c6].";
    let derivations = serde_json::json!([{"id": "d1", "op": "percentage", "result": "96 %",
                                          "expression": "48 / 50 × 100",
                                          "claims": ["c6", "c4"],
                                          "arithmetic": "48 / 50 × 100 (c6, c4)"}]);
    let store = diag_testkit::open_sqlite(env.db()).unwrap();
    let recorder = store
        .create_run(diag_testkit::records::new_run(run, "ses-1", 0))
        .unwrap();
    let mut summary = diag_testkit::records::summary(answer);
    summary.self_evaluation = Some(serde_json::json!({"verifier_evaluation": {
        "round": 1, "gatekeeper_status": "PASS", "effective_verdict": "PASS",
        "verified_executor_output": {"claims": [{"claim_id": "c6", "text": "48 of 50 failed"}]},
        "composer_audit": {"status": "COMPLETED", "derivations": derivations},
    }}));
    store.finish_success(run, summary).unwrap();
    drop(recorder);
    drop(store);

    let out = env.run(&["trace", run]);
    out.expect(0).quiet_stderr();
    assert!(
        out.stdout.ends_with(&format!(
            "answer\n{answer}\n\ncomputed values\n  d1: 96 % = 48 / 50 × 100 (c6, c4)\n"
        )),
        "{}",
        out.stdout
    );
    let out = env.run(&["trace", run, "--json"]);
    out.expect(0).quiet_stderr();
    let doc = out.json();
    cli_env::assert_schema("trace.v1.json", &doc);
    assert_eq!(
        doc["run"]["self_evaluation"]["verifier_evaluation"]["composer_audit"]["derivations"],
        derivations
    );

    let html = report(&env, run, "html");
    assert_html_is_diags_own(&html);
    assert!(
        html.contains("</section>\n<section id=\"sec-derivations\">\n<h2>Computed values</h2>\n")
    );
    assert!(html.contains(
        "<li id=\"derivation-d1\"><span class=\"mono\">d1</span> <code>96 % = 48 / 50 × \
         100</code> (<a class=\"cite\" href=\"#claim-c6\">c6</a>, c4)</li>\n</ul>\n</section>\n\
         <section id=\"sec-claims\">"
    ));
    assert!(html.contains("96 % [<a class=\"cite\" href=\"#derivation-d1\">d1</a>]"));
    let md = report(&env, run, "md");
    assert_markdown_is_inert(&md);
    assert!(md.contains(&format!(
        "## Answer\n\n{answer}\n\n## Computed values\n\n\
         - **d1**: 96 % = 48 / 50 × 100 (c6, c4)\n\n## Claims\n"
    )));
}

#[test]
fn hostile_model_and_tool_text_stays_text_in_both_formats() {
    let env = TestEnv::new();
    let file = hostile_run_file(&env);
    let doc = env.ask_fixture_json(&file, &[]);
    assert_eq!(
        doc["effective_verdict"], "PASS",
        "the hostile run still passes: {doc}"
    );
    // The Composer's hostile answer was accepted as it was written, not replaced by a Fallback.
    assert_eq!(doc["fallback_kind"], serde_json::Value::Null, "{doc}");
    assert_eq!(
        doc["answer"].as_str(),
        Some(hostile_answer().as_str()),
        "the stored answer is the hostile one: {doc}"
    );
    let run = doc["run_id"].as_str().unwrap().to_string();
    let html = report(&env, &run, "html");
    let md = report(&env, &run, "md");
    // The text is there, as text.
    assert!(
        html.contains("&lt;script&gt;window.__pwned = true"),
        "escaped script text"
    );
    assert!(html.contains("[image not loaded: https://evil.example/inner.png]"));
    assert_html_is_diags_own(&html);
    assert!(
        html.contains("href=\"#claim-c1\""),
        "the citation still links"
    );
    assert_markdown_is_inert(&md);
    assert!(md.contains("pwned"), "the hostile text is shown, as text");
}

#[test]
fn ask_and_replay_write_reports_and_the_format_follows_the_extension() {
    let env = TestEnv::new();
    let pass = env.copy_fixture("tests/fixtures/runs/pass.json", "pass.json");
    let out = env.run(&[
        "ask",
        "--fixture",
        pass.to_str().unwrap(),
        "--report",
        "answer.md",
        "--quiet",
    ]);
    out.expect(0).quiet_stderr();
    let md = std::fs::read_to_string(env.path("answer.md")).expect("the report");
    assert!(md.starts_with("# diag: "), "{md}");
    assert_markdown_is_inert(&md);

    let run = serde_json::from_str::<serde_json::Value>(&env.run(&["runs", "--json"]).stdout)
        .unwrap()["runs"][0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    env.run(&["report", &run, "-o", "r.html"])
        .expect(0)
        .wrote("r.html");
    let html = std::fs::read_to_string(env.path("r.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    // --format wins over the extension; the same run gives the same bytes as stdout.
    env.run(&["report", &run, "-o", "r.txt", "--format", "md"])
        .expect(0);
    assert_eq!(
        std::fs::read_to_string(env.path("r.txt")).unwrap(),
        report(&env, &run, "md")
    );
    assert_eq!(html, report(&env, &run, "html"));

    // replay --report-dir: one report per run file, named after it, a mismatch included.
    std::fs::create_dir_all(env.path("runs/b")).unwrap();
    env.copy_fixture("tests/fixtures/runs/pass.json", "runs/pass.json");
    env.copy_fixture("tests/fixtures/runs/low_confid.json", "runs/b/pass.json");
    env.copy_fixture(FALLBACK, "runs/fallback.json");
    let out = env.run(&["replay", "runs", "--report-dir", "reports/ci"]);
    // runs/b/pass.json holds the low-confidence run, whose expected answer is its own: ok.
    out.expect(0);
    let mut names: Vec<String> = std::fs::read_dir(env.path("reports/ci"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["fallback.html", "pass-2.html", "pass.html"]);
    let out = env.run(&[
        "replay",
        "runs/fallback.json",
        "--report-dir",
        "md",
        "--report-format",
        "md",
    ]);
    out.expect(0);
    assert!(std::fs::read_to_string(env.path("md/fallback.md"))
        .unwrap()
        .contains("❌ refused"));
}

#[test]
fn report_errors_are_one_line_with_exit_2() {
    let env = TestEnv::new();
    let run = replay_repo(&env, "tests/fixtures/runs/pass.json");
    std::fs::create_dir_all(env.path("adir.html")).unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["report", &run], "needs --format html or --format md"),
        (
            vec!["report", &run, "-o", "r.pdf"],
            "cannot tell the report format",
        ),
        (
            vec!["report", "run-nope", "--format", "md"],
            "unknown run `run-nope`",
        ),
        (
            vec!["report", &run, "-o", "missing/r.html"],
            "the folder missing does not exist",
        ),
        (vec!["report", &run, "-o", "adir.html"], "it is a folder"),
        (
            vec!["report", &run, "--format", "pdf"],
            "invalid value 'pdf'",
        ),
    ];
    for (args, needle) in cases {
        let out = env.run(&args);
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.snapshot_text());
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // ask refuses a report name it cannot honour before running anything.
    let pass = repo_file("tests/fixtures/runs/pass.json");
    let before = env.run(&["runs", "--json"]).json()["runs"]
        .as_array()
        .unwrap()
        .len();
    let out = env.run(&[
        "ask",
        "--fixture",
        pass.to_str().unwrap(),
        "--report",
        "x.pdf",
    ]);
    out.expect(2);
    assert!(out.one_error_line().contains("x.pdf"));
    let after = env.run(&["runs", "--json"]).json()["runs"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after, "no run was started");
    // No store: nothing is created.
    let out = env.run(&["--db", "nowhere/x.db", "report", &run, "--format", "md"]);
    out.expect(2);
    assert!(!Path::new(&env.path("nowhere")).exists());
    let _ = replay;
}
