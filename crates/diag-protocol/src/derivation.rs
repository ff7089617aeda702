//! Verified derivations (openspec/specs/verified-evidence/spec.md, "A computed value SHALL
//! reach an answer only with its arithmetic checked"): a value the answer computes from
//! observed ones (a percentage, a difference, a duration, a time plus an interval, a
//! converted unit or zone) is stated as a [`Derivation`]: its result, an operation from a
//! closed set ([`Op`]) and its operands, each a value the evidence of an allowed claim
//! shows. [`check_derivation`] reads every operand as a typed value, requires it observed in
//! the evidence of the claim it names, evaluates the operation exactly (decimal arithmetic, no
//! floats; times in seconds) and accepts the stated result only when it equals the exact
//! result rounded to the precision written (half away from zero). Everything else is refused
//! with a reason that names it ([`DerivationError`]).
//!
//! Pure: plain data in, a verdict out.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use rust_decimal::prelude::ToPrimitive;
use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};

use crate::grounding::values::{
    parse_time, parse_zone_word, read_number, Precision, TimeOfDay, Zone,
};
use crate::grounding::EvidenceContext;

/// One computed value an answer states, and how it was computed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Derivation {
    /// `d1`, `d2`…: how the answer cites it (`96 % [d1]`).
    pub id: String,
    /// The result as the answer states it: a decimal number (`96`, `2.5`) or a time of day
    /// (`14:02`, `09:02:30`).
    pub value: String,
    /// The result's unit: `%`, a duration (`s`, `min`, `ms`…), a size (`MiB`…), a rate
    /// (`/s`), a zone (`EST`, `+01:00`), or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// The operation's name ([`Op::name`]).
    pub op: String,
    pub operands: Vec<Operand>,
}

/// One operand: a value the evidence of an allowed claim shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operand {
    pub claim: String,
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

/// The closed set of operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// a + b + …
    Sum,
    /// a − b
    Difference,
    /// a / b
    Ratio,
    /// a / b × 100, in `%`
    Percentage,
    /// a per unit time: a count and a duration, the result per the unit's time (`/s`).
    Rate,
    /// a time of day plus a duration
    TimePlus,
    /// a time of day minus another (a duration), or minus a duration (a time of day: an
    /// interval's start from its end and length)
    TimeMinus,
    /// one quantity in another unit of its kind (ms ↔ s ↔ min, B ↔ KiB ↔ MiB)
    ConvertUnit,
    /// one time of day in another zone
    ConvertZone,
    Min,
    Max,
    /// how many operands are listed
    Count,
}

impl Op {
    pub const ALL: [Op; 12] = [
        Op::Sum,
        Op::Difference,
        Op::Ratio,
        Op::Percentage,
        Op::Rate,
        Op::TimePlus,
        Op::TimeMinus,
        Op::ConvertUnit,
        Op::ConvertZone,
        Op::Min,
        Op::Max,
        Op::Count,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Difference => "difference",
            Op::Ratio => "ratio",
            Op::Percentage => "percentage",
            Op::Rate => "rate",
            Op::TimePlus => "time_plus",
            Op::TimeMinus => "time_minus",
            Op::ConvertUnit => "convert_unit",
            Op::ConvertZone => "convert_zone",
            Op::Min => "min",
            Op::Max => "max",
            Op::Count => "count",
        }
    }

    pub fn parse(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == name)
    }

    /// How many operands it takes: (at least, at most).
    fn arity(self) -> (usize, usize) {
        match self {
            Op::Sum | Op::Min | Op::Max => (2, usize::MAX),
            Op::Count => (1, usize::MAX),
            Op::Difference | Op::Ratio | Op::Percentage | Op::Rate => (2, 2),
            Op::TimePlus | Op::TimeMinus => (2, 2),
            Op::ConvertUnit | Op::ConvertZone => (1, 1),
        }
    }

    /// The symbol the arithmetic is shown with.
    fn symbol(self) -> &'static str {
        match self {
            Op::Sum | Op::TimePlus => " + ",
            Op::Difference | Op::TimeMinus => " − ",
            Op::Ratio | Op::Percentage | Op::Rate => " / ",
            Op::Min | Op::Max | Op::Count | Op::ConvertUnit | Op::ConvertZone => ", ",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a derivation is refused: one line whose first word is the reason's code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DerivationError {
    #[error("derivation_id_invalid: `{id}` is not a derivation id (d1, d2, …)")]
    BadId { id: String },
    #[error("derivation_duplicate_id: {id} is listed twice")]
    Duplicate { id: String },
    #[error("derivation_op_unknown: {id} uses `{op}`, not one of {}", op_names())]
    UnknownOp { id: String, op: String },
    #[error("derivation_operands: {id} ({op}) takes {expected} operand(s), has {found}")]
    Arity {
        id: String,
        op: Op,
        expected: String,
        found: usize,
    },
    /// An operand names a claim that is not allowed (refused, unknown, or a derivation: a
    /// derivation is computed from observed values only, never from another derivation).
    #[error("derivation_operand_not_allowed: {id} takes {value} from {claim}, which is not an allowed claim")]
    NotAllowed {
        id: String,
        claim: String,
        value: String,
    },
    #[error(
        "derivation_operand_not_observed: {id}: {value} is not shown by the evidence of {claim}"
    )]
    NotObserved {
        id: String,
        claim: String,
        value: String,
    },
    #[error("derivation_value_unreadable: {id}: `{text}` is not {expected}")]
    Unreadable {
        id: String,
        text: String,
        expected: &'static str,
    },
    #[error("derivation_unit: {id}: {detail}")]
    Unit { id: String, detail: String },
    #[error("derivation_wrong: {id}: {arithmetic} = {exact}, stated {stated}")]
    Wrong {
        id: String,
        arithmetic: String,
        exact: String,
        stated: String,
    },
    #[error("derivation_not_cited: {id} is listed but the answer does not cite it")]
    NotCited { id: String },
}

impl DerivationError {
    /// The reason's code (`derivation_wrong`, …).
    pub fn reason(&self) -> &'static str {
        match self {
            DerivationError::BadId { .. } => "derivation_id_invalid",
            DerivationError::Duplicate { .. } => "derivation_duplicate_id",
            DerivationError::UnknownOp { .. } => "derivation_op_unknown",
            DerivationError::Arity { .. } => "derivation_operands",
            DerivationError::NotAllowed { .. } => "derivation_operand_not_allowed",
            DerivationError::NotObserved { .. } => "derivation_operand_not_observed",
            DerivationError::Unreadable { .. } => "derivation_value_unreadable",
            DerivationError::Unit { .. } => "derivation_unit",
            DerivationError::Wrong { .. } => "derivation_wrong",
            DerivationError::NotCited { .. } => "derivation_not_cited",
        }
    }
}

