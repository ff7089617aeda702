//! The answer's computed values (the checked derivations the self-evaluation's Composer audit
//! keeps) as readers see them: a "Computed values" section right under the answer in the HTML
//! and Markdown reports and a `computed values` block after the answer in `diag trace`'s text,
//! each operand's claim linked to its card when the report has one; hostile text in a stored
//! derivation stays text; the same run renders byte-identically; a run without derivations
//! renders as it did before they existed.

use pulldown_cmark::{Event, Parser, Tag, TagEnd};
use serde_json::{json, Value};

use diag_core::clock::Timestamp;
use diag_core::graph::GraphShape;
use diag_core::protocol::{InvocationStatus, ToolInvocation, Verdict};
use diag_core::store::{RunRow, RunStatus};
use diag_report::markdown::gfm_options;
use diag_report::view::stored_derivations;
use diag_report::{render, terminal, Format, RunData};

const ANSWER: &str = "Checkout failed for 96 % [d1] of requests [c6]; the client gives up \
                      after 5 s [d2] [c3], and [d9] names nothing.";

/// A percentage over two claims (`c4` has no card) and a unit conversion over one.
fn two_derivations() -> Value {
    json!([
        {"id": "d1", "op": "percentage", "result": "96 %", "expression": "48 / 50 × 100",
         "claims": ["c6", "c4"], "arithmetic": "48 / 50 × 100 (c6, c4)"},
        {"id": "d2", "op": "convert_unit", "result": "5 s", "expression": "5000 ms in s",
         "claims": ["c3"], "arithmetic": "5000 ms in s (c3)"},
    ])
}

/// A stored run whose Composer audit holds `derivations` (left out when `None`), with cards
/// for claims `c6` and `c3`.
fn run(answer: &str, derivations: Option<Value>) -> RunData {
    let mut audit =
        json!({"status": "COMPLETED", "answer_tokens_checked": 6, "answer_tokens_unbound": 0});
    if let Some(d) = derivations {
        audit["derivations"] = d;
    }
    let binding = |claim: &str, at: usize, quote: &str| {
        json!({"claim_id": claim, "source_invocation_id": "inv-1", "tool_name": "search_logs",
               "raw_path": format!("/matches/{at}/line"), "passed": true, "matched_text": quote})
    };
    let t0 = Timestamp::from_unix_ms(1_764_511_200_000);
    RunData {
        run: RunRow {
            run_id: "run-derivations".into(),
            session_id: "ses-1".into(),
            question: "why does checkout fail since 14:00?".into(),
            status: RunStatus::Success,
            failure: None,
            answer: Some(answer.into()),
            started_at: t0,
            finished_at: Some(t0),
            duration_ms: Some(0),
            prompt_tokens: 0,
            completion_tokens: 0,
            step_count: 0,
            tool_count: 1,
            degraded: false,
            effective_verdict: Some(Verdict::Pass),
            fallback_kind: None,
            path: Vec::new(),
            self_evaluation: Some(json!({"verifier_evaluation": {
                "round": 1, "gatekeeper_status": "PASS", "verifier_status": "COMPLETED",
                "model_verdict": "PASS", "effective_verdict": "PASS", "ceiling": "PASS",
                "gatekeeper_raw": {"result": "pass", "checked_bindings": [
                    binding("c6", 0, "48 of 50 requests failed"),
                    binding("c3", 1, "timeout 5000 ms"),
                ]},
                "verified_executor_output": {"claims": [
                    {"claim_id": "c6", "text": "48 of 50 checkout requests failed"},
                    {"claim_id": "c3", "text": "the client timeout is 5000 ms"},
                ]},
                "composer_audit": audit,
            }})),
            tools: Vec::new(),
            limits: None,
            owner_pid: 0,
            created_at: t0,
            resumed_from: None,
            replay_of: None,
            reuse: None,
        },
        events: Vec::new(),
        model_calls: Vec::new(),
        invocations: vec![ToolInvocation {
            run_id: "run-derivations".into(),
            session_id: "ses-1".into(),
            invocation_id: "inv-1".into(),
            agent: "executor".into(),
            round: 1,
            tool_name: "search_logs".into(),
            arguments: json!({"query": "checkout"}),
            output: json!({"matches": [
                {"line": "14:00:01 checkout: 48 of 50 requests failed"},
                {"line": "client config: timeout 5000 ms"},
            ]}),
            status: InvocationStatus::Ok,
            duration_ms: 0,
        }],
        alerts: None,
    }
}

