//! The process's one TLS crypto provider: ring.
//!
//! Every TLS connection deputy opens (model providers, remote MCP servers, hooks, webhooks, the
//! OTLP exporter, PostgreSQL) goes through rustls with this provider. reqwest is built without
//! a provider of its own (`rustls-no-provider`) and takes the process default, which
//! [`install`] sets before any client is built. ring rather than aws-lc-rs: the same protocol
//! versions and cipher suites for a client (only the post-quantum hybrid key exchange is
//! aws-lc's alone), 2.1 MB less binary and no C build of aws-lc (docs/BENCHMARKS.md, "Binary
//! size").

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// The provider, installed as the process default on first use.
pub fn provider() -> Arc<CryptoProvider> {
    install();
    CryptoProvider::get_default().cloned().unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// Installs ring as the process default unless a provider is installed already (a program
/// embedding deputy's library may have chosen its own, which then serves deputy too).
fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err only when a default is already set: that one stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A reqwest client builder whose TLS uses [`provider`]: what every HTTP client of deputy
/// starts from.
pub fn http_client() -> reqwest::ClientBuilder {
    install();
    reqwest::Client::builder()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_use_ring_as_the_process_default() {
        let client = http_client().build();
        assert!(client.is_ok(), "{client:?}");
        let offered = |provider: &CryptoProvider| {
            let suites: Vec<_> = provider.cipher_suites.iter().map(|suite| suite.suite()).collect();
            let groups: Vec<_> = provider.kx_groups.iter().map(|group| group.name()).collect();
            (suites, groups)
        };
        assert_eq!(offered(&provider()), offered(&rustls::crypto::ring::default_provider()));
    }
}
