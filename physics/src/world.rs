//! [`RoomPhysics`]: one room's rapier3d world — static geometry, avatar capsules moved by a
//! kinematic character controller, and dynamic props that can be held, placed and thrown.
//!
//! It validates moves and applies them; it does not decide who may hold a prop (ownership
//! lives in the room core), keeps no wall clock (time comes in as arguments) and does no I/O.
//!
//! Two rapier worlds are kept: `world` simulates everything (props collide with statics and
//! avatars), and `statics` holds only the fixed geometry, so the character controller's
//! shape-casts never walk a tree with a thousand avatars in it.
//!
//! An avatar's body takes part in `world`'s step only while the avatar is within reach of a
//! prop that is not held ([`AVATAR_REACH_MARGIN_M`] beyond touching, plus how far the prop can
//! move in a step): far from every prop it cannot touch anything (avatars do not collide with
//! each other or with statics in `world`), so its body is disabled and the step does not pay for
//! it (in a room of 50 walkers the step cost 191 k instructions with every body in it, 52 k
//! with the far ones disabled). A body that comes back into reach is put where it would have
//! been and given the same kinematic target, so its contacts are the same as if it had stayed.

mod props;

use std::collections::BTreeMap;

use rapier3d::control::{CharacterAutostep, CharacterLength, KinematicCharacterController};
use rapier3d::math::{Pose, Rotation, Vector};
use rapier3d::parry::bounding_volume::BoundingVolume;
use rapier3d::parry::query::ShapeCastOptions;
use rapier3d::parry::shape::{Capsule, Shape, SharedShape};
use rapier3d::prelude::{
    ColliderBuilder, PhysicsWorld, RigidBodyBuilder, RigidBodyHandle, RigidBodyType,
};

use crate::config::PhysicsConfig;
use crate::definition::{
    DefinitionError, PropDef, PropShape, RoomDefinition, StaticShape, check_prop, check_static,
};
use crate::movement::{
    ClockTracker, ClockVerdict, MoveClaim, MoveOutcome, MoveRejection, RejectReason,
    check_displacement, claim_is_finite, distance, length, refused_step_counts,
};

/// Gap (metres) kept between the capsule's bottom and the feet position, so an avatar standing
/// on a floor is not in contact with it and slides freely. Larger than the controller offset.
const SKIN_M: f32 = 0.02;
/// The character controller's contact offset (metres).
const CONTROLLER_OFFSET_M: f32 = 0.01;
/// An avatar's body joins `world`'s step when its capsule comes within this distance (metres)
/// of a prop's bounding sphere, plus the distance the prop may travel in two steps; it leaves
/// the step again only beyond twice that.
const AVATAR_REACH_MARGIN_M: f32 = 1.0;
/// A placed or thrown prop may touch geometry by up to this much (metres) without counting
/// as inside it (resting on a floor is touching it).
const PLACE_SLACK_M: f32 = 0.01;

/// One avatar's capsule and validation state.
#[derive(Debug)]
struct Avatar {
    /// Its kinematic body in `world` (disabled while out of every prop's reach).
    body: RigidBodyHandle,
    /// Authoritative feet position (the body's kinematic target for the next step).
    position: Vector,
    /// Where the body's feet are before the next step: the target of the last step it took,
    /// or where `add_avatar`/`teleport` put it (kept while the body is disabled too).
    body_feet: Vector,
    /// The body takes part in `world`'s step.
    in_step: bool,
    /// Set by `add_avatar`/`teleport` until the next accepted move: that move may be an instant
    /// placement if it lands within tolerance of this point.
    pending_placement: bool,
    /// Claimed-versus-server clock accounting.
    clock: ClockTracker,
}

/// One dynamic prop.
#[derive(Debug)]
struct Prop {
    /// Its body in `world`.
    body: RigidBodyHandle,
    /// Its shape shrunk by [`PLACE_SLACK_M`], for placement checks (touching is fine).
    probe: SharedShape,
    /// Radius of a sphere around its centre that holds its shape (metres).
    radius: f32,
    /// Where it started (respawn point if it ever leaves the room).
    home: Vector,
    /// The avatar holding it, if any.
    holder: Option<u32>,
}

