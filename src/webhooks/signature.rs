//! Standard Webhooks signatures (<https://www.standardwebhooks.com>): a delivery's
//! `webhook-signature` is `v1,` and the base64 HMAC-SHA256, under the shared secret, of
//! `{webhook-id}.{webhook-timestamp}.{body}`. The secret is base64, optionally prefixed
//! `whsec_`, as the specification's libraries take it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The shortest secret accepted, in bytes once decoded (the specification recommends 24–64).
pub const MIN_SECRET_BYTES: usize = 16;

/// A webhook's signing key. Never printed.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Secret(…)")
    }
}

impl Secret {
    /// `whsec_<base64>` or bare base64, of at least [`MIN_SECRET_BYTES`] bytes.
    pub fn parse(value: &str) -> Result<Self, String> {
        let encoded = value.trim();
        let encoded = encoded.strip_prefix("whsec_").unwrap_or(encoded);
        let key = STANDARD.decode(encoded).map_err(|_| {
            "the secret is not base64 (a Standard Webhooks secret is `whsec_` and base64)".to_owned()
        })?;
        if key.len() < MIN_SECRET_BYTES {
            return Err(format!("the secret is {} bytes; at least {MIN_SECRET_BYTES} are needed", key.len()));
        }
        Ok(Self(key))
    }

    /// The `webhook-signature` header of message `id` sent at `timestamp` (Unix seconds).
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.0) else { unreachable!("HMAC accepts any key") };
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the specification's reference libraries (standard-webhooks, the
    /// `svix` test vector): this secret, id, timestamp and body sign as below.
    #[test]
    fn signs_the_reference_vector() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn refuses_secrets_that_are_not_base64_or_too_short() {
        assert!(Secret::parse("not base64!").is_err());
        assert!(Secret::parse("whsec_c2hvcnQ=").unwrap_err().contains("at least"));
        assert!(format!("{:?}", Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()).contains('…'));
    }
}
