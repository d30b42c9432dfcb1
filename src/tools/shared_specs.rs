//! One copy of each tool declaration, however many sessions declare it.
//!
//! Every live session holds the declarations of its tools, and a declaration's JSON Schema is a
//! tree of small allocations: about 4 KB per tool, 20 KB for the five built-ins, a fifth of an
//! idle session's memory (docs/RELIABILITY.md, scenario 5). Sessions almost always declare the
//! same tools, so equal declarations are shared: the first session to declare one stores it,
//! later ones get an `Arc` of it. Entries are weak, so a declaration no session uses any more
//! is freed; dead entries are swept when the table has doubled since the last sweep.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::llm::ToolSpec;

#[derive(Default)]
struct Table {
    specs: HashMap<String, Weak<ToolSpec>>,
    /// The table's size after the last sweep.
    swept_at: usize,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

/// The shared copy of `spec`: an existing equal declaration if one is alive, else `spec`.
pub fn shared(spec: ToolSpec) -> Arc<ToolSpec> {
    // The identity of a declaration: its name, description and schema, serialized.
    let key = format!("{}\u{0}{}\u{0}{}", spec.name, spec.description, spec.input_schema);
    let mut guard = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    let table = guard.get_or_insert_with(Table::default);
    if let Some(existing) = table.specs.get(&key).and_then(Weak::upgrade) {
        return existing;
    }
    let spec = Arc::new(spec);
    table.specs.insert(key, Arc::downgrade(&spec));
    if table.specs.len() >= 2 * table.swept_at.max(32) {
        table.specs.retain(|_, weak| weak.strong_count() > 0);
        table.swept_at = table.specs.len();
    }
    spec
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(name: &str, schema: serde_json::Value) -> ToolSpec {
        ToolSpec { name: name.into(), description: "d".into(), input_schema: schema }
    }

    #[test]
    fn equal_declarations_share_one_copy_and_different_ones_do_not() {
        let a = shared(spec("shared_specs_a", json!({"type": "object"})));
        let again = shared(spec("shared_specs_a", json!({"type": "object"})));
        assert!(Arc::ptr_eq(&a, &again));
        let other_schema = shared(spec("shared_specs_a", json!({"type": "object", "required": ["x"]})));
        assert!(!Arc::ptr_eq(&a, &other_schema));
        assert_eq!(other_schema.input_schema, json!({"type": "object", "required": ["x"]}));
    }

    #[test]
    fn a_declaration_no_session_holds_is_freed() {
        let weak = Arc::downgrade(&shared(spec("shared_specs_b", json!({}))));
        assert!(weak.upgrade().is_none());
        let fresh = shared(spec("shared_specs_b", json!({})));
        assert_eq!(fresh.name, "shared_specs_b");
    }
}
