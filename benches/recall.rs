//! Recall bench: how well and how fast a document collection answers (issue 27).
//!
//! Run with `cargo bench --bench recall`. Figures are printed, never asserted.
//!
//! The corpus is this repository's own `src/`, `docs/` and README (about 2 MB). The labelled
//! set is built from it: each question is a sentence of the corpus — a `///` or `//!` doc line
//! of the sources, or a prose line of the Markdown — with a third of its words dropped and its
//! order shuffled, and its answer is the chunk that holds the sentence (a hit is any result of
//! that file whose lines cover the sentence's line). So the set measures lexical retrieval
//! (BM25 alone), as deputy ships it without an embeddings model; it says nothing of paraphrases.
//!
//! Printed: recall@1, recall@5 and MRR@10 over the set; index throughput (MB/s) on a cold index;
//! query latency p50/p99 on an index of at least 10,000 chunks (the corpus copied until it has).
//!
//! Environment: `DEPUTY_BENCH_QUESTIONS` (default 400).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use deputy::retrieval::documents::{CollectionSpec, Documents};

struct Question {
    query: String,
    path: String,
    line: usize,
}

fn corpus_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_under(&path, out);
        } else if path.extension().is_some_and(|extension| extension == "rs" || extension == "md") {
            out.push(path);
        }
    }
}

/// Sentences worth asking about: doc lines and prose lines of at least eight words.
fn questions(root: &Path, wanted: usize) -> Vec<Question> {
    let mut files = Vec::new();
    files_under(&root.join("src"), &mut files);
    files_under(&root.join("docs"), &mut files);
    files.push(root.join("README.md"));
    let mut candidates = Vec::new();
    for file in &files {
        let shown = file.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(file).unwrap();
        let prose = shown.ends_with(".md");
        for (index, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            let sentence = if prose {
                (!trimmed.starts_with(['#', '|', '`', '-', '*', '>'])).then_some(trimmed)
            } else {
                trimmed.strip_prefix("///").or_else(|| trimmed.strip_prefix("//!")).map(str::trim)
            };
            let Some(sentence) = sentence else { continue };
            let words: Vec<&str> = sentence.split_whitespace().filter(|word| word.len() > 2).collect();
            if words.len() >= 8 {
                candidates.push((
                    shown.clone(),
                    index + 1,
                    words.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
                ));
            }
        }
    }
    let mut rng = fastrand::Rng::with_seed(27);
    rng.shuffle(&mut candidates);
    candidates
        .into_iter()
        .take(wanted)
        .map(|(path, line, mut words)| {
            // A third of the words dropped, the rest shuffled: not the sentence as written.
            let keep = words.len() - words.len() / 3;
            rng.shuffle(&mut words);
            words.truncate(keep);
            Question { query: words.join(" "), path, line }
        })
        .collect()
}

fn spec(name: &str, paths: Vec<(PathBuf, PathBuf)>) -> CollectionSpec {
    CollectionSpec { name: name.to_owned(), paths, glob: None }
}

fn corpus_paths(root: &Path, prefix: &Path) -> Vec<(PathBuf, PathBuf)> {
    ["src", "docs", "README.md"].iter().map(|name| (root.join(name), prefix.join(name))).collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let wanted: usize = std::env::var("DEPUTY_BENCH_QUESTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    let root = corpus_root();
    let questions = questions(&root, wanted);

    // Quality and index throughput: the corpus once, a cold index on disk.
    let dir = tempfile::tempdir().unwrap();
    let documents =
        Documents::new(vec![spec("corpus", corpus_paths(&root, Path::new("")))], Some(dir.path().to_owned()))
            .unwrap();
    let started = Instant::now();
    let report = documents.index(None).unwrap();
    let took = started.elapsed();
    let (_, indexed) = &report[0];
    let mb = indexed.bytes as f64 / 1e6;
    println!(
        "corpus: {} files, {:.2} MB, {} chunks; cold index in {:.2} s: {:.1} MB/s",
        indexed.files,
        mb,
        indexed.chunks,
        took.as_secs_f64(),
        mb / took.as_secs_f64()
    );
    let started = Instant::now();
    let again = documents.index(None).unwrap();
    println!(
        "warm refresh (nothing changed): {:.1} ms, {} files indexed again",
        started.elapsed().as_secs_f64() * 1e3,
        again[0].1.indexed
    );

    let (mut at1, mut at5, mut reciprocal) = (0usize, 0usize, 0f64);
    for question in &questions {
        let hits = documents.search(None, None, &question.query, 10).unwrap();
        let rank = hits.iter().position(|hit| {
            hit.path == question.path && hit.start_line <= question.line && question.line <= hit.end_line
        });
        if let Some(rank) = rank {
            at1 += usize::from(rank == 0);
            at5 += usize::from(rank < 5);
            reciprocal += 1.0 / (rank as f64 + 1.0);
        }
    }
    let n = questions.len() as f64;
    println!(
        "labelled set: {} questions; recall@1 {:.3}, recall@5 {:.3}, MRR@10 {:.3} (BM25 alone)",
        questions.len(),
        at1 as f64 / n,
        at5 as f64 / n,
        reciprocal / n
    );

    // Latency at 10,000 chunks or more: copies of the corpus, each its own directory.
    let copies_dir = tempfile::tempdir().unwrap();
    let per_copy = indexed.chunks.max(1);
    let copies = 10_000usize.div_ceil(per_copy);
    let mut paths = Vec::new();
    for copy in 0..copies {
        let base = copies_dir.path().join(format!("copy{copy}"));
        for (source, shown) in corpus_paths(&root, Path::new("")) {
            let target = base.join(&shown);
            copy_tree(&source, &target);
            paths.push((target, PathBuf::from(format!("copy{copy}")).join(shown)));
        }
    }
    let index_dir = tempfile::tempdir().unwrap();
    let large = Documents::new(vec![spec("large", paths)], Some(index_dir.path().to_owned())).unwrap();
    let started = Instant::now();
    let report = large.index(None).unwrap();
    let took = started.elapsed();
    let large_mb = report[0].1.bytes as f64 / 1e6;
    println!(
        "large index: {} copies, {} chunks, {:.1} MB in {:.2} s ({:.1} MB/s)",
        copies,
        report[0].1.chunks,
        large_mb,
        took.as_secs_f64(),
        large_mb / took.as_secs_f64()
    );
    let mut latencies = Vec::new();
    for _ in 0..3 {
        for question in &questions {
            let started = Instant::now();
            let hits = large.search(None, None, &question.query, 5).unwrap();
            latencies.push(started.elapsed());
            std::hint::black_box(hits);
        }
    }
    latencies.sort();
    println!(
        "query latency over {} queries at {} chunks: p50 {:.2} ms, p99 {:.2} ms",
        latencies.len(),
        report[0].1.chunks,
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3
    );
}

fn copy_tree(source: &Path, target: &Path) {
    if source.is_dir() {
        std::fs::create_dir_all(target).unwrap();
        for entry in std::fs::read_dir(source).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &target.join(entry.file_name()));
        }
    } else {
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(source, target).unwrap();
    }
}
