//! Structured output on the wire: how a [`ModelRequest`](super::ModelRequest) asks for a final
//! answer shaped by a JSON Schema, in each wire's own terms.
//!
//! - Anthropic has no response format, so the answer is a forced tool: one more tool,
//!   [`FINAL_ANSWER_TOOL`], whose input schema is the output schema, and `tool_choice: any`, so
//!   every step calls a tool and the turn ends when the model calls that one. Tool inputs must be
//!   objects: a schema whose root is not an object schema is wrapped as the property `value` of
//!   one ([`final_answer_input_schema`]), and [`final_answer_value`] unwraps it.
//! - OpenAI has `response_format: {type: "json_schema"}`; `strict: true` only when the schema
//!   fits strict mode ([`fits_openai_strict`]), else `strict: false`. The root must be an object
//!   there too; for any other root the adapter instructs instead ([`instruction`]) and the
//!   answer is parsed from the text.
//!
//! Validation is not done here: the agent checks every candidate against the schema, whatever
//! way it arrived.

use std::sync::Arc;

use serde_json::{Map, Value, json};

/// The name of the tool that carries the final answer on wires without a response format.
/// Chosen to be unlikely in a caller's own tools; a session that declares a tool of this name
/// is refused.
pub const FINAL_ANSWER_TOOL: &str = "deputy_final_answer";

/// The property that holds the answer when the schema's root is not an object schema.
const WRAPPED_PROPERTY: &str = "value";

/// What the final answer of this model call must be: a JSON value valid against `schema`.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputFormat {
    /// A JSON Schema (2020-12 unless it says otherwise), already checked to compile.
    pub schema: Arc<Value>,
}

impl OutputFormat {
    pub fn new(schema: Arc<Value>) -> Self {
        Self { schema }
    }

    /// Whether the schema's root describes objects only (`"type": "object"`).
    pub fn is_object_root(&self) -> bool {
        is_object_root(&self.schema)
    }
}

fn is_object_root(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// The description of the final-answer tool the model sees.
pub fn final_answer_description() -> &'static str {
    "Give your final answer by calling this tool once your work is done; its input is the answer. \
     Call it alone, after any other tools you need. If it answers with validation errors, call it \
     again with a corrected answer."
}

/// The input schema of the final-answer tool: the output schema itself when its root is an
/// object schema, else an object whose one required property `value` is the output schema
/// (with `$defs` / `definitions` moved to the new root, so `#/$defs/…` references still
/// resolve).
pub fn final_answer_input_schema(format: &OutputFormat) -> Value {
    let schema = format.schema.as_ref();
    if is_object_root(schema) {
        return schema.clone();
    }
    let mut inner = schema.clone();
    let mut root = Map::new();
    root.insert("type".into(), json!("object"));
    if let Value::Object(fields) = &mut inner {
        for key in ["$defs", "definitions"] {
            if let Some(defs) = fields.remove(key) {
                root.insert(key.into(), defs);
            }
        }
        if let Some(dialect) = fields.remove("$schema") {
            root.insert("$schema".into(), dialect);
        }
    }
    root.insert("properties".into(), json!({ WRAPPED_PROPERTY: inner }));
    root.insert("required".into(), json!([WRAPPED_PROPERTY]));
    root.insert("additionalProperties".into(), json!(false));
    Value::Object(root)
}

/// The answer a call of the final-answer tool carries: its input, unwrapped when the schema was
/// wrapped. An input without the `value` property is passed on as is, so validation reports it.
pub fn final_answer_value(format: &OutputFormat, input: Value) -> Value {
    if format.is_object_root() {
        return input;
    }
    match input {
        Value::Object(mut fields) if fields.contains_key(WRAPPED_PROPERTY) => {
            fields.remove(WRAPPED_PROPERTY).unwrap_or(Value::Null)
        }
        other => other,
    }
}

/// Whether OpenAI's strict structured outputs accept the schema as it is: an object root, and
/// every object schema in it with `additionalProperties: false` and every property required.
/// (OpenAI lists further unsupported keywords; a schema using them fails there with a 400,
/// which the caller sees as `AGENT_ERROR` with `error_kind: invalid_request`.)
pub fn fits_openai_strict(schema: &Value) -> bool {
    is_object_root(schema) && objects_are_strict(schema)
}

