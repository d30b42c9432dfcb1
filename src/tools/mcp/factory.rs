//! [`McpFactory`]: the process-wide pool of external MCP servers, shared by every session.
//!
//! Two layers, as in the design (seed 004, "MCP Lifecycle Policy"):
//! - **active**: sessions hold `Arc<McpConnection>`; the factory keeps only a `Weak` per key,
//!   so a second session with the same [`McpServerKey`] gets the same connection (and process);
//! - **idle**: when the last `Arc` drops, [`McpConnection`]'s `Drop` parks the running server
//!   in the idle pool instead of stopping it; the next `acquire` of that key revives it without
//!   spawning. A reaper task stops servers idle longer than their `idle_timeout` and keeps at
//!   most `max_idle` of them (the longest idle go first).
//!
//! Different keys never share, so tenants with different env (tokens) get different processes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolResult, JsonObject, Tool as McpToolInfo};

use super::config::McpPoolConfig;
use super::error::McpServerError;
use super::live::LiveServer;
use super::reach::Reach;
use super::spec::{McpServerKey, McpServerSpec};

/// Counters of the pool, for tests, benchmarks and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct McpStats {
    /// Servers started (first use and respawns after a crash).
    pub spawned: u64,
    /// Acquisitions served by a connection another session was using.
    pub shared: u64,
    /// Acquisitions served from the idle pool (no spawn).
    pub revived: u64,
    /// Idle servers stopped by the reaper or the idle cap.
    pub reaped: u64,
    /// Keys with a connection in use now.
    pub active: usize,
    /// Servers parked in the idle pool now.
    pub idle: usize,
}

struct IdleEntry {
    server: Arc<LiveServer>,
    since: Instant,
    timeout: Duration,
}

/// State shared by the factory, its connections and its reaper.
struct Shared {
    config: McpPoolConfig,
    active: Mutex<HashMap<McpServerKey, Weak<McpConnection>>>,
    idle: Mutex<HashMap<McpServerKey, IdleEntry>>,
    /// One lock per key, so two sessions asking at once for a new key spawn it once.
    gates: Mutex<HashMap<McpServerKey, Arc<tokio::sync::Mutex<()>>>>,
    spawned: AtomicU64,
    shared: AtomicU64,
    revived: AtomicU64,
    reaped: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    async fn spawn(&self, key: &McpServerKey) -> Result<Arc<LiveServer>, McpServerError> {
        let server = LiveServer::start(key, self.config.sandbox).await?;
        self.spawned.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(server))
    }

    /// Takes the server of a connection nobody uses any more.
    fn park(&self, key: McpServerKey, server: Arc<LiveServer>, timeout: Duration) {
        {
            let mut active = lock(&self.active);
            if active.get(&key).is_some_and(|weak| weak.strong_count() == 0) {
                active.remove(&key);
            }
        }
        if timeout.is_zero() || self.config.max_idle == 0 || server.is_closed() {
            return; // dropped here: stopped
        }
        let evicted = {
            let mut idle = lock(&self.idle);
            let mut evicted =
                idle.insert(key, IdleEntry { server, since: Instant::now(), timeout }).into_iter().count();
            while idle.len() > self.config.max_idle {
                let oldest = idle.iter().min_by_key(|(_, entry)| entry.since).map(|(key, _)| key.clone());
                match oldest {
                    Some(key) => {
                        idle.remove(&key);
                        evicted += 1;
                    }
                    None => break,
                }
            }
            evicted
        };
        self.reaped.fetch_add(evicted as u64, Ordering::Relaxed);
    }

    /// Stops idle servers whose time is up (or that died while idle). Returns how many.
    fn reap(&self, now: Instant) -> usize {
        let stopped: Vec<IdleEntry> = {
            let mut idle = lock(&self.idle);
            let expired: Vec<McpServerKey> = idle
                .iter()
                .filter(|(_, entry)| now.duration_since(entry.since) >= entry.timeout || entry.server.is_closed())
                .map(|(key, _)| key.clone())
                .collect();
            expired.iter().filter_map(|key| idle.remove(key)).collect()
        };
        self.reaped.fetch_add(stopped.len() as u64, Ordering::Relaxed);
        for entry in &stopped {
            tracing::info!(pid = ?entry.server.pid(), "idle MCP server stopped");
        }
        stopped.len()
    }
}

