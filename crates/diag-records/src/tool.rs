//! A tool as a model sees it in a request's catalog.

use serde::{Deserialize, Serialize};

/// A tool as offered to a model: name, description, JSON Schema of its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}
