//! The checked-in `schemas/` must match the tool types; regenerate with
//! `cargo run -- schemas --out schemas`.

use std::path::Path;

#[test]
fn checked_in_schemas_match_the_tool_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
    let expected = deputy::surfaces::schemas::schema_files();
    let mut stale = Vec::new();
    for (name, contents) in &expected {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(on_disk) if &on_disk == contents => {}
            _ => stale.push(name.clone()),
        }
    }
    let on_disk = std::fs::read_dir(&dir).map(|entries| entries.count()).unwrap_or(0);
    assert!(
        stale.is_empty() && on_disk == expected.len(),
        "schemas/ is stale ({stale:?}, {on_disk} files for {} expected): run `cargo run -- schemas --out schemas`",
        expected.len()
    );
}

/// Every generated schema (the tool catalog that `tools/list` shows, each file of `schemas/`,
/// the OpenAPI document's component schemas) is portable: no `format` outside JSON Schema
/// 2020-12's own, and no subschema that is bare `true` or `{}` where a value is described (the
/// MCP Inspector's `--strict` check counts those as errors; schemars writes them for
/// `serde_json::Value`).
#[test]
fn every_generated_schema_is_portable() {
    use deputy::surfaces::portable::STANDARD_FORMATS;
    use serde_json::Value;

    let mut schemas: Vec<(String, Value)> = Vec::new();
    for tool in deputy::surfaces::operation::tool_catalog() {
        schemas.push((format!("tools/list {} input", tool.name), Value::Object((*tool.input_schema).clone())));
        schemas.push((format!("tools/list {} output", tool.name), Value::Object((*tool.output_schema).clone())));
    }
    for (name, contents) in deputy::surfaces::schemas::schema_files() {
        let document: Value = serde_json::from_str(&contents).unwrap();
        match name.as_str() {
            "openapi.json" => {
                for (component, schema) in document["components"]["schemas"].as_object().unwrap() {
                    schemas.push((format!("openapi {component}"), schema.clone()));
                }
                let mut parameters = Vec::new();
                collect_parameter_schemas(&document["paths"], &mut parameters);
                assert!(!parameters.is_empty());
                schemas.extend(parameters.into_iter().map(|schema| ("openapi parameter".to_owned(), schema)));
            }
            _ => schemas.push((name, document)),
        }
    }

    let mut problems = Vec::new();
    for (name, schema) in &schemas {
        walk(schema, &format!("{name} #"), &mut problems);
    }
    assert!(problems.is_empty(), "unportable schemas:\n{}", problems.join("\n"));

    /// Checks one schema and its subschemas; `at` names where it is.
    fn walk(schema: &Value, at: &str, problems: &mut Vec<String>) {
        let Value::Object(object) = schema else {
            // A boolean here is in a schema position (boolean-valued keywords are skipped below).
            problems.push(format!("{at}: bare {schema} schema"));
            return;
        };
        if let Some(format) = object.get("format")
            && !format.as_str().is_some_and(|format| STANDARD_FORMATS.contains(&format))
        {
            problems.push(format!("{at}: non-standard format {format}"));
        }
        for (key, value) in object {
            let here = format!("{at}/{key}");
            match key.as_str() {
                "properties" | "patternProperties" | "$defs" | "definitions" => {
                    for (member, subschema) in value.as_object().into_iter().flatten() {
                        described(subschema, &format!("{here}/{member}"), problems);
                        walk(subschema, &format!("{here}/{member}"), problems);
                    }
                }
                "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                    for (index, subschema) in value.as_array().into_iter().flatten().enumerate() {
                        described(subschema, &format!("{here}/{index}"), problems);
                        walk(subschema, &format!("{here}/{index}"), problems);
                    }
                }
                "items" | "contains" | "not" | "if" | "then" | "else" | "propertyNames" => {
                    if key == "items" {
                        described(value, &here, problems);
                    }
                    walk(value, &here, problems);
                }
                // `true` / `false` are meant here: "any other property" / "no other property".
                "additionalProperties" | "unevaluatedProperties" | "unevaluatedItems" if value.is_boolean() => {}
                "additionalProperties" | "unevaluatedProperties" | "unevaluatedItems" => {
                    walk(value, &here, problems)
                }
                _ => {}
            }
        }
    }

    /// A member schema must say what its value is: at least one constraining keyword.
    fn described(schema: &Value, at: &str, problems: &mut Vec<String>) {
        const CONSTRAINING: [&str; 10] =
            ["type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not", "properties", "items"];
        if let Value::Object(object) = schema
            && !CONSTRAINING.iter().any(|keyword| object.contains_key(*keyword))
        {
            problems.push(format!("{at}: accepts anything without saying so ({schema})"));
        }
    }

    fn collect_parameter_schemas(value: &Value, out: &mut Vec<Value>) {
        match value {
            Value::Object(object) => {
                if let (Some(Value::String(_)), Some(schema)) = (object.get("in"), object.get("schema")) {
                    out.push(schema.clone());
                }
                object.values().for_each(|value| collect_parameter_schemas(value, out));
            }
            Value::Array(items) => items.iter().for_each(|value| collect_parameter_schemas(value, out)),
            _ => {}
        }
    }
}

