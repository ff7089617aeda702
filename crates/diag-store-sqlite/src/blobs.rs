//! Content-addressed request storage.
//!
//! A model request is stored as its canonical JSON text, and most of that text repeats: every
//! call of an agent sends the same system prompt, output contract and tool catalog, and every
//! ReAct turn of the Executor sends again every message of the turns before it. So the large
//! parts of a request (each element of its top-level `messages` array, its `response_format`
//! and its `tools` value, when one is at least [`MIN_BLOB`] bytes) are stored once per store
//! in the `blob` table, keyed by their sha256, and the exchange row keeps a *skeleton*: the
//! request text with those parts cut out, plus `request_blobs`, the JSON array
//! `[[offset, blob_id], …]` saying where in the skeleton each part goes back.
//!
//! The cut is made on bytes, by offsets into the original text, never by parsing and
//! re-serializing it: putting the parts back is concatenation, so the rebuilt text is the
//! original byte for byte whatever its spacing, key order or number formatting. Reading
//! rebuilds the text and checks it against the stored `request_sha256`; a text that does not
//! match is a corrupt store, never a request handed on.
//!
//! Reference counts (`blob_ref.refs`: how many exchange rows name the blob) are kept by
//! triggers on `model_exchange`, so a run deleted by its cascade releases its blobs with no
//! code of its own; `gc` deletes the blobs whose count is zero (`schema.rs`, `gc.rs`).

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};

use diag_records::hash::sha256_hex;

/// The smallest part stored as a blob: below it, the blob's own row, its key and its
/// reference cost more than the text they replace.
pub(crate) const MIN_BLOB: usize = 256;

/// A request text cut into a skeleton and its large parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Split {
    /// The text without its parts.
    pub skeleton: String,
    /// Each part: its offset in the skeleton, its sha256 and its text, in text order.
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part {
    pub offset: usize,
    pub sha256: String,
    pub body: String,
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// The index just past the JSON string starting at `i` (a `"`).
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// The index just past the JSON value starting at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

/// The byte ranges of the candidate parts of a request text: each element of the top-level
/// `messages` array and the top-level `response_format` and `tools` values. `None` when the
/// text is not a JSON object of the expected shape (it is then stored whole).
fn candidate_spans(text: &str) -> Option<Vec<(usize, usize)>> {
    let b = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return Some(spans);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(b, i)?;
        let key = &b[i..key_end];
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_ws(b, i + 1);
        let end = value_end(b, start)?;
        match key {
            b"\"messages\"" if b.get(start) == Some(&b'[') => {
                let mut j = skip_ws(b, start + 1);
                if b.get(j) != Some(&b']') {
                    loop {
                        let element_end = value_end(b, j)?;
                        spans.push((j, element_end));
                        j = skip_ws(b, element_end);
                        match b.get(j) {
                            Some(b',') => j = skip_ws(b, j + 1),
                            Some(b']') => break,
                            _ => return None,
                        }
                    }
                }
            }
            b"\"tools\"" | b"\"response_format\"" => spans.push((start, end)),
            _ => {}
        }
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return Some(spans),
            _ => return None,
        }
    }
}

/// Cuts the parts of at least [`MIN_BLOB`] bytes out of a request text. The result always
/// joins back to exactly `text` (checked here: should it not, the text is kept whole).
pub(crate) fn split(text: &str) -> Split {
    let whole = || Split {
        skeleton: text.to_string(),
        parts: Vec::new(),
    };
    let Some(spans) = candidate_spans(text) else {
        return whole();
    };
    let mut skeleton = String::with_capacity(256);
    let mut parts = Vec::new();
    let mut prev = 0;
    for (start, end) in spans {
        if end - start < MIN_BLOB || start < prev {
            continue;
        }
        let (Some(before), Some(body)) = (text.get(prev..start), text.get(start..end)) else {
            return whole();
        };
        skeleton.push_str(before);
        parts.push(Part {
            offset: skeleton.len(),
            sha256: sha256_hex(body.as_bytes()),
            body: body.to_string(),
        });
        prev = end;
    }
    let Some(rest) = text.get(prev..) else {
        return whole();
    };
    skeleton.push_str(rest);
    let split = Split { skeleton, parts };
    let bodies: Vec<&str> = split.parts.iter().map(|p| p.body.as_str()).collect();
    let offsets: Vec<usize> = split.parts.iter().map(|p| p.offset).collect();
    if join(&split.skeleton, &offsets, &bodies).as_deref() != Some(text) {
        return whole();
    }
    split
}

