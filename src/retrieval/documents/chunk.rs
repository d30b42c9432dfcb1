//! A file cut into the passages a search answers: about [`CHUNK_BYTES`] (≈ 500 tokens) each,
//! along the file's own structure — Markdown and other prose at headings (a chunk starts with
//! its heading) and paragraphs, code at blank lines — with the last paragraph of one chunk
//! repeated at the start of the next (overlap), so a passage that straddles a cut is whole in
//! one of them. Every chunk knows its lines, and the headings above it (searched with it, so a
//! section's title finds its body).

/// Bytes of one chunk, about 500 tokens.
pub const CHUNK_BYTES: usize = 2_000;
/// A block at most this long is repeated at the start of the next chunk.
const OVERLAP_BYTES: usize = 400;

/// One passage of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub text: String,
    /// 1-based, inclusive.
    pub start_line: usize,
    pub end_line: usize,
    /// The headings above it, outermost first, joined with ` > ` (prose only).
    pub headings: String,
}

/// Whether a file is prose (cut at headings and paragraphs) rather than code.
pub fn is_prose(path: &str) -> bool {
    let extension = path.rsplit_once('.').map(|(_, extension)| extension.to_ascii_lowercase());
    matches!(extension.as_deref(), Some("md" | "markdown" | "mdx" | "txt" | "rst" | "adoc") | None)
}

/// A run of non-blank lines.
struct Block {
    start: usize,
    end: usize,
    text: String,
    heading: Option<(usize, String)>,
}

/// The chunks of `text` (the file at `path`, whose extension says prose or code).
pub fn chunks(path: &str, text: &str) -> Vec<Chunk> {
    let prose = is_prose(path);
    let blocks = blocks(text, prose);
    let mut chunks = Vec::new();
    let mut trail: Vec<(usize, String)> = Vec::new();
    let mut current: Vec<&Block> = Vec::new();
    let mut size = 0;
    for block in &blocks {
        if let Some((level, title)) = &block.heading {
            flush(&mut chunks, &current, &trail);
            current.clear();
            size = 0;
            trail.retain(|(outer, _)| outer < level);
            trail.push((*level, title.clone()));
        } else if size + block.text.len() > CHUNK_BYTES && !current.is_empty() {
            flush(&mut chunks, &current, &trail);
            // Overlap: the last block goes on into the next chunk if it is short.
            let last = current.last().copied().filter(|last| last.text.len() <= OVERLAP_BYTES);
            current.clear();
            size = 0;
            if let Some(last) = last {
                current.push(last);
                size = last.text.len();
            }
        }
        size += block.text.len() + 1;
        current.push(block);
    }
    flush(&mut chunks, &current, &trail);
    chunks
}

fn flush(chunks: &mut Vec<Chunk>, blocks: &[&Block], trail: &[(usize, String)]) {
    let (Some(first), Some(last)) = (blocks.first(), blocks.last()) else { return };
    // A chunk that only repeats the overlap of the one before says nothing new.
    if blocks.len() == 1 && chunks.last().is_some_and(|previous: &Chunk| previous.end_line >= last.end) {
        return;
    }
    let text = blocks.iter().map(|block| block.text.as_str()).collect::<Vec<_>>().join("\n\n");
    let headings = trail.iter().map(|(_, title)| title.as_str()).collect::<Vec<_>>().join(" > ");
    chunks.push(Chunk { text, start_line: first.start, end_line: last.end, headings });
}

/// The file's blocks: runs of non-blank lines, a heading line always a block of its own (in
/// prose), a block longer than a chunk cut at lines.
fn blocks(text: &str, prose: bool) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines: Vec<(usize, &str)> = Vec::new();
    let mut in_fence = false;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if prose && line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        let heading = (prose && !in_fence).then(|| heading_of(line)).flatten();
        if line.trim().is_empty() || heading.is_some() {
            push_block(&mut blocks, &mut lines);
        }
        if let Some(heading) = heading {
            blocks.push(Block { start: number, end: number, text: line.trim().to_owned(), heading: Some(heading) });
        } else if !line.trim().is_empty() {
            lines.push((number, line));
        }
    }
    push_block(&mut blocks, &mut lines);
    blocks
}

fn push_block(blocks: &mut Vec<Block>, lines: &mut Vec<(usize, &str)>) {
    let mut piece: Vec<(usize, &str)> = Vec::new();
    let mut size = 0;
    for &(number, line) in lines.iter() {
        if size + line.len() > CHUNK_BYTES && !piece.is_empty() {
            blocks.push(block_of(&piece));
            piece.clear();
            size = 0;
        }
        size += line.len() + 1;
        piece.push((number, line));
    }
    if !piece.is_empty() {
        blocks.push(block_of(&piece));
    }
    lines.clear();
}

fn block_of(lines: &[(usize, &str)]) -> Block {
    let text = lines.iter().map(|(_, line)| *line).collect::<Vec<_>>().join("\n");
    // A single line longer than a chunk stays whole: it is cut by nothing better.
    Block { start: lines[0].0, end: lines[lines.len() - 1].0, text, heading: None }
}

/// `## Title` → `(2, "Title")`.
fn heading_of(line: &str) -> Option<(usize, String)> {
    let level = line.chars().take_while(|&c| c == '#').count();
    let title = line[level..].strip_prefix(' ')?.trim();
    ((1..=6).contains(&level) && !title.is_empty()).then(|| (level, title.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prose_is_cut_at_headings_with_their_trail_and_lines() {
        let text =
            "# Guide\n\nIntro text.\n\n## Install\n\nRun the installer.\nThen reboot.\n\n## Use\n\nOpen it.\n";
        let chunks = chunks("docs/guide.md", text);
        let summary: Vec<(&str, usize, usize, &str)> =
            chunks.iter().map(|c| (c.text.as_str(), c.start_line, c.end_line, c.headings.as_str())).collect();
        assert_eq!(
            summary,
            [
                ("# Guide\n\nIntro text.", 1, 3, "Guide"),
                ("## Install\n\nRun the installer.\nThen reboot.", 5, 8, "Guide > Install"),
                ("## Use\n\nOpen it.", 10, 12, "Guide > Use"),
            ]
        );
    }

    #[test]
    fn long_sections_are_packed_into_overlapping_chunks_and_code_fences_are_not_headings() {
        let paragraph = |n: usize| format!("Paragraph {n} {}", "word ".repeat(60));
        let mut text = String::from("# Long\n\n```\n# not a heading\n```\n\n");
        for n in 0..20 {
            text.push_str(&paragraph(n));
            text.push_str("\n\n");
        }
        let chunks = chunks("long.md", &text);
        assert!(chunks.len() > 2, "{}", chunks.len());
        assert!(chunks.iter().all(|chunk| chunk.text.len() <= CHUNK_BYTES + OVERLAP_BYTES));
        assert!(chunks.iter().all(|chunk| chunk.headings == "Long"));
        assert!(chunks[0].text.contains("# not a heading"));
        // Each chunk after the first starts with the paragraph the one before ended with.
        let last_of_first = chunks[0].text.rsplit("\n\n").next().unwrap();
        assert!(chunks[1].text.starts_with(last_of_first));
    }

    #[test]
    fn code_is_cut_at_blank_lines() {
        let text = "fn a() {\n    1\n}\n\nfn b() {\n    2\n}\n";
        let chunks = chunks("src/lib.rs", text);
        assert_eq!(chunks.len(), 1, "small blocks share a chunk");
        assert_eq!((chunks[0].start_line, chunks[0].end_line), (1, 7));
        assert!(!is_prose("src/lib.rs") && is_prose("README.md") && is_prose("LICENSE"));
    }
}
