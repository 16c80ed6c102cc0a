//! Discrete room events (props, consent, emotes, lockstep scenes, refusals) and audit records.
//!
//! These are the room's outputs besides snapshot frames and corrections: each [`RoomEvent`]
//! carries its recipients, a per-room sequence number and a typed body that the shell maps
//! one-to-one onto `plaza.v1.Event`. This module only defines the types and a tiny JSON writer
//! for audit details; it decides nothing.
//!
//! | [`EventBody`]          | `plaza.v1.Event.kind`                                          |
//! |------------------------|----------------------------------------------------------------|
//! | `Prop`                 | `prop` (`PropEvent`; `change` -> `InteractionKind`, DROP = 4)  |
//! | `Consent`              | `consent` (`ConsentEvent`; `state` as [`ConsentState::as_str`])|
//! | `Emote`                | `emote` (`EmoteEvent`)                                         |
//! | `EmoteInProgress`      | `emote` (`EmoteEvent` with `in_progress`, `elapsed_ms`)        |
//! | `SceneTick`            | `scene_tick` (`SceneTick`)                                     |
//! | `SceneSync`            | `scene_sync` (`SceneSync`)                                     |
//! | `SceneClient`          | `scene_client` (`SceneClientEvent`)                            |
//! | `SceneStateRequest`    | `scene_client` with kind `STATE_REQUESTED`, `tick = min_tick`  |
//! | `Teleported`           | `teleported` (`Teleported`; `cause` -> `TeleportCause`)        |
//! | `Roster`               | `roster` (`RosterUpdate`)                                      |
//! | `Block`                | `block` (`BlockEvent`)                                         |
//! | `Rejected`             | `rejected` (`RequestRejected`; `reason` = [`Refusal::code`])   |
//!
//! Recipients: prop events go to every member (and a joiner gets one `Pickup` event per prop
//! held when it joins, at the prop's current revision); consent events to both parties; emotes to the
//! members whose last broadcast showed the emoter, plus the emoter; scene events to the scene's
//! clients (ticks only to synced ones); refusals to the requester only.

use std::fmt::Write as _;

use crate::SessionId;
use crate::consent::{ConsentKind, ConsentState};
use crate::scene::{SceneClientEvent, SceneClientState};

/// One discrete event for a set of sessions.
#[derive(Clone, Debug, PartialEq)]
pub struct RoomEvent {
    /// Per-room event sequence number (`plaza.v1.Event.room_seq`), starting at 1, gap-free
    /// across all events of the room (recipients see a subsequence).
    pub room_seq: u64,
    /// Who receives it, ascending, without duplicates.
    pub to: Vec<SessionId>,
    /// What happened.
    pub body: EventBody,
}