fn op_names() -> String {
    Op::ALL.map(Op::name).join(", ")
}

/// A derivation that holds, with its arithmetic as a reader is shown it:
/// `96 % = 48 / 50 × 100 (c6, c4)`. `expression` and `claims` are the parts readers link
/// (each claim to its card); `arithmetic` is the two written as one line, stored as well
/// so that any reader of a stored run can show it whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckedDerivation {
    pub id: String,
    pub op: String,
    /// The stated result with its unit.
    pub result: String,
    /// The operation over the operands' values with their units: `48 / 50 × 100`.
    pub expression: String,
    /// The claims the operands are observed in, in operand order (an id may repeat).
    pub claims: Vec<String>,
    /// `48 / 50 × 100 (c6, c4)`: [`CheckedDerivation::arithmetic_of`] its expression and claims.
    pub arithmetic: String,
}

impl CheckedDerivation {
    /// A checked derivation whose `arithmetic` is written from its expression and claims.
    pub fn new(id: &str, op: &str, result: &str, expression: &str, claims: Vec<String>) -> Self {
        let arithmetic = Self::arithmetic_of(expression, &claims);
        CheckedDerivation {
            id: id.to_string(),
            op: op.to_string(),
            result: result.to_string(),
            expression: expression.to_string(),
            claims,
            arithmetic,
        }
    }

    /// `48 / 50 × 100 (c6, c4)`: the expression, then its operands' claims in parentheses.
    pub fn arithmetic_of(expression: &str, claims: &[String]) -> String {
        format!("{expression} ({})", claims.join(", "))
    }

    /// `96 % = 48 / 50 × 100 (c6, c4)`.
    pub fn shown(&self) -> String {
        format!("{} = {}", self.result, self.arithmetic)
    }
}

/// The context an answer's tokens are checked against when it states derivations: `context`
/// (the question and the allowed claims' evidence) plus, as observed text, the result of
/// each checked derivation with its unit (`96 %`, `5 s`, `09:02 EST`). A computed value thus
/// passes the token rule only through a derivation that holds; with none, `context` itself.
pub fn context_with_derivations<'a>(
    context: &'a EvidenceContext,
    checked: &[CheckedDerivation],
) -> Cow<'a, EvidenceContext> {
    if checked.is_empty() {
        return Cow::Borrowed(context);
    }
    let mut extended = context.clone();
    for d in checked {
        extended.push_text(&d.result);
    }
    Cow::Owned(extended)
}

/// Whether `id` is a derivation id: `d` and one to four digits, not starting with 0.
pub fn is_derivation_id(id: &str) -> bool {
    let Some(n) = id.strip_prefix('d') else {
        return false;
    };
    !n.is_empty() && n.len() <= 4 && !n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit())
}

/// Checks the derivations of one answer: ids well formed and unique, each one cited by the
/// answer (`cited`: the derivation ids its markers name), each one holding
/// ([`check_derivation`]). `evidence` gives the evidence context of an allowed claim (and
/// `None` for any other id).
pub fn check_derivations<'e>(
    derivations: &[Derivation],
    evidence: &dyn Fn(&str) -> Option<&'e EvidenceContext>,
    cited: &[String],
) -> Result<Vec<CheckedDerivation>, DerivationError> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(derivations.len());
    for d in derivations {
        if !is_derivation_id(&d.id) {
            return Err(DerivationError::BadId { id: d.id.clone() });
        }
        if !seen.insert(d.id.as_str()) {
            return Err(DerivationError::Duplicate { id: d.id.clone() });
        }
        out.push(check_derivation(d, evidence)?);
        if !cited.iter().any(|c| c == &d.id) {
            return Err(DerivationError::NotCited { id: d.id.clone() });
        }
    }
    Ok(out)
}

/// Checks one derivation: its operation, its operands (each observed in the evidence of the
/// allowed claim it names, as a typed value) and its result (the exact result rounded to the
/// precision written).
pub fn check_derivation<'e>(
    d: &Derivation,
    evidence: &dyn Fn(&str) -> Option<&'e EvidenceContext>,
) -> Result<CheckedDerivation, DerivationError> {
    let id = d.id.as_str();
    let op = Op::parse(&d.op).ok_or_else(|| DerivationError::UnknownOp {
        id: id.to_string(),
        op: bounded(&d.op),
    })?;
    let (least, most) = op.arity();
    let found = d.operands.len();
    if found < least || found > most {
        let expected = match (least, most) {
            (a, b) if a == b => a.to_string(),
            (a, _) => format!("{a} or more"),
        };
        return Err(DerivationError::Arity {
            id: id.to_string(),
            op,
            expected,
            found,
        });
    }
    for operand in &d.operands {
        observed(id, operand, evidence)?;
    }
    let cx = Cx { id, d, op };
    let exact = cx.evaluate()?;
    let claims: Vec<String> = d.operands.iter().map(|o| o.claim.clone()).collect();
    let operands: Vec<String> = d.operands.iter().map(with_unit_op).collect();
    let joined = operands.join(op.symbol());
    let expression = match op {
        Op::Percentage => format!("{joined} × 100"),
        Op::Min | Op::Max | Op::Count => format!("{}({joined})", op.name()),
        Op::ConvertUnit | Op::ConvertZone => format!("{joined} in {}", unit_or_none(&d.unit)),
        Op::Rate => format!("{joined}, per {}", unit_or_none(&d.unit)),
        _ => joined,
    };
    match exact.matches(&d.value, &d.unit) {
        Ok(()) => Ok(CheckedDerivation::new(
            id,
            op.name(),
            &with_unit(&d.value, &d.unit),
            &expression,
            claims,
        )),
        Err(exact) => Err(DerivationError::Wrong {
            id: id.to_string(),
            arithmetic: CheckedDerivation::arithmetic_of(&expression, &claims),
            exact,
            stated: with_unit(&d.value, &d.unit),
        }),
    }
}

fn unit_or_none(unit: &Option<String>) -> &str {
    unit.as_deref().unwrap_or("(no unit)")
}

