//! OpenTelemetry traces through the built binary (issue 30): a turn, its model calls and its
//! tool call reach an OTLP/HTTP collector as spans with the GenAI attributes, inside the trace
//! the caller sent in `traceparent`; protobuf by default, JSON when `OTEL_EXPORTER_OTLP_PROTOCOL`
//! says so; gRPC refused at startup with a clear error.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as ProtoValue;
use prost::Message;
use reqwest::Method;
use rmcp::ClientLifecycleMode;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::common::deputy::startup_error;
use crate::common::http_deputy::HttpDeputy;
use crate::common::mock_llm::{MockResponse, anthropic};

/// The caller's trace: its id and the caller's span, which deputy's turn must continue.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn traceparent() -> String {
    format!("00-{TRACE_ID}-{CALLER_SPAN}-01")
}

/// One exported span, whatever the encoding: ids in hex, attribute values as text.
#[derive(Debug, Clone)]
struct Exported {
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    /// OTLP's `SpanKind`: 1 internal, 3 client.
    kind: i32,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    status: i32,
    attributes: HashMap<String, String>,
    service_name: String,
}

/// Every export request received: its content type and body.
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A loopback OTLP/HTTP collector: records every `POST /v1/traces` and its content type.
struct Collector {
    url: String,
    received: Received,
    _server: tokio::task::JoinHandle<()>,
}

