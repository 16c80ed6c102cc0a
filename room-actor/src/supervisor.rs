//! The room supervisor: spawns room actors on first attach, keeps the room → actor map, and
//! forgets a room whose actor stopped or failed, so that one failing room never takes the
//! others down (ractor's default supervisor behaviour would stop on any child exit; this one
//! does not).
//!
//! Activation is single: before a room actor starts, the node claims the room's placement lease
//! in the directory (a [`RoomLease`] whose holder stops committing [`LEASE_MARGIN_DIVISOR`]th of
//! the TTL before the store's lease can lapse) and the actor runs under that lease's fencing
//! epoch. The room's directory writer renews the lease and releases it after the room stopped.
//!
//! Drain ([`Rooms::drain`]): the supervisor takes no new rooms, stores each room's handoff
//! state (members with their entities; the room core's own state once it has one) in the
//! directory under the room's epoch, and stops the room; its sessions' streams end, so gateways
//! re-attach them to the room's next activation on another node, which takes the handoff.

use std::sync::Arc;

use plaza_directory::{DirectoryError, RoomLease};
use plaza_node_proto::Handoff;
use prost::Message as _;
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};

mod args;
mod handle;
mod table;

pub use args::{RoomsArgs, RoomsError, RoomsMsg};
pub use handle::Rooms;
use table::{Admit, RoomTable};

use crate::handoff::{self, HandedOffMember};
use crate::room::{Activation, RoomActor, RoomArgs, RoomMsg};

/// A room's holder stops committing `ttl / LEASE_MARGIN_DIVISOR` before its lease can lapse.
pub const LEASE_MARGIN_DIVISOR: u32 = 5;

/// The room supervisor actor.
#[derive(Debug)]
pub struct RoomsSupervisor;

#[derive(Debug)]
struct LiveRoom {
    actor: ActorRef<RoomMsg>,
    activation: Arc<Activation>,
}

/// The supervisor's state.
pub struct RoomsState {
    args: RoomsArgs,
    /// The live rooms, the drain flag and the retired epochs.
    table: RoomTable<ActorId, LiveRoom>,
}

