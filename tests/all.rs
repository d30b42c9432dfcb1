//! The one integration-test binary: every suite shares the build and the `common` helpers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod suite;
