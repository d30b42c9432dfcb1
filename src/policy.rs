//! Who may run programs on the deputy host (security review F3): the shell, and inline MCP
//! servers (a `command`, or a `url` deputy connects to).
//!
//! The operator's `[policy]` switches ([`PolicySwitches`]) meet the caller's surface
//! ([`Surface`]) and scopes ([`Caller`]) once, when the caller's view of the sessions is made;
//! the result is one small value, [`Grants`], that the agent factory checks wherever an agent is
//! built or resumed. For each of the three:
//!
//! 1. an explicit `allow` or `deny` in the config file decides; `deny` is a hard deny that no
//!    scope overrides;
//! 2. else the surface's default: stdio and the background server's clients `allow` (the caller
//!    is the user's own client), HTTP `deny`;
//! 3. where that default denies, the caller's scope (`shell`, `mcp:inline`) grants it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Deserialize;

use crate::caller::{ANONYMOUS_SUBJECT, Caller, LOCAL_SUBJECT, Scope};
use crate::error::SessionError;
use crate::ids::SessionId;

/// Whose behalf a session's programs run on, for the `deputy::audit` lines of its shell
/// commands and inline MCP servers: the session and its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditTag {
    pub subject: Arc<str>,
    pub session_id: SessionId,
}

impl AuditTag {
    /// The local user's session `session_id`.
    pub fn local(session_id: SessionId) -> Self {
        Self { subject: crate::caller::LOCAL_SUBJECT.into(), session_id }
    }

    /// A shell command is about to run.
    pub fn shell_command(&self, command: &str) {
        tracing::info!(target: "deputy::audit", subject = %self.subject, session_id = %self.session_id, what = "shell", command, "shell command");
    }

    /// An inline MCP server of the session (not one of the config file's) is started or joined.
    pub fn inline_server(&self, server: &str) {
        tracing::info!(target: "deputy::audit", subject = %self.subject, session_id = %self.session_id, what = "inline_mcp_server", server, "inline MCP server");
    }
}

/// `allow` or `deny`, as the config file writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    Allow,
    Deny,
}

/// Where a caller arrives, for the defaults of [`Grants`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// stdio, the background server's clients, the command line: the user's own client.
    Local,
    /// `serve --http`: anyone who reaches the listener.
    Http,
}

impl Surface {
    fn default_switch(self) -> Switch {
        match self {
            Self::Local => Switch::Allow,
            Self::Http => Switch::Deny,
        }
    }
}

/// The operator's switches (`[policy]`, with the deprecated `[tools] allow_*` folded in);
/// `None`: the surface decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicySwitches {
    pub shell: Option<Switch>,
    pub inline_mcp_commands: Option<Switch>,
    pub inline_mcp_urls: Option<Switch>,
    /// Whether inline `url` servers may reach loopback, private and link-local addresses
    /// (security review F6). Not a caller's grant: no scope gives it; unset means deny.
    pub inline_mcp_private_urls: Option<Switch>,
    /// Whether the token-less loopback caller (`anonymous`: any local user) gets the file tools
    /// that write (`write_file`, `edit_file`); unset means deny (security review G6). Only
    /// `anonymous` is concerned: a caller with a token, or the local user, writes.
    pub anonymous_writes: Option<Switch>,
}

/// What one caller may enable, computed once per caller ([`PolicySwitches::grants`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grants {
    /// Who the grants are for, named in the audit log.
    pub subject: Arc<str>,
    pub shell: Permission,
    pub inline_commands: Permission,
    pub inline_urls: Permission,
    /// The file tools that write (G6).
    pub writes: Permission,
}

/// One permission, and why: a refusal names what would change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    Allowed,
    /// `[policy] … = "deny"`: nothing overrides it.
    DeniedByConfig,
    /// The surface's default, without the scope that would grant it.
    DeniedByDefault,
}

impl Permission {
    pub fn allowed(self) -> bool {
        self == Self::Allowed
    }
}

/// What a refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarded {
    Shell,
    InlineCommand,
    InlineUrl,
    /// The file tools that write, for the anonymous HTTP caller (G6).
    Writes,
}

impl Guarded {
    /// The `[policy]` key.
    fn key(self) -> &'static str {
        match self {
            Self::Shell => "shell",
            Self::InlineCommand => "inline_mcp_commands",
            Self::InlineUrl => "inline_mcp_urls",
            Self::Writes => "anonymous_writes",
        }
    }

    /// The scope that grants it where the surface's default denies; `None`: only a token.
    fn scope(self) -> Option<Scope> {
        match self {
            Self::Shell => Some(Scope::Shell),
            Self::InlineCommand | Self::InlineUrl => Some(Scope::McpInline),
            Self::Writes => None,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Self::Shell => "the shell",
            Self::InlineCommand => "inline MCP servers with a `command`",
            Self::InlineUrl => "inline MCP servers with a `url`",
            Self::Writes => "file writes by callers without a token",
        }
    }

    fn what_is(self) -> &'static str {
        match self {
            Self::Shell => "the shell is",
            Self::InlineCommand => "inline MCP servers with a `command` are",
            Self::InlineUrl => "inline MCP servers with a `url` are",
            Self::Writes => "file writes (write_file, edit_file) are",
        }
    }
}

