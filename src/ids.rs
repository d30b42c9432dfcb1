//! Identifier newtypes, so a session id is never confused with any other string.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What every text-backed id has beyond how a new one is made: it wraps a caller-supplied id
/// as it is (an unknown id is answered with `*_NOT_FOUND` later, so nothing is validated
/// here), reads as text, and a default one is a new one.
macro_rules! text_id {
    ($name:ident) => {
        impl $name {
            pub fn from_string(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

/// A session's id: a UUID v4 in its hyphenated text form on every wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    pub fn new() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }
}

text_id!(SessionId);

/// A message's id in a session inbox: `m-` and a UUID v4, so it is never taken for a session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct MessageId(String);

impl MessageId {
    pub fn new() -> Self {
        Self(format!("m-{}", uuid::Uuid::new_v4()))
    }
}

text_id!(MessageId);
