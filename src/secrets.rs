//! [`Secret`]: a string deputy must use but never show — the `env` values and `headers` values
//! of MCP servers (security review F9).
//!
//! Redacted by default: its `Debug`, `Display` and `Serialize` print [`REDACTED`], so a spec
//! that reaches a log line, an error or any rendered JSON shows the variable or header *names*
//! and never their values. The value itself is read only through [`Secret::expose`], where it
//! is handed to a child process or an HTTP client.
//!
//! The one place that serializes the real value is the session store, and it does so sealed:
//! inside [`with_sealer`] a `Secret` serializes as `{"sealed": "<sealer output>"}` and
//! deserializes back through the same [`SecretSealer`]. The sealer (the cipher and its key) is
//! the store's; this module only defines the contract, so the crypto stays in the store layer.
//! A plain string still deserializes, so records written before sealing stay readable.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a [`Secret`] shows instead of its value.
pub const REDACTED: &str = "[redacted]";

/// A value that is redacted wherever it is shown; see the module doc.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that uses it (a child's environment, a request header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{REDACTED:?}")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Seals and opens secret values for storage. Implemented by the session store, which owns
/// the key; errors are plain messages (they never contain the value).
pub trait SecretSealer: Send + Sync {
    fn seal(&self, plaintext: &str) -> Result<String, String>;
    fn open(&self, sealed: &str) -> Result<String, String>;
}

thread_local! {
    /// The sealer of the [`with_sealer`] call running on this thread, if any.
    static SEALER: RefCell<Option<Arc<dyn SecretSealer>>> = const { RefCell::new(None) };
}

/// Runs `work` (a synchronous encode or decode) with `sealer` in effect on this thread: every
/// [`Secret`] serialized inside is sealed, every sealed one deserialized inside is opened.
pub fn with_sealer<R>(sealer: Arc<dyn SecretSealer>, work: impl FnOnce() -> R) -> R {
    /// Restores the previous sealer, even if `work` panics.
    struct Restore(Option<Arc<dyn SecretSealer>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            SEALER.with(|cell| *cell.borrow_mut() = previous);
        }
    }
    let previous = SEALER.with(|cell| cell.borrow_mut().replace(sealer));
    let _restore = Restore(previous);
    work()
}

fn current_sealer() -> Option<Arc<dyn SecretSealer>> {
    SEALER.with(|cell| cell.borrow().clone())
}

/// The stored form of a sealed value; a plain string is never one, so the two cannot be
/// confused.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sealed {
    sealed: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    Plain(String),
    Sealed(Sealed),
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match current_sealer() {
            Some(sealer) => {
                let sealed = sealer.seal(&self.0).map_err(S::Error::custom)?;
                Sealed { sealed }.serialize(serializer)
            }
            None => serializer.serialize_str(REDACTED),
        }
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Stored::deserialize(deserializer)? {
            Stored::Plain(value) => Ok(Self(value)),
            Stored::Sealed(Sealed { sealed }) => {
                let Some(sealer) = current_sealer() else {
                    return Err(D::Error::custom("a sealed value can only be read by the session store"));
                };
                sealer.open(&sealed).map(Self).map_err(D::Error::custom)
            }
        }
    }
}

/// Its schema is a string's: callers send plain values.
impl JsonSchema for Secret {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        String::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Reverses the string: enough to tell sealed from plain.
    struct Reverse;
    impl SecretSealer for Reverse {
        fn seal(&self, plaintext: &str) -> Result<String, String> {
            Ok(plaintext.chars().rev().collect())
        }
        fn open(&self, sealed: &str) -> Result<String, String> {
            Ok(sealed.chars().rev().collect())
        }
    }

    #[test]
    fn secrets_are_redacted_when_shown_and_sealed_only_inside_a_sealer() {
        let env = BTreeMap::from([("API_SECRET".to_owned(), Secret::from("s3cr3t"))]);
        assert_eq!(format!("{env:?}"), r#"{"API_SECRET": "[redacted]"}"#);
        assert_eq!(serde_json::to_string(&env).unwrap(), r#"{"API_SECRET":"[redacted]"}"#);
        assert_eq!(env["API_SECRET"].to_string(), REDACTED);
        assert_eq!(env["API_SECRET"].expose(), "s3cr3t");

        let sealer: Arc<dyn SecretSealer> = Arc::new(Reverse);
        let stored = with_sealer(sealer.clone(), || serde_json::to_string(&env).unwrap());
        assert_eq!(stored, r#"{"API_SECRET":{"sealed":"t3rc3s"}}"#);
        let back: BTreeMap<String, Secret> = with_sealer(sealer, || serde_json::from_str(&stored).unwrap());
        assert_eq!(back, env);
        // Outside the store, a sealed value cannot be read; a plain one (an old record, a
        // request) always can.
        assert!(serde_json::from_str::<Secret>(r#"{"sealed":"t3rc3s"}"#).is_err());
        assert_eq!(serde_json::from_str::<Secret>(r#""plain""#).unwrap().expose(), "plain");
        assert!(current_sealer().is_none(), "the sealer is scoped to its call");
    }
}