/// Puts `bodies` back into `skeleton` at `offsets` (non-decreasing, on character
/// boundaries); `None` when an offset is out of place.
pub(crate) fn join(skeleton: &str, offsets: &[usize], bodies: &[&str]) -> Option<String> {
    let total = skeleton.len() + bodies.iter().map(|b| b.len()).sum::<usize>();
    let mut out = String::with_capacity(total);
    let mut prev = 0;
    for (offset, body) in offsets.iter().zip(bodies) {
        out.push_str(skeleton.get(prev..*offset)?);
        out.push_str(body);
        prev = *offset;
    }
    if offsets.len() != bodies.len() {
        return None;
    }
    out.push_str(skeleton.get(prev..)?);
    Some(out)
}

/// Parses a `request_blobs` value: `[[offset, blob_id], …]`.
pub(crate) fn parse_refs(text: &str) -> Option<Vec<(usize, i64)>> {
    let pairs: Vec<(usize, i64)> = serde_json::from_str(text).ok()?;
    Some(pairs)
}

/// The `request_blobs` value of parts stored under these ids.
fn refs_json(parts: &[Part], ids: &[i64]) -> String {
    let mut out = String::from("[");
    for (i, (part, id)) in parts.iter().zip(ids).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("[{},{}]", part.offset, id));
    }
    out.push(']');
    out
}

/// Stores the parts of `split` that the store does not hold yet (inside the caller's write
/// transaction) and returns the `request_blobs` value naming them, `None` without parts.
/// A blob is inserted with `INSERT … ON CONFLICT DO NOTHING` and then looked up by its hash,
/// so the same blob written by two processes (or twice in one request) is stored once.
pub(crate) fn store_parts(tx: &Connection, split: &Split) -> rusqlite::Result<Option<String>> {
    if split.parts.is_empty() {
        return Ok(None);
    }
    let mut ids = Vec::with_capacity(split.parts.len());
    for part in &split.parts {
        ids.push(blob_id(tx, part)?);
    }
    Ok(Some(refs_json(&split.parts, &ids)))
}

fn blob_id(tx: &Connection, part: &Part) -> rusqlite::Result<i64> {
    let mut find = tx.prepare_cached("SELECT id FROM blob WHERE sha256 = ?1")?;
    if let Some(id) = find.query_row([&part.sha256], |r| r.get(0)).optional()? {
        return Ok(id);
    }
    tx.prepare_cached(
        "INSERT INTO blob (sha256, body) VALUES (?1, ?2) ON CONFLICT (sha256) DO NOTHING",
    )?
    .execute(params![part.sha256, part.body])?;
    let id: i64 = find.query_row([&part.sha256], |r| r.get(0))?;
    tx.prepare_cached(
        "INSERT INTO blob_ref (id, refs) VALUES (?1, 0) ON CONFLICT (id) DO NOTHING",
    )?
    .execute([id])?;
    Ok(id)
}

/// The whole text of a stored request: `skeleton` with the `bodies` its `refs` name put back;
/// `Err` says why it cannot be rebuilt (a malformed reference, a missing blob, an offset out of
/// place).
pub(crate) fn rebuild(
    skeleton: &str,
    refs: Option<&str>,
    bodies: &HashMap<i64, String>,
) -> Result<String, String> {
    let Some(refs) = refs else {
        return Ok(skeleton.to_string());
    };
    let pairs = parse_refs(refs).ok_or_else(|| format!("request_blobs {refs:?} is malformed"))?;
    let mut offsets = Vec::with_capacity(pairs.len());
    let mut parts = Vec::with_capacity(pairs.len());
    for (offset, id) in pairs {
        let body = bodies
            .get(&id)
            .ok_or_else(|| format!("blob {id} is missing"))?;
        offsets.push(offset);
        parts.push(body.as_str());
    }
    join(skeleton, &offsets, &parts).ok_or_else(|| "a blob offset is out of place".to_string())
}

