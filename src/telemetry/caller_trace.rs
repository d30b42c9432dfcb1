//! The W3C trace context a caller sent with its request (`traceparent`), carried to the turn
//! the request starts so the caller's trace continues into deputy's spans.
//!
//! The HTTP surface reads the header and runs the request [`within`] it; the session layer,
//! where the request hands a turn to its session's task, takes the [`current`] one along
//! (`TurnInput::trace`). A task-local rather than a parameter: a request reaches a turn
//! through several surfaces and services, none of which has any other use for it.

use std::future::Future;

/// A `traceparent` header value (`version-trace_id-parent_id-flags`), checked for shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent(String);

impl TraceParent {
    /// The header's value, if it has the shape of version 00 of the W3C Trace Context: 32 and
    /// 16 lowercase hex digits, neither all zeros. A malformed header is ignored, as the
    /// specification asks: the request is served, starting a trace of its own.
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.trim().split('-');
        let (version, trace_id, parent_id, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |part: &str, len: usize| {
            part.len() == len && part.bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
        };
        let zeros = |part: &str| part.bytes().all(|byte| byte == b'0');
        let valid = hex(version, 2)
            && version != "ff"
            && hex(trace_id, 32)
            && !zeros(trace_id)
            && hex(parent_id, 16)
            && !zeros(parent_id)
            && hex(flags, 2)
            // Version 00 has exactly four fields; later versions may append more.
            && (version != "00" || parts.next().is_none());
        valid.then(|| Self(value.trim().to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

tokio::task_local! {
    static CALLER_TRACE: Option<TraceParent>;
}

/// Runs `work` as part of the caller's trace `parent` (`None`: the caller sent none).
pub async fn within<F: Future>(parent: Option<TraceParent>, work: F) -> F::Output {
    CALLER_TRACE.scope(parent, work).await
}

/// The trace context of the request being served, if it sent one.
pub fn current() -> Option<TraceParent> {
    CALLER_TRACE.try_with(Clone::clone).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_the_w3c_shape_and_ignores_anything_else() {
        assert_eq!(TraceParent::parse(VALID).map(|parent| parent.as_str().to_owned()), Some(VALID.to_owned()));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
        assert!(TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later").is_some());
    }

    #[tokio::test]
    async fn the_current_trace_is_the_one_the_work_runs_within() {
        assert_eq!(current(), None);
        let parent = TraceParent::parse(VALID);
        assert_eq!(within(parent.clone(), async { current() }).await, parent);
        assert_eq!(current(), None);
    }
}