fn with_unit(value: &str, unit: &Option<String>) -> String {
    match unit.as_deref() {
        None | Some("") => bounded(value),
        Some("%") => format!("{} %", bounded(value)),
        Some(u) => format!("{} {}", bounded(value), bounded(u)),
    }
}

fn with_unit_op(o: &Operand) -> String {
    with_unit(&o.value, &o.unit)
}

fn bounded(s: &str) -> String {
    crate::gatekeeper::bounded_token_text(s)
}

/// The operand's value is shown by the evidence of the allowed claim it names: read as the
/// answer's tokens are read (one salient token at least, none unbound), and, with a unit,
/// written with that unit in the evidence (`5000ms`, `5000 ms`).
fn observed<'e>(
    id: &str,
    o: &Operand,
    evidence: &dyn Fn(&str) -> Option<&'e EvidenceContext>,
) -> Result<(), DerivationError> {
    let Some(context) = evidence(&o.claim) else {
        return Err(DerivationError::NotAllowed {
            id: id.to_string(),
            claim: bounded(&o.claim),
            value: bounded(&o.value),
        });
    };
    let check = context.check(&o.value);
    let salient = check.checked > 0 && check.unbound.is_empty();
    let shown = match o.unit.as_deref().filter(|u| !u.is_empty()) {
        // A single digit is no salient token: it is read in the evidence as the number it is.
        None => salient || check.checked == 0 && context.shows_quantity(&o.value, &str::is_empty),
        // A zone is read with the time (`14:02 EST`): the time and its zone together.
        Some(zone) if parse_zone_word(zone).is_some() => {
            salient
                && context
                    .check(&format!("{} {zone}", o.value))
                    .unbound
                    .is_empty()
        }
        Some(unit) => match unit_of(unit) {
            Some(u) => context.shows_quantity(&o.value, &|w| unit_of(w) == Some(u)),
            None => false,
        },
    };
    if shown {
        Ok(())
    } else {
        Err(DerivationError::NotObserved {
            id: id.to_string(),
            claim: bounded(&o.claim),
            value: with_unit_op(o),
        })
    }
}

/// The kind of a quantity's unit, and its size in that kind's base unit (seconds, bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Duration,
    Bytes,
    Percent,
}

/// A unit diag converts: its kind and its size in the kind's base unit, as a decimal
/// numerator over a power of ten (so every factor is exact).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Unit {
    kind: Kind,
    /// Size in the base unit × 10^9 (nanoseconds, nano-bytes): exact for every unit below.
    nanos: i128,
}

/// The units diag converts, by every spelling it reads (compared without case but for the
/// binary sizes, whose `i` is kept: `KiB`, `kib`).
fn unit_of(word: &str) -> Option<Unit> {
    const NS: i128 = 1;
    const S: i128 = 1_000_000_000;
    let lower = word.trim().to_ascii_lowercase();
    let d = |n: i128| {
        Some(Unit {
            kind: Kind::Duration,
            nanos: n,
        })
    };
    let b = |n: i128| {
        Some(Unit {
            kind: Kind::Bytes,
            nanos: n * S,
        })
    };
    match lower.as_str() {
        "ns" | "nanosecond" | "nanoseconds" => d(NS),
        "us" | "\u{b5}s" | "\u{3bc}s" | "microsecond" | "microseconds" => d(1_000),
        "ms" | "msec" | "millisecond" | "milliseconds" => d(1_000_000),
        "s" | "sec" | "secs" | "second" | "seconds" => d(S),
        "m" | "min" | "mins" | "minute" | "minutes" => d(60 * S),
        "h" | "hr" | "hrs" | "hour" | "hours" => d(3_600 * S),
        "d" | "day" | "days" => d(86_400 * S),
        "b" | "byte" | "bytes" => b(1),
        "kb" => b(1_000),
        "mb" => b(1_000_000),
        "gb" => b(1_000_000_000),
        "tb" => b(1_000_000_000_000),
        "kib" => b(1 << 10),
        "mib" => b(1 << 20),
        "gib" => b(1 << 30),
        "tib" => b(1 << 40),
        "%" | "percent" => Some(Unit {
            kind: Kind::Percent,
            nanos: S,
        }),
        _ => None,
    }
}

/// A rate's time unit: `/s`, `per second`, `req/s`, `/min`, `per minute`, `/h`.
fn per_unit(word: &str) -> Option<Unit> {
    let w = word.trim();
    let tail = w
        .rsplit_once('/')
        .map(|(_, t)| t)
        .or_else(|| w.strip_prefix("per "))?;
    unit_of(tail).filter(|u| u.kind == Kind::Duration)
}

/// An exact result, and how the stated one is compared with it.
enum Exact {
    Number(Decimal),
    /// Seconds since midnight (possibly with a fraction), in `zone`.
    Time(Decimal, Zone),
}

impl Exact {
    /// `Ok` when `stated` (with `unit`) equals this result at the precision written, else the
    /// exact result as text.
    fn matches(&self, stated: &str, unit: &Option<String>) -> Result<(), String> {
        match self {
            Exact::Number(exact) => {
                let Some((value, places)) = plain_decimal(stated) else {
                    return Err(show_decimal(*exact));
                };
                let rounded =
                    exact.round_dp_with_strategy(places, RoundingStrategy::MidpointAwayFromZero);
                if rounded == value {
                    Ok(())
                } else {
                    Err(with_unit(&show_decimal(*exact), unit))
                }
            }
            Exact::Time(secs, zone) => {
                // In the zone's own word when the statement names it (`09:02:03 EST`).
                let shown = match unit.as_deref().map(str::trim) {
                    Some(word) if parse_zone_word(word).as_ref() == Some(zone) => {
                        format!("{} {}", show_time(*secs, &Zone::Unstated), bounded(word))
                    }
                    _ => show_time(*secs, zone),
                };
                let Some(time) = parse_time(stated.trim()) else {
                    return Err(shown);
                };
                let step = match time.precision {
                    Precision::Hour => Decimal::from(3_600),
                    Precision::Minute => Decimal::from(60),
                    Precision::Second | Precision::Fraction(_) => Decimal::ONE,
                };
                let day = Decimal::from(86_400);
                // On the clock face: a conversion west of UTC may go below midnight.
                let rounded = (((*secs / step)
                    .round_dp_with_strategy(0, RoundingStrategy::MidpointAwayFromZero)
                    * step)
                    % day
                    + day)
                    % day;
                if Decimal::from(time.secs) == rounded {
                    Ok(())
                } else {
                    Err(shown)
                }
            }
        }
    }
}

