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
pub use definition::{DefinitionError, PropDef, PropShape, RoomDefinition, StaticShape};
pub use movement::{MoveClaim, MoveOutcome, MoveRejection, RejectReason};
pub use world::{PropState, RoomPhysics};
