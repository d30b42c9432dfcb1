//! [`McpTool`]: one tool of an external MCP server as the model sees it, `server__tool`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use tokio_util::sync::CancellationToken;

use super::error::McpServerError;
use super::factory::{McpConnection, McpFactory};
use super::reach::Reach;
use super::spec::McpServerSpec;
use crate::llm::ToolSpec;
use crate::text::truncate_at_char_boundary;
use crate::tools::builtin::OUTPUT_CAP_BYTES;
use crate::tools::{Tool, ToolOutput};

/// Separates the server's name from the tool's in the name the model sees.
pub const NAMESPACE_SEPARATOR: &str = "__";

/// Tool names providers accept: `^[a-zA-Z0-9_-]{1,128}$`.
const MAX_TOOL_NAME: usize = 128;

pub struct McpTool {
    connection: Arc<McpConnection>,
    spec: ToolSpec,
    /// The name the server knows.
    remote_name: String,
    timeout: Duration,
}

impl McpTool {
    /// The namespaced name of a server's tool, made acceptable to every provider.
    pub fn namespaced(server: &str, tool: &str) -> String {
        let mut name = format!("{server}{NAMESPACE_SEPARATOR}");
        name.extend(tool.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }));
        name.truncate(MAX_TOOL_NAME);
        name
    }
}

/// Acquires a session's servers from the pool and lists their tools, once, when the agent is
/// built (`Tool::spec` is synchronous, so the declarations must be known up front).
pub async fn session_tools(
    factory: &McpFactory,
    servers: &[McpServerSpec],
    reach_of: impl Fn(&McpServerSpec) -> Reach,
) -> Result<Vec<Arc<dyn Tool>>, McpServerError> {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for server in servers {
        let connection = factory.acquire_reaching(server, reach_of(server)).await?;
        for info in connection.tools().await? {
            let input_schema = serde_json::Value::Object((*info.input_schema).clone());
            tools.push(Arc::new(McpTool {
                connection: connection.clone(),
                spec: ToolSpec {
                    name: McpTool::namespaced(&server.name, &info.name),
                    description: info.description.as_deref().unwrap_or_default().to_owned(),
                    input_schema: input_schema.into(),
                },
                remote_name: info.name.to_string(),
                timeout: server.call_timeout(),
            }));
        }
    }
    Ok(tools)
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    /// Forwards the call. Interrupting the turn drops this future (see `ToolScope::call`),
    /// which makes rmcp send `notifications/cancelled`; so does the per-call timeout.
    fn call(&self, input: serde_json::Value, _cancel: CancellationToken) -> BoxFuture<'_, ToolOutput> {
        Box::pin(async move {
            let arguments = match input {
                serde_json::Value::Object(map) => Some(map),
                serde_json::Value::Null => None,
                other => return ToolOutput::error(format!("arguments must be a JSON object, got {other}")),
            };
            match tokio::time::timeout(self.timeout, self.connection.call(&self.remote_name, arguments)).await {
                Ok(Ok(result)) => render(result),
                Ok(Err(err)) => ToolOutput::error(format!("{}: {err}", self.spec.name)),
                Err(_) => ToolOutput::error(format!(
                    "{}: no answer within {}s; the call was cancelled",
                    self.spec.name,
                    self.timeout.as_secs()
                )),
            }
        })
    }
}

/// Text content joined; other content described in a line; `is_error` kept.
pub fn render(result: CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        parts.push(match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => {
                format!("[image: {}, {} bytes base64]", image.mime_type, image.data.len())
            }
            ContentBlock::Audio(audio) => {
                format!("[audio: {}, {} bytes base64]", audio.mime_type, audio.data.len())
            }
            ContentBlock::Resource(embedded) => match &embedded.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => format!("[resource {uri}]\n{text}"),
                ResourceContents::BlobResourceContents { uri, blob, .. } => {
                    format!("[resource {uri}: binary, {} bytes base64]", blob.len())
                }
                _ => "[resource of an unknown kind]".to_owned(),
            },
            ContentBlock::ResourceLink(link) => format!("[resource link: {} ({})]", link.uri, link.name),
            _ => "[content of an unknown kind]".to_owned(),
        });
    }
    let mut content = parts.join("\n");
    if content.is_empty()
        && let Some(structured) = &result.structured_content
    {
        content = structured.to_string();
    }
    if content.len() > OUTPUT_CAP_BYTES {
        let cut = truncate_at_char_boundary(&content, OUTPUT_CAP_BYTES).len();
        let total = content.len();
        content.truncate(cut);
        let _ = write!(content, "\n[output truncated: {total} bytes, first {cut} shown]");
    }
    ToolOutput { content, is_error: result.is_error.unwrap_or(false) }
}
