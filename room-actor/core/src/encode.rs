//! Per-member frame encoding: a broadcast quantizes the arena once, builds the interest index,
//! and encodes each member's frame (on scoped threads when [`crate::RoomConfig::encode_threads`] says
//! so and the pass is large enough).
//!
//! Performance: runs every broadcast and, in a spread room, at every group slot.

use plaza_proto::frame::{EntityRecord, OwnState, Visible};
use plaza_proto::quant::{ANIM_INSTANT, Pose, prop_orientation, quantize};

use crate::interactions::{PROP_KIND, prop_entity};
use crate::interest::{self, InterestIndex, InterestSet};
use crate::{Member, Outbound, Room, RoomStats, SessionId};

impl Room {
    /// Start a broadcast period: every member gets one frame of the current state, at once or
    /// (from [`crate::RoomConfig::spread_from_members`] members on) spread over the group wakes
    /// of the period ([`crate::WakeGrid`]; [`Room::advance`] encodes them, this call only
    /// builds the period's interest index). Frames of the previous period that are still due
    /// go first.
    ///
    /// Performance: runs every broadcast.
    pub(crate) fn broadcast(&mut self, out: &mut Vec<Outbound>) {
        self.build_arena();
        let avatars = self.avatars();
        self.index = InterestIndex::build(
            self.arena[..avatars]
                .iter()
                .map(|r| (r.id, r.pose.position_m())),
            self.cfg.tier_bands_m,
        );
        if self.next_group < self.groups {
            let rest = self.next_group..self.groups;
            self.encode_frames(rest, out);
        }
        self.stats.broadcasts += 1;
        // The arena was marked for the period that just ended; this one starts now.
        self.mark_instants();
        let spread = self.cfg.spread_from_members > 0
            && self.members.len() >= self.cfg.spread_from_members as usize;
        self.period_start_ms = self.now_ms;
        if spread {
            // Every group at its own wake (the first half a slot from now).
            self.groups = crate::schedule::group_count(&self.cfg);
            self.next_group = 0;
        } else {
            self.groups = 1;
            self.next_group = 1;
            self.encode_frames(0..1, out);
        }
    }

    /// Encode the groups of the current broadcast period from the next one still due through
    /// group `last` (clamped to the period's groups), in one pass; the arena is rebuilt first
    /// when a step ran since it was built (a group slot between steps reuses it).
    /// Returns the number of groups encoded.
    pub(crate) fn encode_groups_through(&mut self, last: u32, out: &mut Vec<Outbound>) -> u32 {
        let end = last.saturating_add(1).min(self.groups);
        if self.next_group >= end {
            return 0;
        }
        let from = self.next_group;
        self.next_group = end;
        if self.arena_tick != self.tick {
            self.build_arena();
        }
        self.encode_frames(from..end, out);
        end - from
    }

    /// Avatars in the arena (they come first, props after them).
    pub(crate) fn avatars(&self) -> usize {
        self.arena.partition_point(|r| r.kind != PROP_KIND)
    }

    /// Quantize every avatar once (sorted by entity id), then every prop, into the arena; index
    /// the avatars' positions by id.
    ///
    /// An avatar's record is its last applied move carried forward along that move's velocity
    /// to this step (see [`lead_pose`]), so every frame's poses are of the tick it is stamped
    /// with. The authoritative pose (the own state, validation, the handoff) stays the move's.
    pub(crate) fn build_arena(&mut self) {
        self.arena.clear();
        self.arena_tick = self.tick;
        for m in self.members.values() {
            let lead_ms = self
                .now_ms
                .saturating_sub(m.last_move_ms)
                .min(m.lead_cap_ms);
            self.arena.push(EntityRecord {
                id: m.entity,
                generation: self.ids.generation(m.entity),
                kind: 0,
                pose: quantize(&lead_pose(&m.pose, lead_ms)),
            });
        }
        self.arena.sort_unstable_by_key(|r| r.id);
        let avatars = self.arena.len();
        // Props after the avatars: their ids are above every avatar's, so the arena stays
        // sorted. Every member sees every prop.
        for (prop_id, st) in self.physics.prop_states() {
            let Some(id) = prop_entity(prop_id) else {
                continue;
            };
            let pose = Pose {
                position: st.position,
                velocity: st.velocity,
                ..Pose::default()
            };
            // A prop's orientation: the yaw field and, tilted, pitch and roll in the head slot.
            let mut q = quantize(&pose);
            (q.yaw, q.head) = prop_orientation(st.rotation);
            self.arena.push(EntityRecord {
                id,
                generation: 0,
                kind: PROP_KIND,
                pose: q,
            });
        }
        // Arena index of each avatar id (ids are small and dense), `u32::MAX` for none, and
        // each avatar's position in metres (converted once).
        let max_id = self.arena[..avatars].last().map_or(0, |r| r.id as usize);
        self.slot.clear();
        self.slot.resize(max_id + 1, u32::MAX);
        self.pos_m.clear();
        for (i, r) in self.arena[..avatars].iter().enumerate() {
            self.slot[r.id as usize] = i as u32;
            self.pos_m.push(r.pose.position_m());
        }
        self.mark_instants();
    }