/// The physical state of one prop, for snapshots.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PropState {
    /// Centre (metres).
    pub position: [f32; 3],
    /// Orientation as a unit quaternion `[x, y, z, w]`.
    pub rotation: [f32; 4],
    /// Linear velocity (m/s).
    pub velocity: [f32; 3],
    /// The avatar holding it, if any.
    pub holder: Option<u32>,
    /// The body sleeps (at rest): its state will not change until something touches it.
    pub at_rest: bool,
}

/// The physics world of one room.
pub struct RoomPhysics {
    cfg: PhysicsConfig,
    bounds_min: Vector,
    bounds_max: Vector,
    spawn: Vector,
    world: PhysicsWorld,
    statics: PhysicsWorld,
    controller: KinematicCharacterController,
    capsule: Capsule,
    avatars: BTreeMap<u32, Avatar>,
    props: BTreeMap<u32, Prop>,
    steps: u64,
    /// Scratch: each free prop's centre and the distance within which an avatar's capsule
    /// centre keeps its body in the step.
    reach: Vec<(Vector, f32)>,
}

impl std::fmt::Debug for RoomPhysics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoomPhysics")
            .field("avatars", &self.avatars.len())
            .field("props", &self.props.len())
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

fn v(a: [f32; 3]) -> Vector {
    Vector::new(a[0], a[1], a[2])
}

fn arr(v: Vector) -> [f32; 3] {
    [v.x, v.y, v.z]
}

fn euler_deg(r: [f32; 3]) -> Rotation {
    let [x, y, z] = r.map(f32::to_radians);
    Rotation::from_rotation_z(z) * Rotation::from_rotation_y(y) * Rotation::from_rotation_x(x)
}

/// The collider of one static shape.
fn static_collider(s: &StaticShape) -> ColliderBuilder {
    match s {
        StaticShape::Box {
            center,
            half_extents,
            rotation_deg,
            ..
        } => ColliderBuilder::cuboid(half_extents[0], half_extents[1], half_extents[2])
            .position(Pose::from_parts(v(*center), euler_deg(*rotation_deg))),
        StaticShape::Cylinder {
            center,
            half_height,
            radius,
            ..
        } => ColliderBuilder::cylinder(*half_height, *radius)
            .position(Pose::from_translation(v(*center))),
        StaticShape::Ramp {
            from,
            to,
            width,
            thickness,
            ..
        } => {
            let (from, to) = (v(*from), v(*to));
            let along = to - from;
            let len = along.length();
            let z = along / len;
            // Local x is horizontal and across the ramp; local y is the surface normal.
            let x = Vector::Y.cross(z).normalize();
            let y = z.cross(x);
            let rot = Rotation::from_mat3(&rapier3d::math::Mat3::from_cols(x, y, z));
            let center = (from + to) * 0.5 - y * (thickness * 0.5);
            ColliderBuilder::cuboid(width * 0.5, thickness * 0.5, len * 0.5)
                .position(Pose::from_parts(center, rot))
        }
    }
}

/// Adds a prop's dynamic body to `world`.
fn insert_prop(world: &mut PhysicsWorld, p: &PropDef) -> Prop {
    let home = v(p.position);
    let body = world.insert_body(
        RigidBodyBuilder::dynamic()
            .translation(home)
            .linear_damping(0.1)
            .angular_damping(1.0)
            .ccd_enabled(true),
    );
    world.insert_collider(
        ColliderBuilder::new(prop_shape(&p.shape, 0.0))
            .density(p.density)
            .friction(0.7)
            .restitution(0.2),
        Some(body),
    );
    Prop {
        body,
        probe: prop_shape(&p.shape, PLACE_SLACK_M),
        radius: match p.shape {
            PropShape::Box { half_extents } => length(half_extents),
            PropShape::Ball { radius } => radius,
        },
        home,
        holder: None,
    }
}

