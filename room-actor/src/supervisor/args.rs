//! The supervisor's arguments, messages and errors.

use std::time::Duration;

use plaza_directory::{DirectoryError, SharedDirectory};
use ractor::{ActorRef, RpcReplyPort};

use crate::EventLog;
use crate::metrics::NodeMetrics;
use crate::room::{RoomActorConfig, RoomMsg};

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
    /// The actor of `room` if it is live here (never spawns).
    Get {
        /// Room id.
        room: String,
        /// Answer.
        reply: RpcReplyPort<Option<ActorRef<RoomMsg>>>,
    },
    /// The ids of the live rooms.
    List {
        /// Answer.
        reply: RpcReplyPort<Vec<String>>,
    },
    /// Take no new rooms from now on.
    SetDraining(bool),
    /// Drain: take no new rooms, hand every room off and stop it; answers how many.
    Drain {
        /// Answer.
        reply: RpcReplyPort<usize>,
    },
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
    /// Where activations and commits are logged.
    pub events: EventLog,
}
