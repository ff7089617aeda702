//! Orchestration events: one terminal record per node attempt, holding only bounded control
//! data (counts, verdicts, failure kinds), never prompts, claim text or tool output.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;

/// The longest text a detail value may hold; longer text is cut at a character boundary.
pub const DETAIL_TEXT_MAX: usize = 160;
/// The most entries a detail may hold; further inserts are ignored.
pub const DETAIL_ENTRIES_MAX: usize = 16;

/// The terminal record of one node attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event<O> {
    /// 1-based position in the run.
    pub seq: u32,
    pub node: String,
    /// 1-based attempt of this node within its round (a technical retry is attempt 2).
    pub attempt: u32,
    /// 1-based evidence round.
    pub round: u32,
    pub status: O,
    pub started_at: Timestamp,
    pub duration_ms: u64,
    pub detail: Detail,
}

/// A scalar detail value. Text is bounded and stripped of control characters when inserted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DetailValue {
    Bool(bool),
    Int(i64),
    Text(String),
}

impl From<bool> for DetailValue {
    fn from(v: bool) -> Self {
        DetailValue::Bool(v)
    }
}
impl From<i64> for DetailValue {
    fn from(v: i64) -> Self {
        DetailValue::Int(v)
    }
}
impl From<u32> for DetailValue {
    fn from(v: u32) -> Self {
        DetailValue::Int(i64::from(v))
    }
}
impl From<usize> for DetailValue {
    fn from(v: usize) -> Self {
        DetailValue::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<&str> for DetailValue {
    fn from(v: &str) -> Self {
        DetailValue::Text(bounded_text(v))
    }
}
impl From<String> for DetailValue {
    fn from(v: String) -> Self {
        DetailValue::Text(bounded_text(&v))
    }
}

/// Bounded key/value control data of one event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Detail(BTreeMap<String, DetailValue>);

impl Detail {
    pub fn insert(&mut self, key: &str, value: impl Into<DetailValue>) {
        if self.0.len() >= DETAIL_ENTRIES_MAX && !self.0.contains_key(key) {
            return;
        }
        let value = match value.into() {
            DetailValue::Text(t) => DetailValue::Text(bounded_text(&t)),
            other => other,
        };
        self.0.insert(bounded_text(key), value);
    }

    pub fn get(&self, key: &str) -> Option<&DetailValue> {
        self.0.get(key)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &DetailValue)> {
        self.0.iter()
    }
}

fn bounded_text(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(DETAIL_TEXT_MAX)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detail_text_is_bounded_and_stripped() {
        let mut d = Detail::default();
        d.insert("reason", "a\u{1b}[31mb".to_string() + &"x".repeat(500));
        match d.get("reason") {
            Some(DetailValue::Text(t)) => {
                assert_eq!(t.chars().count(), DETAIL_TEXT_MAX);
                assert!(t.starts_with("a[31mb"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn detail_entries_are_bounded() {
        let mut d = Detail::default();
        for i in 0..100 {
            d.insert(&format!("k{i}"), i as i64);
        }
        assert_eq!(d.len(), DETAIL_ENTRIES_MAX);
    }
}
