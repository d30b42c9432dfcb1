//! One copy of each tool declaration, however many sessions declare it.
//!
//! Every live session holds the declarations of its tools, and a declaration's JSON Schema is a
//! tree of small allocations: about 4 KB per tool, 20 KB for the five built-ins, a fifth of an
//! idle session's memory (docs/RELIABILITY.md, scenario 5). Sessions almost always declare the
//! same tools, so equal declarations are shared: the first session to declare one stores it,
//! later ones get an `Arc` of it. Entries are weak, so a declaration no session uses any more
//! is freed; dead entries are swept when the table has doubled since the last sweep.
//!
//! A typed tool's declaration is fixed by its type and its description, so those are a key of
//! their own ([`shared_typed`]): a session created or woken from hibernation finds its
//! built-ins' declarations there without generating their schemas again (schemars, then the
//! serialized key above, were 8% of the hibernation scenario's CPU).

use std::any::TypeId;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::llm::ToolSpec;

/// Weak entries by key, swept of dead ones when the map has doubled since the last sweep.
struct Entries<K> {
    specs: HashMap<K, Weak<ToolSpec>>,
    /// The map's size after the last sweep.
    swept_at: usize,
}

impl<K: Hash + Eq> Entries<K> {
    fn new() -> Self {
        Self { specs: HashMap::new(), swept_at: 0 }
    }

    fn get(&self, key: &K) -> Option<Arc<ToolSpec>> {
        self.specs.get(key).and_then(Weak::upgrade)
    }

    fn insert(&mut self, key: K, spec: &Arc<ToolSpec>) {
        self.specs.insert(key, Arc::downgrade(spec));
        if self.specs.len() >= 2 * self.swept_at.max(32) {
            self.specs.retain(|_, weak| weak.strong_count() > 0);
            self.swept_at = self.specs.len();
        }
    }
}

/// Declarations by their serialized form.
static BY_CONTENT: Mutex<Option<Entries<String>>> = Mutex::new(None);
/// Typed tools' declarations by the tool's type and description.
static BY_TYPE: Mutex<Option<Entries<(TypeId, String)>>> = Mutex::new(None);
/// The last declaration of each typed tool, held even while no session holds it: a server
/// whose sessions come and go one at a time (a single user's) would otherwise generate the
/// built-ins' schemas again for each: 7% of the CPU samples of the load bench's one-at-a-time
/// run, which archives each session before the next. One per type, so bounded however many
/// descriptions the configuration makes.
static LAST_BY_TYPE: Mutex<Option<HashMap<TypeId, Arc<ToolSpec>>>> = Mutex::new(None);

fn lock<K: Hash + Eq>(table: &Mutex<Option<Entries<K>>>) -> MutexGuard<'_, Option<Entries<K>>> {
    // Nothing panics while the lock is held; a poisoned lock still holds a whole map.
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The shared copy of `spec`: an existing equal declaration if one is alive, else `spec`.
pub fn shared(spec: ToolSpec) -> Arc<ToolSpec> {
    // The identity of a declaration: its name, description and schema, serialized.
    let key = format!("{}\u{0}{}\u{0}{}", spec.name, spec.description, spec.input_schema.json().get());
    let mut guard = lock(&BY_CONTENT);
    let table = guard.get_or_insert_with(Entries::new);
    if let Some(existing) = table.get(&key) {
        return existing;
    }
    let spec = Arc::new(spec);
    table.insert(key, &spec);
    spec
}

/// The shared declaration of the typed tool `tool` (its type) described as `description`:
/// the one alive if there is one, else `declare(description)` made shared.
pub fn shared_typed(tool: TypeId, description: String, declare: impl FnOnce(String) -> ToolSpec) -> Arc<ToolSpec> {
    let key = (tool, description);
    let found = lock(&BY_TYPE).as_ref().and_then(|table| table.get(&key));
    let spec = found.unwrap_or_else(|| {
        // Built outside the lock: generating a schema takes a while, and two sessions
        // building the same one at once end with one shared copy anyway.
        let spec = shared(declare(key.1.clone()));
        lock(&BY_TYPE).get_or_insert_with(Entries::new).insert(key, &spec);
        spec
    });
    let mut last = LAST_BY_TYPE.lock().unwrap_or_else(PoisonError::into_inner);
    last.get_or_insert_with(HashMap::new).insert(tool, spec.clone());
    spec
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(name: &str, schema: serde_json::Value) -> ToolSpec {
        ToolSpec { name: name.into(), description: "d".into(), input_schema: schema.into() }
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

    #[test]
    fn a_typed_declaration_is_built_once_per_type_and_description() {
        struct Probe;
        let built = std::cell::Cell::new(0);
        let declare = |description: String| {
            built.set(built.get() + 1);
            ToolSpec { name: "shared_specs_c".into(), description, input_schema: json!({"type": "object"}).into() }
        };
        let first = shared_typed(TypeId::of::<Probe>(), "d".into(), declare);
        let again = shared_typed(TypeId::of::<Probe>(), "d".into(), declare);
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(built.get(), 1, "the second look-up builds nothing");
        drop((first, again));
        let kept = shared_typed(TypeId::of::<Probe>(), "d".into(), declare);
        assert_eq!(built.get(), 1, "the type's last declaration is kept while nothing holds it");
        let described_otherwise = shared_typed(TypeId::of::<Probe>(), "e".into(), declare);
        assert_eq!((described_otherwise.description.as_str(), built.get()), ("e", 2));
        drop((kept, described_otherwise));
        let rebuilt = shared_typed(TypeId::of::<Probe>(), "d".into(), declare);
        assert_eq!((rebuilt.description.as_str(), built.get()), ("d", 3), "a replaced and freed one is built anew");
    }
}
