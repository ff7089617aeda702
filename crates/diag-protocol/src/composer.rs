//! `composer_answer_v1` and `composer_answer_v2`: the Composer's answer over Verifier-allowed
//! claims, and the inline citation markers (`[c1]`, `[c1, c2]`, `96 % [d1]`) its Markdown
//! cites them and its derivations with.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::derivation::Derivation;
use super::grounding::{is_claim_id, EvidenceContext, SalientToken};

/// The schema name of an answer that computes nothing.
pub const SCHEMA: &str = "composer_answer_v1";

/// The schema name of an answer that may state computed values, each as a [`Derivation`]
/// (openspec/specs/verified-evidence/spec.md, "A computed value SHALL reach an answer only
/// with its arithmetic checked").
pub const SCHEMA_V2: &str = "composer_answer_v2";

/// Which contract a run asks its Composer for: the schema named in the request, the prompt
/// version that explains it and the correction a technical retry sends. A live run asks for
/// [`ComposerContract::CURRENT`]; a replay asks for the one its recording was made with, so
/// a run file recorded before derivations existed replays with the same request bytes.
///
/// Either way the parser reads both documents ([`parse_composer`](super::parse::parse_composer)):
/// what an answer may state is decided by the checks, not by which contract was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComposerContract {
    /// `composer_answer_v1` (prompt `composer` version 2): only observed values.
    V1,
    /// `composer_answer_v2` (prompt `composer` version 3): computed values as derivations.
    V2,
}

impl ComposerContract {
    /// The contract a live run asks for.
    pub const CURRENT: ComposerContract = ComposerContract::V2;

    /// The schema name the request names.
    pub fn schema(self) -> &'static str {
        match self {
            ComposerContract::V1 => SCHEMA,
            ComposerContract::V2 => SCHEMA_V2,
        }
    }

    /// The version of the `composer` prompt that explains this contract.
    pub fn prompt_version(self) -> u32 {
        match self {
            ComposerContract::V1 => 2,
            ComposerContract::V2 => 3,
        }
    }

    /// The contract a `composer` prompt version explains; `None` for a version no contract
    /// has.
    pub fn from_prompt_version(version: u32) -> Option<ComposerContract> {
        [ComposerContract::V1, ComposerContract::V2]
            .into_iter()
            .find(|c| c.prompt_version() == version)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComposerAnswer {
    pub answer_markdown: String,
    pub cited_claims: Vec<String>,
    /// The computed values the answer states (`composer_answer_v2`); empty for a v1 answer,
    /// and then not serialized, so a v1 answer is recorded exactly as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub derivations: Vec<Derivation>,
}

impl ComposerAnswer {
    /// The ids of the answer's derivations, in listed order.
    pub fn derivation_ids(&self) -> Vec<String> {
        self.derivations.iter().map(|d| d.id.clone()).collect()
    }
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

/// An answer with the citations diag placed in it ([`place_citations`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedCitations {
    /// The answer with a marker after each sentence that states a fact of a claim.
    pub markdown: String,
    /// The claims the markers cite, in allowed order.
    pub cited_claims: Vec<String>,
    /// How many markers were placed.
    pub markers: usize,
}

/// Places the citations of an answer that has none (openspec/specs/verified-evidence/spec.md,
/// "Citations diag places"). Each sentence of running text (a line, cut after `.`, `!` or `?`
/// followed by a space; fenced code, headings and table rows are left alone) is read like
/// the whole answer: its salient tokens that the question does not show are the facts it
/// needs a claim for, and it cites the fewest allowed claims whose evidence shows them (the
/// claim showing most of the facts left first, ties in allowed order), as a marker before
/// its closing punctuation. A sentence none of whose facts a claim shows gets no marker; the
/// token check, run on the answer afterwards as on any answer, refuses what no evidence
/// shows. `None` when no sentence got a marker.
///
/// `claims` are the allowed claims in allowed order, each with the evidence context of its
/// own verified evidence; `question` is the context of the operator's question alone.
pub fn place_citations(
    markdown: &str,
    question: &EvidenceContext,
    claims: &[(String, EvidenceContext)],
) -> Option<PlacedCitations> {
    let mut out = String::with_capacity(markdown.len() + 64);
    let mut cited: Vec<&str> = Vec::new();
    let mut markers = 0;
    let mut fence: Option<&str> = None;
    for (n, line) in markdown.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let trimmed = line.trim_start();
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            }
            out.push_str(line);
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(&trimmed[..3]);
            out.push_str(line);
            continue;
        }
        if trimmed.starts_with('#') || trimmed.starts_with('|') || line.starts_with("    ") {
            out.push_str(line);
            continue;
        }
        let mut at = 0;
        for end in sentence_ends(line) {
            let sentence = &line[at..end];
            let ids = sentence_claims(sentence, question, claims);
            if ids.is_empty() {
                out.push_str(sentence);
            } else {
                let body = sentence.trim_end();
                let cut = body.trim_end_matches(['.', '!', '?', ':', ';', ',']).len();
                out.push_str(&body[..cut]);
                out.push_str(" [");
                out.push_str(&ids.join(", "));
                out.push(']');
                out.push_str(&sentence[cut..]);
                markers += 1;
                for id in ids {
                    if !cited.contains(&id) {
                        cited.push(id);
                    }
                }
            }
            at = end;
        }
    }
    if markers == 0 {
        return None;
    }
    let cited_claims = claims
        .iter()
        .map(|(id, _)| id.as_str())
        .filter(|id| cited.contains(id))
        .map(str::to_string)
        .collect();
    Some(PlacedCitations {
        markdown: out,
        cited_claims,
        markers,
    })
}

