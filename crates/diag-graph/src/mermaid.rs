//! Mermaid rendering of a compiled graph, generated from the compiled routes themselves so
//! the picture can never drift from what runs.

use std::fmt::Write as _;

use super::{CompiledGraph, Guard, NodeKind, Outcome};

/// The id of the entry point in the rendered flowchart.
pub const START_ID: &str = "__start__";
/// The id of the end in the rendered flowchart.
pub const END_ID: &str = "__end__";

impl<S, O: Outcome> CompiledGraph<S, O> {
    /// The topology as a Mermaid `flowchart TD`: agent nodes are rounded, deterministic nodes
    /// square; every edge is labelled with the outcomes it routes, its condition, the counter
    /// that bounds it, and the effect applied when it is taken.
    pub fn to_mermaid(&self) -> String {
        let mut out = String::from("flowchart TD\n");
        let _ = writeln!(out, "    {START_ID}((start))");
        for n in &self.nodes {
            let _ = match n.kind {
                NodeKind::Agent => writeln!(out, "    {0}([\"{0}\"])", n.name),
                NodeKind::Deterministic => writeln!(out, "    {0}[\"{0}\"]", n.name),
            };
        }
        let _ = writeln!(out, "    {END_ID}((end))");
        let _ = writeln!(out, "    {START_ID} --> {}", self.nodes[self.start].name);
        for r in &self.routes {
            let from = self.nodes[r.from].name;
            let outcomes = r
                .outcomes
                .iter()
                .map(|o| o.to_string())
                .collect::<Vec<_>>()
                .join(" / ");
            for b in &r.branches {
                let mut label = outcomes.clone();
                if !b.branch.label.is_empty() {
                    let _ = write!(label, ": {}", b.branch.label);
                }
                if let Guard::Counted { counter, max, .. } = &b.branch.guard {
                    let _ = write!(label, " [{} below {}]", counter.name, max);
                }
                if let Some(effect) = &b.branch.effect {
                    let _ = write!(label, " => {}", effect.name);
                }
                let to = b.target.map_or(END_ID, |t| self.nodes[t].name);
                let _ = writeln!(out, "    {from} -->|\"{}\"| {to}", label.replace('"', "'"));
            }
        }
        out
    }
}
