//! Globs over relative paths, as the `search` tool and document collections take them: `**/`
//! any directories, `*` and `?` within one path segment. A glob without `/` matches the file
//! name, one with `/` the whole relative path.

use std::path::Path;

use regex::Regex;

/// A compiled glob.
#[derive(Debug, Clone)]
pub struct Glob {
    regex: Regex,
    /// Whether it matches the whole relative path (it contains `/`) or only the name.
    whole_path: bool,
}

impl Glob {
    pub fn new(glob: &str) -> Result<Self, regex::Error> {
        let mut out = String::from("^");
        let mut chars = glob.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '*' if chars.peek() == Some(&'*') => {
                    chars.next();
                    if chars.peek() == Some(&'/') {
                        chars.next();
                        out.push_str("(?:.*/)?");
                    } else {
                        out.push_str(".*");
                    }
                }
                '*' => out.push_str("[^/]*"),
                '?' => out.push_str("[^/]"),
                other => out.push_str(&regex::escape(&other.to_string())),
            }
        }
        out.push('$');
        Ok(Self { regex: Regex::new(&out)?, whole_path: glob.contains('/') })
    }

    /// Whether `relative` (a path below the walk's root) matches.
    pub fn matches(&self, relative: &Path) -> bool {
        let subject = if self.whole_path { relative.as_os_str() } else { relative.file_name().unwrap_or_default() };
        self.regex.is_match(&subject.to_string_lossy())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names_or_whole_paths() {
        let name = Glob::new("*.rs").unwrap();
        assert!(name.matches(Path::new("src/main.rs")) && !name.matches(Path::new("main.rs.bak")));
        let path = Glob::new("src/**/*.toml").unwrap();
        assert!(path.matches(Path::new("src/a.toml")) && path.matches(Path::new("src/x/y/a.toml")));
        assert!(!path.matches(Path::new("other/a.toml")));
        let any_md = Glob::new("**/*.md").unwrap();
        assert!(any_md.matches(Path::new("README.md")) && any_md.matches(Path::new("docs/a/b.md")));
        let one = Glob::new("a?.txt").unwrap();
        assert!(one.matches(Path::new("ab.txt")) && !one.matches(Path::new("a/.txt")));
    }
}
