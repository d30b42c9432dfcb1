//! Which sessions a list shows, beyond whose they are: a status, a label, words of the title.
//!
//! One predicate over a [`SessionSummary`], applied by the live set and by the store alike
//! before paging, so pages, cursors and `total` count only what matches.

use super::view::{SessionStatus, SessionSummary};

/// The filters of one list request; the default lets every session through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFilter {
    pub status: Option<SessionStatus>,
    pub label: Option<LabelFilter>,
    /// Lowercased text the title must contain.
    title: Option<String>,
}

/// A label the session must carry: its key, and its value too where one is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelFilter {
    pub key: String,
    pub value: Option<String>,
}

impl LabelFilter {
    /// `key` or `key=value`, as a query string spells it.
    pub fn parse(text: &str) -> Self {
        match text.split_once('=') {
            Some((key, value)) => Self { key: key.to_owned(), value: Some(value.to_owned()) },
            None => Self { key: text.to_owned(), value: None },
        }
    }
}

impl SessionFilter {
    pub fn new(status: Option<SessionStatus>, label: Option<LabelFilter>, title: Option<&str>) -> Self {
        let title = title.map(str::trim).filter(|words| !words.is_empty()).map(str::to_lowercase);
        Self { status, label, title }
    }

    /// Lets every session through: the list can take the indexes' fast paths.
    pub fn is_empty(&self) -> bool {
        self.status.is_none() && self.label.is_none() && self.title.is_none()
    }

    pub fn matches(&self, summary: &SessionSummary) -> bool {
        self.status.is_none_or(|status| summary.status == status)
            && self.label.as_ref().is_none_or(|label| match summary.labels.get(&label.key) {
                Some(value) => label.value.as_ref().is_none_or(|wanted| wanted == value),
                None => false,
            })
            && self.title.as_ref().is_none_or(|words| summary.title.to_lowercase().contains(words.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn summary(status: SessionStatus, title: &str, labels: &[(&str, &str)]) -> SessionSummary {
        let labels: BTreeMap<String, String> =
            labels.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect();
        let now = chrono::Utc::now();
        SessionSummary {
            session_id: crate::ids::SessionId::from_string("s"),
            status,
            model: "m".to_owned(),
            title: title.to_owned(),
            owner: "alice".to_owned(),
            labels,
            turns: 0,
            cost_usd: None,
            created_at: now,
            updated_at: now,
            host_mode: false,
            name: None,
            parent_id: None,
            depth: 0,
        }
    }

    #[test]
    fn every_given_filter_must_hold() {
        let session = summary(SessionStatus::Idle, "Fix the Parser", &[("team", "core")]);
        assert!(SessionFilter::default().matches(&session));
        assert!(SessionFilter::new(Some(SessionStatus::Idle), None, None).matches(&session));
        assert!(!SessionFilter::new(Some(SessionStatus::Running), None, None).matches(&session));
        assert!(SessionFilter::new(None, Some(LabelFilter::parse("team")), None).matches(&session));
        assert!(SessionFilter::new(None, Some(LabelFilter::parse("team=core")), None).matches(&session));
        assert!(!SessionFilter::new(None, Some(LabelFilter::parse("team=web")), None).matches(&session));
        assert!(!SessionFilter::new(None, Some(LabelFilter::parse("owner")), None).matches(&session));
        assert!(SessionFilter::new(None, None, Some(" the parser ")).matches(&session));
        assert!(!SessionFilter::new(None, None, Some("lexer")).matches(&session));
        let both =
            SessionFilter::new(Some(SessionStatus::Idle), Some(LabelFilter::parse("team=web")), Some("parser"));
        assert!(!both.matches(&session));
    }

    #[test]
    fn blank_words_filter_nothing() {
        assert!(SessionFilter::new(None, None, Some("  ")).is_empty());
    }
}
