//! The operator API's node, room and session calls (behind the admin token, audited by
//! `require_token` in the admin module) and their typed JSON errors.
//!
//! Every answer is JSON: `{"ok":true,…}` or `{"ok":false,"error":CODE,"message":…}` with the
//! status the code implies (400 a bad path or body, 404 an unknown room, member or session, 409 a
//! call the process's roles cannot serve or a teleport in a room already handed off, 503 not started yet / the directory or the room does
//! not answer). Lists are bounded ([`MAX_ROOMS`], [`MAX_SESSIONS`], the room core's
//! `MAX_VIEW_MEMBERS`); each says how many there are in all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use plaza_gateway::sessions::Sessions;
use plaza_room_actor::NodeControl;
use plaza_room_actor::admin::{RoomCallError, RoomReport};
use plaza_room_core::admin::TeleportTarget;
use serde_json::{Value, json};

use super::AdminState;
use crate::metrics::ProcessSample;

/// Most rooms `GET /v1/rooms` lists.
pub const MAX_ROOMS: usize = 200;
/// Most sessions `GET /v1/sessions` lists (and the largest `?limit=`).
pub const MAX_SESSIONS: usize = 1000;
/// Largest request body an operator call reads, bytes.
pub const MAX_BODY: usize = 4096;

/// What the operator calls act on, set once the roles run.
pub struct Operator {
    /// The node role, if this process runs one.
    pub node: Option<NodeControl>,
    /// The gateway's session registry, if this process runs a gateway.
    pub sessions: Option<Sessions>,
    /// The roles, as named in `plaza up|node|gateway`.
    pub roles: Vec<&'static str>,
    /// When the process started.
    pub started: Instant,
    /// How long a drain waits for the node to empty (`node.drain_timeout_ms`).
    pub drain_timeout: Duration,
}

/// A typed operator error.
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    fn starting() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "starting",
            "the process is still starting",
        )
    }

    fn no_node() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "no_node_role",
            "this process runs no room node",
        )
    }

    fn bad_body(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_body", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({ "ok": false, "error": self.code, "message": self.message })),
        )
            .into_response()
    }
}

impl From<RoomCallError> for ApiError {
    fn from(e: RoomCallError) -> Self {
        let status = match &e {
            RoomCallError::NotFound(_) => StatusCode::NOT_FOUND,
            RoomCallError::Refused(r) => match r {
                plaza_room_core::admin::AdminRefusal::NotMember(_) => StatusCode::NOT_FOUND,
                plaza_room_core::admin::AdminRefusal::Frozen => StatusCode::CONFLICT,
                _ => StatusCode::BAD_REQUEST,
            },
            RoomCallError::Timeout(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self::new(status, e.code(), e.to_string())
    }
}

type ApiResult = Result<Json<Value>, ApiError>;

fn operator(s: &AdminState) -> Result<&Operator, ApiError> {
    s.operator.get().ok_or_else(ApiError::starting)
}

fn node(s: &AdminState) -> Result<&NodeControl, ApiError> {
    operator(s)?.node.as_ref().ok_or_else(ApiError::no_node)
}

/// `GET /v1/node`: this process.
pub(crate) async fn get_node(State(s): State<Arc<AdminState>>) -> ApiResult {
    let op = operator(&s)?;
    let (rooms, node_sessions, draining, id) = match &op.node {
        Some(n) => (
            Some(n.rooms().list().await.len()),
            Some(n.sessions().max(0)),
            n.is_draining(),
            n.node_id().to_owned(),
        ),
        None => (None, None, false, String::new()),
    };
    let process = ProcessSample::read().map(|p| {
        json!({
            "cpu_seconds": p.cpu_seconds,
            "resident_bytes": p.resident_bytes,
            "virtual_bytes": p.virtual_bytes,
            "open_fds": p.open_fds,
            "threads": p.threads,
        })
    });
    Ok(Json(json!({
        "ok": true,
        "node": {
            "id": (!id.is_empty()).then_some(id),
            "version": env!("CARGO_PKG_VERSION"),
            "revision": option_env!("PLAZA_GIT_REVISION").unwrap_or("unknown"),
            "roles": op.roles,
            "uptime_s": op.started.elapsed().as_secs_f64(),
            "ready": s.ready.load(std::sync::atomic::Ordering::Relaxed),
            "status": s.status(),
            "draining": draining,
            "rooms": rooms,
            "node_sessions": node_sessions,
            "gateway_sessions": op.sessions.as_ref().map(Sessions::len),
            "process": process,
        }
    })))
}

/// `GET /v1/nodes`: the cluster's live nodes, from the directory.
pub(crate) async fn get_nodes(State(s): State<Arc<AdminState>>) -> ApiResult {
    let Some(directory) = s.directory.get() else {
        return Err(ApiError::starting());
    };
    let nodes = directory.live_nodes().await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "directory_unavailable",
            format!("the directory does not answer: {}", e.code()),
        )
    })?;
    let nodes: Vec<Value> = nodes
        .into_iter()
        .take(MAX_ROOMS)
        .map(|n| json!({ "id": n.id, "addr": n.addr, "load": n.load, "draining": n.draining }))
        .collect();
    Ok(Json(json!({ "ok": true, "nodes": nodes })))
}

