//! How the REST surface answers an error: the status of the error table and the same
//! `{code, message, session_id?}` body as every other surface. The transport's own refusals
//! (the guard's 401/403, an unknown route's 404/405) use it too, with a [`TransportCode`].
//!
//! axum's own rejections (bad JSON, wrong content type, a query that does not parse) answer
//! plain text by default; they are turned into `INVALID_REQUEST` bodies here, so a REST client
//! only ever has one error shape to read.

use axum::Json;
use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::error::{SessionError, TransportCode};
use crate::surfaces::wire::ErrorBody;

/// An error on its way to a REST client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    /// The status of the error table for this error.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn body(&self) -> &ErrorBody {
        &self.body
    }

    /// A refusal of the transport itself (the guard, an unknown route), with its own code.
    pub fn refused(code: TransportCode, message: impl Into<String>) -> Self {
        let status = StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Self { status, body: ErrorBody::transport(code, message) }
    }

    /// A request axum refused before any handler ran. Its status is kept when it says more
    /// than 400 does (413: the body is over the limit); every other refusal is a 400.
    fn rejected(status: StatusCode, message: String) -> Self {
        let status = if status == StatusCode::PAYLOAD_TOO_LARGE { status } else { StatusCode::BAD_REQUEST };
        let error = SessionError::invalid(message);
        Self { status, body: ErrorBody::from(&error) }
    }
}

impl From<SessionError> for ApiError {
    fn from(error: SessionError) -> Self {
        let status = StatusCode::from_u16(error.code().http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Self { status, body: ErrorBody::from(&error) }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        Self::rejected(rejection.status(), rejection.body_text())
    }
}

impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        Self::rejected(rejection.status(), rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::rejected(rejection.status(), rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        Self::rejected(rejection.status(), rejection.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::ids::SessionId;

    #[test]
    fn every_session_error_gets_the_status_of_the_table() {
        let id = SessionId::new();
        for error in [
            SessionError::not_found(id.clone()),
            SessionError::Busy(id.clone()),
            SessionError::PersistenceDisabled("x".into()),
            SessionError::CompactionDisabled("x".into()),
            SessionError::NotRunning(id.clone()),
            SessionError::store("x"),
            SessionError::agent(Some(id.clone()), crate::error::ErrorKind::Internal, "x"),
            SessionError::invalid("x"),
        ] {
            let code: ErrorCode = error.code();
            let api = ApiError::from(error);
            assert_eq!(api.status().as_u16(), code.http_status());
            assert_eq!(api.body().code, code.as_str());
        }
    }

    #[test]
    fn transport_refusals_get_their_status_and_no_session() {
        for code in TransportCode::ALL {
            let api = ApiError::refused(code, "no");
            assert_eq!(api.status().as_u16(), code.http_status());
            assert_eq!(
                api.body(),
                &ErrorBody { code: code.as_str().into(), message: "no".into(), session_id: None, error_kind: None }
            );
        }
    }
}