    /// Sets the instant bit on the arena records of avatars teleported since the last
    /// broadcast but one (see `Room::instants`), clears it on the others, and forgets the
    /// teleports that are over.
    fn mark_instants(&mut self) {
        if self.instants.is_empty() {
            return;
        }
        let now = self.stats.broadcasts;
        for &(entity, at) in &self.instants {
            let Some(&i) = self.slot.get(entity as usize) else {
                continue;
            };
            if let Some(r) = self.arena.get_mut(i as usize) {
                if now <= at + 1 {
                    r.pose.anim_flags |= ANIM_INSTANT;
                } else {
                    r.pose.anim_flags &= !ANIM_INSTANT;
                }
            }
        }
        self.instants.retain(|&(_, at)| now <= at + 1);
    }

    /// Encode and emit one frame for each member whose group (entity id modulo the period's
    /// group count) is in `groups`, from the arena and the period's interest index, in session
    /// order. With [`crate::RoomConfig::encode_threads`] above 1 and enough frames, the members are
    /// split into that many runs encoded on scoped threads; the frames and their order are the
    /// same either way.
    pub(crate) fn encode_frames(&mut self, groups: std::ops::Range<u32>, out: &mut Vec<Outbound>) {
        let start = out.len();
        self.encode_frames_into(groups, out);
        // Roster updates are made beside their frames (maybe on helper threads): number them
        // here, in delivery order, so event sequence numbers stay gap-free.
        for o in &mut out[start..] {
            if let Outbound::Event(e) = o {
                self.room_seq += 1;
                self.stats.events += 1;
                if matches!(e.body, crate::events::EventBody::Roster { .. }) {
                    self.stats.roster_updates += 1;
                }
                e.room_seq = self.room_seq;
            }
        }
    }

    fn encode_frames_into(&mut self, groups: std::ops::Range<u32>, out: &mut Vec<Outbound>) {
        let k = self.groups.max(1);
        // The emotes playing now, by avatar (a viewer that starts seeing one is told).
        let mut emotes: Vec<RunningEmote> = self
            .emotes
            .running()
            .filter_map(|(s, id, ts, started)| {
                let entity = self.members.get(&s)?.entity;
                let elapsed = started.map_or(0, |t| self.now_ms.saturating_sub(t));
                Some((entity, id.to_owned(), ts, elapsed))
            })
            .collect();
        emotes.sort_unstable_by_key(|e| e.0);
        let ctx = EncodeCtx {
            arena: &self.arena,
            avatars: self.avatars(),
            index: &self.index,
            slot: &self.slot,
            pos_m: &self.pos_m,
            bands_sq: self.cfg.tier_bands_m.map(|b| b * b),
            cap: self.cfg.interest_cap as usize,
            // The arena's tick, not this step's: in a spread room a later group's frame
            // carries the poses of the step that built the arena.
            tick: self.arena_tick as u32,
            // Interest is recomputed every `REFRESH_EVERY`-th broadcast per member, staggered
            // by entity; in between a member keeps whom it saw (see `interest::REFRESH_EVERY`).
            phase: self.stats.broadcasts,
            identities: &self.identities,
            roster_bytes: self.cfg.roster_bytes_per_broadcast as usize,
            emotes: &emotes,
        };
        let mut jobs: Vec<(SessionId, &mut Member)> = self
            .members
            .iter_mut()
            .filter(|(_, m)| groups.contains(&(m.entity % k)))
            .map(|(s, m)| (*s, m))
            .collect();
        let threads = (self.cfg.encode_threads.max(1) as usize)
            .min(jobs.len() / PARALLEL_MIN_FRAMES)
            .max(1);
        let stats = &mut self.stats;
        if threads == 1 {
            let mut scratch = EncodeScratch {
                interest: std::mem::take(&mut self.interest),
                buf: std::mem::take(&mut self.frame_buf),
                frame: std::mem::take(&mut self.frame_scratch),
                ..EncodeScratch::default()
            };
            encode_run(&ctx, &mut jobs, &mut scratch, stats, out);
            self.interest = scratch.interest;
            self.frame_buf = scratch.buf;
            self.frame_scratch = scratch.frame;
            return;
        }
        let per = jobs.len().div_ceil(threads);
        let mut runs = jobs.chunks_mut(per);
        let first = runs.next().unwrap_or_default();
        let ctx = &ctx;
        let results: Vec<(Vec<Outbound>, RoomStats)> = std::thread::scope(|scope| {
            let handles: Vec<_> = runs
                .map(|run| {
                    scope.spawn(move || {
                        let mut scratch = EncodeScratch::default();
                        let mut stats = RoomStats::default();
                        let mut out = Vec::with_capacity(run.len());
                        encode_run(ctx, run, &mut scratch, &mut stats, &mut out);
                        (out, stats)
                    })
                })
                .collect();
            let mut scratch = EncodeScratch {
                interest: std::mem::take(&mut self.interest),
                buf: std::mem::take(&mut self.frame_buf),
                frame: std::mem::take(&mut self.frame_scratch),
                ..EncodeScratch::default()
            };
            encode_run(ctx, first, &mut scratch, stats, out);
            self.interest = scratch.interest;
            self.frame_buf = scratch.buf;
            self.frame_scratch = scratch.frame;
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        });
        for (frames, st) in results {
            out.extend(frames);
            stats.frames += st.frames;
            stats.frame_bytes += st.frame_bytes;
            stats.deferrals += st.deferrals;
            stats.keyframes += st.keyframes;
        }
    }
}