fn report_json(r: &RoomReport, full: bool) -> Value {
    let v = &r.view;
    let mut o = json!({
        "id": v.room,
        "node": r.node,
        "epoch": r.epoch.to_string(),
        "tick": v.tick,
        "members": v.members.len(),
        "sessions": r.sessions,
        "awaited": r.awaited,
        "frozen": r.frozen,
        "tick_p99_ms": v.tick_p99_s.map(|s| s * 1000.0),
        "bytes_per_client_per_s": v.bytes_per_client_per_s,
        "props_held": v.props_held.len(),
        "open_consents": v.consents.len(),
        "muted_dropped": r.muted_dropped,
    });
    if full {
        o["members"] = v
            .members
            .iter()
            .map(|m| {
                json!({
                    "session": m.session.to_string(),
                    "wallet": m.wallet,
                    "entity": m.entity,
                    "display_name": m.display_name,
                    "position": m.position,
                    "props_held": m.props_held,
                    "muted": m.muted,
                })
            })
            .collect();
        o["member_count"] = json!(v.members.len());
        o["props_held"] = v
            .props_held
            .iter()
            .map(|(prop, holder)| json!({ "prop_id": prop, "holder_entity": holder }))
            .collect();
        o["open_consents"] = v
            .consents
            .iter()
            .map(|c| {
                json!({
                    "id": c.id, "kind": c.kind, "state": c.state,
                    "requester_entity": c.requester, "target_entity": c.target,
                })
            })
            .collect();
    }
    o
}

/// `GET /v1/rooms`: the rooms live on this node, with their counters.
pub(crate) async fn get_rooms(State(s): State<Arc<AdminState>>) -> ApiResult {
    let op = operator(&s)?;
    let Some(node) = &op.node else {
        return Ok(Json(json!({ "ok": true, "rooms": [], "total": 0 })));
    };
    let ids = node.rooms().list().await;
    let total = ids.len();
    // Every room answers on its own actor: ask them all at once, so one busy room costs its own
    // answer time (at most the 2 s call timeout), not everyone's.
    let mut asks = tokio::task::JoinSet::new();
    for id in ids.into_iter().take(MAX_ROOMS) {
        let rooms = node.rooms().clone();
        asks.spawn(async move { rooms.inspect(&id).await });
    }
    let mut reports = Vec::new();
    while let Some(r) = asks.join_next().await {
        // A room that stopped since the list (or did not answer) is left out.
        if let Ok(Ok(r)) = r {
            reports.push(r);
        }
    }
    reports.sort_by(|a, b| a.view.room.cmp(&b.view.room));
    let rooms: Vec<Value> = reports.iter().map(|r| report_json(r, false)).collect();
    Ok(Json(json!({ "ok": true, "rooms": rooms, "total": total })))
}

/// `GET /v1/rooms/{id}`: one room with its members, held props and open consents.
pub(crate) async fn get_room(
    State(s): State<Arc<AdminState>>,
    Path(room): Path<String>,
) -> ApiResult {
    let r = node(&s)?.rooms().inspect(&room).await?;
    Ok(Json(json!({ "ok": true, "room": report_json(&r, true) })))
}

/// `GET /v1/sessions[?limit=N]`: this gateway's sessions, oldest first.
pub(crate) async fn get_sessions(
    State(s): State<Arc<AdminState>>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> ApiResult {
    let limit = match q.get("limit") {
        Some(l) => l
            .parse::<usize>()
            .map_err(|_| {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_query", "limit: not a number")
            })?
            .min(MAX_SESSIONS),
        None => MAX_SESSIONS,
    };
    let op = operator(&s)?;
    let Some(sessions) = &op.sessions else {
        return Ok(Json(json!({ "ok": true, "sessions": [], "total": 0 })));
    };
    let (list, total) = sessions.list(limit);
    let list: Vec<Value> = list
        .into_iter()
        .map(|i| {
            json!({
                // As a string: JavaScript numbers lose precision past 2^53.
                "id": i.id.to_string(),
                "wallet": i.wallet,
                "room": i.room,
                "node": i.node,
                "age_s": i.age.as_secs_f64(),
            })
        })
        .collect();
    Ok(Json(
        json!({ "ok": true, "sessions": list, "total": total }),
    ))
}

/// `POST /v1/sessions/{id}/kick`: closes the session with 4010 `kicked`.
pub(crate) async fn kick(State(s): State<Arc<AdminState>>, Path(id): Path<String>) -> ApiResult {
    let sid: u64 = id.parse().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_session_id",
            "a session id is a decimal u64",
        )
    })?;
    let op = operator(&s)?;
    let kicked = op.sessions.as_ref().is_some_and(|r| r.kick(sid));
    if !kicked {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "session_not_found",
            format!("no session {sid} on this gateway"),
        ));
    }
    let code = plaza_gateway::close::CloseCode::Kicked;
    Ok(Json(json!({
        "ok": true,
        "session": id,
        "close_code": code.code(),
        "close_reason": code.name(),
    })))
}

