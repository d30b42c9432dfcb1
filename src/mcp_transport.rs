//! One rmcp transport type for every connection deputy makes or takes itself.
//!
//! rmcp's service loop is generic over its transport, so each transport deputy serves or
//! connects over (stdio, the background server's socket, a client's handed-over stdio, a child
//! process, streamable HTTP as a client) compiled a whole copy of that loop, with its futures
//! and drop glue (issue 31's binary size). [`BoxedTransport`] puts them all behind one type per
//! role: the loop is compiled once as a server and once as a client (besides the copy for the
//! streamable HTTP server's own sessions, which rmcp starts itself), and each message costs one
//! boxed future more, which is nothing beside the JSON it carries. Names nothing of deputy's.

use std::future::Future;
use std::pin::Pin;

use rmcp::service::{RxJsonRpcMessage, ServiceRole, TxJsonRpcMessage};
use rmcp::transport::{DynamicTransportError, IntoTransport, Transport};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Any transport of role `R`, its type erased; its errors keep the inner transport's name.
pub struct BoxedTransport<R: ServiceRole>(Box<dyn ErasedTransport<R>>);

impl<R: ServiceRole> BoxedTransport<R> {
    /// Whatever rmcp accepts as a transport: a [`Transport`], a reader and writer pair, a
    /// sink and stream.
    pub fn new<T, E, A>(transport: T) -> Self
    where
        T: IntoTransport<R, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        Self(Box::new(transport.into_transport()))
    }
}

impl<R: ServiceRole> Transport<R> for BoxedTransport<R> {
    type Error = DynamicTransportError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<R>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.0.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<R>>> + Send {
        self.0.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.0.close()
    }
}

/// [`Transport`] with boxed futures, so it can be a trait object.
trait ErasedTransport<R: ServiceRole>: Send {
    fn send(&mut self, item: TxJsonRpcMessage<R>) -> BoxFuture<'static, Result<(), DynamicTransportError>>;
    fn receive(&mut self) -> BoxFuture<'_, Option<RxJsonRpcMessage<R>>>;
    fn close(&mut self) -> BoxFuture<'_, Result<(), DynamicTransportError>>;
}

impl<R: ServiceRole, T: Transport<R> + 'static> ErasedTransport<R> for T {
    fn send(&mut self, item: TxJsonRpcMessage<R>) -> BoxFuture<'static, Result<(), DynamicTransportError>> {
        let sent = Transport::send(self, item);
        Box::pin(async move { sent.await.map_err(DynamicTransportError::new::<T, R>) })
    }

    fn receive(&mut self) -> BoxFuture<'_, Option<RxJsonRpcMessage<R>>> {
        Box::pin(Transport::receive(self))
    }

    fn close(&mut self) -> BoxFuture<'_, Result<(), DynamicTransportError>> {
        Box::pin(async move { Transport::close(self).await.map_err(DynamicTransportError::new::<T, R>) })
    }
}
