//! The diagnostic verdict a run ends with.

use serde::{Deserialize, Serialize};

/// A diagnostic verdict, ordered `REJECT < LOW_CONFID < PASS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    Reject,
    LowConfid,
    Pass,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Reject => "REJECT",
            Verdict::LowConfid => "LOW_CONFID",
            Verdict::Pass => "PASS",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