impl Actor for RoomsSupervisor {
    type Msg = RoomsMsg;
    type State = RoomsState;
    type Arguments = RoomsArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<RoomsMsg>,
        args: RoomsArgs,
    ) -> Result<RoomsState, ActorProcessingErr> {
        Ok(RoomsState {
            args,
            table: RoomTable::default(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<RoomsMsg>,
        msg: RoomsMsg,
        state: &mut RoomsState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            RoomsMsg::GetOrSpawn { room, reply } => {
                if reply.is_closed() {
                    return Ok(());
                }
                let res = state.get_or_spawn(&room, myself.get_cell()).await;
                let _ = reply.send(res);
            }
            RoomsMsg::Get { room, reply } => {
                let _ = reply.send(state.table.get(&room).map(|l| l.actor.clone()));
            }
            RoomsMsg::List { reply } => {
                let _ = reply.send(state.table.ids());
            }
            RoomsMsg::SetDraining(d) => state.table.set_draining(d),
            RoomsMsg::Drain { reply } => {
                state.table.set_draining(true);
                let n = state.drain().await;
                let _ = reply.send(n);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<RoomsMsg>,
        evt: SupervisionEvent,
        state: &mut RoomsState,
    ) -> Result<(), ActorProcessingErr> {
        match evt {
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                state
                    .forget(&cell, "stopped", reason.as_deref().unwrap_or(""))
                    .await;
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                let why = err.to_string();
                state.forget(&cell, "failed", &why).await;
            }
            _ => {}
        }
        Ok(())
    }
}

// === impl RoomsState ===

impl RoomsState {
    async fn get_or_spawn(
        &mut self,
        room: &str,
        supervisor: ActorCell,
    ) -> Result<ActorRef<RoomMsg>, RoomsError> {
        match self.table.admit(room) {
            Admit::Live(live) => return Ok(live.actor.clone()),
            Admit::Draining => return Err(RoomsError::Draining),
            Admit::Claim => {}
        }
        let lease = self.claim(room).await?;
        // A claim by the node that still holds the lease renews it under the same epoch. If that
        // lease belongs to an activation of ours that just ended (its writer will release it),
        // give it back now and claim afresh: the new activation gets a newer epoch, and the old
        // writer's release is refused as stale instead of releasing the new lease.
        let lease = if self.table.is_retired(room, lease.epoch()) {
            let _ = lease.release(&*self.args.directory).await;
            self.claim(room).await?
        } else {
            lease
        };
        self.table.claimed(room);
        let a = &self.args;
        let epoch = lease.epoch();
        a.events.activate(room, epoch, &a.node_id);
        // The previous activation left its state (a drain's handoff, or the last checkpoint
        // of one that crashed); older epochs only.
        let handoff = match a.directory.take_handoff(room).await {
            Ok(Some((e, bytes))) if e < epoch => {
                a.metrics.placement("handoff_taken");
                Some((e, bytes))
            }
            Ok(_) => None,
            Err(e) => {
                a.metrics.directory_error(e.code());
                None
            }
        };
        if let Some((_, h)) = &handoff {
            let members = Handoff::decode(h.as_slice()).map_or(0, |s| s.members.len());
            tracing::info!(room, %epoch, members, "handoff state taken over");
            a.events.handoff(room, epoch, "taken", members);
        }
        let activation = Arc::new(Activation::new(&lease));
        // The room's own definition: the first `[[rooms]]` rule matching its id, else the node's.
        let (cfg, rule) = a.room_cfg.for_room(room);
        tracing::info!(
            room,
            rule = rule.as_deref().unwrap_or("(node default)"),
            definition = %cfg.room.definition.name,
            tier = ?cfg.room.tier,
            "room definition chosen"
        );
        let args = RoomArgs {
            room_id: room.to_owned(),
            cfg,
            metrics: a.metrics.clone(),
            directory: a.directory.clone(),
            node_id: a.node_id.clone(),
            epoch,
            lease: lease.clone(),
            activation: activation.clone(),
            events: a.events.clone(),
            handoff,
        };
        let (actor, _join) = match Actor::spawn_linked(None, RoomActor, args, supervisor).await {
            Ok(x) => x,
            Err(e) => {
                // The actor never ran: give the lease back at once.
                if let Err(e) = lease.release(&*a.directory).await {
                    a.metrics.directory_error(e.code());
                }
                return Err(RoomsError::Spawn(e.to_string()));
            }
        };
        tracing::info!(room, %epoch, "room activated");
        a.metrics.placement("activated");
        self.table.activated(
            room,
            actor.get_id(),
            LiveRoom {
                actor: actor.clone(),
                activation,
            },
        );
        Ok(actor)
    }

    /// Claims `room`'s placement lease for this node (a conflict means another node holds it).
    async fn claim(&self, room: &str) -> Result<RoomLease, RoomsError> {
        let a = &self.args;
        let margin = a.lease_ttl / LEASE_MARGIN_DIVISOR;
        match RoomLease::claim(&*a.directory, room, &a.node_id, a.lease_ttl, margin).await {
            Ok(l) => Ok(l),
            Err(DirectoryError::Conflict(_)) => {
                a.metrics.placement("claim_refused");
                Err(RoomsError::PlacedElsewhere)
            }
            Err(e) => {
                a.metrics.directory_error(e.code());
                Err(e.into())
            }
        }
    }

    /// Hands every room off and stops it; returns how many rooms were handed off.
    ///
    /// Each room saves its own state (members with wallets, held props, consents, emotes,
    /// scenes) after a last step and freezes; the handoff is stored in the directory under the
    /// room's epoch while its lease is still held, then the room stops. A room that cannot
    /// answer in time is handed off with members and entities only.
    async fn drain(&mut self) -> usize {
        let mut n = 0;
        for (room, live) in self.table.live() {
            let bytes = match ractor::call_t!(live.actor, RoomMsg::Handoff, 2_000) {
                Ok(bytes) => bytes,
                Err(e) => {
                    tracing::warn!(room, error = %e, "room did not give its state; handing off members only");
                    let members: Vec<_> = live
                        .activation
                        .members()
                        .into_iter()
                        .map(|(wallet, entity)| HandedOffMember {
                            wallet,
                            session: 0,
                            entity,
                        })
                        .collect();
                    handoff::encode(room, &members, None)
                }
            };
            let members = Handoff::decode(bytes.as_slice()).map_or(0, |s| s.members.len());
            let epoch = live.activation.epoch();
            // No checkpoint replaces this state: the room froze before answering (a room that
            // did not answer is frozen here), and checkpoints are stored under the same lock.
            live.activation.freeze();
            let _guard = live.activation.handoff_lock().lock().await;
            match self.args.directory.put_handoff(room, epoch, bytes).await {
                Ok(()) => {
                    n += 1;
                    self.args.metrics.placement("handed_off");
                    self.args.events.handoff(room, epoch, "put", members);
                }
                Err(e) => {
                    tracing::warn!(room, error = %e, "handoff state not stored");
                    self.args.metrics.directory_error(e.code());
                }
            }
            tracing::info!(room, members, "draining: room stops");
            live.actor.stop(Some("draining".into()));
        }
        n
    }

    async fn forget(&mut self, cell: &ActorCell, event: &str, why: &str) {
        let Some(room) = self.table.forget(&cell.get_id(), |l| l.activation.epoch()) else {
            return;
        };
        if event == "failed" {
            tracing::error!(room, why, "room actor failed; other rooms keep running");
        } else {
            tracing::info!(room, why, "room actor stopped");
        }
        // The room's directory writer releases the lease after its last presence write.
        self.args.metrics.placement(event);
    }
}