/// A result as a derivation states it: a plain decimal (`96`, `-2`, `0.50`), its value and
/// how many decimals were written (`96.0` states one).
fn plain_decimal(text: &str) -> Option<(Decimal, u32)> {
    let t = text.trim();
    let digits = t.strip_prefix('-').unwrap_or(t);
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let well_formed = !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
        && frac.is_empty() != digits.contains('.');
    if !well_formed || int.len() + frac.len() > 24 {
        return None;
    }
    let value: Decimal = t.parse().ok()?;
    Some((value, u32::try_from(frac.len()).ok()?))
}

fn show_decimal(d: Decimal) -> String {
    // At most six decimals shown for a repeating result (2/3 = 0.666667).
    d.round_dp_with_strategy(6, RoundingStrategy::MidpointAwayFromZero)
        .normalize()
        .to_string()
}

fn show_time(secs: Decimal, zone: &Zone) -> String {
    let day = Decimal::from(86_400);
    let s = (secs % day + day) % day;
    let whole = s.trunc().to_i64().unwrap_or(0);
    let (h, m, sec) = (whole / 3600, whole % 3600 / 60, whole % 60);
    let zone = match zone {
        Zone::Offset(0) => " UTC".to_string(),
        Zone::Offset(min) => format!(" {}", offset_text(*min)),
        _ => String::new(),
    };
    format!("{h:02}:{m:02}:{sec:02}{zone}")
}

fn offset_text(min: i32) -> String {
    let sign = if min < 0 { '-' } else { '+' };
    format!("{sign}{:02}:{:02}", min.abs() / 60, min.abs() % 60)
}

/// What `time_plus` (and `time_minus` with a duration) takes as operands.
const TIME_AND_DURATION: &str = "a time plus a duration with its unit";

/// One derivation being evaluated.
struct Cx<'a> {
    id: &'a str,
    d: &'a Derivation,
    op: Op,
}

