//! [`Caller`]: who asks, and what they may do (security review F8).
//!
//! Every operation of the session service is made on behalf of one caller: its `subject` owns
//! the sessions it creates, and its [`Scope`]s say what else it may do. The surfaces only say
//! who the caller is (stdio: [`Caller::local`]; HTTP: the subject of the bearer token the guard
//! accepted); the session layer decides what that allows.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

/// What a caller may do.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, strum::Display, strum::EnumString, strum::VariantArray,
)]
pub enum Scope {
    /// Create sessions and use its own.
    #[strum(serialize = "sessions")]
    Sessions,
    /// Use every session, whoever owns it.
    #[strum(serialize = "sessions:all")]
    SessionsAll,
    /// Only `session_send`, by name in a peer group, to its own subject's sessions; and relay
    /// another deputy's session's message (`sender`, `hops`): a peer server's token (G1).
    #[strum(serialize = "sessions:send")]
    SessionsSend,
    /// See its own sessions (read, list, events, export), act on none: a viewer's token.
    #[strum(serialize = "sessions:read")]
    SessionsRead,
    /// See every session, whoever owns it, act on none.
    #[strum(serialize = "sessions:read_all")]
    SessionsReadAll,
    /// Enable the shell where the surface's default denies it.
    #[strum(serialize = "shell")]
    Shell,
    /// Bring inline MCP servers (commands and urls) where the surface's default denies them.
    #[strum(serialize = "mcp:inline")]
    McpInline,
    /// Everything the other scopes allow.
    #[strum(serialize = "admin")]
    Admin,
}

impl<'de> serde::Deserialize<'de> for Scope {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(|_| {
            let known: Vec<String> =
                <Scope as strum::VariantArray>::VARIANTS.iter().map(Scope::to_string).collect();
            serde::de::Error::custom(format!("unknown scope {name:?}; known: {}", known.join(", ")))
        })
    }
}

/// The subject of [`Caller::local`]: the user of a stdio client or of the background server.
pub const LOCAL_SUBJECT: &str = "local";
/// The subject of HTTP callers on a listener with no token configured.
pub const ANONYMOUS_SUBJECT: &str = "anonymous";

/// One caller: a subject and its scopes. Cheap to clone.
#[derive(Clone, PartialEq, Eq)]
pub struct Caller {
    subject: Arc<str>,
    scopes: Arc<BTreeSet<Scope>>,
}

impl Caller {
    pub fn new(subject: impl Into<Arc<str>>, scopes: impl IntoIterator<Item = Scope>) -> Self {
        Self { subject: subject.into(), scopes: Arc::new(scopes.into_iter().collect()) }
    }

    /// The user's own client (stdio, the background server's clients, `--token`): every scope.
    pub fn local() -> Self {
        Self::new(LOCAL_SUBJECT, Self::every_scope())
    }

    /// An HTTP caller without a token (loopback with none configured): its own sessions only,
    /// no shell and no inline servers unless the config file allows them (F3).
    pub fn anonymous() -> Self {
        Self::new(ANONYMOUS_SUBJECT, [Scope::Sessions])
    }

    /// Every scope there is.
    pub fn every_scope() -> impl Iterator<Item = Scope> {
        <Scope as strum::VariantArray>::VARIANTS.iter().copied()
    }

    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The subject, shared (for values that outlive the request, such as a session's owner).
    pub fn subject_arc(&self) -> Arc<str> {
        self.subject.clone()
    }

    /// Its scopes, in their order.
    pub fn scopes(&self) -> impl Iterator<Item = Scope> + '_ {
        self.scopes.iter().copied()
    }

    /// Whether the caller has `scope`; `admin` has them all.
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope) || self.scopes.contains(&Scope::Admin)
    }

    /// Whether the caller may use sessions at all (its own, or every one).
    pub fn uses_sessions(&self) -> bool {
        self.has(Scope::Sessions) || self.has(Scope::SessionsAll)
    }

    /// Whether the caller sees every session, not only its own.
    pub fn sees_all(&self) -> bool {
        self.has(Scope::SessionsAll)
    }

    /// Whether the caller may use a session owned by `owner`.
    pub fn may_use(&self, owner: &str) -> bool {
        self.sees_all() || (self.uses_sessions() && *self.subject == *owner)
    }

    /// Whether the caller may see sessions at all: whoever may use them, and viewers.
    pub fn reads_sessions(&self) -> bool {
        self.uses_sessions() || self.has(Scope::SessionsRead) || self.has(Scope::SessionsReadAll)
    }

    /// Whether the caller sees every session (to use, or only to read).
    pub fn reads_all(&self) -> bool {
        self.sees_all() || self.has(Scope::SessionsReadAll)
    }

    /// Whether the caller may see a session owned by `owner`.
    pub fn may_read(&self, owner: &str) -> bool {
        self.reads_all() || (self.reads_sessions() && *self.subject == *owner)
    }
}

impl fmt::Debug for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scopes: Vec<String> = self.scopes.iter().map(Scope::to_string).collect();
        write!(f, "Caller({} [{}])", self.subject, scopes.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_have_their_documented_names() {
        let names: Vec<String> = Caller::every_scope().map(|scope| scope.to_string()).collect();
        assert_eq!(
            names,
            [
                "sessions",
                "sessions:all",
                "sessions:send",
                "sessions:read",
                "sessions:read_all",
                "shell",
                "mcp:inline",
                "admin"
            ]
        );
        for scope in Caller::every_scope() {
            assert_eq!(scope.to_string().parse::<Scope>().unwrap(), scope);
        }
        let parsed: Vec<Scope> = serde_json::from_str(r#"["sessions", "mcp:inline"]"#).unwrap();
        assert_eq!(parsed, [Scope::Sessions, Scope::McpInline]);
        let unknown = serde_json::from_str::<Vec<Scope>>(r#"["root"]"#).unwrap_err().to_string();
        assert!(unknown.contains("unknown scope \"root\""), "{unknown}");
    }

    #[test]
    fn viewers_read_and_never_use() {
        let viewer = Caller::new("alice", [Scope::SessionsRead]);
        assert!(viewer.may_read("alice") && !viewer.may_read("bob"));
        assert!(!viewer.uses_sessions() && !viewer.may_use("alice"));
        let auditor = Caller::new("auditor", [Scope::SessionsReadAll]);
        assert!(auditor.may_read("bob") && auditor.reads_all() && !auditor.may_use("bob"));
        assert!(Caller::new("ops", [Scope::SessionsAll]).may_read("bob"), "who uses a session reads it");
    }

    #[test]
    fn owners_and_scopes_decide_who_uses_a_session() {
        let alice = Caller::new("alice", [Scope::Sessions]);
        assert!(alice.may_use("alice") && !alice.may_use("bob"));
        assert!(!alice.has(Scope::Shell));
        let auditor = Caller::new("eve", [Scope::SessionsAll]);
        assert!(auditor.may_use("alice") && auditor.may_use("bob"));
        let admin = Caller::new("root", [Scope::Admin]);
        assert!(admin.may_use("alice") && admin.has(Scope::Shell) && admin.has(Scope::McpInline));
        let shell_only = Caller::new("ci", [Scope::Shell]);
        assert!(!shell_only.uses_sessions() && !shell_only.may_use("ci"));
        assert!(Caller::local().sees_all() && !Caller::anonymous().has(Scope::Shell));
    }
}
