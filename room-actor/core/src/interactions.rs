//! Prop ownership: pickup, place, throw and drop, with the seed's rules.
//!
//! The props themselves (bodies, positions, following the holder, falling) live in
//! `plaza-physics`; this module decides who may change them and keeps each prop's holder and
//! server revision. Rules, checked in this order:
//! * the actor must be a member of the room ([`Refusal::NotMember`]);
//! * a request that names a room must name this one ([`Refusal::WrongRoom`]);
//! * the prop must exist ([`Refusal::NoSuchProp`]);
//! * pickup: the prop must be unheld ([`Refusal::AlreadyHeld`]) and within reach of the actor's
//!   capsule centre ([`Refusal::OutOfReach`]);
//! * place and throw: only the holder ([`Refusal::NotHolder`]); a placement must be within reach
//!   and physically possible ([`Refusal::InvalidPlacement`]); a throw starts where the held prop
//!   is, with the client's velocity capped by physics.
//!
//! Every accepted change bumps the prop's revision by one and yields a [`PropUpdate`]. Requests
//! are applied one at a time in the order the room received them, so of two grabs in one tick
//! the first wins and the second is refused with `AlreadyHeld`: there is never more than one
//! holder. A holder who leaves drops what it holds ([`Props::drop_held_by`]).
//!
//! Props are entities in snapshots (record kind [`PROP_KIND`]) with the id
//! [`prop_entity`]`(prop_id)`: a range above every avatar id, so clients map one to the other
//! without a table. Every member sees every prop (props are few and room-defined; nearest-N
//! interest applies to avatars only), with a distance tier like avatars.

use std::collections::BTreeMap;

use plaza_physics::RoomPhysics;

use crate::SessionId;
use crate::events::{PropChange, Refusal};

/// Entity ids of props start here: `prop_entity(id) = PROP_ENTITY_BASE + id`. Avatar ids stay
/// below it (the room never has this many members).
pub const PROP_ENTITY_BASE: u32 = 1 << 20;

/// The snapshot record kind of props (avatars are kind 0).
pub const PROP_KIND: u8 = 1;

/// Height of an avatar's capsule centre above its feet (half-height 0.9 m + radius 0.25 m):
/// reach is measured from there.
pub const AVATAR_CENTER_HEIGHT_M: f32 = 1.15;

/// Default reach, metres.
pub const DEFAULT_REACH_M: f32 = 2.5;

/// The entity id of a prop in snapshots; `None` for ids too large to map.
pub fn prop_entity(prop_id: u32) -> Option<u32> {
    PROP_ENTITY_BASE.checked_add(prop_id)
}

/// What a member asks to do with a prop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InteractionKind {
    /// Take it.
    Pickup,
    /// Put it down at a position.
    Place,
    /// Throw it with a velocity.
    Throw,
}

/// A member's interaction request, decoded from `plaza.v1.Interaction`.
#[derive(Clone, Debug, PartialEq)]
pub struct InteractionRequest {
    /// What to do.
    pub kind: InteractionKind,
    /// The prop's definition id.
    pub prop_id: u32,
    /// The room the client addresses, if it names one (`Interaction.room_id`).
    pub room: Option<String>,
    /// For place: where the prop's centre goes.
    pub position: [f32; 3],
    /// For throw: the velocity.
    pub velocity: [f32; 3],
}

/// The actor of a request: its session, avatar and feet position.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Actor {
    /// Session.
    pub session: SessionId,
    /// Avatar entity.
    pub entity: u32,
    /// Feet position.
    pub feet: [f32; 3],
}

/// An accepted change of one prop.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PropUpdate {
    /// Definition id.
    pub prop_id: u32,
    /// Holder after the change: session and avatar.
    pub holder: Option<(SessionId, u32)>,
    /// Revision after the change.
    pub revision: u64,
    /// What happened.
    pub change: PropChange,
    /// The prop's centre after the change.
    pub position: [f32; 3],
}

