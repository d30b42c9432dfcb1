//! The `<skills>` section of a session's system prompt: each available skill's name and
//! description, so the model knows what it can load without carrying every body in every prompt.
//!
//! It is bounded (at most [`MAX_LISTED`] skills, [`MAX_BYTES`] in all, descriptions cut to
//! [`MAX_DESCRIPTION_CHARS`]), and a cut is said, so a crowded skills directory cannot take over
//! the context. The same skills give the same bytes, so the prompt cache keeps hitting.

use std::sync::Arc;

use super::Skill;

/// The most skills listed.
pub const MAX_LISTED: usize = 50;
/// The most bytes of the list itself (the section's fixed text aside).
pub const MAX_BYTES: usize = 8 * 1024;
/// The most characters of a description shown.
pub const MAX_DESCRIPTION_CHARS: usize = 200;

/// The section for `skills`, in their order; empty when there are none.
pub fn prompt_section(skills: &[Arc<Skill>]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut list = String::new();
    let mut listed = 0;
    for skill in skills.iter().take(MAX_LISTED) {
        let line = format!(
            "- {}: {}\n",
            skill.name,
            crate::text::excerpt(&one_line(&skill.description), MAX_DESCRIPTION_CHARS)
        );
        if list.len() + line.len() > MAX_BYTES {
            break;
        }
        list.push_str(&line);
        listed += 1;
    }
    if listed < skills.len() {
        list.push_str(&format!(
            "[… {} more skills not listed: at most {MAX_LISTED} skills and {MAX_BYTES} bytes are shown]\n",
            skills.len() - listed
        ));
    }
    format!(
        "<skills>\nSkills are instructions (and files) for particular tasks. Before you use one, call \
         load_skill with its name to read its instructions.\n\n{list}</skills>"
    )
}

/// The description on one line: the list has one skill per line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(name: &str, description: &str) -> Arc<Skill> {
        Arc::new(Skill {
            name: name.into(),
            description: description.into(),
            body: String::new(),
            folder: std::path::PathBuf::new(),
        })
    }

    #[test]
    fn each_skill_is_one_line_and_long_descriptions_are_cut() {
        assert_eq!(prompt_section(&[]), "");
        let section = prompt_section(&[skill("pdf", "Fill PDF\nforms."), skill("long", &"d".repeat(300))]);
        assert!(section.starts_with("<skills>\n") && section.ends_with("\n</skills>"), "{section}");
        assert!(section.contains("call load_skill"), "{section}");
        assert!(section.contains("\n- pdf: Fill PDF forms.\n"), "{section}");
        assert!(section.contains(&format!("- long: {}…\n", "d".repeat(200))), "{section}");
        assert!(!section.contains("more skills"));
    }

    #[test]
    fn more_than_fifty_skills_or_8_kib_are_cut_and_said() {
        let many: Vec<_> = (0..60).map(|i| skill(&format!("s{i}"), "short")).collect();
        let section = prompt_section(&many);
        assert!(section.contains("- s49: short") && !section.contains("- s50:"), "{section}");
        assert!(section.contains("[… 10 more skills not listed"), "{section}");

        let wide: Vec<_> = (0..50).map(|i| skill(&format!("s{i}"), &"w".repeat(250))).collect();
        let section = prompt_section(&wide);
        assert!(section.len() < MAX_BYTES + 512, "{} bytes", section.len());
        assert!(section.contains("more skills not listed"), "{section}");
    }
}
