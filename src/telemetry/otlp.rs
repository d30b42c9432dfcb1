//! OpenTelemetry traces over OTLP/HTTP: the spans of [`super::spans`] (turns, model calls, tool
//! calls), exported when the operator names a collector, with a caller's W3C trace context
//! continued ([`continue_trace`]).
//!
//! The subscriber is installed before the config file is read, so `main` installs an
//! [`OtlpLayer`] that forwards to the exporting layer once [`start`] has built it, and does
//! nothing (one atomic load per telemetry span event) while tracing is off. The export runs on
//! the SDK's batch thread; its HTTP requests run on deputy's runtime through deputy's own
//! `reqwest` client ([`RuntimeClient`]), so there is no second HTTP or TLS stack.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, Tracer};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Span};
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt};
use tracing_subscriber::Layer;
use tracing_subscriber::Registry;
use tracing_subscriber::layer::Context;

use super::caller_trace::TraceParent;

/// The OTLP/HTTP path of traces, appended to a base endpoint as the specification says.
const TRACES_PATH: &str = "/v1/traces";
/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest collector answer read; OTLP answers are a few bytes.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The exporting layer and the provider that owns its batch thread, once started.
struct Export {
    layer: OpenTelemetryLayer<Registry, Tracer>,
    provider: SdkTracerProvider,
}

static EXPORT: OnceLock<Export> = OnceLock::new();

/// Why traces cannot be exported as configured (a startup error: the operator asked for them).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("OTLP protocol {0:?} is not supported: deputy exports traces over HTTP (http/protobuf or http/json)")]
    Protocol(String),
    #[error("[telemetry] otlp_endpoint {0:?} is not an http:// or https:// URL")]
    Endpoint(String),
    #[error("trace export needs the async runtime")]
    NoRuntime,
    #[error("building the OTLP exporter: {0}")]
    Build(String),
}

/// Starts exporting traces if the operator asked: `configured` (`[telemetry] otlp_endpoint`, a
/// base URL like `OTEL_EXPORTER_OTLP_ENDPOINT`), else the standard variables read through
/// `var`. `Ok(false)`: tracing stays off. Once started it stays on for the process.
pub fn start(configured: Option<&str>, var: &dyn Fn(&str) -> Option<String>) -> Result<bool, ExportError> {
    if enabled() {
        return Ok(true);
    }
    let set = |name: &str| var(name).filter(|value| !value.trim().is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|value| value.trim().eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    let endpoint = match configured {
        Some(base) => Some(traces_url(base)?),
        None if set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
            || set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() =>
        {
            // The exporter resolves the variables itself, as every OpenTelemetry SDK does.
            None
        }
        None => return Ok(false),
    };
    let protocol = match set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL")) {
        None => Protocol::HttpBinary,
        Some(name) => match name.trim() {
            "http/protobuf" => Protocol::HttpBinary,
            "http/json" => Protocol::HttpJson,
            other => return Err(ExportError::Protocol(other.to_owned())),
        },
    };
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| ExportError::NoRuntime)?;
    let client = crate::tls::http_client()
        .timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|error| ExportError::Build(error.to_string()))?;
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(RuntimeClient { client, runtime })
        .with_protocol(protocol);
    if let Some(endpoint) = endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    let exporter = builder.build().map_err(|error| ExportError::Build(error.to_string()))?;
    let mut resource = Resource::builder();
    if set("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("deputy");
    }
    let provider =
        SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("deputy"))
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false);
    // Two servers of one process starting at once: the first export wins, the other's
    // provider is dropped unused.
    let _ = EXPORT.set(Export { layer, provider });
    Ok(true)
}

/// `base` with the traces path, unless it already ends with it.
fn traces_url(base: &str) -> Result<String, ExportError> {
    let base = base.trim();
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(ExportError::Endpoint(base.to_owned()));
    }
    let base = base.trim_end_matches('/');
    Ok(if base.ends_with(TRACES_PATH) { base.to_owned() } else { format!("{base}{TRACES_PATH}") })
}

/// Whether traces are exported (a request's `traceparent` matters only then).
pub fn enabled() -> bool {
    EXPORT.get().is_some()
}

