//! A plain, serde-free copy of a room's state, for drain (hand a room to another node) and
//! restore.
//!
//! [`Room::save_state`] copies what a successor needs to carry on: tick and sequence counters,
//! members (session, avatar entity and generation, pose, input bookkeeping), props (holder,
//! revision, physical state), open consents, emote schedules and lockstep scenes.
//! [`Room::restore`] rebuilds a room from it. Not included: queued joins, leaves and inputs
//! (save it between steps; unapplied inputs are lost), frame encoder state (every
//! member gets a keyframe after a restore), physics internals beyond positions and velocities
//! (a prop's rotation restarts upright), and teleports in flight (the instant bit of a teleport
//! just before the save is not repeated). Members carry their wallet, profile and personal
//! space; blocks are saved per wallet pair. Serializing it is the caller's job.

use std::collections::{BTreeMap, BTreeSet};

use plaza_proto::frame::{EncoderConfig, FrameEncoder};
use plaza_proto::quant::Pose;

use crate::consent::Consent;
use crate::emotes::EmoteSlot;
use crate::interactions::PROP_ENTITY_BASE;
use crate::interactions::PropSlot;
use crate::scene::Scene;
use crate::{Member, Room, SessionId};

/// One member in a [`RoomState`].
#[derive(Clone, Debug, PartialEq)]
pub struct MemberState {
    /// Session.
    pub session: SessionId,
    /// Avatar entity id.
    pub entity: u32,
    /// The entity id's generation.
    pub generation: u16,
    /// Authoritative pose.
    pub pose: Pose,
    /// The last input sequence applied.
    pub last_input_seq: u32,
    /// Client timestamp of the last applied move, seconds.
    pub last_timestamp_s: Option<f64>,
    /// The member's identity (wallet). The handoff carries it beside the session; a restore
    /// with an empty wallet names the member `session:<id>`.
    pub wallet: String,
    /// The announced display name.
    pub display_name: String,
    /// The announced profile version.
    pub profile_version: u64,
    /// Personal-space radius, metres (0: off).
    pub personal_space_m: f32,
}

/// One prop in a [`RoomState`].
#[derive(Clone, Debug, PartialEq)]
pub struct PropState {
    /// Definition id.
    pub prop_id: u32,
    /// Server revision.
    pub revision: u64,
    /// Holder: session and avatar.
    pub holder: Option<(SessionId, u32)>,
    /// Centre, metres.
    pub position: [f32; 3],
    /// Orientation `[x, y, z, w]` (informational: restore puts props upright).
    pub rotation: [f32; 4],
    /// Linear velocity, m/s.
    pub velocity: [f32; 3],
}

/// A room's state at the end of a step.
#[derive(Clone, Debug, PartialEq)]
pub struct RoomState {
    /// The room's id.
    pub room_id: String,
    /// Steps run.
    pub tick: u64,
    /// Room time of the last step, ms.
    pub now_ms: u64,
    /// Broadcast accumulator (keeps the broadcast phase).
    pub broadcast_acc: u32,
    /// Last event sequence number issued.
    pub room_seq: u64,
    /// Last audit counter issued.
    pub audit_seq: u64,
    /// Members, by session.
    pub members: Vec<MemberState>,
    /// Props, by id.
    pub props: Vec<PropState>,
    /// The last consent id issued.
    pub consent_last_id: u64,
    /// Open consents, by id.
    pub consents: Vec<Consent>,
    /// Emote schedules.
    pub emotes: BTreeMap<SessionId, EmoteSlot>,
    /// Emotes dropped as stale so far.
    pub emotes_stale: u64,
    /// Lockstep scenes.
    pub scenes: BTreeMap<String, Scene>,
    /// Blocks, `(blocker wallet, blocked wallet)`, sorted.
    pub blocks: Vec<(String, String)>,
}

