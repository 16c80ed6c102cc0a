//! `plaza-client`: the client side of Plaza.
//!
//! * [`connection`]: one session, sans I/O (quinn style: `handle_input`, `poll_event`,
//!   `poll_transmit`, `handle_timeout`, a clock the caller passes in): negotiate, join, leave,
//!   frames through `plaza_proto::frame::FrameDecoder`, typed events, resync, resume.
//! * [`replica`]: the replica directory keyed by entity id (seed 003) with one smoother per
//!   remote avatar, and the own avatar's light prediction with reconciliation (seed 004).
//! * [`smoothing`]: the remote-avatar pipeline of seeds 000 and 003 (inbox, interpolation
//!   trailing one sample interval, damped or capped extrapolation, catch-up, correction blends,
//!   teleport / distance / gap snaps, head and point-at easing). The TypeScript SDK
//!   (`sdk/typescript/src/smoothing.ts`) is the same algorithm with the same parameters.
//! * [`trace`]: the shared smoothing trace (`fixtures/smoothing/trace.json`).
//! * `tokio` (feature `tokio`): a WebSocket driver with reconnect (exponential backoff with
//!   jitter, resume token, resync).
//!
//! Everything but the `tokio` module reads no clock and opens no socket. How to write a client:
//! docs/CLIENTS.md.

pub mod connection;
pub mod replica;
pub mod smoothing;
pub mod trace;

#[cfg(feature = "tokio")]
pub mod tokio;

pub use connection::{
    CloseKind, Connection, ConnectionConfig, ConnectionStats, EntityChange, Event, FrameErrorKind,
    FrameFailure, InputError, RoomInfo, ServerError, State,
};
pub use replica::{MissingReason, OwnPredictor, Replica, ReplicaDirectory, Source, StaleReason};
pub use smoothing::{
    Extrapolation, Phase, Rendered, Sample, Smoother, SmoothingConfig, SmoothingStats, SnapReason,
    Spline,
};