fn shape() -> GraphShape {
    diag_diagnosis::topology::shape()
        .expect("the topology compiles")
        .shape()
}

/// `diag trace`'s computed-values block for a stored run, read as `diag trace` reads it.
fn trace_block(data: &RunData) -> String {
    let audit = data
        .run
        .self_evaluation
        .as_ref()
        .and_then(|v| v.pointer("/verifier_evaluation/composer_audit"));
    let stored = stored_derivations(audit);
    terminal::derivations(&stored.shown, stored.left_out)
}

/// The text from `start` up to (not including) `end`.
#[track_caller]
fn between<'t>(text: &'t str, start: &str, end: &str) -> &'t str {
    let from = text
        .find(start)
        .unwrap_or_else(|| panic!("no {start:?} in\n{text}"));
    let to = text[from..]
        .find(end)
        .unwrap_or_else(|| panic!("no {end:?} after {start:?} in\n{text}"));
    &text[from..from + to]
}

#[test]
fn the_html_report_lists_the_computed_values_under_the_answer_with_claim_links() {
    let data = run(ANSWER, Some(two_derivations()));
    let html = render(Format::Html, &data, &shape());
    let section = between(
        &html,
        "<section id=\"sec-derivations\">",
        "<section id=\"sec-claims\">",
    );
    assert_eq!(
        section.lines().collect::<Vec<_>>(),
        [
            "<section id=\"sec-derivations\">",
            "<h2>Computed values</h2>",
            "<p class=\"muted\">Values the answer computes from observed ones, each with the \
             arithmetic diag checked exactly and, in parentheses, the claims whose evidence \
             shows its operands.</p>",
            "<ul>",
            "<li id=\"derivation-d1\"><span class=\"mono\">d1</span> <code>96 % = 48 / 50 × \
             100</code> (<a class=\"cite\" href=\"#claim-c6\">c6</a>, c4)</li>",
            "<li id=\"derivation-d2\"><span class=\"mono\">d2</span> <code>5 s = 5000 ms in \
             s</code> (<a class=\"cite\" href=\"#claim-c3\">c3</a>)</li>",
            "</ul>",
            "</section>",
        ]
    );
    // Directly under the answer, and in the table of contents after it.
    assert!(
        html.contains(&format!("</section>\n{section}<section id=\"sec-claims\">")),
        "{html}"
    );
    let answer = between(&html, "<section id=\"sec-answer\">", "</section>");
    assert!(answer.contains("of requests [<a class=\"cite\" href=\"#claim-c6\">c6</a>]"));
    assert!(
        answer.contains("96 % [<a class=\"cite\" href=\"#derivation-d1\">d1</a>]"),
        "{answer}"
    );
    assert!(answer.contains("5 s [<a class=\"cite\" href=\"#derivation-d2\">d2</a>]"));
    assert!(answer.contains(", and [d9] names nothing."), "{answer}");
    assert!(html.contains(
        "<a href=\"#sec-answer\">Answer</a><a href=\"#sec-derivations\">Computed values</a>\
         <a href=\"#sec-claims\">Claims</a>"
    ));
    // Every claim link has its card, every derivation link its entry.
    for target in ["claim-c6", "claim-c3", "derivation-d1", "derivation-d2"] {
        assert_eq!(
            html.matches(&format!("id=\"{target}\"")).count(),
            1,
            "{target}"
        );
    }
    assert!(!html.contains("href=\"#claim-c4\""));
    assert!(!html.contains("href=\"#derivation-d9\""));
}

#[test]
fn the_markdown_report_lists_the_computed_values_under_the_answer() {
    let data = run(ANSWER, Some(two_derivations()));
    let md = render(Format::Md, &data, &shape());
    let section = between(&md, "## Answer\n", "## Claims\n");
    assert_eq!(
        section,
        format!(
            "## Answer\n\n{ANSWER}\n\n## Computed values\n\n\
             - **d1**: 96 % = 48 / 50 × 100 (c6, c4)\n\
             - **d2**: 5 s = 5000 ms in s (c3)\n\n"
        )
    );
}

#[test]
fn trace_prints_the_computed_values_one_line_each() {
    let data = run(ANSWER, Some(two_derivations()));
    assert_eq!(
        trace_block(&data),
        "computed values\n  d1: 96 % = 48 / 50 × 100 (c6, c4)\n  d2: 5 s = 5000 ms in s (c3)\n"
    );
    assert_eq!(trace_block(&run(ANSWER, None)), "");
    assert_eq!(trace_block(&run(ANSWER, Some(json!([])))), "");
}

