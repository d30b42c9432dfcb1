//! `GET /metrics` through the built binary (issue 30): Prometheus text that parses, counters
//! that move with a turn, a tool call and an error, gauges of what the server holds, and the
//! operator's scope.

use std::collections::HashMap;

use reqwest::Method;
use serde_json::json;

use super::tenants::{ADMIN, ADMIN_TOKEN, ALICE, TENANTS};
use crate::common::http_deputy::HttpDeputy;
use crate::common::mock_llm::{MockResponse, anthropic};

/// The exposition, checked line by line (every line a help, a type or a sample whose value is
/// a number), then as samples: name and labels (sorted `k=v` joined by `,`) → value.
fn parse(text: &str) -> HashMap<String, f64> {
    use prometheus_parse::LineInfo;
    for line in text.lines() {
        match LineInfo::parse(line) {
            LineInfo::Doc { .. } | LineInfo::Type { .. } | LineInfo::Empty => {}
            LineInfo::Sample { value, .. } => {
                let number =
                    value.parse::<f64>().or_else(|_| if value == "+Inf" { Ok(f64::INFINITY) } else { Err(()) });
                assert!(number.is_ok(), "not a number in {line:?}");
            }
            LineInfo::Ignored => panic!("not Prometheus text: {line:?}"),
        }
    }
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|line| Ok(line.to_owned()))).unwrap();
    let mut samples = HashMap::new();
    for sample in scrape.samples {
        let mut labels: Vec<String> = sample.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        labels.sort();
        let value = match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Histogram(buckets) => buckets.last().map_or(0.0, |bucket| bucket.count),
            prometheus_parse::Value::Summary(_) => continue,
        };
        samples.insert(format!("{}{{{}}}", sample.metric, labels.join(",")), value);
    }
    samples
}

async fn scrape(deputy: &HttpDeputy, token: Option<&str>) -> (u16, String, String) {
    let mut request = deputy.http.get(deputy.url("/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    (status, content_type, response.text().await.unwrap())
}

fn value(samples: &HashMap<String, f64>, key: &str) -> f64 {
    samples.get(key).copied().unwrap_or(0.0)
}

#[tokio::test]
async fn metrics_parse_and_move_with_a_turn_a_tool_call_and_an_error() {
    let deputy = HttpDeputy::start(&[]).await;
    let (status, content_type, before) = scrape(&deputy, None).await;
    assert_eq!(status, 200, "{before}");
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    let before = parse(&before);

    // A turn with one tool call (two model calls), then a read of a session that is not there.
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(None, &[("toolu_1", "list_dir", json!({}))])));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Done."])));
    let (status, created) = deputy.rest(None, Method::POST, "/v1/sessions", Some(json!({"prompt": "look"}))).await;
    assert_eq!(status, 201, "{created}");
    let (status, _) = deputy.rest(None, Method::GET, "/v1/sessions/nope", None).await;
    assert_eq!(status, 404);

    let (_, _, after) = scrape(&deputy, None).await;
    let after = parse(&after);
    let moved = |key: &str| value(&after, key) - value(&before, key);
    assert_eq!(moved("deputy_turns_total{status=completed}"), 1.0, "{after:#?}");
    assert_eq!(moved("deputy_turn_duration_seconds_count{status=completed}"), 1.0, "{after:#?}");
    // Labels sorted: the mock's model of the `anthropic` provider.
    assert_eq!(moved("deputy_model_calls_total{model=claude-test,outcome=ok,provider=anthropic}"), 2.0);
    assert_eq!(moved("deputy_model_call_duration_seconds_count{model=claude-test,provider=anthropic}"), 2.0);
    assert!(moved("deputy_tokens_total{kind=output,model=claude-test,provider=anthropic}") > 0.0, "{after:#?}");
    assert_eq!(moved("deputy_tool_calls_total{outcome=ok,tool=list_dir}"), 1.0, "{after:#?}");
    assert_eq!(moved("deputy_errors_total{code=SESSION_NOT_FOUND}"), 1.0, "{after:#?}");
    assert_eq!(value(&after, "deputy_sessions{state=live}"), 1.0, "{after:#?}");
    assert_eq!(value(&after, "deputy_turns_running{}"), 0.0, "{after:#?}");
    assert!(value(&after, "deputy_http_connections{}") >= 1.0, "this scrape's own: {after:#?}");
}

#[tokio::test]
async fn with_tokens_only_the_admin_scope_reads_metrics() {
    let deputy = HttpDeputy::start_with_config(&format!("{TENANTS}\n{ADMIN_TOKEN}"), &[], &[]).await;
    let (status, _, _) = scrape(&deputy, None).await;
    assert_eq!(status, 401);
    let (status, _, refused) = scrape(&deputy, Some(ALICE)).await;
    assert_eq!(status, 403, "{refused}");
    assert!(refused.contains("POLICY_DENIED") && refused.contains("admin scope"), "{refused}");
    let (status, _, text) = scrape(&deputy, Some(ADMIN)).await;
    assert_eq!(status, 200, "{text}");
    assert!(parse(&text).contains_key("deputy_sessions{state=hibernated}"), "{text}");
}
