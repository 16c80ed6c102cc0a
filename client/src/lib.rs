//! `plaza-client`: the client side of Plaza, sans-I/O.
//!
//! * [`smoothing`]: the remote-avatar pipeline of seeds 000 and 003 (inbox, interpolation
//!   trailing one sample interval, damped or capped extrapolation, catch-up, correction blends,
//!   teleport / distance / gap snaps, head and point-at easing). The TypeScript SDK
//!   (`sdk/typescript/src/smoothing.ts`) is the same algorithm with the same parameters.
//! * [`trace`]: the shared smoothing trace (`fixtures/smoothing/trace.json`): recorded inputs
//!   (arrival times and frame record poses with reordering, gaps, duplicates and a teleport) and
//!   the poses both implementations must render from them.
//!
//! No connection management yet (issue 13): this crate reads no clock and opens no socket; the
//! caller feeds it samples and the local time.

pub mod smoothing;
pub mod trace;

pub use smoothing::{
    Extrapolation, Phase, Rendered, Sample, Smoother, SmoothingConfig, SmoothingStats, SnapReason,
    Spline,
};
