//! Fitting a model request to the model's context window: a token estimate, the shortening of
//! tool outputs shown to the Executor, and the lowering of `max_tokens` to what is left. Plain
//! functions over plain data, so a replay fits a request exactly as the recorded run did.
//!
//! The estimate is deliberately pessimistic (three bytes of text per token, a few tokens per
//! message), since a request that does not fit costs a round trip and a fitted one that was
//! over-shortened only loses text the model could not have used. When a server reports the
//! real size of a request it refused, the estimate is scaled by what it said (`scale_permille`).

use serde_json::{json, Value};

use crate::model::{ChatRequest, Fit};

/// Bytes of request text per estimated token.
pub const BYTES_PER_TOKEN: usize = 3;
/// Tokens a chat template adds around each message (role markers, separators).
pub const TOKENS_PER_MESSAGE: u64 = 8;
/// The fewest completion tokens a fitted request keeps for the answer (or `max_tokens`, when
/// the agent asks for fewer): an answer cut off below this breaks its contract anyway.
pub const MIN_COMPLETION_TOKENS: u32 = 256;
/// A tool output shown to the model is never shortened below this many bytes.
pub const MIN_SHOWN_BYTES: usize = 600;

/// A request to fit: its messages with every tool output in full, and which messages are tool
/// results (by index) with the full document shown there.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    pub request: ChatRequest,
    pub tool_results: Vec<(usize, Value)>,
}

/// Why a request was not sent: it cannot fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow {
    /// The estimated prompt, after every tool output was shortened as far as it goes.
    pub prompt_tokens: u64,
    /// The completion tokens the answer needs at least.
    pub completion_tokens: u32,
    pub context_tokens: u32,
}

impl Overflow {
    pub fn message(&self) -> String {
        format!(
            "not sent: the request needs about {} tokens ({} in the messages, at least {} for \
             the answer), more than the model's context of {} tokens (context_tokens)",
            self.prompt_tokens + u64::from(self.completion_tokens),
            self.prompt_tokens,
            self.completion_tokens,
            self.context_tokens
        )
    }
}

/// What fitting changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    pub request: ChatRequest,
    /// Tool outputs shown shortened.
    pub shortened: usize,
    /// `max_tokens` was lowered below what the agent asked for.
    pub lowered: bool,
}

/// The estimated prompt tokens of `request`: messages, tool calls and the tool catalog.
pub fn estimate(request: &ChatRequest, scale_permille: u64) -> u64 {
    let mut bytes = 0usize;
    for m in &request.messages {
        bytes += m.content.as_deref().map_or(0, str::len);
        for call in &m.tool_calls {
            bytes += call.name.len() + call.arguments.to_string().len() + call.id.len();
        }
    }
    for t in &request.tools {
        bytes += t.name.len() + t.description.len() + t.parameters.to_string().len();
    }
    let raw = (bytes as u64).div_ceil(BYTES_PER_TOKEN as u64)
        + TOKENS_PER_MESSAGE * request.messages.len() as u64;
    (raw * scale_permille.max(1000)).div_ceil(1000)
}

/// `draft` fitted to `context_tokens`, asking for `wanted` completion tokens: sent as it is
/// when it fits; otherwise tool outputs are shortened (largest first, never below
/// [`MIN_SHOWN_BYTES`]) until the prompt leaves `wanted` tokens, and `max_tokens` is lowered
/// to what is left when even that is not enough. A request that leaves fewer than
/// [`MIN_COMPLETION_TOKENS`] (or `wanted`, if smaller) does not fit.
pub fn fit(
    draft: &Draft,
    context_tokens: u32,
    wanted: u32,
    scale_permille: u64,
) -> Result<Fitted, Overflow> {
    let limit = u64::from(context_tokens);
    let floor = wanted.min(MIN_COMPLETION_TOKENS);
    let mut request = draft.request.clone();
    request.fit = Some(Fit {
        context_tokens,
        max_tokens: wanted,
    });
    request.max_tokens = Some(wanted);
    let mut prompt = estimate(&request, scale_permille);
    let mut shortened = 0;
    if prompt + u64::from(wanted) > limit && !draft.tool_results.is_empty() {
        // Bytes of tool output to remove, in estimate terms.
        let excess_tokens = prompt + u64::from(wanted) - limit;
        let excess_bytes =
            (excess_tokens * BYTES_PER_TOKEN as u64 * 1000).div_ceil(scale_permille.max(1000));
        let sizes: Vec<usize> = draft
            .tool_results
            .iter()
            .map(|(_, shown)| shown.to_string().len())
            .collect();
        let caps = caps_for(&sizes, excess_bytes as usize);
        for ((index, shown), cap) in draft.tool_results.iter().zip(caps) {
            if let (Some(cap), Some(message)) = (cap, request.messages.get_mut(*index)) {
                message.content = Some(shorten_shown(shown, cap).to_string());
                shortened += 1;
            }
        }
        prompt = estimate(&request, scale_permille);
    }
    let left = limit.saturating_sub(prompt);
    if left < u64::from(floor) {
        return Err(Overflow {
            prompt_tokens: prompt,
            completion_tokens: floor,
            context_tokens,
        });
    }
    let lowered = left < u64::from(wanted);
    if lowered {
        request.max_tokens = Some(u32::try_from(left).unwrap_or(wanted));
    }
    Ok(Fitted {
        request,
        shortened,
        lowered,
    })
}