/// The shape of a prop, shrunk by `shrink` metres on each side (never below 1 mm).
fn prop_shape(s: &PropShape, shrink: f32) -> SharedShape {
    let f = |x: f32| (x - shrink).max(0.001);
    match s {
        PropShape::Box { half_extents } => {
            SharedShape::cuboid(f(half_extents[0]), f(half_extents[1]), f(half_extents[2]))
        }
        PropShape::Ball { radius } => SharedShape::ball(f(*radius)),
    }
}

impl RoomPhysics {
    /// Builds the room's world from its definition (validate it first with
    /// [`RoomDefinition::validate`]; shapes or props that fail their own checks are skipped
    /// rather than trusted). The configuration is [`PhysicsConfig::sanitized`].
    pub fn new(def: &RoomDefinition, cfg: PhysicsConfig) -> Self {
        let cfg = cfg.sanitized();
        let finite = |a: [f32; 3]| a.iter().all(|x| x.is_finite());
        let mut world = PhysicsWorld::new();
        if finite(def.gravity) {
            world.gravity = v(def.gravity);
        }
        world.integration_parameters.dt = cfg.step_dt;
        let mut statics = PhysicsWorld::new();
        // An unvalidated definition must not poison the world: skip shapes that fail their
        // own checks (a validated definition has none).
        for (_, s) in def
            .statics
            .iter()
            .enumerate()
            .filter(|(i, s)| check_static(*i, s).is_ok())
        {
            let c = static_collider(s).friction(0.8);
            world.insert_collider(c.clone(), None);
            statics.insert_collider(c, None);
        }
        // Build the statics' query tree once; nothing in `statics` ever moves.
        statics.step();

        let mut props = BTreeMap::new();
        for p in def.props.iter().filter(|p| check_prop(p).is_ok()) {
            // First definition of an id wins (a validated definition has no duplicates).
            props
                .entry(p.id)
                .or_insert_with(|| insert_prop(&mut world, p));
        }

        let controller = KinematicCharacterController {
            offset: CharacterLength::Absolute(CONTROLLER_OFFSET_M),
            slide: true,
            autostep: (cfg.autostep_height_m > 0.0).then_some(CharacterAutostep {
                max_height: CharacterLength::Absolute(cfg.autostep_height_m),
                min_width: CharacterLength::Absolute(0.2),
                include_dynamic_bodies: false,
            }),
            max_slope_climb_angle: cfg.max_slope_deg.to_radians(),
            min_slope_slide_angle: cfg.max_slope_deg.to_radians(),
            snap_to_ground: None,
            ..KinematicCharacterController::default()
        };
        let capsule = Capsule::new_y(cfg.capsule_half_height, cfg.capsule_radius);

        Self {
            bounds_min: v(def.bounds_min),
            bounds_max: v(def.bounds_max),
            spawn: if finite(def.spawn) {
                v(def.spawn)
            } else {
                Vector::ZERO
            },
            cfg,
            world,
            statics,
            controller,
            capsule,
            avatars: BTreeMap::new(),
            props,
            steps: 0,
            reach: Vec::new(),
        }
    }

    /// The (sanitized) configuration in use.
    pub fn config(&self) -> &PhysicsConfig {
        &self.cfg
    }

    /// Number of fixed steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The room's bounds (`min`, `max`).
    pub fn bounds(&self) -> ([f32; 3], [f32; 3]) {
        (arr(self.bounds_min), arr(self.bounds_max))
    }

    /// The room's spawn point (feet position).
    pub fn spawn(&self) -> [f32; 3] {
        arr(self.spawn)
    }

    /// Adds a prop at run time (scene content). Refused if its numbers are invalid, it starts
    /// outside the room or inside static geometry, or its id is taken.
    pub fn add_prop(&mut self, def: &PropDef) -> Result<(), DefinitionError> {
        check_prop(def)?;
        if self.props.contains_key(&def.id) {
            return Err(DefinitionError::DuplicateProp(def.id));
        }
        if !self.in_bounds(def.position)
            || self.hits_statics(
                Pose::from_translation(v(def.position)),
                prop_shape(&def.shape, PLACE_SLACK_M).as_ref(),
            )
        {
            return Err(DefinitionError::PropOutOfBounds(def.id));
        }
        let prop = insert_prop(&mut self.world, def);
        self.props.insert(def.id, prop);
        Ok(())
    }

