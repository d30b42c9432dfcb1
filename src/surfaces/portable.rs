//! Schemas every client can use: the one transform applied wherever deputy generates a JSON
//! Schema (the tool catalog of `tools/list`, `schemas/`, the OpenAPI document).
//!
//! schemars writes Rust-specific `format`s (`uint64`, `uint`, `int32`, `double`, …), which no
//! JSON Schema validator knows: Ajv-based clients (the TypeScript SDK, the MCP Inspector,
//! the conformance suite) print a warning for each one on every `tools/list`, and strict
//! consumers reject them. They are removed; `minimum: 0` already says "unsigned". And a field
//! of any JSON (`serde_json::Value`) comes out as the bare schema `true`, which the MCP
//! Inspector's portability check (`--strict`) counts as an error; it is spelt as an explicit
//! list of every JSON type instead, which validates exactly the same values.

use schemars::Schema;
use schemars::transform::{Transform, transform_subschemas};
use serde_json::{Map, Value, json};

/// The `format` values JSON Schema 2020-12 defines; any other is dropped.
pub const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Every JSON type: the explicit spelling of "any JSON value".
pub const ANY_JSON: [&str; 6] = ["object", "array", "string", "number", "boolean", "null"];

/// Keywords that make a schema constrain its value; a schema with none of them accepts anything.
const CONSTRAINING: [&str; 36] = [
    "type",
    "enum",
    "const",
    "$ref",
    "$dynamicRef",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "if",
    "properties",
    "patternProperties",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "required",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "items",
    "prefixItems",
    "contains",
    "unevaluatedItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "format",
];

/// The schemars transform: drops non-standard formats and makes "any JSON" explicit, in the
/// schema and all its subschemas.
#[derive(Debug, Clone, Copy, Default)]
pub struct Portable;

impl Transform for Portable {
    fn transform(&mut self, schema: &mut Schema) {
        if let Some(object) = schema.as_object_mut() {
            drop_nonstandard_format(object);
            for key in ["properties", "patternProperties", "$defs", "definitions"] {
                if let Some(Value::Object(members)) = object.get_mut(key) {
                    members.values_mut().for_each(explicit_any);
                }
            }
            for key in ["anyOf", "oneOf", "allOf", "prefixItems", "items"] {
                match object.get_mut(key) {
                    Some(Value::Array(members)) => members.iter_mut().for_each(explicit_any),
                    Some(member) if key == "items" => explicit_any(member),
                    _ => {}
                }
            }
        }
        transform_subschemas(self, schema);
    }
}

/// Applies [`Portable`] to a schema given as a JSON object (rmcp hands tool schemas over so).
pub fn portable(schema: &Map<String, Value>) -> Map<String, Value> {
    let mut schema = Schema::from(schema.clone());
    Portable.transform(&mut schema);
    match schema.to_value() {
        Value::Object(object) => object,
        // An object schema stays an object: the transform only edits its members.
        _ => Map::new(),
    }
}

fn drop_nonstandard_format(object: &mut Map<String, Value>) {
    let Some(format) = object.get("format").and_then(Value::as_str) else { return };
    if STANDARD_FORMATS.contains(&format) {
        return;
    }
    let unsigned = format.starts_with("uint");
    object.remove("format");
    if unsigned {
        object.entry("minimum").or_insert(json!(0));
    }
}

/// A subschema that accepts anything (`true`, or an object of annotations only) becomes the
/// explicit list of every JSON type, annotations kept.
fn explicit_any(member: &mut Value) {
    match member {
        Value::Bool(true) => *member = json!({"type": ANY_JSON}),
        Value::Object(object) if !CONSTRAINING.iter().any(|keyword| object.contains_key(*keyword)) => {
            object.insert("type".to_owned(), json!(ANY_JSON));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_go_and_any_json_is_spelt_out() {
        let schema = json!({
            "type": "object",
            "properties": {
                "count": {"type": "integer", "format": "uint64", "minimum": 0},
                "size": {"type": ["integer", "null"], "format": "uint"},
                "ratio": {"type": "number", "format": "double"},
                "at": {"type": "string", "format": "date-time"},
                "anything": true,
                "described": {"description": "free"},
                "list": {"type": "array", "items": true},
                "map": {"type": "object", "additionalProperties": true},
            },
            "$defs": {"Nested": {"type": "object", "properties": {"n": {"type": "integer", "format": "int32"}}}},
        });
        let Value::Object(schema) = schema else { unreachable!() };
        let out = Value::Object(portable(&schema));
        let properties = &out["properties"];
        assert_eq!(properties["count"], json!({"type": "integer", "minimum": 0}));
        assert_eq!(properties["size"], json!({"type": ["integer", "null"], "minimum": 0}));
        assert_eq!(properties["ratio"], json!({"type": "number"}));
        assert_eq!(properties["at"]["format"], "date-time");
        assert_eq!(properties["anything"], json!({"type": ANY_JSON}));
        assert_eq!(properties["described"], json!({"description": "free", "type": ANY_JSON}));
        assert_eq!(properties["list"]["items"], json!({"type": ANY_JSON}));
        assert_eq!(properties["map"]["additionalProperties"], true, "a boolean keyword stays");
        assert_eq!(out["$defs"]["Nested"]["properties"]["n"], json!({"type": "integer"}));
    }
}
