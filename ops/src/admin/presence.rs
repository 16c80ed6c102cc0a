//! `POST` / `DELETE /v1/presence/{wallet}/sources/{source}`: another service (a voice SFU, a chat)
//! holds or releases its presence source for a wallet (`plaza_directory::sources`), behind the
//! admin token like every `/v1/` call. The gRPC twin is `plaza.node.v1.RoomHost/PresenceSource`.
//!
//! Answers: `{"ok":true,"wallet":…,"room":…,"sources":["room","voice"]}` for a hold,
//! `{"ok":true,"wallet":…,"online":false}` for a release (`online` false iff that was the
//! wallet's last source); `400 invalid` an unknown source name or a bad wallet, `404
//! not_found` a wallet that is not online (a source joins a wallet in a room), `409` a write
//! raced twice by a new activation of the room, `503` the directory not connected or not
//! answering.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use plaza_directory::{DirectoryError, sources};
use serde_json::json;

use super::AdminState;

fn error(e: &DirectoryError) -> Response {
    let status = match e {
        DirectoryError::Invalid(_) => StatusCode::BAD_REQUEST,
        DirectoryError::NotFound(_) => StatusCode::NOT_FOUND,
        DirectoryError::StaleEpoch { .. } | DirectoryError::NotOwner => StatusCode::CONFLICT,
        DirectoryError::Conflict(_) => StatusCode::CONFLICT,
        DirectoryError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    (
        status,
        Json(json!({"ok": false, "error": e.code(), "message": e.to_string()})),
    )
        .into_response()
}

fn directory(s: &AdminState) -> Option<plaza_directory::SharedDirectory> {
    s.directory.get().cloned()
}

fn not_connected() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({
            "ok": false,
            "error": "unavailable",
            "message": "the directory is not connected yet",
        })),
    )
        .into_response()
}

/// `POST /v1/presence/{wallet}/sources/{source}`.
pub(crate) async fn hold(
    State(s): State<Arc<AdminState>>,
    Path((wallet, source)): Path<(String, String)>,
) -> Response {
    change(&s, wallet, &source, true).await
}

/// `DELETE /v1/presence/{wallet}/sources/{source}`.
pub(crate) async fn release(
    State(s): State<Arc<AdminState>>,
    Path((wallet, source)): Path<(String, String)>,
) -> Response {
    change(&s, wallet, &source, false).await
}

async fn change(s: &AdminState, wallet: String, source: &str, hold: bool) -> Response {
    let Some(dir) = directory(s) else {
        return not_connected();
    };
    let res = match sources::external(source) {
        Ok(src) => sources::apply(&*dir, &wallet, src, hold).await,
        Err(e) => Err(e),
    };
    match (res, hold) {
        (Ok(Some(entry)), true) => Json(json!({
            "ok": true,
            "wallet": entry.wallet,
            "room": entry.room,
            "sources": sources::names(entry.sources),
        }))
        .into_response(),
        (Ok(entry), _) => {
            Json(json!({"ok": true, "wallet": wallet, "online": entry.is_some()})).into_response()
        }
        (Err(e), _) => error(&e),
    }
}
