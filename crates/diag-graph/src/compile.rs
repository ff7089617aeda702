//! Topology validation: a graph that could loop forever, strand a node, leave an outcome
//! unrouted or never reach the end is rejected here, before it can run.

use std::collections::HashMap;

use thiserror::Error;

use super::{
    Branch, CompiledBranch, CompiledGraph, CompiledNode, CompiledRoute, GraphBuilder, Guard,
    Outcome, Target,
};

/// Why a graph did not compile. Every variant names the place that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CompileError {
    #[error("start node `{0}` is not declared")]
    UnknownStart(String),
    #[error("node `{0}` is declared twice")]
    DuplicateNode(String),
    #[error("node `{0}` declares no outcomes")]
    NoOutcomes(String),
    #[error("a route starts at `{0}`, which is not a declared node")]
    RouteFromUnknownNode(String),
    #[error("node `{node}` routes outcome {outcome}, which it does not declare")]
    UndeclaredOutcome { node: String, outcome: String },
    #[error("node `{node}` routes outcome {outcome} twice")]
    DuplicateRoute { node: String, outcome: String },
    #[error("node `{node}` on {outcome} targets `{target}`, which is not a declared node")]
    UnknownTarget {
        node: String,
        outcome: String,
        target: String,
    },
    #[error(
        "node `{node}` on {outcome} has no unconditional last branch, so some states have no route"
    )]
    NonTotalRoute { node: String, outcome: String },
    #[error("node `{node}` on {outcome} has a branch after its unconditional one, which can never be taken")]
    DeadBranch { node: String, outcome: String },
    #[error("node `{node}` never routes its outcome {outcome}")]
    UnroutedStatus { node: String, outcome: String },
    #[error("node `{0}` is unreachable from the start")]
    UnreachableNode(String),
    #[error("node `{0}` has no path to the end")]
    NoPathToEnd(String),
    #[error("cycle {} has no counted exit", .0.join(" -> "))]
    UncountedCycle(Vec<String>),
}

impl<S, O: Outcome> GraphBuilder<S, O> {
    /// Validates the topology and returns the runnable graph.
    ///
    /// Checks, in order: the start and every route source and target exist; every node
    /// declares outcomes and routes each exactly once; every route ends in an unconditional
    /// branch; every node is reachable from the start and can reach the end; and every cycle
    /// passes through a counted branch (the graph without counted branches is acyclic).
    pub fn compile(self) -> Result<CompiledGraph<S, O>, CompileError> {
        let mut index: HashMap<&'static str, usize> = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if index.insert(n.name, i).is_some() {
                return Err(CompileError::DuplicateNode(n.name.to_string()));
            }
            if n.outcomes.is_empty() {
                return Err(CompileError::NoOutcomes(n.name.to_string()));
            }
        }
        let start = *index
            .get(self.start)
            .ok_or_else(|| CompileError::UnknownStart(self.start.to_string()))?;

        // route_of[node][outcome position] = route index
        let mut route_of: Vec<Vec<Option<usize>>> = self
            .nodes
            .iter()
            .map(|n| vec![None; n.outcomes.len()])
            .collect();
        let mut routes = Vec::with_capacity(self.routes.len());
        for (ri, r) in self.routes.into_iter().enumerate() {
            let from = *index
                .get(r.from)
                .ok_or_else(|| CompileError::RouteFromUnknownNode(r.from.to_string()))?;
            let decl = &self.nodes[from];
            let outcome_name = r
                .outcomes
                .iter()
                .map(|o| o.to_string())
                .collect::<Vec<_>>()
                .join("/");
            for o in &r.outcomes {
                let pos = decl.outcomes.iter().position(|d| d == o).ok_or_else(|| {
                    CompileError::UndeclaredOutcome {
                        node: decl.name.to_string(),
                        outcome: o.to_string(),
                    }
                })?;
                if route_of[from][pos].replace(ri).is_some() {
                    return Err(CompileError::DuplicateRoute {
                        node: decl.name.to_string(),
                        outcome: o.to_string(),
                    });
                }
            }
            check_total(decl.name, &outcome_name, &r.branches)?;
            let mut branches = Vec::with_capacity(r.branches.len());
            for b in r.branches {
                let target = match b.target {
                    Target::End => None,
                    Target::Node(name) => {
                        Some(*index.get(name).ok_or_else(|| CompileError::UnknownTarget {
                            node: decl.name.to_string(),
                            outcome: outcome_name.clone(),
                            target: name.to_string(),
                        })?)
                    }
                };
                branches.push(CompiledBranch { branch: b, target });
            }
            routes.push(CompiledRoute {
                from,
                outcomes: r.outcomes,
                branches,
            });
        }

        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.into_iter().enumerate() {
            let mut outcomes = Vec::with_capacity(n.outcomes.len());
            for (pos, o) in n.outcomes.iter().enumerate() {
                let ri = route_of[i][pos].ok_or_else(|| CompileError::UnroutedStatus {
                    node: n.name.to_string(),
                    outcome: o.to_string(),
                })?;
                outcomes.push((*o, ri));
            }
            nodes.push(CompiledNode {
                name: n.name,
                kind: n.kind,
                outcomes,
                node: n.node,
            });
        }

        let graph = CompiledGraph {
            start,
            nodes,
            routes,
        };
        graph.check_reachability()?;
        graph.check_counted_cycles()?;
        Ok(graph)
    }
}

