//! The replica directory (seed 003) and the own avatar's light prediction (seed 004).
//!
//! [`ReplicaDirectory`] is keyed by network entity id. It is fed the [`Event`]s of a
//! [`crate::Connection`] ([`ReplicaDirectory::handle_event`]) and rendered once per local frame
//! ([`ReplicaDirectory::advance`]):
//!
//! * an entity that enters the view gets an entry and a [`Smoother`] (first sighting snaps);
//! * an update refreshes the entry's record, source and age and feeds the smoother one sample per
//!   new pose tick, keeping the render binding and the smoothing state (an AOI delta updates an
//!   avatar, never orphans it); a record with the instant bit (a server teleport) snaps;
//! * an entity that leaves the view (a frame's removal, a keyframe that no longer lists it) is
//!   removed and its binding handed back ([`ReplicaDirectory::drain_unbound`]), so the renderer
//!   despawns exactly what it spawned;
//! * a room transfer (`Joined` of another room), a `Left` and a terminal close clear everything;
//!   a transport loss that will be resumed keeps every entry (marked stale) until the resumed
//!   keyframe says what is still there, and blends the smoothers' restart from what was shown, so
//!   no avatar pops on a reconnect.
//!
//! Each entry records its source, age, smoothing diagnostics and missing / stale reasons. The own
//! avatar never gets a remote entry; [`OwnPredictor`] shows it from local input and reconciles
//! against the server's `last_input_seq`.
//!
//! Memory is bounded: entries are those the connection holds (at most 65,536), each with a
//! smoother whose inbox is capped.

use std::collections::{BTreeMap, VecDeque};

use plaza_proto::frame::{EntityRecord, MAX_ENTITIES, OwnState, TIER_EVERY};
use plaza_proto::pb;
use plaza_proto::quant::ANIM_INSTANT;

use crate::connection::{EntityChange, Event};
use crate::smoothing::{Phase, Rendered, Sample, Smoother, SmoothingConfig, SmoothingStats, V3};

/// Where an entry's data last came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A keyframe (full sync).
    Keyframe,
    /// A delta frame.
    Delta,
}

/// Why an entry is stale (its data may no longer be true).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaleReason {
    /// The connection was lost; the entry waits for the resumed keyframe.
    Disconnected,
    /// The room is moving between nodes (`RoomStatus MOVING`).
    RoomMoving,
    /// The last sample was not newer than what was already shown (dropped, never rewinds).
    OldSample,
}

/// Why an entry cannot be rendered as it should.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissingReason {
    /// No render binding yet ([`ReplicaDirectory::bind`]).
    NoBinding,
    /// No sample yet.
    NoSample,
}

/// One replicated entity.
#[derive(Clone, Debug)]
pub struct Replica<B> {
    /// Entity id.
    pub entity: u32,
    /// Generation (a new one is a new entry).
    pub generation: u16,
    /// 0 avatar, 1 prop.
    pub kind: u8,
    /// The record as the frames hold it (exact integers).
    pub record: EntityRecord,
    /// The tick its pose was measured at.
    pub pose_tick: u32,
    /// Where the data last came from.
    pub source: Source,
    /// Local time of the first sighting, seconds.
    pub first_seen: f64,
    /// Local time of the last update, seconds.
    pub updated_at: f64,
    /// Who it is (avatars, from the roster).
    pub roster: Option<pb::RosterEntry>,
    /// The renderer's handle.
    pub binding: Option<B>,
    /// Why it is stale, if it is.
    pub stale_reason: Option<StaleReason>,
    /// Why it cannot be rendered, if so.
    pub missing_reason: Option<MissingReason>,
    smoother: Smoother,
    /// Its tier for this client, as the last record carried it.
    tier: u8,
    teleport_next: bool,
    /// The connection was lost: the next sample restarts the smoother (blended).
    restart: bool,
    /// Offset from the restarted smoother to what was shown before a resume, decaying.
    carry: Option<(V3, f64, f64)>,
    shown: Option<V3>,
}

impl<B> Replica<B> {
    /// Seconds since the last update.
    pub fn age(&self, now: f64) -> f64 {
        (now - self.updated_at).max(0.0)
    }

    /// The smoother's counters (diagnostics).
    pub fn smoothing(&self) -> &SmoothingStats {
        self.smoother.stats()
    }

    /// The smoother.
    pub fn smoother(&self) -> &Smoother {
        &self.smoother
    }

    /// The position to show (after the last advance), metres.
    pub fn position(&self) -> Option<V3> {
        self.shown
    }

