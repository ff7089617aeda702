//! Properties of the report renderers over arbitrary untrusted text: the Markdown left in a
//! report never holds HTML, an image, an unsafe link or an open block; escaped text reads back
//! as itself; the HTML rendering of an answer holds only tags diag writes.

use proptest::prelude::*;
use pulldown_cmark::{Event, Parser, Tag};

use diag_report::html::markdown_to_html;
use diag_report::markdown::{escape_md, gfm_options, sanitize};
use diag_report::safe_link;

use diag_testkit::seeded;

/// Pieces of Markdown and HTML that matter for safety, mixed with arbitrary text.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[ -~]{0,12}",
        1 => "\\PC{0,6}",
        4 => prop::sample::select(vec![
            "<script>", "</script>", "<img src=x onerror=alert(1)>", "<div>", "</div>",
            "<!--", "-->", "<pre>", "<a href=\"javascript:x\">", "](javascript:alert(1))",
            "![", "](https://evil.example/i.png)", "[", "]", "(", ")", "<", ">", "`", "```",
            "~~~", "\n", "\n\n", "    ", "> ", "- ", "1. ", "# ", "|", "| --- |", "&lt;",
            "&#60;", "\\", "*", "_", "[x]: javascript:y\n", "[x]", "<https://a.example>",
            "<javascript:alert(1)>", "<mailto:a@b.c>", "[c1]", "[c1, c2]", "<svg onload=x>",
            "<style>", "&", "\"", "'", "javascript:", "data:text/html,x",
        ])
        .prop_map(str::to_string),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..24).prop_map(|v| v.concat())
}

fn allowed_tag(name: &str) -> bool {
    [
        "p",
        "h3",
        "h4",
        "h5",
        "h6",
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
        "a",
        "span",
        "input",
    ]
    .contains(&name)
}

proptest! {
    #![proptest_config(seeded::config(0x5e9a_0316))]

    #[test]
    fn sanitized_markdown_is_inert_and_closes_its_blocks(s in text()) {
        let safe = sanitize(&s);
        for ev in Parser::new_ext(&safe, gfm_options()) {
            match ev {
                Event::Html(h) | Event::InlineHtml(h) => prop_assert!(false, "HTML {h:?} left in {safe:?}"),
                Event::Start(Tag::Image { .. }) => prop_assert!(false, "image left in {safe:?}"),
                Event::Start(Tag::Link { dest_url, .. }) => {
                    prop_assert!(safe_link(&dest_url), "link {dest_url:?} left in {safe:?}")
                }
                _ => {}
            }
        }
        // Whatever follows the answer in the report is read as the report wrote it.
        let probe = format!("{safe}\n\n## Claims\n");
        let last_heading = Parser::new_ext(&probe, gfm_options())
            .filter_map(|e| match e { Event::Text(t) => Some(t.to_string()), _ => None })
            .last();
        prop_assert_eq!(last_heading.as_deref(), Some("Claims"), "{:?}", safe);
    }

    #[test]
    fn escaped_text_reads_back_as_itself(s in "[^\\p{C}\\s]([^\\p{C}\\n\\r\\t]{0,40}[^\\p{C}\\s])?") {
        let md = escape_md(&s);
        let mut back = String::new();
        for ev in Parser::new_ext(&md, gfm_options()) {
            match ev {
                Event::Text(t) => back.push_str(&t),
                Event::Start(Tag::Paragraph) | Event::End(_) => {}
                other => prop_assert!(false, "{other:?} from {md:?}"),
            }
        }
        prop_assert_eq!(back, s);
    }

    #[test]
    fn the_answer_as_html_holds_only_diags_tags(s in text()) {
        let html = markdown_to_html(&s, &["c1"]);
        let tag = regex::Regex::new(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)([^>]*)>").unwrap();
        let handler = regex::Regex::new(r"\son[a-z]+\s*=").unwrap();
        let href = regex::Regex::new("href=\"([^\"]*)\"").unwrap();
        for m in tag.captures_iter(&html) {
            let name = m[2].to_ascii_lowercase();
            prop_assert!(allowed_tag(&name), "<{}> in {:?}", name, html);
            let attrs = m[3].to_ascii_lowercase();
            prop_assert!(!attrs.contains("javascript:"), "{}", &m[0]);
            prop_assert!(!handler.is_match(&attrs), "{}", &m[0]);
            if name == "a" && m[1].is_empty() {
                let target = href.captures(&m[3]).map(|c| c[1].to_string()).unwrap_or_default();
                prop_assert!(target.starts_with("#claim-c1") || target.starts_with("https://") || target.starts_with("http://") || target.starts_with("mailto:") || target.starts_with('#'), "{}", &m[0]);
            }
        }
    }
}