    /// Removes a prop; returns whether it existed.
    pub fn remove_prop(&mut self, prop: u32) -> bool {
        match self.props.remove(&prop) {
            Some(p) => {
                self.world.remove_body(p.body);
                true
            }
            None => false,
        }
    }

    /// Number of props in the world.
    pub fn prop_count(&self) -> usize {
        self.props.len()
    }

    /// Number of avatars in the world.
    pub fn avatar_count(&self) -> usize {
        self.avatars.len()
    }

    /// Whether a point lies inside the room bounds (false for non-finite points).
    pub fn in_bounds(&self, p: [f32; 3]) -> bool {
        let (lo, hi) = (arr(self.bounds_min), arr(self.bounds_max));
        (0..3).all(|i| p[i] >= lo[i] && p[i] <= hi[i])
    }

    /// Height from feet to capsule centre.
    fn center_offset(&self) -> Vector {
        Vector::new(
            0.0,
            self.cfg.capsule_half_height + self.cfg.capsule_radius + SKIN_M,
            0.0,
        )
    }

    fn capsule_pose(&self, feet: Vector) -> Pose {
        Pose::from_translation(feet + self.center_offset())
    }

    /// Whether `shape` at `pose` overlaps any static geometry.
    fn hits_statics(&self, pose: Pose, shape: &dyn Shape) -> bool {
        self.statics
            .query_pipeline()
            .intersect_shape(pose, shape)
            .next()
            .is_some()
    }

    /// How far (metres) an avatar with its feet at `feet` is above the static geometry under it
    /// (the capsule's bottom sphere cast straight down, so ledges under the capsule's rim count).
    /// Infinite over a void.
    pub fn height_above_ground(&self, feet: [f32; 3]) -> f32 {
        if !feet.iter().all(|x| x.is_finite()) {
            return f32::INFINITY;
        }
        let feet = v(feet);
        let r = self.cfg.capsule_radius;
        let ball = rapier3d::parry::shape::Ball::new(r);
        let pose = Pose::from_translation(feet + Vector::new(0.0, r + SKIN_M, 0.0));
        let reach = (self.bounds_max.y - self.bounds_min.y) + 10.0;
        self.statics
            .query_pipeline()
            .cast_shape(
                &pose,
                -Vector::Y,
                &ball,
                ShapeCastOptions {
                    target_distance: 0.0,
                    stop_at_penetration: true,
                    max_time_of_impact: reach,
                    compute_impact_geometry_on_penetration: false,
                },
            )
            .map_or(f32::INFINITY, |(_, hit)| {
                (hit.time_of_impact - SKIN_M).max(0.0)
            })
    }

    /// Whether an avatar capsule with its feet at `feet` would sink into static geometry by more
    /// than 5 mm (diagnostics and tests: accepted positions never do).
    pub fn penetrates_statics(&self, feet: [f32; 3]) -> bool {
        if !feet.iter().all(|x| x.is_finite()) {
            return false;
        }
        let probe = Capsule::new_y(
            self.cfg.capsule_half_height,
            (self.cfg.capsule_radius - 0.005).max(0.001),
        );
        self.hits_statics(self.capsule_pose(v(feet)), &probe)
    }

    /// A free feet position at or near `at` (rings of candidates around it), else the spawn.
    fn free_spot(&self, at: Vector) -> Vector {
        let start = if self.in_bounds(arr(at)) {
            at
        } else {
            self.spawn
        };
        let free = |p: Vector| {
            self.in_bounds(arr(p)) && !self.hits_statics(self.capsule_pose(p), &self.capsule)
        };
        if free(start) {
            return start;
        }
        for ring in 1..=12u8 {
            let r = f32::from(ring) * 0.6;
            for k in 0..12u8 {
                let a = f32::from(k) * std::f32::consts::TAU / 12.0;
                let p = start + Vector::new(r * a.cos(), 0.0, r * a.sin());
                if free(p) {
                    return p;
                }
            }
        }
        self.spawn
    }

