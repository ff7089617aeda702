//! The two drawings of the HTML report, as inline SVG: the timeline (rows on a shared time
//! axis) and the diagnosis graph (the compiled topology with this run's path highlighted).
//! Coordinates are integers, so the output does not depend on float formatting.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::escape_html as esc;
use super::timeline::{RowKind, Timeline, Tone};
use super::{human_ms, RunData};
use diag_core::graph::{GraphShape, NodeKind};

const WIDTH: u64 = 1000;
const LABEL_W: u64 = 250;
const BAR_W: u64 = WIDTH - LABEL_W - 90;
const ROW_H: u64 = 20;
const AXIS_H: u64 = 28;

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving at most about 8 ticks.
fn tick_step(total: u64) -> u64 {
    let mut step = 1u64;
    loop {
        for m in [1u64, 2, 5] {
            let s = step.saturating_mul(m);
            if total / s <= 8 {
                return s;
            }
        }
        step = step.saturating_mul(10);
    }
}

fn x_of(t: u64, total: u64) -> u64 {
    if total == 0 {
        LABEL_W
    } else {
        LABEL_W + (u128::from(t) * u128::from(BAR_W) / u128::from(total)) as u64
    }
}

/// The timeline: one row per node attempt, model call and tool call.
pub fn timeline(t: &Timeline) -> String {
    let rows = t.rows.len() as u64;
    let height = AXIS_H + rows * ROW_H + 8;
    let total = t.total.max(1);
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height}\" \
         width=\"{WIDTH}\" height=\"{height}\" role=\"img\" aria-label=\"timeline of the run\">"
    );
    // Axis: ticks and grid lines.
    let step = tick_step(total);
    let mut tick = 0u64;
    while tick <= total {
        let x = x_of(tick, total);
        let label = if t.steps {
            format!("{tick}")
        } else {
            human_ms(tick)
        };
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\"/>\
             <text class=\"tick\" x=\"{x}\" y=\"14\">{}</text>",
            AXIS_H - 6,
            height - 4,
            esc(&label)
        );
        tick += step;
    }
    let _ = write!(
        out,
        "<text class=\"axis\" x=\"4\" y=\"14\">{}</text>",
        if t.steps {
            "steps (no durations recorded)"
        } else {
            "time since the run started"
        }
    );
    for (i, r) in t.rows.iter().enumerate() {
        let y = AXIS_H + i as u64 * ROW_H;
        let x = x_of(r.start, total);
        let x2 = x_of(r.start.saturating_add(r.duration), total);
        let w = (x2 - x).max(2);
        let kind = match r.kind {
            RowKind::Node => "node",
            RowKind::Model => "model",
            RowKind::Tool => "tool",
        };
        let tone = match r.tone {
            Tone::Ok => "ok",
            Tone::Warn => "warn",
            Tone::Fail => "fail",
        };
        let crit = if r.critical { " critical" } else { " parallel" };
        let indent = match r.kind {
            RowKind::Node => 4,
            RowKind::Model => 16,
            RowKind::Tool => 28,
        };
        let when = if t.steps {
            format!("step {} to {}", r.start, r.start + r.duration)
        } else {
            format!("+{} ms, {} ms", r.start, r.duration)
        };
        let title = format!(
            "{} — {} (round {}, attempt {}) {}",
            r.label, r.status, r.round, r.attempt, when
        );
        let text_label = if r.kind == RowKind::Node && (r.round > 1 || r.attempt > 1) {
            format!("{} r{} a{}", r.label, r.round, r.attempt)
        } else {
            r.label.clone()
        };
        let label = super::view::bounded(&text_label, 38);
        let bar = format!(
            "<g class=\"row {kind} {tone}{crit}\"><title>{}</title>\
             <text class=\"label\" x=\"{indent}\" y=\"{}\">{}</text>\
             <rect x=\"{x}\" y=\"{}\" width=\"{w}\" height=\"{}\" rx=\"2\"/>\
             <text class=\"status\" x=\"{}\" y=\"{}\">{}</text></g>",
            esc(&title),
            y + 14,
            esc(&label),
            y + 3,
            ROW_H - 6,
            x + w + 4,
            y + 14,
            esc(&super::view::bounded(&r.status, 20)),
        );
        match &r.anchor {
            Some(a) => {
                let _ = write!(out, "<a href=\"#{}\">{bar}</a>", esc(a));
            }
            None => out.push_str(&bar),
        }
    }
    out.push_str("</svg>");
    out
}