/// Ownership state of one prop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PropSlot {
    /// Server revision: bumped by every accepted change.
    pub revision: u64,
    /// The holder's session and avatar.
    pub holder: Option<(SessionId, u32)>,
}

/// The room's props' ownership.
#[derive(Clone, Debug)]
pub struct Props {
    room: String,
    reach_m: f32,
    slots: BTreeMap<u32, PropSlot>,
}

impl Props {
    /// Ownership for the props `physics` has, in room `room`.
    pub fn new(room: impl Into<String>, reach_m: f32, physics: &RoomPhysics) -> Self {
        let slots = physics
            .props()
            .filter(|(id, _)| prop_entity(*id).is_some())
            .map(|(id, _)| (id, PropSlot::default()))
            .collect();
        Self {
            room: room.into(),
            reach_m: if reach_m.is_finite() && reach_m > 0.0 {
                reach_m
            } else {
                DEFAULT_REACH_M
            },
            slots,
        }
    }

    /// Every prop's slot, in id order.
    pub fn slots(&self) -> &BTreeMap<u32, PropSlot> {
        &self.slots
    }

    /// The holder of a prop.
    pub fn holder(&self, prop_id: u32) -> Option<SessionId> {
        self.slots.get(&prop_id)?.holder.map(|(s, _)| s)
    }

    /// Replace the slots (restore). Slots of props that physics does not know are dropped.
    pub fn restore(&mut self, slots: BTreeMap<u32, PropSlot>) {
        for (id, slot) in slots {
            if let Some(s) = self.slots.get_mut(&id) {
                *s = slot;
            }
        }
    }

    /// Apply one request from `actor` (`None` when the requester is not a member).
    pub fn apply(
        &mut self,
        physics: &mut RoomPhysics,
        actor: Option<Actor>,
        req: &InteractionRequest,
    ) -> Result<PropUpdate, Refusal> {
        let actor = actor.ok_or(Refusal::NotMember)?;
        if req.room.as_deref().is_some_and(|r| r != self.room) {
            return Err(Refusal::WrongRoom);
        }
        let slot = *self.slots.get(&req.prop_id).ok_or(Refusal::NoSuchProp)?;
        let here = physics
            .prop_position(req.prop_id)
            .ok_or(Refusal::NoSuchProp)?;
        let center = [
            actor.feet[0],
            actor.feet[1] + AVATAR_CENTER_HEIGHT_M,
            actor.feet[2],
        ];
        let change = match req.kind {
            InteractionKind::Pickup => {
                if slot.holder.is_some() {
                    return Err(Refusal::AlreadyHeld);
                }
                if distance(center, here) > self.reach_m {
                    return Err(Refusal::OutOfReach);
                }
                physics.set_prop_held(req.prop_id, Some(actor.entity));
                if physics.prop_holder(req.prop_id) != Some(actor.entity) {
                    return Err(Refusal::NotMember);
                }
                PropChange::Pickup
            }
            InteractionKind::Place => {
                if slot.holder.map(|(s, _)| s) != Some(actor.session) {
                    return Err(Refusal::NotHolder);
                }
                if !req.position.iter().all(|x| x.is_finite()) {
                    return Err(Refusal::InvalidPlacement);
                }
                if distance(center, req.position) > self.reach_m {
                    return Err(Refusal::OutOfReach);
                }
                physics
                    .place_prop(req.prop_id, req.position)
                    .map_err(|_| Refusal::InvalidPlacement)?;
                PropChange::Place
            }
            InteractionKind::Throw => {
                if slot.holder.map(|(s, _)| s) != Some(actor.session) {
                    return Err(Refusal::NotHolder);
                }
                physics
                    .try_throw_prop(req.prop_id, here, req.velocity)
                    .map_err(|_| Refusal::InvalidPlacement)?;
                PropChange::Throw
            }
        };
        let holder = match change {
            PropChange::Pickup => Some((actor.session, actor.entity)),
            _ => None,
        };
        Ok(self.bump(physics, req.prop_id, holder, change))
    }