    /// Adds an avatar capsule (half-height 0.9 m, radius 0.25 m by default) at `at`, or at the
    /// nearest free spot (the room's spawn if `at` is non-finite or outside the room). Returns
    /// the feet position actually used. Re-adding an existing entity replaces it.
    pub fn add_avatar(&mut self, entity: u32, at: [f32; 3]) -> [f32; 3] {
        self.remove_avatar(entity);
        let at = if at.iter().all(|x| x.is_finite()) {
            v(at)
        } else {
            self.spawn
        };
        let pos = self.free_spot(at);
        let body = self.world.insert_body(
            RigidBodyBuilder::kinematic_position_based().translation(pos + self.center_offset()),
        );
        self.world.insert_collider(
            ColliderBuilder::capsule_y(self.cfg.capsule_half_height, self.cfg.capsule_radius),
            Some(body),
        );
        self.avatars.insert(
            entity,
            Avatar {
                body,
                position: pos,
                body_feet: pos,
                in_step: true,
                pending_placement: true,
                clock: ClockTracker::default(),
            },
        );
        arr(pos)
    }

    /// Removes an avatar; any prop it held is dropped where it is.
    pub fn remove_avatar(&mut self, entity: u32) {
        if !self.avatars.contains_key(&entity) {
            return;
        }
        let held: Vec<u32> = self
            .props
            .iter()
            .filter(|(_, p)| p.holder == Some(entity))
            .map(|(id, _)| *id)
            .collect();
        for id in held {
            self.set_prop_held(id, None);
        }
        if let Some(a) = self.avatars.remove(&entity) {
            self.world.remove_body(a.body);
        }
    }

    /// The avatar's authoritative feet position.
    pub fn avatar_position(&self, entity: u32) -> Option<[f32; 3]> {
        self.avatars.get(&entity).map(|a| arr(a.position))
    }

    /// How far (ms) the avatar's claimed clock runs ahead of the server's (negative: behind).
    pub fn clock_lead_ms(&self, entity: u32) -> Option<i64> {
        self.avatars.get(&entity).map(|a| a.clock.lead_ms())
    }

    /// Validates a client's claimed move and, if valid, moves the avatar's capsule with the
    /// character controller against static geometry (it slides along walls, never through).
    ///
    /// `claimed.dt_s` is the client's claimed time since its previous move; `now_ms` is the
    /// server's time (any monotonic millisecond clock). Checks, in order: unknown avatar,
    /// non-finite values, `dt ≤ 0`, client clock lead, room bounds, instant placement, claimed
    /// velocity, displacement (speed, or teleport when farther than any one move may go),
    /// height above ground (fly hack), then geometry (see the crate docs for each rule).
    /// A rejection leaves the avatar where it was, except [`RejectReason::Blocked`],
    /// where it has moved up to the obstacle; `authoritative` is the position to correct to.
    /// A rejection whose step does not count ([`crate::refused_step_counts`]) leaves the
    /// avatar's clock tracker as it was, too.
    pub fn validate_and_move(
        &mut self,
        entity: u32,
        claimed: MoveClaim,
        now_ms: u64,
    ) -> Result<MoveOutcome, MoveRejection> {
        let clock_before = self.avatars.get(&entity).map(|a| a.clock);
        let result = self.check_and_move(entity, claimed, now_ms);
        if let Err(rej) = &result
            && !refused_step_counts(rej.reason, claimed.dt_s, &self.cfg)
            && let (Some(avatar), Some(clock)) = (self.avatars.get_mut(&entity), clock_before)
        {
            avatar.clock = clock;
        }
        result
    }

