//! Per-subject shares of what every caller of the listener shares: follow streams
//! ([`super::follow`]) and requests in flight ([`limit_in_flight`]). Security review 2, G8: a
//! subject holding every connection with long polls, streamed turns or follows locked the
//! other tenants out; each subject now holds at most its share, and one more is refused 429
//! at once rather than queued.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::api_error::ApiError;
use crate::caller::Caller;
use crate::error::TransportCode;

/// How many of one thing each subject may hold at once.
#[derive(Debug)]
pub struct Shares {
    per_subject: usize,
    held: Mutex<HashMap<Arc<str>, usize>>,
}

impl Shares {
    pub fn new(per_subject: usize) -> Arc<Self> {
        Arc::new(Self { per_subject: per_subject.max(1), held: Mutex::default() })
    }

    pub fn per_subject(&self) -> usize {
        self.per_subject
    }

    /// One more place for `subject`, held until the [`Share`] drops; `None` when the subject
    /// holds its share already.
    pub fn take(self: &Arc<Self>, subject: Arc<str>) -> Option<Share> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(subject.clone()).or_default();
        if *count >= self.per_subject {
            return None;
        }
        *count += 1;
        Some(Share { shares: self.clone(), subject })
    }
}

/// One place a subject holds; dropping it frees the place.
#[derive(Debug)]
pub struct Share {
    shares: Arc<Shares>,
    subject: Arc<str>,
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self.shares.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.subject) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.subject);
            }
        }
    }
}

/// Requests a subject may have in flight at once, by default: half the default connection
/// cap, so one tenant leaves the other half to the rest.
pub const DEFAULT_MAX_REQUESTS_PER_SUBJECT: usize = super::listener::DEFAULT_MAX_CONNECTIONS / 2;

/// Holds a share of `requests` for each request of an identified caller, from its start until
/// its response body has been sent or dropped (a streamed turn or a follow holds it as long as
/// it streams). One more is answered 429 `TOO_MANY_REQUESTS`.
pub async fn limit_in_flight(State(requests): State<Arc<Shares>>, request: Request, next: Next) -> Response {
    let Some(subject) = request.extensions().get::<Caller>().map(Caller::subject_arc) else {
        return next.run(request).await;
    };
    let Some(share) = requests.take(subject) else {
        let message = format!(
            "this caller has {} requests in flight already (--max-requests-per-subject): wait for one to end",
            requests.per_subject()
        );
        return ApiError::refused(TransportCode::TooManyRequests, message).into_response();
    };
    let (parts, body) = next.run(request).await.into_parts();
    Response::from_parts(parts, Body::new(Holding { body, _share: share }))
}

/// A response body that holds its request's share until it is done.
struct Holding {
    body: Body,
    _share: Share,
}

impl HttpBody for Holding {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_holds_at_most_its_share_and_a_dropped_share_frees_its_place() {
        let shares = Shares::new(2);
        let (alice, bob): (Arc<str>, Arc<str>) = ("alice".into(), "bob".into());
        let first = shares.take(alice.clone()).unwrap();
        let _second = shares.take(alice.clone()).unwrap();
        assert!(shares.take(alice.clone()).is_none());
        assert!(shares.take(bob).is_some(), "another subject's share is its own");
        drop(first);
        assert!(shares.take(alice).is_some());
    }
}