/// A pass of [`Room::encode_frames`] runs on threads only with at least this many frames per
/// thread (below it a thread costs more than it saves).
const PARALLEL_MIN_FRAMES: usize = 64;

/// What every member's frame of one encode pass reads (shared by the threads of a pass).
struct EncodeCtx<'a> {
    arena: &'a [EntityRecord],
    /// Avatars in the arena (props after them).
    avatars: usize,
    index: &'a InterestIndex,
    /// Arena index of each avatar id, `u32::MAX` for none.
    slot: &'a [u32],
    /// Each avatar's position in metres, by arena index.
    pos_m: &'a [[f32; 3]],
    bands_sq: [f32; 3],
    cap: usize,
    tick: u32,
    phase: u64,
    /// Every member's identity, by avatar entity (roster entries).
    identities: &'a crate::people::Identities,
    /// Roster bytes per client per broadcast.
    roster_bytes: usize,
    /// The emotes playing now, sorted by avatar.
    emotes: &'a [RunningEmote],
}

/// An emote playing now: (avatar, emote id, its client timestamp, ms it has been playing).
type RunningEmote = (u32, String, u64, u64);

/// Buffers one thread of an encode pass reuses from frame to frame.
#[derive(Default)]
struct EncodeScratch {
    interest: InterestSet,
    buf: Vec<u8>,
    /// Whom the member saw before this frame (only while an emote plays).
    seen_before: Vec<u32>,
    /// The frame encoder's per-frame vectors, shared by every member this thread encodes.
    frame: plaza_proto::frame::EncodeScratch,
}