    fn check_and_move(
        &mut self,
        entity: u32,
        claimed: MoveClaim,
        now_ms: u64,
    ) -> Result<MoveOutcome, MoveRejection> {
        let spawn = arr(self.spawn);
        let center_offset = self.center_offset();
        let Some(avatar) = self.avatars.get_mut(&entity) else {
            return Err(MoveRejection {
                reason: RejectReason::UnknownEntity,
                authoritative: spawn,
            });
        };
        let current = avatar.position;
        let reject = |reason| {
            Err(MoveRejection {
                reason,
                authoritative: arr(current),
            })
        };
        if !claim_is_finite(&claimed) {
            return reject(RejectReason::NonFinite);
        }
        if claimed.dt_s <= 0.0 {
            return reject(RejectReason::NonPositiveDt);
        }
        let clock_flagged = match avatar.clock.observe(claimed.dt_s, now_ms, &self.cfg) {
            ClockVerdict::Ok => false,
            ClockVerdict::Flagged => true,
            ClockVerdict::Reject => return reject(RejectReason::Clock),
        };
        let (lo, hi) = (arr(self.bounds_min), arr(self.bounds_max));
        if !(0..3).all(|i| claimed.position[i] >= lo[i] && claimed.position[i] <= hi[i]) {
            return reject(RejectReason::OutOfBounds);
        }
        let dist = distance(claimed.position, arr(current));
        let placement =
            (avatar.pending_placement || claimed.is_instant) && dist <= self.cfg.tolerance_m;
        if !placement {
            if claimed.is_instant {
                return reject(RejectReason::Teleport);
            }
            let limit = self.cfg.speed_limit(claimed.movement_kind);
            if length(claimed.velocity) > limit + self.cfg.velocity_tolerance_mps {
                return reject(RejectReason::Speed);
            }
            if let Err(reason) = check_displacement(dist, claimed.dt_s, limit, &self.cfg) {
                return reject(reason);
            }
        }
        let body = avatar.body;
        if !placement && let Some(max_h) = self.cfg.max_height_above_ground_m {
            let target = v(claimed.position);
            let descent = current.y - target.y;
            let must_fall = self.cfg.min_fall_speed_mps * claimed.dt_s.min(self.cfg.max_move_dt_s);
            // Within `max_h` of the room's floor bound nothing can be higher than `max_h` above
            // ground, so floor-level walking skips the downward cast.
            if descent < must_fall
                && target.y - self.bounds_min.y > max_h
                && self.height_above_ground(claimed.position) > max_h
            {
                return Err(MoveRejection {
                    reason: RejectReason::Airborne,
                    authoritative: arr(current),
                });
            }
        }

        // Geometry: sweep the capsule from where it is towards the claim.
        let new_pos = current + self.sweep(current, v(claimed.position) - current);
        if let Some(avatar) = self.avatars.get_mut(&entity) {
            avatar.position = new_pos;
            avatar.pending_placement = false;
        }
        if let Some(b) = self.world.bodies.get_mut(body) {
            b.set_next_kinematic_translation(new_pos + center_offset);
        }
        let gap = distance(arr(new_pos), claimed.position);
        if gap > self.cfg.blocked_reject_m {
            return Err(MoveRejection {
                reason: RejectReason::Blocked,
                authoritative: arr(new_pos),
            });
        }
        Ok(MoveOutcome {
            position: arr(new_pos),
            blocked: gap > self.cfg.blocked_epsilon_m,
            clock_flagged,
        })
    }

