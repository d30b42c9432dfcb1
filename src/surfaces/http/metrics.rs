//! `GET /metrics`: the process's Prometheus metrics, for operators (the admin scope, or anyone
//! on a loopback server without tokens). The session layer decides who may read them; this
//! only translates.

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::api_error::ApiError;
use crate::caller::Caller;
use crate::session::{CallerServices, SessionService};
use crate::telemetry::metrics::{CONTENT_TYPE, metrics};

pub async fn scrape<P: CallerServices>(
    State(services): State<Arc<P>>,
    Extension(caller): Extension<Caller>,
) -> Response {
    match services.for_caller(&caller).gauges().await {
        Ok(gauges) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics().render(gauges)).into_response(),
        Err(error) => ApiError::from(error).into_response(),
    }
}