impl Cx<'_> {
    fn unreadable(&self, text: &str, expected: &'static str) -> DerivationError {
        DerivationError::Unreadable {
            id: self.id.to_string(),
            text: bounded(text),
            expected,
        }
    }

    fn unit_error(&self, detail: String) -> DerivationError {
        DerivationError::Unit {
            id: self.id.to_string(),
            detail,
        }
    }

    /// An operand as a number (any notation grounding reads: `5,000`, `2.5k`).
    fn number(&self, o: &Operand) -> Result<Decimal, DerivationError> {
        let t = o.value.trim();
        let (negative, digits) = match t.strip_prefix(['-', '\u{2212}']) {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let read = read_number(digits).ok_or_else(|| self.unreadable(&o.value, "a number"))?;
        let mut value: Decimal = read
            .value
            .parse()
            .map_err(|_| self.unreadable(&o.value, "a number"))?;
        if negative {
            value = -value;
        }
        Ok(value)
    }

    /// An operand as a time of day, its zone from the value (`14:02Z`) or its unit (`UTC`).
    fn time(&self, o: &Operand) -> Result<(Decimal, Zone), DerivationError> {
        let mut t =
            parse_time(o.value.trim()).ok_or_else(|| self.unreadable(&o.value, "a time of day"))?;
        if let Some(u) = o.unit.as_deref().filter(|u| !u.is_empty()) {
            let zone = parse_zone_word(u).ok_or_else(|| {
                self.unit_error(format!("`{}` is not a zone diag knows", bounded(u)))
            })?;
            if t.zone != Zone::Unstated && t.zone != zone {
                return Err(self.unit_error(format!(
                    "{} is written with a zone and the unit {} names another",
                    bounded(&o.value),
                    bounded(u)
                )));
            }
            t.zone = zone;
        }
        Ok((Decimal::from(t.secs) + fraction(&t), t.zone))
    }

    /// The unit of an operand or the result, when it has one diag converts.
    fn unit(&self, unit: &Option<String>) -> Result<Option<Unit>, DerivationError> {
        match unit.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
            None => Ok(None),
            Some(u) => unit_of(u).map(Some).ok_or_else(|| {
                self.unit_error(format!("`{}` is not a unit diag converts", bounded(u)))
            }),
        }
    }

    /// Operands of one unit (or none), the result in the same.
    fn same_units(&self) -> Result<Option<Unit>, DerivationError> {
        let mut units = Vec::new();
        for o in &self.d.operands {
            units.push(self.unit(&o.unit)?);
        }
        let first = units.first().copied().flatten();
        if units.iter().any(|u| *u != first) {
            return Err(self.unit_error("its operands are in different units".to_string()));
        }
        Ok(first)
    }

    /// Whether an operand is written with a duration's unit (`30 min`, `5000 ms`).
    fn is_duration(&self, o: &Operand) -> bool {
        matches!(self.unit(&o.unit), Ok(Some(u)) if u.kind == Kind::Duration)
    }

    /// A duration operand in seconds; `needs` says what the operation takes when the operand
    /// is not a duration with its unit.
    fn duration_secs(&self, o: &Operand, needs: &str) -> Result<Decimal, DerivationError> {
        let unit = self
            .unit(&o.unit)?
            .filter(|u| u.kind == Kind::Duration)
            .ok_or_else(|| self.unit_error(needs.to_string()))?;
        Ok(self.number(o)? * Decimal::from_i128_with_scale(unit.nanos, 9))
    }

    fn numbers(&self) -> Result<Vec<Decimal>, DerivationError> {
        self.d.operands.iter().map(|o| self.number(o)).collect()
    }

    fn divide(&self, a: Decimal, b: Decimal) -> Result<Decimal, DerivationError> {
        a.checked_div(b)
            .ok_or_else(|| self.unit_error("it divides by zero".to_string()))
    }

    fn evaluate(&self) -> Result<Exact, DerivationError> {
        let d = self.d;
        let result_unit = || self.unit(&d.unit);
        match self.op {
            Op::Sum | Op::Difference | Op::Min | Op::Max => {
                let unit = self.same_units()?;
                if result_unit()? != unit {
                    return Err(
                        self.unit_error("the result's unit is not its operands' unit".to_string())
                    );
                }
                let n = self.numbers()?;
                let v = match self.op {
                    Op::Sum => n.iter().copied().sum(),
                    Op::Difference => n[0] - n[1],
                    Op::Min => n.iter().copied().min().unwrap_or_default(),
                    _ => n.iter().copied().max().unwrap_or_default(),
                };
                Ok(Exact::Number(v))
            }
            Op::Ratio | Op::Percentage => {
                self.same_units()?;
                let want = match self.op {
                    Op::Percentage => Some(Kind::Percent),
                    _ => None,
                };
                let got = result_unit()?.map(|u| u.kind);
                let ratio_x = self.op == Op::Ratio
                    && d.unit
                        .as_deref()
                        .is_some_and(|u| u.eq_ignore_ascii_case("x"));
                if got != want && !ratio_x {
                    return Err(self.unit_error(match self.op {
                        Op::Percentage => "a percentage is stated in %".to_string(),
                        _ => "a ratio has no unit (or `x`)".to_string(),
                    }));
                }
                let n = self.numbers()?;
                let mut v = self.divide(n[0], n[1])?;
                if self.op == Op::Percentage {
                    v *= Decimal::ONE_HUNDRED;
                }
                Ok(Exact::Number(v))
            }
            Op::Count => {
                if d.unit.as_deref().is_some_and(|u| !u.trim().is_empty()) {
                    return Err(self.unit_error("a count has no unit".to_string()));
                }
                Ok(Exact::Number(Decimal::from(d.operands.len())))
            }
            Op::Rate => {
                let per = d.unit.as_deref().and_then(per_unit).ok_or_else(|| {
                    self.unit_error(
                        "a rate is stated per a unit of time (`/s`, `/min`)".to_string(),
                    )
                })?;
                if self
                    .unit(&d.operands[0].unit)?
                    .is_some_and(|u| u.kind == Kind::Duration)
                {
                    return Err(
                        self.unit_error("a rate counts something over a duration".to_string())
                    );
                }
                let over = self
                    .unit(&d.operands[1].unit)?
                    .filter(|u| u.kind == Kind::Duration)
                    .ok_or_else(|| {
                        self.unit_error(
                            "a rate's second operand is a duration with its unit".to_string(),
                        )
                    })?;
                let n = self.numbers()?;
                let count = n[0];
                let nanos = n[1] * Decimal::from_i128_with_scale(over.nanos, 0);
                let per_nanos = Decimal::from_i128_with_scale(per.nanos, 0);
                Ok(Exact::Number(self.divide(count * per_nanos, nanos)?))
            }
            Op::ConvertUnit => {
                let from = self
                    .unit(&d.operands[0].unit)?
                    .ok_or_else(|| self.unit_error("the operand needs its unit".to_string()))?;
                let to = result_unit()?
                    .ok_or_else(|| self.unit_error("the result needs its unit".to_string()))?;
                if from.kind != to.kind || from.kind == Kind::Percent {
                    return Err(
                        self.unit_error("it converts between units of different kinds".to_string())
                    );
                }
                let v = self.number(&d.operands[0])? * Decimal::from_i128_with_scale(from.nanos, 0);
                Ok(Exact::Number(
                    self.divide(v, Decimal::from_i128_with_scale(to.nanos, 0))?,
                ))
            }
            Op::TimePlus => {
                let (t, zone) = self.time(&d.operands[0])?;
                let secs = self.duration_secs(&d.operands[1], TIME_AND_DURATION)?;
                self.stated_zone(&zone)?;
                Ok(Exact::Time(t + secs, zone))
            }
            Op::TimeMinus if self.is_duration(&d.operands[1]) => {
                // A time minus a duration: the start of an interval from its end and length.
                let (t, zone) = self.time(&d.operands[0])?;
                let secs = self.duration_secs(&d.operands[1], TIME_AND_DURATION)?;
                self.stated_zone(&zone)?;
                Ok(Exact::Time(t - secs, zone))
            }
            Op::TimeMinus => {
                let (a, za) = self.time(&d.operands[0])?;
                let (b, zb) = self.time(&d.operands[1])?;
                let (a, b) = match (&za, &zb) {
                    (Zone::Offset(x), Zone::Offset(y)) => (
                        a - Decimal::from(*x) * Decimal::from(60),
                        b - Decimal::from(*y) * Decimal::from(60),
                    ),
                    (Zone::Unstated, Zone::Unstated) => (a, b),
                    _ => {
                        return Err(
                            self.unit_error("its times are not in zones that compare".to_string())
                        )
                    }
                };
                let to = result_unit()?
                    .filter(|u| u.kind == Kind::Duration)
                    .ok_or_else(|| {
                        self.unit_error(
                            "a time minus a time is a duration with its unit".to_string(),
                        )
                    })?;
                let nanos = (a - b) * Decimal::from(1_000_000_000);
                Ok(Exact::Number(self.divide(
                    nanos,
                    Decimal::from_i128_with_scale(to.nanos, 0),
                )?))
            }
            Op::ConvertZone => {
                let (t, from) = self.time(&d.operands[0])?;
                let Zone::Offset(from) = from else {
                    return Err(self.unit_error(
                        "the operand's zone is not one diag converts from".to_string(),
                    ));
                };
                let to = d.unit.as_deref().and_then(parse_zone_word).or_else(|| {
                    parse_time(d.value.trim())
                        .map(|t| t.zone)
                        .filter(|z| *z != Zone::Unstated)
                });
                let Some(Zone::Offset(to)) = to else {
                    return Err(
                        self.unit_error("the result names no zone diag converts to".to_string())
                    );
                };
                let secs = t + Decimal::from(to - from) * Decimal::from(60);
                Ok(Exact::Time(secs, Zone::Offset(to)))
            }
        }
    }

    /// A time result's stated zone, if any, is the operand's.
    fn stated_zone(&self, zone: &Zone) -> Result<(), DerivationError> {
        let stated = self
            .d
            .unit
            .as_deref()
            .filter(|u| !u.trim().is_empty())
            .map(|u| {
                parse_zone_word(u).ok_or_else(|| {
                    self.unit_error(format!("`{}` is not a zone diag knows", bounded(u)))
                })
            })
            .transpose()?
            .or_else(|| {
                parse_time(self.d.value.trim())
                    .map(|t| t.zone)
                    .filter(|z| *z != Zone::Unstated)
            });
        match stated {
            Some(z) if z != *zone => Err(self
                .unit_error("the result is stated in another zone than its operand".to_string())),
            _ => Ok(()),
        }
    }
}

