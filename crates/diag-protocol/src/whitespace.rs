//! Quotes matched as the Gatekeeper matches them: runs of Unicode whitespace collapse to one
//! space and both ends are trimmed. The Gatekeeper binds quotes with it and grounding compares
//! texts with it, so it is a module of its own that neither of them owns.

use std::ops::ControlFlow;

/// Finds `quote` in `text` under the Gatekeeper's rules (runs of Unicode whitespace collapse
/// to one space and both sides are trimmed; comparison is case-sensitive) and returns the
/// matching slice of `text` itself, with its original whitespace. An empty or
/// whitespace-only quote matches nothing.
pub fn match_quote<'t>(text: &'t str, quote: &str) -> Option<&'t str> {
    let quote = normalize_whitespace(quote);
    if quote.is_empty() {
        return None;
    }
    let start = normalize_whitespace(text).find(&quote)?;
    let (from, to) = original_span(text, start, start + quote.len())?;
    text.get(from..to)
}

/// Runs of Unicode whitespace collapsed to one ASCII space, leading and trailing runs
/// dropped.
pub fn normalize_whitespace(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    walk_normalized(s, |_, _, c| {
        out.push(c);
        ControlFlow::Continue(())
    });
    out
}

/// Walks the whitespace-normalized form of `s`, handing each of its chars to `f` together
/// with the byte range in `s` it stands for: a collapsed space spans its whole whitespace
/// run. Both the normalized text and the offset mapping come from this one walk, so they
/// cannot disagree.
fn walk_normalized(s: &str, mut f: impl FnMut(usize, usize, char) -> ControlFlow<()>) {
    let mut pending: Option<(usize, usize)> = None;
    let mut started = false;
    for (i, c) in s.char_indices() {
        let end = i + c.len_utf8();
        if c.is_whitespace() {
            if started {
                pending = Some(match pending {
                    Some((from, _)) => (from, end),
                    None => (i, end),
                });
            }
            continue;
        }
        if let Some((from, to)) = pending.take() {
            if f(from, to, ' ').is_break() {
                return;
            }
        }
        started = true;
        if f(i, end, c).is_break() {
            return;
        }
    }
}

/// Maps the byte range `[start, end)` of the normalized form of `text` back to the byte
/// range of `text` it was made from. A second linear walk instead of an offset table keeps
/// the memory for a multi-megabyte output at one copy of the text.
pub(crate) fn original_span(text: &str, start: usize, end: usize) -> Option<(usize, usize)> {
    if start >= end {
        return None;
    }
    let mut pos = 0usize;
    let mut from = None;
    let mut to = None;
    walk_normalized(text, |a, b, c| {
        let next = pos + c.len_utf8();
        if pos == start {
            from = Some(a);
        }
        if next == end {
            to = Some(b);
            return ControlFlow::Break(());
        }
        pos = next;
        ControlFlow::Continue(())
    });
    match (from, to) {
        (Some(from), Some(to)) if from < to => Some((from, to)),
        _ => None,
    }
}
