//! The room's directory writer: one task per activation that writes presence in order, renews
//! the placement lease (and with it every member's presence), retries what it could not commit,
//! reclaims a placement the store lost, stops the room when the lease is lost, and gives the lease
//! up after the room's last write.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use plaza_directory::{Epoch, PresenceEntry, Renewal, RoomLease, SharedDirectory, Sources};
use ractor::ActorRef;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::host::PresenceOp;
use super::{Activation, RoomMsg, unix_ms};
use crate::EventLog;
use crate::metrics::NodeMetrics;

/// How soon a failed lease renewal is tried again.
const RENEW_RETRY: Duration = Duration::from_millis(250);

/// What the room's directory task needs.
pub(crate) struct DirectoryWriter {
    pub(crate) directory: SharedDirectory,
    pub(crate) room: String,
    pub(crate) node: String,
    pub(crate) lease: RoomLease,
    pub(crate) presence_ttl: Duration,
    pub(crate) metrics: NodeMetrics,
    pub(crate) actor: ActorRef<RoomMsg>,
    pub(crate) activation: Arc<Activation>,
    pub(crate) events: EventLog,
}

/// Spawns the room's directory task: presence writes in order, presence and placement lease
/// renewal, and the lease release once the room is gone (after its last presence write).
///
/// Single activation over liveness: a write is sent only while [`RoomLease::may_commit`]
/// (the local deadline ends a safety margin before the store's lease can lapse); a write that
/// cannot be committed is skipped (the member map still records it, so a reclaim re-registers
/// it). A lost lease (another epoch holds the room) stops the room. A room whose placement
/// vanished (Redis restarted empty, or the lease lapsed unclaimed) is reclaimed under a new
/// epoch and every member's presence is registered again.
pub(crate) fn spawn_directory_writer(
    w: DirectoryWriter,
) -> (mpsc::UnboundedSender<PresenceOp>, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<PresenceOp>();
    let DirectoryWriter {
        directory: dir,
        room,
        node,
        mut lease,
        presence_ttl,
        metrics,
        actor,
        activation,
        events,
    } = w;
    let task = tokio::spawn(async move {
        let presence_ttl_ms = presence_ttl.as_millis() as u64;
        // Every lease renewal renews the presence of all of this activation's entries in the
        // same store operation (one per room per period, whatever the number of members).
        lease.set_presence_ttl(Some(presence_ttl));
        let period = lease.renew_every().min(presence_ttl / 3);
        let mut renew = tokio::time::interval_at(Instant::now() + period, period);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Presence writes to retry, newest per wallet (`Some(entity)`: register, `None`: release).
        let mut retry: BTreeMap<String, Option<u32>> = BTreeMap::new();
        let register = |wallet: String, entity: u32, epoch: Epoch| {
            let dir = dir.clone();
            let entry = PresenceEntry {
                wallet,
                entity,
                room: room.clone(),
                sources: Sources::ROOM,
                node: node.clone(),
                profile_version: 0,
                lease_until_ms: 0,
            };
            async move { dir.presence_register(entry, epoch, presence_ttl_ms).await }
        };
        loop {
            tokio::select! {
                op = rx.recv() => {
                    let Some(op) = op else { break };
                    match op {
                        PresenceOp::Checkpoint(bytes) => {
                            // Under the handoff lock: a drain's handoff state, stored after the
                            // room froze, is never replaced by an older checkpoint.
                            let _guard = activation.handoff_lock().lock().await;
                            if activation.is_frozen() || !lease.may_commit() {
                                continue;
                            }
                            let epoch = lease.epoch();
                            let sent = unix_ms();
                            match dir.put_handoff(&room, epoch, bytes).await {
                                Ok(()) => {
                                    metrics.placement("checkpointed");
                                    events.commit(&room, epoch, sent, unix_ms(), "checkpoint");
                                }
                                Err(e) => {
                                    tracing::warn!(room = %room, error = %e, "checkpoint not stored");
                                    metrics.directory_error(e.code());
                                }
                            }
                            continue;
                        }
                        PresenceOp::DropCheckpoint => {
                            let _guard = activation.handoff_lock().lock().await;
                            if !activation.is_frozen()
                                && lease.may_commit()
                                && let Err(e) = dir.take_handoff(&room).await
                            {
                                metrics.directory_error(e.code());
                            }
                            continue;
                        }
                        _ => {}
                    }
                    if let PresenceOp::Announce { wallet, version } = &op {
                        // The profile version travels to the directory (its own dedup keeps
                        // the highest); a write that cannot be committed now is not retried:
                        // the next announcement carries a higher version anyway.
                        if lease.may_commit() {
                            let sent = unix_ms();
                            match dir.announce_profile(wallet, *version, Sources::ROOM).await {
                                Ok(_) => events.commit(&room, lease.epoch(), sent, unix_ms(), "announce"),
                                Err(e) => {
                                    tracing::warn!(room = %room, error = %e, "profile announcement failed");
                                    metrics.directory_error(e.code());
                                }
                            }
                        }
                        continue;
                    }
                    let (what, wallet, want) = match &op {
                        PresenceOp::Register { wallet, entity } => {
                            activation.set_member(wallet, Some(*entity));
                            ("register", wallet.clone(), Some(*entity))
                        }
                        PresenceOp::Release { wallet } => {
                            activation.set_member(wallet, None);
                            ("release", wallet.clone(), None)
                        }
                        PresenceOp::Announce { .. }
                        | PresenceOp::Checkpoint(_)
                        | PresenceOp::DropCheckpoint => continue,
                    };
                    // The newest write of a wallet supersedes one waiting for a retry.
                    retry.remove(&wallet);
                    if !lease.may_commit() {
                        metrics.placement("commit_withheld");
                        retry.insert(wallet, want);
                        continue;
                    }
                    let epoch = lease.epoch();
                    let sent = unix_ms();
                    let res = match op {
                        PresenceOp::Register { wallet, entity } => {
                            register(wallet, entity, epoch).await
                        }
                        PresenceOp::Release { wallet } => dir
                            .presence_release(&wallet, Sources::ROOM, epoch)
                            .await
                            .map(|_| ()),
                        PresenceOp::Announce { .. }
                        | PresenceOp::Checkpoint(_)
                        | PresenceOp::DropCheckpoint => Ok(()),
                    };
                    match res {
                        Ok(()) => events.commit(&room, epoch, sent, unix_ms(), what),
                        Err(e) => {
                            tracing::warn!(room = %room, wallet, error = %e, "presence write failed; retried after the next renewal");
                            metrics.directory_error(e.code());
                            if !e.is_fenced() {
                                retry.insert(wallet, want);
                            }
                        }
                    }
                }
                _ = renew.tick() => {
                    let sent = unix_ms();
                    match lease.renew_or_reclaim(&*dir).await {
                        Ok(Renewal::Renewed) => {
                            activation.set_lease(&lease);
                            events.commit(&room, lease.epoch(), sent, unix_ms(), "renew");
                        }
                        Ok(Renewal::Reclaimed { old }) => {
                            let epoch = lease.epoch();
                            tracing::warn!(room = %room, %old, new = %epoch,
                                "placement vanished (store lost its data?); room reclaimed");
                            metrics.placement("reclaimed");
                            events.activate(&room, epoch, &node);
                            activation.set_epoch(epoch);
                            activation.set_lease(&lease);
                            for (wallet, entity) in activation.members() {
                                if !lease.may_commit() {
                                    break;
                                }
                                let sent = unix_ms();
                                match register(wallet, entity, epoch).await {
                                    Ok(()) => events.commit(&room, epoch, sent, unix_ms(), "register"),
                                    Err(e) => metrics.directory_error(e.code()),
                                }
                            }
                        }
                        Err(e) if e.is_fenced() => {
                            tracing::error!(room = %room, error = %e, "placement lease lost; stopping the room");
                            metrics.placement("lease_lost");
                            actor.stop(Some("lease lost".into()));
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(room = %room, error = %e, "lease renew failed");
                            metrics.directory_error(e.code());
                            // Try again soon (each try is bounded by the directory's response
                            // timeout): a directory that comes back finds this room's renewal
                            // waiting, so the room resumes in place before anyone places it
                            // elsewhere.
                            renew.reset_after(period.min(RENEW_RETRY));
                        }
                    }
                    // Withheld or failed presence writes, now that the lease is confirmed. A
                    // release must not be lost: the renewal above keeps every entry of this room
                    // alive, so a lost one would be a ghost for as long as the room runs.
                    if !retry.is_empty() && lease.may_commit() {
                        let epoch = lease.epoch();
                        for (wallet, want) in std::mem::take(&mut retry) {
                            let sent = unix_ms();
                            let res = match want {
                                Some(entity) => register(wallet.clone(), entity, epoch).await,
                                None => match dir.presence_release(&wallet, Sources::ROOM, epoch).await {
                                    Ok(_) => Ok(()),
                                    Err(e) if e.code() == "not_found" => Ok(()),
                                    Err(e) => Err(e),
                                },
                            };
                            match res {
                                Ok(()) => events.commit(&room, epoch, sent, unix_ms(), "retry"),
                                Err(e) => {
                                    metrics.directory_error(e.code());
                                    if !e.is_fenced() {
                                        retry.insert(wallet, want);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        // The room is gone and its last presence writes are done: give the lease up.
        let epoch = lease.epoch();
        match lease.release(&*dir).await {
            Ok(()) => events.release(&room, epoch, &node),
            Err(e) => metrics.directory_error(e.code()),
        }
    });
    (tx, task)
}