/// Encodes one frame for each of `jobs`, in order, appending them to `out` and counting them in
/// `stats`.
fn encode_run(
    ctx: &EncodeCtx<'_>,
    jobs: &mut [(SessionId, &mut Member)],
    scratch: &mut EncodeScratch,
    stats: &mut RoomStats,
    out: &mut Vec<Outbound>,
) {
    let EncodeCtx {
        arena,
        avatars,
        index,
        slot,
        pos_m,
        bands_sq,
        cap,
        tick,
        phase,
        identities,
        roster_bytes,
        emotes,
    } = *ctx;
    let slot_of = |id: u32| slot.get(id as usize).copied().filter(|s| *s != u32::MAX);
    let refresh_all = avatars <= cap + 1;
    let mut visible: Vec<Visible<'_>> = Vec::with_capacity(cap.min(arena.len()) + 8);
    for (session, m) in jobs.iter_mut() {
        if !emotes.is_empty() {
            scratch.seen_before.clear();
            scratch.seen_before.extend_from_slice(&m.seen);
        }
        let at = slot_of(m.entity).map_or(m.pose.position, |i| pos_m[i as usize]);
        if refresh_all
            || m.seen.is_empty()
            || (phase + u64::from(m.entity)).is_multiple_of(interest::REFRESH_EVERY)
        {
            index.nearest(m.entity, at, cap, &mut scratch.interest);
            m.seen.clear();
            m.seen.extend(scratch.interest.entries.iter().map(|e| e.0));
        }
        // Whom the member sees, minus those who left, those it blocks or is blocked by, and
        // those inside its personal space, with tiers from the current distance.
        visible.clear();
        let hidden = &m.hidden;
        let space_sq = m.personal_space_m * m.personal_space_m;
        m.seen.retain(|id| match slot_of(*id) {
            Some(i) => {
                if !hidden.is_empty() && hidden.binary_search(id).is_ok() {
                    return false;
                }
                let record = &arena[i as usize];
                let p = pos_m[i as usize];
                let (dx, dy, dz) = (p[0] - at[0], p[1] - at[1], p[2] - at[2]);
                let d2 = dx * dx + dy * dy + dz * dz;
                if d2 < space_sq {
                    return false;
                }
                let tier = index.tier_of(d2);
                visible.push(Visible { record, tier });
                true
            }
            None => false,
        });
        for record in &arena[avatars..] {
            let p = record.pose.position_m();
            let d2 = (0..3).map(|k| (p[k] - at[k]) * (p[k] - at[k])).sum::<f32>();
            let tier = interest::tier_in(&bands_sq, d2);
            visible.push(Visible { record, tier });
        }
        let own = OwnState {
            entity: m.entity,
            pose: m.pose,
            last_input_seq: m.last_input_seq,
        };
        let buf = &mut scratch.buf;
        buf.clear();
        let st = m
            .encoder
            .encode_with(&mut scratch.frame, tick, Some(&own), &visible, buf);
        if st.keyframe {
            // The client starts over: its next expression message replaces everything.
            m.expressions.reset();
        }
        // One exact-size allocation per frame; `buf` keeps its capacity.
        let bytes = buf.clone();
        // Who the frame's avatars are: before the frame (a keyframe's full roster first).
        if let Some(body) = m
            .roster
            .update(&m.seen, identities, st.keyframe, roster_bytes)
        {
            out.push(Outbound::Event(crate::events::RoomEvent {
                room_seq: 0,
                to: vec![*session],
                body,
            }));
        }
        // An avatar whose emote plays that this frame starts showing (new in the view, or any
        // after a keyframe: the client starts over): tell the member it is playing.
        if !emotes.is_empty() {
            for id in &m.seen {
                if !st.keyframe && scratch.seen_before.binary_search(id).is_ok() {
                    continue;
                }
                if let Ok(i) = emotes.binary_search_by_key(id, |e| e.0) {
                    let (entity, emote_id, timestamp_ms, elapsed_ms) = &emotes[i];
                    out.push(Outbound::Event(crate::events::RoomEvent {
                        room_seq: 0,
                        to: vec![*session],
                        body: crate::events::EventBody::EmoteInProgress {
                            entity: *entity,
                            emote_id: emote_id.clone(),
                            timestamp_ms: *timestamp_ms,
                            elapsed_ms: *elapsed_ms,
                        },
                    }));
                }
            }
        }
        stats.frames += 1;
        stats.frame_bytes += bytes.len() as u64;
        stats.deferrals += u64::from(st.deferred);
        if st.keyframe {
            stats.keyframes += 1;
        }
        out.push(Outbound::Frame {
            session: *session,
            bytes,
            keyframe: st.keyframe,
        });
    }
}

/// How far (ms) an avatar's pose is carried forward along its velocity at most: one move
/// interval of a 10 Hz client. Below it, the client's own step between its last two moves
/// bounds the lead (a 20 Hz client: 50 ms), so a frame never shows an avatar past where its
/// next move is due; a client that stops sending without a stop move is shown at most that
/// far ahead of its last move.
pub(crate) const MAX_LEAD_MS: u64 = 100;

/// The pose of an avatar whose last move was applied `lead_ms` ago, as of now: carried forward
/// along the move's velocity, for at most [`MAX_LEAD_MS`] (the caller bounds `lead_ms` by the
/// client's own move step).
///
/// Moves arrive at the client's rate (10–20 Hz) on the room's 50 Hz step grid and a frame
/// holds the latest applied one, so without the lead a frame stamped tick `b` shows the pose of
/// a tick up to a move interval earlier, by a phase that drifts: a walker at 5 m/s is shown up
/// to 0.25 m (on average 0.12 m) behind where its path is at the frame's tick. A stopped,
/// corrected or teleported avatar has zero velocity and is not moved.
pub(crate) fn lead_pose(pose: &Pose, lead_ms: u64) -> Pose {
    if lead_ms == 0 || pose.velocity == [0.0; 3] {
        return *pose;
    }
    let s = lead_ms.min(MAX_LEAD_MS) as f32 / 1000.0;
    let mut p = *pose;
    for (x, v) in p.position.iter_mut().zip(pose.velocity) {
        *x += v * s;
    }
    p
}
