//! Cutting text to a size without splitting a character.
//!
//! Tool outputs, matching lines, provider error bodies and the head and tail of a capped output
//! all have to fit a byte (or character) budget, and slicing a `&str` inside a multi-byte
//! character panics. These helpers are the one place that finds the nearest boundary. This
//! module is the bottom layer: it depends on nothing else in the crate. [`json`]: free-form
//! fields that also come as JSON text; [`frontmatter`]: Markdown files with YAML frontmatter; [`glob`]: globs over relative paths.

pub mod frontmatter;
pub mod glob;
pub mod json;

/// The longest prefix of `text` that is at most `max_bytes` long and ends on a char boundary.
pub fn truncate_at_char_boundary(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// The longest suffix of `text` that is at most `max_bytes` long and starts on a char boundary:
/// the tail to keep when the middle of a text is elided.
pub fn tail_at_char_boundary(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut start = text.len() - max_bytes;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// At most `max_chars` characters of `text`, ending in `…` when something was cut: a short
/// excerpt for a human reading a message, where characters matter more than bytes.
pub fn excerpt(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_never_splits_a_character() {
        assert_eq!(truncate_at_char_boundary("hello", 10), "hello");
        assert_eq!(truncate_at_char_boundary("hello", 5), "hello");
        assert_eq!(truncate_at_char_boundary("hello", 3), "hel");
        assert_eq!(truncate_at_char_boundary("hello", 0), "");
        // "é" is two bytes: a cut inside it moves back before it.
        assert_eq!(truncate_at_char_boundary("aé", 2), "a");
        assert_eq!(truncate_at_char_boundary("aé", 3), "aé");
        assert_eq!(truncate_at_char_boundary("日本", 5), "日");
        assert_eq!(truncate_at_char_boundary("日本", 2), "");
    }

    #[test]
    fn a_suffix_never_splits_a_character() {
        assert_eq!(tail_at_char_boundary("hello", 10), "hello");
        assert_eq!(tail_at_char_boundary("hello", 2), "lo");
        assert_eq!(tail_at_char_boundary("hello", 0), "");
        // A start inside "é" moves forward past it.
        assert_eq!(tail_at_char_boundary("éa", 2), "a");
        assert_eq!(tail_at_char_boundary("éa", 3), "éa");
        assert_eq!(tail_at_char_boundary("日本", 4), "本");
    }

    #[test]
    fn an_excerpt_counts_characters_and_marks_a_cut() {
        assert_eq!(excerpt("hello", 5), "hello");
        assert_eq!(excerpt("hello", 4), "hell…");
        assert_eq!(excerpt("日本語", 2), "日本…");
        assert_eq!(excerpt("", 0), "");
        assert_eq!(excerpt("a", 0), "…");
    }
}
