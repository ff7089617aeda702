//! The compiled topology as plain data (nodes, and edges with their labels), for renderers
//! outside the engine such as the SVG graph of `diag report`. Generated from the compiled
//! routes themselves, like the Mermaid chart, so a picture can never drift from what runs.

use std::fmt::Write as _;

use super::{CompiledGraph, Guard, NodeKind, Outcome};

/// A node of the compiled graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeNode {
    pub name: String,
    pub kind: NodeKind,
}

/// One branch of one route: from a node to a node or to the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeEdge {
    pub from: String,
    /// `None` is the end of the graph.
    pub to: Option<String>,
    /// Outcomes, condition, counter and effect, as `diag graph` labels the edge.
    pub label: String,
    /// Bounded by a counter (a retry or the evidence round).
    pub counted: bool,
}

/// The whole topology: nodes in declaration order, the start node, every branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphShape {
    pub start: String,
    pub nodes: Vec<ShapeNode>,
    pub edges: Vec<ShapeEdge>,
}

impl<S, O: Outcome> CompiledGraph<S, O> {
    /// The topology as plain data: every node and every branch of every route.
    pub fn shape(&self) -> GraphShape {
        let mut edges = Vec::new();
        for r in &self.routes {
            let from = self.nodes[r.from].name.to_string();
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
                edges.push(ShapeEdge {
                    from: from.clone(),
                    to: b.target.map(|t| self.nodes[t].name.to_string()),
                    label,
                    counted: b.branch.is_counted(),
                });
            }
        }
        GraphShape {
            start: self.nodes[self.start].name.to_string(),
            nodes: self
                .nodes
                .iter()
                .map(|n| ShapeNode {
                    name: n.name.to_string(),
                    kind: n.kind,
                })
                .collect(),
            edges,
        }
    }
}
