//! What the Gatekeeper records: the raw result of `validate_run`, kept beside its normalized
//! status, and the normalization that fails closed on anything it does not recognise.

use serde::{Deserialize, Serialize};

/// The normalized Gatekeeper status the graph routes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum GateStatus {
    Pass,
    LowConfid,
    Reject,
}

/// The raw result as `validate_run` produced it. `result` and `severity` are kept as text so
/// that a missing or unknown value is representable and can be normalized to REJECT.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GatekeeperRaw {
    pub result: Option<String>,
    pub severity: Option<String>,
    pub checked_bindings: Vec<CheckedBinding>,
    pub audit: Audit,
}

impl GatekeeperRaw {
    /// Number of bindings that passed.
    pub fn passed_bindings(&self) -> usize {
        self.checked_bindings.iter().filter(|b| b.passed).count()
    }
}

/// One binding as checked against the run's recorded tool output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckedBinding {
    pub claim_id: String,
    pub source_invocation_id: String,
    pub tool_name: String,
    pub raw_path: String,
    pub passed: bool,
    /// Cut from the tool output (never copied from the model); present only when passed.
    pub matched_text: Option<String>,
    /// Why the binding failed; absent when passed.
    pub failure: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Audit {
    pub claims: u32,
    pub bindings: u32,
    pub passed: u32,
    pub failed: u32,
    pub unbound_claims: u32,
}

/// Normalizes a raw result: pass → PASS; fail + low-confid → LOW_CONFID; fail + reject →
/// REJECT; anything missing, unknown or inconsistent → REJECT.
pub fn normalize(raw: Option<&GatekeeperRaw>) -> GateStatus {
    let Some(raw) = raw else {
        return GateStatus::Reject;
    };
    let any_failed = raw.checked_bindings.iter().any(|b| !b.passed);
    match (raw.result.as_deref(), raw.severity.as_deref()) {
        (Some("pass"), None) if !any_failed && raw.audit.failed == 0 => GateStatus::Pass,
        (Some("fail"), Some("low-confid")) => GateStatus::LowConfid,
        (Some("fail"), Some("reject")) => GateStatus::Reject,
        _ => GateStatus::Reject,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(result: Option<&str>, severity: Option<&str>) -> GatekeeperRaw {
        GatekeeperRaw {
            result: result.map(str::to_string),
            severity: severity.map(str::to_string),
            ..GatekeeperRaw::default()
        }
    }

    #[test]
    fn normalization_table() {
        let cases = [
            (Some("pass"), None, GateStatus::Pass),
            (Some("fail"), Some("low-confid"), GateStatus::LowConfid),
            (Some("fail"), Some("reject"), GateStatus::Reject),
            (Some("fail"), None, GateStatus::Reject),
            (Some("pass"), Some("reject"), GateStatus::Reject),
            (Some("maybe"), None, GateStatus::Reject),
            (None, None, GateStatus::Reject),
            (Some("fail"), Some("mild"), GateStatus::Reject),
        ];
        for (r, s, want) in cases {
            assert_eq!(normalize(Some(&raw(r, s))), want, "{r:?} {s:?}");
        }
        assert_eq!(normalize(None), GateStatus::Reject);
    }

    #[test]
    fn pass_listing_a_failed_binding_is_inconsistent() {
        let mut r = raw(Some("pass"), None);
        r.checked_bindings.push(CheckedBinding {
            claim_id: "c1".into(),
            source_invocation_id: "inv-1".into(),
            tool_name: "search_logs".into(),
            raw_path: "/x".into(),
            passed: false,
            matched_text: None,
            failure: Some("quote_not_found".into()),
        });
        assert_eq!(normalize(Some(&r)), GateStatus::Reject);
    }
}
