//! The Markdown report: GitHub-flavoured, for a ticket or a CI comment. The only raw HTML in
//! it is diag's own `<details>`/`<summary>` around evidence; everything a model or a tool wrote
//! is either escaped text or Markdown that was checked to contain no HTML, no image and no
//! link other than `http`, `https`, `mailto` or a fragment.

use std::fmt::Write as _;
use std::ops::Range;

use pulldown_cmark::{Event, Options, Parser, Tag};

use super::timeline::{self, RowKind};
use super::view::{self, bounded, ClaimView, View};
use super::{escape_html, human_ms, safe_link, RunData};

/// Parser options for reading Markdown as GitHub does (the parts that matter for safety).
pub fn gfm_options() -> Options {
    let mut o = Options::empty();
    o.insert(Options::ENABLE_TABLES);
    o.insert(Options::ENABLE_STRIKETHROUGH);
    o.insert(Options::ENABLE_TASKLISTS);
    o
}

/// Punctuation that means something anywhere in a line of GitHub-flavoured Markdown.
const INLINE_SPECIAL: &str = "\\`*_[]<>!|#~&{}$";

/// Escapes text so that Markdown shows it as it is: a backslash before every punctuation
/// character that could start inline syntax, before the first non-blank character when it is
/// punctuation (block markers: `-`, `+`, `>`, `=`, …) and before the `.` or `)` that would
/// end an ordered-list marker; line breaks and other control characters become spaces.
pub fn escape_md(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 4);
    let mut first = true;
    let mut leading_digits = true;
    for c in s.chars() {
        if c.is_control() {
            out.push(' ');
            continue;
        }
        let escape = c.is_ascii_punctuation()
            && (first || INLINE_SPECIAL.contains(c) || (leading_digits && matches!(c, '.' | ')')));
        if escape {
            out.push('\\');
        }
        out.push(c);
        if !c.is_whitespace() {
            first = false;
            if !c.is_ascii_digit() {
                leading_digits = false;
            }
        }
    }
    out
}

/// One pass: the edits that neutralise HTML, images and unsafe links in `text`.
fn unsafe_spans(text: &str) -> Vec<(Range<usize>, String)> {
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    let mut covered = 0usize;
    for (ev, range) in Parser::new_ext(text, gfm_options()).into_offset_iter() {
        if range.start < covered {
            continue;
        }
        let src = text.get(range.clone()).unwrap_or("");
        let edit = match &ev {
            Event::Html(_) | Event::InlineHtml(_) => Some(src.replace('<', "&lt;")),
            Event::Start(Tag::Image { .. }) => Some(escape_md(src)),
            Event::Start(Tag::Link { dest_url, .. }) if !safe_link(dest_url) => {
                Some(escape_md(src))
            }
            _ => None,
        };
        if let Some(replacement) = edit {
            if range.end > range.start {
                covered = range.end;
                edits.push((range, replacement));
            }
        }
    }
    edits
}

fn apply(text: &str, edits: &[(Range<usize>, String)]) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut at = 0;
    for (r, rep) in edits {
        out.push_str(text.get(at..r.start).unwrap_or(""));
        out.push_str(rep);
        at = r.end;
    }
    out.push_str(text.get(at..).unwrap_or(""));
    out
}

/// Whether the Markdown ends every block it opens, so that what follows it in the report is
/// read as the report wrote it (an unclosed code fence would swallow the rest).
fn closes_cleanly(text: &str) -> bool {
    const MARK: &str = "diagreportendmark";
    let probe = format!("{text}\n\n{MARK}\n");
    let mut depth = 0usize;
    let mut last_top_level_text = None;
    let mut paragraph_depth = None;
    for ev in Parser::new_ext(&probe, gfm_options()) {
        match ev {
            Event::Start(Tag::Paragraph) => {
                paragraph_depth = Some(depth);
                depth += 1;
            }
            Event::Start(_) => depth += 1,
            Event::End(_) => depth = depth.saturating_sub(1),
            Event::Text(t) => {
                last_top_level_text =
                    Some((t.to_string(), paragraph_depth == Some(0) && depth == 1))
            }
            _ => {}
        }
    }
    matches!(last_top_level_text, Some((t, true)) if t == MARK)
}

