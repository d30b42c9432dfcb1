//! Tool input schemas that strict tool-calling accepts: the one transform applied to every
//! tool's input schema, after [`portable`](super::portable).
//!
//! Strict clients (OpenAI's strict function calling; the OpenAI Agents SDK converts every MCP
//! tool with `ensure_strict_json_schema` and falls back to a loose tool when that fails) need
//! every object closed (`additionalProperties: false`) and cannot follow a bare `$ref`. So:
//!
//! - every `$ref` to `$defs` is replaced by its target (the definitions are small and mostly
//!   used once) without the target's own description (the field's says what it is there), and
//!   `$defs` and `$schema` go (2020-12 is MCP's default dialect);
//! - an object with declared properties and no word on others is closed. Where deputy would
//!   accept an undeclared member anyway, the schema is stricter than the server, never looser;
//! - a free-form object (keys the caller chooses: labels, `env`, an `output_schema`) cannot be
//!   closed without refusing what deputy accepts, so each such field also takes JSON text
//!   ([`crate::text::json`]); here its `anyOf` keeps only the alternatives strict mode can
//!   describe, the JSON text;
//! - an `anyOf` nested in an `anyOf` is spliced into it, and an `anyOf` of bare types is a
//!   `type` list;
//! - `default`s go: strict mode asks for every field (`null` for an absent one), and the
//!   descriptions say the defaults that matter.
//!
//! Descriptions (on one line each), enums and bounds are kept. `tests/interop` runs the Agents
//! SDK's own conversion on every tool of `tools/list`; `tests/suite/schemas.rs` checks the same
//! rules here.

use serde_json::{Map, Value};

/// How deep `$ref`s are followed; deputy's input types are not recursive, so this only stops a
/// recursive one from looping (the `$ref` then stays, and the strict checks name it).
const MAX_REF_DEPTH: usize = 16;

/// The strict-ready form of a tool's input schema.
pub fn strict_input(schema: &Map<String, Value>) -> Map<String, Value> {
    let defs = match schema.get("$defs") {
        Some(Value::Object(defs)) => defs.clone(),
        _ => Map::new(),
    };
    let mut inliner = Inliner { defs: &defs, unresolved: false };
    let mut root = inliner.rewrite(schema, 0);
    root.remove("$schema");
    if inliner.unresolved && !defs.is_empty() {
        // A reference left (a recursive type) still needs its target.
        root.insert("$defs".to_owned(), Value::Object(defs));
    }
    root
}

/// Whether `schema` is an object schema strict mode cannot close: an object type with no
/// declared properties whose other members are not refused.
pub fn is_open_object(schema: &Map<String, Value>) -> bool {
    let object = match schema.get("type") {
        Some(Value::String(kind)) => kind == "object",
        Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == "object"),
        _ => false,
    };
    let declared =
        schema.get("properties").and_then(Value::as_object).is_some_and(|properties| !properties.is_empty());
    object && !declared && schema.get("additionalProperties") != Some(&Value::Bool(false))
}

struct Inliner<'a> {
    defs: &'a Map<String, Value>,
    /// A `$ref` stayed (too deep, or not to `$defs`).
    unresolved: bool,
}

impl Inliner<'_> {
    fn rewrite(&mut self, schema: &Map<String, Value>, depth: usize) -> Map<String, Value> {
        let mut out = Map::new();
        let target = match schema.get("$ref") {
            Some(Value::String(reference)) => {
                reference.strip_prefix("#/$defs/").and_then(|name| self.defs.get(name))
            }
            _ => None,
        };
        let inlined = match target {
            Some(Value::Object(target)) if depth < MAX_REF_DEPTH => {
                out = self.rewrite(target, depth + 1);
                // A definition's own description is the Rust type's; the field says what it
                // means where it is used.
                out.remove("description");
                out.remove("title");
                true
            }
            _ => {
                self.unresolved |= schema.contains_key("$ref");
                false
            }
        };
        for (key, value) in schema {
            let value = match (key.as_str(), value) {
                ("$ref", _) if inlined => continue,
                ("$defs" | "definitions" | "$schema" | "default", _) => continue,
                ("description", Value::String(text)) => Value::String(one_line(text)),
                ("properties" | "patternProperties", Value::Object(members)) => Value::Object(
                    members.iter().map(|(name, member)| (name.clone(), self.subschema(member, depth))).collect(),
                ),
                ("anyOf" | "oneOf" | "allOf" | "prefixItems", Value::Array(members)) => {
                    Value::Array(members.iter().map(|member| self.subschema(member, depth)).collect())
                }
                (
                    "items"
                    | "additionalProperties"
                    | "not"
                    | "contains"
                    | "if"
                    | "then"
                    | "else"
                    | "propertyNames",
                    Value::Object(_),
                ) => self.subschema(value, depth),
                _ => value.clone(),
            };
            // The referring schema's own words (its description) win over the target's.
            out.insert(key.clone(), value);
        }
        flatten_alternatives(&mut out);
        prune_open_alternatives(&mut out);
        merge_plain_alternatives(&mut out);
        let declares =
            out.get("properties").and_then(Value::as_object).is_some_and(|properties| !properties.is_empty());
        if declares && !out.contains_key("additionalProperties") {
            out.insert("additionalProperties".to_owned(), Value::Bool(false));
        }
        out
    }

    fn subschema(&mut self, value: &Value, depth: usize) -> Value {
        match value {
            Value::Object(schema) => Value::Object(self.rewrite(schema, depth)),
            other => other.clone(),
        }
    }
}

