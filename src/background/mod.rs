//! The per-store background server: sessions outlive the client process, and one store
//! serves many clients.
//!
//! `deputy serve` over stdio, with a store, does not open the store itself: it attaches to the
//! store's background server over a Unix socket ([`attach`]), starting it when none answers,
//! and hands its stdin and stdout over to the server ([`stdio_handover`]), or, where they are
//! not pipes or sockets, relays MCP frames between its stdio and the socket. The server
//! ([`host`]) owns the store and serves every attached client with the same MCP implementation
//! as stdio, each with the context (workspace, default model, config file, provider
//! credentials) it brought in its first line ([`frames`]). Where the socket, pid file and log are is [`location`].
//!
//! A command on a store the server owns (`deputy sessions`, `turn`, `project`, …) runs there:
//! it connects asking for deputy's JSON-RPC instead of MCP ([`remote`]).
//!
//! `serve --http` asks a running background server to listen in its place; with none running
//! it owns the store itself and serves the socket too ([`http_owner`]). `--no-daemon` (and
//! `--ephemeral`, and builds without a store) keep the in-process servers of
//! [`crate::server`], with no socket.

pub mod attach;
pub mod frames;
pub mod host;
pub mod http_owner;
pub mod inspector;
pub mod location;
pub(crate) mod os;
pub(crate) mod remote;
mod stdio_handover;

pub use attach::{Found, StartOptions, serve_attached, status, stop};
pub use host::{HostExit, HostOptions, STORE_HELD_EXIT};
pub use location::Location;