    /// The translation the capsule (feet at `current`) can make towards `desired` against the
    /// static geometry: the whole of it when the sweep is free, else the character controller's
    /// slide. A final overlap check guards against shape-cast misses when starting within the
    /// contact offset of a surface: a result that would sink into geometry is cut back (by
    /// bisection) to the last position that does not.
    fn sweep(&self, current: Vector, desired: Vector) -> Vector {
        let queries = self.statics.query_pipeline();
        let pose = Pose::from_translation(current + self.center_offset());
        let len = desired.length();
        // Cheapest path: nothing static within the controller's offset of the swept box (the
        // common case of walking on a floor: the skin keeps the capsule's box above it).
        if len > 1.0e-5 {
            let swept = self
                .capsule
                .compute_aabb(&pose)
                .merged(
                    &self
                        .capsule
                        .compute_aabb(&Pose::from_translation(pose.translation + desired)),
                )
                .loosened(CONTROLLER_OFFSET_M);
            if !queries
                .intersect_aabb_conservative(swept)
                .any(|(_, c)| c.compute_aabb().intersects(&swept))
            {
                return desired;
            }
        }
        // Fast path: one sweep; if nothing is within the controller's offset of the path, the
        // controller would apply the whole translation in its first iteration anyway. (Keep
        // the target below SKIN_M, or every avatar standing on a floor takes the slow path.)
        let free = len > 1.0e-5
            && queries
                .cast_shape(
                    &pose,
                    desired / len,
                    &self.capsule,
                    ShapeCastOptions {
                        target_distance: CONTROLLER_OFFSET_M,
                        stop_at_penetration: true,
                        max_time_of_impact: len,
                        compute_impact_geometry_on_penetration: false,
                    },
                )
                .is_none();
        let controller = || {
            self.controller
                .move_shape(
                    self.cfg.step_dt,
                    &queries,
                    &self.capsule,
                    &pose,
                    desired,
                    |_| {},
                )
                .translation
        };
        let mut moved = if free { desired } else { controller() };
        let sinks = |t: Vector| self.penetrates_statics(arr(current + t));
        if sinks(moved) && !sinks(Vector::ZERO) {
            if free {
                moved = controller();
            }
            if sinks(moved) {
                let (mut lo, mut hi) = (0.0f32, 1.0f32);
                for _ in 0..12 {
                    let mid = 0.5 * (lo + hi);
                    if sinks(moved * mid) {
                        hi = mid;
                    } else {
                        lo = mid;
                    }
                }
                moved *= lo;
            }
        }
        moved
    }

    /// Server-issued teleport: puts the avatar at `to` (or the nearest free spot; the spawn if
    /// `to` is non-finite or outside the room). The next move from there is allowed, and may be
    /// an instant placement within tolerance of the new position.
    pub fn teleport(&mut self, entity: u32, to: [f32; 3]) {
        let to = if to.iter().all(|x| x.is_finite()) {
            v(to)
        } else {
            self.spawn
        };
        let pos = self.free_spot(to);
        let off = self.center_offset();
        let Some(a) = self.avatars.get_mut(&entity) else {
            return;
        };
        a.position = pos;
        a.body_feet = pos;
        a.pending_placement = true;
        if let Some(b) = self.world.bodies.get_mut(a.body) {
            b.set_translation(pos + off, true);
        }
    }

    /// Advances the world by one fixed step of `step_dt`: held props follow their holders,
    /// dynamic props fall, collide and come to rest; a prop that leaves the room respawns at
    /// its starting point.
    pub fn step(&mut self) {
        let offset = v(self.cfg.hold_offset);
        let mut orphaned = Vec::new();
        for (id, p) in &self.props {
            let Some(holder) = p.holder else { continue };
            match self.avatars.get(&holder) {
                Some(a) => {
                    if let Some(b) = self.world.bodies.get_mut(p.body) {
                        b.set_next_kinematic_translation(a.position + offset);
                    }
                }
                None => orphaned.push(*id),
            }
        }
        for id in orphaned {
            self.set_prop_held(id, None);
        }
        self.sync_avatar_bodies();
        self.world.step();
        self.steps += 1;
        for a in self.avatars.values_mut() {
            a.body_feet = a.position;
        }

        let lost: Vec<u32> = self
            .props
            .iter()
            .filter(|(_, p)| {
                self.world
                    .bodies
                    .get(p.body)
                    .is_some_and(|b| !self.in_bounds(arr(b.translation())))
            })
            .map(|(id, _)| *id)
            .collect();
        for id in lost {
            if let Some(p) = self.props.get_mut(&id) {
                p.holder = None;
                let home = p.home;
                if let Some(b) = self.world.bodies.get_mut(p.body) {
                    b.set_body_type(RigidBodyType::Dynamic, true);
                    b.set_translation(home, true);
                    b.set_rotation(Rotation::IDENTITY, true);
                    b.set_linvel(Vector::ZERO, true);
                    b.set_angvel(Vector::ZERO, true);
                }
            }
        }
    }

