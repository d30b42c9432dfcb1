//! The checked-in `schemas/` must match the tool types; regenerate with
//! `cargo run -- schemas --out schemas`.

use std::path::Path;

#[test]
fn checked_in_schemas_match_the_tool_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
    let expected = deputy::surfaces::schemas::schema_files();
    let mut stale = Vec::new();
    for (name, contents) in &expected {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(on_disk) if &on_disk == contents => {}
            _ => stale.push(name.clone()),
        }
    }
    let on_disk = std::fs::read_dir(&dir).map(|entries| entries.count()).unwrap_or(0);
    assert!(
        stale.is_empty() && on_disk == expected.len(),
        "schemas/ is stale ({stale:?}, {on_disk} files for {} expected): run `cargo run -- schemas --out schemas`",
        expected.len()
    );
}
