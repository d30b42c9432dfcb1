//! REST under `/v1`: the session lifecycle as resources, with the wire types of every surface.
//!
//! The routes are the table [`ROUTES`] (method, path, operation, documentation); this module
//! gives each its handler. Bodies are the MCP tools' params: `POST /v1/sessions` takes
//! `SessionCreateParams`, a turn takes `SessionTurnParams` with the session id from the path.
//! Both accept one REST-only field, `"stream": true`, which answers Server-Sent Events
//! ([`streaming`](super::streaming)) instead of waiting `wait_ms`. Everything else goes through
//! the same [`Operation::run`] as MCP and JSON-RPC, with the path's ids and the query as its
//! JSON arguments. Every error is `{code, message, session_id?}` with the status of the error
//! table ([`api_error`](super::api_error)).

use std::sync::Arc;
use std::sync::LazyLock;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::rejection::{JsonRejection, PathRejection, StringRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::api_error::ApiError;
use super::openapi;
use super::routes::{self, Method, OwnRoute, ROUTES, RestInput, Route};
use super::streaming::StreamedTurn;
use crate::caller::Caller;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::session::{CallerServices, SessionService, TurnOptions};
use crate::surfaces::operation::turns::{SessionCreateParams, SessionTurnParams};
use crate::surfaces::operation::{self, Operation};
use crate::surfaces::wire;

pub fn router<P: CallerServices>() -> Router<Arc<P>> {
    // Routes on one path (GET and DELETE of a session) merge into one method router.
    ROUTES.iter().fold(Router::new(), |router, route| router.route(route.rest.path, handler::<P>(route)))
}

type Answer = Result<Response, ApiError>;

/// The handler of one route of the table.
fn handler<P: CallerServices>(route: &'static Route) -> MethodRouter<Arc<P>> {
    let method = match route.rest.method {
        Method::Get => MethodFilter::GET,
        Method::Post => MethodFilter::POST,
        Method::Delete => MethodFilter::DELETE,
    };
    let Some(operation) = route.operation else { return on(method, openapi_document) };
    match route.rest.input {
        RestInput::Own(OwnRoute::Create) => on(
            method,
            move |services: State<Arc<P>>, caller: Extension<Caller>, body: Result<Json<Value>, JsonRejection>| {
                create(route, operation, services.for_caller(&caller), body)
            },
        ),
        RestInput::Own(OwnRoute::Turn) => on(
            method,
            move |services: State<Arc<P>>,
                  caller: Extension<Caller>,
                  id: Result<Path<String>, PathRejection>,
                  body: Result<Json<Value>, JsonRejection>| {
                turn(route, operation, services.for_caller(&caller), id, body)
            },
        ),
        RestInput::Body => on(
            method,
            move |services: State<Arc<P>>,
                  caller: Extension<Caller>,
                  id: Result<Path<String>, PathRejection>,
                  body: Result<Json<Value>, JsonRejection>| {
                with_body(route, operation, services.for_caller(&caller), id, body)
            },
        ),
        RestInput::Path | RestInput::Query(_) => on(
            method,
            move |services: State<Arc<P>>,
                  caller: Extension<Caller>,
                  ids: Result<Path<Vec<(String, String)>>, PathRejection>,
                  uri: Uri| { call(route, operation, services.for_caller(&caller), ids, uri) },
        ),
        RestInput::Own(OwnRoute::Events) => on(
            method,
            move |services: State<Arc<P>>,
                  caller: Extension<Caller>,
                  follows: Extension<Arc<super::follow::Follows>>,
                  id: Result<Path<String>, PathRejection>,
                  uri: Uri| {
                let subject = caller.subject_arc();
                events(route, operation, services.for_caller(&caller), id, uri, follows.0, subject)
            },
        ),
        RestInput::Own(OwnRoute::Export) => on(
            method,
            |services: State<Arc<P>>, caller: Extension<Caller>, id: Result<Path<String>, PathRejection>| {
                export(services.for_caller(&caller), id)
            },
        ),
        RestInput::Own(OwnRoute::Import) => on(
            method,
            move |services: State<Arc<P>>, caller: Extension<Caller>, body: Result<String, StringRejection>| {
                import(services.for_caller(&caller), body)
            },
        ),
    }
}

/// The options of a turn that is not streamed: it waits like the MCP tools, and takes no
/// cancellation from the connection. A client that leaves is like one that got `running`; the
/// result stays readable with `GET /v1/sessions/{id}?wait_ms=`.
fn waiting(wait: Duration) -> (TurnOptions, ()) {
    (TurnOptions::waiting(wait), ())
}

async fn openapi_document() -> Json<Value> {
    static DOCUMENT: LazyLock<Value> = LazyLock::new(openapi::document);
    Json(DOCUMENT.clone())
}

async fn create<S: SessionService>(
    route: &'static Route,
    operation: Operation,
    service: S,
    body: Result<Json<Value>, JsonRejection>,
) -> Answer {
    let Json(mut body) = body?;
    if take_stream(&mut body)? {
        let params: SessionCreateParams = wire::parse_params(&route.name(), body)?;
        let (options, streamed) = StreamedTurn::prepare();
        let call = tokio::spawn(async move { service.create_session(params.into_request(options)).await });
        return Ok(streamed.respond(call).await);
    }
    Ok(answer(route, operation.run(&route.name(), &service, body, waiting).await?))
}

async fn turn<S: SessionService>(
    route: &'static Route,
    operation: Operation,
    service: S,
    id: Result<Path<String>, PathRejection>,
    body: Result<Json<Value>, JsonRejection>,
) -> Answer {
    let Path(id) = id?;
    let Json(mut body) = body?;
    let stream = take_stream(&mut body)?;
    put_path_id(&mut body, id)?;
    if stream {
        let params: SessionTurnParams = wire::parse_params(&route.name(), body)?;
        let (options, streamed) = StreamedTurn::prepare();
        let (id, request) = params.into_request(options);
        let call = tokio::spawn(async move { service.start_turn(&id, request).await });
        return Ok(streamed.respond(call).await);
    }
    Ok(Json(operation.run(&route.name(), &service, body, waiting).await?).into_response())
}

/// An operation on the path's session with a JSON body: a message for its inbox (202, as it
/// is only queued), a fork (201, `Location` naming the new session), a rewind.
async fn with_body<S: SessionService>(
    route: &'static Route,
    operation: Operation,
    service: S,
    id: Result<Path<String>, PathRejection>,
    body: Result<Json<Value>, JsonRejection>,
) -> Answer {
    let Path(id) = id?;
    let Json(mut body) = body?;
    put_path_id(&mut body, id)?;
    Ok(answer(route, operation.run(&route.name(), &service, body, waiting).await?))
}

/// A JSON result with its route's status. What creates a session (201) answers its view or its
/// first turn, both naming it, and `Location` says where it is.
fn answer(route: &Route, result: Value) -> Response {
    let status = StatusCode::from_u16(route.rest.status).unwrap_or(StatusCode::OK);
    if status != StatusCode::CREATED {
        return (status, Json(result)).into_response();
    }
    let location = format!("/v1/sessions/{}", result["session_id"].as_str().unwrap_or_default());
    (status, [(header::LOCATION, location)], Json(result)).into_response()
}

/// The body's arguments get the session id from the path; one in the body too is refused.
fn put_path_id(body: &mut Value, id: String) -> Result<(), SessionError> {
    if let Value::Object(fields) = body {
        if fields.contains_key("session_id") {
            return Err(SessionError::invalid("the session id belongs in the path, not in the body"));
        }
        fields.insert("session_id".to_owned(), Value::String(id));
    }
    Ok(())
}

/// Any other operation: the query and the path's ids become its JSON arguments.
async fn call<S: SessionService>(
    route: &'static Route,
    operation: Operation,
    service: S,
    ids: Result<Path<Vec<(String, String)>>, PathRejection>,
    uri: Uri,
) -> Answer {
    let Path(ids) = ids?;
    let mut arguments = match route.rest.input {
        RestInput::Query(parse) => parse(&uri)?,
        _ => Map::new(),
    };
    for (name, value) in ids {
        let argument = routes::path_parameter(&name).map_or(name, |parameter| parameter.argument.to_owned());
        arguments.insert(argument, Value::String(value));
    }
    let result = operation.run(&route.name(), &service, Value::Object(arguments), waiting).await?;
    Ok(Json(result).into_response())
}

/// The query of `GET /v1/sessions/{id}/events`: `SessionEventsParams` without the id, plus
/// the REST-only `follow` and `provisional`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    limit: Option<usize>,
    #[serde(default, skip_serializing)]
    follow: bool,
    /// With `follow`: the running turn's events too, before it is saved.
    #[serde(default, skip_serializing)]
    provisional: bool,
}

