//! `deputy memory list|search|delete`: the caller's memories, and `deputy documents index`:
//! the collections brought up to their files — through the store's owner like every command on
//! stored sessions.

use std::fmt::Write as _;
use std::process::ExitCode;

use serde_json::json;

use super::commands::{print_outcome, to_json};
use super::owner::Owner;
use super::{DocumentsCommand, MemoryCommand};
use crate::model::documents::DocumentsIndexed;
use crate::model::memory::{MemoryDeleted, MemoryList};
use crate::surfaces::operation::memory::Memory;
use crate::text::excerpt;

pub async fn memory(owner: &Owner, command: MemoryCommand) -> ExitCode {
    let outcome = match command {
        MemoryCommand::List { before, limit, json } => owner
            .call_as::<MemoryList>(Memory::MemoryList, json!({"before": before, "limit": limit}), None)
            .await
            .map(|list| if json { to_json(&list) } else { table(&list) }),
        MemoryCommand::Search { query, limit, json } => owner
            .call_as::<MemoryList>(Memory::MemoryList, json!({"query": query, "limit": limit}), None)
            .await
            .map(|list| if json { to_json(&list) } else { table(&list) }),
        MemoryCommand::Delete { id } => owner
            .call_as::<MemoryDeleted>(Memory::MemoryDelete, json!({"memory_id": id}), None)
            .await
            .map(|done| if done.deleted { format!("deleted memory {id}\n") } else { format!("no memory {id}\n") }),
    };
    print_outcome(outcome)
}

pub async fn documents(owner: &Owner, command: DocumentsCommand) -> ExitCode {
    let DocumentsCommand::Index { collection } = command;
    let outcome = owner
        .call_as::<DocumentsIndexed>(Memory::DocumentsIndex, json!({"collection": collection}), None)
        .await
        .map(|indexed| {
            let mut out = String::new();
            if indexed.collections.is_empty() {
                out.push_str("no document collections ([documents.NAME] in the config file)\n");
            }
            for collection in &indexed.collections {
                let _ = writeln!(
                    out,
                    "{}: {} files, {} indexed again ({} chunks), {} removed",
                    collection.name, collection.files, collection.indexed, collection.chunks, collection.removed
                );
            }
            if let Some(spent) = &indexed.embeddings {
                let cost = spent.cost_usd.map(|usd| format!(", ${usd:.4}")).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "embeddings ({}) since the server started: {} calls, {} tokens{cost}",
                    spent.model, spent.calls, spent.tokens
                );
            }
            out
        });
    print_outcome(outcome)
}

/// One line per memory: id, kind, where it came from, when, and the start of its text.
fn table(list: &MemoryList) -> String {
    let mut out = String::new();
    if list.memories.is_empty() {
        out.push_str("no memories\n");
    }
    for entry in &list.memories {
        let memory = &entry.record;
        let score = entry.score.map(|score| format!(" score {score:.2}")).unwrap_or_default();
        let text = excerpt(&memory.text.replace('\n', " "), 100);
        let _ = writeln!(
            out,
            "{:>6}  {:<10}  {} turn {}  {}{score}\n        {text}",
            memory.id,
            memory.kind.as_str(),
            memory.session_id,
            memory.turn,
            memory.at.format("%Y-%m-%d %H:%M"),
        );
    }
    if let Some(before) = list.next_before {
        let _ = writeln!(out, "next page: --before {before}");
    }
    out
}
