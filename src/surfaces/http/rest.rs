//! REST under `/v1`: the session lifecycle as resources, with the wire types of every surface.
//!
//! | route | service call | answer |
//! |---|---|---|
//! | `POST /v1/sessions` | `create_session` | 201 `RunResult` (`Location` names the session) |
//! | `GET /v1/sessions?offset&limit&include_archived` | `list` | `SessionList` |
//! | `GET /v1/sessions/{id}?wait_ms=` | `read` | `SessionView` |
//! | `DELETE /v1/sessions/{id}` | `archive` | `ArchiveResult` |
//! | `POST /v1/sessions/{id}/turns` | `start_turn` | `RunResult` |
//! | `POST /v1/sessions/{id}/interrupt` | `interrupt` | `InterruptResult` |
//! | `POST /v1/sessions/{id}/compact` | `compact` | `CompactResult` |
//! | `GET /v1/sessions/{id}/tool-outputs/{tool_use_id}` | `tool_output` | `ToolOutputResult` |
//! | `GET /v1/sessions/{id}/messages` | `history` | `SessionHistory` |
//! | `GET /v1/openapi.json` | | the OpenAPI 3.1 document ([`super::openapi`]) |
//!
//! Bodies are the MCP tools' params: `POST /v1/sessions` takes `SessionCreateParams`, a turn
//! takes `SessionTurnParams` with the session id from the path. Both accept one REST-only
//! field, `"stream": true`, which answers Server-Sent Events ([`streaming`](super::streaming))
//! instead of waiting `wait_ms`. Every error is `{code, message, session_id?}` with the status
//! of the error table ([`api_error`](super::api_error)).

use std::sync::Arc;
use std::sync::LazyLock;

use axum::Json;
use axum::Router;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::Value;

use super::api_error::ApiError;
use super::openapi;
use super::streaming::StreamedTurn;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::session::{SessionService, TurnOptions};
use crate::surfaces::wire::{self, SessionCreateParams, SessionListParams, SessionReadParams, SessionTurnParams};

pub fn router<S: SessionService>(_service: Arc<S>) -> Router<Arc<S>> {
    Router::new()
        .route("/v1/openapi.json", get(openapi_document))
        .route("/v1/sessions", post(create::<S>).get(list::<S>))
        .route("/v1/sessions/{id}", get(read::<S>).delete(archive::<S>))
        .route("/v1/sessions/{id}/turns", post(turn::<S>))
        .route("/v1/sessions/{id}/interrupt", post(interrupt::<S>))
        .route("/v1/sessions/{id}/compact", post(compact::<S>))
        .route("/v1/sessions/{id}/tool-outputs/{tool_use_id}", get(tool_output::<S>))
        .route("/v1/sessions/{id}/messages", get(history::<S>))
}

type Answer = Result<Response, ApiError>;

/// The query of `GET /v1/sessions/{id}`: `SessionReadParams` without the id, which is in the path.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadQuery {
    #[serde(default)]
    wait_ms: Option<u64>,
}

async fn openapi_document() -> Json<Value> {
    static DOCUMENT: LazyLock<Value> = LazyLock::new(openapi::document);
    Json(DOCUMENT.clone())
}

async fn create<S: SessionService>(
    State(service): State<Arc<S>>,
    body: Result<Json<Value>, JsonRejection>,
) -> Answer {
    let Json(mut body) = body?;
    let stream = take_stream(&mut body)?;
    let params: SessionCreateParams = wire::parse_params("POST /v1/sessions", body)?;
    if stream {
        let (options, streamed) = StreamedTurn::prepare();
        let call = tokio::spawn(async move { service.create_session(params.into_request(options)).await });
        return Ok(streamed.respond(call).await);
    }
    // Not streamed: waits like the MCP tools, and takes no cancellation from the connection. A
    // client that leaves is like one that got `running`; the result stays readable with
    // `GET /v1/sessions/{id}?wait_ms=`.
    let options = TurnOptions::waiting(wire::turn_wait(params.wait_ms));
    let result = service.create_session(params.into_request(options)).await?;
    let location = format!("/v1/sessions/{}", result.session_id);
    Ok((StatusCode::CREATED, [(header::LOCATION, location)], Json(result)).into_response())
}