/// What a [`RoomEvent`] says; each variant is one arm of `plaza.v1.Event.kind`.
#[derive(Clone, Debug, PartialEq)]
pub enum EventBody {
    /// A prop changed hands or place (`PropEvent`).
    Prop {
        /// The prop's definition id (`PropEvent.prop_id`).
        prop_id: u32,
        /// The prop's entity id in snapshots ([`crate::interactions::prop_entity`]).
        entity: u32,
        /// The avatar holding it now, 0 when nobody does.
        holder_entity: u32,
        /// The prop's server revision after the change.
        revision: u64,
        /// What happened.
        change: PropChange,
        /// The prop's centre after the change (metres).
        position: [f32; 3],
    },
    /// A consent changed state (`ConsentEvent`).
    Consent {
        /// The consent id the server issued.
        consent_id: u64,
        /// What is asked.
        kind: ConsentKind,
        /// Who asked.
        requester_entity: u32,
        /// Who is asked.
        target_entity: u32,
        /// The new state ([`ConsentState::as_str`] on the wire).
        state: ConsentState,
    },
    /// An emote started or stopped (`EmoteEvent`).
    Emote {
        /// The emoting avatar.
        entity: u32,
        /// The emote (empty when stopping).
        emote_id: String,
        /// Whether the emote stops.
        stop: bool,
        /// The client's timestamp of the emote.
        timestamp_ms: u64,
    },
    /// An emote that was already playing when the recipient's frames started showing the
    /// avatar (it came into range, joined, or got a keyframe): `EmoteEvent` with `in_progress`.
    EmoteInProgress {
        /// The emoting avatar.
        entity: u32,
        /// The emote.
        emote_id: String,
        /// The client's timestamp of the emote.
        timestamp_ms: u64,
        /// How long it has been playing (room time; 0 when unknown, after a restore).
        elapsed_ms: u64,
    },
    /// The ordered actions of one lockstep tick (`SceneTick`). A tick for `t` also says every
    /// tick before `t` is complete: ticks without a `SceneTick` have no actions.
    SceneTick {
        /// The scene.
        scene: String,
        /// The tick the actions run on.
        tick: u64,
        /// `(entity, payload)` in the order the room received them.
        actions: Vec<(u32, Vec<u8>)>,
    },
    /// A late joiner's starting point (`SceneSync`): run `game_state` as of `tick`, then the
    /// `SceneTick`s that follow.
    SceneSync {
        /// The scene.
        scene: String,
        /// The tick `game_state` was captured at (after running that tick).
        tick: u64,
        /// The game state; empty means the scene's initial state.
        game_state: Vec<u8>,
        /// The recipient's client state.
        client_state: SceneClientState,
        /// The scene's clients (entity, state) in join order, the recipient included.
        members: Vec<(u32, SceneClientState)>,
        /// The master's entity (0: none).
        master_entity: u32,
    },
    /// A scene membership event (`SceneClientEvent`): ClientJoined, BeginCatchUp, CaughtUp,
    /// ClientLeft, MasterChanged, SyncRetry, Alone.
    SceneClient {
        /// The scene.
        scene: String,
        /// Whom it is about.
        entity: u32,
        /// What happened.
        event: SceneClientEvent,
        /// That client's state afterwards.
        state: SceneClientState,
    },
    /// The room asks the scene's master for its game state (`SceneStateRequest`): its action
    /// log can no longer reach back to the last state it holds.
    SceneStateRequest {
        /// The scene.
        scene: String,
        /// The state must be from this tick or later.
        min_tick: u64,
    },
    /// The server moved an avatar (`Teleported`): sent to the mover and to every member whose
    /// last broadcast showed it. The avatar's next frame record carries the instant bit
    /// ([`plaza_proto::quant::ANIM_INSTANT`]).
    Teleported {
        /// The moved avatar.
        entity: u32,
        /// Where it stands now (feet, metres).
        position: [f32; 3],
        /// Its yaw now, degrees.
        yaw_deg: f32,
        /// The destination's name (empty for an operator's position).
        destination: String,
        /// Why it moved.
        cause: TeleportCause,
        /// The mover's last applied input sequence before the teleport.
        last_input_seq: u32,
    },
    /// Who the avatars in this client's frames are (`RosterUpdate`); to one member.
    Roster {
        /// Replaces everything the client held (sent with a keyframe, before it).
        full: bool,
        /// Entries added or changed.
        upserts: Vec<crate::people::RosterEntry>,
        /// Entities whose entries are dropped (they left the client's frames).
        removed: Vec<u32>,
    },
    /// A block or unblock took effect (`BlockEvent`); to the member who asked.
    Block {
        /// The other member's wallet.
        target_wallet: String,
        /// The other member's avatar (0 if not in the room).
        target_entity: u32,
        /// Blocked now (false: unblocked).
        blocked: bool,
    },
    /// A request was refused (`RequestRejected`); sent to the requester only.
    Rejected {
        /// The client envelope sequence of the refused request.
        in_reply_to: u32,
        /// Why.
        reason: Refusal,
    },
}

/// Why the server moved an avatar (`plaza.v1.TeleportCause`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TeleportCause {
    /// The member asked (`TeleportRequest`).
    Request,
    /// The avatar walked into a portal.
    Portal,
    /// An operator moved it ([`crate::Room::teleport`]).
    Operator,
}

impl TeleportCause {
    /// Stable lowercase name (metrics, audit records).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Portal => "portal",
            Self::Operator => "operator",
        }
    }
}

/// What happened to a prop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PropChange {
    /// Picked up (`INTERACTION_KIND_PICKUP`).
    Pickup,
    /// Placed (`INTERACTION_KIND_PLACE`).
    Place,
    /// Thrown (`INTERACTION_KIND_THROW`).
    Throw,
    /// Dropped because its holder left (`INTERACTION_KIND_DROP`).
    Drop,
}

impl PropChange {
    /// Stable lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pickup => "pickup",
            Self::Place => "place",
            Self::Throw => "throw",
            Self::Drop => "drop",
        }
    }
}

