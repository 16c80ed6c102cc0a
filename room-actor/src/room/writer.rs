//! The room's directory writer: one task per activation that writes presence in order, renews
//! the placement lease (and with it every member's presence), retries what it could not commit,
//! reclaims a placement the store lost, stops the room when the lease is lost, and gives the lease
//! up after the room's last write.

use std::sync::Arc;
use std::time::Duration;

use plaza_directory::{
    DirectoryError, Epoch, PresenceEntry, Renewal, RoomLease, SharedDirectory, Sources,
};
use ractor::ActorRef;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::host::PresenceOp;
use super::{Activation, RoomMsg, unix_ms};
use crate::EventLog;
use crate::metrics::NodeMetrics;
pub(crate) use machine::{Next, PresenceWrite, WriterMachine};

/// How soon a failed lease renewal is tried again.
const RENEW_RETRY: Duration = Duration::from_millis(250);

/// How the writer reaches the directory for one room: the one place a presence write is done.
#[derive(Clone)]
pub(crate) struct PresenceStore {
    pub(crate) dir: SharedDirectory,
    pub(crate) room: String,
    pub(crate) node: String,
    pub(crate) ttl_ms: u64,
}

impl PresenceStore {
    /// Does `w` under `epoch`. `missing_ok`: a release of an entry that is gone is done (a
    /// retry after the entry expired or was released). `Ok(true)`: a release left the entry
    /// held by another source (a voice channel keeps the wallet online).
    pub(crate) async fn write(
        &self,
        w: &PresenceWrite,
        epoch: Epoch,
        missing_ok: bool,
    ) -> Result<bool, DirectoryError> {
        match w.entity {
            Some(entity) => {
                let entry = PresenceEntry {
                    wallet: w.wallet.clone(),
                    entity,
                    room: self.room.clone(),
                    sources: Sources::ROOM,
                    node: self.node.clone(),
                    profile_version: 0,
                    lease_until_ms: 0,
                };
                self.dir
                    .presence_register(entry, epoch, self.ttl_ms)
                    .await
                    .map(|()| false)
            }
            None => match self
                .dir
                .presence_release(&w.wallet, Sources::ROOM, epoch)
                .await
            {
                // Not the last source: the entry lives on, held by another service.
                Ok(false) => Ok(self
                    .dir
                    .presence_get(&w.wallet)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|e| e.room == self.room)),
                Ok(true) => Ok(false),
                Err(e) if missing_ok && e.code() == "not_found" => Ok(false),
                Err(e) => Err(e),
            },
        }
    }
}

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
        let store = PresenceStore {
            dir: dir.clone(),
            room: room.clone(),
            node: node.clone(),
            ttl_ms: presence_ttl.as_millis() as u64,
        };
        // Every lease renewal renews the presence of all of this activation's entries in the
        // same store operation (one per room per period, whatever the number of members).
        lease.set_presence_ttl(Some(presence_ttl));
        let period = lease.renew_every().min(presence_ttl / 3);
        let mut renew = tokio::time::interval_at(Instant::now() + period, period);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut machine = WriterMachine::default();
        loop {
            tokio::select! {
                op = rx.recv() => {
                    let Some(op) = op else { break };
                    match &op {
                        PresenceOp::Register { wallet, entity } => {
                            activation.set_member(wallet, Some(*entity));
                        }
                        PresenceOp::Release { wallet } => activation.set_member(wallet, None),
                        _ => {}
                    }
                    match machine.on_op(op, lease.may_commit()) {
                        Next::Write(w) => {
                            let epoch = lease.epoch();
                            let sent = unix_ms();
                            match store.write(&w, epoch, false).await {
                                Ok(held) => {
                                    if held {
                                        activation.note_held_elsewhere();
                                    }
                                    events.commit(&room, epoch, sent, unix_ms(), w.what());
                                }
                                Err(e) => {
                                    tracing::warn!(room = %room, wallet = w.wallet, error = %e, "presence write failed; retried after the next renewal");
                                    metrics.directory_error(e.code());
                                    machine.failed(w, e.is_fenced());
                                }
                            }
                        }
                        Next::Withheld => metrics.placement("commit_withheld"),
                        Next::Checkpoint(bytes) => {
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
                        }
                        Next::DropCheckpoint => {
                            let _guard = activation.handoff_lock().lock().await;
                            if !activation.is_frozen()
                                && lease.may_commit()
                                && let Err(e) = dir.take_handoff(&room).await
                            {
                                metrics.directory_error(e.code());
                            }
                        }
                        Next::Announce { wallet, version } => {
                            // The profile version travels to the directory (its own dedup keeps
                            // the highest).
                            if lease.may_commit() {
                                let sent = unix_ms();
                                match dir.announce_profile(&wallet, version, Sources::ROOM).await {
                                    Ok(_) => events.commit(&room, lease.epoch(), sent, unix_ms(), "announce"),
                                    Err(e) => {
                                        tracing::warn!(room = %room, error = %e, "profile announcement failed");
                                        metrics.directory_error(e.code());
                                    }
                                }
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
                                let w = PresenceWrite { wallet, entity: Some(entity) };
                                let sent = unix_ms();
                                match store.write(&w, epoch, false).await {
                                    Ok(_) => events.commit(&room, epoch, sent, unix_ms(), "register"),
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
                    if machine.has_retries() && lease.may_commit() {
                        let epoch = lease.epoch();
                        for w in machine.take_retries() {
                            let sent = unix_ms();
                            match store.write(&w, epoch, true).await {
                                Ok(_) => events.commit(&room, epoch, sent, unix_ms(), "retry"),
                                Err(e) => {
                                    metrics.directory_error(e.code());
                                    machine.failed(w, e.is_fenced());
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

mod machine;
#[cfg(test)]
mod tests;