/// The migration to content-addressed requests: every exchange stored whole is cut into its
/// skeleton and blobs, in the migration's transaction. Walks the table by key, a page of rows
/// at a time, so the memory used does not grow with the store.
pub(crate) fn convert_exchanges(tx: &Connection) -> rusqlite::Result<()> {
    const PAGE: i64 = 256;
    let mut after: (String, i64) = (String::new(), i64::MIN);
    loop {
        let page: Vec<(String, i64, String)> = {
            let mut stmt = tx.prepare(
                "SELECT run_id, seq, request FROM model_exchange \
                 WHERE (run_id, seq) > (?1, ?2) AND request_blobs IS NULL \
                 ORDER BY run_id, seq LIMIT ?3",
            )?;
            let rows = stmt
                .query_map(params![after.0, after.1, PAGE], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            rows
        };
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = (last.0.clone(), last.1);
        for (run_id, seq, request) in page {
            let split = split(&request);
            let Some(refs) = store_parts(tx, &split)? else {
                continue;
            };
            tx.prepare_cached(
                "UPDATE model_exchange SET request = ?3, request_blobs = ?4 \
                 WHERE run_id = ?1 AND seq = ?2",
            )?
            .execute(params![run_id, seq, split.skeleton, refs])?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(split: &Split) -> Option<String> {
        let offsets: Vec<usize> = split.parts.iter().map(|p| p.offset).collect();
        let bodies: Vec<&str> = split.parts.iter().map(|p| p.body.as_str()).collect();
        join(&split.skeleton, &offsets, &bodies)
    }

    #[test]
    fn large_messages_tools_and_contract_are_cut_and_joined_back_exactly() {
        let big = "x".repeat(MIN_BLOB);
        let text = format!(
            "{{\"max_tokens\":10,\"messages\":[{{\"content\":\"{big}\",\"role\":\"system\"}},\
             {{\"content\":\"hi\",\"role\":\"user\"}}],\"response_format\":{{\"schema\":\"{big}\"}},\
             \"temperature\":0.2,\"tools\":[{{\"name\":\"{big}\"}}]}}"
        );
        let split = split(&text);
        assert_eq!(split.parts.len(), 3, "{split:?}");
        assert_eq!(
            split.skeleton,
            "{\"max_tokens\":10,\"messages\":[,{\"content\":\"hi\",\"role\":\"user\"}],\
             \"response_format\":,\"temperature\":0.2,\"tools\":}"
        );
        assert_eq!(
            split.parts[0].body,
            format!("{{\"content\":\"{big}\",\"role\":\"system\"}}")
        );
        assert_eq!(
            split.parts[0].sha256,
            sha256_hex(split.parts[0].body.as_bytes())
        );
        assert_eq!(joined(&split).as_deref(), Some(text.as_str()));
    }

    #[test]
    fn spacing_escapes_and_odd_shapes_keep_their_bytes() {
        let big = "é\\\"]}{[".repeat(MIN_BLOB);
        for text in [
            format!("{{ \"messages\" : [ \"{big}\" , {{\"a\":\"{big}\"}} ] , \"tools\" : [1] }}"),
            format!("[\"{big}\"]"),
            format!("{{\"messages\":\"{big}\"}}"),
            format!("{{\"messages\":[\"{big}\""),
            String::new(),
            "{}".to_string(),
            format!("{{\"tools\":{{\"x\":\"{big}\"}}}} trailing"),
        ] {
            let split = split(&text);
            assert_eq!(joined(&split).as_deref(), Some(text.as_str()), "{text}");
        }
        let spaced = format!("{{ \"messages\" : [ \"{big}\" , 1 ] }}");
        assert_eq!(split(&spaced).parts.len(), 1);
    }

    #[test]
    fn a_misplaced_offset_or_a_missing_blob_is_refused() {
        let bodies = HashMap::from([(1, "ab".to_string())]);
        assert_eq!(rebuild("xy", Some("[[1,1]]"), &bodies).unwrap(), "xaby");
        assert!(rebuild("xy", Some("[[3,1]]"), &bodies).is_err());
        assert!(rebuild("xy", Some("[[1,2]]"), &bodies).is_err());
        assert!(rebuild("xy", Some("[[1,1],[0,1]]"), &bodies).is_err());
        assert!(rebuild("xy", Some("{}"), &bodies).is_err());
        assert!(
            rebuild("é", Some("[[1,1]]"), &bodies).is_err(),
            "not a char boundary"
        );
    }
}