/// The byte offsets where the sentences of `line` end: after `.`, `!` or `?` followed by
/// whitespace (so `2.5` and `v1.2.3` are not cut), and at the end of the line.
fn sentence_ends(line: &str) -> Vec<usize> {
    let bytes = line.as_bytes();
    let mut ends = Vec::new();
    for (i, b) in bytes.iter().enumerate() {
        if matches!(b, b'.' | b'!' | b'?')
            && bytes.get(i + 1).is_some_and(|n| *n == b' ' || *n == b'\t')
        {
            ends.push(i + 1);
        }
    }
    if ends.last() != Some(&line.len()) {
        ends.push(line.len());
    }
    ends
}

/// The claims a sentence cites: the fewest whose evidence shows the sentence's facts that
/// the question does not (greedy, most facts first, ties in allowed order).
fn sentence_claims<'a>(
    sentence: &str,
    question: &EvidenceContext,
    claims: &'a [(String, EvidenceContext)],
) -> Vec<&'a str> {
    let mut needed: Vec<SalientToken> = question.check(sentence).unbound;
    let shown: Vec<Vec<SalientToken>> = claims
        .iter()
        .map(|(_, cx)| {
            let unbound = cx.check(sentence).unbound;
            needed
                .iter()
                .filter(|t| !unbound.contains(t))
                .cloned()
                .collect()
        })
        .collect();
    let mut picked: Vec<usize> = Vec::new();
    while !needed.is_empty() {
        let best = shown
            .iter()
            .enumerate()
            .filter(|(i, _)| !picked.contains(i))
            .map(|(i, facts)| (i, facts.iter().filter(|t| needed.contains(t)).count()))
            .filter(|(_, n)| *n > 0)
            .fold(None, |best: Option<(usize, usize)>, (i, n)| match best {
                Some((_, m)) if m >= n => best,
                _ => Some((i, n)),
            });
        let Some((i, _)) = best else {
            break;
        };
        needed.retain(|t| !shown[i].contains(t));
        picked.push(i);
    }
    picked.sort_unstable();
    picked.into_iter().map(|i| claims[i].0.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(text: &str) -> Vec<Vec<String>> {
        citation_markers(text).into_iter().map(|m| m.ids).collect()
    }

    fn cx(texts: &[&str]) -> EvidenceContext {
        let mut cx = EvidenceContext::new();
        for t in texts {
            cx.push_text(t);
        }
        cx
    }

    fn demo_claims() -> Vec<(String, EvidenceContext)> {
        vec![
            (
                "c1".into(),
                cx(&["settlement-batch holds 50 of 50 connections of payment-db"]),
            ),
            (
                "c2".into(),
                cx(&["2026-11-30T14:02:11Z checkout upstream returned 502"]),
            ),
        ]
    }

    #[test]
    fn each_sentence_cites_the_claims_that_show_its_facts() {
        let question = cx(&["why does checkout return 502 since 14:00?"]);
        let answer = "The settlement-batch job held 50 connections. Checkout answered 502 \
                      since 14:02.\n\n- payment-db was full at 14:02\n- Look at the pool.";
        let placed = place_citations(answer, &question, &demo_claims()).unwrap();
        assert_eq!(
            placed.markdown,
            "The settlement-batch job held 50 connections [c1]. Checkout answered 502 since \
             14:02 [c2].\n\n- payment-db was full at 14:02 [c1, c2]\n- Look at the pool."
        );
        assert_eq!(placed.cited_claims, ["c1", "c2"]);
        assert_eq!(placed.markers, 3);
        assert_eq!(
            citation_markers(&placed.markdown).len(),
            3,
            "every placed marker reads as a citation"
        );
    }

    #[test]
    fn code_headings_tables_and_facts_no_claim_shows_get_no_marker() {
        let question = cx(&["why does checkout return 502 since 14:00?"]);
        let answer = "## settlement-batch\n```\nsettlement-batch 50\n```\n| 50 | x |\n\
                      Checkout returns 502 since 14:00. The job held 80 connections.";
        assert_eq!(place_citations(answer, &question, &demo_claims()), None);
        let mixed = "The job held 80 connections on payment-db.";
        let placed = place_citations(mixed, &question, &demo_claims()).unwrap();
        assert_eq!(
            placed.markdown, "The job held 80 connections on payment-db [c1].",
            "a marker says which claim shows what it can; the token check still refuses 80"
        );
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
