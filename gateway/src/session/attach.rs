//! The attach in flight: pin the session to its room's node, open the stream, wait for the ack,
//! and retry while the room is being (re)placed ([`attach_with_retries`]).

use std::sync::Arc;
use std::time::Duration;

use plaza_node_proto::{self as node, NodeInbound, node_inbound, node_outbound};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument as _;

use super::{Downlink, NodeLink, Uplink, is_shutdown};
use crate::Shared;
use crate::router::{PinError, Transport};
use crate::session_core::{AttachCause, AttachResult, DetachReason};

/// How long a node may take to open an attach stream and acknowledge it.
const ATTACH_ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a join keeps retrying while its room is being placed.
const JOIN_DEADLINE: Duration = Duration::from_secs(10);

/// How often a stall re-attach asks again whether the stalled node's lease lapsed.
const STALL_RETRY: Duration = Duration::from_millis(250);
/// What an attach needs (owned: the attach runs beside the session's loop).
pub(super) struct AttachArgs {
    pub(super) session_id: u64,
    pub(super) wallet: String,
    pub(super) operator: bool,
    pub(super) room: String,
    pub(super) cause: AttachCause,
    pub(super) entity: u32,
    pub(super) avoid: Option<String>,
}

/// Pins the session to its room's node and opens its stream; retries while the room is being
/// (re)placed, up to the deadline (the resume deadline for a re-attach). A stall re-attach does
/// not attach to the stalled node while the room's lease on it is live.
pub(super) async fn attach_with_retries(
    shared: Arc<Shared>,
    a: AttachArgs,
) -> (AttachResult, Option<NodeLink>) {
    let started = Instant::now();
    let deadline = started
        + if a.cause.is_resume() {
            shared.limits.resume_deadline
        } else {
            JOIN_DEADLINE
        };
    // Past half the deadline a live owner is tried again (it may only have been slow).
    let avoid_until = started + shared.limits.resume_deadline / 2;
    let mut backoff = Duration::from_millis(50);
    loop {
        let avoid = a.avoid.as_deref().filter(|_| Instant::now() < avoid_until);
        let wait = match try_attach(&shared, &a, avoid).await {
            Ok(link) => {
                let node = link.node_id.clone();
                return (
                    AttachResult::Attached {
                        entity: link.entity,
                        node,
                    },
                    Some(link.link),
                );
            }
            Err(AttachFail::Detached(d)) => {
                return (
                    AttachResult::Detached {
                        reason: DetachReason::from_wire(d.reason),
                        message: d.message,
                    },
                    None,
                );
            }
            Err(AttachFail::Invalid(msg)) => return (AttachResult::Invalid(msg), None),
            Err(AttachFail::OwnerStalled) => STALL_RETRY,
            Err(AttachFail::NodeTls(why)) => {
                // A configuration fault (wrong CA, expired or refused certificate), not a
                // passing one: counted and logged loudly, then retried like any unreachable
                // node (certificates may be rotated in place).
                shared.metrics.node_tls_failures.inc();
                tracing::warn!(
                    session = a.session_id,
                    room = a.room,
                    why,
                    "TLS handshake with the room node failed"
                );
                shared.router.invalidate(&a.room);
                let b = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                b
            }
            Err(AttachFail::Retry(why)) => {
                tracing::debug!(
                    session = a.session_id,
                    room = a.room,
                    why,
                    "attach failed; retrying"
                );
                shared.router.invalidate(&a.room);
                let b = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                b
            }
        };
        if Instant::now() + wait > deadline || is_shutdown(&shared.shutdown) {
            return (AttachResult::GaveUp, None);
        }
        tokio::time::sleep(wait).await;
    }
}

/// An attached link and the ack's entity.
struct Attached {
    link: NodeLink,
    node_id: String,
    entity: u32,
}

