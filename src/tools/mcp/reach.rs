//! Which addresses an MCP server's HTTP connection may reach (security review F6).
//!
//! An inline `url` server makes deputy send requests, with caller-chosen headers, wherever the
//! caller points it: to a service on deputy's loopback, a private network, or a cloud metadata
//! endpoint. So an inline server is [`Reach::Public`]: its host must resolve to public
//! addresses only, checked before connecting (for a clear refusal) *and* by the HTTP client's
//! own resolver at every connection (so a DNS answer that changes in between cannot slip
//! through), with redirects off and no proxy. The operator's own `[mcp_servers.NAME]` servers,
//! and inline ones where `[policy] inline_mcp_private_urls = "allow"`, are [`Reach::Any`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Where a server's connection may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reach {
    /// Anywhere: the operator chose the server.
    Any,
    /// Public addresses only: a caller chose it.
    Public,
}

/// Whether `ip` is on the public internet: not loopback, private, link-local, shared (CGNAT),
/// unique-local, multicast, unspecified, broadcast or reserved; an IPv4 address mapped into
/// IPv6 is judged as the IPv4 address it is.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT), 100.64.0.0/10
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments, 192.0.0.0/24
        || (a == 198 && (b == 18 || b == 19)) // benchmarking, 198.18.0.0/15
        || a >= 240) // reserved, 240.0.0.0/4
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local, fc00::/7
        || (first & 0xffc0) == 0xfe80 // link-local, fe80::/10
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated), fec0::/10
        || (first == 0x2001 && ip.segments()[1] == 0x0db8) // documentation, 2001:db8::/32
        || (first == 0x0064 && ip.segments()[1] == 0xff9b)) // NAT64, 64:ff9b::/96 (embeds IPv4)
}

/// Why a server's URL may not be reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreachable {
    #[error("{0} is not a valid http(s) URL")]
    BadUrl(String),
    #[error("{host} cannot be resolved: {reason}")]
    Unresolved { host: String, reason: String },
    /// `shown` is the address, with the host name it came from when there was one.
    #[error(
        "{shown} is not a public address; inline servers may reach only public addresses (the \
         operator allows others with [policy] inline_mcp_private_urls = \"allow\")"
    )]
    NotPublic { shown: String },
}

/// The host of `url` as written, the same without an IPv6 literal's brackets, and its port.
fn target(url: &str) -> Result<(String, String, u16), Unreachable> {
    let parsed = reqwest::Url::parse(url).map_err(|_| Unreachable::BadUrl(url.to_owned()))?;
    let host = parsed.host_str().ok_or_else(|| Unreachable::BadUrl(url.to_owned()))?;
    let port = parsed.port_or_known_default().unwrap_or(443);
    // `host_str` keeps the brackets of an IPv6 literal.
    let bare = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    Ok((host.to_owned(), bare, port))
}

/// Checks `url` under `reach` without resolving a name: a valid URL whose host, when it is an
/// address, `reach` allows. What can be refused before any connection (a config file read
/// at startup); [`check`] and [`client`] judge names too.
pub fn check_address(url: &str, reach: Reach) -> Result<(), Unreachable> {
    let (host, bare, _) = target(url)?;
    match bare.parse::<IpAddr>() {
        Ok(ip) if reach == Reach::Public && !is_public(ip) => Err(Unreachable::NotPublic { shown: host }),
        _ => Ok(()),
    }
}

/// Checks that `url` may be reached under `reach`, resolving its host (before connecting, so
/// the caller gets a clear refusal; [`client`] checks again at every connection).
pub async fn check(url: &str, reach: Reach) -> Result<(), Unreachable> {
    if reach == Reach::Any {
        return Ok(());
    }
    let (host, bare, port) = target(url)?;
    let (host, bare) = (host.as_str(), bare.as_str());
    let addresses: Vec<IpAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|err| Unreachable::Unresolved { host: host.to_owned(), reason: err.to_string() })?
            .map(|address| address.ip())
            .collect(),
    };
    match addresses.iter().find(|ip| !is_public(**ip)) {
        Some(&address) if bare == address.to_string() => Err(Unreachable::NotPublic { shown: host.to_owned() }),
        Some(&address) => Err(Unreachable::NotPublic { shown: format!("{host} ({address})") }),
        None if addresses.is_empty() => {
            Err(Unreachable::Unresolved { host: host.to_owned(), reason: "no address".into() })
        }
        None => Ok(()),
    }
}

/// The HTTP client for a server of this reach.
pub fn client(reach: Reach) -> reqwest::Client {
    let builder = crate::tls::http_client();
    let builder = match reach {
        Reach::Any => builder,
        Reach::Public => {
            builder.dns_resolver(Arc::new(PublicOnly)).redirect(reqwest::redirect::Policy::none()).no_proxy()
        }
    };
    // The builder fails only on TLS back-end set-up, which the default client would hit too.
    builder.build().unwrap_or_default()
}

/// A resolver that answers only a name's public addresses, and fails when it has none: no
/// connection of a [`Reach::Public`] client can reach a private address, whatever DNS says
/// by then. (An IP literal never reaches a resolver: [`check`] refuses it.)
struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = all.into_iter().filter(|address| is_public(address.ip())).collect();
            if public.is_empty() {
                return Err(format!("{host} has no public address").into());
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f6_private_loopback_link_local_and_reserved_addresses_are_not_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[tokio::test]
    async fn f6_a_public_reach_refuses_private_literals_and_names_before_connecting() {
        for url in
            ["http://127.0.0.1:9/mcp", "http://[::1]:9/mcp", "http://169.254.169.254/latest", "http://localhost/x"]
        {
            let refused = check(url, Reach::Public).await.unwrap_err();
            assert!(matches!(refused, Unreachable::NotPublic { .. }), "{url}: {refused}");
            assert!(refused.to_string().contains("inline_mcp_private_urls"), "{refused}");
        }
        assert!(check("http://127.0.0.1:9/mcp", Reach::Any).await.is_ok());
        assert!(check("http://1.1.1.1/mcp", Reach::Public).await.is_ok());
    }

    #[tokio::test]
    async fn f6_the_public_resolver_refuses_a_name_with_only_private_addresses() {
        let refused = PublicOnly.resolve("localhost".parse().unwrap()).await;
        assert!(refused.is_err());
    }
}