const G_W: i64 = 760;
const NODE_W: i64 = 150;
const NODE_H: i64 = 34;
const RANK_H: i64 = 64;
const START: &str = "__start__";
const END: &str = "__end__";

/// The diagnosis graph: nodes ranked top to bottom by their longest path from the start,
/// edges to the next rank drawn straight, longer forward edges along a lane on the right,
/// edges back up along a lane on the left, retries as loops. The nodes and edges this run
/// went through are highlighted, with the number of visits.
pub fn graph(shape: &GraphShape, data: &RunData) -> String {
    // Node list: start, the declared nodes, end.
    let mut names: Vec<String> = vec![START.to_string()];
    names.extend(shape.nodes.iter().map(|n| n.name.clone()));
    names.push(END.to_string());
    let index = |name: &str| names.iter().position(|n| n == name);
    let mut edges: Vec<(usize, usize, String, bool)> = Vec::new();
    if let Some(s) = index(&shape.start) {
        edges.push((0, s, String::from("start"), false));
    }
    let end = names.len() - 1;
    for e in &shape.edges {
        let (Some(f), Some(t)) = (index(&e.from), e.to.as_deref().map_or(Some(end), &index)) else {
            continue;
        };
        edges.push((f, t, e.label.clone(), e.counted));
    }
    // Ranks: longest path over edges that go to a later-declared node.
    let mut rank = vec![0i64; names.len()];
    for i in 0..names.len() {
        for (f, t, _, _) in &edges {
            if *f == i && *t > *f {
                rank[*t] = rank[*t].max(rank[i] + 1);
            }
        }
    }
    let mut by_rank: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, r) in rank.iter().enumerate() {
        by_rank.entry(*r).or_default().push(i);
    }
    let center = G_W / 2 - 60;
    let mut pos = vec![(0i64, 0i64); names.len()];
    for (r, nodes) in &by_rank {
        let k = nodes.len() as i64;
        for (j, &n) in nodes.iter().enumerate() {
            let x = center + (2 * j as i64 - (k - 1)) * (NODE_W + 40) / 2;
            pos[n] = (x, 30 + r * RANK_H);
        }
    }
    let max_rank = by_rank.keys().next_back().copied().unwrap_or(0);
    let height = 30 + max_rank * RANK_H + 50;
    let right_lane = center + NODE_W / 2 + NODE_W + 60;
    let left_lane = 24;

    // What this run went through.
    let path: Vec<usize> = data.events.iter().filter_map(|e| index(&e.node)).collect();
    let mut visits = vec![0u32; names.len()];
    let mut taken: BTreeMap<(usize, usize), u32> = BTreeMap::new();
    if let Some(&first) = path.first() {
        visits[0] = 1;
        *taken.entry((0, first)).or_default() += 1;
    }
    for w in path.windows(2) {
        *taken.entry((w[0], w[1])).or_default() += 1;
    }
    for &p in &path {
        visits[p] += 1;
    }
    let finished = data.run.status == diag_core::store::RunStatus::Success;
    if let (Some(&last), true) = (path.last(), finished) {
        *taken.entry((last, end)).or_default() += 1;
        visits[end] = 1;
    }

    // One drawn edge per (from, to), with every label it stands for.
    let mut drawn: BTreeMap<(usize, usize), Vec<String>> = BTreeMap::new();
    for (f, t, label, _) in &edges {
        drawn.entry((*f, *t)).or_default().push(label.clone());
    }

    // Each target of long forward edges gets its own lane on the right.
    let mut lanes: Vec<usize> = Vec::new();
    for (f, t) in drawn.keys() {
        if f != t && rank[*t] > rank[*f] + 1 && !lanes.contains(t) {
            lanes.push(*t);
        }
    }
    let lane_of = |t: usize| lanes.iter().position(|l| *l == t).unwrap_or(0) as i64;
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"graph\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {G_W} {height}\" \
         width=\"{G_W}\" height=\"{height}\" role=\"img\" aria-label=\"diagnosis graph with this run's path\">\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerUnits=\"userSpaceOnUse\" markerWidth=\"10\" \
         markerHeight=\"10\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" class=\"arrowhead\"/></marker>\
         <marker id=\"arrow-taken\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerUnits=\"userSpaceOnUse\" markerWidth=\"10\" \
         markerHeight=\"10\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" class=\"arrowhead taken\"/></marker></defs>"
    );
    let half_w = |n: usize| if n == 0 || n == end { 17 } else { NODE_W / 2 };
    let half_h = |n: usize| if n == 0 || n == end { 17 } else { NODE_H / 2 };
    for ((f, t), labels) in &drawn {
        let (fx, fy) = pos[*f];
        let (tx, ty) = pos[*t];
        let d = if f == t {
            let x = fx - half_w(*f);
            format!(
                "M{},{} C{},{} {},{} {},{}",
                x,
                fy - 6,
                x - 40,
                fy - 22,
                x - 40,
                fy + 22,
                x,
                fy + 6
            )
        } else if rank[*t] == rank[*f] + 1 {
            format!(
                "M{},{} C{},{} {},{} {},{}",
                fx,
                fy + half_h(*f),
                fx,
                fy + half_h(*f) + 18,
                tx,
                ty - half_h(*t) - 18,
                tx,
                ty - half_h(*t)
            )
        } else if rank[*t] > rank[*f] {
            format!(
                "M{},{} H{} V{} H{}",
                fx + half_w(*f),
                fy,
                right_lane + 26 * lane_of(*t),
                ty,
                tx + half_w(*t)
            )
        } else {
            format!(
                "M{},{} H{} V{} H{}",
                fx - half_w(*f),
                fy,
                left_lane,
                ty,
                tx - half_w(*t)
            )
        };
        let count = taken.get(&(*f, *t)).copied().unwrap_or(0);
        let (class, marker) = if count > 0 {
            ("edge taken", "arrow-taken")
        } else {
            ("edge", "arrow")
        };
        let title = format!(
            "{} → {}: {}{}",
            display(&names[*f]),
            display(&names[*t]),
            labels.join("; "),
            if count > 0 {
                format!(" (taken {count}×)")
            } else {
                String::new()
            }
        );
        let _ = write!(
            out,
            "<path class=\"{class}\" d=\"{d}\" marker-end=\"url(#{marker})\"><title>{}</title></path>",
            esc(&title)
        );
    }
    for (i, name) in names.iter().enumerate() {
        let (x, y) = pos[i];
        let visited = visits[i] > 0;
        let class = if visited { " visited" } else { "" };
        if i == 0 || i == end {
            let _ = write!(
                out,
                "<g class=\"gnode terminal{class}\"><circle cx=\"{x}\" cy=\"{y}\" r=\"17\"/>\
                 <text x=\"{x}\" y=\"{}\">{}</text></g>",
                y + 4,
                esc(display(name))
            );
            continue;
        }
        let kind = shape
            .nodes
            .iter()
            .find(|n| &n.name == name)
            .map_or(NodeKind::Deterministic, |n| n.kind);
        let (cls, rx) = match kind {
            NodeKind::Agent => ("agent", 16),
            NodeKind::Deterministic => ("deterministic", 3),
        };
        let label = if visits[i] > 1 {
            format!("{} ×{}", name, visits[i])
        } else {
            name.clone()
        };
        let _ = write!(
            out,
            "<g class=\"gnode {cls}{class}\"><title>{} ({}){}</title><rect x=\"{}\" y=\"{}\" width=\"{NODE_W}\" \
             height=\"{NODE_H}\" rx=\"{rx}\"/><text x=\"{x}\" y=\"{}\">{}</text></g>",
            esc(name),
            cls,
            if visited {
                format!(", run {}×", visits[i])
            } else {
                String::new()
            },
            x - NODE_W / 2,
            y - NODE_H / 2,
            y + 5,
            esc(&label)
        );
    }
    out.push_str("</svg>");
    out
}

fn display(name: &str) -> &str {
    match name {
        START => "start",
        END => "end",
        other => other,
    }
}
