//! The public records, settings, statistics and errors of the frame codec.

use crate::quant::{Pose, QuantPose};

/// One entity as a client holds it.
///
/// `repr(C)`: the id, generation and kind come first, so the encoder's merge of what a client
/// holds with what it should hold (ids, then the pose only when ids match) reads one cache line
/// per entity where it can.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct EntityRecord {
    /// Entity id (unique in the room while the entity lives).
    pub id: u32,
    /// Life of the entity under its id; a new generation is a new entity.
    pub generation: u16,
    /// 0 avatar, 1 prop.
    pub kind: u8,
    /// The quantized pose.
    pub pose: QuantPose,
}

/// An entity a client should hold this frame, with its tier for that client.
#[derive(Clone, Copy, Debug)]
pub struct Visible<'a> {
    /// The entity's record (quantized once per tick by the room).
    pub record: &'a EntityRecord,
    /// 0 near .. 3 far: a tier-`t` entity's steady pose goes every `TIER_EVERY[t]` frames.
    pub tier: u8,
}

/// The client's own avatar: its full-precision pose and the last input the server applied.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnState {
    /// The client's own entity id.
    pub entity: u32,
    /// Full-precision pose (sent bit-exact) for prediction and reconciliation.
    pub pose: Pose,
    /// The last input sequence the server applied.
    pub last_input_seq: u32,
}

/// Encoder settings.
#[derive(Clone, Debug)]
pub struct EncoderConfig {
    /// Bandwidth budget in bytes per second (0 = unlimited). Class 4,000 (32 kbit/s), stadium
    /// 32,000 (256 kbit/s). Default 4,000.
    pub budget_bytes_per_s: u32,
    /// Frames per second this encoder is called at (spreads the budget). Default 20.
    pub broadcast_hz: u32,
    /// A check goes every `check_every` frames (0 = never; keyframes always carry one), on the
    /// frames whose sequence plus the client's own entity id is a multiple of it.
    /// Default 20.
    pub check_every: u32,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        Self {
            budget_bytes_per_s: 4_000,
            broadcast_hz: 20,
            check_every: 20,
        }
    }
}

/// What one [`super::FrameEncoder::encode`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EncodeStats {
    /// Bytes appended.
    pub bytes: usize,
    /// Whether the frame is a keyframe.
    pub keyframe: bool,
    /// Entities sent (changed or new).
    pub changed: u32,
    /// Entities removed (including those whose generation changed).
    pub removed: u32,
    /// Pose updates deferred by the bandwidth budget.
    pub deferred: u32,
}

/// What a frame told the client.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecodedFrame {
    /// This frame's sequence number.
    pub seq: u32,
    /// The sequence number of the frame it applies onto.
    pub base_seq: u32,
    /// The room tick the frame describes.
    pub tick: u32,
    /// Whether the client forgot what it held first.
    pub keyframe: bool,
    /// Ids whose record changed or arrived, ascending.
    pub changed: Vec<u32>,
    /// Ids removed (a new generation is removed and in `changed`), ascending.
    pub removed: Vec<u32>,
    /// Whether the frame carried a check (and it matched).
    pub checked: bool,
}

/// Why a frame was not applied. On any of these the client should send `Resync`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// The frame ended early.
    #[error("truncated frame")]
    Truncated,
    /// The frame's base is not the last frame applied.
    #[error("chain break: expected base {expected}, got {got}")]
    ChainBreak {
        /// The last sequence number applied (0 when none).
        expected: u32,
        /// The base the frame named.
        got: u32,
    },
    /// The held state does not hash to the frame's check.
    #[error("check mismatch: expected {expected:#010x}, got {got:#010x}")]
    CheckMismatch {
        /// The check the frame carried.
        expected: u32,
        /// The hash of what the client would hold.
        got: u32,
    },
    /// The frame breaks the format.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    /// The frame or a count in it exceeds the limits.
    #[error("frame too large")]
    TooLarge,
}
