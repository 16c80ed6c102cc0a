//! The operator console: `GET /console`, one static HTML page with its script inline
//! (`console.html`, compiled in), over the operator API. The page itself holds no data, so it
//! is served without the token; every call it makes goes through the API's authentication: on a
//! 401 it asks for the admin token, keeps it in `sessionStorage` and sends it as
//! `Authorization: Bearer`. Without a configured token, a loopback browser gets in as for the
//! API.

use axum::http::header;
use axum::response::IntoResponse;

const PAGE: &str = include_str!("console.html");

/// `GET /console`.
pub(crate) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            // The page only talks to its own origin.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src 'self' data:; form-action 'none'; frame-ancestors 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        PAGE,
    )
}
