//! `/ui`: the session inspector, a page over the REST API (`ui/` in the repository, embedded in
//! the binary). The assets hold no data, so they are served without a token; every read and
//! action goes through `/v1` with the viewer's token and scopes, like any other client.
//!
//! Each answer carries a strict Content-Security-Policy (scripts, styles and requests to this
//! origin only, no inline code, no framing), so a session's content can never run as code in
//! the page, and the page can reach nothing but deputy.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The inspector's files, from `ui/`.
#[derive(rust_embed::Embed)]
#[folder = "ui/"]
struct Assets;

/// Where the page asks to be loaded from, and nothing else.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /ui`: the page.
pub async fn page() -> Response {
    asset("index.html")
}

/// `GET /ui/{file}`: one of its files.
pub async fn file(Path(name): Path<String>) -> Response {
    asset(&name)
}

fn asset(name: &str) -> Response {
    let Some(file) = Assets::get(name) else {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    };
    let content_type = match name.rsplit_once('.').map(|(_, extension)| extension) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    };
    let mut response = file.data.into_owned().into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