impl Room {
    /// A copy of the room's state (call it between steps).
    pub fn save_state(&self) -> RoomState {
        let members = self
            .members
            .iter()
            .map(|(session, m)| MemberState {
                session: *session,
                entity: m.entity,
                generation: self.ids.generation(m.entity),
                pose: m.pose,
                last_input_seq: m.last_input_seq,
                last_timestamp_s: m.last_timestamp_s,
                wallet: m.wallet.clone(),
                display_name: self
                    .identities
                    .get(&m.entity)
                    .map_or_else(String::new, |i| i.display_name.clone()),
                profile_version: self
                    .identities
                    .get(&m.entity)
                    .map_or(0, |i| i.profile_version),
                personal_space_m: m.personal_space_m,
            })
            .collect();
        let props = self
            .physics
            .prop_states()
            .filter_map(|(id, st)| {
                let slot = self.props.slots().get(&id)?;
                Some(PropState {
                    prop_id: id,
                    revision: slot.revision,
                    holder: slot.holder,
                    position: st.position,
                    rotation: st.rotation,
                    velocity: st.velocity,
                })
            })
            .collect();
        RoomState {
            room_id: self.id.clone(),
            tick: self.tick,
            now_ms: self.now_ms,
            broadcast_acc: self.broadcast_acc,
            room_seq: self.room_seq,
            audit_seq: self.audit_seq,
            members,
            props,
            consent_last_id: self.consents.last_id(),
            consents: self.consents.open().values().copied().collect(),
            emotes: self.emotes.slots().clone(),
            emotes_stale: self.emotes.stale(),
            scenes: self.scenes.scenes().clone(),
            blocks: self
                .blocks
                .pairs()
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .collect(),
        }
    }

