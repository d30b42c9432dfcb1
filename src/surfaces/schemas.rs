//! The checked-in schema files of `schemas/`: every tool's input and output schema and the REST
//! surface's OpenAPI document. `deputy schemas` writes them; a test fails when the files in the
//! repository are stale. It sits above the operation table and the HTTP surface because it
//! gathers what both describe.

use super::operation::tool_catalog;

/// The checked-in schema files: `(file name, pretty JSON with a final newline)`, in a stable
/// order: every tool's input and output, then `openapi.json`, the REST surface's OpenAPI
/// document (built from the same types). `deputy schemas` writes them; a test compares them
/// with `schemas/`.
pub fn schema_files() -> Vec<(String, String)> {
    let pretty = |schema: &serde_json::Map<String, serde_json::Value>| {
        let mut text = serde_json::to_string_pretty(schema).unwrap_or_default();
        text.push('\n');
        text
    };
    tool_catalog()
        .iter()
        .flat_map(|tool| {
            [
                (format!("{}.input.json", tool.name), pretty(&tool.input_schema)),
                (format!("{}.output.json", tool.name), pretty(&tool.output_schema)),
            ]
        })
        .chain(std::iter::once(("openapi.json".to_owned(), {
            let mut text = serde_json::to_string_pretty(&super::http::openapi::document()).unwrap_or_default();
            text.push('\n');
            text
        })))
        .collect()
}
