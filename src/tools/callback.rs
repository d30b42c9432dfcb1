//! Callback tools: declared by the caller at `session_create`, executed by the caller.
//!
//! The model sees them as ordinary tools. deputy never runs them: when the model calls one,
//! the turn stops with the call pending ([`crate::agent::pending`]) and the caller answers it
//! with the next `session_turn`. So a [`CallbackTool`] is a declaration, not a
//! [`Tool`](super::Tool): the [`ToolScope`](super::ToolScope) keeps its spec apart from the
//! tools it runs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::SessionError;
use crate::llm::ToolSpec;

/// A tool the caller declares and executes: `{name, description, input_schema}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallbackTool {
    /// Letters, digits, `_`, `-` (at most 64).
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// JSON Schema (`"type": "object"`) of its arguments.
    #[serde(default = "any_object", deserialize_with = "crate::text::json::deserialize")]
    #[schemars(schema_with = "crate::text::json::schema::<crate::text::json::AnyObject>")]
    pub input_schema: serde_json::Value,
}

fn any_object() -> serde_json::Value {
    serde_json::json!({"type": "object"})
}

impl CallbackTool {
    /// The declaration the model sees.
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone().into(),
        }
    }

    /// Refuses names a model API would reject and schemas that are not object schemas.
    pub fn validate(&self) -> Result<(), SessionError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok {
            return Err(SessionError::invalid(format!(
                "callback name {:?}: use 1 to 64 letters, digits, `_` or `-`",
                self.name
            )));
        }
        if self.input_schema.get("type").and_then(serde_json::Value::as_str) != Some("object") {
            return Err(SessionError::invalid(format!(
                "callback {:?}: input_schema must be a JSON Schema with \"type\": \"object\"",
                self.name
            )));
        }
        Ok(())
    }
}
