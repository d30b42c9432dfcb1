//! Named agents: profiles an operator defines once as files and callers use by name
//! (`session_create {agent}`, `delegate {agent}`).
//!
//! A profile is Claude Code's subagent format ([`file`]): YAML frontmatter with `name`,
//! `description` and any `session_create` field, and a body that is the system prompt. The
//! files are read from the directories the config file's `[agents]` names, first directory
//! first, through a [`Catalog`] that re-reads a file when it changes; a profile's version is
//! the hash of its file. A session keeps the version it was created from (its spec holds the
//! resolved fields and an [`AgentRef`]), so editing a file changes only new sessions.
//!
//! A profile fills what the caller leaves unset, and nothing more: the caller's grants and the
//! operator's policy then judge the result as they judge any request, so a profile never gives
//! a caller more than it may have.

pub mod file;
pub mod view;

use std::path::PathBuf;
use std::sync::Arc;

pub use file::{Profile, ProfileFields};
pub use view::{AgentDetail, AgentList, AgentSummary};

use crate::catalog::{Catalog, Entry, Layout};
use crate::error::SessionError;
use crate::model::AgentRef;

/// A profile as found now, with its file's version.
#[derive(Debug, Clone)]
pub struct NamedProfile {
    pub profile: Arc<Profile>,
    pub version: String,
}

impl NamedProfile {
    /// What a session created from it records.
    pub fn agent_ref(&self) -> AgentRef {
        AgentRef { name: self.profile.name.clone(), version: self.version.clone() }
    }
}

/// The named agents of a server (or of one client's config, for the background server). Cheap
/// to clone; the default has none.
#[derive(Debug, Clone, Default)]
pub struct Profiles {
    catalog: Option<Arc<Catalog<Arc<Profile>>>>,
}

/// One file's entry and what it resolved to.
struct Found {
    entry: Arc<Entry<Arc<Profile>>>,
    /// The profile, when the file is one and no earlier file has its name.
    profile: Result<Arc<Profile>, String>,
}

impl Profiles {
    /// Profiles from `dirs`, the first directory's winning a name they share.
    pub fn new(dirs: Vec<PathBuf>) -> Self {
        Self { catalog: Some(Arc::new(Catalog::new(dirs, Layout::Files { extension: "md" }, file::parse))) }
    }

    /// Every file as it is now; a name already taken by an earlier file is shadowed.
    fn found(&self) -> Vec<Found> {
        let Some(catalog) = &self.catalog else { return Vec::new() };
        let mut taken: Vec<(String, PathBuf)> = Vec::new();
        catalog
            .entries()
            .into_iter()
            .map(|entry| {
                let profile = match &entry.parsed {
                    Err(reason) => Err(reason.clone()),
                    Ok(profile) => match taken.iter().find(|(name, _)| *name == profile.name) {
                        Some((_, first)) => Err(format!(
                            "shadowed: {} defines an agent named {:?} first",
                            first.display(),
                            profile.name
                        )),
                        None => {
                            taken.push((profile.name.clone(), entry.path.clone()));
                            Ok(profile.clone())
                        }
                    },
                };
                Found { entry, profile }
            })
            .collect()
    }

    /// Every profile file, valid or not.
    pub fn list(&self) -> AgentList {
        AgentList { agents: self.found().iter().map(summary).collect() }
    }

    /// The profile named `name`. Unknown: `INVALID_REQUEST` listing the known names; a file
    /// of that name that is not valid: its reason.
    pub fn get(&self, name: &str) -> Result<NamedProfile, SessionError> {
        let found = self.found();
        let (named, profile) = self.find(&found, name)?;
        Ok(NamedProfile { profile: profile.clone(), version: named.entry.version.clone() })
    }

    /// The entry of the valid profile named `name` among `found`, and its profile, or why
    /// there is none.
    fn find<'a>(&self, found: &'a [Found], name: &str) -> Result<(&'a Found, &'a Arc<Profile>), SessionError> {
        let valid = found.iter().find_map(|found| match &found.profile {
            Ok(profile) if profile.name == name => Some((found, profile)),
            _ => None,
        });
        if let Some(valid) = valid {
            return Ok(valid);
        }
        if let Some(broken) = found.iter().find(|found| found.profile.is_err() && stem(&found.entry) == name) {
            let reason = broken.profile.as_ref().err().cloned().unwrap_or_default();
            return Err(SessionError::invalid(format!(
                "agent {name:?} ({}) is not valid: {reason}",
                broken.entry.path.display()
            )));
        }
        let known: Vec<&str> =
            found.iter().filter_map(|found| found.profile.as_ref().ok().map(|p| p.name.as_str())).collect();
        Err(SessionError::invalid(if known.is_empty() {
            format!("no agent named {name:?}: this server has no named agents ({})", self.where_they_go())
        } else {
            format!("no agent named {name:?}; known: {}", known.join(", "))
        }))
    }

    /// `agent/get`: the profile named `name`, whole.
    pub fn detail(&self, name: &str) -> Result<AgentDetail, SessionError> {
        let found = self.found();
        let (named, profile) = self.find(&found, name)?;
        let mut fields = profile.frontmatter.clone();
        fields.remove("name");
        fields.remove("description");
        Ok(AgentDetail { summary: summary(named), system_prompt: profile.system_prompt.clone(), fields })
    }

    /// The valid profiles as a tool description's menu (see [`AgentList::menu`]).
    pub fn menu(&self, max_bytes: usize) -> String {
        self.list().menu(max_bytes)
    }

    fn where_they_go(&self) -> String {
        match self.catalog.as_ref().and_then(|catalog| catalog.dirs().last()) {
            Some(dir) => format!("profiles are Markdown files in {}", dir.display()),
            None => "none are configured".to_owned(),
        }
    }
}

fn stem(entry: &Entry<Arc<Profile>>) -> String {
    entry.path.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default()
}

fn summary(found: &Found) -> AgentSummary {
    let entry = &found.entry;
    match &found.profile {
        Ok(profile) => AgentSummary {
            name: profile.name.clone(),
            description: profile.description.clone(),
            version: entry.version.clone(),
            path: entry.path.display().to_string(),
            invalid: None,
        },
        Err(reason) => AgentSummary {
            name: entry.parsed.as_ref().map(|profile| profile.name.clone()).unwrap_or_else(|_| stem(entry)),
            description: String::new(),
            version: entry.version.clone(),
            path: entry.path.display().to_string(),
            invalid: Some(reason.clone()),
        },
    }
}

#[cfg(test)]
mod tests;