impl PolicySwitches {
    /// The switches of the config file: `[policy]` wins; the deprecated `[tools] allow_shell`
    /// and `allow_inline_mcp_servers` (`false`: deny, `true`: allow) apply where it is silent.
    pub fn with_legacy(self, allow_shell: Option<bool>, allow_inline: Option<bool>) -> Self {
        let legacy =
            |allowed: Option<bool>| allowed.map(|allowed| if allowed { Switch::Allow } else { Switch::Deny });
        Self {
            shell: self.shell.or(legacy(allow_shell)),
            inline_mcp_commands: self.inline_mcp_commands.or(legacy(allow_inline)),
            inline_mcp_urls: self.inline_mcp_urls.or(legacy(allow_inline)),
            inline_mcp_private_urls: self.inline_mcp_private_urls,
            anonymous_writes: self.anonymous_writes,
        }
    }

    /// What `caller`, arriving on `surface`, may enable.
    pub fn grants(&self, caller: &Caller, surface: Surface) -> Grants {
        let permission = |switch: Option<Switch>, guarded: Guarded| match switch {
            Some(Switch::Deny) => Permission::DeniedByConfig,
            Some(Switch::Allow) => Permission::Allowed,
            None if surface.default_switch() == Switch::Allow
                || guarded.scope().is_some_and(|scope| caller.has(scope)) =>
            {
                Permission::Allowed
            }
            None => Permission::DeniedByDefault,
        };
        // Only the token-less HTTP caller is held to `anonymous_writes` (G6).
        let writes = if surface == Surface::Http && caller.subject() == ANONYMOUS_SUBJECT {
            permission(self.anonymous_writes, Guarded::Writes)
        } else {
            Permission::Allowed
        };
        Grants {
            subject: caller.subject_arc(),
            shell: permission(self.shell, Guarded::Shell),
            inline_commands: permission(self.inline_mcp_commands, Guarded::InlineCommand),
            inline_urls: permission(self.inline_mcp_urls, Guarded::InlineUrl),
            writes,
        }
    }
}

impl Grants {
    /// Everything allowed: the local user with no `[policy]` switches (tests, the command line).
    pub fn local() -> Self {
        PolicySwitches::default().grants(&Caller::local(), Surface::Local)
    }

    fn permission(&self, guarded: Guarded) -> Permission {
        match guarded {
            Guarded::Shell => self.shell,
            Guarded::InlineCommand => self.inline_commands,
            Guarded::InlineUrl => self.inline_urls,
            Guarded::Writes => self.writes,
        }
    }

    /// `Ok` when `guarded` is allowed; else `POLICY_DENIED` naming what would allow it, and a
    /// `deputy::audit` line. `resumed`: the session already had it (F18), so the message says
    /// to start a new one.
    pub fn check(&self, guarded: Guarded, detail: &str, resumed: bool) -> Result<(), SessionError> {
        let why = match self.permission(guarded) {
            Permission::Allowed => return Ok(()),
            Permission::DeniedByConfig => {
                format!("this deputy does not allow {} ([policy] {} = \"deny\")", guarded.what(), guarded.key())
            }
            Permission::DeniedByDefault => match guarded.scope() {
                Some(scope) => format!(
                    "{} off for HTTP callers: the operator allows it with [policy] {} = \"allow\", or gives \
                     the caller's token the scope {:?}",
                    guarded.what_is(),
                    guarded.key(),
                    scope.to_string()
                ),
                None => format!(
                    "{} off for HTTP callers without a token: the operator allows them with [policy] {} = \
                     \"allow\", or gives the caller a token",
                    guarded.what_is(),
                    guarded.key()
                ),
            },
        };
        tracing::info!(target: "deputy::audit", subject = %self.subject, what = "policy_refusal", refused = guarded.key(), detail, "refused: {why}");
        let message = if resumed {
            format!("{detail}: {why}; this session can no longer continue, start a new session")
        } else {
            format!("{detail}: {why}")
        };
        Err(SessionError::policy_denied(message))
    }
}

/// The owners of stored sessions as callers *now* (security review G5): a stored session
/// resumes with its owner's grants, computed from the scopes its owner's tokens have in this
/// process's token table, whoever or whatever resumes it (a turn, mail, a child's notice, a
/// host session's inbox). `local` is the user's own client (stdio, the background server,
/// `--token`); `anonymous` the token-less loopback caller; any other subject is what the
/// config file's `[[auth.tokens]]` say, or nobody when no token names it any more.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners {
    scopes: BTreeMap<Arc<str>, BTreeSet<Scope>>,
}