    /// The full rendered pose of the last advance (its position without the resume blend).
    pub fn rendered(&self) -> Option<&Rendered> {
        (self.smoother.rendered().phase != Phase::Empty).then(|| self.smoother.rendered())
    }
}

/// Directory counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectoryStats {
    /// Entries created.
    pub inserted: u64,
    /// Entries removed.
    pub removed: u64,
    /// Upserts that kept an entry (and its binding).
    pub upserts: u64,
    /// Clears (room transfer, leave, terminal close).
    pub clears: u64,
    /// Entries kept across a reconnect.
    pub kept_across_resume: u64,
    /// Smoother restarts blended from what was shown (after a resume).
    pub resume_blends: u64,
}

/// The replicas of one client, keyed by entity id. `B` is the renderer's binding handle.
#[derive(Clone, Debug)]
pub struct ReplicaDirectory<B = ()> {
    cfg: SmoothingConfig,
    tick_hz: u32,
    own: Option<u32>,
    room: Option<String>,
    entries: BTreeMap<u32, Replica<B>>,
    roster: BTreeMap<u32, pb::RosterEntry>,
    unbound: Vec<(u32, B)>,
    stats: DirectoryStats,
    resuming: bool,
}

impl<B> Default for ReplicaDirectory<B> {
    fn default() -> Self {
        Self::new(SmoothingConfig::default())
    }
}

/// Most bindings waiting in [`ReplicaDirectory::drain_unbound`] before the oldest is dropped.
const MAX_UNBOUND: usize = 1 << 16;

impl<B> ReplicaDirectory<B> {
    /// An empty directory whose smoothers use `cfg` (its `send_interval_s` is replaced by the
    /// room's broadcast period on `Joined`).
    pub fn new(cfg: SmoothingConfig) -> Self {
        Self {
            cfg,
            tick_hz: 50,
            own: None,
            room: None,
            entries: BTreeMap::new(),
            roster: BTreeMap::new(),
            unbound: Vec::new(),
            stats: DirectoryStats::default(),
            resuming: false,
        }
    }

    /// The entry of `entity`.
    pub fn get(&self, entity: u32) -> Option<&Replica<B>> {
        self.entries.get(&entity)
    }

    /// Every entry, by id.
    pub fn iter(&self) -> impl Iterator<Item = &Replica<B>> {
        self.entries.values()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Counters.
    pub fn stats(&self) -> &DirectoryStats {
        &self.stats
    }

    /// The smoothing settings.
    pub fn config(&self) -> &SmoothingConfig {
        &self.cfg
    }

    /// Records the renderer's handle for `entity` (clears the missing reason). Returns the
    /// handle back when there is no such entry.
    pub fn bind(&mut self, entity: u32, binding: B) -> Result<(), B> {
        match self.entries.get_mut(&entity) {
            Some(e) => {
                e.binding = Some(binding);
                if e.missing_reason == Some(MissingReason::NoBinding) {
                    e.missing_reason = None;
                }
                Ok(())
            }
            None => Err(binding),
        }
    }

    /// Entries without a binding (to spawn).
    pub fn unbound_entries(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries
            .values()
            .filter(|e| e.binding.is_none())
            .map(|e| e.entity)
    }

    /// Bindings of removed entries (to despawn), oldest first.
    pub fn drain_unbound(&mut self) -> std::vec::Drain<'_, (u32, B)> {
        self.unbound.drain(..)
    }

    /// Forget everything (handing bindings back).
    pub fn clear(&mut self) {
        let ids: Vec<u32> = self.entries.keys().copied().collect();
        for id in ids {
            self.remove(id);
        }
        self.roster.clear();
        self.stats.clears += 1;
    }

    fn remove(&mut self, entity: u32) {
        if let Some(e) = self.entries.remove(&entity) {
            self.stats.removed += 1;
            if let Some(b) = e.binding {
                if self.unbound.len() >= MAX_UNBOUND {
                    self.unbound.remove(0);
                }
                self.unbound.push((entity, b));
            }
        }
    }

