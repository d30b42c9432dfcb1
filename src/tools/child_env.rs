//! The environment of the programs a session starts: shell commands and stdio MCP servers.
//!
//! They are the model's and third parties' code, so they get a short allowlist of deputy's own
//! variables — enough to find programs, a home and a locale — plus the variables their
//! configuration names (an MCP server's `env`). Never the rest: deputy's token, the providers'
//! API keys and whatever else the operator exported stay with deputy (security review F12).

use std::ffi::OsString;

use crate::secrets::Secret;

/// What a child inherits from deputy, if set.
pub const INHERITED: &[&str] =
    &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ"];

/// The environment of a child: the allowed part of `parent`, then `named` (which wins).
pub fn child_env<'a>(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    named: impl IntoIterator<Item = (&'a String, &'a Secret)>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> =
        parent.into_iter().filter(|(name, _)| INHERITED.iter().any(|allowed| name == *allowed)).collect();
    for (name, value) in named {
        env.retain(|(existing, _)| existing != name.as_str());
        env.push((name.into(), value.expose().into()));
    }
    env
}

/// Gives `command` the environment of a child of this process (see the module doc).
pub fn clean<'a>(command: &mut tokio::process::Command, named: impl IntoIterator<Item = (&'a String, &'a Secret)>) {
    command.env_clear().envs(child_env(std::env::vars_os(), named));
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn f12_children_get_the_allowlist_and_their_own_variables_never_deputys_secrets() {
        let parent = [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/me"),
            ("DEPUTY_TOKEN", "secret-token"),
            ("ANTHROPIC_API_KEY", "sk-ant-secret"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("AWS_SECRET_ACCESS_KEY", "aws-secret"),
            ("LANG", "C.UTF-8"),
        ]
        .map(|(name, value)| (OsString::from(name), OsString::from(value)));
        let named = BTreeMap::from([("API_TOKEN".to_owned(), Secret::from("for-this-server"))]);
        let env: BTreeMap<OsString, OsString> = child_env(parent, &named).into_iter().collect();
        let names: Vec<&str> = env.keys().filter_map(|name| name.to_str()).collect();
        assert_eq!(names, ["API_TOKEN", "HOME", "LANG", "PATH"]);
        // What the configuration names wins over what deputy has.
        let home = BTreeMap::from([("HOME".to_owned(), Secret::from("/srv/mcp"))]);
        let env = child_env([(OsString::from("HOME"), OsString::from("/home/me"))], &home);
        assert_eq!(env, [(OsString::from("HOME"), OsString::from("/srv/mcp"))]);
    }
}