/// Splices an `anyOf` alternative that is only an `anyOf` itself (`Option` of an untagged enum)
/// into its parent's.
fn flatten_alternatives(schema: &mut Map<String, Value>) {
    let Some(Value::Array(alternatives)) = schema.get_mut("anyOf") else { return };
    let mut flat = Vec::with_capacity(alternatives.len());
    for alternative in alternatives.drain(..) {
        match alternative {
            Value::Object(mut inner) if inner.len() == 1 && matches!(inner.get("anyOf"), Some(Value::Array(_))) => {
                if let Some(Value::Array(nested)) = inner.remove("anyOf") {
                    flat.extend(nested);
                }
            }
            other => flat.push(other),
        }
    }
    *alternatives = flat;
}

/// An `anyOf` of bare types (`{"type": "string"}`, `{"type": ["boolean", "integer"]}`) is one
/// `type` list; an
/// alternative's description joins the schema's in parentheses.
fn merge_plain_alternatives(schema: &mut Map<String, Value>) {
    let Some(Value::Array(alternatives)) = schema.get("anyOf") else { return };
    let plain = |alternative: &Value| {
        alternative.as_object().is_some_and(|alternative| {
            matches!(alternative.get("type"), Some(Value::String(_) | Value::Array(_)))
                && alternative.keys().all(|key| key == "type" || key == "description")
        })
    };
    if schema.contains_key("type") || !alternatives.iter().all(plain) {
        return;
    }
    let kinds: Vec<Value> = alternatives
        .iter()
        .filter_map(|alternative| alternative.get("type"))
        .flat_map(|kind| match kind {
            Value::Array(kinds) => kinds.clone(),
            kind => vec![kind.clone()],
        })
        .collect();
    let notes: Vec<String> = alternatives
        .iter()
        .filter_map(|alternative| alternative.get("description").and_then(Value::as_str).map(str::to_owned))
        .collect();
    schema.remove("anyOf");
    let kind = match <[Value; 1]>::try_from(kinds) {
        Ok([kind]) => kind,
        Err(kinds) => Value::Array(kinds),
    };
    schema.insert("type".to_owned(), kind);
    if !notes.is_empty() {
        let own = schema.get("description").and_then(Value::as_str).unwrap_or_default().trim_end_matches('.');
        let described = if own.is_empty() { notes.join("; ") } else { format!("{own} ({}).", notes.join("; ")) };
        schema.insert("description".to_owned(), Value::String(described));
    }
}

/// A doc comment's lines as one line: what a model reads needs no line breaks.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Drops the open-object alternatives of an `anyOf` when something other than `null` is left
/// to carry the value (the JSON text of [`crate::text::json`]).
fn prune_open_alternatives(schema: &mut Map<String, Value>) {
    let Some(Value::Array(alternatives)) = schema.get("anyOf") else { return };
    let open = |alternative: &Value| alternative.as_object().is_some_and(is_open_object);
    let null = |alternative: &Value| alternative.get("type").is_some_and(|kind| kind == "null");
    if !alternatives.iter().any(open)
        || !alternatives.iter().any(|alternative| !open(alternative) && !null(alternative))
    {
        return;
    }
    let kept: Vec<Value> = alternatives.iter().filter(|alternative| !open(alternative)).cloned().collect();
    schema.insert("anyOf".to_owned(), Value::Array(kept));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn strict(schema: Value) -> Value {
        let Value::Object(schema) = schema else { unreachable!() };
        Value::Object(strict_input(&schema))
    }

    #[test]
    fn refs_are_inlined_objects_closed_and_free_form_objects_left_as_json_text() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "session_id": {"$ref": "#/$defs/SessionId", "description": "The session."},
                "limits": {"anyOf": [{"$ref": "#/$defs/Limits"}, {"type": "null"}], "default": null},
                "shell": {"anyOf": [{"anyOf": [{"type": "boolean"}, {"type": "integer"}]}, {"type": "null"}],
                          "default": false, "description": "Two\nlines."},
                "labels": {"description": "Labels.", "anyOf": [
                    {"type": "object", "additionalProperties": {"type": "string"}},
                    {"type": "string", "description": "as JSON text"},
                    {"type": "null"},
                ]},
                "free": {"anyOf": [{"type": "object", "additionalProperties": true}, {"type": "null"}]},
            },
            "required": ["session_id"],
            "$defs": {
                "SessionId": {"type": "string", "format": "uuid", "description": "An id."},
                "Limits": {
                    "type": "object",
                    "description": "Limits.",
                    "properties": {"n": {"type": "integer", "minimum": 0}},
                },
            },
        });
        let out = strict(schema);
        assert_eq!(
            out,
            json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "session_id": {"type": "string", "format": "uuid", "description": "The session."},
                    "limits": {"anyOf": [
                        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}},
                         "additionalProperties": false},
                        {"type": "null"},
                    ]},
                    "shell": {"type": ["boolean", "integer", "null"], "description": "Two lines."},
                    "labels": {"type": ["string", "null"], "description": "Labels (as JSON text)."},
                    // Nothing else to carry it: left open, and the strict checks would say so.
                    "free": {"anyOf": [{"type": "object", "additionalProperties": true}, {"type": "null"}]},
                },
                "required": ["session_id"],
            })
        );
    }

    #[test]
    fn a_recursive_ref_stops_instead_of_looping() {
        let schema = json!({
            "type": "object",
            "properties": {"node": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        });
        let out = strict(schema);
        assert!(
            serde_json::to_string(&out["properties"]).unwrap().contains("$ref"),
            "the innermost reference stays"
        );
        assert!(out["$defs"]["Node"].is_object(), "with its target");
    }
}
