//! Mutations of valid documents, shared by the fuzzing tests: edits of a text character by
//! character (delete, insert a JSON-significant snippet, replace, truncate, duplicate), and
//! edits of a JSON value node by node (remove, replace, null, edit its text, duplicate, swap).

use crate::OrFail;
use diag_core::protocol::json_pointer;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use serde_json::Value;

/// Every JSON Pointer of `doc`, the root included.
pub fn all_pointers(doc: &Value, prefix: String, out: &mut Vec<String>) {
    out.push(prefix.clone());
    match doc {
        Value::Object(m) => {
            for (k, v) in m {
                all_pointers(
                    v,
                    format!("{prefix}/{}", json_pointer::escape_token(k)),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                all_pointers(v, format!("{prefix}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[derive(Debug, Clone)]
pub enum Node {
    Remove,
    Replace(Value),
    SetNull,
    /// Mutates a string value byte-wise; other values are replaced by the text.
    Text(Vec<Edit>),
    Duplicate,
    SwapWithNext,
}

pub fn arb_node_op(values: BoxedStrategy<Value>) -> impl Strategy<Value = Node> {
    prop_oneof![
        3 => Just(Node::Remove),
        3 => values.prop_map(Node::Replace),
        1 => Just(Node::SetNull),
        3 => prop::collection::vec(arb_edit(), 1..4).prop_map(Node::Text),
        1 => Just(Node::Duplicate),
        1 => Just(Node::SwapWithNext),
    ]
}

/// Applies `op` at the pointer `at` of `doc` (the root is never removed).
pub fn apply_node(doc: &mut Value, at: &str, op: &Node) {
    let tokens = json_pointer::tokens(at).or_fail("a JSON pointer");
    let Some((last, parent_tokens)) = tokens.split_last() else {
        if let Node::Replace(v) = op {
            *doc = v.clone();
        }
        return;
    };
    let mut parent = &mut *doc;
    for t in parent_tokens {
        parent = match parent {
            Value::Object(m) => m.get_mut(t).or_fail("the pointer leads to a member"),
            Value::Array(a) => &mut a[t.parse::<usize>().or_fail("an array index")],
            _ => unreachable!(),
        };
    }
    match parent {
        Value::Object(m) => match op {
            Node::Remove => {
                m.remove(last);
            }
            Node::Replace(v) => {
                m.insert(last.clone(), v.clone());
            }
            Node::SetNull => {
                m.insert(last.clone(), Value::Null);
            }
            Node::Text(edits) => {
                let v = m.get_mut(last).or_fail("the member to mutate");
                *v = Value::String(edit_text(&text_of(v), edits));
            }
            // Objects have no order to duplicate or swap in; rename the member instead.
            Node::Duplicate | Node::SwapWithNext => {
                if let Some(v) = m.remove(last) {
                    m.insert(format!("{last}_"), v);
                }
            }
        },
        Value::Array(a) => {
            let i: usize = last.parse().or_fail("an array index");
            match op {
                Node::Remove => {
                    a.remove(i);
                }
                Node::Replace(v) => a[i] = v.clone(),
                Node::SetNull => a[i] = Value::Null,
                Node::Text(edits) => a[i] = Value::String(edit_text(&text_of(&a[i]), edits)),
                Node::Duplicate => {
                    let v = a[i].clone();
                    a.insert(i, v);
                }
                Node::SwapWithNext => {
                    if i + 1 < a.len() {
                        a.swap(i, i + 1);
                    }
                }
            }
        }
        _ => unreachable!(),
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One edit of a text, positions taken modulo its length in characters.
#[derive(Debug, Clone)]
pub enum Edit {
    Delete(Index, usize),
    Insert(Index, String),
    Replace(Index, char),
    Truncate(Index),
    Duplicate(Index, usize),
}

pub fn arb_edit() -> impl Strategy<Value = Edit> {
    let snippet = prop_oneof![
        select(
            &[
                "\"",
                "\\",
                "{",
                "}",
                "[",
                "]",
                ",",
                ":",
                "null",
                "\"kind\":",
                "~",
                "/",
                "\u{0}",
                "\u{fffd}",
                "é",
                "\u{202e}",
                "1e999",
                "-0",
                "\\u0000",
                "\\ud800",
            ][..]
        )
        .prop_map(str::to_string),
        ".{1,8}",
    ];
    prop_oneof![
        2 => (any::<Index>(), 1usize..16).prop_map(|(i, n)| Edit::Delete(i, n)),
        2 => (any::<Index>(), snippet).prop_map(|(i, s)| Edit::Insert(i, s)),
        2 => (any::<Index>(), any::<char>()).prop_map(|(i, c)| Edit::Replace(i, c)),
        1 => any::<Index>().prop_map(Edit::Truncate),
        1 => (any::<Index>(), 1usize..32).prop_map(|(i, n)| Edit::Duplicate(i, n)),
    ]
}

pub fn edit_text(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for edit in edits {
        let at = |i: &Index, extra: usize| i.index(chars.len() + extra);
        match edit {
            Edit::Delete(i, n) if !chars.is_empty() => {
                let start = at(i, 0);
                let end = (start + n).min(chars.len());
                chars.drain(start..end);
            }
            Edit::Insert(i, s) => {
                let pos = at(i, 1);
                chars.splice(pos..pos, s.chars());
            }
            Edit::Replace(i, c) if !chars.is_empty() => {
                let pos = at(i, 0);
                chars[pos] = *c;
            }
            Edit::Truncate(i) => {
                let pos = at(i, 1);
                chars.truncate(pos);
            }
            Edit::Duplicate(i, n) if !chars.is_empty() => {
                let start = at(i, 0);
                let end = (start + n).min(chars.len());
                let copy: Vec<char> = chars[start..end].to_vec();
                chars.splice(end..end, copy);
            }
            _ => {}
        }
    }
    chars.into_iter().collect()
}

/// `seed` mutated at 1 to `max_ops` nodes, each picked among the nodes the document has by then.
pub fn arb_mutated(
    seed: Value,
    values: BoxedStrategy<Value>,
    max_ops: usize,
) -> impl Strategy<Value = Value> {
    prop::collection::vec((any::<Index>(), arb_node_op(values)), 1..=max_ops).prop_map(move |ops| {
        let mut doc = seed.clone();
        for (at, op) in ops {
            let mut pointers = Vec::new();
            all_pointers(&doc, String::new(), &mut pointers);
            let at = at.get(&pointers).clone();
            apply_node(&mut doc, &at, &op);
        }
        doc
    })
}
