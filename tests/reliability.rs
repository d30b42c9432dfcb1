//! The reliability suite (issue 12, docs/RELIABILITY.md): the built binary under load, crashes,
//! provider chaos, races and hostile input. Each test is bounded in time and prints its figure
//! as a line starting with `reliability:`. Full profile only (`required-features`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/mod.rs"]
mod common;
#[path = "reliability/mod.rs"]
mod reliability;