    fn bump(
        &mut self,
        physics: &RoomPhysics,
        prop_id: u32,
        holder: Option<(SessionId, u32)>,
        change: PropChange,
    ) -> PropUpdate {
        let slot = self.slots.entry(prop_id).or_default();
        slot.revision += 1;
        slot.holder = holder;
        PropUpdate {
            prop_id,
            holder,
            revision: slot.revision,
            change,
            position: physics.prop_position(prop_id).unwrap_or([0.0; 3]),
        }
    }

    /// Drop every prop `session` holds (it left), in prop id order.
    pub fn drop_held_by(
        &mut self,
        physics: &mut RoomPhysics,
        session: SessionId,
    ) -> Vec<PropUpdate> {
        let held: Vec<u32> = self
            .slots
            .iter()
            .filter(|(_, s)| s.holder.is_some_and(|(h, _)| h == session))
            .map(|(id, _)| *id)
            .collect();
        held.into_iter()
            .map(|id| {
                physics.set_prop_held(id, None);
                self.bump(physics, id, None, PropChange::Drop)
            })
            .collect()
    }

    /// After a physics step: a prop that physics released on its own (it left the room and
    /// respawned) is dropped here too, so ownership never disagrees with the world.
    pub fn reconcile(&mut self, physics: &RoomPhysics) -> Vec<PropUpdate> {
        let lost: Vec<u32> = self
            .slots
            .iter()
            .filter(|(id, s)| {
                s.holder
                    .is_some_and(|(_, e)| physics.prop_holder(**id) != Some(e))
            })
            .map(|(id, _)| *id)
            .collect();
        lost.into_iter()
            .map(|id| self.bump(physics, id, None, PropChange::Drop))
            .collect()
    }
}

