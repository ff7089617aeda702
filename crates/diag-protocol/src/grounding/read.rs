//! The canonical reading of a text: what a reader sees, as the checks read it
//! (openspec/specs/verified-evidence/spec.md, "Every text a reader sees SHALL be read once").
//!
//! 1. Invisible characters: bidirectional controls anywhere, and any other format character
//!    (Unicode category Cf: zero-width space and joiners, word joiner, soft hyphen, …) or
//!    invisible filler between two visible characters one of which is a letter, a digit or
//!    ASCII punctuation, would change what a token reads as: the text is refused, naming
//!    the character. Others (a byte-order mark, a joiner inside an emoji sequence) are
//!    dropped.
//! 2. Markdown is parsed by pulldown-cmark with the options the reports render with, so
//!    emphasis, escapes, entities, list markers, code spans and every fence form are read as
//!    CommonMark reads them. Inline text of one block is one flow (`**8**0` reads `80`);
//!    blocks and table cells are separate flows. A code span's text stays in its flow and is
//!    marked; a code block is one verbatim segment per line, its info string not content.
//!    Raw HTML (comments included) is read as the text it is (the reports show it as text).
//!    Link destinations, image sources, link titles and reference definitions are content.
//!    An ordered list that starts at a number other than 0 or 1 shows that number.
//! 3. Every piece of text is normalised with NFKC (full-width `８０` reads `80`).
//!
//! Evidence and the operator's question are read as plain text: the same Unicode steps, no
//! Markdown.

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};
use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// What a segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentKind {
    /// Running text: a paragraph, heading, list item or table cell.
    Flow,
    /// One line of a code block: a verbatim quotation.
    CodeLine,
    /// A link destination or image source: one address.
    Address,
}

#[derive(Debug, Clone)]
pub struct Segment {
    pub kind: SegmentKind,
    pub text: String,
    /// Byte ranges of `text` that were code spans.
    pub code: Vec<Range<usize>>,
    /// `(offset in text, line of the source)`, ascending by offset.
    pub lines: Vec<(usize, u32)>,
    /// Inside a blockquote: every line of it is a quotation.
    pub quote: bool,
}

impl Segment {
    fn new(kind: SegmentKind) -> Self {
        Segment {
            kind,
            text: String::new(),
            code: Vec::new(),
            lines: Vec::new(),
            quote: false,
        }
    }

    /// The source line of byte `offset` of the segment's text.
    pub fn line_at(&self, offset: usize) -> u32 {
        self.lines
            .iter()
            .take_while(|(o, _)| *o <= offset)
            .last()
            .map_or(1, |(_, l)| *l)
    }

    fn push(&mut self, s: &str, line: u32) {
        if self.lines.last().is_none_or(|(_, l)| *l != line) {
            self.lines.push((self.text.len(), line));
        }
        push_nfkc(&mut self.text, s);
    }
}

/// Appends `s` in NFKC, except numbers of another kind that NFKC would turn into letters
/// (Roman numerals `Ⅷ` read `VIII`): they are kept as written, so a reader's number stays a
/// fact and never becomes a word of prose. Hyphens of other forms read as `-`
/// (`payment\u{2011}service` is `payment-service`).
fn push_nfkc(out: &mut String, s: &str) {
    let hyphen = |c: char| {
        matches!(
            c,
            '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2043}' | '\u{2212}'
        )
    };
    if s.chars().any(hyphen) {
        let mapped: String = s.chars().map(|c| if hyphen(c) { '-' } else { c }).collect();
        return push_nfkc(out, &mapped);
    }
    let keep =
        |c: char| c.is_numeric() && !c.is_ascii_digit() && !c.nfkc().any(|d| d.is_ascii_digit());
    if !s.chars().any(keep) {
        out.extend(s.nfkc());
        return;
    }
    let mut from = 0;
    for (i, c) in s.char_indices() {
        if keep(c) {
            out.extend(s[from..i].nfkc());
            out.push(c);
            from = i + c.len_utf8();
        }
    }
    out.extend(s[from..].nfkc());
}

/// A keycap (`1️⃣`: a digit, U+FE0F and U+20E3) reads as its digit; `#️⃣` and `*️⃣` read as
/// nothing. Step markers written as keycaps are list markers, not facts.
fn fold_keycaps(text: &str) -> std::borrow::Cow<'_, str> {
    // The keycap ten is one character.
    if text.contains('\u{1F51F}') {
        return std::borrow::Cow::Owned(
            fold_keycaps(&text.replace('\u{1F51F}', "10")).into_owned(),
        );
    }
    if !text.contains('\u{20E3}') {
        return std::borrow::Cow::Borrowed(text);
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let vs = chars.get(i + 1) == Some(&'\u{FE0F}');
        let cap = chars.get(i + 1 + usize::from(vs)) == Some(&'\u{20E3}');
        if cap && (c.is_ascii_digit() || c == '#' || c == '*') {
            if c.is_ascii_digit() {
                out.push(c);
            }
            i += 2 + usize::from(vs);
            continue;
        }
        if c != '\u{20E3}' {
            out.push(c);
        }
        i += 1;
    }
    std::borrow::Cow::Owned(out)
}