/// Untrusted Markdown made safe to embed: raw HTML shown as text, images and unsafe links
/// shown as their source text. When that cannot be settled (or the text would leave a block
/// open), the whole text becomes a fenced code block.
pub fn sanitize(text: &str) -> String {
    let mut current = text.replace('\0', "\u{FFFD}");
    for _ in 0..8 {
        let edits = unsafe_spans(&current);
        if edits.is_empty() {
            if closes_cleanly(&current) {
                return current;
            }
            break;
        }
        current = apply(&current, &edits);
    }
    fenced(text)
}

/// A fenced code block holding `text` verbatim, with a fence longer than any run of
/// backticks inside it.
pub fn fenced(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}text\n{}\n{fence}", text.replace('\0', "\u{FFFD}"))
}

/// Text for one table cell.
fn cell(s: &str) -> String {
    escape_md(s.trim())
}

/// The alert group the run investigated: each alert's name, service, start, fingerprint and
/// labels, and the group's summary.
fn alert(o: &mut String, data: &RunData) {
    let Some(a) = &data.alerts else { return };
    let _ = writeln!(
        o,
        "## Alert\n\nFrom Alertmanager's {} · group `{}` · {} alert(s)\n",
        match a.source {
            diag_core::store::alerts::AlertSource::Api => "API",
            diag_core::store::alerts::AlertSource::Webhook => "webhook",
        },
        bounded(&a.group.group_key, 200).replace('`', "'"),
        a.group.alerts.len()
    );
    o.push_str(
        "| alert | status | starts at | fingerprint | labels |\n| --- | --- | --- | --- | --- |\n",
    );
    for x in a.group.alerts.iter().take(50) {
        let labels: Vec<String> = x.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            cell(&bounded(x.name(), 120)),
            x.status.as_str(),
            x.starts_at,
            cell(&bounded(&x.fingerprint, 40)),
            cell(&bounded(&labels.join(", "), 400))
        );
    }
    if a.group.alerts.len() > 50 {
        let _ = writeln!(o, "\n… and {} more.", a.group.alerts.len() - 50);
    }
    if let Some(summary) = a
        .group
        .alerts
        .first()
        .and_then(|x| x.annotations.get("summary"))
    {
        let _ = writeln!(o, "\nSummary: {}", escape_md(&bounded(summary, 400)));
    }
    o.push('\n');
}

/// The whole Markdown report.
pub fn render(data: &RunData) -> String {
    let view = view::build(data);
    let run = &data.run;
    let mut o = String::with_capacity(16 * 1024);
    let _ = writeln!(o, "# diag: {}\n", escape_md(&bounded(&run.question, 300)));
    let verdict = run.effective_verdict.map_or("none", |v| v.as_str());
    let _ = writeln!(
        o,
        "**{}** · verdict **{}** · {} · {} · {} model calls · {} tool calls · run `{}`\n",
        run.status.as_str(),
        verdict,
        if run.degraded {
            format!(
                "**degraded** ({} fallback)",
                run.fallback_kind
                    .map_or("a", |k| k.as_str())
                    .replace('_', "-")
            )
        } else {
            "not degraded".to_string()
        },
        run.duration_ms.map_or("duration unknown".into(), human_ms),
        run.step_count,
        run.tool_count,
        run.run_id.replace('`', "")
    );
    if let Some(f) = &run.failure {
        let _ = writeln!(o, "Failure: {}\n", escape_md(&bounded(f, 400)));
    }
    if let Some(c) = &view.fallback_context {
        let _ = writeln!(o, "The Fallback answered after {}.\n", escape_md(c));
    }

    alert(&mut o, data);

    o.push_str("## Answer\n\n");
    match run.answer.as_deref().filter(|a| !a.trim().is_empty()) {
        Some(a) => {
            o.push_str(sanitize(a).trim_end());
            o.push_str("\n\n");
        }
        None => o.push_str("The run has no answer.\n\n"),
    }

    derivations(&mut o, &view);
    claims(&mut o, &view);
    grounding(&mut o, &view);

    let tl = timeline::layout(data);
    o.push_str("## Timeline\n\n");
    if tl.steps {
        o.push_str(
            "No durations were recorded (a replay runs on a pinned clock): start and length \
             count steps.\n\n",
        );
    }
    let unit = if tl.steps { "step" } else { "ms" };
    let _ = writeln!(
        o,
        "| # | kind | what | status | round | attempt | start ({unit}) | length ({unit}) |"
    );
    o.push_str("| ---: | --- | --- | --- | ---: | ---: | ---: | ---: |\n");
    for (i, r) in tl.rows.iter().enumerate() {
        let kind = match r.kind {
            RowKind::Node => "node",
            RowKind::Model => "model call",
            RowKind::Tool => "tool call",
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            kind,
            cell(&r.label),
            cell(&r.status),
            r.round,
            r.attempt,
            r.start,
            r.duration
        );
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "<sub>diag {} · the HTML report (`diag report {} --format html`) has the tool calls' \
         arguments and outputs, the timeline and the graph.</sub>",
        env!("CARGO_PKG_VERSION"),
        run.run_id.replace('`', "")
    );
    o
}

