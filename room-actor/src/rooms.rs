//! The room supervisor: spawns room actors on first attach, keeps the room → actor map, and
//! forgets a room whose actor stopped or failed, so that one failing room never takes the
//! others down (ractor's default supervisor behaviour would stop on any child exit; this one
//! does not).
//!
//! Activation is single: before a room actor starts, the node claims the room's placement lease
//! in the directory and the actor runs under that lease's fencing epoch.

use std::collections::HashMap;
use std::time::Duration;

use plaza_directory::{DirectoryError, Epoch, SharedDirectory};
use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};

use crate::metrics::NodeMetrics;
use crate::room::{RoomActor, RoomActorConfig, RoomArgs, RoomMsg};

/// Why a room could not be had.
#[derive(Debug, thiserror::Error)]
pub enum RoomsError {
    /// Another node holds the room's lease.
    #[error("room is placed on another node")]
    PlacedElsewhere,
    /// This node is draining and takes no new rooms.
    #[error("node is draining")]
    Draining,
    /// The directory could not be reached.
    #[error("directory: {0}")]
    Directory(#[from] DirectoryError),
    /// The room actor failed to start.
    #[error("room failed to start: {0}")]
    Spawn(String),
}

/// Messages of the room supervisor.
#[derive(Debug)]
pub enum RoomsMsg {
    /// The actor of `room`, spawned if it has none.
    GetOrSpawn {
        /// Room id.
        room: String,
        /// Answer.
        reply: RpcReplyPort<Result<ActorRef<RoomMsg>, RoomsError>>,
    },
    /// The ids of the live rooms.
    List {
        /// Answer.
        reply: RpcReplyPort<Vec<String>>,
    },
    /// Take no new rooms from now on.
    SetDraining(bool),
}

/// Arguments of the supervisor.
pub struct RoomsArgs {
    /// This node's id.
    pub node_id: String,
    /// How rooms run.
    pub room_cfg: RoomActorConfig,
    /// Metrics.
    pub metrics: NodeMetrics,
    /// The directory.
    pub directory: SharedDirectory,
    /// Placement lease TTL.
    pub lease_ttl: Duration,
}

/// The room supervisor actor.
#[derive(Debug)]
pub struct RoomsSupervisor;

#[derive(Debug)]
struct LiveRoom {
    actor: ActorRef<RoomMsg>,
    epoch: Epoch,
}

/// The supervisor's state.
pub struct RoomsState {
    args: RoomsArgs,
    rooms: HashMap<String, LiveRoom>,
    by_actor: HashMap<ActorId, String>,
    draining: bool,
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
            rooms: HashMap::new(),
            by_actor: HashMap::new(),
            draining: false,
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
            RoomsMsg::List { reply } => {
                let mut ids: Vec<String> = state.rooms.keys().cloned().collect();
                ids.sort();
                let _ = reply.send(ids);
            }
            RoomsMsg::SetDraining(d) => state.draining = d,
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
        if let Some(live) = self.rooms.get(room) {
            return Ok(live.actor.clone());
        }
        if self.draining {
            return Err(RoomsError::Draining);
        }
        let a = &self.args;
        let ttl_ms = a.lease_ttl.as_millis() as u64;
        let placement = match a.directory.claim(room, &a.node_id, ttl_ms).await {
            Ok(p) => p,
            Err(DirectoryError::Conflict(_)) => {
                a.metrics.placement("claim_refused");
                return Err(RoomsError::PlacedElsewhere);
            }
            Err(e) => {
                a.metrics.directory_error(e.code());
                return Err(e.into());
            }
        };
        let args = RoomArgs {
            room_id: room.to_owned(),
            cfg: a.room_cfg.clone(),
            metrics: a.metrics.clone(),
            directory: a.directory.clone(),
            node_id: a.node_id.clone(),
            epoch: placement.epoch,
            lease_ttl: a.lease_ttl,
        };
        let (actor, _join) = Actor::spawn_linked(None, RoomActor, args, supervisor)
            .await
            .map_err(|e| RoomsError::Spawn(e.to_string()))?;
        tracing::info!(room, epoch = ?placement.epoch, "room activated");
        a.metrics.placement("activated");
        self.by_actor.insert(actor.get_id(), room.to_owned());
        self.rooms.insert(
            room.to_owned(),
            LiveRoom {
                actor: actor.clone(),
                epoch: placement.epoch,
            },
        );
        Ok(actor)
    }

    async fn forget(&mut self, cell: &ActorCell, event: &str, why: &str) {
        let Some(room) = self.by_actor.remove(&cell.get_id()) else {
            return;
        };
        let Some(live) = self.rooms.remove(&room) else {
            return;
        };
        if event == "failed" {
            tracing::error!(room, why, "room actor failed; other rooms keep running");
        } else {
            tracing::info!(room, why, "room actor stopped");
        }
        self.args.metrics.placement(event);
        if let Err(e) = self
            .args
            .directory
            .release(&room, &self.args.node_id, live.epoch)
            .await
        {
            self.args.metrics.directory_error(e.code());
        }
    }
}

/// A handle to the room supervisor.
#[derive(Clone, Debug)]
pub struct Rooms {
    actor: ActorRef<RoomsMsg>,
}

impl Rooms {
    /// Starts the supervisor.
    pub async fn start(args: RoomsArgs) -> Result<(Self, tokio::task::JoinHandle<()>), RoomsError> {
        let (actor, join) = Actor::spawn(None, RoomsSupervisor, args)
            .await
            .map_err(|e| RoomsError::Spawn(e.to_string()))?;
        Ok((Self { actor }, join))
    }

    /// The actor of `room`, spawned (and claimed in the directory) if it has none.
    pub async fn get_or_spawn(&self, room: &str) -> Result<ActorRef<RoomMsg>, RoomsError> {
        let room = room.to_owned();
        match self
            .actor
            .call(
                |reply| RoomsMsg::GetOrSpawn { room, reply },
                Some(Duration::from_secs(10)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            Ok(_) => Err(RoomsError::Spawn("supervisor timed out".into())),
            Err(e) => Err(RoomsError::Spawn(e.to_string())),
        }
    }

    /// The live rooms.
    pub async fn list(&self) -> Vec<String> {
        match self
            .actor
            .call(
                |reply| RoomsMsg::List { reply },
                Some(Duration::from_secs(5)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(v)) => v,
            _ => Vec::new(),
        }
    }

    /// Take no new rooms.
    pub fn set_draining(&self, draining: bool) {
        let _ = self.actor.cast(RoomsMsg::SetDraining(draining));
    }

    /// Stops the supervisor and every room (children are stopped with it).
    pub fn stop(&self) {
        self.actor.stop_children(Some("node stopping".into()));
        self.actor.stop(Some("node stopping".into()));
    }
}
