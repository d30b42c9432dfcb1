//! The `[auth]` section: tokens HTTP callers present, read once (from the environment, or as
//! digests) into [`AccessToken`]s.

use serde::Deserialize;

use super::Environment;
use crate::caller::Scope;

/// The `[auth]` section: the tokens HTTP callers present, each naming a subject (who owns the
/// sessions it creates) and its scopes. `--token` may be used beside them; it is the local
/// user, with every scope.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
}

/// One `[[auth.tokens]]` entry: exactly one of `token_env` and `token_sha256`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub subject: String,
    /// The environment variable holding the token (at least 16 characters).
    pub token_env: Option<String>,
    /// The token's SHA-256, 64 hex digits, so the config file holds no secret.
    pub token_sha256: Option<String>,
    pub scopes: Vec<Scope>,
}

/// How a configured token is recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSecret {
    Plain(String),
    Sha256([u8; 32]),
}

/// A token the HTTP guard accepts, and the caller it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessToken {
    pub subject: String,
    pub secret: TokenSecret,
    pub scopes: Vec<Scope>,
}

/// Presented tokens are trimmed, so spaces cannot count towards the length (F17).
pub const MIN_TOKEN_CHARS: usize = 16;

impl AuthConfig {
    /// The tokens, their secrets read from `env`. Fails on an entry with neither or both of
    /// `token_env` and `token_sha256`, an unset or short token, or a malformed digest. A subject
    /// may have several tokens (G1: one per peer server, each revocable, with its own scopes).
    pub fn resolve(&self, env: &Environment) -> anyhow::Result<Vec<AccessToken>> {
        self.tokens
            .iter()
            .map(|entry| {
                let subject = entry.subject.trim();
                anyhow::ensure!(!subject.is_empty(), "[[auth.tokens]]: a subject must not be empty");
                // The callers of a server without tokens are this subject; a token never is.
                anyhow::ensure!(
                    subject != crate::caller::ANONYMOUS_SUBJECT,
                    "[[auth.tokens]]: the subject {subject:?} is reserved for callers without a token"
                );
                let secret = match (&entry.token_env, &entry.token_sha256) {
                    (Some(var), None) => {
                        let token = env.get(var).map(str::trim).unwrap_or_default();
                        anyhow::ensure!(
                            token.chars().count() >= MIN_TOKEN_CHARS,
                            "[[auth.tokens]] {subject:?}: {var} must hold a token of at least {MIN_TOKEN_CHARS} \
                             characters"
                        );
                        TokenSecret::Plain(token.to_owned())
                    }
                    (None, Some(hex)) => TokenSecret::Sha256(parse_sha256(hex).ok_or_else(|| {
                        anyhow::anyhow!("[[auth.tokens]] {subject:?}: token_sha256 must be 64 hex digits")
                    })?),
                    _ => {
                        anyhow::bail!("[[auth.tokens]] {subject:?}: give exactly one of token_env and token_sha256")
                    }
                };
                Ok(AccessToken { subject: subject.to_owned(), secret, scopes: entry.scopes.clone() })
            })
            .collect()
    }
}

fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim().as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(hex.chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(digest)
}