/// The answer's computed values, right under it: one list item each, its id, result and
/// arithmetic, then the claims its operands are observed in (the Markdown report's claims
/// have no anchors, so they are named, not linked). All of it escaped.
fn derivations(o: &mut String, view: &View) {
    if view.derivations.is_empty() && view.derivations_left_out == 0 {
        return;
    }
    o.push_str("## Computed values\n\n");
    for d in &view.derivations {
        let _ = write!(
            o,
            "- **{}**: {} = {}",
            escape_md(&d.id),
            escape_md(&d.result),
            escape_md(&d.expression)
        );
        if !d.claims.is_empty() {
            let claims: Vec<String> = d.claims.iter().map(|c| escape_md(&c.claim_id)).collect();
            let _ = write!(o, " ({})", claims.join(", "));
        }
        o.push('\n');
    }
    if view.derivations_left_out > 0 {
        if !view.derivations.is_empty() {
            o.push('\n');
        }
        let _ = writeln!(
            o,
            "{} more stored computed value(s) not shown.",
            view.derivations_left_out
        );
    }
    o.push('\n');
}

fn claims(o: &mut String, view: &View) {
    o.push_str("## Claims\n\n");
    if view.claims.is_empty() {
        o.push_str("The Executor made no claim that reached the Gatekeeper.\n\n");
        return;
    }
    let verified = view.claims.iter().filter(|c| c.verified).count();
    let _ = writeln!(
        o,
        "{} claim(s): {} verified, {} refused.\n",
        view.claims.len(),
        verified,
        view.claims.len() - verified
    );
    for c in &view.claims {
        claim(o, c);
    }
}

