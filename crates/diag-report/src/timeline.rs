//! The run on one time axis: a row per node attempt, per model call and per tool call.
//!
//! Node attempts carry their own start (`started_at`) and duration. Model and tool calls are
//! stored with a duration only, so they are placed by the run's structure, which is exact in
//! order: an agent node's model calls follow one another from the node's start, in turn
//! order; the tool calls a turn requested start together after that turn's model call (they
//! run concurrently) and the next turn starts when the slowest has finished. The small gaps
//! between them (diag's own work) are not drawn.
//!
//! A run whose every duration is zero (a replay runs on a pinned clock) is drawn on a
//! *step* axis instead: each model call, each turn's tool calls and each deterministic node
//! take one step, so the structure (what ran after what, which calls ran side by side) stays
//! visible.

use super::view::is_invocation_id;
use super::RunData;
use diag_core::agent::runtime::PLAN_STEP_AGENT;
use diag_core::agent::AgentRole;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    Node,
    Model,
    Tool,
}

/// How a row ended, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub kind: RowKind,
    /// `planner`, `executor · turn 2`, `inv-3 search_logs`.
    pub label: String,
    /// The status as recorded (`COMPLETED`, `ok`, `blocked`).
    pub status: String,
    pub round: u32,
    pub attempt: u32,
    pub start: u64,
    pub duration: u64,
    /// On the critical path: everything is, except tool calls that finished before the
    /// slowest call of their turn.
    pub critical: bool,
    pub tone: Tone,
    /// The tool call's card (`inv-3`), for a link.
    pub anchor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    pub rows: Vec<Row>,
    /// The end of the axis: milliseconds, or steps.
    pub total: u64,
    /// `true`: the axis counts steps, not milliseconds (no durations were recorded).
    pub steps: bool,
}

fn node_tone(status: &str) -> Tone {
    match status {
        "COMPLETED" | "PASS" | "BUILT" | "PREPARED" | "ANSWERED" => Tone::Ok,
        "LOW_CONFID" | "INVALID_OUTPUT" | "RETRYABLE_FAILED" => Tone::Warn,
        _ => Tone::Fail,
    }
}

/// Lays the run out on one axis.
pub fn layout(data: &RunData) -> Timeline {
    let steps = data.events.iter().all(|e| e.duration_ms == 0)
        && data.model_calls.iter().all(|m| m.step.duration_ms == 0)
        && data.invocations.iter().all(|i| i.duration_ms == 0);
    let unit = |ms: u64| if steps { 1 } else { ms };
    let run_start = data.run.started_at.unix_ms();
    let mut rows = Vec::new();
    let mut next_invocation = 0usize;
    let mut cursor_steps = 0u64;
    let mut used = vec![false; data.model_calls.len()];
    let mut last_executor_end: Option<u64> = None;

    for e in &data.events {
        let start = if steps {
            cursor_steps
        } else {
            u64::try_from(e.started_at.unix_ms().saturating_sub(run_start)).unwrap_or(0)
        };
        let node_row = rows.len();
        rows.push(Row {
            kind: RowKind::Node,
            label: e.node.clone(),
            status: e.status.clone(),
            round: e.round,
            attempt: e.attempt,
            start,
            duration: e.duration_ms,
            critical: true,
            tone: node_tone(&e.status),
            anchor: None,
        });
        let mut cursor = start;
        for (i, call) in data.model_calls.iter().enumerate() {
            let s = &call.step;
            if used[i] || s.agent.as_str() != e.node || s.round != e.round || s.attempt != e.attempt
            {
                continue;
            }
            used[i] = true;
            // The plan's steps, run before the Executor's first turn of their round: one batch.
            let plan_start = rows.len();
            let mut plan_slowest: Option<(usize, u64)> = None;
            let first_turn = s.agent == AgentRole::Executor && s.turn == 1;
            while let Some(inv) = data
                .invocations
                .get(next_invocation)
                .filter(|inv| first_turn && inv.agent == PLAN_STEP_AGENT && inv.round == s.round)
            {
                next_invocation += 1;
                let d = unit(inv.duration_ms);
                if plan_slowest.is_none_or(|(_, m)| d > m) {
                    plan_slowest = Some((rows.len(), d));
                }
                rows.push(tool_row(inv, cursor, d));
            }
            for (j, row) in rows.iter_mut().enumerate().skip(plan_start) {
                row.critical = plan_slowest.is_some_and(|(k, _)| k == j);
            }
            if let Some((_, m)) = plan_slowest {
                cursor = cursor.saturating_add(m);
            }
            let d = unit(s.duration_ms);
            rows.push(Row {
                kind: RowKind::Model,
                label: format!("{} · model call, turn {}", s.agent.as_str(), s.turn),
                status: s.status.as_str().to_string(),
                round: s.round,
                attempt: s.attempt,
                start: cursor,
                duration: d,
                critical: true,
                tone: if s.status.as_str() == "ok" {
                    Tone::Ok
                } else {
                    Tone::Fail
                },
                anchor: None,
            });
            cursor = cursor.saturating_add(d);
            let batch_start = rows.len();
            let mut slowest: Option<(usize, u64)> = None;
            for _ in 0..call.tool_calls {
                let Some(inv) = data.invocations.get(next_invocation) else {
                    break;
                };
                next_invocation += 1;
                let d = unit(inv.duration_ms);
                if slowest.is_none_or(|(_, m)| d > m) {
                    slowest = Some((rows.len(), d));
                }
                rows.push(tool_row(inv, cursor, d));
            }
            for (j, row) in rows.iter_mut().enumerate().skip(batch_start) {
                row.critical = slowest.is_some_and(|(k, _)| k == j);
            }
            if let Some((_, m)) = slowest {
                cursor = cursor.saturating_add(m);
            }
        }
        let span = cursor - start;
        if steps {
            let d = span.max(1);
            rows[node_row].duration = d;
            cursor_steps = start + d;
        }
        if e.node == "executor" {
            last_executor_end = Some(start + rows[node_row].duration.max(span));
        }
    }
    // Calls no model call accounts for (a trace cut short): after the last Executor, in order.
    if next_invocation < data.invocations.len() {
        let mut at = last_executor_end.unwrap_or(cursor_steps);
        for inv in &data.invocations[next_invocation..] {
            let d = unit(inv.duration_ms);
            rows.push(tool_row(inv, at, d));
            at = at.saturating_add(d);
        }
    }
    let end = rows
        .iter()
        .map(|r| r.start.saturating_add(r.duration))
        .max()
        .unwrap_or(0);
    let total = if steps {
        end
    } else {
        end.max(data.run.duration_ms.unwrap_or(0))
    };
    Timeline { rows, total, steps }
}

fn tool_row(inv: &diag_core::protocol::ToolInvocation, start: u64, duration: u64) -> Row {
    Row {
        kind: RowKind::Tool,
        label: format!(
            "{} {}{}",
            super::view::bounded(&inv.invocation_id, 16),
            super::view::bounded(&inv.tool_name, 40),
            if inv.agent == PLAN_STEP_AGENT {
                " · plan step"
            } else {
                ""
            }
        ),
        status: inv.status.as_str().to_string(),
        round: inv.round,
        attempt: 1,
        start,
        duration,
        critical: true,
        tone: match inv.status.as_str() {
            "ok" => Tone::Ok,
            "blocked" => Tone::Warn,
            _ => Tone::Fail,
        },
        anchor: is_invocation_id(&inv.invocation_id).then(|| inv.invocation_id.clone()),
    }
}
