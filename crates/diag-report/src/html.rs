//! The HTML report: one self-contained file, inline CSS and SVG only, no script, no request.

use std::fmt::Write as _;

use pulldown_cmark::{CodeBlockKind, CowStr, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

use super::timeline::{self, RowKind};
use super::view::{self, bounded, citations, ClaimView, DerivationView, View};
use super::{escape_html as esc, human_ms, safe_link, svg, RunData};
use diag_core::graph::GraphShape;

/// The page's Content-Security-Policy: nothing may load or run; inline style only.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
                       base-uri 'none'; form-action 'none'";

/// Characters of all tool outputs shown together, shared out evenly between the calls.
const TOOL_BUDGET: usize = 400_000;
/// At most this many characters of one tool output or of its arguments.
const TOOL_MAX: usize = 6_000;
const ARGS_MAX: usize = 1_500;

const STYLE: &str = "
:root{--fg:#1d232b;--muted:#5b6673;--line:#d8dee5;--bg:#fff;--soft:#f5f7f9;--ok:#1f7a3a;--okbg:#e3f4e8;--warn:#8a5a00;--warnbg:#fdf1d6;--fail:#a3262a;--failbg:#fbe3e3;--accent:#2457a6}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1060px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:24px;margin:0 0 10px;line-height:1.3}
h2{font-size:19px;margin:36px 0 12px;padding-bottom:4px;border-bottom:1px solid var(--line)}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px}
pre{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:10px;overflow:auto;white-space:pre-wrap;word-break:break-word}
table{border-collapse:collapse;margin:8px 0}
th,td{border:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{background:var(--soft)}
a{color:var(--accent)}
.header{border:1px solid var(--line);border-radius:8px;padding:16px 20px;background:var(--soft)}
.facts{display:flex;flex-wrap:wrap;gap:8px 22px;margin:10px 0 0;padding:0}
.facts div{min-width:90px}.facts dt{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}.facts dd{margin:0;font-weight:600}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;border:1px solid transparent}
.b-ok{background:var(--okbg);color:var(--ok);border-color:#b6dfc2}.b-warn{background:var(--warnbg);color:var(--warn);border-color:#f0d595}.b-fail{background:var(--failbg);color:var(--fail);border-color:#efb9b9}.b-none{background:#eef1f4;color:var(--muted)}
nav.toc{margin:14px 0 0;font-size:14px}nav.toc a{margin-right:14px}
.answer{border-left:4px solid var(--accent);padding:2px 18px;background:#fbfcfe}
.answer h3,.answer h4,.answer h5,.answer h6{margin:18px 0 6px}
a.cite{font-weight:600;text-decoration:none;background:#e8eefa;border-radius:4px;padding:0 3px}
.claim{border:1px solid var(--line);border-radius:8px;padding:12px 16px;margin:12px 0;background:#fff}
.claim.refused{background:#fffafa;border-color:#efc9c9}
.claim:target{outline:3px solid var(--accent);outline-offset:2px}
.claim h3{margin:0 0 6px;font-size:16px}
.claim .text{margin:4px 0 8px}
.binding{border-top:1px dashed var(--line);padding:8px 0 2px}
.quote{background:var(--soft);border-radius:6px;padding:8px 10px;margin:6px 0;white-space:pre-wrap;word-break:break-word}
mark{background:#ffe28a;color:inherit;padding:0 1px;border-radius:2px}
.cut{color:var(--muted);font-style:italic}
.muted{color:var(--muted)}
details.tool{border:1px solid var(--line);border-radius:6px;margin:6px 0;padding:4px 10px}
details.tool:target{outline:3px solid var(--accent)}
details.tool summary{cursor:pointer}
svg{max-width:100%;height:auto;display:block;margin:8px 0}
svg text{font:12px system-ui,-apple-system,'Segoe UI',Roboto,Arial,sans-serif;fill:#1d232b}
svg .tick{fill:#5b6673;text-anchor:middle}svg .axis{fill:#5b6673}
svg .grid{stroke:#e6eaee;stroke-width:1}
svg .row rect{stroke-width:1}
svg .node rect{fill:#9db4d6;stroke:#6c87b0}svg .model rect{fill:#2457a6;stroke:#1b427f}svg .tool rect{fill:#2f8f57;stroke:#226a40}
svg .tool.parallel rect{fill:#a9d8bb;stroke:#6fb38b}
svg .warn rect{fill:#e0a92e;stroke:#a97a10}svg .fail rect{fill:#c9474b;stroke:#962c30}
svg .status{fill:#5b6673;font-size:11px}
svg .model .label,svg .tool .label{fill:#3a4450}
svg .edge{fill:none;stroke:#b7c0ca;stroke-width:1.3}
svg .edge.taken{stroke:#2457a6;stroke-width:2.6}
svg .arrowhead{fill:#b7c0ca}svg .arrowhead.taken{fill:#2457a6}
svg .gnode rect,svg .gnode circle{fill:#f5f7f9;stroke:#aab4bf;stroke-width:1.3}
svg .gnode text{text-anchor:middle;fill:#5b6673}svg .terminal text{font-size:10px}
svg .gnode.visited rect,svg .gnode.visited circle{fill:#e8eefa;stroke:#2457a6;stroke-width:2.4}
svg .gnode.visited text{fill:#1d232b;font-weight:600}
.legend span{display:inline-block;margin-right:14px;font-size:13px;color:var(--muted)}
.legend i{display:inline-block;width:14px;height:10px;margin-right:5px;border-radius:2px;vertical-align:middle}
footer{margin-top:40px;font-size:12px;color:var(--muted)}
";

fn verdict_class(v: Option<&str>) -> &'static str {
    match v {
        Some("PASS") | Some("SUCCESS") => "b-ok",
        Some("LOW_CONFID") | Some("RUNNING") => "b-warn",
        Some(_) => "b-fail",
        None => "b-none",
    }
}

fn badge(text: &str, class: &str) -> String {
    format!("<span class=\"badge {class}\">{}</span>", esc(text))
}

/// The whole page.
pub fn render(data: &RunData, shape: &GraphShape) -> String {
    let view = view::build(data);
    let run = &data.run;
    let mut o = String::with_capacity(64 * 1024);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"referrer\" content=\"no-referrer\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"diag {}\">\n\
         <link rel=\"icon\" href=\"data:,\">\n\
         <title>diag: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n",
        env!("CARGO_PKG_VERSION"),
        esc(&bounded(
            &crate::terminal::one_line(&run.question, 200),
            200
        ))
    );
    header(&mut o, data, &view);
    alert(&mut o, data);
    answer(&mut o, data, &view);
    derivations(&mut o, &view);
    claims(&mut o, &view);
    grounding(&mut o, &view);
    let tl = timeline::layout(data);
    o.push_str("<section id=\"sec-timeline\">\n<h2>Timeline</h2>\n");
    let _ = writeln!(
        o,
        "<p class=\"muted\">One row per node attempt, model call and tool call. {}</p>",
        if tl.steps {
            "No durations were recorded (a replay runs on a pinned clock), so the axis counts \
             steps: each model call, each turn's tool calls and each deterministic node take one."
        } else {
            "Model and tool calls are placed by the run's structure: a node's model calls one \
             after the other, a turn's tool calls side by side after its model call."
        }
    );
    o.push_str(
        "<p class=\"legend\"><span><i style=\"background:#9db4d6\"></i>node</span>\
         <span><i style=\"background:#2457a6\"></i>model call</span>\
         <span><i style=\"background:#2f8f57\"></i>tool call on the critical path</span>\
         <span><i style=\"background:#a9d8bb\"></i>tool call beside a slower one</span>\
         <span><i style=\"background:#e0a92e\"></i>retry or blocked</span>\
         <span><i style=\"background:#c9474b\"></i>failed</span></p>\n",
    );
    o.push_str(&svg::timeline(&tl));
    o.push_str("\n</section>\n");
    o.push_str("<section id=\"sec-graph\">\n<h2>Diagnosis graph</h2>\n");
    let path: Vec<String> = data
        .events
        .iter()
        .map(|e| format!("{} ({})", esc(&e.node), esc(&e.status)))
        .collect();
    let _ = writeln!(
        o,
        "<p class=\"muted\">The compiled topology, drawn by diag; this run's path is \
         highlighted (rounded boxes call a model, square ones are deterministic).</p>\n\
         <p class=\"mono\">{}</p>",
        if path.is_empty() {
            "no node ran".to_string()
        } else {
            path.join(" → ")
        }
    );
    o.push_str(&svg::graph(shape, data));
    o.push_str("\n</section>\n");
    tools(&mut o, data, &tl);
    let _ = write!(
        o,
        "<footer>Generated by diag {} from the stored run <span class=\"mono\">{}</span>. \
         This file loads nothing and runs no script.</footer>\n</main>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION"),
        esc(&run.run_id)
    );
    o
}

fn header(o: &mut String, data: &RunData, view: &View) {
    let run = &data.run;
    let verdict = run.effective_verdict.map(|v| v.as_str());
    let _ = write!(
        o,
        "<header class=\"header\">\n<h1>{}</h1>\n<dl class=\"facts\">",
        esc(&run.question)
    );
    let mut fact = |label: &str, value: String| {
        let _ = write!(o, "<div><dt>{label}</dt><dd>{value}</dd></div>");
    };
    fact(
        "status",
        badge(
            run.status.as_str(),
            verdict_class(Some(run.status.as_str())),
        ),
    );
    fact(
        "verdict",
        badge(verdict.unwrap_or("none"), verdict_class(verdict)),
    );
    fact(
        "degraded",
        if run.degraded {
            badge(
                &format!(
                    "yes: {} fallback",
                    run.fallback_kind
                        .map_or("a", |k| k.as_str())
                        .replace('_', "-")
                ),
                "b-warn",
            )
        } else {
            badge("no", "b-ok")
        },
    );
    fact(
        "duration",
        esc(&run.duration_ms.map_or("unknown".into(), human_ms)),
    );
    fact("started", esc(&run.started_at.to_string()));
    fact(
        "model calls",
        format!(
            "{} <span class=\"muted\">({} + {} tokens)</span>",
            run.step_count, run.prompt_tokens, run.completion_tokens
        ),
    );
    fact("tool calls", run.tool_count.to_string());
    fact(
        "run",
        format!("<span class=\"mono\">{}</span>", esc(&run.run_id)),
    );
    fact(
        "session",
        format!("<span class=\"mono\">{}</span>", esc(&run.session_id)),
    );
    o.push_str("</dl>\n");
    if let Some(f) = &run.failure {
        let _ = writeln!(
            o,
            "<p><strong>Failure:</strong> {}</p>",
            esc(&bounded(f, 400))
        );
    }
    if let Some(c) = &view.fallback_context {
        let _ = writeln!(
            o,
            "<p class=\"muted\">The Fallback answered after <span class=\"mono\">{}</span>.</p>",
            esc(c)
        );
    }
    o.push_str("<nav class=\"toc\"><a href=\"#sec-answer\">Answer</a>");
    if has_derivations(view) {
        o.push_str("<a href=\"#sec-derivations\">Computed values</a>");
    }
    o.push_str(
        "<a href=\"#sec-claims\">Claims</a>\
         <a href=\"#sec-grounding\">Grounding</a><a href=\"#sec-timeline\">Timeline</a>\
         <a href=\"#sec-graph\">Graph</a><a href=\"#sec-tools\">Tool calls</a></nav>\n</header>\n",
    );
}

/// The alert group the run investigated.
fn alert(o: &mut String, data: &RunData) {
    let Some(a) = &data.alerts else { return };
    let _ = writeln!(
        o,
        "<section id=\"sec-alert\">\n<h2>Alert</h2>\n<p>From Alertmanager's {} · group \
         <span class=\"mono\">{}</span> · {} alert(s)</p>",
        match a.source {
            diag_core::store::alerts::AlertSource::Api => "API",
            diag_core::store::alerts::AlertSource::Webhook => "webhook",
        },
        esc(&bounded(&a.group.group_key, 200)),
        a.group.alerts.len()
    );
    o.push_str(
        "<table>\n<tr><th>alert</th><th>status</th><th>starts at</th><th>fingerprint</th>\
         <th>labels</th></tr>\n",
    );
    for x in a.group.alerts.iter().take(50) {
        let labels: Vec<String> = x.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td>\
             <td>{}</td></tr>",
            esc(&bounded(x.name(), 120)),
            x.status.as_str(),
            x.starts_at,
            esc(&bounded(&x.fingerprint, 40)),
            esc(&bounded(&labels.join(", "), 400))
        );
    }
    o.push_str("</table>\n");
    if a.group.alerts.len() > 50 {
        let _ = writeln!(o, "<p>… and {} more.</p>", a.group.alerts.len() - 50);
    }
    if let Some(summary) = a
        .group
        .alerts
        .first()
        .and_then(|x| x.annotations.get("summary"))
    {
        let _ = writeln!(o, "<p>Summary: {}</p>", esc(&bounded(summary, 400)));
    }
    o.push_str("</section>\n");
}

fn answer(o: &mut String, data: &RunData, view: &View) {
    o.push_str("<section id=\"sec-answer\">\n<h2>Answer</h2>\n");
    match data.run.answer.as_deref().filter(|a| !a.trim().is_empty()) {
        Some(a) => {
            let anchors: Vec<&str> = view
                .claims
                .iter()
                .filter_map(|c| c.anchor.as_deref())
                .collect();
            let derivations: Vec<&str> = view
                .derivations
                .iter()
                .filter_map(|d| d.anchor.as_deref())
                .collect();
            o.push_str("<div class=\"answer\">\n");
            o.push_str(&answer_to_html(a, &anchors, &derivations));
            o.push_str("</div>\n");
        }
        None => o.push_str("<p class=\"muted\">The run has no answer.</p>\n"),
    }
    o.push_str("</section>\n");
}

/// Whether the page has a "Computed values" section: the answer has derivations.
fn has_derivations(view: &View) -> bool {
    !view.derivations.is_empty() || view.derivations_left_out > 0
}

/// The answer's computed values, right under it: each value's id, its result and arithmetic,
/// then the claims its operands are observed in, each linked to its card when the page has one.
fn derivations(o: &mut String, view: &View) {
    if !has_derivations(view) {
        return;
    }
    o.push_str(
        "<section id=\"sec-derivations\">\n<h2>Computed values</h2>\n<p class=\"muted\">Values \
         the answer computes from observed ones, each with the arithmetic diag checked exactly \
         and, in parentheses, the claims whose evidence shows its operands.</p>\n",
    );
    if !view.derivations.is_empty() {
        o.push_str("<ul>\n");
        for d in &view.derivations {
            derivation_item(o, d);
        }
        o.push_str("</ul>\n");
    }
    if view.derivations_left_out > 0 {
        let _ = writeln!(
            o,
            "<p class=\"muted\">{} more stored computed value(s) not shown.</p>",
            view.derivations_left_out
        );
    }
    o.push_str("</section>\n");
}

fn derivation_item(o: &mut String, d: &DerivationView) {
    let id_attr = d
        .anchor
        .as_deref()
        .map(|a| format!(" id=\"derivation-{}\"", esc(a)))
        .unwrap_or_default();
    let _ = write!(
        o,
        "<li{id_attr}><span class=\"mono\">{}</span> <code>{} = {}</code>",
        esc(&d.id),
        esc(&d.result),
        esc(&d.expression)
    );
    if !d.claims.is_empty() {
        let claims: Vec<String> = d
            .claims
            .iter()
            .map(|c| match &c.anchor {
                Some(a) => format!("<a class=\"cite\" href=\"#claim-{0}\">{0}</a>", esc(a)),
                None => esc(&c.claim_id),
            })
            .collect();
        let _ = write!(o, " ({})", claims.join(", "));
    }
    o.push_str("</li>\n");
}

/// Renders untrusted Markdown as HTML: raw HTML becomes text, images become text naming
/// their address, links stay links only for safe targets, headings move down one level
/// (the page's own sections are `h2`), and `[cN]` citations of known claims link to their
/// cards (`#claim-cN`).
pub fn markdown_to_html(text: &str, anchors: &[&str]) -> String {
    answer_to_html(text, anchors, &[])
}

/// [`markdown_to_html`] for an answer with computed values: a marker's id that names no
/// claim card but one of `derivations` links to that value (`#derivation-dN`).
pub fn answer_to_html(text: &str, anchors: &[&str], derivations: &[&str]) -> String {
    let targets = Targets {
        claims: anchors,
        derivations,
    };
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    options.insert(Options::ENABLE_TASKLISTS);
    let mut events: Vec<Event<'_>> = Vec::new();
    let mut links: Vec<bool> = Vec::new();
    let mut pending = String::new();
    let flush = |pending: &mut String, events: &mut Vec<Event<'_>>| {
        if !pending.is_empty() {
            cite(std::mem::take(pending), &targets, events);
        }
    };
    for ev in Parser::new_ext(text, options) {
        match ev {
            Event::Text(t) => {
                pending.push_str(&t);
                continue;
            }
            Event::Html(h) | Event::InlineHtml(h) => {
                // Shown as the text it is.
                pending.push_str(&h);
                continue;
            }
            _ => {}
        }
        flush(&mut pending, &mut events);
        match ev {
            Event::Start(Tag::HtmlBlock) => events.push(Event::Start(Tag::Paragraph)),
            Event::End(TagEnd::HtmlBlock) => events.push(Event::End(TagEnd::Paragraph)),
            Event::Start(Tag::Image { dest_url, .. }) => {
                events.push(Event::Html(CowStr::from(format!(
                    "<span class=\"cut\">[image not loaded: {}] </span>",
                    esc(&bounded(&dest_url, 200))
                ))));
            }
            Event::End(TagEnd::Image) => {}
            Event::Start(Tag::Link { dest_url, .. }) => {
                let safe = safe_link(&dest_url);
                links.push(safe);
                if safe {
                    events.push(Event::Html(CowStr::from(format!(
                        "<a href=\"{}\" rel=\"noopener noreferrer nofollow\">",
                        esc(dest_url.trim())
                    ))));
                }
            }
            Event::End(TagEnd::Link) => {
                if links.pop().unwrap_or(false) {
                    events.push(Event::Html(CowStr::from("</a>")));
                }
            }
            Event::Start(Tag::Heading { level, .. }) => events.push(Event::Start(Tag::Heading {
                level: lower(level),
                id: None,
                classes: Vec::new(),
                attrs: Vec::new(),
            })),
            Event::End(TagEnd::Heading(level)) => {
                events.push(Event::End(TagEnd::Heading(lower(level))))
            }
            // A fence's info string would become a class name: untrusted, and of no use here.
            Event::Start(Tag::CodeBlock(_)) => events.push(Event::Start(Tag::CodeBlock(
                CodeBlockKind::Fenced(CowStr::from("")),
            ))),
            Event::FootnoteReference(_) | Event::InlineMath(_) | Event::DisplayMath(_) => {}
            other => events.push(other),
        }
    }
    flush(&mut pending, &mut events);
    let mut out = String::new();
    pulldown_cmark::html::push_html(&mut out, events.into_iter());
    out
}

fn lower(level: HeadingLevel) -> HeadingLevel {
    match level {
        HeadingLevel::H1 | HeadingLevel::H2 => HeadingLevel::H3,
        HeadingLevel::H3 => HeadingLevel::H4,
        HeadingLevel::H4 => HeadingLevel::H5,
        HeadingLevel::H5 | HeadingLevel::H6 => HeadingLevel::H6,
    }
}

/// What an answer's citation markers may link to: claim cards, then computed values.
struct Targets<'t> {
    claims: &'t [&'t str],
    derivations: &'t [&'t str],
}

impl Targets<'_> {
    /// The fragment an id links to: its claim card, else its computed value.
    fn href(&self, id: &str) -> Option<String> {
        if self.claims.contains(&id) {
            Some(format!("#claim-{id}"))
        } else if self.derivations.contains(&id) {
            Some(format!("#derivation-{id}"))
        } else {
            None
        }
    }
}

/// Text with its citation markers turned into links to the claim cards and computed values
/// that exist.
fn cite<'a>(text: String, targets: &Targets<'_>, events: &mut Vec<Event<'a>>) {
    let mut at = 0;
    for (range, ids) in citations(&text) {
        if !ids.iter().any(|id| targets.href(id).is_some()) {
            continue;
        }
        if range.start > at {
            events.push(Event::Text(CowStr::from(text[at..range.start].to_string())));
        }
        let links: Vec<String> = ids
            .iter()
            .map(|id| match targets.href(id) {
                Some(href) => format!("<a class=\"cite\" href=\"{}\">{}</a>", esc(&href), esc(id)),
                None => esc(id),
            })
            .collect();
        events.push(Event::Html(CowStr::from(format!("[{}]", links.join(", ")))));
        at = range.end;
    }
    if at < text.len() {
        events.push(Event::Text(CowStr::from(text[at..].to_string())));
    }
}

fn claims(o: &mut String, view: &View) {
    o.push_str("<section id=\"sec-claims\">\n<h2>Claims</h2>\n");
    if view.claims.is_empty() {
        o.push_str(
            "<p class=\"muted\">The Executor made no claim that reached the Gatekeeper.</p>\n",
        );
    }
    let verified = view.claims.iter().filter(|c| c.verified).count();
    if !view.claims.is_empty() {
        let _ = writeln!(
            o,
            "<p class=\"muted\">{} claim(s): {} verified, {} refused. Each binding points at \
             a recorded tool output; the highlighted text is what the Gatekeeper matched, cut \
             from that output.</p>",
            view.claims.len(),
            verified,
            view.claims.len() - verified
        );
    }
    for c in &view.claims {
        claim_card(o, c);
    }
    o.push_str("</section>\n");
}

fn claim_card(o: &mut String, c: &ClaimView) {
    let id_attr = c
        .anchor
        .as_deref()
        .map(|a| format!(" id=\"claim-{}\"", esc(a)))
        .unwrap_or_default();
    let class = if c.verified { "claim" } else { "claim refused" };
    let _ = write!(
        o,
        "<article class=\"{class}\"{id_attr}>\n<h3><span class=\"mono\">{}</span> ",
        esc(&c.claim_id)
    );
    if c.verified {
        o.push_str(&badge("verified", "b-ok"));
    } else {
        o.push_str(&badge("refused", "b-fail"));
    }
    match c.supported {
        Some(true) => o.push_str(&format!(" {}", badge("verifier: supported", "b-ok"))),
        Some(false) => o.push_str(&format!(" {}", badge("verifier: not supported", "b-warn"))),
        None => {}
    }
    if c.cited {
        o.push_str(&format!(" {}", badge("cited in the answer", "b-none")));
    }
    o.push_str("</h3>\n");
    match &c.text {
        Some(t) => {
            let _ = writeln!(o, "<p class=\"text\">{}</p>", esc(t));
        }
        None => o.push_str(
            "<p class=\"text muted\">Its text is not shown: a refused claim never reaches the \
             Verifier or the answer.</p>\n",
        ),
    }
    if !c.refusals.is_empty() {
        let codes: Vec<String> = c
            .refusals
            .iter()
            .map(|r| format!("<code>{}</code>", esc(r)))
            .collect();
        let _ = writeln!(o, "<p><strong>Refused:</strong> {}</p>", codes.join(", "));
    }
    for b in &c.bindings {
        o.push_str("<div class=\"binding\">");
        let inv = if b.invocation_known && view::is_invocation_id(&b.invocation_id) {
            format!(
                "<a href=\"#{0}\" class=\"mono\">{0}</a>",
                esc(&b.invocation_id)
            )
        } else {
            format!("<span class=\"mono\">{}</span>", esc(&b.invocation_id))
        };
        let _ = write!(
            o,
            "{} {} <code>{}</code> at <code>{}</code>",
            if b.passed {
                badge("passed", "b-ok")
            } else {
                badge("failed", "b-fail")
            },
            inv,
            esc(&b.tool_name),
            esc(&b.raw_path)
        );
        if let Some(f) = &b.failure {
            let _ = write!(o, " — <code>{}</code>", esc(f));
        }
        for (k, v) in &b.extra {
            let _ = write!(o, " · {}: <code>{}</code>", esc(k), esc(v));
        }
        match (&b.excerpt, &b.matched_text) {
            (Some(x), _) => {
                let _ = write!(
                    o,
                    "<div class=\"quote\">{}{}<mark>{}</mark>{}{}</div>",
                    if x.cut_before > 0 {
                        format!(
                            "<span class=\"cut\">[{} characters cut] </span>…",
                            x.cut_before
                        )
                    } else {
                        String::new()
                    },
                    esc(&x.before),
                    esc(&x.quote),
                    esc(&x.after),
                    if x.cut_after > 0 {
                        format!(
                            "…<span class=\"cut\"> [{} characters cut]</span>",
                            x.cut_after
                        )
                    } else {
                        String::new()
                    },
                );
            }
            (None, Some(m)) => {
                let _ = write!(o, "<div class=\"quote\"><mark>{}</mark></div>", esc(m));
            }
            (None, None) => {}
        }
        o.push_str("</div>\n");
    }
    for (fact, verification, critical) in &c.facts {
        let _ = writeln!(
            o,
            "<p class=\"muted\">Verifier fact{}: {} — <code>{}</code></p>",
            if *critical { " (critical)" } else { "" },
            esc(fact),
            esc(verification)
        );
    }
    o.push_str("</article>\n");
}

fn grounding(o: &mut String, view: &View) {
    o.push_str("<section id=\"sec-grounding\">\n<h2>Grounding</h2>\n<table>\n");
    for (k, v) in &view.grounding {
        let _ = writeln!(o, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    }
    o.push_str("</table>\n");
    if !view.facts.is_empty() {
        o.push_str(
            "<h3>Verifier facts</h3>\n<table>\n<tr><th>fact</th><th>verification</th>\
             <th>critical</th><th>claims</th></tr>\n",
        );
        for f in &view.facts {
            let claims: Vec<String> = f
                .claim_ids
                .iter()
                .map(|id| {
                    if view
                        .claims
                        .iter()
                        .any(|c| c.anchor.as_deref() == Some(id.as_str()))
                    {
                        format!("<a class=\"cite\" href=\"#claim-{0}\">{0}</a>", esc(id))
                    } else {
                        esc(id)
                    }
                })
                .collect();
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(&f.fact),
                esc(&f.verification),
                if f.is_critical { "yes" } else { "no" },
                claims.join(", ")
            );
        }
        o.push_str("</table>\n");
    }
    if let Some(r) = &view.rationale {
        let _ = writeln!(
            o,
            "<p><strong>Verifier's rationale:</strong> {}</p>",
            esc(r)
        );
    }
    o.push_str("</section>\n");
}

/// `text` cut to `max` characters, with a note of what was cut.
fn cut_note(text: &str, max: usize) -> (String, Option<String>) {
    let total = text.chars().count();
    if total <= max {
        return (text.to_string(), None);
    }
    let kept: String = text.chars().take(max).collect();
    (
        kept,
        Some(format!(
            "cut: {max} of {total} characters shown (diag export writes the whole run)"
        )),
    )
}

fn tools(o: &mut String, data: &RunData, tl: &timeline::Timeline) {
    o.push_str("<section id=\"sec-tools\">\n<h2>Tool calls</h2>\n");
    if data.invocations.is_empty() {
        o.push_str("<p class=\"muted\">No tool was called.</p>\n");
    }
    let per_call = (TOOL_BUDGET / data.invocations.len().max(1)).clamp(500, TOOL_MAX);
    for inv in &data.invocations {
        let id_attr = if view::is_invocation_id(&inv.invocation_id) {
            format!(" id=\"{}\"", esc(&inv.invocation_id))
        } else {
            String::new()
        };
        let parallel = tl
            .rows
            .iter()
            .find(|r| r.kind == RowKind::Tool && r.anchor.as_deref() == Some(&inv.invocation_id))
            .is_some_and(|r| !r.critical);
        let _ = write!(
            o,
            "<details class=\"tool\"{id_attr}><summary><span class=\"mono\">{}</span> \
             <code>{}</code> {} <span class=\"muted\">round {}, {} ms{}</span></summary>",
            esc(&bounded(&inv.invocation_id, 40)),
            esc(&bounded(&inv.tool_name, 80)),
            badge(
                inv.status.as_str(),
                match inv.status.as_str() {
                    "ok" => "b-ok",
                    "blocked" => "b-warn",
                    _ => "b-fail",
                }
            ),
            inv.round,
            inv.duration_ms,
            if parallel {
                ", beside a slower call"
            } else {
                ""
            }
        );
        o.push('\n');
        let args = serde_json::to_string_pretty(&inv.arguments).unwrap_or_default();
        let (args, args_note) = cut_note(&args, ARGS_MAX);
        let _ = write!(o, "<p>arguments</p><pre>{}</pre>", esc(&args));
        if let Some(n) = args_note {
            let _ = write!(o, "<p class=\"cut\">{}</p>", esc(&n));
        }
        let output = serde_json::to_string_pretty(&inv.output).unwrap_or_default();
        let (output, note) = cut_note(&output, per_call);
        let _ = write!(o, "<p>output</p><pre>{}</pre>", esc(&output));
        if let Some(n) = note {
            let _ = write!(o, "<p class=\"cut\">{}</p>", esc(&n));
        }
        o.push_str("</details>\n");
    }
    o.push_str("</section>\n");
}
