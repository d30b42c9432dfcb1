//! The guard in front of every HTTP route but `/healthz`.
//!
//! - **Host** must be an allowed name: a page on another site that rebinds its DNS name to
//!   127.0.0.1 sends its own name as Host and is refused (DNS rebinding).
//! - **Origin**, when present (browsers always send it on cross-origin requests), must match
//!   an allowed origin, or be the server's own (the allowed Host: the inspector's page at
//!   `/ui`); `null` never does.
//! - **Bearer token**, when any is configured (`--token`, `[[auth.tokens]]`), on every request
//!   (the scheme name in any case, as RFC 7235 says); compared in time that depends only on the
//!   configured tokens. The token names the [`Caller`]: `--token` is the local user with every
//!   scope, an `[[auth.tokens]]` entry its subject and scopes. With no token configured
//!   (loopback only), every request is [`Caller::anonymous`]: its own sessions, nothing more.
//!
//! The caller goes into the request's extensions (the handlers hand it to the session layer)
//! and its subject into the request's span.
//!
//! Parsing is strict (security review F17): two Host headers, a Host that is not visible ASCII,
//! or a port that is not a number are refused rather than guessed at, and only a request without
//! any Host header (HTTP/2) falls back to the URI's authority. An allowed origin without a port
//! matches its scheme's default port only; `:*` matches any.
//!
//! Refusals are 401/403 `{code, message}` bodies ([`TransportCode`]); neither tokens nor bodies
//! are logged.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use sha2::{Digest, Sha256};

use super::HttpConfig;
use super::api_error::ApiError;
use crate::caller::Caller;
use crate::config::TokenSecret;
use crate::error::TransportCode;

/// What the guard accepts, prepared once.
#[derive(Debug)]
pub struct Guard {
    /// Every accepted token and its caller; empty: no authentication (anonymous callers).
    tokens: Vec<(TokenSecret, Caller)>,
    hosts: Vec<String>,
    origins: Vec<OriginPattern>,
}

#[derive(Debug, PartialEq, Eq)]
struct OriginPattern {
    scheme: String,
    host: String,
    port: PortPattern,
}

#[derive(Debug, PartialEq, Eq)]
enum PortPattern {
    /// `:*`
    Any,
    /// No port given: the scheme's default port, written or not.
    Default,
    Exactly(u16),
}

impl OriginPattern {
    fn parse(pattern: &str) -> Option<Self> {
        let (scheme, rest) = pattern.split_once("://")?;
        let (host, port) = split_port(rest.trim_end_matches('/'));
        let port = match port {
            Some("*") => PortPattern::Any,
            None => PortPattern::Default,
            Some(port) => PortPattern::Exactly(parse_port(port)?),
        };
        Some(Self { scheme: scheme.to_ascii_lowercase(), host: host.to_ascii_lowercase(), port })
    }

