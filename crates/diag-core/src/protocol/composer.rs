//! `composer_answer_v1`: the Composer's answer over Verifier-allowed claims, and the inline
//! citation markers (`[c1]`, `[c1, c2]`) its Markdown cites them with.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::grounding::is_claim_id;

/// The schema name the Composer must return.
pub const SCHEMA: &str = "composer_answer_v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComposerAnswer {
    pub answer_markdown: String,
    pub cited_claims: Vec<String>,
}

/// One inline citation marker of an answer: its byte range (brackets included) and the claim
/// ids it names, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CitationMarker {
    pub range: Range<usize>,
    pub ids: Vec<String>,
}

/// The inline citation markers of a Markdown text, in order: `[`, one or more ids in the
/// claim-id format ([`is_claim_id`]) separated by `,` or `;`, spaces allowed around them, then
/// `]` — exactly the brackets the salient-token scanner
/// ([`salient_tokens`](super::grounding::salient_tokens)) skips as citations, so every
/// bracket that escapes the token check is checked as a citation instead.
pub fn citation_markers(markdown: &str) -> Vec<CitationMarker> {
    let bytes = markdown.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'[' {
            if let Some((end, ids)) = marker_at(markdown, i) {
                out.push(CitationMarker { range: i..end, ids });
                i = end;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// The end (after `]`) and ids of the marker opening at byte `open`, if it is one.
fn marker_at(text: &str, open: usize) -> Option<(usize, Vec<String>)> {
    let bytes = text.as_bytes();
    let mut j = open + 1;
    let mut ids = Vec::new();
    loop {
        while bytes.get(j) == Some(&b' ') {
            j += 1;
        }
        let start = j;
        while bytes
            .get(j)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
        {
            j += 1;
        }
        let id = text.get(start..j)?;
        if !is_claim_id(id) {
            return None;
        }
        ids.push(id.to_string());
        while bytes.get(j) == Some(&b' ') {
            j += 1;
        }
        match bytes.get(j) {
            Some(b']') => return Some((j + 1, ids)),
            Some(b',') | Some(b';') => j += 1,
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(text: &str) -> Vec<Vec<String>> {
        citation_markers(text).into_iter().map(|m| m.ids).collect()
    }

    #[test]
    fn markers_are_brackets_around_claim_ids() {
        assert_eq!(
            ids("a [c1] b [c2, c3][c4 ; c5] [alpha]"),
            [
                vec!["c1"],
                vec!["c2", "c3"],
                vec!["c4", "c5"],
                vec!["alpha"]
            ]
        );
        // Numbers, prose, empty brackets and ids out of format are not markers.
        assert!(ids("[14] [see logs] [1c] [] [c1,] [c.1] [c1\n]").is_empty());
        assert_eq!(ids("[[c1]] [c1](http://x)"), [vec!["c1"], vec!["c1"]]);
        assert!(ids("unclosed [c1").is_empty());
        assert!(ids(&format!("[c{}]", "1".repeat(32))).is_empty());
    }
}
