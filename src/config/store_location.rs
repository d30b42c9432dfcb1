//! Where sessions are kept: a redb file that one process owns, or a PostgreSQL database that
//! any number of replicas share. `--store` / `DEPUTY_STORE` takes either; a URL names the
//! database, anything else a file.

use std::fmt;
use std::path::{Path, PathBuf};

/// The store the command line names.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A redb file: one process holds it, and `serve` shares it through the background server.
    File(PathBuf),
    /// A PostgreSQL URL (`postgres://` or `postgresql://`): every process opens it directly.
    Database(String),
}

impl StoreLocation {
    /// `postgres://…` and `postgresql://…` name a database; any other value is a file path.
    pub fn parse(value: &str) -> Result<Self, String> {
        if value.is_empty() {
            return Err("the store is empty: give a file path or a postgres:// URL".into());
        }
        let lowered = value.get(..13).unwrap_or(value).to_ascii_lowercase();
        if lowered.starts_with("postgres://") || lowered.starts_with("postgresql://") {
            return Ok(Self::Database(value.to_owned()));
        }
        Ok(Self::File(PathBuf::from(value)))
    }

    /// The file, for a redb store.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Self::File(path) => Some(path),
            Self::Database(_) => None,
        }
    }
}

impl From<PathBuf> for StoreLocation {
    fn from(path: PathBuf) -> Self {
        Self::File(path)
    }
}

/// Shown in logs and errors: a database URL without its password.
impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Database(url) => f.write_str(&without_password(url)),
        }
    }
}

impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
            Self::Database(_) => f.debug_tuple("Database").field(&self.to_string()).finish(),
        }
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`; a password given as a
/// query parameter (`?password=`) is masked too.
fn without_password(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let masked: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", masked.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_databases_and_anything_else_a_file() {
        assert_eq!(
            StoreLocation::parse("postgres://u@h/db").unwrap(),
            StoreLocation::Database("postgres://u@h/db".into())
        );
        assert!(matches!(StoreLocation::parse("PostgreSQL://h/db").unwrap(), StoreLocation::Database(_)));
        assert_eq!(
            StoreLocation::parse("data/sessions.redb").unwrap(),
            StoreLocation::File("data/sessions.redb".into())
        );
        assert!(StoreLocation::parse("").is_err());
    }

    #[test]
    fn a_database_is_shown_without_its_password() {
        let location =
            StoreLocation::parse("postgres://deputy:hunter2@db:5432/app?password=x&sslmode=disable").unwrap();
        let shown = format!("{location} {location:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("password=x"), "{shown}");
        assert!(shown.contains("postgres://deputy:***@db:5432/app?password=***&sslmode=disable"), "{shown}");
    }
}