    /// Enables the bodies of avatars that may touch a free prop during the next step and
    /// disables the others (see the module docs). A body enabled here starts where it would
    /// have been had it stayed in the step, with the same kinematic target.
    fn sync_avatar_bodies(&mut self) {
        let off = self.center_offset();
        let capsule = self.cfg.capsule_half_height + self.cfg.capsule_radius;
        let travel = 2.0 * self.cfg.step_dt;
        // A push gives a prop about its pusher's speed (a little more with restitution): the
        // farthest any body moves in this step bounds how far a prop it hits can go in it.
        let push = self
            .avatars
            .values()
            .map(|a| (a.position - a.body_feet).length())
            .fold(0.0f32, f32::max);
        let mut reach = std::mem::take(&mut self.reach);
        reach.clear();
        reach.extend(
            self.props
                .values()
                .filter(|p| p.holder.is_none())
                .filter_map(|p| {
                    let b = self.world.bodies.get(p.body)?;
                    let moves = b.linvel().length() * travel + 2.0 * push;
                    let r = p.radius + capsule + AVATAR_REACH_MARGIN_M + moves;
                    Some((b.translation(), r))
                }),
        );
        for a in self.avatars.values_mut() {
            let (from, to) = (a.body_feet + off, a.position + off);
            // A body in the step leaves it only beyond twice the reach (no flapping in and out).
            let scale = if a.in_step { 2.0 } else { 1.0 };
            let near = reach
                .iter()
                .any(|(c, r)| segment_distance(*c, from, to) <= r * scale);
            if near == a.in_step {
                continue;
            }
            a.in_step = near;
            if let Some(b) = self.world.bodies.get_mut(a.body) {
                b.set_enabled(near);
                if near {
                    b.set_translation(from, true);
                    b.set_next_kinematic_translation(to);
                }
            }
        }
        self.reach = reach;
    }

    /// Every avatar and its feet position, in id order.
    pub fn avatars(&self) -> impl Iterator<Item = (u32, [f32; 3])> + '_ {
        self.avatars.iter().map(|(id, a)| (*id, arr(a.position)))
    }

    /// A deterministic hash (FNV-1a over exact bit patterns) of the state of every avatar and
    /// prop body: positions, rotations, velocities, holders, plus the step count. Equal inputs
    /// in the same binary give equal hashes.
    pub fn state_hash(&self) -> u64 {
        let mut h = Fnv::new();
        h.u64(self.steps);
        for (id, a) in &self.avatars {
            h.u64(u64::from(*id));
            h.vec(a.position);
            // Where its body is (or would be, while it is out of the step).
            h.vec(a.body_feet + self.center_offset());
        }
        for (id, p) in &self.props {
            h.u64(u64::from(*id));
            h.u64(p.holder.map_or(u64::MAX, u64::from));
            if let Some(b) = self.world.bodies.get(p.body) {
                h.vec(b.translation());
                let r = b.rotation();
                for c in [r.x, r.y, r.z, r.w] {
                    h.u64(u64::from(c.to_bits()));
                }
                h.vec(b.linvel());
                h.vec(b.angvel());
            }
        }
        h.finish()
    }
}

/// Distance from `p` to the segment `a`–`b`.
fn segment_distance(p: Vector, a: Vector, b: Vector) -> f32 {
    let ab = b - a;
    let len2 = ab.length_squared();
    let t = if len2 > 0.0 {
        ((p - a).dot(ab) / len2).clamp(0.0, 1.0)
    } else {
        0.0
    };
    (p - (a + ab * t)).length()
}

/// 64-bit FNV-1a, stable across builds and platforms (unlike `DefaultHasher`).
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
    fn u64(&mut self, x: u64) {
        for byte in x.to_le_bytes() {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn vec(&mut self, v: Vector) {
        for c in [v.x, v.y, v.z] {
            self.u64(u64::from(c.to_bits()));
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}