    fn matches(&self, origin: &str) -> bool {
        let Some((scheme, rest)) = origin.split_once("://") else { return false };
        let (host, port) = split_port(rest);
        let port = match port {
            Some(port) => match parse_port(port) {
                Some(port) => Some(port),
                None => return false,
            },
            None => None,
        };
        let default = default_port(&self.scheme);
        let port_matches = match self.port {
            PortPattern::Any => true,
            PortPattern::Default => port.is_none() || port == default,
            PortPattern::Exactly(expected) => {
                port == Some(expected) || (port.is_none() && default == Some(expected))
            }
        };
        scheme.eq_ignore_ascii_case(&self.scheme) && host.eq_ignore_ascii_case(&self.host) && port_matches
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// A port is 1 to 5 digits naming a number up to 65535, nothing else.
fn parse_port(port: &str) -> Option<u16> {
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    port.parse().ok()
}

/// Splits `host:port`, keeping IPv6 brackets (`[::1]:80` → `[::1]`, `80`).
fn split_port(authority: &str) -> (&str, Option<&str>) {
    if let Some(end) = authority.find(']') {
        let (host, rest) = authority.split_at(end + 1);
        return (host, rest.strip_prefix(':'));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    }
}

/// Whether `presented` equals `expected`, in time that depends only on `expected`'s length: it
/// neither stops at the first difference nor early on a length mismatch.
fn constant_time_eq(presented: &[u8], expected: &[u8]) -> bool {
    let mut difference = u8::from(presented.len() != expected.len());
    for (index, byte) in expected.iter().enumerate() {
        difference |= byte ^ presented.get(index).copied().unwrap_or(0);
    }
    difference == 0
}

pub enum Refusal {
    Unauthorized(&'static str),
    Forbidden(&'static str),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (code, message) = match self {
            Self::Unauthorized(message) => (TransportCode::Unauthorized, message),
            Self::Forbidden(message) => (TransportCode::Forbidden, message),
        };
        let mut response = ApiError::refused(code, message).into_response();
        if code == TransportCode::Unauthorized {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl Guard {
    pub fn new(config: &HttpConfig) -> Self {
        let mut hosts: Vec<String> = config.allowed_hosts.iter().map(|host| host.to_ascii_lowercase()).collect();
        // The address deputy listens on is always an acceptable Host.
        hosts.push(config.bind.ip().to_string());
        if config.bind.is_ipv6() {
            hosts.push(format!("[{}]", config.bind.ip()));
        }
        let mut tokens: Vec<(TokenSecret, Caller)> =
            config.token.iter().map(|token| (TokenSecret::Plain(token.clone()), Caller::local())).collect();
        tokens.extend(config.tokens.iter().map(|token| {
            (token.secret.clone(), Caller::new(token.subject.as_str(), token.scopes.iter().copied()))
        }));
        Self {
            tokens,
            hosts,
            origins: config.allowed_origins.iter().filter_map(|origin| OriginPattern::parse(origin)).collect(),
        }
    }

    /// The caller of an acceptable request.
    pub fn check(&self, headers: &HeaderMap, authority: Option<&str>) -> Result<Caller, Refusal> {
        let mut host_headers = headers.get_all(header::HOST).iter();
        let host = match (host_headers.next(), host_headers.next()) {
            (Some(_), Some(_)) => return Err(Refusal::Forbidden("more than one Host header")),
            (Some(value), None) => {
                Some(value.to_str().map_err(|_| Refusal::Forbidden("the Host header is not visible ASCII"))?)
            }
            // HTTP/2 carries the authority in the request line instead.
            (None, _) => authority,
        };
        let Some(host) = host else { return Err(Refusal::Forbidden("a Host header is required")) };
        let (name, port) = split_port(host);
        if port.is_some_and(|port| parse_port(port).is_none()) {
            return Err(Refusal::Forbidden("the Host header's port is not a number"));
        }
        if !self.hosts.iter().any(|allowed| allowed.eq_ignore_ascii_case(name)) {
            return Err(Refusal::Forbidden("Host header is not allowed (add it with --allowed-host)"));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("null");
            // The server's own pages (the inspector) send their origin, the allowed Host.
            let same_origin = origin.split_once("://").is_some_and(|(scheme, authority)| {
                matches!(scheme, "http" | "https") && authority.eq_ignore_ascii_case(host)
            });
            if !same_origin && !self.origins.iter().any(|pattern| pattern.matches(origin)) {
                return Err(Refusal::Forbidden("Origin is not allowed (add it with --allowed-origin)"));
            }
        }
        if self.tokens.is_empty() {
            return Ok(Caller::anonymous());
        }
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split_once(' '))
            .and_then(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer").then_some(token));
        let Some(presented) = presented.map(str::trim) else {
            return Err(Refusal::Unauthorized("a bearer token is required: Authorization: Bearer <token>"));
        };
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        // Every token is compared, so the time taken does not say which one matched.
        let mut found = None;
        for (secret, caller) in &self.tokens {
            let matches = match secret {
                TokenSecret::Plain(token) => constant_time_eq(presented.as_bytes(), token.as_bytes()),
                TokenSecret::Sha256(expected) => constant_time_eq(&digest, expected),
            };
            if matches && found.is_none() {
                found = Some(caller.clone());
            }
        }
        found.ok_or(Refusal::Unauthorized("the bearer token is wrong"))
    }
}

/// The axum middleware.
pub async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let authority = request.uri().authority().map(|authority| authority.as_str().to_owned());
    match guard.check(request.headers(), authority.as_deref()) {
        Ok(caller) => {
            tracing::Span::current().record("subject", tracing::field::display(caller.subject()));
            let mut request = request;
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(refusal) => {
            tracing::info!(path = %request.uri().path(), "refused by the HTTP guard");
            refusal.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn guard(token: Option<&str>) -> Guard {
        let mut config = HttpConfig::new("127.0.0.1:8787".parse().unwrap());
        config.token = token.map(str::to_owned);
        Guard::new(&config)
    }

    #[test]
    fn hosts_and_origins_follow_the_allowlists() {
        let guard = guard(None);
        assert!(guard.check(&headers(&[("host", "127.0.0.1:8787")]), None).is_ok());
        assert!(guard.check(&headers(&[("host", "localhost")]), None).is_ok());
        assert!(guard.check(&headers(&[("host", "[::1]:8787")]), None).is_ok());
        assert!(guard.check(&headers(&[("host", "evil.example:8787")]), None).is_err());
        assert!(guard.check(&HeaderMap::new(), None).is_err());
        let local = [("host", "localhost:8787"), ("origin", "http://localhost:3000")];
        assert!(guard.check(&headers(&local), None).is_ok());
        let foreign = [("host", "localhost:8787"), ("origin", "https://evil.example")];
        assert!(guard.check(&headers(&foreign), None).is_err());
        assert!(guard.check(&headers(&[("host", "localhost"), ("origin", "null")]), None).is_err());
        let same = [("host", "deputy.internal:8787"), ("origin", "http://deputy.internal:8787")];
        let other_port = [("host", "deputy.internal:8787"), ("origin", "http://deputy.internal:9999")];
        let mut internal = HttpConfig::new("0.0.0.0:8787".parse().unwrap());
        internal.allowed_hosts.push("deputy.internal".into());
        let internal = Guard::new(&internal);
        assert!(internal.check(&headers(&same), None).is_ok(), "the server's own page");
        assert!(internal.check(&headers(&other_port), None).is_err());
    }

    #[test]
    fn the_token_is_required_when_set() {
        let guard = guard(Some("0123456789abcdef"));
        let host = ("host", "127.0.0.1");
        assert!(matches!(guard.check(&headers(&[host]), None), Err(Refusal::Unauthorized(_))));
        let wrong = [host, ("authorization", "Bearer 0123456789abcdeX")];
        assert!(matches!(guard.check(&headers(&wrong), None), Err(Refusal::Unauthorized(_))));
        let right = [host, ("authorization", "Bearer 0123456789abcdef")];
        assert!(guard.check(&headers(&right), None).is_ok());
    }

    #[test]
    fn f8_each_token_names_its_caller_and_no_token_is_anonymous() {
        use crate::caller::Scope;
        use crate::config::{AccessToken, TokenSecret};
        let host = ("host", "127.0.0.1");
        assert_eq!(guard(None).check(&headers(&[host]), None).ok(), Some(Caller::anonymous()));

        let mut config = HttpConfig::new("127.0.0.1:8787".parse().unwrap());
        config.token = Some("0123456789abcdef".into());
        let digest: [u8; 32] = Sha256::digest(b"bob-token-0123456789").into();
        config.tokens = vec![
            AccessToken {
                subject: "alice".into(),
                secret: TokenSecret::Plain("alice-token-0123456789".into()),
                scopes: vec![Scope::Sessions],
            },
            AccessToken { subject: "bob".into(), secret: TokenSecret::Sha256(digest), scopes: vec![Scope::Shell] },
        ];
        let guard = Guard::new(&config);
        let caller = |token: &str| {
            let value = format!("Bearer {token}");
            guard.check(&headers(&[host, ("authorization", &value)]), None).ok()
        };
        assert_eq!(caller("0123456789abcdef"), Some(Caller::local()), "--token: the local user");
        assert_eq!(caller("alice-token-0123456789"), Some(Caller::new("alice", [Scope::Sessions])));
        assert_eq!(caller("bob-token-0123456789"), Some(Caller::new("bob", [Scope::Shell])));
        assert_eq!(caller("carol-token-0123456789"), None);
        assert!(matches!(guard.check(&headers(&[host]), None), Err(Refusal::Unauthorized(_))));
    }

    #[test]
    fn f17_duplicate_or_unreadable_hosts_and_non_numeric_ports_are_refused() {
        let guard = guard(None);
        let mut twice = headers(&[("host", "localhost")]);
        twice.append("host", "evil.example".parse().unwrap());
        assert!(guard.check(&twice, None).is_err());
        let mut unreadable = HeaderMap::new();
        unreadable.insert("host", axum::http::HeaderValue::from_bytes(b"ev\xffil.example").unwrap());
        assert!(guard.check(&unreadable, Some("localhost")).is_err(), "no fallback to the URI when Host is bad");
        assert!(guard.check(&HeaderMap::new(), Some("localhost:8787")).is_ok(), "HTTP/2: the URI authority");
        assert!(guard.check(&headers(&[("host", "localhost:abc")]), None).is_err());
        let dotted = [("host", "localhost"), ("origin", "http://localhost:3000.evil.com")];
        assert!(guard.check(&headers(&dotted), None).is_err());
        let portless = OriginPattern::parse("https://app.example.com").unwrap();
        assert!(portless.matches("https://app.example.com") && portless.matches("https://app.example.com:443"));
        assert!(!portless.matches("https://app.example.com:8443"));
    }

    #[test]
    fn f17_the_bearer_scheme_is_case_insensitive_and_the_comparison_does_not_stop_early() {
        let guard = guard(Some("0123456789abcdef"));
        let host = ("host", "127.0.0.1");
        for scheme in ["Bearer", "bearer", "BEARER"] {
            let value = format!("{scheme} 0123456789abcdef");
            assert!(guard.check(&headers(&[host, ("authorization", &value)]), None).is_ok(), "{scheme}");
        }
        assert!(guard.check(&headers(&[host, ("authorization", "Basic 0123456789abcdef")]), None).is_err());
        assert!(constant_time_eq(b"same", b"same"));
        assert!(!constant_time_eq(b"sam", b"same") && !constant_time_eq(b"samex", b"same"));
        assert!(!constant_time_eq(b"", b"same") && !constant_time_eq(b"same\0", b"same"));
    }

    #[test]
    fn origin_patterns_parse_ports() {
        let pattern = OriginPattern::parse("https://app.example.com:443").unwrap();
        assert!(pattern.matches("https://app.example.com:443"));
        assert!(!pattern.matches("https://app.example.com:8443"));
        assert!(OriginPattern::parse("http://localhost:*").unwrap().matches("http://localhost:5173"));
    }
}