    /// Takes one connection event (call for every event, in order, with the local time it was
    /// received).
    pub fn handle_event(&mut self, ev: &Event, now: f64) {
        match ev {
            Event::Joined(info) => {
                if self.room.as_ref().is_some_and(|r| *r != info.room_id) {
                    self.clear();
                }
                self.room = Some(info.room_id.clone());
                self.tick_hz = info.tick_hz.max(1);
                self.own = Some(info.entity);
                if info.broadcast_hz > 0 {
                    self.cfg.send_interval_s = 1.0 / f64::from(info.broadcast_hz);
                }
                self.remove(info.entity);
            }
            Event::Left { .. } => {
                self.clear();
                self.room = None;
            }
            Event::Closed { kind, .. } => {
                if kind.retryable() {
                    self.resuming = true;
                    for e in self.entries.values_mut() {
                        e.stale_reason = Some(StaleReason::Disconnected);
                        e.restart = true;
                    }
                } else {
                    self.clear();
                    self.room = None;
                }
            }
            Event::RoomMoving { .. } => {
                for e in self.entries.values_mut() {
                    if e.stale_reason.is_none() {
                        e.stale_reason = Some(StaleReason::RoomMoving);
                    }
                }
            }
            Event::RoomBack { .. } => {
                for e in self.entries.values_mut() {
                    if e.stale_reason == Some(StaleReason::RoomMoving) {
                        e.stale_reason = None;
                    }
                }
            }
            Event::EntityEntered(c) | Event::EntityUpdated(c) => self.upsert(c, now),
            Event::EntityLeft { entity } => self.remove(*entity),
            Event::Frame { keyframe: true, .. } => {
                self.resuming = false;
            }
            Event::Teleported(t) => {
                if let Some(e) = self.entries.get_mut(&t.entity_id) {
                    e.teleport_next = true;
                }
            }
            Event::Roster(r) => {
                if r.full {
                    self.roster.clear();
                    for e in self.entries.values_mut() {
                        e.roster = None;
                    }
                }
                for id in &r.removed {
                    self.roster.remove(id);
                    if let Some(e) = self.entries.get_mut(id) {
                        e.roster = None;
                    }
                }
                for u in &r.upserts {
                    if self.roster.len() < MAX_ENTITIES || self.roster.contains_key(&u.entity_id) {
                        self.roster.insert(u.entity_id, u.clone());
                    }
                    if let Some(e) = self.entries.get_mut(&u.entity_id) {
                        e.roster = Some(u.clone());
                    }
                }
            }
            _ => {}
        }
    }

    fn upsert(&mut self, c: &EntityChange, now: f64) {
        let entity = c.entity();
        if Some(entity) == self.own {
            return;
        }
        let rec = &c.record;
        let pose_tick = c.pose_tick;
        let source = if c.keyframe {
            Source::Keyframe
        } else {
            Source::Delta
        };
        let roster = self.roster.get(&entity).cloned();
        let cfg = self.cfg;
        let tick_hz = self.tick_hz;
        let instant = rec.pose.anim_flags & ANIM_INSTANT != 0;
        match self.entries.get_mut(&entity) {
            Some(e) if e.generation == rec.generation && e.kind == rec.kind => {
                self.stats.upserts += 1;
                // The first sample of a resumed stream (a `RoomStatus` in between does not
                // change that).
                let restarted = std::mem::take(&mut e.restart);
                e.source = source;
                e.updated_at = now;
                e.stale_reason = None;
                if e.missing_reason == Some(MissingReason::NoSample) {
                    e.missing_reason = None;
                }
                if roster.is_some() {
                    e.roster = roster;
                }
                let new_pose = pose_tick != e.pose_tick || restarted || instant;
                e.record = *rec;
                if c.tier > e.tier {
                    e.smoother.expect_gap(tier_gap(&cfg, c.tier));
                }
                e.tier = c.tier;
                if !new_pose {
                    return;
                }
                e.pose_tick = pose_tick;
                let teleport = instant || std::mem::take(&mut e.teleport_next);
                let s = Sample::from_quant(&rec.pose, pose_tick, tick_hz, teleport);
                if restarted {
                    // The resumed stream's clock and link differ: restart the smoother and
                    // blend from what was shown (no pop), unless the server placed the avatar.
                    self.stats.kept_across_resume += 1;
                    let shown = e.shown;
                    e.smoother = Smoother::new(cfg);
                    e.smoother.push(s, now);
                    if let (Some(shown), false) = (shown, teleport) {
                        let off = sub(shown, s.position);
                        let d = len(off);
                        if d > 1e-4 && d <= cfg.snap_distance_m {
                            let dur = cfg.blend_s.max(d / cfg.max_blend_speed.max(1e-3)).max(0.15);
                            e.carry = Some((off, now, dur));
                            self.stats.resume_blends += 1;
                        }
                    }
                } else {
                    let before = e.smoother.stats().stale;
                    e.smoother.push(s, now);
                    if e.smoother.stats().stale > before {
                        e.stale_reason = Some(StaleReason::OldSample);
                    }
                }
            }
            _ => {
                self.remove(entity);
                self.stats.inserted += 1;
                let mut smoother = Smoother::new(cfg);
                smoother.push(
                    Sample::from_quant(&rec.pose, pose_tick, tick_hz, instant),
                    now,
                );
                self.entries.insert(
                    entity,
                    Replica {
                        entity,
                        generation: rec.generation,
                        kind: rec.kind,
                        record: *rec,
                        pose_tick,
                        source,
                        first_seen: now,
                        updated_at: now,
                        roster,
                        binding: None,
                        stale_reason: None,
                        missing_reason: Some(MissingReason::NoBinding),
                        smoother,
                        tier: c.tier,
                        teleport_next: false,
                        restart: false,
                        carry: None,
                        shown: None,
                    },
                );
            }
        }
    }