/// Per tool output, the size to shorten it to (`None`: unchanged), so that `excess` bytes go:
/// the largest outputs are cut first, all cut ones end at the same size, none below
/// [`MIN_SHOWN_BYTES`].
fn caps_for(sizes: &[usize], excess: usize) -> Vec<Option<usize>> {
    let total: usize = sizes.iter().sum();
    let removable = |cap: usize| -> usize { sizes.iter().map(|s| s.saturating_sub(cap)).sum() };
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let cap = if removable(MIN_SHOWN_BYTES) <= excess || total == 0 {
        MIN_SHOWN_BYTES
    } else {
        // The largest cap that removes enough: binary search over [MIN_SHOWN_BYTES, largest].
        let (mut lo, mut hi) = (MIN_SHOWN_BYTES, largest);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if removable(mid) >= excess {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    };
    sizes.iter().map(|&s| (s > cap).then_some(cap)).collect()
}

/// The shown tool result with its `output` shortened so the whole document takes about `cap`
/// bytes, and a marker saying so that the model can read.
pub fn shorten_shown(shown: &Value, cap: usize) -> Value {
    let full = shown.get("output").cloned().unwrap_or(Value::Null);
    let full_bytes = full.to_string().len();
    let frame = shown.to_string().len().saturating_sub(full_bytes);
    let budget = cap.saturating_sub(frame + 260).max(MIN_SHOWN_BYTES / 2);
    let output = shorten_json(&full, budget);
    let kept = output.to_string().len();
    let mut out = shown.clone();
    if let Some(m) = out.as_object_mut() {
        m.insert("output".into(), output);
        m.insert(
            "shortened".into(),
            json!(format!(
                "diag shortened this output to fit the model's context: {kept} of {full_bytes} \
                 bytes shown. Lists keep their first items (indices unchanged) and cut text ends \
                 in …; the full output is recorded and bindings are checked against it."
            )),
        );
    }
    out
}

/// `v` within `max_bytes` of JSON text (a little more if even the shortest form is longer):
/// lists keep a prefix (so JSON Pointers into what is shown still point at the same values of
/// the full output), as long a prefix as fits with every text whole; when even one item per
/// list does not fit, texts are cut (ending in `…`) as little as fits; if even that is not
/// enough (an object with very many keys), the JSON text itself, cut.
pub fn shorten_json(v: &Value, max_bytes: usize) -> Value {
    let fits = |items: usize, chars: usize| shrink(v, items, chars).to_string().len() <= max_bytes;
    let (all_items, all_chars) = (longest_array(v), longest_string(v));
    if fits(all_items, all_chars) {
        return v.clone();
    }
    // The longest prefix of every list that fits with whole texts.
    if fits(1, all_chars) || (all_items == 0 && fits(0, all_chars)) {
        let (mut lo, mut hi) = (1, all_items);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid, all_chars) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        return shrink(v, lo, all_chars);
    }
    // One item per list, texts cut as little as fits (at least 40 characters kept).
    let items = all_items.min(1);
    if fits(items, 40) {
        let (mut lo, mut hi) = (40, all_chars);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(items, mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        return shrink(v, items, lo);
    }
    if fits(0, 40) {
        return shrink(v, 0, 40);
    }
    let text = v.to_string();
    let mut n = max_bytes;
    loop {
        let mut cut: String = text.chars().take(n).collect();
        cut.push('…');
        let s = Value::String(cut);
        if s.to_string().len() <= max_bytes || n == 0 {
            return s;
        }
        n /= 2;
    }
}

fn shrink(v: &Value, items: usize, chars: usize) -> Value {
    match v {
        Value::Array(a) => Value::Array(
            a.iter()
                .take(items)
                .map(|x| shrink(x, items, chars))
                .collect(),
        ),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), shrink(x, items, chars)))
                .collect(),
        ),
        Value::String(s) if s.chars().count() > chars => {
            let mut cut: String = s.chars().take(chars).collect();
            cut.push('…');
            Value::String(cut)
        }
        other => other.clone(),
    }
}

