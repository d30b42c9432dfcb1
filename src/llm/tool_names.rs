//! Tool names as the wires take them: at most 64 characters of `[a-zA-Z0-9_-]`, unique.
//!
//! Names reach deputy from MCP servers (`server__tool`, which can be long and hold any
//! character), callers' callbacks and configuration; OpenAI rejects a name over 64 characters
//! and Anthropic's documented limits vary, so both wires get the strictest form. A name that
//! already fits goes out unchanged (nearly all do, so nearly every body is what it always was);
//! any other becomes its first characters, made safe, plus a digest of the whole name, which is
//! deterministic (the same request bytes every time, which the prompt cache needs) and keeps
//! distinct names distinct. A call the model makes by a shortened name is mapped back
//! ([`WireNames::restore`]) before anyone else sees it.

use std::borrow::Cow;
use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::ModelRequest;
use super::structured::FINAL_ANSWER_TOOL;

/// The longest tool name every wire accepts.
pub const MAX_LEN: usize = 64;

/// Hex digits of the digest a shortened name ends with.
const DIGEST_LEN: usize = 8;

fn fits(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_LEN
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

/// `name` as it goes on the wire.
pub fn wire_name(name: &str) -> Cow<'_, str> {
    if fits(name) {
        return Cow::Borrowed(name);
    }
    let digest = Sha256::digest(name.as_bytes());
    let suffix: String = digest.iter().take(DIGEST_LEN / 2).map(|byte| format!("{byte:02x}")).collect();
    let head: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(MAX_LEN - DIGEST_LEN - 1)
        .collect();
    Cow::Owned(format!("{head}_{suffix}"))
}

/// The names a request declares that go out shortened, by their wire form; empty (and
/// allocation-free) in the usual case where every name fits.
#[derive(Debug, Clone, Default)]
pub struct WireNames {
    renamed: HashMap<String, String>,
}

impl WireNames {
    pub fn of(request: &ModelRequest) -> Self {
        let mut renamed = HashMap::new();
        let declared = request.tools.iter().map(|spec| spec.name.as_str()).chain([FINAL_ANSWER_TOOL]);
        let named = request.messages.iter().flat_map(|message| &message.content).filter_map(|block| match block {
            super::ContentBlock::ToolUse { name, .. } => Some(name.as_str()),
            _ => None,
        });
        for name in declared.chain(named) {
            if let Cow::Owned(wire) = wire_name(name) {
                renamed.insert(wire, name.to_owned());
            }
        }
        Self { renamed }
    }

    /// The tool's own name for a name the model used.
    pub fn restore(&self, name: String) -> String {
        match self.renamed.get(&name) {
            Some(original) => original.clone(),
            None => name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_fits_goes_out_unchanged() {
        assert!(matches!(wire_name("read_file"), Cow::Borrowed("read_file")));
        assert!(matches!(wire_name(&"a".repeat(64)), Cow::Borrowed(_)));
    }

    #[test]
    fn long_or_unsafe_names_are_shortened_deterministically_and_stay_distinct() {
        let long_a = format!("server__{}", "x".repeat(80));
        let long_b = format!("server__{}y", "x".repeat(80));
        let (a, b) = (wire_name(&long_a), wire_name(&long_b));
        assert_eq!(a.len(), MAX_LEN);
        assert!(fits(&a) && fits(&b));
        assert_ne!(a, b, "names alike in their first 55 characters stay apart");
        assert_eq!(wire_name(&long_a), a, "the same name, the same bytes");
        let dotted = wire_name("fs.read");
        assert!(fits(&dotted) && dotted != "fs_read", "a sanitized name cannot take another's place");
    }
}
