//! Restoring a room from the handoff state its previous activation left (a drain's, or the last
//! checkpoint of one that crashed), brought up to date from the audit log.

use std::collections::HashMap;
use std::time::Duration;

use plaza_directory::Epoch;
use plaza_room_core::{Room, SessionId};
use tokio::time::Instant;

use super::host::{Awaited, HostArgs, RoomHost};
use super::io::ShellClock;
use super::{RoomArgs, unix_ms};

/// The host of a new activation: its room (restored from `args.handoff` if any) on the shell's
/// clock from `started`.
pub(super) async fn new_host(args: RoomArgs, started: Instant) -> RoomHost {
    let mut room = Room::new(args.room_id.clone(), args.cfg.room.clone());
    room.set_max_catch_up(args.cfg.max_catch_up);
    let (awaited, last_audit_seq) = match &args.handoff {
        Some((writer, bytes)) => restore_handoff(&mut room, &args, *writer, bytes, started).await,
        None => (Default::default(), 0),
    };
    RoomHost::new(HostArgs {
        room,
        room_id: args.room_id,
        lease_ttl: args.lease.ttl(),
        cfg: args.cfg,
        metrics: args.metrics,
        node_id: args.node_id,
        epoch: args.epoch,
        lease: args.activation,
        clock: std::sync::Arc::new(ShellClock { started }),
        awaited,
        last_audit_seq,
    })
}

/// Restores the room from a handoff state written by the activation of epoch `writer`;
/// returns the handed-off members to wait for and the audit sequence number the room's log
/// stands at (the room's steps continue from the restored room time, [`Room::restore`]). A handoff that does not decode is logged and
/// skipped: the room starts fresh and resumed sessions join with the entity their gateway
/// remembers.
///
/// A checkpoint may be older than the writer's last audit records (it crashed between two
/// checkpoints): the audit log is the truth, so the consent records the writer appended after
/// the checkpoint are folded in first ([`crate::handoff::fold_audit`]) — a consent the audit
/// shows ended is not brought back — and a consent the audit shows open that the room cannot
/// restore (a party is not in the state) gets the record that ends it. If the log cannot be
/// read, no consent is brought back.
pub(crate) async fn restore_handoff(
    room: &mut Room,
    args: &RoomArgs,
    writer: Epoch,
    bytes: &[u8],
    started: Instant,
) -> (HashMap<SessionId, Awaited>, u64) {
    let h = match crate::handoff::decode(&args.room_id, bytes) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(room = %args.room_id, error = %e, "handoff state not usable; the room starts fresh");
            args.metrics.placement("handoff_unusable");
            return (HashMap::new(), 0);
        }
    };
    let Some(mut snap) = h.room else {
        return (HashMap::new(), h.audit_seq);
    };
    let last_audit_seq = match read_audit_after(args, h.audit_seq).await {
        Ok(records) => {
            let fold = crate::handoff::fold_audit(&mut snap, writer, h.audit_seq, &records);
            if fold.replayed > 0 {
                tracing::info!(room = %args.room_id, replayed = fold.replayed, ended = fold.ended,
                    changed = fold.changed, "audit records after the checkpoint folded into it");
            }
            fold.last_seq
        }
        Err(e) => {
            tracing::warn!(room = %args.room_id, error = %e,
                "audit log unreadable; the handoff state's consents are not brought back");
            args.metrics.directory_error(e.code());
            snap.consents.clear();
            h.audit_seq
        }
    };
    let sessions: Vec<SessionId> = snap.members.iter().map(|m| m.session).collect();
    let audited_open = snap.consents.clone();
    let dropped = room.restore(snap);
    if dropped > 0 {
        tracing::warn!(room = %args.room_id, dropped, "handoff state had inconsistent entries; they were dropped");
    }
    // Consents the audit shows open that the room could not keep: their closing records.
    let kept: std::collections::BTreeSet<u64> =
        room.save_state().consents.iter().map(|c| c.id).collect();
    let mut last_audit_seq = last_audit_seq;
    for c in audited_open.iter().filter(|c| !kept.contains(&c.id)) {
        let to = if c.state == plaza_room_core::consent::ConsentState::Active {
            "released"
        } else {
            "cancelled"
        };
        let detail = serde_json::json!({
            "consent_id": c.id,
            "kind": c.kind.as_str(),
            "requester": c.requester.entity,
            "requester_session": c.requester.session,
            "target": c.target.entity,
            "target_session": c.target.session,
            "from": c.state.as_str(),
            "to": to,
            "cause": "restore",
        })
        .to_string();
        let kind = format!("consent.{to}");
        let append =
            args.directory
                .audit_append(&args.room_id, args.epoch, &kind, &detail, unix_ms());
        match tokio::time::timeout(Duration::from_secs(2), append).await {
            Ok(Ok(seq)) => last_audit_seq = last_audit_seq.max(seq),
            Ok(Err(e)) => args.metrics.directory_error(e.code()),
            Err(_) => args.metrics.directory_error("timeout"),
        }
    }
    // Deadlines are times since the activation started (the room host's clock).
    let deadline = started.elapsed() + args.cfg.presence_ttl;
    let mut awaited = HashMap::new();
    for m in h.members {
        if m.session != 0 && room.entity_of(m.session) == Some(m.entity) {
            awaited.insert(
                m.session,
                Awaited {
                    wallet: m.wallet,
                    entity: m.entity,
                    deadline,
                },
            );
        }
    }
    // A restored member nobody can vouch for (no wallet) leaves at the first step.
    for session in sessions {
        if room.entity_of(session).is_some() && !awaited.contains_key(&session) {
            room.leave(session);
        }
    }
    tracing::info!(room = %args.room_id, members = awaited.len(), "room state restored from the handoff state");
    (awaited, last_audit_seq)
}

/// Most audit records read to bring a checkpoint up to date (pages of 1,000).
const MAX_AUDIT_REPLAY: usize = 20_000;

/// The room's audit records after `seq` (bounded by [`MAX_AUDIT_REPLAY`]; each read bounded
/// by 2 s).
async fn read_audit_after(
    args: &RoomArgs,
    seq: u64,
) -> Result<Vec<plaza_directory::AuditRecord>, plaza_directory::DirectoryError> {
    const PAGE: usize = 1_000;
    let mut out = Vec::new();
    let mut from = seq + 1;
    while out.len() < MAX_AUDIT_REPLAY {
        let read = args.directory.audit_read(&args.room_id, from, PAGE);
        let page = tokio::time::timeout(Duration::from_secs(2), read)
            .await
            .map_err(|_| {
                plaza_directory::DirectoryError::Unavailable("audit read timed out".into())
            })??;
        let n = page.len();
        if let Some(last) = page.last() {
            from = last.seq + 1;
        }
        out.extend(page);
        if n < PAGE {
            break;
        }
    }
    Ok(out)
}
