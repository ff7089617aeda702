//! `diag serve status`: the queue of `diag serve` as the run store holds it — what waits, what
//! is claimed (by which process, since when, its lease), what is done (with its run) and what
//! failed (and why) — as a table or the `--json` document (schema `diag.serve_status.v1`,
//! docs/schema/serve_status.v1.json).

use std::fmt::Write as _;

use serde_json::{json, Value};

use diag_core::store::{QueueCounts, QueueEntry};
use diag_core::text::one_line;

/// The `schema` member of `--json`.
pub const SCHEMA: &str = "diag.serve_status.v1";

fn entry_json(e: &QueueEntry) -> Value {
    json!({
        "id": e.id,
        "state": e.state.as_str(),
        "status": e.status.as_str(),
        "title": e.group.title(),
        "group_key": e.group.group_key,
        "identity": e.identity,
        "receiver": e.receiver,
        "alerts": e.group.alerts.len(),
        "received_at": e.received_at,
        "updated_at": e.updated_at,
        "attempts": e.attempts,
        "runs": e.runs,
        "failure": e.failure,
        "claim": e.claim.as_ref().map(|c| json!({
            "host": c.host,
            "pid": c.pid,
            "since": e.updated_at,
            "lease_expires_at": c.lease_expires_at,
        })),
    })
}

/// What a row of the table says past its state: who holds a claim, the run, the failure.
fn detail(e: &QueueEntry) -> String {
    let mut d = String::new();
    if let Some(c) = &e.claim {
        let _ = write!(
            d,
            "by {} pid {} since {}",
            c.host
                .as_deref()
                .map(|h| one_line(h, 40))
                .unwrap_or_else(|| "?".into()),
            c.pid,
            e.updated_at
        );
        if let Some(lease) = c.lease_expires_at {
            let _ = write!(d, ", lease until {lease}");
        }
    }
    if let Some(run) = e.runs.last() {
        if !d.is_empty() {
            d.push_str("; ");
        }
        let _ = write!(d, "run {}", one_line(run, usize::MAX));
    }
    if let Some(f) = &e.failure {
        if !d.is_empty() {
            d.push_str("; ");
        }
        d.push_str(&one_line(f, 200));
    }
    d
}

/// The `--json` document.
pub fn document(entries: &[QueueEntry], counts: &QueueCounts) -> Value {
    json!({
        "schema": SCHEMA,
        "counts": counts,
        "notifications": entries.iter().map(entry_json).collect::<Vec<_>>(),
    })
}

/// The table: one row per notification, then the counts.
pub fn table(entries: &[QueueEntry], counts: &QueueCounts) -> String {
    let rows: Vec<[String; 6]> = entries
        .iter()
        .map(|e| {
            [
                e.id.to_string(),
                e.state.as_str().to_string(),
                e.attempts.to_string(),
                e.received_at.to_string(),
                one_line(&e.group.title(), 50),
                detail(e),
            ]
        })
        .collect();
    let header = ["id", "state", "attempts", "received", "alert", "detail"];
    let widths: Vec<usize> = (0..5)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: [&str; 6]| {
        let mut l = String::new();
        for (i, w) in widths.iter().enumerate() {
            let _ = write!(l, "{:<w$}  ", cells[i]);
        }
        l.push_str(cells[5]);
        l.truncate(l.trim_end().len());
        l.push('\n');
        l
    };
    let mut text = line(header);
    for r in &rows {
        text.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]));
    }
    if entries.is_empty() {
        text.push_str("(no notifications)\n");
    }
    let _ = writeln!(
        text,
        "{} queued, {} claimed, {} done, {} resolved, {} failed",
        counts.queued, counts.claimed, counts.done, counts.resolved, counts.failed
    );
    text
}