fn objects_are_strict(schema: &Value) -> bool {
    match schema {
        Value::Object(fields) => {
            let is_object = match fields.get("type") {
                Some(Value::String(kind)) => kind == "object",
                Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == "object"),
                _ => fields.contains_key("properties"),
            };
            if is_object {
                if fields.get("additionalProperties") != Some(&Value::Bool(false)) {
                    return false;
                }
                let properties = fields.get("properties").and_then(Value::as_object);
                let required: Vec<&str> = fields
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|names| names.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if properties
                    .is_some_and(|properties| properties.keys().any(|name| !required.contains(&name.as_str())))
                {
                    return false;
                }
            }
            // Every nested schema, wherever it sits (properties, items, $defs, anyOf, …).
            fields.iter().all(|(key, value)| match key.as_str() {
                // Values that are not schemas.
                "enum" | "const" | "required" | "default" | "examples" => true,
                "properties" | "$defs" | "definitions" | "patternProperties" => {
                    value.as_object().is_none_or(|map| map.values().all(objects_are_strict))
                }
                _ => objects_are_strict(value),
            })
        }
        Value::Array(items) => items.iter().all(objects_are_strict),
        _ => true,
    }
}

/// The instruction for wires that cannot enforce the schema themselves: appended to the system
/// prompt of the call, never stored in the history.
pub fn instruction(format: &OutputFormat) -> String {
    format!(
        "Your final answer must be only a JSON value, with no other text and no code fence, valid against \
         this JSON Schema:\n{}",
        format.schema
    )
}

/// The instruction where the final-answer tool cannot be forced (Anthropic with thinking on,
/// which refuses a forced `tool_choice`): the model is asked to call it, and an answer given as
/// text instead is still taken and checked.
pub fn tool_instruction() -> String {
    format!("When your work is done, give your final answer by calling the `{FINAL_ANSWER_TOOL}` tool.")
}

/// `system` with `addition` after it, borrowed when there is nothing to add.
pub fn system_with<'a>(system: Option<&'a str>, addition: Option<String>) -> Option<std::borrow::Cow<'a, str>> {
    use std::borrow::Cow;
    match (system.filter(|s| !s.is_empty()), addition) {
        (Some(system), Some(addition)) => Some(Cow::Owned(format!("{system}\n\n{addition}"))),
        (Some(system), None) => Some(Cow::Borrowed(system)),
        (None, addition) => addition.map(Cow::Owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(schema: Value) -> OutputFormat {
        OutputFormat::new(Arc::new(schema))
    }

    #[test]
    fn an_object_schema_is_the_tool_input_schema_and_anything_else_is_wrapped() {
        let object = format(json!({"type": "object", "properties": {"a": {"type": "integer"}}}));
        assert_eq!(final_answer_input_schema(&object), *object.schema);
        assert_eq!(final_answer_value(&object, json!({"a": 1})), json!({"a": 1}));

        let array =
            format(json!({"type": "array", "items": {"$ref": "#/$defs/n"}, "$defs": {"n": {"type": "number"}}}));
        assert_eq!(
            final_answer_input_schema(&array),
            json!({
                "type": "object",
                "$defs": {"n": {"type": "number"}},
                "properties": {"value": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
                "required": ["value"],
                "additionalProperties": false
            })
        );
        assert_eq!(final_answer_value(&array, json!({"value": [1, 2]})), json!([1, 2]));
        assert_eq!(final_answer_value(&array, json!({"other": 1})), json!({"other": 1}));
    }

    #[test]
    fn strict_mode_needs_closed_objects_with_every_property_required() {
        let strict = json!({
            "type": "object", "additionalProperties": false, "required": ["items", "name"],
            "properties": {
                "name": {"type": "string"},
                "items": {"type": "array", "items": {
                    "type": "object", "additionalProperties": false, "required": ["id"],
                    "properties": {"id": {"type": "integer"}}
                }}
            }
        });
        assert!(fits_openai_strict(&strict));
        let mut open_nested = strict.clone();
        open_nested["properties"]["items"]["items"].as_object_mut().unwrap().remove("additionalProperties");
        assert!(!fits_openai_strict(&open_nested));
        let mut optional = strict.clone();
        optional["required"] = json!(["name"]);
        assert!(!fits_openai_strict(&optional));
        assert!(!fits_openai_strict(&json!({"type": "array", "items": {"type": "string"}})));
        // A property *named* like a keyword is not mistaken for one.
        let named_required = json!({"type": "object", "additionalProperties": false, "required": ["enum"],
                                    "properties": {"enum": {"type": "string"}}});
        assert!(fits_openai_strict(&named_required));
    }
}
