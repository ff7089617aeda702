//! `diag graph`: prints the compiled diagnosis topology as Mermaid.

use std::io::Write;

use clap::Args;

use super::{io_error, CommandError, Exit};
use diag_diagnosis::topology;

/// Print the compiled diagnosis topology as a Mermaid flowchart.
///
/// The chart is generated from the compiled graph itself: every node, and every edge
/// labelled with the outcomes it routes, its condition, the counter bounding it and its effect.
#[derive(Debug, Args)]
pub struct GraphArgs {}

pub fn cmd_graph(_args: &GraphArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let graph = topology::shape().map_err(|e| {
        CommandError::new(Exit::Internal, format!("topology does not compile: {e}"))
    })?;
    out.write_all(graph.to_mermaid().as_bytes())
        .map_err(io_error)
}