/// The process-wide MCP server pool. Lives on `AppState`; the `AgentFactory` holds an `Arc`.
pub struct McpFactory {
    shared: Arc<Shared>,
    reaper_started: AtomicBool,
}

impl std::fmt::Debug for McpFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpFactory").field("config", &self.shared.config).field("stats", &self.stats()).finish()
    }
}

impl Default for McpFactory {
    fn default() -> Self {
        Self::new(McpPoolConfig::default())
    }
}

impl McpFactory {
    /// A pool with the given policy. No task starts until the first `acquire` (so this can be
    /// built outside a runtime).
    pub fn new(config: McpPoolConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                config,
                active: Mutex::default(),
                idle: Mutex::default(),
                gates: Mutex::default(),
                spawned: AtomicU64::new(0),
                shared: AtomicU64::new(0),
                revived: AtomicU64::new(0),
                reaped: AtomicU64::new(0),
            }),
            reaper_started: AtomicBool::new(false),
        }
    }

    pub fn config(&self) -> McpPoolConfig {
        self.shared.config
    }

    /// A connection to the server of `spec`: the one in use under the same key, else the idle
    /// one, else a new one.
    pub async fn acquire(&self, spec: &McpServerSpec) -> Result<Arc<McpConnection>, McpServerError> {
        self.acquire_reaching(spec, Reach::Any).await
    }

    /// [`Self::acquire`] for a server whose HTTP connection may go only where `reach` allows.
    pub async fn acquire_reaching(
        &self,
        spec: &McpServerSpec,
        reach: Reach,
    ) -> Result<Arc<McpConnection>, McpServerError> {
        self.start_reaper();
        let key = spec.key_reaching(reach);
        let gate = Gate::enter(&self.shared.gates, &key);
        let _held = gate.lock.lock().await;
        if let Some(connection) = lock(&self.shared.active).get(&key).and_then(Weak::upgrade) {
            self.shared.shared.fetch_add(1, Ordering::Relaxed);
            return Ok(connection);
        }
        let idle = lock(&self.shared.idle).remove(&key).filter(|entry| !entry.server.is_closed());
        let server = match idle {
            Some(entry) => {
                self.shared.revived.fetch_add(1, Ordering::Relaxed);
                entry.server
            }
            None => self.shared.spawn(&key).await?,
        };
        let connection = Arc::new(McpConnection {
            key: key.clone(),
            idle_timeout: spec.idle_timeout().unwrap_or(self.shared.config.idle_timeout),
            server: tokio::sync::Mutex::new(Some(server)),
            shared: self.shared.clone(),
        });
        lock(&self.shared.active).insert(key.clone(), Arc::downgrade(&connection));
        Ok(connection)
    }

    pub fn stats(&self) -> McpStats {
        let active = lock(&self.shared.active).values().filter(|weak| weak.strong_count() > 0).count();
        McpStats {
            spawned: self.shared.spawned.load(Ordering::Relaxed),
            shared: self.shared.shared.load(Ordering::Relaxed),
            revived: self.shared.revived.load(Ordering::Relaxed),
            reaped: self.shared.reaped.load(Ordering::Relaxed),
            active,
            idle: lock(&self.shared.idle).len(),
        }
    }

    /// Pids of the idle servers' processes (stdio only), for tests and diagnostics.
    pub fn idle_pids(&self) -> Vec<u32> {
        lock(&self.shared.idle).values().filter_map(|entry| entry.server.pid()).collect()
    }

    /// Runs one reaper pass now; returns how many idle servers it stopped.
    pub fn reap_now(&self) -> usize {
        self.shared.reap(Instant::now())
    }

    /// Stops every idle server (deputy's shutdown). Servers in use stop when their sessions drop.
    pub fn shutdown(&self) {
        let idle: Vec<IdleEntry> = lock(&self.shared.idle).drain().map(|(_, entry)| entry).collect();
        drop(idle);
    }

    fn start_reaper(&self) {
        if self.reaper_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let shared = Arc::downgrade(&self.shared);
        let interval = self.shared.config.cleanup_interval;
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                // The reaper ends with the factory.
                let Some(shared) = shared.upgrade() else { return };
                shared.reap(Instant::now());
            }
        });
    }
}