fn distance(a: [f32; 3], b: [f32; 3]) -> f32 {
    let d = [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
    (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt()
}

#[cfg(test)]
mod tests {
    use plaza_physics::{PhysicsConfig, RoomDefinition};

    use super::*;

    fn world() -> (RoomPhysics, Props, [f32; 3]) {
        let def = RoomDefinition::default_plaza();
        let mut physics = RoomPhysics::new(&def, PhysicsConfig::default());
        let props = Props::new("r", DEFAULT_REACH_M, &physics);
        let p1 = physics.prop_position(1).expect("the plaza has prop 1");
        // Stand next to prop 1.
        let feet = physics.add_avatar(1, [p1[0] + 1.0, def.spawn[1], p1[2]]);
        physics.add_avatar(2, [p1[0] - 1.0, def.spawn[1], p1[2]]);
        (physics, props, feet)
    }

    fn req(kind: InteractionKind, prop_id: u32) -> InteractionRequest {
        InteractionRequest {
            kind,
            prop_id,
            room: None,
            position: [0.0; 3],
            velocity: [0.0; 3],
        }
    }

    fn actor(session: SessionId, physics: &RoomPhysics) -> Option<Actor> {
        let entity = session as u32;
        physics.avatar_position(entity).map(|feet| Actor {
            session,
            entity,
            feet,
        })
    }

    #[test]
    fn pickup_then_only_the_holder_places() {
        let (mut ph, mut props, feet) = world();
        let a1 = actor(1, &ph);
        let a2 = actor(2, &ph);
        let up = props
            .apply(&mut ph, a1, &req(InteractionKind::Pickup, 1))
            .unwrap();
        assert_eq!(up.holder, Some((1, 1)));
        assert_eq!(up.revision, 1);
        assert_eq!(ph.prop_holder(1), Some(1));
        assert_eq!(
            props.apply(&mut ph, a2, &req(InteractionKind::Pickup, 1)),
            Err(Refusal::AlreadyHeld)
        );
        let mut place = req(InteractionKind::Place, 1);
        place.position = [feet[0] + 1.0, feet[1] + 0.5, feet[2]];
        assert_eq!(
            props.apply(&mut ph, a2, &place),
            Err(Refusal::NotHolder),
            "only the holder places"
        );
        let up = props.apply(&mut ph, a1, &place).unwrap();
        assert_eq!(up.holder, None);
        assert_eq!(up.revision, 2);
        assert_eq!(up.change, PropChange::Place);
        assert_eq!(ph.prop_holder(1), None);
    }

    #[test]
    fn refusals_have_typed_reasons() {
        let (mut ph, mut props, feet) = world();
        let a1 = actor(1, &ph);
        assert_eq!(
            props.apply(&mut ph, None, &req(InteractionKind::Pickup, 1)),
            Err(Refusal::NotMember)
        );
        let mut cross = req(InteractionKind::Pickup, 1);
        cross.room = Some("other".into());
        assert_eq!(
            props.apply(&mut ph, a1, &cross),
            Err(Refusal::WrongRoom),
            "a cross-room pickup is rejected"
        );
        cross.room = Some("r".into());
        assert!(
            props.apply(&mut ph, a1, &cross).is_ok(),
            "naming this room is fine"
        );
        assert_eq!(
            props.apply(&mut ph, a1, &req(InteractionKind::Pickup, 999)),
            Err(Refusal::NoSuchProp)
        );
        // Far from prop 5 (the stage crate), unless the plaza puts it next to us.
        let p5 = ph.prop_position(5).unwrap();
        if distance(p5, feet) > DEFAULT_REACH_M + AVATAR_CENTER_HEIGHT_M {
            assert_eq!(
                props.apply(&mut ph, a1, &req(InteractionKind::Pickup, 5)),
                Err(Refusal::OutOfReach)
            );
        }
        assert_eq!(
            props.apply(&mut ph, a1, &req(InteractionKind::Throw, 2)),
            Err(Refusal::NotHolder)
        );
        let mut far = req(InteractionKind::Place, 1);
        far.position = [feet[0] + 10.0, feet[1] + 0.5, feet[2]];
        assert_eq!(props.apply(&mut ph, a1, &far), Err(Refusal::OutOfReach));
        far.position = [f32::NAN, 0.0, 0.0];
        assert_eq!(
            props.apply(&mut ph, a1, &far),
            Err(Refusal::InvalidPlacement)
        );
        assert_eq!(props.slots()[&1].revision, 1, "refusals change nothing");
    }

    #[test]
    fn throw_releases_and_leaving_drops() {
        let (mut ph, mut props, _) = world();
        let a1 = actor(1, &ph);
        props
            .apply(&mut ph, a1, &req(InteractionKind::Pickup, 1))
            .unwrap();
        let mut t = req(InteractionKind::Throw, 1);
        t.velocity = [3.0, 2.0, 0.0];
        let up = props.apply(&mut ph, a1, &t).unwrap();
        assert_eq!(
            (up.change, up.holder, up.revision),
            (PropChange::Throw, None, 2)
        );
        props
            .apply(&mut ph, a1, &req(InteractionKind::Pickup, 2))
            .unwrap();
        let drops = props.drop_held_by(&mut ph, 1);
        assert_eq!(drops.len(), 1);
        assert_eq!((drops[0].prop_id, drops[0].change), (2, PropChange::Drop));
        assert_eq!(props.holder(2), None);
        assert_eq!(ph.prop_holder(2), None);
        assert!(props.drop_held_by(&mut ph, 1).is_empty());
    }

    #[test]
    fn prop_entities_sit_above_avatars() {
        assert_eq!(prop_entity(3), Some(PROP_ENTITY_BASE + 3));
        assert_eq!(prop_entity(u32::MAX), None);
    }
}
