//! One skill, read from its `SKILL.md` (the Agent Skills format):
//!
//! ```text
//! ---
//! name: pdf-forms
//! description: Fill in PDF forms. Use when the user gives you a PDF form to complete.
//! ---
//! The instructions, in Markdown. They may point to files beside this one (`forms.md`).
//! ```
//!
//! `name` and `description` are required; other keys of the format (`license`,
//! `allowed-tools`, `metadata`, …) are accepted and ignored, so a skill written for another
//! agent loads here unchanged.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::catalog::{MAX_NAME_CHARS, is_definition_name};

/// The longest description (the format's limit); the prompt shows fewer characters of it.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// A valid skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Lowercase letters, digits and `-`; how the model names it.
    pub name: String,
    /// What it is for and when to use it: all the model knows of it until it loads it.
    pub description: String,
    /// The instructions: the file after its frontmatter.
    pub body: String,
    /// The folder holding `SKILL.md`: the only files `read_skill_file` reads.
    pub folder: PathBuf,
}

/// Reads a `SKILL.md` at `path`; the reason it is not a skill otherwise. (The catalog's parser.)
pub fn parse(path: &Path, text: &str) -> Result<Arc<Skill>, String> {
    let document = crate::text::frontmatter::parse(text)?;
    let field = |key: &str| match document.fields.get(key) {
        Some(Value::String(value)) if !value.trim().is_empty() => Ok(value.trim().to_owned()),
        Some(Value::String(_)) | None => Err(format!("the frontmatter has no `{key}`")),
        Some(_) => Err(format!("`{key}` must be a string")),
    };
    let name = field("name")?;
    check_name(&name)?;
    let description = field("description")?;
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "the description has {chars} characters, more than the {MAX_DESCRIPTION_CHARS} allowed"
        ));
    }
    let folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(Arc::new(Skill { name, description, body: document.body, folder }))
}

/// `name` is 1 to 64 lowercase ASCII letters, digits and hyphens.
fn check_name(name: &str) -> Result<(), String> {
    if !is_definition_name(name) {
        return Err(format!(
            "the name {name:?} must be at most {MAX_NAME_CHARS} lowercase letters, digits and hyphens"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Arc<Skill>, String> {
        parse(Path::new("/skills/pdf/SKILL.md"), text)
    }

    #[test]
    fn a_skill_has_its_name_description_body_and_folder_and_other_keys_are_ignored() {
        let skill = parsed(
            "---\nname: pdf\ndescription: Fill PDF forms.\nlicense: MIT\nallowed-tools: Read Bash\nmetadata:\n  \
             version: \"1\"\n---\n\n# PDF\nUse forms.md.\n",
        )
        .unwrap();
        assert_eq!(
            *skill,
            Skill {
                name: "pdf".into(),
                description: "Fill PDF forms.".into(),
                body: "# PDF\nUse forms.md.\n".into(),
                folder: PathBuf::from("/skills/pdf"),
            }
        );
    }

    #[test]
    fn a_missing_or_malformed_name_or_description_is_refused_with_the_reason() {
        let error = |text: &str| parsed(text).unwrap_err();
        assert!(error("---\ndescription: d\n---\n").contains("no `name`"));
        assert!(error("---\nname: pdf\n---\n").contains("no `description`"));
        assert!(error("---\nname: pdf\ndescription: \"\"\n---\n").contains("no `description`"));
        assert!(error("---\nname: 12\ndescription: d\n---\n").contains("`name` must be a string"));
        assert!(error("---\nname: PDF Forms\ndescription: d\n---\n").contains("lowercase"));
        assert!(error(&format!("---\nname: {}\ndescription: d\n---\n", "a".repeat(65))).contains("at most 64"));
        let long = format!("---\nname: pdf\ndescription: {}\n---\n", "d".repeat(1025));
        assert!(error(&long).contains("1025 characters"));
        assert!(error("no frontmatter").contains("---"));
        assert!(parsed(&format!("---\nname: {}\ndescription: d\n---\n", "a-1".repeat(21))).is_ok());
    }
}
