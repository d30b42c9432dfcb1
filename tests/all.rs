//! The one integration-test binary: every suite shares the build and the `common` helpers.
// clippy.toml lets `#[test]` functions unwrap; the shared helpers in `common` are not tests to
// clippy, but they are test code all the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod suite;
