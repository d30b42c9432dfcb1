//! A tool's input schema, with its JSON text made once.
//!
//! Every model request declares the session's tools, so every turn serialized their schemas
//! again: about 20 KB of JSON for the built-ins alone, 4% of an in-memory turn's CPU (perf,
//! docs/BENCHMARKS.md), and a walk of each schema to size the body. A declaration is shared by
//! the sessions that declare it and never changes, so its text is made on first use and kept
//! beside the value. The value stays what callers read and what is stored; the text is only
//! what the wire adapters write.

use std::fmt;
use std::ops::Deref;
use std::sync::OnceLock;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// A JSON Schema as a value, and its JSON text once something asked for it. Immutable: a
/// changed schema is a new one, so the text can never be stale.
#[derive(Clone, Default)]
pub struct ToolSchema {
    value: Value,
    text: OnceLock<Box<RawValue>>,
}

impl ToolSchema {
    pub fn new(value: Value) -> Self {
        Self { value, text: OnceLock::new() }
    }

    /// The schema's JSON text, made on the first call.
    pub fn json(&self) -> &RawValue {
        self.text.get_or_init(|| {
            // A `Value` always serializes: its keys are strings and its numbers finite.
            serde_json::value::to_raw_value(&self.value).unwrap_or_else(|_| RawValue::NULL.to_owned())
        })
    }
}

impl Deref for ToolSchema {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.value
    }
}

impl From<Value> for ToolSchema {
    fn from(value: Value) -> Self {
        Self::new(value)
    }
}

impl PartialEq for ToolSchema {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl PartialEq<Value> for ToolSchema {
    fn eq(&self, other: &Value) -> bool {
        self.value == *other
    }
}

impl fmt::Debug for ToolSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

impl fmt::Display for ToolSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json().get())
    }
}

/// As the value: stores and non-JSON formats see a plain schema.
impl Serialize for ToolSchema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ToolSchema {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_text_is_the_values_json_and_made_once() {
        let schema = ToolSchema::new(json!({"type": "object", "properties": {"path": {"type": "string"}}}));
        let text = schema.json();
        assert_eq!(serde_json::from_str::<Value>(text.get()).unwrap(), *schema);
        assert!(std::ptr::eq(text, schema.json()), "the second call gives the same text");
        assert_eq!(schema.to_string(), text.get());
    }

    #[test]
    fn it_serializes_and_compares_as_its_value() {
        let value = json!({"type": "object", "required": ["x"]});
        let schema = ToolSchema::from(value.clone());
        assert_eq!(serde_json::to_value(&schema).unwrap(), value);
        let back: ToolSchema = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(back, schema);
        assert_eq!(schema, value);
    }
}