async fn turn<S: SessionService>(
    State(service): State<Arc<S>>,
    id: Result<Path<String>, PathRejection>,
    body: Result<Json<Value>, JsonRejection>,
) -> Answer {
    let Path(id) = id?;
    let Json(mut body) = body?;
    let stream = take_stream(&mut body)?;
    if let Value::Object(fields) = &mut body {
        if fields.contains_key("session_id") {
            return Err(SessionError::invalid("the session id belongs in the path, not in the body").into());
        }
        fields.insert("session_id".to_owned(), Value::String(id));
    }
    let params: SessionTurnParams = wire::parse_params("POST /v1/sessions/{id}/turns", body)?;
    if stream {
        let (options, streamed) = StreamedTurn::prepare();
        let (id, request) = params.into_request(options);
        let call = tokio::spawn(async move { service.start_turn(&id, request).await });
        return Ok(streamed.respond(call).await);
    }
    // Not streamed: waits like the MCP tools, and takes no cancellation from the connection. A
    // client that leaves is like one that got `running`; the result stays readable with
    // `GET /v1/sessions/{id}?wait_ms=`.
    let options = TurnOptions::waiting(wire::turn_wait(params.wait_ms));
    let (id, request) = params.into_request(options);
    Ok(Json(service.start_turn(&id, request).await?).into_response())
}

async fn interrupt<S: SessionService>(
    State(service): State<Arc<S>>,
    id: Result<Path<String>, PathRejection>,
) -> Answer {
    let Path(id) = id?;
    Ok(Json(service.interrupt(&SessionId::from_string(id)).await?).into_response())
}

async fn read<S: SessionService>(
    State(service): State<Arc<S>>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<ReadQuery>, QueryRejection>,
) -> Answer {
    let Path(id) = id?;
    let Query(query) = query?;
    let params = SessionReadParams { session_id: SessionId::from_string(id), wait_ms: query.wait_ms };
    let wait = wire::read_wait(params.wait_ms);
    Ok(Json(service.read(&params.session_id, Some(wait)).await?).into_response())
}

async fn list<S: SessionService>(
    State(service): State<Arc<S>>,
    query: Result<Query<SessionListParams>, QueryRejection>,
) -> Answer {
    let Query(params) = query?;
    Ok(Json(service.list(params.into()).await?).into_response())
}

async fn archive<S: SessionService>(
    State(service): State<Arc<S>>,
    id: Result<Path<String>, PathRejection>,
) -> Answer {
    let Path(id) = id?;
    Ok(Json(service.archive(&SessionId::from_string(id)).await?).into_response())
}

async fn compact<S: SessionService>(
    State(service): State<Arc<S>>,
    id: Result<Path<String>, PathRejection>,
) -> Answer {
    let Path(id) = id?;
    Ok(Json(service.compact(&SessionId::from_string(id)).await?).into_response())
}

async fn tool_output<S: SessionService>(
    State(service): State<Arc<S>>,
    ids: Result<Path<(String, String)>, PathRejection>,
) -> Answer {
    let Path((id, tool_use_id)) = ids?;
    Ok(Json(service.tool_output(&SessionId::from_string(id), &tool_use_id).await?).into_response())
}

async fn history<S: SessionService>(
    State(service): State<Arc<S>>,
    id: Result<Path<String>, PathRejection>,
) -> Answer {
    let Path(id) = id?;
    Ok(Json(service.history(&SessionId::from_string(id)).await?).into_response())
}

/// Takes the REST-only `stream` flag off a body, leaving exactly the wire params to parse.
fn take_stream(body: &mut Value) -> Result<bool, SessionError> {
    let Value::Object(fields) = body else {
        return Err(SessionError::invalid("the request body must be a JSON object"));
    };
    match fields.remove("stream") {
        None | Some(Value::Bool(false)) => Ok(false),
        Some(Value::Bool(true)) => Ok(true),
        Some(other) => Err(SessionError::invalid(format!("`stream` must be true or false, not {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_stream_flag_comes_off_the_body() {
        let mut body = json!({"prompt": "hi", "stream": true});
        assert!(matches!(take_stream(&mut body), Ok(true)));
        assert_eq!(body, json!({"prompt": "hi"}));
        assert!(matches!(take_stream(&mut json!({"prompt": "hi"})), Ok(false)));
        assert!(take_stream(&mut json!({"stream": "yes"})).is_err());
        assert!(take_stream(&mut json!(["not", "an", "object"])).is_err());
    }
}
