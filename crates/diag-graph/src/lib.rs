//! The generic compiled graph: named nodes routed on the outcomes they return.
//!
//! This module knows nothing about diagnosis. It owns the shape every `diag` run is forced
//! into: a start node, nodes that each declare the finite set of outcomes they can return,
//! routes that map every (node, outcome) pair to ordered guarded branches, and counters that
//! bound every cycle. [`GraphBuilder::compile`] proves those properties before anything runs;
//! [`CompiledGraph::invoke`] then executes with a step limit and cancellation and appends one
//! terminal [`Event`] per node attempt.
//!
//! **Architecture invariant:** nothing here performs I/O. Time enters through [`Clock`], and
//! the nodes (which may do I/O) are trait objects supplied by the caller.

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod clock;
mod compile;
mod engine;
mod event;
mod mermaid;
mod shape;

use std::fmt::{Debug, Display};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use compile::CompileError;
pub use engine::{EngineError, EngineFailure, InvokeOptions, NoopObserver, Observer};
pub use event::{Detail, DetailValue, Event};
pub use shape::{GraphShape, ShapeEdge, ShapeNode};

/// What a node attempt hands back to the engine: the outcome to route on and bounded
/// control data for its event.
#[derive(Debug, Clone, PartialEq)]
pub struct Step<O> {
    pub outcome: O,
    pub detail: Detail,
}

impl<O> Step<O> {
    pub fn new(outcome: O) -> Self {
        Step {
            outcome,
            detail: Detail::default(),
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<DetailValue>) -> Self {
        self.detail.insert(key, value);
        self
    }
}

/// The future a node returns; boxed so nodes can be trait objects.
pub type NodeFuture<'a, O> = Pin<Box<dyn Future<Output = Step<O>> + Send + 'a>>;

/// One node of a graph. Implementations read their declared input from the state, write
/// their declared output back, and return the outcome the graph routes on.
pub trait Node<S, O>: Send + Sync {
    fn run<'a>(&'a self, state: &'a mut S, config: &'a RunConfig) -> NodeFuture<'a, O>;
}

/// The outcome type a graph routes on.
pub trait Outcome: Copy + Eq + Debug + Display + Send + Sync + 'static {}
impl<T: Copy + Eq + Debug + Display + Send + Sync + 'static> Outcome for T {}

/// What the engine needs from a state: the evidence round it is in, and a place for events.
pub trait GraphState<O>: Send {
    fn round(&self) -> u32;
    fn push_event(&mut self, event: Event<O>);
}

/// The identity of one run, handed unchanged to every node, hook and tool recorder.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunConfig {
    /// Always equal to `metadata.run_id`.
    pub thread_id: String,
    pub metadata: RunMetadata,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunMetadata {
    pub session_id: String,
    pub run_id: String,
}

impl RunConfig {
    pub fn new(session_id: impl Into<String>, run_id: impl Into<String>) -> Self {
        let run_id = run_id.into();
        RunConfig {
            thread_id: run_id.clone(),
            metadata: RunMetadata {
                session_id: session_id.into(),
                run_id,
            },
        }
    }

    pub fn run_id(&self) -> &str {
        &self.metadata.run_id
    }

    pub fn session_id(&self) -> &str {
        &self.metadata.session_id
    }
}

/// How a node is drawn and described. The engine routes all kinds alike and tells its
/// observer which kind is starting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// Calls a model.
    Agent,
    /// Plain code over state.
    Deterministic,
}

/// Where a branch leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Node(&'static str),
    End,
}

/// A counter that bounds a cycle. The engine reads it to decide whether a counted branch is
/// still open and bumps it when the branch is taken, so no node can forget to count.
pub struct Counter<S> {
    pub name: &'static str,
    pub get: fn(&S) -> u32,
    pub bump: fn(&mut S),
}

impl<S> Clone for Counter<S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for Counter<S> {}

/// When a branch may be taken.
pub enum Guard<S> {
    /// Always; the last branch of every route must be this.
    Always,
    /// While a predicate over the state holds.
    When(fn(&S) -> bool),
    /// While `counter < max` (and the predicate, if any, holds). Taking it bumps the counter.
    Counted {
        counter: Counter<S>,
        max: u32,
        when: Option<fn(&S) -> bool>,
    },
}

impl<S> Clone for Guard<S> {
    fn clone(&self) -> Self {
        match self {
            Guard::Always => Guard::Always,
            Guard::When(f) => Guard::When(*f),
            Guard::Counted { counter, max, when } => Guard::Counted {
                counter: *counter,
                max: *max,
                when: *when,
            },
        }
    }
}

/// A named state change applied when a branch is taken (for example, entering a new
/// evidence round). Effects are part of the topology, so scripted nodes cannot skip them.
pub struct Effect<S> {
    pub name: &'static str,
    pub apply: fn(&mut S),
}

impl<S> Clone for Effect<S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for Effect<S> {}

/// One guarded way out of a (node, outcome) pair.
pub struct Branch<S> {
    /// The condition in words; printed on the Mermaid edge.
    pub label: &'static str,
    pub guard: Guard<S>,
    pub target: Target,
    pub effect: Option<Effect<S>>,
}

