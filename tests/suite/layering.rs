//! The layers of `src/` point one way: a module may name only modules of a lower layer.
//!
//! Every top-level module has a rank (below). A path in code — `crate::x`, `super::…::x`
//! climbing out of its module, or a `use crate::{x, y}` group — that names a module of the same
//! or a higher rank, other than its own, is a back-edge and fails this test with the file and
//! line. Comments and doc links are ignored: prose may mention any layer. A new top-level
//! module fails the test until it is given a rank, so the decision is made once, here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Top-level modules from the bottom up. Modules on one line share a layer and may not name
/// each other: they are independent.
const LAYERS: &[&[&str]] = &[
    &["tls", "allocator", "mcp_transport"],
    &["ids", "text", "secrets", "catalog", "telemetry"],
    &["error"],
    &["caller"],
    &["policy"],
    &["llm"],
    &["sandbox", "skills", "retrieval"],
    &["tools"],
    &["hooks", "peers"],
    &["model"],
    &["store", "profiles"],
    &["memory", "webhooks"],
    &["agent"],
    &["session"],
    &["config"],
    &["surfaces"],
    &["server"],
    &["background"],
    &["cli"],
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

#[test]
fn no_module_names_a_layer_above_or_beside_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect_rs(&src, &mut files);
    assert!(files.len() > 20, "found only {} files under {}", files.len(), src.display());

    let mut unranked = BTreeSet::new();
    let mut back_edges = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let module_path = module_path(relative);
        let Some(own) = module_path.first().cloned() else { continue }; // lib.rs, main.rs
        let Some(own_rank) = rank(&own) else {
            unranked.insert(own);
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let code: String = lines.iter().map(|line| format!("{}\n", strip_comment(line))).collect();
        for (offset, named) in named_top_modules(&code, &module_path) {
            if named == own {
                continue;
            }
            match rank(&named) {
                Some(named_rank) if named_rank < own_rank => {}
                Some(_) => {
                    let number = code[..offset].matches('\n').count();
                    back_edges.push(format!(
                        "{}:{}: `{own}` names `{named}`: {}",
                        relative.display(),
                        number + 1,
                        lines[number].trim()
                    ));
                }
                None => {
                    unranked.insert(named);
                }
            }
        }
    }
    assert!(unranked.is_empty(), "give these top-level modules a layer in tests/suite/layering.rs: {unranked:?}");
    assert!(back_edges.is_empty(), "layer back-edges:\n{}", back_edges.join("\n"));
}

#[test]
fn the_checker_sees_every_way_of_naming_a_module() {
    let store = vec!["store".to_owned(), "redb_store".to_owned()];
    let names =
        |code: &str| -> Vec<String> { named_top_modules(code, &store).into_iter().map(|(_, name)| name).collect() };
    assert_eq!(names("use crate::session::LiveSessionService;"), ["session"]);
    assert_eq!(names("use crate::{agent::Agent, error::X};"), ["agent", "error"]);
    assert_eq!(names("use crate::{\n    agent::{Agent, B},\n    error::X,\n};"), ["agent", "error"]);
    assert_eq!(names("let x = crate::surfaces::wire::f();"), ["surfaces"]);
    assert_eq!(names("use super::super::session::X;"), ["session"]);
    assert_eq!(names("use super::tables::X;"), ["store"]);
    assert_eq!(names("let my_crate::session = 1;"), Vec::<String>::new());
    assert!(names(strip_comment("x(); // see crate::session")).is_empty());
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are module `a::b`; `src/a/mod.rs` is `a`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" && stem != "main" {
        parts.push(stem.to_owned());
    }
    parts
}

fn strip_comment(line: &str) -> &str {
    line.find("//").map_or(line, |at| &line[..at])
}

/// The top-level modules code names through `crate::` or `super::` paths, in order, each with
/// the byte offset of its path.
fn named_top_modules(code: &str, module_path: &[String]) -> Vec<(usize, String)> {
    let mut named = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let starts_word = at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        if starts_word && rest.starts_with("crate::") {
            let after = &rest["crate::".len()..];
            named.extend(first_segments(after).into_iter().map(|name| (at, name)));
            at += "crate::".len();
        } else if starts_word && rest.starts_with("super::") {
            let mut depth = module_path.len();
            let mut after = rest;
            while let Some(next) = after.strip_prefix("super::") {
                depth = depth.saturating_sub(1);
                after = next;
            }
            if depth == 0 {
                named.extend(first_segments(after).into_iter().map(|name| (at, name)));
            } else {
                named.push((at, module_path[0].clone()));
            }
            at += rest.len() - after.len();
        } else {
            at += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    named
}

/// `x::…` gives `x`; a group `{x::{a, b}, y}` (possibly over several lines) gives `x` and `y`.
fn first_segments(path: &str) -> Vec<String> {
    let identifier = |text: &str| -> String {
        text.trim_start().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
    };
    if let Some(group) = path.strip_prefix('{') {
        // The group's top-level items: split at commas outside nested braces.
        let mut items = Vec::new();
        let mut depth = 0usize;
        let mut start = 0;
        for (index, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    items.push(&group[start..index]);
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&group[start..index]);
                    start = index + 1;
                }
                _ => {}
            }
        }
        items.into_iter().map(identifier).filter(|name| !name.is_empty()).collect()
    } else {
        let name = identifier(path);
        if name.is_empty() { Vec::new() } else { vec![name] }
    }
}

fn collect_rs(dir: &Path, files: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_rs(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}
