//! Pages in a real headless browser (Debian's Chromium, `DEPUTY_TEST_CHROMIUM` to use another):
//! the session inspector at `/ui`. A test target of its own, which a plain `cargo test` leaves
//! out (it needs the browser installed); `.ci/run` installs Chromium and runs it by name:
//! `cargo test --test browser`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/mod.rs"]
mod common;
#[path = "browser/inspector.rs"]
mod inspector;