/// Makes `span` (not yet entered) a child of the caller's trace `parent`.
pub fn continue_trace(span: &Span, parent: Option<&TraceParent>) {
    let (Some(parent), true) = (parent, enabled()) else { return };
    let carrier = HashMap::from([("traceparent".to_owned(), parent.as_str().to_owned())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    if context.span().span_context().is_valid()
        && let Err(error) = span.set_parent(context)
    {
        tracing::debug!(%error, "the caller's trace context was not applied");
    }
}

/// Sends what is still buffered and stops the batch thread; called once, at exit. Blocks.
pub fn flush() {
    if let Some(export) = EXPORT.get()
        && let Err(error) = export.provider.shutdown()
    {
        tracing::warn!(%error, "flushing the last traces");
    }
}

/// Forwards the telemetry spans to the exporting layer once [`start`] built one. Installed
/// first on the registry, with the telemetry target's filter.
#[derive(Debug, Clone, Copy, Default)]
pub struct OtlpLayer;

impl Layer<Registry> for OtlpLayer {
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, Registry>) {
        if let Some(export) = EXPORT.get() {
            export.layer.on_new_span(attributes, id, context);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, context: Context<'_, Registry>) {
        if let Some(export) = EXPORT.get() {
            export.layer.on_record(id, values, context);
        }
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, context: Context<'_, Registry>) {
        if let Some(export) = EXPORT.get() {
            export.layer.on_follows_from(id, follows, context);
        }
    }

    fn on_event(&self, event: &Event<'_>, context: Context<'_, Registry>) {
        if let Some(export) = EXPORT.get() {
            export.layer.on_event(event, context);
        }
    }

    fn on_enter(&self, id: &Id, context: Context<'_, Registry>) {
        if let Some(export) = EXPORT.get() {
            export.layer.on_enter(id, context);
        }
    }

    fn on_exit(&self, id: &Id, context: Context<'_, Registry>) {
        if let Some(export) = EXPORT.get() {
            export.layer.on_exit(id, context);
        }
    }

    fn on_close(&self, id: Id, context: Context<'_, Registry>) {
        if let Some(export) = EXPORT.get() {
            export.layer.on_close(id, context);
        }
    }

    /// `tracing-opentelemetry` finds its layer (for [`continue_trace`]) by downcasting the
    /// subscriber: the forwarder answers for the layer it forwards to.
    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: the exporting layer lives in a static for the rest of the process, so the
        // pointer it answers stays valid for as long as `self` does.
        unsafe { EXPORT.get()?.layer.downcast_raw(id) }
    }
}

/// Sends the exporter's requests with deputy's `reqwest` client on deputy's runtime, from the
/// SDK's batch thread (which has no runtime of its own).
#[derive(Debug)]
struct RuntimeClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let mut response = client.execute(reqwest::Request::try_from(request)?).await?;
            let mut answer = Response::builder().status(response.status());
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                let room = MAX_ANSWER_BYTES.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            if let Some(headers) = answer.headers_mut() {
                *headers = response.headers().clone();
            }
            Ok::<_, HttpError>(answer.body(Bytes::from(body))?)
        });
        sent.await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_endpoint_is_a_base_url() {
        assert_eq!(traces_url("http://collector:4318").ok().as_deref(), Some("http://collector:4318/v1/traces"));
        assert_eq!(traces_url("http://collector:4318/").ok().as_deref(), Some("http://collector:4318/v1/traces"));
        assert_eq!(
            traces_url("https://collector/otel/v1/traces").ok().as_deref(),
            Some("https://collector/otel/v1/traces")
        );
        assert!(matches!(traces_url("collector:4318"), Err(ExportError::Endpoint(_))));
    }

    #[test]
    fn off_unless_asked_and_grpc_is_refused() {
        assert!(matches!(start(None, &|_| None), Ok(false)));
        let disabled = |name: &str| match name {
            "OTEL_SDK_DISABLED" => Some("true".to_owned()),
            _ => Some("http://127.0.0.1:4318".to_owned()),
        };
        assert!(matches!(start(None, &disabled), Ok(false)));
        let grpc = |name: &str| (name == "OTEL_EXPORTER_OTLP_PROTOCOL").then(|| "grpc".to_owned());
        assert!(
            matches!(start(Some("http://127.0.0.1:4318"), &grpc), Err(ExportError::Protocol(name)) if name == "grpc")
        );
        assert!(!enabled());
    }
}
