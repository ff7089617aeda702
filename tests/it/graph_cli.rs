//! `diag graph`: the binary prints the compiled diagnosis topology as a Mermaid flowchart whose
//! structure matches the compiled graph — every node declared, every edge well formed between
//! declared ids, and every declared outcome of every node routed by some labelled edge.

use std::collections::BTreeSet;

use assert_cmd::cargo::cargo_bin_cmd;
use diag_diagnosis::topology;

const START: &str = "__start__";
const END: &str = "__end__";

/// Runs `diag graph` and returns its stdout, asserting exit code 0 and an empty stderr.
fn graph_output() -> String {
    let out = cargo_bin_cmd!("diag")
        .arg("graph")
        .output()
        .expect("diag graph runs");
    assert_eq!(out.status.code(), Some(0), "exit code");
    assert!(
        out.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

fn is_id(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A node declaration line: `id(["id"])` (agent), `id["id"]` (deterministic) or
/// `id((text))` (start/end). Returns the id.
fn declaration(line: &str) -> Option<String> {
    let line = line.trim();
    if line.contains("-->") {
        return None;
    }
    let split = line.find(['(', '['])?;
    let (id, shape) = line.split_at(split);
    if !is_id(id) {
        return None;
    }
    let well_formed = shape == format!("([\"{id}\"])")
        || shape == format!("[\"{id}\"]")
        || (shape.starts_with("((") && shape.ends_with("))") && shape.len() > 4);
    well_formed.then(|| id.to_string())
}

/// A labelled edge line `A -->|"label"| B`: (A, label, B).
fn labelled_edge(line: &str) -> Option<(String, String, String)> {
    let (from, rest) = line.trim().split_once(" -->|\"")?;
    let (label, to) = rest.rsplit_once("\"| ")?;
    (is_id(from) && is_id(to) && !label.is_empty() && !label.contains('"'))
        .then(|| (from.to_string(), label.to_string(), to.to_string()))
}

/// The outcomes a label routes: the part before its condition (`:`), counter (` [`) or
/// effect (` =>`), split on ` / `.
fn label_outcomes(label: &str) -> BTreeSet<String> {
    let end = [":", " [", " =>"]
        .iter()
        .filter_map(|sep| label.find(sep))
        .min()
        .unwrap_or(label.len());
    label[..end]
        .split(" / ")
        .map(|o| o.trim().to_string())
        .collect()
}

struct Chart {
    lines: Vec<String>,
    declared: BTreeSet<String>,
    /// Labelled edges (from, label, to).
    edges: Vec<(String, String, String)>,
    /// Unlabelled edge lines, verbatim (trimmed).
    plain_edges: Vec<String>,
}

fn chart() -> Chart {
    let text = graph_output();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut declared = BTreeSet::new();
    let mut edges = Vec::new();
    let mut plain_edges = Vec::new();
    for line in lines.iter().skip(1) {
        if let Some(id) = declaration(line) {
            assert!(declared.insert(id.clone()), "`{id}` declared twice");
        } else if let Some(edge) = labelled_edge(line) {
            edges.push(edge);
        } else if line.contains("-->") {
            plain_edges.push(line.trim().to_string());
        } else {
            panic!("line is neither a declaration nor an edge: {line:?}");
        }
    }
    Chart {
        lines,
        declared,
        edges,
        plain_edges,
    }
}

#[test]
fn graph_exits_zero_with_empty_stderr() {
    let text = graph_output();
    assert!(text.ends_with('\n'));
}

#[test]
fn graph_starts_with_flowchart_td() {
    let c = chart();
    assert_eq!(c.lines.first().map(String::as_str), Some("flowchart TD"));
}

#[test]
fn graph_declares_all_eight_nodes() {
    let c = chart();
    for node in topology::NODES {
        assert!(c.declared.contains(node), "`{node}` is not declared");
    }
    let want: BTreeSet<String> = topology::NODES
        .iter()
        .map(|n| n.to_string())
        .chain([START.to_string(), END.to_string()])
        .collect();
    assert_eq!(c.declared, want, "exactly the eight nodes, start and end");
}

#[test]
fn graph_edges_are_labelled_between_declared_ids() {
    let c = chart();
    assert!(!c.edges.is_empty());
    for (from, label, to) in &c.edges {
        assert!(c.declared.contains(from), "edge from undeclared `{from}`");
        assert!(c.declared.contains(to), "edge to undeclared `{to}`");
        assert_ne!(from, END, "nothing leaves the end");
        assert_ne!(to, START, "nothing enters the start");
        assert!(!label_outcomes(label).is_empty(), "{label}");
    }
    // The only edge without a label is the entry edge.
    assert_eq!(
        c.plain_edges,
        vec![format!("{START} --> {}", topology::PLANNER)]
    );
}

#[test]
fn graph_start_edge_goes_to_planner() {
    let c = chart();
    let from_start: Vec<&String> = c
        .plain_edges
        .iter()
        .filter(|l| l.starts_with(START))
        .collect();
    assert_eq!(from_start, vec![&format!("{START} --> planner")]);
    assert!(c.edges.iter().all(|(from, ..)| from != START));
}

#[test]
fn graph_labels_cover_every_declared_outcome() {
    let c = chart();
    let shape = topology::shape().expect("topology compiles");
    for node in shape.node_names() {
        let outcomes = shape.outcomes_of(node).expect("declared node");
        assert!(!outcomes.is_empty());
        let labelled: BTreeSet<String> = c
            .edges
            .iter()
            .filter(|(from, ..)| from == node)
            .flat_map(|(_, label, _)| label_outcomes(label))
            .collect();
        for outcome in &outcomes {
            assert!(
                labelled.contains(&outcome.to_string()),
                "`{node}` never routes {outcome} in the chart (labels: {labelled:?})"
            );
        }
        // And no label names an outcome the node does not declare.
        let declared: BTreeSet<String> = outcomes.iter().map(|o| o.to_string()).collect();
        assert_eq!(labelled, declared, "`{node}` labels vs declared outcomes");
    }
}

#[test]
fn graph_reaches_the_end_only_from_composer_and_fallback() {
    let c = chart();
    let into_end: BTreeSet<&str> = c
        .edges
        .iter()
        .filter(|(_, _, to)| to == END)
        .map(|(from, ..)| from.as_str())
        .collect();
    assert_eq!(
        into_end,
        BTreeSet::from([topology::COMPOSER, topology::FALLBACK])
    );
}

#[test]
fn graph_prints_exactly_the_compiled_topology() {
    let shape = topology::shape().expect("topology compiles");
    assert_eq!(graph_output(), shape.to_mermaid());
}
