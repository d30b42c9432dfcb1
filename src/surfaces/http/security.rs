//! The guard in front of every HTTP route but `/healthz`.
//!
//! - **Host** must be an allowed name: a page on another site that rebinds its DNS name to
//!   127.0.0.1 sends its own name as Host and is refused (DNS rebinding).
//! - **Origin**, when present (browsers always send it on cross-origin requests), must match
//!   an allowed origin; `null` never does.
//! - **Bearer token**, when configured, on every request; compared in constant time.
//!
//! Refusals are 401/403 `{code, message}` bodies ([`TransportCode`]); neither tokens nor bodies
//! are logged.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::HttpConfig;
use super::api_error::ApiError;
use crate::error::TransportCode;

/// What the guard accepts, prepared once.
#[derive(Debug)]
pub struct Guard {
    token: Option<String>,
    hosts: Vec<String>,
    origins: Vec<OriginPattern>,
}

#[derive(Debug, PartialEq, Eq)]
struct OriginPattern {
    scheme: String,
    host: String,
    /// `None` matches any port.
    port: Option<String>,
}

impl OriginPattern {
    fn parse(pattern: &str) -> Option<Self> {
        let (scheme, rest) = pattern.split_once("://")?;
        let (host, port) = split_port(rest.trim_end_matches('/'));
        let port = match port {
            Some("*") | None => None,
            Some(port) => Some(port.to_owned()),
        };
        Some(Self { scheme: scheme.to_ascii_lowercase(), host: host.to_ascii_lowercase(), port })
    }

    fn matches(&self, origin: &str) -> bool {
        let Some((scheme, rest)) = origin.split_once("://") else { return false };
        let (host, port) = split_port(rest);
        scheme.eq_ignore_ascii_case(&self.scheme)
            && host.eq_ignore_ascii_case(&self.host)
            && self.port.as_deref().is_none_or(|expected| port == Some(expected))
    }
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

/// Compares in time independent of where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
        Self {
            token: config.token.clone(),
            hosts,
            origins: config.allowed_origins.iter().filter_map(|origin| OriginPattern::parse(origin)).collect(),
        }
    }

    pub fn check(&self, headers: &HeaderMap, authority: Option<&str>) -> Result<(), Refusal> {
        let host = headers.get(header::HOST).and_then(|value| value.to_str().ok()).or(authority);
        let Some(host) = host else { return Err(Refusal::Forbidden("a Host header is required")) };
        let (name, _) = split_port(host);
        if !self.hosts.iter().any(|allowed| allowed.eq_ignore_ascii_case(name)) {
            return Err(Refusal::Forbidden("Host header is not allowed (add it with --allowed-host)"));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("null");
            if !self.origins.iter().any(|pattern| pattern.matches(origin)) {
                return Err(Refusal::Forbidden("Origin is not allowed (add it with --allowed-origin)"));
            }
        }
        if let Some(token) = &self.token {
            let presented = headers
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer "));
            match presented {
                None => {
                    return Err(Refusal::Unauthorized("a bearer token is required: Authorization: Bearer <token>"));
                }
                Some(presented) if !constant_time_eq(presented.trim().as_bytes(), token.as_bytes()) => {
                    return Err(Refusal::Unauthorized("the bearer token is wrong"));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// The axum middleware.
pub async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let authority = request.uri().authority().map(|authority| authority.as_str().to_owned());
    match guard.check(request.headers(), authority.as_deref()) {
        Ok(()) => next.run(request).await,
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
    fn origin_patterns_parse_ports() {
        let pattern = OriginPattern::parse("https://app.example.com:443").unwrap();
        assert!(pattern.matches("https://app.example.com:443"));
        assert!(!pattern.matches("https://app.example.com:8443"));
        assert!(OriginPattern::parse("http://localhost:*").unwrap().matches("http://localhost:5173"));
    }
}
