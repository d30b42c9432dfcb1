//! TLS to the database, with libpq's `sslmode` meanings, since managed PostgreSQL services hand
//! out URLs written for libpq (`?sslmode=require`, `?sslmode=verify-full&sslrootcert=…`):
//!
//! - `disable`: plain TCP (`allow` is taken as `prefer`).
//! - `prefer` (the default) and `require`: encrypted (`prefer` falls back to plain when the
//!   server offers no TLS), the server's certificate not checked, as libpq does — except that
//!   `require` with an `sslrootcert` file checks the chain as `verify-ca`, libpq's rule too.
//! - `verify-ca`: encrypted, the certificate chaining to a trusted root; `verify-full`: and
//!   naming the host. The roots are `sslrootcert` (a PEM file), or the system's when it is
//!   absent or `system`.
//!
//! tokio-postgres knows only the first three modes, so the URL is read here first: the two
//! verifying modes become `require` for it, and the certificate checks live in the rustls
//! connector every connection of the store is made with (one TLS stack for the whole binary).

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::store::StoreError;

/// How the server's certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// Encrypted, any certificate (`prefer`, `require`, and `disable`, which never uses it).
    Nothing,
    /// Chains to a root (`verify-ca`).
    Chain(Roots),
    /// Chains to a root and names the host (`verify-full`).
    ChainAndName(Roots),
}

/// Where trusted roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    System,
    File(String),
}

/// A database URL read for its TLS settings: what tokio-postgres is given, and the check.
pub(super) struct Connection {
    pub config: tokio_postgres::Config,
    pub tls: MakeRustlsConnect,
}

impl Connection {
    /// Reads `url` (`postgres://…`): its connection settings and its TLS.
    ///
    /// Errors: `Backend`, naming what is wrong (an unknown `sslmode`, an unreadable root file, a
    /// client certificate, which is not supported).
    pub fn from_url(url: &str) -> Result<Self, StoreError> {
        let (plain, check) = split_tls(url)?;
        let config: tokio_postgres::Config =
            plain.parse().map_err(|error| StoreError::Backend(format!("the PostgreSQL URL: {error}")))?;
        Ok(Self { config, tls: connector(&check)? })
    }

    /// `config` as given, with the TLS its `sslmode` means (no certificate check).
    pub fn unverified(config: tokio_postgres::Config) -> Result<Self, StoreError> {
        Ok(Self { config, tls: connector(&Check::Nothing)? })
    }
}

/// The URL without the settings tokio-postgres does not know, and the check they ask for.
fn split_tls(url: &str) -> Result<(String, Check), StoreError> {
    let Some((base, query)) = url.split_once('?') else { return Ok((url.to_owned(), Check::Nothing)) };
    let mut mode = None;
    let mut root_file = None;
    // Kept as written: libpq's URLs percent-decode values but read `+` as itself, so nothing
    // here is decoded and encoded again but the two settings taken out.
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = || percent_encoding::percent_decode_str(value).decode_utf8_lossy().into_owned();
        match key {
            "sslmode" => mode = Some(decoded()),
            "sslrootcert" => root_file = Some(decoded()),
            "sslcert" | "sslkey" => {
                return Err(StoreError::Backend(format!(
                    "the PostgreSQL URL: {key} (a client certificate) is not supported; \
                     authenticate with a password or trust, over sslmode=verify-full"
                )));
            }
            _ => kept.push(pair.to_owned()),
        }
    }
    let root_file = root_file.filter(|file| file != "system");
    let roots = root_file.clone().map_or(Roots::System, Roots::File);
    let (mode, check) = match mode.as_deref() {
        None => (None, Check::Nothing),
        // "If a root CA file exists, the behavior of sslmode=require will be the same as that
        // of verify-ca" (libpq's documentation, 32.19.1).
        Some("require") if root_file.is_some() => (Some("require"), Check::Chain(roots)),
        Some(mode @ ("disable" | "prefer" | "require")) => (Some(mode), Check::Nothing),
        // libpq tries plain TCP first; TLS first is the safer of the two.
        Some("allow") => (Some("prefer"), Check::Nothing),
        Some("verify-ca") => (Some("require"), Check::Chain(roots)),
        Some("verify-full") => (Some("require"), Check::ChainAndName(roots)),
        Some(other) => {
            return Err(StoreError::Backend(format!(
                "the PostgreSQL URL: sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full"
            )));
        }
    };
    if let Some(mode) = mode {
        kept.push(format!("sslmode={mode}"));
    }
    Ok((if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) }, check))
}

