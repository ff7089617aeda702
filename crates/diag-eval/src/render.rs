//! What `diag eval` shows: one aligned table per model with a line of totals, and the
//! Markdown summary `--report-dir DIR` writes as `DIR/eval.md` (docs/EVAL.md).

use std::path::Path;

use crate::score::{Aggregate, Stat};
use crate::{EvalModel, EvalReport};

/// A file name part made of `[A-Za-z0-9._-]` only.
pub fn file_part(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with('.') || out.is_empty() {
        format!("_{out}")
    } else {
        out
    }
}

/// `k/N`.
fn share(k: u32, n: u32) -> String {
    format!("{k}/{n}")
}

/// A figure's mean, with its spread when runs differ.
fn stat(s: Option<Stat>, fmt: &dyn Fn(f64) -> String) -> String {
    match s {
        None => "-".to_string(),
        // A spread too small to show is not shown.
        Some(s) if fmt(s.sd) == fmt(0.0) => fmt(s.mean),
        Some(s) => format!("{}±{}", fmt(s.mean), fmt(s.sd)),
    }
}

fn verdicts(a: &Aggregate) -> String {
    if a.verdicts.len() == 1 {
        if let Some(k) = a.verdicts.keys().next() {
            return k.clone();
        }
    }
    a.verdicts
        .iter()
        .map(|(k, n)| format!("{k}:{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

const HEADINGS: [&str; 13] = [
    "scenario",
    "runs",
    "grounded",
    "named-ungrounded",
    "partial",
    "fooled",
    "fallback",
    "failed",
    "verdict",
    "tokens",
    "model calls",
    "wall time",
    "cost",
];

fn rows(m: &EvalModel) -> Vec<Vec<String>> {
    m.scenarios
        .iter()
        .map(|c| {
            let a = &c.aggregate;
            vec![
                c.scenario.clone(),
                a.runs.to_string(),
                share(a.grounded, a.runs),
                share(a.named_ungrounded, a.runs),
                share(a.partial, a.runs),
                share(a.fooled, a.runs),
                share(a.fallback, a.runs),
                share(a.failed, a.runs),
                verdicts(a),
                stat(a.tokens, &|v| format!("{v:.0}")),
                stat(a.model_calls, &|v| format!("{v:.1}")),
                stat(a.wall_ms, &|v| format!("{:.2}s", v / 1000.0)),
                stat(a.cost, &|v| format!("{v:.4}")),
            ]
        })
        .collect()
}

/// One aligned table per model, then a line of totals.
pub fn tables(report: &EvalReport) -> String {
    let mut out = String::new();
    for m in &report.models {
        out.push_str(&format!("model {}\n", m.model));
        let rows = rows(m);
        let widths: Vec<usize> = (0..HEADINGS.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r[i].chars().count())
                    .chain(std::iter::once(HEADINGS[i].len()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: Vec<&str>| {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        out.push_str(&line(HEADINGS.to_vec()));
        out.push('\n');
        for r in &rows {
            out.push_str(&line(r.iter().map(String::as_str).collect()));
            out.push('\n');
        }
        out.push('\n');
    }
    let total: u32 = report
        .models
        .iter()
        .flat_map(|m| &m.scenarios)
        .map(|c| c.aggregate.runs)
        .sum();
    out.push_str(&format!(
        "{} run(s) over {} scenario(s) and {} model(s); {} grounded; runs are stored (diag runs, diag trace RUN_ID)\n",
        total,
        report.scenarios.len(),
        report.models.len(),
        total - report.not_grounded.min(total)
    ));
    out
}

/// The summary as GitHub-flavoured Markdown, with a link to each run's report.
pub fn markdown(report: &EvalReport) -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from("# diag eval\n\n");
    for m in &report.models {
        out.push_str(&format!("## model `{}`\n\n", cell(&m.model)));
        out.push_str(&format!("| {} |\n", HEADINGS.join(" | ")));
        out.push_str(&format!("|{}\n", " --- |".repeat(HEADINGS.len())));
        for r in rows(m) {
            out.push_str(&format!(
                "| {} |\n",
                r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
            ));
        }
        out.push('\n');
        for c in &m.scenarios {
            for r in &c.runs {
                let link = r
                    .report_file
                    .as_deref()
                    .and_then(|p| {
                        Path::new(p)
                            .file_name()
                            .map(|f| f.to_string_lossy().into_owned())
                    })
                    .map(|f| format!("[report]({}/{f})", file_part(&c.scenario)))
                    .unwrap_or_default();
                out.push_str(&format!(
                    "- {} run {}: {} (`{}`) {}\n",
                    cell(&c.scenario),
                    r.repeat,
                    r.score.outcome.as_str(),
                    r.run_id,
                    link
                ));
            }
        }
        out.push('\n');
    }
    out
}
