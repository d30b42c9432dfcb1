//! [`TypedTool`]: a tool whose arguments are a Rust type. The schema the model sees and the
//! parsing of what it sends both come from that one type, so they cannot disagree.
//!
//! The builtins and the shell implement it; the blanket `impl<T: TypedTool> Tool for T` turns
//! each into a [`Tool`]. Tools whose schema is only known at run time (MCP servers' tools)
//! implement [`Tool`] directly.

use std::any::TypeId;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolOutput};
use crate::llm::ToolSpec;

/// A tool with typed arguments; see the module doc.
pub trait TypedTool: Send + Sync {
    /// The arguments. Their JSON Schema (doc comments included) is the tool's `input_schema`.
    type Args: DeserializeOwned + JsonSchema + Send;

    /// The name the model calls the tool by.
    const NAME: &'static str;

    /// What the tool does, for the model.
    fn description(&self) -> String;

    /// Runs one call with arguments that parsed. `cancel` fires when the turn is interrupted.
    fn run(&self, args: Self::Args, cancel: CancellationToken) -> impl Future<Output = ToolOutput> + Send;
}

impl<T: TypedTool + 'static> Tool for T {
    fn spec(&self) -> ToolSpec {
        declaration::<T>(self.description())
    }

    /// Name and schema come from the type, so the type and the description identify the
    /// declaration.
    fn shared_spec(&self) -> Arc<ToolSpec> {
        super::shared_specs::shared_typed(TypeId::of::<T>(), self.description(), declaration::<T>)
    }

    /// Arguments that do not parse are answered to the model, which can correct them.
    fn call(&self, input: serde_json::Value, cancel: CancellationToken) -> BoxFuture<'_, ToolOutput> {
        Box::pin(async move {
            match serde_json::from_value::<T::Args>(input) {
                Ok(args) => self.run(args, cancel).await,
                Err(err) => ToolOutput::error(format!("invalid arguments: {err}")),
            }
        })
    }
}

/// `T`'s declaration, its schema generated from `T::Args`.
fn declaration<T: TypedTool>(description: String) -> ToolSpec {
    ToolSpec {
        name: T::NAME.to_owned(),
        description,
        input_schema: serde_json::to_value(schemars::schema_for!(T::Args)).unwrap_or_default().into(),
    }
}