/// The rustls connector for `check`, on the process's one crypto provider.
fn connector(check: &Check) -> Result<MakeRustlsConnect, StoreError> {
    let provider = crate::tls::provider();
    let (chain, names_host) = match check {
        Check::Nothing => (None, false),
        Check::Chain(roots) => (Some(webpki(roots, &provider)?), false),
        Check::ChainAndName(roots) => (Some(webpki(roots, &provider)?), true),
    };
    let verifier = Verifier { chain, names_host, provider: provider.clone() };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_failed)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

fn webpki(roots: &Roots, provider: &Arc<CryptoProvider>) -> Result<Arc<WebPkiServerVerifier>, StoreError> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
        }
        Roots::File(file) => {
            let certificates = CertificateDer::pem_file_iter(file)
                .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
                .map_err(|error| {
                    StoreError::Backend(format!("the PostgreSQL URL's sslrootcert {file:?}: {error}"))
                })?;
            store.add_parsable_certificates(certificates);
        }
    }
    if store.is_empty() {
        return Err(StoreError::Backend(format!(
            "the PostgreSQL URL asks to verify the server's certificate, but {} holds no usable root certificate",
            match roots {
                Roots::System => "the system".to_owned(),
                Roots::File(file) => format!("sslrootcert {file:?}"),
            }
        )));
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone()).build().map_err(tls_failed)
}

fn tls_failed(error: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("PostgreSQL TLS: {error}"))
}

/// The server's certificate check for every mode: the handshake's signatures always (the
/// session is encrypted to whoever holds the certificate's key); the chain to the roots when
/// there are roots (`verify-ca`, `verify-full`); the name of the host only for `verify-full`.
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    names_host: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.names_host => Ok(ServerCertVerified::assertion()),
            checked => checked,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signed: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, certificate, signed, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signed: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, certificate, signed, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verifying_modes_become_require_and_their_settings_leave_the_url() {
        let (url, check) =
            split_tls("postgres://u@db/app?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&options=-c%20x%3Dy")
                .unwrap();
        assert_eq!(url, "postgres://u@db/app?options=-c%20x%3Dy&sslmode=require");
        assert_eq!(check, Check::ChainAndName(Roots::File("/etc/ca.pem".into())));
        let (url, check) = split_tls("postgres://u@db/app?sslmode=verify-ca&sslrootcert=system").unwrap();
        assert_eq!((url.as_str(), check), ("postgres://u@db/app?sslmode=require", Check::Chain(Roots::System)));
        // libpq's rule: require with a root file checks the chain; without one, nothing.
        let (url, check) = split_tls("postgres://u@db/app?sslmode=require&sslrootcert=/ca.pem").unwrap();
        assert_eq!(
            (url.as_str(), check),
            ("postgres://u@db/app?sslmode=require", Check::Chain(Roots::File("/ca.pem".into())))
        );
        let (_, check) = split_tls("postgres://u@db/app?sslmode=require").unwrap();
        assert_eq!(check, Check::Nothing);
        let (url, check) = split_tls("postgres://u@db/app?sslmode=disable").unwrap();
        assert_eq!((url.as_str(), check), ("postgres://u@db/app?sslmode=disable", Check::Nothing));
        assert_eq!(split_tls("postgres://u@db/app").unwrap().0, "postgres://u@db/app");
        // tokio-postgres reads what is left.
        let config: tokio_postgres::Config =
            split_tls("postgres://u@db/app?sslmode=verify-full").unwrap().0.parse().unwrap();
        assert_eq!(config.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
    }

    #[test]
    fn an_unknown_mode_or_a_client_certificate_is_a_clear_error() {
        let unknown = split_tls("postgres://u@db/app?sslmode=allow-maybe").unwrap_err().to_string();
        assert!(unknown.contains("sslmode=allow-maybe is not one of disable, allow, prefer"), "{unknown}");
        let client = split_tls("postgres://u@db/app?sslcert=/c.pem&sslkey=/k.pem").unwrap_err().to_string();
        assert!(client.contains("sslcert (a client certificate) is not supported"), "{client}");
        let Err(missing) =
            Connection::from_url("postgres://u@db/app?sslmode=verify-ca&sslrootcert=/nonexistent.pem")
        else {
            panic!("a missing root file is refused")
        };
        let missing = missing.to_string();
        assert!(missing.contains("sslrootcert \"/nonexistent.pem\""), "{missing}");
    }
}
