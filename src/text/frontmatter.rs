//! Markdown with YAML frontmatter: the file format of agent profiles (Claude Code's subagents)
//! and Agent Skills' `SKILL.md`.
//!
//! ```text
//! ---
//! name: reviewer
//! description: Reviews a change for bugs.
//! ---
//! The body: Markdown, kept as written.
//! ```
//!
//! The YAML is read into JSON values, so the typed fields behind it are the same serde types
//! the JSON surfaces use, with the same error texts.

use serde_json::{Map, Value};

/// A file split into its frontmatter (as a JSON object) and its body.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub fields: Map<String, Value>,
    /// Everything after the closing `---` line, without the blank lines that start it.
    pub body: String,
}

/// Splits `text` into frontmatter and body. A file that does not start with a `---` line, has no
/// closing one, or whose YAML is not a mapping is refused with the reason.
pub fn parse(text: &str) -> Result<Document, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or_default();
    if first.trim_end() != "---" {
        return Err("the file must start with a `---` line opening its YAML frontmatter".into());
    }
    let mut yaml_len = 0;
    let mut closed = false;
    for line in lines.by_ref() {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        yaml_len += line.len();
    }
    if !closed {
        return Err("the YAML frontmatter has no closing `---` line".into());
    }
    let yaml = &text[first.len()..first.len() + yaml_len];
    let body: String = lines.collect();
    let fields = if yaml.trim().is_empty() {
        Map::new()
    } else {
        match serde_saphyr::from_str::<Value>(yaml) {
            Ok(Value::Object(fields)) => fields,
            Ok(Value::Null) => Map::new(),
            Ok(_) => return Err("the frontmatter must be a YAML mapping (`key: value` lines)".into()),
            Err(error) => {
                return Err(format!("the frontmatter is not valid YAML: {}", first_line(&error.to_string())));
            }
        }
    };
    Ok(Document { fields, body: body.trim_start_matches(['\n', '\r']).to_owned() })
}

/// The first line of a parser's message (some draw a snippet of the file below it).
fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frontmatter_and_body_are_split() {
        let document =
            parse("---\nname: reviewer\ntools: Read, Grep\nbudget:\n  max_tokens: 1000\n---\n\nYou review.\n")
                .unwrap();
        assert_eq!(
            Value::Object(document.fields),
            json!({"name": "reviewer", "tools": "Read, Grep", "budget": {"max_tokens": 1000}})
        );
        assert_eq!(document.body, "You review.\n");
    }

    #[test]
    fn malformed_files_say_why() {
        assert!(parse("name: x\n").unwrap_err().contains("start with"));
        assert!(parse("---\nname: x\n").unwrap_err().contains("closing"));
        assert!(parse("---\n- a\n- b\n---\nbody").unwrap_err().contains("mapping"));
        assert!(parse("---\nname: [unclosed\n---\n").unwrap_err().contains("not valid YAML"));
        assert_eq!(parse("---\n---\nbody").unwrap().body, "body");
    }
}