impl Drop for McpFactory {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A caller's use of the per-key gate: the entry is created on first use and removed by the
/// last user to let go (even one whose `acquire` was dropped mid-way), so the map holds only
/// keys being acquired right now (security review F18: it used to grow by one entry per key
/// ever seen).
struct Gate<'a> {
    gates: &'a Mutex<HashMap<McpServerKey, Arc<tokio::sync::Mutex<()>>>>,
    key: &'a McpServerKey,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl<'a> Gate<'a> {
    fn enter(gates: &'a Mutex<HashMap<McpServerKey, Arc<tokio::sync::Mutex<()>>>>, key: &'a McpServerKey) -> Self {
        let lock = lock(gates).entry(key.clone()).or_default().clone();
        Self { gates, key, lock }
    }
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        let mut gates = lock(self.gates);
        // Under the map's lock nobody can take a new clone: two counts are the map's and ours.
        if gates.get(self.key).is_some_and(|entry| Arc::ptr_eq(entry, &self.lock))
            && Arc::strong_count(&self.lock) == 2
        {
            gates.remove(self.key);
        }
    }
}

/// A session's handle on one server. Shared by every session with the same key; when the last
/// one drops it, the server moves to the idle pool.
pub struct McpConnection {
    key: McpServerKey,
    idle_timeout: Duration,
    /// `None` only while being dropped. Replaced when the server died (respawn on next use).
    server: tokio::sync::Mutex<Option<Arc<LiveServer>>>,
    shared: Arc<Shared>,
}

impl McpConnection {
    pub fn key(&self) -> &McpServerKey {
        &self.key
    }

    /// The running server, respawned first if it died since the last call.
    async fn server(&self) -> Result<Arc<LiveServer>, McpServerError> {
        let mut slot = self.server.lock().await;
        if let Some(server) = slot.as_ref().filter(|server| !server.is_closed()) {
            return Ok(server.clone());
        }
        tracing::warn!(server = %self.key, "MCP server is gone; starting it again");
        *slot = None;
        let server = self.shared.spawn(&self.key).await?;
        *slot = Some(server.clone());
        Ok(server)
    }

    /// The tools the server lists.
    pub async fn tools(&self) -> Result<Vec<McpToolInfo>, McpServerError> {
        Ok(self.server().await?.tools().to_vec())
    }

    /// Pid of the server's process (stdio), respawning it if it died.
    pub async fn pid(&self) -> Result<Option<u32>, McpServerError> {
        Ok(self.server().await?.pid())
    }

    /// Calls a tool on the server. A server that died during the call is reported now
    /// ([`McpServerError::Closed`]) and respawned on the next call.
    pub async fn call(&self, tool: &str, arguments: Option<JsonObject>) -> Result<CallToolResult, McpServerError> {
        self.server().await?.call(tool, arguments).await
    }
}

impl Drop for McpConnection {
    fn drop(&mut self) {
        if let Some(server) = self.server.get_mut().take() {
            self.shared.park(self.key.clone(), server, self.idle_timeout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::mcp::McpTransport;

    /// Security review F18: the per-key gates map gained an entry per distinct key and never
    /// shrank. Whatever the outcome, and with callers racing on one key, it ends empty.
    #[tokio::test]
    async fn f18_the_gate_map_is_empty_once_no_acquire_runs() {
        let factory = McpFactory::default();
        let spec = |tag: usize| McpServerSpec {
            name: format!("gone{tag}"),
            transport: McpTransport::Stdio {
                command: "/nonexistent/mcp-server".into(),
                args: vec![],
                env: Default::default(),
            },
            idle_timeout_secs: None,
            call_timeout_secs: None,
            unconfined: false,
        };
        let specs: Vec<McpServerSpec> = (0..20).map(|tag| spec(tag % 4)).collect();
        let results = futures::future::join_all(specs.iter().map(|spec| factory.acquire(spec))).await;
        assert!(results.iter().all(Result::is_err));
        assert!(lock(&factory.shared.gates).is_empty(), "{} gates left", lock(&factory.shared.gates).len());

        // An acquire dropped while it waits at the gate leaves nothing behind either.
        let key = spec(0).key();
        let held = Gate::enter(&factory.shared.gates, &key);
        let guard = held.lock.clone().lock_owned().await;
        let spec0 = spec(0);
        let waiting = factory.acquire(&spec0);
        assert!(tokio::time::timeout(Duration::from_millis(20), waiting).await.is_err(), "it waited");
        drop(guard);
        drop(held);
        assert!(lock(&factory.shared.gates).is_empty());
    }
}
