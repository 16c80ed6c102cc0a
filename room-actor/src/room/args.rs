//! What a room actor is configured with, started with, and sent.

use std::sync::Arc;
use std::time::Duration;

use plaza_directory::{Epoch, RoomLease, SharedDirectory};
use plaza_node_proto::NodeOutbound;
use plaza_proto::pb;
use plaza_room_core::SessionId;
use ractor::RpcReplyPort;
use tokio::sync::mpsc;

use super::{Activation, admin};
use crate::EventLog;
use crate::metrics::NodeMetrics;

/// How a room actor runs (the simulation parameters live in [`plaza_room_core::RoomConfig`]).
#[derive(Clone, Debug)]
pub struct RoomActorConfig {
    /// The room's own config.
    pub room: plaza_room_core::RoomConfig,
    /// Most steps run in one wake to catch up; beyond it steps are skipped and counted.
    pub max_catch_up: u32,
    /// How long an empty room lives before it stops.
    pub empty_grace: Duration,
    /// Presence lease, renewed at a third of it.
    pub presence_ttl: Duration,
    /// Per-room definitions: the first rule matching a room's id replaces `room` for that
    /// room ([`RoomActorConfig::for_room`]).
    pub rooms: plaza_room_core::RoomRegistry,
    /// How often the room checkpoints its state (the handoff state) to the directory under its
    /// epoch, so the next activation after a crash restores held props and open consents;
    /// zero turns checkpoints off.
    pub checkpoint_interval: Duration,
}

impl Default for RoomActorConfig {
    fn default() -> Self {
        Self {
            room: plaza_room_core::RoomConfig::default(),
            max_catch_up: 5,
            empty_grace: Duration::from_secs(10),
            presence_ttl: Duration::from_secs(15),
            rooms: plaza_room_core::RoomRegistry::default(),
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
        }
    }
}

impl RoomActorConfig {
    /// How `room_id` runs: the first per-room rule matching it, else the node default; with
    /// the pattern of the rule that matched.
    pub fn for_room(&self, room_id: &str) -> (Self, Option<String>) {
        match self.rooms.resolve(room_id) {
            Some(rule) => (
                Self {
                    room: rule.cfg.clone(),
                    ..self.clone()
                },
                Some(rule.pattern.clone()),
            ),
            None => (self.clone(), None),
        }
    }
}

/// The shipped checkpoint interval (`room.checkpoint_interval_ms`).
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5);

/// Messages a room actor handles.
#[derive(Debug)]
pub enum RoomMsg {
    /// A session attaches: join it at the next tick and send its frames to `tx`.
    Join {
        /// The session.
        session: SessionId,
        /// Its identity.
        wallet: String,
        /// Where its server envelopes go.
        tx: mpsc::Sender<NodeOutbound>,
        /// The entity a resumed session asks to get back (0: any).
        entity: u32,
        /// Identifies this attachment: a later `Detach` of an older stream of the same session
        /// must not detach this one.
        link_id: u64,
        /// The gateway authenticated the session as an operator: its `OperatorAction`s are
        /// carried out (anyone else's are refused `not_operator`).
        operator: bool,
    },
    /// An envelope from an attached session.
    Input {
        /// The session.
        session: SessionId,
        /// What it sent.
        envelope: pb::ClientEnvelope,
    },
    /// The gateway dropped frames for this session: its next frame must be a keyframe.
    KeyframeNeeded {
        /// The session.
        session: SessionId,
    },
    /// The session's stream ended: it leaves.
    Detach {
        /// The session.
        session: SessionId,
        /// The attachment whose stream ended.
        link_id: u64,
    },
    /// The ticker's wake-up.
    Tick,
    /// Drain: run one last step (queued joins and inputs are applied and acknowledged), reply
    /// with the encoded `plaza.node.v1.Handoff` (members with wallets and the room
    /// core's whole state), and from then on change nothing: later joins, inputs and ticks are
    /// ignored until the supervisor, having stored the handoff, stops the room.
    Handoff(RpcReplyPort<Vec<u8>>),
    /// An operator call (the admin API): view, mute, close, teleport ([`admin`]).
    Admin(admin::AdminCall),
    /// Test hook: the room panics in its handler.
    #[cfg(feature = "test-util")]
    Panic,
}

/// Arguments of a room actor.
pub struct RoomArgs {
    /// The room id.
    pub room_id: String,
    /// How it runs.
    pub cfg: RoomActorConfig,
    /// The node's metrics.
    pub metrics: NodeMetrics,
    /// The directory (presence writes are fenced by `epoch`).
    pub directory: SharedDirectory,
    /// This node's id.
    pub node_id: String,
    /// The placement epoch this activation holds (at activation; see [`Activation::epoch`]).
    pub epoch: Epoch,
    /// The claimed placement lease; the room's directory writer renews it, stops committing
    /// before it can lapse, stops the room if it is lost, and releases it after the room.
    pub lease: RoomLease,
    /// Members and current epoch, shared with the supervisor (drain handoffs).
    pub activation: Arc<Activation>,
    /// Where activations and directory commits are logged (may be disabled).
    pub events: EventLog,
    /// The handoff state the previous activation left (a drain, or its last checkpoint if it
    /// crashed), if any, with the epoch that wrote it: an encoded `plaza.node.v1.Handoff`. The
    /// room restores the core state it carries (a checkpoint brought up to date from the
    /// writer's later audit records); each handed-off member waits for its session to re-attach
    /// (for `presence_ttl`) and leaves if it does not.
    pub handoff: Option<(Epoch, Vec<u8>)>,
}
