//! # plaza-physics
//!
//! The rapier3d world of one Plaza room and the server's movement authority.
//!
//! # Layout
//! - [`definition`]: [`RoomDefinition`] — bounds, spawn, static geometry (boxes, cylinders,
//!   ramps) and props, loaded from TOML or JSON; [`RoomDefinition::default_plaza`] ships with
//!   the crate (`rooms/plaza.toml`).
//! - [`config`]: [`PhysicsConfig`] — fixed step (1/50 s), speed limits (12 m/s, per movement
//!   kind), tolerances, clock-lead bounds, capsule size.
//! - [`movement`]: [`MoveClaim`], [`MoveOutcome`], [`RejectReason`], [`MoveRejection`].
//! - [`world`]: [`RoomPhysics`] — avatars as kinematic capsules moved by rapier's character
//!   controller against static geometry; dynamic props that can be held, placed and thrown;
//!   a deterministic [`RoomPhysics::state_hash`].
//!
//! # Conventions
//! - Metres, seconds, y up. An avatar position is its **feet** (the bottom of its capsule):
//!   an avatar standing on a floor whose top is `y = 0` is at `y = 0`. Internally the capsule
//!   floats 2 cm above that point so it slides over floors without touching them.
//! - A prop position is its centre.
//! - Avatars do not collide with each other. Their kinematic capsules do push dynamic props.
//!
//! # Movement validation ([`RoomPhysics::validate_and_move`])
//! Checks, in order, each with its [`RejectReason`] (`code()` is the metrics label):
//! 1. unknown avatar → `unknown_entity`;
//! 2. NaN/∞ anywhere in the claim → `non_finite`;
//! 3. `dt_s ≤ 0` → `non_positive_dt`;
//! 4. client clock: the claimed `dt_s` are summed against the server's elapsed `now_ms`
//!    (idle lag is credited only up to `max_clock_lag_ms`, and a positive lead decays by
//!    `clock_drift_allowance`, 5 % of server time); a lead over
//!    `max_clock_lead_ms` sets `MoveOutcome::clock_flagged`, over `clock_reject_lead_ms`
//!    rejects → `clock`;
//! 5. outside the room bounds → `out_of_bounds`;
//! 6. the first move after `add_avatar`/`teleport`, or an `is_instant` claim, within
//!    `tolerance_m` of the authoritative position is an instant placement (steps 7–9 skipped);
//!    an `is_instant` claim farther away → `teleport`;
//! 7. claimed velocity over the kind's limit + `velocity_tolerance_mps` → `speed`;
//! 8. displacement over `limit × min(dt, max_move_dt_s) + tolerance_m` → `speed`, or
//!    `teleport` if farther than any single move may go (`limit × max_move_dt_s + tolerance_m`,
//!    12.25 m by default; e.g. a 50 m jump);
//! 9. feet more than `max_height_above_ground_m` (3 m) above the geometry below and not falling
//!    at `min_fall_speed_mps` → `airborne` (fly hack; `None` disables);
//! 10. geometry: the capsule is swept with rapier's kinematic character controller against the
//!     static geometry (slides along walls, climbs ramps and ≤ 0.3 m steps, never passes
//!     through). If it stops short of the claim by more than `blocked_epsilon_m` the outcome is
//!     `blocked` (send a correction); by more than `blocked_reject_m` it is rejected →
//!     `blocked`, with the avatar moved up to the obstacle.
//!
//! Every rejection carries the authoritative position (the correction to send).
//!
//! # Example
//! ```
//! use plaza_physics::{MoveClaim, PhysicsConfig, RejectReason, RoomDefinition, RoomPhysics};
//!
//! let mut room = RoomPhysics::new(&RoomDefinition::default_plaza(), PhysicsConfig::default());
//! let at = room.add_avatar(7, [0.0, 0.0, -8.0]);
//! let walk = |position, dt_s| MoveClaim {
//!     position, velocity: [0.0; 3], dt_s, client_time_ms: 0, movement_kind: 1, is_instant: false,
//! };
//! // 1 m in 100 ms: fine. A 30 m jump: a typed rejection carrying the correction.
//! let out = room.validate_and_move(7, walk([1.0, 0.0, -8.0], 0.1), 1_000).unwrap();
//! assert_eq!(out.position, [1.0, 0.0, -8.0]);
//! let err = room.validate_and_move(7, walk([25.0, 0.0, 10.0], 0.1), 1_100).unwrap_err();
//! assert_eq!((err.reason, err.reason.code()), (RejectReason::Teleport, "teleport"));
//! assert_eq!(err.authoritative, [1.0, 0.0, -8.0]);
//! room.step(); // one fixed 1/50 s step: props fall, held props follow their holders
//! # let _ = at;
//! ```
//!
//! # What it does not do
//! No async, no actors, no wall clock and no I/O (except the explicit
//! [`RoomDefinition::from_path`] loader): time comes in as arguments, and the world advances
//! only when [`RoomPhysics::step`] is called. Who may hold, place or throw a prop is decided by
//! the room core; this crate only does the physical side.
//!
//! # Determinism
//! The same sequence of calls on two worlds built from the same definition gives the same
//! [`RoomPhysics::state_hash`] in the same binary. Avatars and props are kept in id order
//! (`BTreeMap`), and rapier runs single-threaded. Cross-platform bit equality would need
//! rapier's `enhanced-determinism` feature, which is deliberately not enabled (it changes the
//! shared rapier build of the whole workspace).

pub mod config;
pub mod definition;
pub mod movement;
pub mod world;

pub use config::PhysicsConfig;
pub use definition::{
    DefinitionError, Portal, PropDef, PropShape, RoomDefinition, SpawnPoint, StaticShape,
};
pub use movement::{MoveClaim, MoveOutcome, MoveRejection, RejectReason, refused_step_counts};
pub use world::{PropState, RoomPhysics};

#[cfg(test)]
mod tests {
    /// The room actor keeps a `RoomPhysics` in its state, which ractor requires to be `Send`.
    #[test]
    fn room_physics_is_send() {
        fn assert_send<T: Send + 'static>() {}
        assert_send::<super::RoomPhysics>();
        assert_send::<super::RoomDefinition>();
        assert_send::<super::MoveRejection>();
    }
}