/// An invisible character that changes what a token reads as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invisible {
    /// `U+200B`.
    pub code_point: String,
    pub line: u32,
}

#[derive(Debug, Clone, Default)]
pub struct Reading {
    pub segments: Vec<Segment>,
    pub invisible: Option<Invisible>,
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Format characters and the blank fillers that render as nothing.
fn is_invisible(c: char) -> bool {
    c.general_category() == GeneralCategory::Format
        || matches!(
            c,
            '\u{034F}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{2800}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FFA0}'
        )
}

fn is_visible_tight(c: char) -> bool {
    c.is_alphanumeric() || c.is_ascii_punctuation()
}

/// Step 1: the text without invisible characters, and the first one that would change a
/// token.
pub fn strip_invisible(text: &str) -> (String, Option<Invisible>) {
    let text = &*fold_keycaps(text);
    if !text.chars().any(is_invisible) && !text.chars().any(is_bidi_control) {
        return (text.to_string(), None);
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut found = None;
    let mut line = 1u32;
    for (i, &c) in chars.iter().enumerate() {
        if c == '\n' {
            line += 1;
        }
        if !(is_invisible(c) || is_bidi_control(c)) {
            out.push(c);
            continue;
        }
        if found.is_some() {
            continue;
        }
        let visible = |c: &&char| !is_invisible(**c) && !is_bidi_control(**c);
        let prev = chars[..i].iter().rev().find(visible);
        let next = chars[i + 1..].iter().find(visible);
        let changes = is_bidi_control(c)
            || match (prev, next) {
                (Some(p), Some(n)) => {
                    !p.is_whitespace()
                        && !n.is_whitespace()
                        && (is_visible_tight(*p) || is_visible_tight(*n))
                }
                _ => false,
            };
        if changes {
            found = Some(Invisible {
                code_point: format!("U+{:04X}", u32::from(c)),
                line,
            });
        }
    }
    (out, found)
}

/// The Markdown options the reports render answers with.
pub fn markdown_options() -> Options {
    let mut o = Options::empty();
    o.insert(Options::ENABLE_TABLES);
    o.insert(Options::ENABLE_STRIKETHROUGH);
    o.insert(Options::ENABLE_TASKLISTS);
    o
}

/// Reads a Markdown text (an answer, a claim, a Verifier item) as its reader sees it.
pub fn read_markdown(text: &str) -> Reading {
    let (clean, invisible) = strip_invisible(text);
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(clean.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let line_of = |offset: usize| -> u32 {
        let idx = line_starts.partition_point(|&s| s <= offset);
        u32::try_from(idx.max(1)).unwrap_or(u32::MAX)
    };
    let mut segments = Vec::new();
    let mut flow = Segment::new(SegmentKind::Flow);
    let mut code_block: Option<(Segment, u32)> = None;
    let flush = |flow: &mut Segment, segments: &mut Vec<Segment>| {
        if !flow.text.trim().is_empty() {
            segments.push(std::mem::replace(flow, Segment::new(SegmentKind::Flow)));
        } else {
            *flow = Segment::new(SegmentKind::Flow);
        }
    };
    let address = |s: &str, line: u32, segments: &mut Vec<Segment>| {
        if !s.trim().is_empty() {
            let mut seg = Segment::new(SegmentKind::Address);
            seg.push(s, line);
            segments.push(seg);
        }
    };
    // The ordered lists open around the current event: the number each expects next.
    let mut lists: Vec<Option<u64>> = Vec::new();
    // Where the text of the link being read starts in the flow.
    let mut link_start: Option<usize> = None;
    // How many blockquotes are open around the current event.
    let mut quote_depth = 0usize;
    let mut parser = Parser::new_ext(&clean, markdown_options()).into_offset_iter();
    for (event, range) in parser.by_ref() {
        let line = line_of(range.start);
        if let Some((block, _)) = code_block.as_mut() {
            match event {
                Event::Text(t) => block.push(&t, line),
                Event::End(TagEnd::CodeBlock) => {
                    if let Some((block, first_line)) = code_block.take() {
                        code_lines(&block, first_line, &mut segments);
                    }
                }
                _ => {}
            }
            continue;
        }
        if matches!(event, Event::Start(Tag::Link { .. })) {
            link_start = Some(flow.text.len());
        }
        match event {
            Event::Start(Tag::BlockQuote(_)) => quote_depth += 1,
            Event::End(TagEnd::BlockQuote(_)) => quote_depth = quote_depth.saturating_sub(1),
            _ => {}
        }
        if quote_depth > 0 {
            flow.quote = true;
        }
        match event {
            Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) => flow.push(&t, line),
            Event::Code(t) => {
                let start = flow.text.len();
                flow.push(&t, line);
                let end = flow.text.len();
                flow.code.push(start..end);
            }
            Event::SoftBreak | Event::HardBreak => flow.push("\n", line),
            Event::Start(Tag::CodeBlock(kind)) => {
                flush(&mut flow, &mut segments);
                // The body starts on the line after a fence.
                let first = match kind {
                    CodeBlockKind::Fenced(_) => line.saturating_add(1),
                    CodeBlockKind::Indented => line,
                };
                code_block = Some((Segment::new(SegmentKind::CodeLine), first));
            }
            Event::Start(Tag::Link {
                dest_url, title, ..
            })
            | Event::Start(Tag::Image {
                dest_url, title, ..
            }) => {
                // An anchor to a claim (`#c1`) is where a citation points, not content.
                let anchor = dest_url.strip_prefix('#').is_some_and(super::is_short_id);
                if !anchor {
                    address(&dest_url, line, &mut segments);
                }
                if !title.trim().is_empty() {
                    let mut seg = Segment::new(SegmentKind::Flow);
                    seg.push(&title, line);
                    segments.push(seg);
                }
            }
            // A link whose text is claim ids (`[c1](#c1)`) is a citation: it reads as the
            // marker `[c1]`.
            Event::End(TagEnd::Link) => {
                if let Some(start) = link_start.take() {
                    let inner = flow.text.get(start..).unwrap_or("").trim().to_string();
                    let ids = inner
                        .split([',', ';', ' '])
                        .filter(|p| !p.is_empty())
                        .collect::<Vec<_>>();
                    let plain = !flow.code.iter().any(|c| c.end > start);
                    if plain && !ids.is_empty() && ids.iter().all(|p| super::is_short_id(p)) {
                        flow.text.truncate(start);
                        flow.lines.retain(|(o, _)| *o < start);
                        flow.push(&format!("[{inner}]"), line);
                    }
                }
            }
            Event::Start(Tag::List(Some(start))) => {
                flush(&mut flow, &mut segments);
                if start > 1 {
                    let mut seg = Segment::new(SegmentKind::Flow);
                    seg.push(&start.to_string(), line);
                    segments.push(seg);
                }
                lists.push(Some(start));
            }
            Event::Start(Tag::List(None)) => {
                flush(&mut flow, &mut segments);
                lists.push(None);
            }
            Event::End(TagEnd::List(_)) => {
                flush(&mut flow, &mut segments);
                lists.pop();
            }
            // A report numbers an ordered list's items itself, but the operator's terminal
            // shows each marker as written: one that is not the item's place in the list
            // (`4411.` as a second item) is content.
            Event::Start(Tag::Item) => {
                flush(&mut flow, &mut segments);
                if let Some(Some(next)) = lists.last_mut() {
                    let written: String = clean
                        .get(range.start..)
                        .unwrap_or("")
                        .trim_start()
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    if !written.is_empty() && written.parse::<u64>().ok() != Some(*next) {
                        let mut seg = Segment::new(SegmentKind::Flow);
                        seg.push(&written, line);
                        segments.push(seg);
                    }
                    *next = next.saturating_add(1);
                }
            }
            Event::Start(
                Tag::Paragraph
                | Tag::Heading { .. }
                | Tag::BlockQuote(_)
                | Tag::TableCell
                | Tag::HtmlBlock,
            )
            | Event::End(
                TagEnd::Paragraph
                | TagEnd::Heading(_)
                | TagEnd::BlockQuote(_)
                | TagEnd::Item
                | TagEnd::TableCell
                | TagEnd::HtmlBlock,
            )
            | Event::Rule => flush(&mut flow, &mut segments),
            _ => {}
        }
    }
    flush(&mut flow, &mut segments);
    if let Some((block, first_line)) = code_block.take() {
        code_lines(&block, first_line, &mut segments);
    }
    // Reference definitions render as nothing in a report but are on the operator's
    // terminal: their label, destination and title are content.
    for (label, def) in parser.reference_definitions().iter() {
        let line = line_of(def.span.start);
        let mut seg = Segment::new(SegmentKind::Flow);
        seg.push(label, line);
        segments.push(seg);
        address(&def.dest, line, &mut segments);
        if let Some(title) = &def.title {
            let mut seg = Segment::new(SegmentKind::Flow);
            seg.push(title, line);
            segments.push(seg);
        }
    }
    // An entity (`&#x200B;`, `&shy;`) decodes to an invisible character the source did not
    // hold: the reader of a report sees `8&#x200B;0` as `80`, so the decoded text is held
    // to the same rule as the source.
    let invisible = invisible.or_else(|| {
        segments.iter().find_map(|seg| {
            strip_invisible(&seg.text).1.map(|inv| Invisible {
                line: seg.line_at(0).saturating_add(inv.line - 1),
                ..inv
            })
        })
    });
    Reading {
        segments,
        invisible,
    }
}

fn code_lines(block: &Segment, first_line: u32, segments: &mut Vec<Segment>) {
    for (i, l) in block.text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let mut seg = Segment::new(SegmentKind::CodeLine);
        let line = first_line.saturating_add(u32::try_from(i).unwrap_or(u32::MAX));
        seg.lines.push((0, line));
        seg.text.push_str(l);
        segments.push(seg);
    }
}

/// Reads a plain text (a tool output string, the operator's question): the Unicode steps
/// only.
pub fn read_plain(text: &str) -> Reading {
    let (clean, invisible) = strip_invisible(text);
    let mut seg = Segment::new(SegmentKind::Flow);
    seg.push(&clean, 1);
    Reading {
        segments: vec![seg],
        invisible,
    }
}

/// NFKC with invisible characters dropped: how an evidence string is compared.
pub fn normalize_plain(text: &str) -> String {
    let (clean, _) = strip_invisible(text);
    let mut out = String::with_capacity(clean.len());
    push_nfkc(&mut out, &clean);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flows(md: &str) -> Vec<(SegmentKind, String)> {
        read_markdown(md)
            .segments
            .into_iter()
            .map(|s| (s.kind, s.text))
            .collect()
    }

    #[test]
    fn emphasis_escapes_and_entities_read_as_rendered() {
        assert_eq!(
            flows("**8**0 connections, settlement\\-batch\\-7 and &#56;1"),
            vec![(
                SegmentKind::Flow,
                "80 connections, settlement-batch-7 and 81".to_string()
            )]
        );
    }

    #[test]
    fn fences_are_verbatim_lines_without_their_info_string() {
        let r = flows("text\n\n~~~log\nline one\n\nline two\n~~~\n\n```\nthree\n```");
        assert_eq!(
            r,
            vec![
                (SegmentKind::Flow, "text".to_string()),
                (SegmentKind::CodeLine, "line one".to_string()),
                (SegmentKind::CodeLine, "line two".to_string()),
                (SegmentKind::CodeLine, "three".to_string()),
            ]
        );
        let reading = read_markdown("a\n\n~~~\nx\ny\n~~~");
        let lines: Vec<u32> = reading.segments.iter().map(|s| s.line_at(0)).collect();
        assert_eq!(lines, vec![1, 4, 5]);
    }

    #[test]
    fn a_numbered_line_inside_a_paragraph_is_text_and_a_list_start_is_shown() {
        assert_eq!(
            flows("The pool was full.\n80. Every connection was busy."),
            vec![(
                SegmentKind::Flow,
                "The pool was full.\n80. Every connection was busy.".to_string()
            )]
        );
        let r = flows("80. Every connection was busy.");
        assert!(r.contains(&(SegmentKind::Flow, "80".to_string())), "{r:?}");
    }

    #[test]
    fn links_images_html_and_definitions_are_content() {
        let r = flows(
            "see [the runbook](runbooks/pay-1.md \"v9\") ![x](img/a-1.png) <!-- v2.3.1 -->\n\n[ref]: https://h/v7",
        );
        let texts: Vec<&str> = r.iter().map(|(_, t)| t.as_str()).collect();
        assert!(texts.contains(&"runbooks/pay-1.md"), "{texts:?}");
        assert!(texts.contains(&"v9"));
        assert!(texts.contains(&"img/a-1.png"));
        assert!(texts.iter().any(|t| t.contains("v2.3.1")));
        assert!(texts.contains(&"https://h/v7"));
    }

    #[test]
    fn invisible_characters_inside_words_are_found_and_dropped_elsewhere() {
        let (clean, inv) = strip_invisible("v2\u{200B}.3.1");
        assert_eq!(clean, "v2.3.1");
        assert_eq!(inv.unwrap().code_point, "U+200B");
        assert!(strip_invisible("13:\u{2060}58").1.is_some());
        assert!(strip_invisible("settle\u{00AD}ment").1.is_some());
        assert!(strip_invisible("\u{202E}85:31").1.is_some());
        let (clean, inv) = strip_invisible("\u{FEFF}ok \u{200B} fine");
        assert_eq!(clean, "ok  fine");
        assert_eq!(inv, None);
        // A joiner inside an emoji sequence changes no token.
        assert_eq!(strip_invisible("\u{1F468}\u{200D}\u{1F469}").1, None);
    }

    #[test]
    fn full_width_forms_read_as_ascii() {
        assert_eq!(
            flows("８０ connections"),
            vec![(SegmentKind::Flow, "80 connections".to_string())]
        );
    }
}