/// The Markdown report's lines from `## Computed values` to the next heading, each read back
/// by a CommonMark parser: (the text it shows, whether it holds HTML, an image or a link).
fn markdown_section_read_back(md: &str) -> (String, Vec<String>) {
    let section = between(md, "## Computed values\n", "## Claims\n");
    let mut text = String::new();
    let mut markup = Vec::new();
    for ev in Parser::new_ext(section, gfm_options()) {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::End(TagEnd::Item) | Event::End(TagEnd::Heading(_)) => text.push('\n'),
            Event::Html(h) | Event::InlineHtml(h) => markup.push(format!("html {h}")),
            Event::Start(Tag::Image { dest_url, .. }) => markup.push(format!("image {dest_url}")),
            Event::Start(Tag::Link { dest_url, .. }) => markup.push(format!("link {dest_url}")),
            Event::Start(Tag::Table(_)) => markup.push("table".into()),
            Event::Code(c) => markup.push(format!("code {c}")),
            _ => {}
        }
    }
    (text, markup)
}

#[test]
fn hostile_text_in_a_derivation_stays_text_everywhere() {
    let result = "<script>alert(1)</script> %";
    let expression = "[x](javascript:alert(1)) | `a` ![i](https://evil.example/i.png) \
                      <img src=x onerror=alert(1)> **b** \u{1b}[2J\nline";
    let hostile = json!([
        {"id": "d1", "op": "sum", "result": result, "expression": expression,
         "claims": ["c6", "c4"], "arithmetic": format!("{expression} (c6, c4)")},
        {"id": "d2\"><script>x</script>", "op": "sum", "result": "1", "expression": "1",
         "claims": ["c3"], "arithmetic": "1 (c3)"},
    ]);
    let data = run(ANSWER, Some(hostile));

    let html = render(Format::Html, &data, &shape());
    let section = between(
        &html,
        "<section id=\"sec-derivations\">",
        "<section id=\"sec-claims\">",
    );
    assert!(!html.contains("<script"), "{section}");
    assert!(!html.contains("<img"), "{section}");
    assert!(!html.contains("href=\"javascript"), "{section}");
    assert!(section.contains(
        "<li id=\"derivation-d1\"><span class=\"mono\">d1</span> <code>&lt;script&gt;alert(1)\
         &lt;/script&gt; % = [x](javascript:alert(1)) | `a` ![i](https://evil.example/i.png) \
         &lt;img src=x onerror=alert(1)&gt; **b** \u{FFFD}[2J\nline</code> (<a class=\"cite\" \
         href=\"#claim-c6\">c6</a>, c4)</li>"
    ));
    // An id not in the derivation-id format is shown, escaped, with no anchor.
    assert!(section.contains(
        "<li><span class=\"mono\">d2&quot;&gt;&lt;script&gt;x&lt;/script&gt;</span> <code>1 = \
         1</code> (<a class=\"cite\" href=\"#claim-c3\">c3</a>)</li>"
    ));
    assert!(!html.contains("href=\"#derivation-d2"));

    let md = render(Format::Md, &data, &shape());
    let (text, markup) = markdown_section_read_back(&md);
    assert_eq!(markup, Vec::<String>::new(), "{md}");
    let one_line = expression.replace(['\u{1b}', '\n'], " ");
    assert_eq!(
        text,
        format!(
            "Computed values\nd1: {result} = {one_line} (c6, c4)\n\
             d2\"><script>x</script>: 1 = 1 (c3)\n"
        )
    );

    let trace = trace_block(&data);
    assert_eq!(trace.lines().count(), 3, "one line per value: {trace}");
    assert!(!trace.contains('\u{1b}'), "{trace}");
    assert!(trace.contains(&format!("  d1: {result} = [x](javascript:alert(1)) | `a`")));
}

#[test]
fn the_same_run_renders_byte_identically() {
    let data = run(ANSWER, Some(two_derivations()));
    let shape = shape();
    for format in [Format::Html, Format::Md] {
        assert_eq!(render(format, &data, &shape), render(format, &data, &shape));
    }
    assert_eq!(trace_block(&data), trace_block(&data.clone()));
}