/// Why a request (interaction, consent op, emote, scene op) was refused. Stable codes via
/// [`Refusal::code`] go in `RequestRejected.reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Refusal {
    /// The actor is not a member of the room.
    #[error("not a member of the room")]
    NotMember,
    /// The prop is farther than the reach.
    #[error("out of reach")]
    OutOfReach,
    /// No prop with that id.
    #[error("no such prop")]
    NoSuchProp,
    /// The request names another room.
    #[error("the prop belongs to another room")]
    WrongRoom,
    /// Someone holds the prop.
    #[error("already held")]
    AlreadyHeld,
    /// Only the holder may place or throw.
    #[error("not the holder")]
    NotHolder,
    /// The placement or throw is not physically possible (non-finite, outside, in geometry).
    #[error("invalid placement")]
    InvalidPlacement,
    /// An unspecified or unknown operation.
    #[error("unknown operation")]
    UnknownOp,
    /// No open consent with that id.
    #[error("no such consent")]
    NoSuchConsent,
    /// An unknown consent kind.
    #[error("unknown consent kind")]
    UnknownKind,
    /// The target is not a member of the room.
    #[error("no such target")]
    NoSuchTarget,
    /// A consent request aimed at oneself.
    #[error("cannot ask oneself")]
    SelfTarget,
    /// Only the target may consent or decline.
    #[error("only the target may answer")]
    NotTarget,
    /// Only the requester may activate or cancel.
    #[error("only the requester may do that")]
    NotRequester,
    /// Only a party may release.
    #[error("not a party")]
    NotParty,
    /// The operation is not allowed in the consent's current state.
    #[error("not allowed in this state")]
    WrongState,
    /// The same request (requester, target, kind) is already open.
    #[error("duplicate request")]
    Duplicate,
    /// Too many open requests or scenes.
    #[error("too many")]
    TooMany,
    /// A string or payload larger than allowed.
    #[error("too large")]
    TooLarge,
    /// The member is not in the scene.
    #[error("not in the scene")]
    NotInScene,
    /// The member is in the scene already.
    #[error("already in the scene")]
    AlreadyInScene,
    /// The member has not received the scene's state yet.
    #[error("not synced yet")]
    NotSynced,
    /// The scene's tick has as many actions as allowed.
    #[error("tick full")]
    TickFull,
    /// A game state from the future or older than the one held.
    #[error("stale or future state")]
    BadTick,
    /// A teleport destination the room does not have or does not let clients ask for.
    #[error("no such destination")]
    NoSuchDestination,
    /// The two members block each other (one blocked the other).
    #[error("blocked")]
    Blocked,
    /// A value out of its range (a non-finite or negative radius).
    #[error("invalid value")]
    InvalidValue,
}

impl Refusal {
    /// Stable snake_case code for the wire, metrics and audit records.
    pub fn code(self) -> &'static str {
        match self {
            Self::NotMember => "not_member",
            Self::OutOfReach => "out_of_reach",
            Self::NoSuchProp => "no_such_prop",
            Self::WrongRoom => "wrong_room",
            Self::AlreadyHeld => "already_held",
            Self::NotHolder => "not_holder",
            Self::InvalidPlacement => "invalid_placement",
            Self::UnknownOp => "unknown_op",
            Self::NoSuchConsent => "no_such_consent",
            Self::UnknownKind => "unknown_kind",
            Self::NoSuchTarget => "no_such_target",
            Self::SelfTarget => "self_target",
            Self::NotTarget => "not_target",
            Self::NotRequester => "not_requester",
            Self::NotParty => "not_party",
            Self::WrongState => "wrong_state",
            Self::Duplicate => "duplicate",
            Self::TooMany => "too_many",
            Self::TooLarge => "too_large",
            Self::NotInScene => "not_in_scene",
            Self::AlreadyInScene => "already_in_scene",
            Self::NotSynced => "not_synced",
            Self::TickFull => "tick_full",
            Self::BadTick => "bad_tick",
            Self::NoSuchDestination => "no_such_destination",
            Self::Blocked => "blocked",
            Self::InvalidValue => "invalid_value",
        }
    }
}

/// A minimal JSON object writer for audit details (flat objects of strings and integers).
#[derive(Debug)]
pub(crate) struct JsonObject(String);

impl JsonObject {
    pub(crate) fn new() -> Self {
        Self(String::from("{"))
    }

    fn key(&mut self, k: &str) {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        push_json_str(&mut self.0, k);
        self.0.push(':');
    }

    pub(crate) fn str(mut self, k: &str, v: &str) -> Self {
        self.key(k);
        push_json_str(&mut self.0, v);
        self
    }

    pub(crate) fn num(mut self, k: &str, v: u64) -> Self {
        self.key(k);
        let _ = write!(self.0, "{v}");
        self
    }

    pub(crate) fn finish(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_strings() {
        let j = JsonObject::new()
            .str("a", "x\"y\\z\n\u{1}")
            .num("n", 42)
            .finish();
        assert_eq!(j, r#"{"a":"x\"y\\z\n\u0001","n":42}"#);
    }
}
