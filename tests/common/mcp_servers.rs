//! The third-party MCP servers the tests run against (npm packages pinned in
//! `tests/mcp-servers/package.json`). `DEPUTY_TEST_MCP_SERVERS_DIR` may point at another
//! install; otherwise the first test that needs them runs `tests/mcp-servers/install.sh` (npm,
//! once, under a file lock), so `cargo test` works on a fresh machine with node and npm. If that
//! fails the test fails, saying so: these tests are never skipped.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use deputy::tools::mcp::{McpServerSpec, McpTransport};

/// The directory holding `node_modules` with the servers, installing them on first use.
pub fn servers_dir() -> PathBuf {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        if let Ok(dir) = std::env::var("DEPUTY_TEST_MCP_SERVERS_DIR") {
            return Ok(PathBuf::from(dir));
        }
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("mcp-servers");
        let status = std::process::Command::new("bash")
            .arg(dir.join("install.sh"))
            .stdout(std::process::Stdio::null())
            .status()
            .map_err(|err| err.to_string())?;
        if !status.success() {
            return Err(format!("install.sh exited with {status}"));
        }
        Ok(dir)
    });
    match dir {
        Ok(dir) => dir.clone(),
        Err(err) => panic!(
            "the test MCP servers are not installed ({err}): run tests/mcp-servers/install.sh (needs node >= 20 and \
             npm), or set DEPUTY_TEST_MCP_SERVERS_DIR to a directory where it ran"
        ),
    }
}

pub fn bin(name: &str) -> String {
    let path = servers_dir().join("node_modules").join(".bin").join(name);
    assert!(path.exists(), "{} is missing: run tests/mcp-servers/install.sh", path.display());
    path.to_string_lossy().into_owned()
}

/// `@modelcontextprotocol/server-everything` over stdio. `marker` is an extra argument the
/// server ignores, so a test can find its own processes in /proc.
pub fn everything(name: &str, marker: &str, env: &[(&str, &str)]) -> McpServerSpec {
    McpServerSpec {
        name: name.into(),
        transport: McpTransport::Stdio {
            command: bin("mcp-server-everything"),
            args: vec!["stdio".into(), format!("--deputy-test={marker}")],
            env: env.iter().map(|(k, v)| ((*k).to_owned(), (*v).into())).collect::<BTreeMap<_, _>>(),
        },
        idle_timeout_secs: None,
        call_timeout_secs: None,
        unconfined: false,
    }
}

/// The cancellation probe (a TypeScript-SDK server) logging to `log`.
pub fn cancel_probe(log: &std::path::Path) -> McpServerSpec {
    McpServerSpec {
        name: "probe".into(),
        transport: McpTransport::Stdio {
            command: "node".into(),
            args: vec![servers_dir().join("cancel-probe.mjs").to_string_lossy().into_owned()],
            env: BTreeMap::from([("PROBE_LOG".to_owned(), log.to_string_lossy().into_owned().into())]),
        },
        idle_timeout_secs: None,
        call_timeout_secs: None,
        unconfined: false,
    }
}

/// Live (non-zombie) processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            pids.push(pid);
        }
    }
    pids
}

/// A marker no other test uses.
pub fn marker() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
