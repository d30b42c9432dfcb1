//! Embeddings: `POST {base_url}/embeddings` of any OpenAI-compatible server (OpenAI, Ollama,
//! vLLM, …), for the hybrid search of document collections. Errors are classified as a model
//! call's are, and retryable ones (429, 5xx, connection failures) are retried with the same
//! policy and backoff ([`RetryPolicy`]).

use serde::Deserialize;
use serde_json::json;

use super::http::{self, ErrorResponse};
use super::retry::RetryPolicy;
use super::{HttpTimeouts, LlmError, LlmErrorKind};

const PROVIDER: &str = "embeddings";

/// Texts per request at most: OpenAI takes 2,048 inputs; smaller batches keep one failure cheap.
pub const MAX_BATCH: usize = 64;

/// One embeddings model of one server.
#[derive(Clone)]
pub struct EmbeddingModel {
    url: String,
    api_key: Option<String>,
    model: String,
    dimensions: Option<u32>,
    client: Result<reqwest::Client, LlmError>,
    retry: RetryPolicy,
}

impl std::fmt::Debug for EmbeddingModel {
    /// Never prints the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingModel").field("url", &self.url).field("model", &self.model).finish_non_exhaustive()
    }
}

/// What one call gave: a vector per input, in order, and the tokens the server counted.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    pub tokens: u64,
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Item>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    total_tokens: u64,
    #[serde(default)]
    prompt_tokens: u64,
}

impl EmbeddingModel {
    /// `base_url` includes the version path (`https://api.openai.com/v1`).
    pub fn new(base_url: &str, api_key: Option<String>, model: &str, dimensions: Option<u32>) -> Self {
        Self {
            url: http::join_url(base_url, "/embeddings"),
            api_key,
            model: model.to_owned(),
            dimensions,
            client: http::build_client(HttpTimeouts::default()),
            retry: RetryPolicy::default(),
        }
    }

    /// The same model with another retry policy (tests shorten the backoff).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    /// The vectors of `inputs` (at most [`MAX_BATCH`]), retried like a model call.
    pub async fn embed(&self, inputs: &[String]) -> Result<Embedded, LlmError> {
        let mut retry = 0;
        loop {
            match self.attempt(inputs).await {
                Ok(embedded) => return Ok(embedded),
                Err(error) if error.is_retryable() && retry < self.retry.max_retries => {
                    tokio::time::sleep(self.retry.delay(retry, &error)).await;
                    retry += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    async fn attempt(&self, inputs: &[String]) -> Result<Embedded, LlmError> {
        let client = self.client.clone()?;
        let mut body = json!({"model": self.model, "input": inputs, "encoding_format": "float"});
        if let Some(dimensions) = self.dimensions {
            body["dimensions"] = json!(dimensions);
        }
        let mut request = client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.header("authorization", http::secret_header(PROVIDER, &format!("Bearer {key}"))?);
        }
        let response = request.send().await.map_err(|err| http::send_error(PROVIDER, &err))?;
        if !response.status().is_success() {
            let error = ErrorResponse::read(response).await;
            let kind = http::kind_for_status(error.status);
            return Err(error.into_error(PROVIDER, kind));
        }
        let parsed: Response = response.json().await.map_err(|err| {
            LlmError::new(LlmErrorKind::Decode, format!("{PROVIDER}: the answer is not an embeddings list: {err}"))
        })?;
        let mut vectors = vec![Vec::new(); inputs.len()];
        for item in parsed.data {
            if let Some(slot) = vectors.get_mut(item.index) {
                *slot = item.embedding;
            }
        }
        if vectors.iter().any(Vec::is_empty) {
            return Err(LlmError::new(LlmErrorKind::Decode, format!("{PROVIDER}: an input got no vector")));
        }
        let tokens = parsed.usage.map_or(0, |usage| usage.total_tokens.max(usage.prompt_tokens));
        Ok(Embedded { vectors, tokens })
    }
}