/// The fraction of a second a time was written with.
fn fraction(t: &TimeOfDay) -> Decimal {
    match &t.precision {
        Precision::Fraction(digits) => format!("0.{digits}").parse().unwrap_or_default(),
        _ => Decimal::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn evidence(claims: &[(&str, &str)]) -> HashMap<String, EvidenceContext> {
        claims
            .iter()
            .map(|(id, text)| {
                let mut cx = EvidenceContext::new();
                cx.push_text(text);
                (id.to_string(), cx)
            })
            .collect()
    }

    fn operand(claim: &str, value: &str, unit: Option<&str>) -> Operand {
        Operand {
            claim: claim.into(),
            value: value.into(),
            unit: unit.map(Into::into),
        }
    }

    fn derivation(op: &str, value: &str, unit: Option<&str>, operands: Vec<Operand>) -> Derivation {
        Derivation {
            id: "d1".into(),
            value: value.into(),
            unit: unit.map(Into::into),
            op: op.into(),
            operands,
        }
    }

    fn check(
        ev: &HashMap<String, EvidenceContext>,
        d: &Derivation,
    ) -> Result<CheckedDerivation, DerivationError> {
        check_derivation(d, &|id: &str| ev.get(id))
    }

    /// The demo incident's evidence, one claim each.
    fn demo() -> HashMap<String, EvidenceContext> {
        evidence(&[
            ("c4", "pool max_connections=50"),
            ("c6", "48 of 50 connections held by settlement-batch"),
            ("c1", "14:00:03 settlement-batch started"),
            ("c2", "14:02:05 ERROR pool exhausted, waited 5000ms"),
            ("c3", "2026-11-30T14:02:11Z checkout 502 upstream timeout"),
            ("c5", "first 502 at 14:02 UTC"),
        ])
    }

    #[test]
    fn a_percentage_of_two_observed_counts_holds_and_a_wrong_one_names_its_arithmetic() {
        let ev = demo();
        let ops = || vec![operand("c6", "48", None), operand("c4", "50", None)];
        let ok = check(&ev, &derivation("percentage", "96", Some("%"), ops())).unwrap();
        assert_eq!(ok.shown(), "96 % = 48 / 50 × 100 (c6, c4)");
        let wrong = check(&ev, &derivation("percentage", "98", Some("%"), ops())).unwrap_err();
        assert_eq!(
            wrong.to_string(),
            "derivation_wrong: d1: 48 / 50 × 100 (c6, c4) = 96 %, stated 98 %"
        );
        assert_eq!(wrong.reason(), "derivation_wrong");
        // The precision written decides: 96.0 states one decimal, and 48/50 is exactly 96.
        assert!(check(&ev, &derivation("percentage", "96.0", Some("%"), ops())).is_ok());
        assert!(check(&ev, &derivation("percentage", "96.1", Some("%"), ops())).is_err());
        // A percentage is stated in %.
        let unitless = check(&ev, &derivation("percentage", "96", None, ops())).unwrap_err();
        assert_eq!(unitless.reason(), "derivation_unit");
    }

    #[test]
    fn durations_between_observed_times_round_to_the_precision_written() {
        let ev = demo();
        let d = |value: &str, unit: &str| {
            derivation(
                "time_minus",
                value,
                Some(unit),
                vec![
                    operand("c2", "14:02:05", None),
                    operand("c1", "14:00:03", None),
                ],
            )
        };
        // 122 s: 2 min at a whole minute, 2.03 at two decimals, 122 s exactly.
        assert!(check(&ev, &d("2", "min")).is_ok());
        assert!(check(&ev, &d("2.03", "min")).is_ok());
        assert!(check(&ev, &d("122", "s")).is_ok());
        assert!(check(&ev, &d("3", "min")).is_err());
        assert!(check(&ev, &d("2.04", "min")).is_err());
        // An interval's start from its end and length: 14:02:05 − 5000 ms.
        let start = |value: &str| {
            derivation(
                "time_minus",
                value,
                None,
                vec![
                    operand("c2", "14:02:05", None),
                    operand("c2", "5000", Some("ms")),
                ],
            )
        };
        assert!(
            check(&ev, &start("14:02:00")).is_ok(),
            "{:?}",
            check(&ev, &start("14:02:00"))
        );
        assert!(check(&ev, &start("14:02")).is_ok(), "to the minute written");
        assert_eq!(
            check(&ev, &start("14:02:01")).unwrap_err().reason(),
            "derivation_wrong"
        );
        // A time plus an interval: the start and the length give the end.
        let plus = derivation(
            "time_plus",
            "14:02",
            None,
            vec![
                operand("c1", "14:00:03", None),
                operand("c4", "50", Some("s")),
            ],
        );
        // 50 is observed, but not as seconds: no evidence writes `50 s`.
        assert_eq!(
            check(&ev, &plus).unwrap_err().reason(),
            "derivation_operand_not_observed"
        );
        let plus = derivation(
            "time_plus",
            "14:00:08",
            None,
            vec![
                operand("c1", "14:00:03", None),
                operand("c2", "5000", Some("ms")),
            ],
        );
        assert!(check(&ev, &plus).is_ok(), "{:?}", check(&ev, &plus));
    }

    #[test]
    fn units_and_zones_convert_exactly() {
        let ev = demo();
        let ms = derivation(
            "convert_unit",
            "5",
            Some("s"),
            vec![operand("c2", "5000", Some("ms"))],
        );
        assert!(check(&ev, &ms).is_ok());
        let wrong = derivation(
            "convert_unit",
            "50",
            Some("s"),
            vec![operand("c2", "5000", Some("ms"))],
        );
        assert_eq!(
            check(&ev, &wrong).unwrap_err().to_string(),
            "derivation_wrong: d1: 5000 ms in s (c2) = 5 s, stated 50 s"
        );
        let kinds = derivation(
            "convert_unit",
            "5",
            Some("MiB"),
            vec![operand("c2", "5000", Some("ms"))],
        );
        assert_eq!(check(&ev, &kinds).unwrap_err().reason(), "derivation_unit");
        let est = derivation(
            "convert_zone",
            "09:02",
            Some("EST"),
            vec![operand("c5", "14:02", Some("UTC"))],
        );
        assert!(check(&ev, &est).is_ok(), "{:?}", check(&ev, &est));
        let cet = derivation(
            "convert_zone",
            "15:02",
            Some("CET"),
            vec![operand("c5", "14:02", Some("UTC"))],
        );
        assert!(check(&ev, &cet).is_ok());
        let off = derivation(
            "convert_zone",
            "10:02",
            Some("EST"),
            vec![operand("c5", "14:02", Some("UTC"))],
        );
        assert_eq!(
            check(&ev, &off).unwrap_err().to_string(),
            "derivation_wrong: d1: 14:02 UTC in EST (c5) = 09:02:00 EST, stated 10:02 EST"
        );
    }

    #[test]
    fn what_is_not_observed_or_not_allowed_is_refused_by_name() {
        let ev = demo();
        let unseen = derivation(
            "percentage",
            "94",
            Some("%"),
            vec![operand("c6", "47", None), operand("c4", "50", None)],
        );
        assert_eq!(
            check(&ev, &unseen).unwrap_err().to_string(),
            "derivation_operand_not_observed: d1: 47 is not shown by the evidence of c6"
        );
        let elsewhere = derivation(
            "percentage",
            "96",
            Some("%"),
            vec![operand("c1", "48", None), operand("c4", "50", None)],
        );
        assert_eq!(
            check(&ev, &elsewhere).unwrap_err().reason(),
            "derivation_operand_not_observed"
        );
        // A derivation computes from observed values only: another derivation is no operand.
        let chained = derivation(
            "sum",
            "98",
            None,
            vec![operand("d1", "96", None), operand("c1", "2", None)],
        );
        assert_eq!(
            check(&ev, &chained).unwrap_err().to_string(),
            "derivation_operand_not_allowed: d1 takes 96 from d1, which is not an allowed claim"
        );
        let unknown = derivation("average", "49", None, vec![operand("c6", "48", None)]);
        assert_eq!(
            check(&ev, &unknown).unwrap_err().reason(),
            "derivation_op_unknown"
        );
        let arity = derivation("difference", "2", None, vec![operand("c6", "48", None)]);
        assert_eq!(
            check(&ev, &arity).unwrap_err().to_string(),
            "derivation_operands: d1 (difference) takes 2 operand(s), has 1"
        );
        let zero = derivation(
            "ratio",
            "1",
            None,
            vec![operand("c6", "48", None), operand("c3", "0", None)],
        );
        assert!(check(&ev, &zero).is_err());
    }

    #[test]
    fn an_answer_lists_each_derivation_once_and_cites_it() {
        let ev = demo();
        let d = derivation(
            "difference",
            "2",
            None,
            vec![operand("c4", "50", None), operand("c6", "48", None)],
        );
        let cited = vec!["d1".to_string()];
        let lookup = |id: &str| ev.get(id);
        assert_eq!(
            check_derivations(std::slice::from_ref(&d), &lookup, &cited)
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            check_derivations(std::slice::from_ref(&d), &lookup, &[])
                .unwrap_err()
                .reason(),
            "derivation_not_cited"
        );
        assert_eq!(
            check_derivations(&[d.clone(), d.clone()], &lookup, &cited)
                .unwrap_err()
                .reason(),
            "derivation_duplicate_id"
        );
        let mut bad = d;
        bad.id = "x1".into();
        assert_eq!(
            check_derivations(&[bad], &lookup, &cited)
                .unwrap_err()
                .reason(),
            "derivation_id_invalid"
        );
        assert!(is_derivation_id("d12") && !is_derivation_id("d0") && !is_derivation_id("c1"));
    }

    #[test]
    fn rates_count_over_a_duration_per_a_unit_of_time() {
        let ev = evidence(&[("c1", "3000 requests"), ("c2", "window 60 s")]);
        let d = |value: &str, unit: &str| {
            derivation(
                "rate",
                value,
                Some(unit),
                vec![operand("c1", "3000", None), operand("c2", "60", Some("s"))],
            )
        };
        assert!(check(&ev, &d("50", "/s")).is_ok());
        assert!(check(&ev, &d("3000", "req/min")).is_ok());
        assert!(check(&ev, &d("51", "/s")).is_err());
        assert_eq!(
            check(&ev, &d("50", "MiB")).unwrap_err().reason(),
            "derivation_unit"
        );
    }

    /// The operations on two numbers, evaluated in integer hundredths so the test's own
    /// arithmetic is exact.
    fn expected(op: Op, a: i64, b: i64) -> Option<Decimal> {
        let (a, b) = (Decimal::new(a, 2), Decimal::new(b, 2));
        Some(match op {
            Op::Sum => a + b,
            Op::Difference => a - b,
            Op::Min => a.min(b),
            Op::Max => a.max(b),
            Op::Ratio => a.checked_div(b)?,
            Op::Percentage => a.checked_div(b)? * Decimal::ONE_HUNDRED,
            _ => return None,
        })
    }

    proptest! {
        #[test]
        fn exact_results_hold_and_one_off_in_the_last_digit_or_an_unseen_operand_does_not(
            a in 1i64..10_000_000,
            b in 1i64..10_000_000,
            op in prop::sample::select(vec![Op::Sum, Op::Difference, Op::Min, Op::Max, Op::Ratio, Op::Percentage]),
            places in 0u32..4,
        ) {
            let (ta, tb) = (Decimal::new(a, 2).normalize().to_string(), Decimal::new(b, 2).normalize().to_string());
            let ev = evidence(&[("c1", &format!("count {ta} seen")), ("c2", &format!("total {tb} seen"))]);
            let exact = expected(op, a, b).unwrap();
            let stated = exact.round_dp_with_strategy(places, RoundingStrategy::MidpointAwayFromZero);
            let text = |v: Decimal| format!("{:.*}", places as usize, v);
            let unit = (op == Op::Percentage).then_some("%");
            let ops = || vec![operand("c1", &ta, None), operand("c2", &tb, None)];
            let ok = derivation(op.name(), &text(stated), unit, ops());
            prop_assert!(check(&ev, &ok).is_ok(), "{:?}: {:?}", ok, check(&ev, &ok));
            let step = Decimal::new(1, places);
            let off = derivation(op.name(), &text(stated + step), unit, ops());
            prop_assert_eq!(check(&ev, &off).unwrap_err().reason(), "derivation_wrong");
            let unseen = derivation(op.name(), &text(stated), unit, vec![operand("c1", &format!("{ta}1"), None), operand("c2", &tb, None)]);
            prop_assert_eq!(check(&ev, &unseen).unwrap_err().reason(), "derivation_operand_not_observed");
        }
    }

    /// Durations: (spelling, nanoseconds).
    const DURATIONS: [(&str, i64); 5] = [
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("min", 60_000_000_000),
        ("h", 3_600_000_000_000),
        ("us", 1_000),
    ];

    fn hms(secs: u32) -> String {
        format!(
            "{:02}:{:02}:{:02}",
            secs / 3600,
            secs % 3600 / 60,
            secs % 60
        )
    }

    proptest! {
        #[test]
        fn conversions_between_durations_hold_exactly_at_the_precision_written(
            n in 1i64..1_000_000,
            from in 0usize..5,
            to in 0usize..5,
            places in 0u32..4,
        ) {
            let (from_name, from_ns) = DURATIONS[from];
            let (to_name, to_ns) = DURATIONS[to];
            let ev = evidence(&[("c1", &format!("waited {n}{from_name} for the pool"))]);
            let exact = Decimal::from(n) * Decimal::from(from_ns) / Decimal::from(to_ns);
            let stated = exact.round_dp_with_strategy(places, RoundingStrategy::MidpointAwayFromZero);
            let text = |v: Decimal| format!("{:.*}", places as usize, v);
            let d = |value: String| derivation("convert_unit", &value, Some(to_name), vec![operand("c1", &n.to_string(), Some(from_name))]);
            prop_assert!(check(&ev, &d(text(stated))).is_ok(), "{:?}", check(&ev, &d(text(stated))));
            let off = stated + Decimal::new(1, places);
            prop_assert_eq!(check(&ev, &d(text(off))).unwrap_err().reason(), "derivation_wrong");
            // The number observed with another unit is not this operand.
            let other = DURATIONS[(from + 1) % 5].0;
            let elsewhere = evidence(&[("c1", &format!("waited {n}{other} for the pool"))]);
            prop_assert_eq!(check(&elsewhere, &d(text(stated))).unwrap_err().reason(), "derivation_operand_not_observed");
        }

        #[test]
        fn the_time_between_two_observed_times_and_a_time_plus_it_agree(
            a in 0u32..86_400,
            b in 0u32..86_400,
        ) {
            let (later, earlier) = (a.max(b), a.min(b));
            let ev = evidence(&[("c1", &format!("ended {}", hms(later))), ("c2", &format!("began {}", hms(earlier)))]);
            let secs = later - earlier;
            let minus = derivation("time_minus", &secs.to_string(), Some("s"), vec![operand("c1", &hms(later), None), operand("c2", &hms(earlier), None)]);
            prop_assert!(check(&ev, &minus).is_ok(), "{:?}", check(&ev, &minus));
            let wrong = derivation("time_minus", &(secs + 1).to_string(), Some("s"), vec![operand("c1", &hms(later), None), operand("c2", &hms(earlier), None)]);
            prop_assert_eq!(check(&ev, &wrong).unwrap_err().reason(), "derivation_wrong");
            // The interval back onto the start gives the end (the interval observed in seconds).
            let ev = evidence(&[("c2", &format!("began {}", hms(earlier))), ("c3", &format!("took {secs} s"))]);
            let plus = derivation("time_plus", &hms(later), None, vec![operand("c2", &hms(earlier), None), operand("c3", &secs.to_string(), Some("s"))]);
            prop_assert!(check(&ev, &plus).is_ok(), "{:?}", check(&ev, &plus));
            let plus_wrong = derivation("time_plus", &hms((later + 1) % 86_400), None, vec![operand("c2", &hms(earlier), None), operand("c3", &secs.to_string(), Some("s"))]);
            prop_assert_eq!(check(&ev, &plus_wrong).unwrap_err().reason(), "derivation_wrong");
            // And the end and the length give the start.
            let ev = evidence(&[("c1", &format!("ended {}", hms(later))), ("c3", &format!("took {secs} s"))]);
            let start = |t: u32| derivation("time_minus", &hms(t), None, vec![operand("c1", &hms(later), None), operand("c3", &secs.to_string(), Some("s"))]);
            prop_assert!(check(&ev, &start(earlier)).is_ok(), "{:?}", check(&ev, &start(earlier)));
            prop_assert_eq!(check(&ev, &start((earlier + 1) % 86_400)).unwrap_err().reason(), "derivation_wrong");
        }

        #[test]
        fn a_time_converted_between_fixed_offset_zones_holds_to_the_minute(
            minutes in 0u32..1_440,
            zone in prop::sample::select(vec![("EST", -300i32), ("CET", 60), ("JST", 540), ("PDT", -420), ("NPT", 345)]),
        ) {
            let utc = format!("{:02}:{:02}", minutes / 60, minutes % 60);
            let ev = evidence(&[("c1", &format!("first error at {utc} UTC"))]);
            let local = (i64::from(minutes) + i64::from(zone.1)).rem_euclid(1_440);
            let stated = format!("{:02}:{:02}", local / 60, local % 60);
            let d = |value: &str| derivation("convert_zone", value, Some(zone.0), vec![operand("c1", &utc, Some("UTC"))]);
            prop_assert!(check(&ev, &d(&stated)).is_ok(), "{:?}", check(&ev, &d(&stated)));
            let next = (local + 1).rem_euclid(1_440);
            let off = format!("{:02}:{:02}", next / 60, next % 60);
            prop_assert_eq!(check(&ev, &d(&off)).unwrap_err().reason(), "derivation_wrong");
        }

        #[test]
        fn a_rate_is_its_count_over_its_duration_per_the_unit_asked(
            count in 1i64..1_000_000,
            seconds in 1i64..100_000,
            per in prop::sample::select(vec![("/s", 1i64), ("req/min", 60), ("/h", 3_600)]),
            places in 0u32..3,
        ) {
            let ev = evidence(&[("c1", &format!("{count} requests")), ("c2", &format!("window {seconds} s"))]);
            let exact = Decimal::from(count) * Decimal::from(per.1) / Decimal::from(seconds);
            let stated = exact.round_dp_with_strategy(places, RoundingStrategy::MidpointAwayFromZero);
            let text = |v: Decimal| format!("{:.*}", places as usize, v);
            let d = |value: String| derivation("rate", &value, Some(per.0), vec![operand("c1", &count.to_string(), None), operand("c2", &seconds.to_string(), Some("s"))]);
            prop_assert!(check(&ev, &d(text(stated))).is_ok(), "{:?}", check(&ev, &d(text(stated))));
            prop_assert_eq!(check(&ev, &d(text(stated + Decimal::new(1, places)))).unwrap_err().reason(), "derivation_wrong");
        }
    }
}