fn check_total<S>(node: &str, outcome: &str, branches: &[Branch<S>]) -> Result<(), CompileError> {
    match branches
        .iter()
        .position(|b| matches!(b.guard, Guard::Always))
    {
        None => Err(CompileError::NonTotalRoute {
            node: node.to_string(),
            outcome: outcome.to_string(),
        }),
        Some(p) if p + 1 != branches.len() => Err(CompileError::DeadBranch {
            node: node.to_string(),
            outcome: outcome.to_string(),
        }),
        Some(_) => Ok(()),
    }
}

impl<S, O: Outcome> CompiledGraph<S, O> {
    /// Successors of each node; `None` stands for the end. With `counted = false`, counted
    /// branches are left out.
    fn successors(&self, counted: bool) -> Vec<Vec<Option<usize>>> {
        let mut succ = vec![Vec::new(); self.nodes.len()];
        for r in &self.routes {
            for b in &r.branches {
                if !counted && b.branch.is_counted() {
                    continue;
                }
                if !succ[r.from].contains(&b.target) {
                    succ[r.from].push(b.target);
                }
            }
        }
        succ
    }

    fn check_reachability(&self) -> Result<(), CompileError> {
        let succ = self.successors(true);
        let n = self.nodes.len();
        let mut seen = vec![false; n];
        let mut stack = vec![self.start];
        seen[self.start] = true;
        while let Some(i) = stack.pop() {
            for t in succ[i].iter().flatten() {
                if !seen[*t] {
                    seen[*t] = true;
                    stack.push(*t);
                }
            }
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            return Err(CompileError::UnreachableNode(
                self.nodes[i].name.to_string(),
            ));
        }
        // Backwards from the end: a node reaches the end if any successor does.
        let mut reaches = vec![false; n];
        loop {
            let mut changed = false;
            for i in 0..n {
                if !reaches[i] && succ[i].iter().any(|t| t.is_none_or(|t| reaches[t])) {
                    reaches[i] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        if let Some(i) = reaches.iter().position(|r| !r) {
            return Err(CompileError::NoPathToEnd(self.nodes[i].name.to_string()));
        }
        Ok(())
    }

    /// Every cycle must pass through a counted branch: with counted branches removed, the
    /// graph must be acyclic. A cycle found is reported by its node names.
    fn check_counted_cycles(&self) -> Result<(), CompileError> {
        let succ = self.successors(false);
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Active,
            Done,
        }
        let n = self.nodes.len();
        let mut mark = vec![Mark::New; n];
        for root in 0..n {
            if mark[root] != Mark::New {
                continue;
            }
            // Iterative DFS with an explicit path so a cycle can be named.
            let mut path: Vec<(usize, usize)> = vec![(root, 0)];
            mark[root] = Mark::Active;
            while let Some(&mut (node, ref mut next)) = path.last_mut() {
                let targets: Vec<usize> = succ[node].iter().flatten().copied().collect();
                if *next < targets.len() {
                    let t = targets[*next];
                    *next += 1;
                    match mark[t] {
                        Mark::New => {
                            mark[t] = Mark::Active;
                            path.push((t, 0));
                        }
                        Mark::Active => {
                            let from = path.iter().position(|(p, _)| *p == t).unwrap_or(0);
                            let mut names: Vec<String> = path[from..]
                                .iter()
                                .map(|(p, _)| self.nodes[*p].name.to_string())
                                .collect();
                            names.push(self.nodes[t].name.to_string());
                            return Err(CompileError::UncountedCycle(names));
                        }
                        Mark::Done => {}
                    }
                } else {
                    mark[node] = Mark::Done;
                    path.pop();
                }
            }
        }
        Ok(())
    }
}
