//! The props of a room's physics: who holds what, placing and throwing, and their states.

use rapier3d::math::{Rotation, Vector};
use rapier3d::prelude::RigidBodyType;

use super::*;

impl RoomPhysics {
    /// A prop's centre.
    pub fn prop_position(&self, prop: u32) -> Option<[f32; 3]> {
        let p = self.props.get(&prop)?;
        self.world.bodies.get(p.body).map(|b| arr(b.translation()))
    }

    /// The avatar holding a prop, if any (`None` also for unknown props).
    pub fn prop_holder(&self, prop: u32) -> Option<u32> {
        self.props.get(&prop).and_then(|p| p.holder)
    }

    /// Marks a prop held by `holder` (it becomes kinematic and follows the holder each step) or
    /// released (`None`: it becomes dynamic again, at rest, and falls; if it is inside static
    /// geometry it is first moved to its former holder's capsule centre). Ownership rules are the
    /// caller's; an unknown prop or holder is ignored.
    pub fn set_prop_held(&mut self, prop: u32, holder: Option<u32>) {
        let offset = v(self.cfg.hold_offset);
        let holder_pos = holder.and_then(|h| self.avatars.get(&h).map(|a| a.position));
        if holder.is_some() && holder_pos.is_none() {
            return;
        }
        let Some(p) = self.props.get(&prop) else {
            return;
        };
        // Where a released prop goes: where it is, unless that is inside static geometry (the
        // hold offset can reach into a wall the holder stands against); then at the previous
        // holder's capsule centre (clear of geometry by construction), else at its home.
        let drop_at = match (holder_pos, p.holder) {
            (None, Some(previous)) => self.world.bodies.get(p.body).and_then(|b| {
                let at = b.translation();
                if !self.hits_statics(Pose::from_translation(at), p.probe.as_ref()) {
                    return None;
                }
                Some(
                    self.avatars
                        .get(&previous)
                        .map_or(p.home, |a| a.position + self.center_offset()),
                )
            }),
            _ => None,
        };
        let Some(p) = self.props.get_mut(&prop) else {
            return;
        };
        p.holder = holder;
        let Some(b) = self.world.bodies.get_mut(p.body) else {
            return;
        };
        match holder_pos {
            Some(pos) => {
                b.set_body_type(RigidBodyType::KinematicPositionBased, true);
                b.set_translation(pos + offset, true);
            }
            None => {
                b.set_body_type(RigidBodyType::Dynamic, true);
                if let Some(at) = drop_at {
                    b.set_translation(at, true);
                }
            }
        }
        b.set_linvel(Vector::ZERO, true);
        b.set_angvel(Vector::ZERO, true);
    }

    /// Puts a prop at `at` (its centre), at rest and released. Refused if `at` is non-finite,
    /// outside the room, or overlaps static geometry; `authoritative` is then the prop's
    /// current position.
    pub fn place_prop(&mut self, prop: u32, at: [f32; 3]) -> Result<(), MoveRejection> {
        self.put_prop(prop, at, [0.0; 3])
    }

    /// Throws a prop from `from` with `velocity` (scaled down to `max_throw_speed_mps`).
    /// Invalid input (unknown prop, non-finite numbers, `from` outside the room or inside
    /// geometry) leaves the prop as it was; use [`Self::try_throw_prop`] to learn why.
    pub fn throw_prop(&mut self, prop: u32, from: [f32; 3], velocity: [f32; 3]) {
        // Invalid throws are documented as no-ops; the reason is available via try_throw_prop.
        let _ = self.try_throw_prop(prop, from, velocity);
    }

    /// [`Self::throw_prop`] that says why a throw was refused.
    pub fn try_throw_prop(
        &mut self,
        prop: u32,
        from: [f32; 3],
        velocity: [f32; 3],
    ) -> Result<(), MoveRejection> {
        if !velocity.iter().all(|x| x.is_finite()) {
            return Err(MoveRejection {
                reason: RejectReason::NonFinite,
                authoritative: self.prop_position(prop).unwrap_or(from),
            });
        }
        let speed = length(velocity);
        let scale = if speed > self.cfg.max_throw_speed_mps {
            self.cfg.max_throw_speed_mps / speed
        } else {
            1.0
        };
        self.put_prop(prop, from, velocity.map(|c| c * scale))
    }

    fn put_prop(
        &mut self,
        prop: u32,
        at: [f32; 3],
        velocity: [f32; 3],
    ) -> Result<(), MoveRejection> {
        let Some(current) = self.prop_position(prop) else {
            return Err(MoveRejection {
                reason: RejectReason::UnknownEntity,
                authoritative: at,
            });
        };
        let reject = |reason| {
            Err(MoveRejection {
                reason,
                authoritative: current,
            })
        };
        if !at.iter().all(|x| x.is_finite()) {
            return reject(RejectReason::NonFinite);
        }
        if !self.in_bounds(at) {
            return reject(RejectReason::OutOfBounds);
        }
        let Some(p) = self.props.get(&prop) else {
            return reject(RejectReason::UnknownEntity);
        };
        if self.hits_statics(Pose::from_translation(v(at)), p.probe.as_ref()) {
            return reject(RejectReason::Blocked);
        }
        let body = p.body;
        if let Some(p) = self.props.get_mut(&prop) {
            p.holder = None;
        }
        if let Some(b) = self.world.bodies.get_mut(body) {
            b.set_body_type(RigidBodyType::Dynamic, true);
            b.set_translation(v(at), true);
            b.set_rotation(Rotation::IDENTITY, true);
            b.set_linvel(v(velocity), true);
            b.set_angvel(Vector::ZERO, true);
        }
        Ok(())
    }

    /// A prop's full physical state.
    pub fn prop_state(&self, prop: u32) -> Option<PropState> {
        let p = self.props.get(&prop)?;
        let b = self.world.bodies.get(p.body)?;
        let r = b.rotation();
        Some(PropState {
            position: arr(b.translation()),
            rotation: [r.x, r.y, r.z, r.w],
            velocity: arr(b.linvel()),
            holder: p.holder,
            at_rest: b.is_sleeping(),
        })
    }

    /// Every prop's full state, in id order.
    pub fn prop_states(&self) -> impl Iterator<Item = (u32, PropState)> + '_ {
        self.props
            .keys()
            .filter_map(|id| self.prop_state(*id).map(|s| (*id, s)))
    }

    /// Every prop and its centre, in id order.
    pub fn props(&self) -> impl Iterator<Item = (u32, [f32; 3])> + '_ {
        self.props.iter().filter_map(|(id, p)| {
            self.world
                .bodies
                .get(p.body)
                .map(|b| (*id, arr(b.translation())))
        })
    }
}
