//! Free-form JSON fields that also come as JSON text.
//!
//! A few inputs are free-form objects: labels, an inline MCP server's `env` and `headers`, an
//! `output_schema`, a callback's `input_schema`. Strict tool-calling (OpenAI's strict mode, the
//! OpenAI Agents SDK's strict conversion of MCP tools) cannot describe an object whose keys the
//! caller chooses: every object must close with `additionalProperties: false`. So each such
//! field takes either its value or the same value as JSON text (`"{\"team\": \"a\"}"`), and its
//! schema says both ([`schema`], [`option_schema`]). The strict-ready tool schemas keep only the
//! JSON-text spelling (`surfaces::strict`); every other caller may go on sending the object.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{DeserializeOwned, Error};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// What the JSON-text alternative says of itself in a schema.
pub const JSON_TEXT: &str = "a JSON object, as text";

/// `T`, given as itself or as JSON text of itself.
pub fn deserialize<'de, D: Deserializer<'de>, T: DeserializeOwned>(deserializer: D) -> Result<T, D::Error> {
    from_value(Value::deserialize(deserializer)?)
}

/// `Option<T>`: `null` is `None`; otherwise as [`deserialize`].
pub fn option<'de, D: Deserializer<'de>, T: DeserializeOwned>(deserializer: D) -> Result<Option<T>, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(None),
        value => from_value(value).map(Some),
    }
}

fn from_value<T: DeserializeOwned, E: Error>(value: Value) -> Result<T, E> {
    match value {
        Value::String(text) => {
            serde_json::from_str(&text).map_err(|error| E::custom(format!("not JSON text of the value: {error}")))
        }
        value => T::deserialize(value).map_err(E::custom),
    }
}

/// `T`'s schema, or a string (its JSON text).
pub fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let native = generator.subschema_for::<T>();
    json_schema!({ "anyOf": [native, { "type": "string", "description": JSON_TEXT }] })
}

/// [`schema`], or `null`.
pub fn option_schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let native = generator.subschema_for::<T>();
    json_schema!({ "anyOf": [native, { "type": "string", "description": JSON_TEXT }, { "type": "null" }] })
}

/// A JSON object of any members (a JSON Schema, say); its schema is `{"type": "object"}`.
pub type AnyObject = serde_json::Map<String, Value>;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Fields {
        #[serde(default, deserialize_with = "super::option")]
        labels: Option<BTreeMap<String, String>>,
        #[serde(default, deserialize_with = "super::deserialize")]
        env: BTreeMap<String, String>,
    }

    #[test]
    fn a_field_takes_its_value_or_the_same_as_json_text() {
        let map = BTreeMap::from([("a".to_owned(), "b".to_owned())]);
        let native: Fields = serde_json::from_value(json!({"labels": {"a": "b"}, "env": {"a": "b"}})).unwrap();
        let text: Fields =
            serde_json::from_value(json!({"labels": "{\"a\": \"b\"}", "env": "{\"a\":\"b\"}"})).unwrap();
        assert_eq!(native, Fields { labels: Some(map.clone()), env: map });
        assert_eq!(native, text);
        let absent: Fields = serde_json::from_value(json!({"labels": null})).unwrap();
        assert_eq!(absent, Fields { labels: None, env: BTreeMap::new() });
        let bad = serde_json::from_value::<Fields>(json!({"labels": "a=b"})).unwrap_err();
        assert!(bad.to_string().contains("not JSON text"), "{bad}");
        assert!(serde_json::from_value::<Fields>(json!({"labels": "[1]"})).is_err());
        assert!(serde_json::from_value::<Fields>(json!({"env": {"a": 1}})).is_err());
    }
}