/// `POST /v1/rooms/{id}/members/{wallet}/mute` and `…/unmute`.
async fn set_mute(s: &AdminState, room: &str, wallet: &str, muted: bool) -> ApiResult {
    node(s)?.rooms().mute(room, wallet, muted).await?;
    Ok(Json(
        json!({ "ok": true, "room": room, "wallet": wallet, "muted": muted }),
    ))
}

pub(crate) async fn mute(
    State(s): State<Arc<AdminState>>,
    Path((room, wallet)): Path<(String, String)>,
) -> ApiResult {
    set_mute(&s, &room, &wallet, true).await
}

pub(crate) async fn unmute(
    State(s): State<Arc<AdminState>>,
    Path((room, wallet)): Path<(String, String)>,
) -> ApiResult {
    set_mute(&s, &room, &wallet, false).await
}

/// `POST /v1/rooms/{id}/close`.
pub(crate) async fn close_room(
    State(s): State<Arc<AdminState>>,
    Path(room): Path<String>,
) -> ApiResult {
    let n = node(&s)?.rooms().close(&room).await?;
    Ok(Json(json!({ "ok": true, "room": room, "detached": n })))
}

/// `POST /v1/node/drain`: the node drains as on SIGTERM (not ready, rooms handed off,
/// sessions moved by the gateways); the process stays up. Answers 202 at once; the drain runs
/// on (`GET /v1/node` shows `draining` and the room count).
pub(crate) async fn drain(State(s): State<Arc<AdminState>>) -> Result<Response, ApiError> {
    let op = operator(&s)?;
    let node = op.node.clone().ok_or_else(ApiError::no_node)?;
    if node.is_draining() {
        return Ok(Json(json!({ "ok": true, "draining": true, "started": false })).into_response());
    }
    s.set_status("draining");
    s.ready.store(false, std::sync::atomic::Ordering::Relaxed);
    let timeout = op.drain_timeout;
    tokio::spawn(async move {
        let handed = node.drain(timeout).await;
        tracing::info!(
            rooms = handed,
            "operator drain finished; the process stays up"
        );
    });
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "ok": true, "draining": true, "started": true })),
    )
        .into_response())
}

/// The teleport body: `{"spawn": NAME}` or `{"position": [x, y, z]}`, exactly one.
pub(crate) fn parse_teleport(body: &[u8]) -> Result<TeleportTarget, ApiError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        spawn: Option<String>,
        position: Option<[f32; 3]>,
    }
    if body.len() > MAX_BODY {
        return Err(ApiError::bad_body("body too large"));
    }
    let b: Body = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_body(format!("not a teleport body: {e}")))?;
    match (b.spawn, b.position) {
        (Some(name), None) => Ok(TeleportTarget::Spawn(name)),
        (None, Some(p)) => Ok(TeleportTarget::Position(p)),
        _ => Err(ApiError::bad_body(
            "give exactly one of `spawn` (a name) or `position` ([x, y, z])",
        )),
    }
}

/// `POST /v1/rooms/{id}/members/{wallet}/teleport`.
pub(crate) async fn teleport(
    State(s): State<Arc<AdminState>>,
    Path((room, wallet)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let target = parse_teleport(&body)?;
    let to = node(&s)?.rooms().teleport(&room, &wallet, target).await?;
    Ok(Json(
        json!({ "ok": true, "room": room, "wallet": wallet, "position": to }),
    ))
}

/// Unknown `/v1/…` paths answer typed JSON too.
pub(crate) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such operator call")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn teleport_bodies_are_checked() {
        assert_eq!(
            parse_teleport(br#"{"spawn":"stage"}"#).ok(),
            Some(TeleportTarget::Spawn("stage".into()))
        );
        assert_eq!(
            parse_teleport(br#"{"position":[1,0,2.5]}"#).ok(),
            Some(TeleportTarget::Position([1.0, 0.0, 2.5]))
        );
        for bad in [
            &br#"{}"#[..],
            br#"{"spawn":"a","position":[0,0,0]}"#,
            br#"{"position":[0,0]}"#,
            br#"{"where":"x"}"#,
            b"not json",
        ] {
            let e = parse_teleport(bad).expect_err("refused");
            assert_eq!((e.status, e.code), (StatusCode::BAD_REQUEST, "bad_body"));
        }
    }
}