impl Collector {
    async fn start() -> Self {
        let received = Received::default();
        let recorded = received.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let recorded = recorded.clone();
                async move {
                    let content_type = headers
                        .get("content-type")
                        .and_then(|value| value.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    recorded.lock().unwrap().push((content_type.clone(), body.to_vec()));
                    // An empty ExportTraceServiceResponse: full success.
                    let body = if content_type.contains("json") { b"{}".to_vec() } else { Vec::new() };
                    ([("content-type", content_type)], body)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, received, _server: server }
    }

    fn content_types(&self) -> Vec<String> {
        self.received.lock().unwrap().iter().map(|(content_type, _)| content_type.clone()).collect()
    }

    fn spans(&self) -> Vec<Exported> {
        let received = self.received.lock().unwrap().clone();
        received.iter().flat_map(|(content_type, body)| decode(content_type, body)).collect()
    }

    /// Waits until spans named `names` (each at least as often as listed) have arrived.
    async fn wait_for(&self, names: &[&str]) -> Vec<Exported> {
        for _ in 0..300 {
            let spans = self.spans();
            let all_there = names.iter().all(|name| {
                let wanted = names.iter().filter(|other| *other == name).count();
                spans.iter().filter(|span| span.name == *name).count() >= wanted
            });
            if all_there {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the collector did not receive {names:?}: {:#?}", self.spans());
    }
}

fn decode(content_type: &str, body: &[u8]) -> Vec<Exported> {
    if content_type.contains("json") {
        decode_json(&serde_json::from_slice(body).unwrap())
    } else {
        assert_eq!(content_type, "application/x-protobuf");
        decode_protobuf(&ExportTraceServiceRequest::decode(body).unwrap())
    }
}

fn decode_protobuf(request: &ExportTraceServiceRequest) -> Vec<Exported> {
    let text = |value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>| match value
        .as_ref()
        .and_then(|value| value.value.as_ref())
    {
        Some(ProtoValue::StringValue(text)) => text.clone(),
        Some(ProtoValue::IntValue(number)) => number.to_string(),
        Some(ProtoValue::DoubleValue(number)) => number.to_string(),
        Some(ProtoValue::BoolValue(flag)) => flag.to_string(),
        other => format!("{other:?}"),
    };
    let hex = |bytes: &[u8]| bytes.iter().map(|byte| format!("{byte:02x}")).collect::<String>();
    let mut spans = Vec::new();
    for resource_spans in &request.resource_spans {
        let service_name = resource_spans
            .resource
            .iter()
            .flat_map(|resource| &resource.attributes)
            .find(|attribute| attribute.key == "service.name")
            .map(|attribute| text(&attribute.value))
            .unwrap_or_default();
        for span in resource_spans.scope_spans.iter().flat_map(|scope| &scope.spans) {
            spans.push(Exported {
                name: span.name.clone(),
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                kind: span.kind,
                status: span.status.as_ref().map_or(0, |status| status.code),
                attributes: span.attributes.iter().map(|kv| (kv.key.clone(), text(&kv.value))).collect(),
                service_name: service_name.clone(),
            });
        }
    }
    spans
}

/// OTLP/JSON: camelCase keys, ids in hex, 64-bit integers as strings.
fn decode_json(request: &Value) -> Vec<Exported> {
    let text = |value: &Value| match value.as_object().and_then(|object| object.iter().next()) {
        Some((_, Value::String(text))) => text.clone(),
        Some((_, other)) => other.to_string(),
        None => String::new(),
    };
    let attributes = |list: &Value| -> HashMap<String, String> {
        list.as_array()
            .into_iter()
            .flatten()
            .map(|kv| (kv["key"].as_str().unwrap().to_owned(), text(&kv["value"])))
            .collect()
    };
    let mut spans = Vec::new();
    for resource_spans in request["resourceSpans"].as_array().unwrap() {
        let service_name =
            attributes(&resource_spans["resource"]["attributes"]).remove("service.name").unwrap_or_default();
        for scope in resource_spans["scopeSpans"].as_array().unwrap() {
            for span in scope["spans"].as_array().unwrap() {
                spans.push(Exported {
                    name: span["name"].as_str().unwrap().to_owned(),
                    trace_id: span["traceId"].as_str().unwrap().to_owned(),
                    span_id: span["spanId"].as_str().unwrap().to_owned(),
                    parent_span_id: span["parentSpanId"].as_str().unwrap_or_default().to_owned(),
                    kind: span["kind"].as_i64().unwrap_or_default() as i32,
                    status: span["status"]["code"].as_i64().unwrap_or_default() as i32,
                    attributes: attributes(&span["attributes"]),
                    service_name: service_name.clone(),
                });
            }
        }
    }
    spans
}

fn named<'a>(spans: &'a [Exported], name: &str) -> Vec<&'a Exported> {
    spans.iter().filter(|span| span.name == name).collect()
}

/// The turn's span continues the caller's trace; its model and tool calls are its children,
/// all in the caller's trace, with the GenAI attributes.
fn assert_one_traced_turn(spans: &[Exported], session_id: &str) {
    let turns = named(spans, "invoke_agent");
    assert_eq!(turns.len(), 1, "{spans:#?}");
    let turn = turns[0];
    assert_eq!(turn.trace_id, TRACE_ID, "the caller's trace continues: {turn:#?}");
    assert_eq!(turn.parent_span_id, CALLER_SPAN, "{turn:#?}");
    assert_eq!(turn.attributes["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(turn.attributes["gen_ai.conversation.id"], session_id);
    assert_eq!(turn.attributes["gen_ai.request.model"], "claude-test");
    assert_eq!(turn.attributes["deputy.turn.status"], "completed");
    assert_eq!(turn.service_name, "deputy");

    let chats = named(spans, "chat claude-test");
    assert_eq!(chats.len(), 2, "a tool call, then the answer: {spans:#?}");
    for chat in chats {
        assert_eq!((chat.trace_id.as_str(), chat.parent_span_id.as_str()), (TRACE_ID, turn.span_id.as_str()));
        assert_eq!(chat.kind, 3, "a client span: {chat:#?}");
        assert_eq!(chat.attributes["gen_ai.operation.name"], "chat");
        assert_eq!(chat.attributes["gen_ai.provider.name"], "anthropic");
        assert_eq!(chat.attributes["gen_ai.request.model"], "claude-test");
        let input: u64 = chat.attributes["gen_ai.usage.input_tokens"].parse().unwrap();
        let output: u64 = chat.attributes["gen_ai.usage.output_tokens"].parse().unwrap();
        assert!(input > 0 && output > 0, "{chat:#?}");
        assert!(chat.attributes.contains_key("gen_ai.response.finish_reasons"), "{chat:#?}");
        assert!(!chat.attributes.contains_key("error.type"), "{chat:#?}");
    }

    let tools = named(spans, "execute_tool list_dir");
    assert_eq!(tools.len(), 1, "{spans:#?}");
    assert_eq!((tools[0].trace_id.as_str(), tools[0].parent_span_id.as_str()), (TRACE_ID, turn.span_id.as_str()));
    assert_eq!(tools[0].attributes["gen_ai.tool.name"], "list_dir");
    assert_eq!(tools[0].status, 0, "the tool answered: {:#?}", tools[0]);
}

fn push_tool_call_then_answer(deputy: &HttpDeputy) {
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(None, &[("toolu_1", "list_dir", json!({}))])));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Done."])));
}

/// Spans leave within a tenth of a second of ending, instead of the SDK's default five.
const QUICK_EXPORT: (&str, &str) = ("OTEL_BSP_SCHEDULE_DELAY", "100");

#[tokio::test]
async fn a_turn_over_rest_is_exported_as_protobuf_inside_the_callers_trace() {
    let collector = Collector::start().await;
    let config = format!("[telemetry]\notlp_endpoint = \"{}\"\n", collector.url);
    let deputy = HttpDeputy::start_with_config(&config, &[], &[QUICK_EXPORT]).await;
    push_tool_call_then_answer(&deputy);
    let response = deputy
        .http
        .request(Method::POST, deputy.url("/v1/sessions"))
        .header("traceparent", traceparent())
        .json(&json!({"prompt": "look"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let created: Value = response.json().await.unwrap();
    let session_id = created["session_id"].as_str().unwrap();

    let spans = collector
        .wait_for(&["invoke_agent", "chat claude-test", "chat claude-test", "execute_tool list_dir"])
        .await;
    assert_one_traced_turn(&spans, session_id);
    assert!(collector.content_types().iter().all(|content_type| content_type == "application/x-protobuf"));

    // A request without `traceparent` starts a trace of its own.
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Again."])));
    let (status, _) = deputy
        .rest(None, Method::POST, &format!("/v1/sessions/{session_id}/turns"), Some(json!({"prompt": "again"})))
        .await;
    assert_eq!(status, 200);
    let spans = collector.wait_for(&["invoke_agent", "invoke_agent"]).await;
    let second =
        named(&spans, "invoke_agent").into_iter().find(|turn| turn.attributes["deputy.turn"] == "2").cloned();
    let second = second.expect("the second turn's span");
    assert_ne!(second.trace_id, TRACE_ID);
    assert_eq!(second.parent_span_id, "", "a root span: {second:#?}");
}

#[tokio::test]
async fn a_turn_over_mcp_is_exported_as_json_when_the_standard_variables_ask() {
    let collector = Collector::start().await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_SERVICE_NAME", "deputy"),
        QUICK_EXPORT,
    ];
    let deputy = HttpDeputy::start_with_env(&[], &env).await;
    push_tool_call_then_answer(&deputy);
    let parent = traceparent();
    let client = deputy.mcp_with_headers(ClientLifecycleMode::Initialize, &[("traceparent", &parent)]).await;
    let arguments = json!({"prompt": "look"}).as_object().unwrap().clone();
    let result =
        client.call_tool(CallToolRequestParams::new("session_create").with_arguments(arguments)).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let session_id = result.structured_content.as_ref().unwrap()["session_id"].as_str().unwrap().to_owned();

    let spans = collector
        .wait_for(&["invoke_agent", "chat claude-test", "chat claude-test", "execute_tool list_dir"])
        .await;
    assert_one_traced_turn(&spans, &session_id);
    assert!(collector.content_types().iter().all(|content_type| content_type == "application/json"));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_failed_model_call_is_an_error_span() {
    let collector = Collector::start().await;
    let config = format!("[telemetry]\notlp_endpoint = \"{}/\"\n", collector.url);
    let deputy = HttpDeputy::start_with_config(&config, &[], &[QUICK_EXPORT]).await;
    let refusal = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "no"}});
    deputy.mock.push(MockResponse::json(400, refusal));
    let (status, _) = deputy.rest(None, Method::POST, "/v1/sessions", Some(json!({"prompt": "look"}))).await;
    assert!(status >= 400, "{status}");

    let spans = collector.wait_for(&["invoke_agent", "chat claude-test"]).await;
    let chat = named(&spans, "chat claude-test")[0];
    assert_eq!(chat.status, 2, "{chat:#?}");
    assert!(chat.attributes.contains_key("error.type"), "{chat:#?}");
    let turn = named(&spans, "invoke_agent")[0];
    assert_eq!((turn.attributes["deputy.turn.status"].as_str(), turn.status), ("failed", 2), "{turn:#?}");
}

#[tokio::test]
async fn grpc_is_refused_at_startup_with_a_clear_error() {
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")];
    let stderr = startup_error("", &env).await;
    assert!(stderr.contains("OTLP protocol \"grpc\" is not supported"), "{stderr}");
}

#[tokio::test]
async fn spans_still_buffered_at_exit_are_sent_before_the_process_ends() {
    let collector = Collector::start().await;
    let config = format!("[telemetry]\notlp_endpoint = \"{}\"\n", collector.url);
    // The SDK's default batching (a 5 s delay): only the flush at exit sends this turn's spans.
    let mut deputy = HttpDeputy::start_with_config(&config, &[], &[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Hi."])));
    let (status, _) = deputy.rest(None, Method::POST, "/v1/sessions", Some(json!({"prompt": "hi"}))).await;
    assert_eq!(status, 201);
    assert!(collector.spans().is_empty(), "nothing sent before the batch delay");
    assert!(deputy.terminate().await.success());
    let names: Vec<String> = collector.spans().into_iter().map(|span| span.name).collect();
    assert!(
        names.contains(&"invoke_agent".to_owned()) && names.contains(&"chat claude-test".to_owned()),
        "{names:?}"
    );
}