fn claim(o: &mut String, c: &ClaimView) {
    let mut marks = vec![if c.verified {
        "✅ verified"
    } else {
        "❌ refused"
    }
    .to_string()];
    match c.supported {
        Some(true) => marks.push("verifier: supported".into()),
        Some(false) => marks.push("verifier: not supported".into()),
        None => {}
    }
    if c.cited {
        marks.push("cited".into());
    }
    if !c.refusals.is_empty() {
        marks.push(format!(
            "refusal: {}",
            c.refusals
                .iter()
                .map(|r| escape_md(r))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let _ = write!(
        o,
        "- **{}** · {}",
        escape_md(&c.claim_id),
        marks.join(" · ")
    );
    match &c.text {
        Some(t) => {
            let _ = writeln!(o, " — {}", escape_md(t));
        }
        None => o.push_str(" — its text is not shown (refused claims never reach the answer)\n"),
    }
    if c.bindings.is_empty() {
        o.push('\n');
        return;
    }
    let summary: Vec<String> = c
        .bindings
        .iter()
        .map(|b| {
            format!(
                "{} {} {} {}",
                if b.passed { "✓" } else { "✗" },
                b.invocation_id,
                b.tool_name,
                b.raw_path
            )
        })
        .collect();
    let _ = writeln!(
        o,
        "\n  <details><summary>evidence: {}</summary>\n",
        escape_html(&bounded(&summary.join("; "), 300)).replace('\n', " ")
    );
    for b in &c.bindings {
        let _ = write!(
            o,
            "  > {} **{}** {} at {}",
            if b.passed { "✓ passed" } else { "✗ failed" },
            escape_md(&b.invocation_id),
            escape_md(&b.tool_name),
            escape_md(&b.raw_path)
        );
        if let Some(f) = &b.failure {
            let _ = write!(o, ": {}", escape_md(f));
        }
        for (k, v) in &b.extra {
            let _ = write!(o, " · {}: {}", escape_md(k), escape_md(v));
        }
        o.push_str("\\\n");
        match (&b.excerpt, &b.matched_text) {
            (Some(x), _) => {
                let quote = x.quote.trim();
                let lead = &x.quote[..x.quote.len() - x.quote.trim_start().len()];
                let trail = &x.quote[x.quote.trim_end().len()..];
                let _ = writeln!(
                    o,
                    "  > {}{}{}{}{}{}{}\n  >",
                    if x.cut_before > 0 { "… " } else { "" },
                    escape_md(&x.before),
                    escape_md(lead),
                    if quote.is_empty() {
                        String::new()
                    } else {
                        format!("**{}**", escape_md(quote))
                    },
                    escape_md(trail),
                    escape_md(&x.after),
                    if x.cut_after > 0 { " …" } else { "" },
                );
            }
            (None, Some(m)) => {
                let _ = writeln!(o, "  > **{}**\n  >", escape_md(m.trim()));
            }
            (None, None) => o.push_str("  >\n"),
        }
    }
    o.push_str("\n  </details>\n\n");
}

fn grounding(o: &mut String, view: &View) {
    o.push_str("## Grounding\n\n| figure | value |\n| --- | --- |\n");
    for (k, v) in &view.grounding {
        let _ = writeln!(o, "| {} | {} |", cell(k), cell(v));
    }
    o.push('\n');
    if !view.facts.is_empty() {
        o.push_str(
            "| verifier fact | verification | critical | claims |\n| --- | --- | --- | --- |\n",
        );
        for f in &view.facts {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} |",
                cell(&f.fact),
                cell(&f.verification),
                if f.is_critical { "yes" } else { "no" },
                cell(&f.claim_ids.join(", "))
            );
        }
        o.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(md: &str) -> Vec<Event<'_>> {
        Parser::new_ext(md, gfm_options()).collect()
    }

    #[test]
    fn html_images_and_unsafe_links_become_text() {
        let hostile = "Hi <script>alert(1)</script> ![x](https://evil.example/p.png) \
                       [go](javascript:alert(1)) <img src=x onerror=alert(1)>\n\n\
                       <div>\n![y](https://evil.example/q.png)\n</div>\n\n[ok](https://example.org)";
        let safe = sanitize(hostile);
        for ev in events(&safe) {
            match ev {
                Event::Html(h) | Event::InlineHtml(h) => panic!("html left: {h}\n{safe}"),
                Event::Start(Tag::Image { .. }) => panic!("image left:\n{safe}"),
                Event::Start(Tag::Link { dest_url, .. }) => {
                    assert_eq!(dest_url.as_ref(), "https://example.org", "{safe}")
                }
                _ => {}
            }
        }
        assert!(safe.contains("alert(1)"), "the text stays readable: {safe}");
    }

    #[test]
    fn an_unclosed_fence_cannot_swallow_the_report() {
        let s = sanitize("text\n\n```\nnever closed");
        assert!(closes_cleanly(&s), "{s}");
        assert!(s.starts_with("````text\n"), "{s}");
    }

    #[test]
    fn escaped_text_is_literal() {
        let t = "a *b* [c](javascript:x) <i>|</i> `d`";
        let md = escape_md(t);
        let text: String = events(&md)
            .into_iter()
            .filter_map(|e| match e {
                Event::Text(t) => Some(t.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(text, t);
    }
}