impl Owners {
    /// From the token table: `(subject, scopes)` per token; a subject's scopes are the union
    /// of its tokens'.
    pub fn new<'a>(tokens: impl IntoIterator<Item = (&'a str, &'a [Scope])>) -> Self {
        let mut owners = Self { scopes: BTreeMap::new() };
        owners.admit(tokens);
        owners
    }

    /// Adds the subjects and scopes of more tokens (a subject's scopes stay the union).
    pub fn admit<'a>(&mut self, tokens: impl IntoIterator<Item = (&'a str, &'a [Scope])>) {
        for (subject, granted) in tokens {
            self.scopes.entry(subject.into()).or_default().extend(granted.iter().copied());
        }
    }

    /// `owner` as a caller now, and the surface whose defaults apply to it; `None`: no token
    /// names it any more.
    pub fn caller(&self, owner: &str) -> Option<(Caller, Surface)> {
        match owner {
            LOCAL_SUBJECT => Some((Caller::local(), Surface::Local)),
            ANONYMOUS_SUBJECT => Some((Caller::anonymous(), Surface::Http)),
            _ => self.scopes.get(owner).map(|scopes| (Caller::new(owner, scopes.iter().copied()), Surface::Http)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_anonymous_http_caller_is_held_to_anonymous_writes() {
        let open = PolicySwitches::default();
        assert_eq!(open.grants(&Caller::anonymous(), Surface::Http).writes, Permission::DeniedByDefault);
        assert!(open.grants(&Caller::anonymous(), Surface::Local).writes.allowed());
        assert!(open.grants(&Caller::new("alice", [Scope::Sessions]), Surface::Http).writes.allowed());
        let allowed = PolicySwitches { anonymous_writes: Some(Switch::Allow), ..PolicySwitches::default() };
        assert!(allowed.grants(&Caller::anonymous(), Surface::Http).writes.allowed());
        let refused = open.grants(&Caller::anonymous(), Surface::Http).check(Guarded::Writes, "w", false);
        assert!(refused.unwrap_err().to_string().contains("anonymous_writes = \"allow\""));
    }

    #[test]
    fn owners_are_the_token_tables_subjects_as_of_now() {
        let owners = Owners::new([
            ("shelly", &[Scope::Sessions][..]),
            ("shelly", &[Scope::Shell][..]),
            ("bob", &[Scope::Shell][..]),
        ]);
        let (shelly, surface) = owners.caller("shelly").unwrap();
        assert_eq!((shelly, surface), (Caller::new("shelly", [Scope::Sessions, Scope::Shell]), Surface::Http));
        assert_eq!(owners.caller("local"), Some((Caller::local(), Surface::Local)));
        assert_eq!(owners.caller("anonymous"), Some((Caller::anonymous(), Surface::Http)));
        assert_eq!(owners.caller("gone"), None, "no token names it any more");
        assert!(!owners.caller("bob").unwrap().0.uses_sessions());
    }

    #[test]
    fn config_then_surface_then_scope() {
        let anonymous = Caller::anonymous();
        let scoped = Caller::new("ci", [Scope::Sessions, Scope::Shell]);
        let open = PolicySwitches::default();
        assert!(open.grants(&anonymous, Surface::Local).shell.allowed(), "stdio: allowed");
        assert_eq!(open.grants(&anonymous, Surface::Http).shell, Permission::DeniedByDefault);
        assert!(open.grants(&scoped, Surface::Http).shell.allowed(), "the scope grants it");
        assert!(!open.grants(&scoped, Surface::Http).inline_commands.allowed(), "only what it names");

        let denied = PolicySwitches { shell: Some(Switch::Deny), ..PolicySwitches::default() };
        assert_eq!(denied.grants(&Caller::local(), Surface::Local).shell, Permission::DeniedByConfig);
        assert_eq!(denied.grants(&scoped, Surface::Http).shell, Permission::DeniedByConfig, "a hard deny");
        let allowed = PolicySwitches { inline_mcp_urls: Some(Switch::Allow), ..PolicySwitches::default() };
        assert!(allowed.grants(&anonymous, Surface::Http).inline_urls.allowed());
        assert!(!allowed.grants(&anonymous, Surface::Http).inline_commands.allowed());
    }

    #[test]
    fn the_deprecated_tools_switches_apply_where_policy_is_silent() {
        let legacy = PolicySwitches::default().with_legacy(Some(false), Some(false));
        assert_eq!(
            (legacy.shell, legacy.inline_mcp_commands, legacy.inline_mcp_urls),
            (Some(Switch::Deny), Some(Switch::Deny), Some(Switch::Deny))
        );
        let policy = PolicySwitches { shell: Some(Switch::Allow), ..PolicySwitches::default() };
        assert_eq!(policy.with_legacy(Some(false), None).shell, Some(Switch::Allow), "[policy] wins");
        assert_eq!(PolicySwitches::default().with_legacy(None, None), PolicySwitches::default());
    }
}