impl<S> Clone for Branch<S> {
    fn clone(&self) -> Self {
        Branch {
            label: self.label,
            guard: self.guard.clone(),
            target: self.target,
            effect: self.effect,
        }
    }
}

impl<S> Branch<S> {
    /// The unconditional branch that closes a route.
    pub fn otherwise(target: Target) -> Self {
        Branch {
            label: "",
            guard: Guard::Always,
            target,
            effect: None,
        }
    }

    pub fn when(label: &'static str, pred: fn(&S) -> bool, target: Target) -> Self {
        Branch {
            label,
            guard: Guard::When(pred),
            target,
            effect: None,
        }
    }

    pub fn counted(label: &'static str, counter: Counter<S>, max: u32, target: Target) -> Self {
        Branch {
            label,
            guard: Guard::Counted {
                counter,
                max,
                when: None,
            },
            target,
            effect: None,
        }
    }

    pub fn counted_when(
        label: &'static str,
        counter: Counter<S>,
        max: u32,
        pred: fn(&S) -> bool,
        target: Target,
    ) -> Self {
        Branch {
            label,
            guard: Guard::Counted {
                counter,
                max,
                when: Some(pred),
            },
            target,
            effect: None,
        }
    }

    pub fn labelled(mut self, label: &'static str) -> Self {
        self.label = label;
        self
    }

    pub fn effect(mut self, effect: Effect<S>) -> Self {
        self.effect = Some(effect);
        self
    }

    pub(crate) fn is_open(&self, state: &S) -> bool {
        match &self.guard {
            Guard::Always => true,
            Guard::When(pred) => pred(state),
            Guard::Counted { counter, max, when } => {
                (counter.get)(state) < *max && when.is_none_or(|pred| pred(state))
            }
        }
    }

    pub(crate) fn is_counted(&self) -> bool {
        matches!(self.guard, Guard::Counted { .. })
    }
}

struct NodeDecl<S, O> {
    name: &'static str,
    kind: NodeKind,
    outcomes: Vec<O>,
    node: Arc<dyn Node<S, O>>,
}

struct RouteDecl<S, O> {
    from: &'static str,
    outcomes: Vec<O>,
    branches: Vec<Branch<S>>,
}

/// Collects nodes and routes; [`GraphBuilder::compile`] validates them into a [`CompiledGraph`].
pub struct GraphBuilder<S, O> {
    start: &'static str,
    nodes: Vec<NodeDecl<S, O>>,
    routes: Vec<RouteDecl<S, O>>,
}

impl<S, O: Outcome> GraphBuilder<S, O> {
    pub fn new(start: &'static str) -> Self {
        GraphBuilder {
            start,
            nodes: Vec::new(),
            routes: Vec::new(),
        }
    }

    /// Declares a node and every outcome it may return.
    pub fn node(
        &mut self,
        name: &'static str,
        kind: NodeKind,
        outcomes: &[O],
        node: Arc<dyn Node<S, O>>,
    ) -> &mut Self {
        self.nodes.push(NodeDecl {
            name,
            kind,
            outcomes: outcomes.to_vec(),
            node,
        });
        self
    }

    /// Routes the given outcomes of `from` through `branches`, tried in order.
    pub fn route(
        &mut self,
        from: &'static str,
        outcomes: &[O],
        branches: Vec<Branch<S>>,
    ) -> &mut Self {
        self.routes.push(RouteDecl {
            from,
            outcomes: outcomes.to_vec(),
            branches,
        });
        self
    }

    /// Shorthand for a route with one unconditional branch.
    pub fn edge(&mut self, from: &'static str, outcomes: &[O], target: Target) -> &mut Self {
        self.route(from, outcomes, vec![Branch::otherwise(target)])
    }
}

/// A validated graph, ready to run any number of times.
pub struct CompiledGraph<S, O> {
    start: usize,
    nodes: Vec<CompiledNode<S, O>>,
    routes: Vec<CompiledRoute<S, O>>,
}

struct CompiledNode<S, O> {
    name: &'static str,
    kind: NodeKind,
    /// Each declared outcome and the index of its route.
    outcomes: Vec<(O, usize)>,
    node: Arc<dyn Node<S, O>>,
}

struct CompiledRoute<S, O> {
    from: usize,
    outcomes: Vec<O>,
    branches: Vec<CompiledBranch<S>>,
}

struct CompiledBranch<S> {
    branch: Branch<S>,
    /// Index of the target node; `None` is the end.
    target: Option<usize>,
}

impl<S, O: Outcome> CompiledGraph<S, O> {
    /// Node names in declaration order.
    pub fn node_names(&self) -> Vec<&'static str> {
        self.nodes.iter().map(|n| n.name).collect()
    }

    pub fn start(&self) -> &'static str {
        self.nodes[self.start].name
    }

    /// The declared outcomes of a node, or `None` if there is no such node.
    pub fn outcomes_of(&self, node: &str) -> Option<Vec<O>> {
        self.nodes
            .iter()
            .find(|n| n.name == node)
            .map(|n| n.outcomes.iter().map(|(o, _)| *o).collect())
    }
}
