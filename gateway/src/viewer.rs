//! The room viewer, served on the client listener: `GET /` is the page, `GET /viewer.js` its
//! script (the TypeScript SDK's viewer, built from `sdk/typescript/viewer/` and committed, so
//! `plaza up` needs no build step; the SDK's tests prove the bundle is what its sources make).
//!
//! Static bytes compiled in; no state, no I/O beyond answering.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

const INDEX_HTML: &str = include_str!("../../sdk/typescript/viewer/index.html");
const VIEWER_JS: &str = include_str!("../../sdk/typescript/viewer/dist/viewer.js");

/// The viewer's routes, to merge into the client listener's router.
pub(crate) fn router() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/viewer.js", get(script))
}

async fn index() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX_HTML,
    )
}

async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        VIEWER_JS,
    )
}
