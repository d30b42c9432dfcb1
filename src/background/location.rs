//! Where a store's background server can be found: its socket, pid file and log file.
//!
//! The socket lives in a private directory, `$XDG_RUNTIME_DIR/deputy/` or else
//! `/tmp/deputy-$UID/`, created with mode 0700 and refused when another user owns it or
//! others may write to it. Another local user can create `/tmp/deputy-$UID` first (security
//! review G14): then that directory is never used, and the socket goes to
//! `$XDG_CACHE_HOME/deputy/run/` (else `$HOME/.cache/deputy/run/`), held to the same rules, so
//! every client of the user still finds the same place. Its name is a hash of the store's canonical path, so every client
//! naming the same file (by any path) finds the same server. The log goes beside the store.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::os::current_uid;
use crate::config::{Environment, Settings, StoreLocation, default_store_path};

/// Everything about one store's background server that lives on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The store file, canonical.
    pub store: PathBuf,
    /// The Unix socket the server listens on (mode 0600).
    pub socket: PathBuf,
    /// The server's pid, written once it listens, removed when it exits.
    pub pid_file: PathBuf,
    /// Where the server's stdout and stderr (its logs) are appended.
    pub log_file: PathBuf,
}

impl Location {
    /// The location for `store`, which must already be canonical ([`canonical_store`]).
    /// Creates the socket directory if needed.
    pub fn for_store(store: &Path, env: &Environment) -> anyhow::Result<Self> {
        let dir = socket_dir(env)?;
        let name = format!("{:016x}", fnv1a(store.as_os_str().as_bytes()));
        Ok(Self {
            store: store.to_path_buf(),
            socket: dir.join(format!("{name}.sock")),
            pid_file: dir.join(format!("{name}.pid")),
            log_file: log_file(store),
        })
    }

    /// The location of the server whose socket is `socket` (as the server is told it).
    pub fn from_socket(store: &Path, socket: &Path) -> Self {
        Self {
            store: store.to_path_buf(),
            socket: socket.to_path_buf(),
            pid_file: socket.with_extension("pid"),
            log_file: log_file(store),
        }
    }

    /// The pid the pid file records, if any.
    pub fn recorded_pid(&self) -> Option<u32> {
        std::fs::read_to_string(&self.pid_file).ok()?.trim().parse().ok()
    }
}

/// `<store>.log`.
fn log_file(store: &Path) -> PathBuf {
    let mut name = OsString::from(store.as_os_str());
    name.push(".log");
    PathBuf::from(name)
}

/// The store the settings name (`--store`, else the default file), absolute and with its
/// directory resolved, so that two clients naming one file by different paths agree. Creates
/// the store's directory, as opening the store would.
pub fn canonical_store(settings: &Settings, env: &Environment) -> anyhow::Result<PathBuf> {
    let path = match &settings.store {
        Some(StoreLocation::File(path)) => path.clone(),
        Some(StoreLocation::Database(_)) => {
            anyhow::bail!("a database store has no background server: every deputy process opens it directly")
        }
        None => default_store_path(env)
            .context("no place for the session store: set --store / DEPUTY_STORE (or HOME), or use --ephemeral")?,
    };
    let path = std::path::absolute(&path).with_context(|| format!("store path {}", path.display()))?;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        anyhow::bail!("store path {} names no file", path.display());
    };
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let parent = parent.canonicalize().with_context(|| format!("store directory {}", parent.display()))?;
    Ok(parent.join(name))
}

/// `$XDG_RUNTIME_DIR/deputy`, else `/tmp/deputy-$UID`: created 0700 if missing, and refused
/// unless it is a directory of ours that nobody else can write to. When `/tmp/deputy-$UID` is
/// refused (another user made it first, or its mode is wrong), the private fallback under the
/// user's cache directory.
fn socket_dir(env: &Environment) -> anyhow::Result<PathBuf> {
    let uid = current_uid();
    if let Some(runtime) = env.get("XDG_RUNTIME_DIR") {
        return private_dir(Path::new(runtime).join("deputy"), uid);
    }
    let shared = std::env::temp_dir().join(format!("deputy-{uid}"));
    match private_dir(shared.clone(), uid) {
        Ok(dir) => Ok(dir),
        Err(refused) => {
            let cache = match (env.get("XDG_CACHE_HOME"), env.get("HOME")) {
                (Some(cache), _) if Path::new(cache).is_absolute() => PathBuf::from(cache),
                (_, Some(home)) if Path::new(home).is_absolute() => Path::new(home).join(".cache"),
                _ => return Err(refused.context("and no HOME for a private fallback")),
            };
            let fallback = cache.join("deputy").join("run");
            tracing::warn!(
                refused = %shared.display(),
                using = %fallback.display(),
                "not using the shared socket directory: {refused:#}"
            );
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&fallback)
                .with_context(|| format!("creating {}", fallback.display()))?;
            check_private_dir(&fallback, uid)?;
            Ok(fallback)
        }
    }
}

/// `dir`, created 0700 if missing, checked with [`check_private_dir`].
fn private_dir(dir: PathBuf, uid: u32) -> anyhow::Result<PathBuf> {
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(err).with_context(|| format!("creating {}", dir.display())),
    }
    check_private_dir(&dir, uid)?;
    Ok(dir)
}

/// A directory (not a symlink to one) owned by `uid` with no group or world access bits
/// beyond reading: otherwise another user could replace our socket.
pub fn check_private_dir(dir: &Path, uid: u32) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(dir).with_context(|| format!("socket directory {}", dir.display()))?;
    if !meta.is_dir() {
        anyhow::bail!("socket directory {} is not a directory", dir.display());
    }
    if meta.uid() != uid {
        anyhow::bail!("socket directory {} belongs to uid {}, not to this user ({uid})", dir.display(), meta.uid());
    }
    if meta.mode() & 0o022 != 0 {
        anyhow::bail!(
            "socket directory {} can be written by other users (mode {:o}); make it 0700",
            dir.display(),
            meta.mode() & 0o777
        );
    }
    Ok(())
}

/// 64-bit FNV-1a: small, stable across builds and platforms, and plenty to tell stores apart.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn one_store_one_socket_and_the_directory_is_private() {
        let runtime = tempfile::tempdir().unwrap();
        let env = Environment::from_pairs([("XDG_RUNTIME_DIR", runtime.path().to_str().unwrap())]);
        let store = runtime.path().join("data").join("sessions.redb");
        let settings = Settings { store: Some(store.clone().into()), ..Settings::default() };
        let canonical = canonical_store(&settings, &env).unwrap();
        let by_other_path =
            Settings { store: Some(runtime.path().join("data/../data/sessions.redb").into()), ..settings };
        assert_eq!(canonical_store(&by_other_path, &env).unwrap(), canonical);

        let location = Location::for_store(&canonical, &env).unwrap();
        assert_eq!(location.socket.parent().unwrap(), runtime.path().join("deputy"));
        assert_eq!(location, Location::for_store(&canonical, &env).unwrap(), "stable");
        assert_eq!(location.log_file, canonical.with_extension("redb.log"));
        let other = Location::for_store(&canonical.with_file_name("other.redb"), &env).unwrap();
        assert_ne!(other.socket, location.socket);
        let dir = location.socket.parent().unwrap();
        assert_eq!(std::fs::metadata(dir).unwrap().mode() & 0o777, 0o700);

        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = Location::for_store(&canonical, &env).unwrap_err();
        assert!(refused.to_string().contains("can be written by other users"), "{refused}");
    }
}