/// The journal feed: a page through `session_events`, or with `follow=true` a following
/// event stream ([`follow`](super::follow)).
async fn events<S: SessionService>(
    route: &'static Route,
    operation: Operation,
    service: S,
    id: Result<Path<String>, PathRejection>,
    uri: Uri,
    follows: Arc<super::follow::Follows>,
    subject: Arc<str>,
) -> Answer {
    let Path(id) = id?;
    let query = Query::<EventsQuery>::try_from_uri(&uri)?.0;
    if query.follow {
        let id = SessionId::from_string(id);
        let (after, provisional) = (query.after_seq, query.provisional);
        return Ok(super::follow::respond(service, id, after, provisional, &follows, subject).await);
    }
    let mut arguments = operation::arguments(query);
    arguments.insert("session_id".to_owned(), Value::String(id));
    Ok(Json(operation.run(&route.name(), &service, Value::Object(arguments), waiting).await?).into_response())
}

/// A session's document, as the document itself.
async fn export<S: SessionService>(service: S, id: Result<Path<String>, PathRejection>) -> Answer {
    let Path(id) = id?;
    let export = service.export(&SessionId::from_string(id)).await?;
    Ok(([(header::CONTENT_TYPE, crate::surfaces::mcp::resources::JSONL)], export.document).into_response())
}

/// A new session from the document in the body: 201, `Location` naming it.
async fn import<S: SessionService>(service: S, body: Result<String, StringRejection>) -> Answer {
    let document = body.map_err(|rejection| SessionError::invalid(format!("import: {}", rejection.body_text())))?;
    let view = service.import(&document).await?;
    let location = format!("/v1/sessions/{}", view.session_id);
    Ok((StatusCode::CREATED, [(header::LOCATION, location)], Json(view)).into_response())
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
