//! Agent Skills: folders of instructions (and files beside them) a session's model reads when
//! a task calls for one, rather than carrying every one of them in every prompt.
//!
//! A skill is a folder holding `SKILL.md` — YAML frontmatter with its `name` and `description`,
//! then the instructions ([`skill`]) — and whatever files those instructions point to. The
//! model sees only the list of names and descriptions ([`listing`]); it reads a skill's body with
//! `load_skill` and its files with `read_skill_file` (both in `tools::builtin`).
//!
//! [`Skills`] is the operator's catalog: the directories of the config file's `[skills]`,
//! listed again at every look ([`crate::catalog`]), so a skill added, edited or removed applies
//! to the next turn without a restart. It decides nothing per session: a session's filter
//! (`session_create`'s `skills`) is handed to each look.

pub mod listing;
pub mod skill;

use std::path::PathBuf;
use std::sync::Arc;

use crate::catalog::{Catalog, Layout};

pub use listing::prompt_section;
pub use skill::Skill;

/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";

/// The skills of a deputy; cheap to clone (every session's tools hold one). Default: none.
#[derive(Debug, Clone)]
pub struct Skills {
    catalog: Arc<Catalog<Arc<Skill>>>,
}

impl Default for Skills {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl Skills {
    /// The skills of `dirs`, the first directory's first: where two define a skill of the same
    /// name, the earlier one is used (the workspace's own shadow the operator's).
    pub fn new(dirs: Vec<PathBuf>) -> Self {
        Self { catalog: Arc::new(Catalog::new(dirs, Layout::Folders { file: SKILL_FILE }, skill::parse)) }
    }

    /// The valid skills as the files are now, each name once (its first definition), in the
    /// order of the directories and then of folder names; only those `filter` names when given.
    pub fn available(&self, filter: Option<&[String]>) -> Vec<Arc<Skill>> {
        let mut seen = std::collections::HashSet::new();
        self.catalog
            .entries()
            .iter()
            .filter_map(|entry| entry.parsed.as_ref().ok())
            .filter(|skill| seen.insert(skill.name.clone()))
            .filter(|skill| filter.is_none_or(|names| names.contains(&skill.name)))
            .cloned()
            .collect()
    }

    /// The skill called `name`, if there is a valid one.
    pub fn get(&self, name: &str) -> Option<Arc<Skill>> {
        self.find(name, None)
    }

    /// The skill called `name` among those `filter` allows.
    pub fn find(&self, name: &str, filter: Option<&[String]>) -> Option<Arc<Skill>> {
        self.available(filter).into_iter().find(|skill| skill.name == name)
    }

    /// Every name in `names` is a skill available now; otherwise the message names the unknown
    /// ones and lists the known ones, so a caller can correct the request.
    pub fn check_names(&self, names: &[String]) -> Result<(), String> {
        let known: Vec<String> = self.available(None).iter().map(|skill| skill.name.clone()).collect();
        let unknown: Vec<&String> = names.iter().filter(|name| !known.contains(name)).collect();
        if unknown.is_empty() {
            return Ok(());
        }
        Err(format!("unknown skills {unknown:?}; the skills available are {known:?}"))
    }

    /// The names of the skills available to `filter`, for a model's error message.
    pub fn names(&self, filter: Option<&[String]>) -> Vec<String> {
        self.available(filter).iter().map(|skill| skill.name.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_skill(dir: &std::path::Path, folder: &str, name: &str, description: &str) {
        std::fs::create_dir_all(dir.join(folder)).unwrap();
        let text = format!("---\nname: {name}\ndescription: {description}\n---\nBody of {folder}.\n");
        std::fs::write(dir.join(folder).join(SKILL_FILE), text).unwrap();
    }

    #[test]
    fn the_first_directory_wins_malformed_skills_are_left_out_and_a_filter_narrows() {
        let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write_skill(first.path(), "pdf", "pdf", "Fill PDF forms.");
        write_skill(second.path(), "pdf", "pdf", "Shadowed.");
        write_skill(second.path(), "csv", "csv", "Clean CSV files.");
        std::fs::create_dir_all(second.path().join("broken")).unwrap();
        std::fs::write(second.path().join("broken").join(SKILL_FILE), "no frontmatter").unwrap();
        let skills = Skills::new(vec![first.path().to_path_buf(), second.path().to_path_buf()]);

        let available = skills.available(None);
        let shown: Vec<(&str, &str)> =
            available.iter().map(|skill| (skill.name.as_str(), skill.description.as_str())).collect();
        assert_eq!(shown, [("pdf", "Fill PDF forms."), ("csv", "Clean CSV files.")]);
        assert_eq!(skills.get("pdf").unwrap().folder, first.path().join("pdf"));
        assert_eq!(skills.get("csv").unwrap().body, "Body of csv.\n");
        assert!(skills.get("broken").is_none());

        let only = ["csv".to_owned()];
        assert_eq!(skills.names(Some(&only)), ["csv"]);
        assert!(skills.find("pdf", Some(&only)).is_none());
        assert_eq!(skills.check_names(&only), Ok(()));
        let error = skills.check_names(&["nope".to_owned()]).unwrap_err();
        assert!(error.contains("\"nope\"") && error.contains("\"pdf\", \"csv\""), "{error}");
    }

    #[test]
    fn no_directories_no_skills() {
        let skills = Skills::default();
        assert!(skills.available(None).is_empty());
        assert!(skills.check_names(&[]).is_ok());
    }
}