async fn try_attach(
    shared: &Shared,
    a: &AttachArgs,
    avoid: Option<&str>,
) -> Result<Attached, AttachFail> {
    let route = match shared.router.pin(a.session_id, &a.room, avoid).await {
        Ok(r) => r,
        Err(PinError::OwnerStalled) => return Err(AttachFail::OwnerStalled),
        Err(e) => return Err(AttachFail::Retry(e.to_string())),
    };
    let resume = a.cause.is_resume();
    let attach = node::AttachRequest {
        room_id: a.room.clone(),
        session_id: a.session_id,
        wallet: a.wallet.clone(),
        resume_entity: a.entity,
        resume,
        operator: a.operator,
    };
    let span = tracing::info_span!("gateway.attach", room = a.room, node = %route.node_id, resume);
    let refused = |s: tonic::Status| match s.code() {
        tonic::Code::InvalidArgument => AttachFail::Invalid(s.message().to_owned()),
        _ => match tls_failure(&s) {
            Some(why) => AttachFail::NodeTls(why),
            None => AttachFail::Retry(s.to_string()),
        },
    };
    let (up, mut stream) = match &route.transport {
        Transport::Grpc(client) => {
            let (tx, rx) = mpsc::channel(64);
            let req = NodeInbound {
                body: Some(node_inbound::Body::Attach(attach)),
            };
            tx.try_send(req)
                .map_err(|_| AttachFail::Retry("channel".into()))?;
            let mut client = client.clone();
            let mut req = tonic::Request::new(ReceiverStream::new(rx));
            span.in_scope(|| crate::trace::inject(&mut req));
            if let Some(t) = &shared.node_token {
                req.metadata_mut().insert("authorization", t.clone());
            }
            // A node that accepts the stream but never answers (paused, wedged) must not hold
            // the session: give up on it like on a missing ack, and re-resolve.
            let resp =
                tokio::time::timeout(ATTACH_ACK_TIMEOUT, client.attach(req).instrument(span))
                    .await
                    .map_err(|_| AttachFail::Retry("node did not answer the attach".into()))?
                    .map_err(refused)?;
            (
                Uplink::Grpc(tx),
                Downlink::Grpc(Box::new(resp.into_inner())),
            )
        }
        Transport::Local(local) => {
            // No channel and no task: the uplink casts into the room's mailbox.
            let link = local
                .attach(attach)
                .instrument(span)
                .await
                .map_err(refused)?;
            (Uplink::Local(link.uplink), Downlink::Local(link.downlink))
        }
    };
    // From here on, an early return drops `up`: the node detaches the session.
    let first = tokio::time::timeout(ATTACH_ACK_TIMEOUT, stream.recv())
        .await
        .map_err(|_| AttachFail::Retry("no ack".into()))?
        .ok_or_else(|| AttachFail::Retry("stream ended before ack".into()))?
        .map_err(refused)?;
    match first.body {
        Some(node_outbound::Body::Ack(ack)) => Ok(Attached {
            link: NodeLink { up, stream },
            node_id: route.node_id,
            entity: ack.entity_id,
        }),
        Some(node_outbound::Body::Detach(d)) => Err(AttachFail::Detached(d)),
        _ => Err(AttachFail::Retry("unexpected first message".into())),
    }
}

enum AttachFail {
    Retry(String),
    /// The TLS handshake with the node failed (its certificate did not verify, or it refused
    /// ours).
    NodeTls(String),
    /// The room's lease is still live on the node the attach avoids.
    OwnerStalled,
    Invalid(String),
    Detached(node::Detach),
}

/// The rustls error under a failed call, if the call failed in the TLS handshake.
fn tls_failure(status: &tonic::Status) -> Option<String> {
    use std::error::Error as _;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = status.source();
    while let Some(e) = cur {
        if let Some(t) = e.downcast_ref::<rustls::Error>() {
            return Some(t.to_string());
        }
        // `io::Error::source` skips the error it wraps; tokio-rustls puts rustls' error there.
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(t) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
        {
            return Some(t.to_string());
        }
        cur = e.source();
    }
    None
}