    /// Rebuild the room from `snap` (meant for a fresh room built with the same config):
    /// members and their avatars come back under the same entity ids, held props in their
    /// holders' hands, loose props where they were, counters where they stopped. Queued joins,
    /// leaves and inputs are discarded; every member gets a keyframe next.
    ///
    /// The state may come from another node through the directory, so it is not trusted:
    /// members beyond `max_members`, with a duplicate session or entity, or with an entity id
    /// outside the avatar range are dropped; a non-finite pose puts the avatar at its spawn
    /// point; consents, emote schedules and scene clients of parties that are not restored
    /// members are dropped. Returns how many entries were dropped (0 for a state this room
    /// type took itself).
    pub fn restore(&mut self, snap: RoomState) -> usize {
        let mut dropped = 0;
        for (_, m) in std::mem::take(&mut self.members) {
            self.physics.remove_avatar(m.entity);
            self.ids.free(m.entity);
        }
        self.identities.clear();
        self.instants.clear();
        self.blocks = crate::people::Blocks::default();
        for (a, b) in &snap.blocks {
            if a.is_empty()
                || b.is_empty()
                || a == b
                || a.len() > crate::people::MAX_WALLET
                || b.len() > crate::people::MAX_WALLET
                || self.blocks.add(a, b).is_err()
            {
                dropped += 1;
            }
        }
        self.pending.clear();
        self.actions.clear();
        self.action_counts.clear();
        self.tick = snap.tick;
        self.now_ms = snap.now_ms;
        self.broadcast_acc = snap.broadcast_acc;
        // The next activation's steps continue from the restored time (`Room::advance`).
        self.schedule.rebase(snap.now_ms);
        self.room_seq = snap.room_seq;
        self.audit_seq = snap.audit_seq;
        let mut entities = BTreeSet::new();
        for ms in snap.members {
            if self.members.len() as u32 >= self.cfg.max_members
                || ms.entity == 0
                || ms.entity >= PROP_ENTITY_BASE
                || self.members.contains_key(&ms.session)
                || !entities.insert(ms.entity)
            {
                dropped += 1;
                continue;
            }
            self.ids.claim(ms.entity, ms.generation);
            let mut pose = ms.pose;
            if !pose_is_finite(&pose) {
                pose = Pose {
                    position: crate::spawn_point(self.cfg.definition.spawn, ms.entity),
                    ..Pose::default()
                };
            }
            let at = self.physics.add_avatar(ms.entity, pose.position);
            pose.position = at;
            let encoder = FrameEncoder::new(EncoderConfig {
                budget_bytes_per_s: self.cfg.budget_bytes_per_s,
                broadcast_hz: self.cfg.broadcast_hz,
                check_every: self.cfg.check_every,
            });
            let wallet = if ms.wallet.is_empty() {
                format!("session:{}", ms.session)
            } else {
                ms.wallet
            };
            let mut member = Member::new(ms.entity, pose, wallet.clone(), encoder, snap.now_ms);
            member.last_input_seq = ms.last_input_seq;
            // A non-finite reference time would refuse every later move.
            member.last_timestamp_s = ms.last_timestamp_s.filter(|t| t.is_finite());
            member.personal_space_m = if ms.personal_space_m.is_finite() {
                ms.personal_space_m
                    .clamp(0.0, crate::people::MAX_PERSONAL_SPACE_M)
            } else {
                0.0
            };
            self.identities.insert(
                ms.entity,
                crate::people::Identity {
                    wallet,
                    display_name: crate::people::clean_display_name(&ms.display_name),
                    profile_version: ms.profile_version,
                    generation: ms.generation,
                },
            );
            self.members.insert(ms.session, member);
        }
        let mut slots = BTreeMap::new();
        for p in snap.props {
            let holder = p
                .holder
                .filter(|(s, e)| self.members.get(s).is_some_and(|m| m.entity == *e));
            match holder {
                Some((_, e)) => self.physics.set_prop_held(p.prop_id, Some(e)),
                None => {
                    // An impossible spot (the definition changed) leaves the prop at home.
                    let _ = self
                        .physics
                        .try_throw_prop(p.prop_id, p.position, p.velocity);
                }
            }
            slots.insert(
                p.prop_id,
                PropSlot {
                    revision: p.revision,
                    holder,
                },
            );
        }
        self.props.restore(slots);
        let is_member = |p: &crate::consent::Party, members: &BTreeMap<SessionId, Member>| {
            members
                .get(&p.session)
                .is_some_and(|m| m.entity == p.entity)
        };
        // Ids are never reused, even one of a dropped consent or beyond a lagging counter.
        let last_id = snap
            .consents
            .iter()
            .map(|c| c.id)
            .fold(snap.consent_last_id, u64::max);
        let n = snap.consents.len();
        let consents: Vec<Consent> = snap
            .consents
            .into_iter()
            .filter(|c| {
                c.requester.session != c.target.session
                    && is_member(&c.requester, &self.members)
                    && is_member(&c.target, &self.members)
            })
            .collect();
        dropped += n - consents.len();
        self.consents.restore(last_id, consents);
        let n = snap.emotes.len();
        let emotes: BTreeMap<SessionId, EmoteSlot> = snap
            .emotes
            .into_iter()
            .filter(|(s, _)| self.members.contains_key(s))
            .collect();
        dropped += n - emotes.len();
        self.emotes.restore(emotes, snap.emotes_stale);
        let mut scenes = snap.scenes;
        for scene in scenes.values_mut() {
            let n = scene.clients.len();
            scene
                .clients
                .retain(|s, (e, _)| self.members.get(s).is_some_and(|m| m.entity == *e));
            dropped += n - scene.clients.len();
            let clients = &scene.clients;
            scene.catching_up.retain(|s| clients.contains_key(s));
        }
        scenes.retain(|_, scene| !scene.clients.is_empty());
        self.scenes.restore(scenes);
        self.refresh_hidden();
        dropped
    }
}

fn pose_is_finite(p: &Pose) -> bool {
    let head = p.head.is_none_or(|h| h.iter().all(|v| v.is_finite()));
    let point = p.point_at.is_none_or(|v| v.iter().all(|x| x.is_finite()));
    p.position.iter().all(|v| v.is_finite())
        && p.velocity.iter().all(|v| v.is_finite())
        && p.yaw_deg.is_finite()
        && head
        && point
}