#[test]
fn a_run_without_derivations_renders_as_before_they_existed() {
    let shape = shape();
    let without = run(ANSWER, None);
    for format in [Format::Html, Format::Md] {
        let plain = render(format, &without, &shape);
        assert!(!plain.contains("Computed values"), "{plain}");
        assert!(!plain.contains("derivation-"), "{plain}");
        // An empty list, or one this version cannot read at all, is no list.
        for empty in [json!([]), json!({"d1": "x"}), json!("d1")] {
            assert_eq!(render(format, &run(ANSWER, Some(empty)), &shape), plain);
        }
    }
    // With derivations, the page differs only by their section, its entry in the table of
    // contents and the links of the answer's markers to them.
    let html = render(Format::Html, &run(ANSWER, Some(two_derivations())), &shape);
    let section = between(
        &html,
        "<section id=\"sec-derivations\">",
        "<section id=\"sec-claims\">",
    );
    let back = html
        .replacen(section, "", 1)
        .replacen("<a href=\"#sec-derivations\">Computed values</a>", "", 1)
        .replace("<a class=\"cite\" href=\"#derivation-d1\">d1</a>", "d1")
        .replace("<a class=\"cite\" href=\"#derivation-d2\">d2</a>", "d2");
    assert_eq!(back, render(Format::Html, &without, &shape));
    let md = render(Format::Md, &run(ANSWER, Some(two_derivations())), &shape);
    let section = between(&md, "## Computed values\n", "## Claims\n");
    assert_eq!(
        md.replacen(section, "", 1),
        render(Format::Md, &without, &shape)
    );
}

#[test]
fn malformed_entries_are_counted_not_shown() {
    let stored = json!([
        {"id": "d1", "op": "percentage", "result": "96 %", "expression": "48 / 50 × 100",
         "claims": ["c6", "c4"], "arithmetic": "48 / 50 × 100 (c6, c4)"},
        {"id": "d2", "result": 5},
        "d3",
        {"id": "d4", "result": "7", "arithmetic": "3 + 4"},
    ]);
    let data = run(ANSWER, Some(stored));
    let html = render(Format::Html, &data, &shape());
    let section = between(
        &html,
        "<section id=\"sec-derivations\">",
        "<section id=\"sec-claims\">",
    );
    // An arithmetic without its claims' list is shown whole, with no claim.
    assert!(section.contains(
        "<li id=\"derivation-d4\"><span class=\"mono\">d4</span> <code>7 = 3 + 4</code></li>"
    ));
    assert!(section.contains("<p class=\"muted\">2 more stored computed value(s) not shown.</p>"));
    let md = render(Format::Md, &data, &shape());
    assert!(md.contains(
        "## Computed values\n\n- **d1**: 96 % = 48 / 50 × 100 (c6, c4)\n- **d4**: 7 = 3 + 4\n\n\
         2 more stored computed value(s) not shown.\n\n## Claims\n"
    ));
    assert_eq!(
        trace_block(&data),
        "computed values\n  d1: 96 % = 48 / 50 × 100 (c6, c4)\n  d4: 7 = 3 + 4\n  \
         (2 more stored computed value(s) not shown)\n"
    );
}

#[test]
fn a_value_stored_without_its_parts_is_shown_by_its_arithmetic_unlinked() {
    // As the version that first stored computed values wrote them: no `expression`, no
    // `claims`. The claim ids stay readable in the arithmetic but nothing is parsed back
    // out of it, so no link is made; a mistyped `claims` reads the same way.
    let stored = json!([
        {"id": "d1", "op": "percentage", "result": "96 %", "arithmetic": "48 / 50 × 100 (c6, c4)"},
        {"id": "d2", "op": "convert_unit", "result": "5 s", "expression": "5000 ms in s",
         "claims": "c3", "arithmetic": "5000 ms in s (c3)"},
    ]);
    let data = run(ANSWER, Some(stored));
    let html = render(Format::Html, &data, &shape());
    let section = between(
        &html,
        "<section id=\"sec-derivations\">",
        "<section id=\"sec-claims\">",
    );
    assert!(section.contains(
        "<li id=\"derivation-d1\"><span class=\"mono\">d1</span> \
         <code>96 % = 48 / 50 × 100 (c6, c4)</code></li>"
    ));
    assert!(section.contains(
        "<li id=\"derivation-d2\"><span class=\"mono\">d2</span> \
         <code>5 s = 5000 ms in s (c3)</code></li>"
    ));
    assert!(!section.contains("href=\"#claim-"), "{section}");
    assert_eq!(
        trace_block(&data),
        "computed values\n  d1: 96 % = 48 / 50 × 100 (c6, c4)\n  d2: 5 s = 5000 ms in s (c3)\n"
    );
}
