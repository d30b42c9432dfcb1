//! REST under `/v1` (in progress).

use std::sync::Arc;

use axum::Router;

use crate::session::SessionService;

pub fn router<S: SessionService>(_service: Arc<S>) -> Router<Arc<S>> {
    Router::new()
}