    /// Renders every entry for local time `now`.
    pub fn advance(&mut self, now: f64) {
        for e in self.entries.values_mut() {
            let Some(r) = e.smoother.advance(now) else {
                e.missing_reason = Some(MissingReason::NoSample);
                continue;
            };
            let mut p = r.position;
            if let Some((off, t0, dur)) = e.carry {
                let u = ((now - t0) / dur).clamp(0.0, 1.0);
                // A server teleport during the blend places the avatar: no blend from before.
                if u >= 1.0 || e.smoother.stats().snaps[0] > 0 {
                    e.carry = None;
                } else {
                    let w = 1.0 - u;
                    p = [p[0] + off[0] * w, p[1] + off[1] * w, p[2] + off[2] * w];
                }
            }
            e.shown = Some(p);
        }
    }
}

fn sub(a: V3, b: V3) -> V3 {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

fn len(a: V3) -> f64 {
    (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt()
}

/// Light prediction of the own avatar (seed 004: no rollback, no input replay).
///
/// The client shows its own input at once ([`OwnPredictor::input`], with the sequence the
/// connection gave the movement). When a frame's own state says the server applied input `n` at
/// position `P` ([`OwnPredictor::reconcile`]), the error against what was predicted for `n` is
/// added to the current pose and to every later prediction, so the next rendered frame shows the
/// reconciled pose: a misprediction is visible for at most one frame. A `Correction` (a refused
/// move) is adopted outright and drops the pending predictions.
#[derive(Clone, Debug, Default)]
pub struct OwnPredictor {
    history: VecDeque<(u32, V3)>,
    current: Option<V3>,
    last_acked: u32,
    /// Reconciliations that moved the pose (error above 1 mm).
    pub mispredictions: u64,
    /// Largest reconciliation error, metres.
    pub max_error_m: f64,
    /// Corrections adopted.
    pub corrections: u64,
}

/// Inputs remembered for reconciliation (at 20 Hz: 3.2 s).
const HISTORY: usize = 64;

impl OwnPredictor {
    /// The pose shown now, metres.
    pub fn position(&self) -> Option<V3> {
        self.current
    }

    /// The last input the server confirmed.
    pub fn last_acked(&self) -> u32 {
        self.last_acked
    }

    /// Inputs sent and not yet confirmed.
    pub fn pending(&self) -> usize {
        self.history.len()
    }

    /// The client moved its avatar to `position` with the movement of sequence `seq`.
    pub fn input(&mut self, seq: u32, position: V3) {
        if self.history.len() >= HISTORY {
            self.history.pop_front();
        }
        self.history.push_back((seq, position));
        self.current = Some(position);
    }

    /// Places the avatar (spawn, teleport): forgets the predictions.
    pub fn place(&mut self, position: V3) {
        self.history.clear();
        self.current = Some(position);
    }

    /// A frame's own state: the server applied `own.last_input_seq` and the avatar is at
    /// `own.pose.position`. Returns the error that was removed, metres.
    pub fn reconcile(&mut self, own: &OwnState) -> f64 {
        let seq = own.last_input_seq;
        let server = own.pose.position.map(f64::from);
        // Inputs up to `seq` are settled (sequences are u32 and wrap: compare by distance).
        let mut predicted = None;
        while let Some(&(s, p)) = self.history.front() {
            if (seq.wrapping_sub(s) as i32) < 0 {
                break;
            }
            if s == seq {
                predicted = Some(p);
            }
            self.history.pop_front();
        }
        self.last_acked = seq;
        let Some(predicted) = predicted else {
            if self.history.is_empty() {
                self.current = Some(server);
            }
            return 0.0;
        };
        let err = sub(server, predicted);
        let d = len(err);
        if d > 1e-3 {
            self.mispredictions += 1;
            self.max_error_m = self.max_error_m.max(d);
            for (_, p) in self.history.iter_mut() {
                *p = [p[0] + err[0], p[1] + err[1], p[2] + err[2]];
            }
            if let Some(c) = self.current.as_mut() {
                *c = [c[0] + err[0], c[1] + err[1], c[2] + err[2]];
            }
        }
        d
    }

    /// A refused move: adopt the server's pose.
    pub fn correction(&mut self, c: &pb::Correction) {
        self.corrections += 1;
        let p = c.position.unwrap_or_default();
        self.history.clear();
        self.last_acked = c.last_input_sequence;
        self.current = Some([f64::from(p.x), f64::from(p.y), f64::from(p.z)]);
    }
}

/// The gap between a tier's steady samples: the room sends a tier-`t` entity's steady motion
/// every `TIER_EVERY[t]`-th frame (`PROTOCOL.md` §2.8).
fn tier_gap(cfg: &SmoothingConfig, tier: u8) -> f64 {
    let every = TIER_EVERY[usize::from(tier).min(TIER_EVERY.len() - 1)];
    cfg.send_interval_s * f64::from(every)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::{Connection, ConnectionConfig};
    use plaza_proto::frame::{EncoderConfig, FrameEncoder, Visible};
    use plaza_proto::pb::server_envelope::Body as SBody;
    use plaza_proto::quant::{Pose, quantize};
    use prost::Message as _;

    fn env(body: SBody) -> Vec<u8> {
        pb::ServerEnvelope {
            sequence: 1,
            sent_at_ms: 0,
            body: Some(body),
        }
        .encode_to_vec()
    }

    fn rec(id: u32, x: f32) -> EntityRecord {
        EntityRecord {
            id,
            generation: 0,
            kind: 0,
            pose: quantize(&Pose {
                position: [x, 0.0, 0.0],
                velocity: [1.0, 0.0, 0.0],
                movement_kind: 1,
                anim_flags: 1,
                ..Pose::default()
            }),
        }
    }

    struct Rig {
        conn: Connection,
        dir: ReplicaDirectory<u64>,
        enc: FrameEncoder,
    }

    impl Rig {
        fn new() -> Self {
            let mut conn = Connection::new(ConnectionConfig {
                room: Some("r".into()),
                ..ConnectionConfig::default()
            });
            conn.connected(0.0);
            let mut r = Self {
                conn,
                dir: ReplicaDirectory::default(),
                enc: FrameEncoder::new(EncoderConfig {
                    budget_bytes_per_s: 0,
                    ..EncoderConfig::default()
                }),
            };
            r.feed(
                SBody::Negotiated(pb::Negotiated {
                    session_id: 3,
                    resume_token: "t".into(),
                    ..Default::default()
                }),
                0.0,
            );
            r.join(0.0);
            r
        }

        fn join(&mut self, now: f64) {
            self.feed(
                SBody::Joined(pb::Joined {
                    room_id: "r".into(),
                    entity_id: 9,
                    tick_hz: 50,
                    broadcast_hz: 20,
                    ..Default::default()
                }),
                now,
            );
        }

        fn feed(&mut self, body: SBody, now: f64) {
            self.conn.handle_input(&env(body), now).unwrap();
            self.pump(now);
        }

        fn pump(&mut self, now: f64) {
            while let Some(e) = self.conn.poll_event() {
                self.dir.handle_event(&e, now);
            }
        }

        fn frame(&mut self, tick: u32, recs: &[EntityRecord], now: f64) {
            let vis: Vec<Visible<'_>> = recs
                .iter()
                .map(|r| Visible { record: r, tier: 0 })
                .collect();
            let mut out = Vec::new();
            self.enc.encode(tick, None, &vis, &mut out);
            self.feed(
                SBody::SnapshotFrame(pb::SnapshotFrame { frame: out.into() }),
                now,
            );
        }
    }

    #[test]
    fn upserts_keep_bindings_and_leaves_hand_them_back() {
        let mut r = Rig::new();
        r.frame(100, &[rec(1, 0.0), rec(2, 5.0)], 0.1);
        assert_eq!(r.dir.len(), 2);
        assert_eq!(
            r.dir.get(1).unwrap().missing_reason,
            Some(MissingReason::NoBinding)
        );
        r.dir.bind(1, 11).unwrap();
        r.dir.bind(2, 22).unwrap();
        for i in 1..10 {
            let t = 100 + i * 2;
            r.frame(
                t,
                &[rec(1, 0.04 * i as f32), rec(2, 5.0)],
                0.1 + 0.04 * i as f64,
            );
            r.dir.advance(0.1 + 0.04 * i as f64);
        }
        let e = r.dir.get(1).unwrap();
        assert_eq!(e.binding, Some(11));
        assert_eq!(e.missing_reason, None);
        assert_eq!(e.source, Source::Delta);
        assert!(e.smoothing().samples >= 9);
        r.frame(130, &[rec(1, 0.5)], 0.6);
        assert!(r.dir.get(2).is_none());
        assert_eq!(r.dir.drain_unbound().collect::<Vec<_>>(), [(2, 22)]);
        // A keyframe keeps what it still lists (same generation), with its binding.
        r.enc.request_keyframe();
        r.frame(132, &[rec(1, 0.55)], 0.65);
        assert_eq!(r.dir.get(1).unwrap().binding, Some(11));
        assert_eq!(r.dir.get(1).unwrap().source, Source::Keyframe);
        // A room transfer clears.
        r.feed(
            SBody::Joined(pb::Joined {
                room_id: "other".into(),
                entity_id: 4,
                tick_hz: 50,
                broadcast_hz: 20,
                ..Default::default()
            }),
            0.7,
        );
        assert!(r.dir.is_empty());
        assert_eq!(r.dir.drain_unbound().collect::<Vec<_>>(), [(1, 11)]);
    }

    #[test]
    fn a_resumed_connection_keeps_replicas_without_a_pop() {
        let mut r = Rig::new();
        let mut now = 0.0;
        for i in 0..20u32 {
            now = 0.05 * f64::from(i);
            r.frame(100 + i * 2 + i / 2, &[rec(1, 0.1 * i as f32)], now);
            r.dir.advance(now);
        }
        r.dir.bind(1, 7).unwrap();
        let before = r.dir.get(1).unwrap().position().unwrap();
        r.conn.handle_close(None);
        r.pump(now);
        assert_eq!(r.dir.len(), 1);
        assert_eq!(
            r.dir.get(1).unwrap().stale_reason,
            Some(StaleReason::Disconnected)
        );
        // Reconnect 1 s later; the avatar walked on.
        now += 1.0;
        r.conn.connected(now);
        r.feed(
            SBody::Negotiated(pb::Negotiated {
                session_id: 3,
                resume_token: "t2".into(),
                ..Default::default()
            }),
            now,
        );
        r.join(now);
        r.enc = FrameEncoder::new(EncoderConfig::default());
        r.frame(200, &[rec(1, 3.0)], now);
        let e = r.dir.get(1).unwrap();
        assert_eq!(e.binding, Some(7));
        assert_eq!(e.stale_reason, None);
        r.dir.advance(now);
        let after = r.dir.get(1).unwrap().position().unwrap();
        // The first render after the resume is where the avatar was shown (blend), not 3 m on.
        assert!((after[0] - before[0]).abs() < 0.2, "{before:?} {after:?}");
        assert_eq!(r.dir.stats().resume_blends, 1);
        assert_eq!(r.dir.stats().inserted, 1);
    }

    #[test]
    fn own_prediction_reconciles_within_one_frame() {
        let mut p = OwnPredictor::default();
        for s in 1..=5u32 {
            p.input(s, [f64::from(s) * 0.1, 0.0, 0.0]);
        }
        // The server applied input 3 but 2 cm short (contact offset).
        let own = OwnState {
            entity: 9,
            pose: Pose {
                position: [0.28, 0.0, 0.0],
                ..Pose::default()
            },
            last_input_seq: 3,
        };
        let e = p.reconcile(&own);
        assert!((e - 0.02).abs() < 1e-6);
        // The very next shown pose is the reconciled one.
        assert!((p.position().unwrap()[0] - 0.48).abs() < 1e-6);
        assert_eq!(p.pending(), 2);
        assert_eq!(p.mispredictions, 1);
        p.correction(&pb::Correction {
            position: Some(pb::Vec3 {
                x: 1.0,
                y: 0.0,
                z: 0.0,
            }),
            last_input_sequence: 5,
            ..Default::default()
        });
        assert_eq!(p.position(), Some([1.0, 0.0, 0.0]));
        assert_eq!(p.pending(), 0);
    }
}