/// Every tool's input schema converts to strict tool-calling (the OpenAI Agents SDK's
/// `ensure_strict_json_schema`, as `tests/interop` runs it): no `$ref` (strict mode cannot
/// follow a bare one), no object whose undeclared members are allowed (it cannot close them
/// without changing what the schema accepts), every object with properties closed, and an
/// object root without `anyOf`.
#[test]
fn every_tool_input_schema_is_strict_ready() {
    use deputy::surfaces::strict::is_open_object;
    use serde_json::Value;

    let mut problems = Vec::new();
    for tool in deputy::surfaces::operation::tool_catalog() {
        let root = &*tool.input_schema;
        if root.get("type") != Some(&Value::from("object")) || root.contains_key("anyOf") {
            problems.push(format!("{}: the root is not a plain object", tool.name));
        }
        walk(&Value::Object(root.clone()), &format!("{} #", tool.name), &mut problems);
    }
    assert!(problems.is_empty(), "not strict-ready:\n{}", problems.join("\n"));

    fn walk(schema: &Value, at: &str, problems: &mut Vec<String>) {
        let Value::Object(object) = schema else { return };
        if object.contains_key("$ref") || object.contains_key("$defs") {
            problems.push(format!("{at}: a reference"));
        }
        if is_open_object(object) {
            problems.push(format!("{at}: an object open to undeclared members"));
        }
        let declares = object.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
        if declares && object.get("additionalProperties") != Some(&Value::Bool(false)) {
            problems.push(format!("{at}: properties, but not closed"));
        }
        for (key, value) in object {
            let here = format!("{at}/{key}");
            match (key.as_str(), value) {
                ("properties" | "patternProperties", Value::Object(members)) => {
                    members.iter().for_each(|(name, member)| walk(member, &format!("{here}/{name}"), problems))
                }
                ("anyOf" | "oneOf" | "allOf" | "prefixItems", Value::Array(members)) => members
                    .iter()
                    .enumerate()
                    .for_each(|(index, member)| walk(member, &format!("{here}/{index}"), problems)),
                ("items" | "additionalProperties" | "not" | "if" | "then" | "else" | "contains", _) => {
                    walk(value, &here, problems)
                }
                _ => {}
            }
        }
    }
}

/// The free-form fields (labels, `env` and `headers`, `output_schema`, a callback's
/// `input_schema`) take the same value as JSON text, the spelling their strict-ready schemas
/// keep; the object itself is accepted as before.
#[test]
fn free_form_fields_take_json_text_like_the_object() {
    use deputy::surfaces::operation::turns::SessionCreateParams;
    use serde_json::json;

    let object: SessionCreateParams = serde_json::from_value(json!({
        "prompt": "p",
        "labels": {"team": "a"},
        "output_schema": {"type": "object"},
        "callbacks": [{"name": "lookup", "input_schema": {"type": "object"}}],
        "mcp_servers": [
            {"name": "s", "command": "srv", "env": {"K": "v"}},
            {"name": "h", "url": "http://x", "headers": {"H": "v"}},
        ],
    }))
    .unwrap();
    let text: SessionCreateParams = serde_json::from_value(json!({
        "prompt": "p",
        "labels": r#"{"team": "a"}"#,
        "output_schema": r#"{"type": "object"}"#,
        "callbacks": [{"name": "lookup", "input_schema": r#"{"type": "object"}"#}],
        "mcp_servers": [
            {"name": "s", "command": "srv", "env": r#"{"K": "v"}"#},
            {"name": "h", "url": "http://x", "headers": r#"{"H": "v"}"#},
        ],
    }))
    .unwrap();
    assert_eq!(serde_json::to_value(&object).unwrap(), serde_json::to_value(&text).unwrap());
    assert_eq!(text.labels.unwrap()["team"], "a");
    let bad = serde_json::from_value::<SessionCreateParams>(json!({"prompt": "p", "labels": "team=a"}));
    assert!(bad.unwrap_err().to_string().contains("not JSON text"));
}