fn longest_array(v: &Value) -> usize {
    match v {
        Value::Array(a) => a.iter().map(longest_array).max().unwrap_or(0).max(a.len()),
        Value::Object(m) => m.values().map(longest_array).max().unwrap_or(0),
        _ => 0,
    }
}

fn longest_string(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(a) => a.iter().map(longest_string).max().unwrap_or(0),
        Value::Object(m) => m.values().map(longest_string).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;

    fn shown(n: usize) -> Value {
        let matches: Vec<Value> = (0..n)
            .map(|i| json!({"line_no": i, "line": format!("14:02:{i:02} upstream returned 502 {}", "x".repeat(60))}))
            .collect();
        json!({"invocation_id": "inv-1", "tool": "search_logs", "status": "ok",
               "output": {"matches": matches, "truncated": false}})
    }

    fn draft(n: usize) -> Draft {
        let s = shown(n);
        Draft {
            request: ChatRequest::new(vec![
                Message::system("x".repeat(300)),
                Message::user("y".repeat(300)),
                Message::tool_result("c1", s.to_string()),
            ]),
            tool_results: vec![(2, s)],
        }
    }

    #[test]
    fn a_request_that_fits_is_sent_as_it_is() {
        let d = draft(3);
        let f = fit(&d, 8192, 1024, 1000).unwrap();
        assert_eq!(f.shortened, 0);
        assert!(!f.lowered);
        assert_eq!(f.request.max_tokens, Some(1024));
        assert_eq!(f.request.fit.map(|f| f.context_tokens), Some(8192));
        assert_eq!(f.request.messages, d.request.messages);
    }

    #[test]
    fn tool_outputs_are_shortened_with_a_marker_and_keep_their_indices() {
        let d = draft(200);
        let before = estimate(&d.request, 1000);
        let f = fit(&d, 3000, 1024, 1000).unwrap();
        assert_eq!(f.shortened, 1);
        assert!(estimate(&f.request, 1000) + 1024 <= 3000, "{before}");
        let shown: Value =
            serde_json::from_str(f.request.messages[2].content.as_deref().unwrap()).unwrap();
        assert!(shown["shortened"]
            .as_str()
            .unwrap()
            .contains("the full output is recorded"));
        let first = &shown["output"]["matches"][0]["line_no"];
        assert_eq!(
            first,
            &json!(0),
            "a prefix is kept, so /matches/0 is the same line"
        );
        assert_eq!(shown["invocation_id"], "inv-1");
    }

    #[test]
    fn max_tokens_is_lowered_when_shortening_is_not_enough_and_then_it_does_not_fit() {
        let d = draft(0);
        let prompt = estimate(&d.request, 1000);
        let f = fit(&d, (prompt + 500) as u32, 1024, 1000).unwrap();
        assert!(f.lowered);
        assert_eq!(f.request.max_tokens, Some(500));
        let e = fit(&d, (prompt + 100) as u32, 1024, 1000).unwrap_err();
        assert_eq!(e.completion_tokens, MIN_COMPLETION_TOKENS);
        assert!(e.message().contains("context of"), "{}", e.message());
        // A server's report of a larger prompt scales the estimate.
        assert!(estimate(&d.request, 2000) >= 2 * prompt - 1);
    }

    #[test]
    fn shortening_is_deterministic_and_bounded() {
        let v = shown(500)["output"].clone();
        for cap in [100, 700, 5000, 20_000] {
            let a = shorten_json(&v, cap);
            assert_eq!(a, shorten_json(&v, cap));
            assert!(
                a.to_string().len() <= cap.max(4) + 4,
                "{cap}: {}",
                a.to_string().len()
            );
        }
    }
}
