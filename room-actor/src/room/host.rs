//! The room host: everything the node decides about one room, sans I/O.
//!
//! [`RoomHost`] owns the room core and the node's bookkeeping around it: the link table (one
//! [`Link`] per attached session, its stream swapped when the session attaches again), the
//! members handed off by the previous activation and their expiry, the lease check before every
//! tick (ticks withheld while the lease is unconfirmed, given up after a TTL), audit records
//! ordered before what they acknowledge, the checkpoint schedule, and the outbound wire mapping.
//!
//! It does no I/O and spawns nothing. Inputs come in as calls (`on_attach`, `on_detach`,
//! `on_envelope`, `on_keyframe_needed`, `tick`); effects go out as data the shell executes:
//! directory writes ([`RoomHost::take_writes`]), audit records to append before the rest of a
//! tick's batch is delivered ([`RoomHost::deliver_until_audits`]), and a request to stop
//! ([`RoomHost::take_stop`]). Messages to a session go into its link's [`Outlet`], a bounded
//! queue that never blocks (the shell's is the gRPC stream's channel): a full one drops a frame
//! and asks for a keyframe, or detaches the session when a control message does not fit.
//! Time comes from a [`Clock`] (time since the activation started, and the wall clock for
//! `sent_at_ms` only); the lease from a [`LeaseView`].

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use plaza_directory::Epoch;
use plaza_node_proto::{self as node, FrameKind, NodeOutbound, node_outbound};
use plaza_proto::pb::{self, server_envelope};
use plaza_room_core::{Due, JoinRefusal, Outbound, RejectReason, Room, SessionId};

use super::RoomActorConfig;
use super::admin::AdminSide;
use crate::metrics::{NodeMetrics, ReasonLabel};
use crate::wire;

/// A room whose lease is unconfirmed waits at most this many lease TTLs, frozen, before it
/// gives up even with sessions attached (60 s with the shipped 10 s TTL: longer than the 30 s
/// Redis outage the cluster must survive with its state).
pub(crate) const FROZEN_MAX_TTLS: u32 = 6;

/// Whether the activation may commit, and under which epoch (the shell's is
/// [`super::Activation`]).
pub(crate) trait LeaseView: Send + Sync {
    /// True while the lease is surely held.
    fn may_commit(&self) -> bool;
    /// The epoch the activation commits under now.
    fn epoch(&self) -> Epoch;
    /// True while entries of this room are held online by other sources only (a voice
    /// channel of a member who left): an empty room does not stop while it is, so their
    /// presence keeps being renewed (`plaza_directory::sources`).
    fn held_elsewhere(&self) -> bool {
        false
    }
}

/// The host's time.
pub(crate) trait Clock: Send + Sync {
    /// Time since the activation started.
    fn now(&self) -> Duration;
    /// Milliseconds since the Unix epoch, for `sent_at_ms` only (never for simulation time).
    fn unix_ms(&self) -> u64;
}

/// Why an [`Outlet`] refused a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The queue is full (the session's stream is behind).
    Full,
    /// The stream is gone.
    Closed,
}

/// Where one link's messages go: a bounded queue that never blocks.
pub(crate) trait Outlet: Send {
    /// Queue `msg`, or say why not.
    fn offer(&self, msg: NodeOutbound) -> Result<(), Refused>;
}

/// An ordered directory write, done by the room's directory writer off the tick path.
#[derive(Debug)]
pub(crate) enum PresenceOp {
    Register {
        wallet: String,
        entity: u32,
    },
    Release {
        wallet: String,
    },
    /// A member announced a higher profile version (`Directory::announce_profile`).
    Announce {
        wallet: String,
        version: u64,
    },
    /// A checkpoint of the room's state (an encoded handoff state): stored under the epoch.
    Checkpoint(Vec<u8>),
    /// The room closes because it is empty: its checkpoint is deleted, so the next activation
    /// starts fresh instead of waiting for members who left.
    DropCheckpoint,
}

/// One audit record to append durably before the rest of its batch is delivered.
#[derive(Debug)]
pub(crate) struct AuditRecord {
    pub(crate) local_seq: u64,
    pub(crate) kind: String,
    pub(crate) detail_json: String,
    pub(crate) at_ms: u64,
}

/// A handed-off member whose session has not re-attached to this activation yet.
#[derive(Debug)]
pub(crate) struct Awaited {
    pub(crate) wallet: String,
    pub(crate) entity: u32,
    /// Time since the activation started when it leaves if it has not re-attached.
    pub(crate) deadline: Duration,
}

/// One attached session, as the room host sees it.
pub(crate) struct Link {
    pub(crate) wallet: String,
    pub(crate) tx: Box<dyn Outlet>,
    /// Server envelope sequence for this session.
    seq: u32,
    pub(crate) entity: Option<u32>,
    /// Decoder of this sender's compressed movement timestamps (one per sender: a new stream of
    /// the same session keeps it, since the core keeps the sender's last timestamp).
    timestamps: plaza_proto::compressed::TimestampDecoder,
    /// The attachment (stream) this link belongs to.
    pub(crate) link_id: u64,
    /// The session's identity has the operator role (the attach's flag, set by the gateway).
    pub(crate) operator: bool,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("wallet", &self.wallet)
            .field("entity", &self.entity)
            .field("link_id", &self.link_id)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// A fresh attachment: not joined yet, sequences and timestamps from the start.
    fn new(wallet: String, tx: Box<dyn Outlet>, link_id: u64, operator: bool) -> Self {
        Self {
            wallet,
            tx,
            seq: 0,
            entity: None,
            timestamps: Default::default(),
            link_id,
            operator,
        }
    }
}

/// An attach: a session's new stream.
pub(crate) struct Attach {
    pub(crate) session: SessionId,
    pub(crate) wallet: String,
    pub(crate) tx: Box<dyn Outlet>,
    /// The entity a resumed session asks to get back (0: any).
    pub(crate) entity: u32,
    pub(crate) link_id: u64,
    pub(crate) operator: bool,
}

/// What one tick produced, to be delivered (audit records first where they come).
#[derive(Debug)]
pub(crate) struct Batch {
    out: VecDeque<Outbound>,
    broadcast: bool,
    /// The wall clock when the lease was last seen held, before delivery.
    checked_ms: u64,
}

/// Everything the host is given at the start.
pub(crate) struct HostArgs {
    pub(crate) room: Room,
    pub(crate) room_id: String,
    pub(crate) cfg: RoomActorConfig,
    pub(crate) metrics: NodeMetrics,
    pub(crate) node_id: String,
    pub(crate) epoch: Epoch,
    pub(crate) lease: Arc<dyn LeaseView>,
    pub(crate) lease_ttl: Duration,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) awaited: HashMap<SessionId, Awaited>,
    pub(crate) last_audit_seq: u64,
}

/// The node's side of one room, sans I/O (see the module doc).
pub(crate) struct RoomHost {
    pub(crate) room: Room,
    pub(crate) room_id: String,
    pub(crate) cfg: RoomActorConfig,
    pub(crate) metrics: NodeMetrics,
    pub(crate) links: HashMap<SessionId, Link>,
    empty_since: Option<Duration>,
    out: Vec<Outbound>,
    /// Room stats already exported to metrics, to export deltas.
    exported: plaza_room_core::RoomStats,
    pub(crate) node_id: String,
    /// The epoch the activation started under (attach acknowledgements carry it).
    epoch: Epoch,
    pub(crate) lease: Arc<dyn LeaseView>,
    clock: Arc<dyn Clock>,
    /// Handed-off members restored from the previous activation, by session, until they
    /// re-attach or their grace runs out.
    pub(crate) awaited: HashMap<SessionId, Awaited>,
    /// The handoff state was taken: nothing changes any more.
    pub(crate) frozen: bool,
    /// Since when ticks are withheld because the lease's local deadline passed.
    withheld_since: Option<Duration>,
    /// The placement lease's TTL: withheld this long, the store's lease has surely lapsed; a
    /// room without sessions then gives up (stops), one with sessions after
    /// [`FROZEN_MAX_TTLS`] TTLs.
    lease_ttl: Duration,
    /// Operator state: mutes, tick and byte windows ([`super::admin`]).
    pub(crate) admin: AdminSide,
    /// The directory's sequence number of the last audit record appended (or replayed) by
    /// this activation: checkpoints carry it.
    last_audit_seq: u64,
    /// When the last checkpoint was taken.
    last_checkpoint: Duration,
    /// Directory writes for the shell to hand to the writer, in order.
    writes: Vec<PresenceOp>,
    /// The last tick ran a step or a broadcast (the shell times those).
    ran: bool,
    /// The room must stop (the reason).
    stop: Option<&'static str>,
    /// Encodes every envelope the room sends into shared chunks ([`envelopes`]).
    envelopes: envelopes::Envelopes,
}

impl std::fmt::Debug for RoomHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoomHost")
            .field("room_id", &self.room_id)
            .field("links", &self.links.len())
            .field("frozen", &self.frozen)
            .finish_non_exhaustive()
    }
}

// === impl RoomHost ===

impl RoomHost {
    /// A host for a room that starts now (restored or fresh).
    pub(crate) fn new(a: HostArgs) -> Self {
        let now = a.clock.now();
        Self {
            empty_since: a.awaited.is_empty().then_some(now),
            room: a.room,
            room_id: a.room_id,
            cfg: a.cfg,
            metrics: a.metrics,
            links: HashMap::new(),
            out: Vec::new(),
            exported: Default::default(),
            node_id: a.node_id,
            epoch: a.epoch,
            lease: a.lease,
            clock: a.clock,
            awaited: a.awaited,
            frozen: false,
            withheld_since: None,
            lease_ttl: a.lease_ttl,
            admin: Default::default(),
            last_audit_seq: a.last_audit_seq,
            last_checkpoint: now,
            writes: Vec::new(),
            ran: false,
            stop: None,
            envelopes: Default::default(),
        }
    }

    /// Directory writes since the last call, in order.
    pub(crate) fn take_writes(&mut self) -> Vec<PresenceOp> {
        std::mem::take(&mut self.writes)
    }

    /// Whether (and why) the room must stop now.
    pub(crate) fn take_stop(&mut self) -> Option<&'static str> {
        self.stop.take()
    }

    pub(crate) fn request_stop(&mut self, reason: &'static str) {
        self.stop.get_or_insert(reason);
    }

    pub(crate) fn write(&mut self, op: PresenceOp) {
        self.writes.push(op);
    }

    /// A session attaches: join it at the next tick, or swap its stream if it is already a
    /// member, or re-link it to its handed-off avatar.
    pub(crate) fn on_attach(&mut self, a: Attach) {
        let Attach {
            session,
            wallet,
            tx,
            entity,
            link_id,
            operator,
        } = a;
        if let Some(link) = self.links.get_mut(&session) {
            // The same session attaches again while it is still a member (its gateway
            // re-attached, or it came back through another gateway before the old stream's end
            // reached us): swap the stream, keep the membership, the entity and the sender's
            // timestamp decoder (the core keeps its last timestamp), and start the new stream
            // with Joined and a keyframe. The old stream's later Detach carries the old link id
            // and is ignored.
            let timestamps = std::mem::take(&mut link.timestamps);
            *link = Link {
                entity: link.entity,
                timestamps,
                ..Link::new(wallet, tx, link_id, operator)
            };
            self.welcome_back(session);
            return;
        }
        if let Some(awaited) = self.awaited.remove(&session) {
            if awaited.wallet == wallet && self.room.entity_of(session) == Some(awaited.entity) {
                // A handed-off member is back: its avatar, held props and consents are where
                // the previous activation left them.
                self.links
                    .insert(session, Link::new(wallet, tx, link_id, operator));
                self.metrics.sessions.inc();
                self.empty_since = None;
                self.welcome_back(session);
                return;
            }
            tracing::warn!(room = %self.room_id, session, "a handed-off session came back under another wallet; it joins afresh");
            self.room.leave(session);
        }
        self.room.join_member(session, wallet.clone(), entity);
        self.links
            .insert(session, Link::new(wallet, tx, link_id, operator));
        self.metrics.sessions.inc();
        self.empty_since = None;
    }

    /// The stream of attachment `link_id` ended: the session leaves if it is still its link.
    pub(crate) fn on_detach(&mut self, session: SessionId, link_id: u64) {
        let current = self
            .links
            .get(&session)
            .is_some_and(|l| l.link_id == link_id);
        if let Some(link) = current.then(|| self.links.remove(&session)).flatten() {
            self.metrics.sessions.dec();
            self.room.leave(session);
            self.release_presence(&link);
        }
    }

    /// The gateway dropped frames for this session: its next frame must be a keyframe.
    pub(crate) fn on_keyframe_needed(&mut self, session: SessionId) {
        self.room.request_keyframe(session);
    }

    /// Turns a client envelope into room input.
    pub(crate) fn on_envelope(&mut self, session: SessionId, env: pb::ClientEnvelope) {
        let seq = env.sequence;
        let Some(body) = env.body else { return };
        let Some(link) = self.links.get_mut(&session) else {
            return;
        };
        match wire::decode(body, seq, &mut link.timestamps) {
            wire::Decoded::Input(input) => self.admit_input(session, input),
            // The stream stays open until the Left envelope is out; then the link closes.
            wire::Decoded::Leave => self.room.leave(session),
            wire::Decoded::Invalid(what, why) => {
                self.send_envelope(
                    session,
                    server_envelope::Body::Error(pb::Error {
                        code: pb::ErrorCode::InvalidInput as i32,
                        message: format!("{what}: {why}"),
                        in_reply_to: seq,
                        ..Default::default()
                    }),
                    FrameKind::Control,
                );
            }
            wire::Decoded::Operator { op, target_wallet } => {
                self.on_operator(session, seq, op, target_wallet);
            }
            wire::Decoded::Ignore => {}
        }
    }

    /// Runs what is due: with `Due::Scheduled`, the lease check first (ticks are withheld while
    /// it is unconfirmed, and the room gives up after a TTL), the expiry of handed-off members,
    /// then the steps and the broadcast the schedule says are due; with `Due::Final` (a drain),
    /// one last step. Returns the batch to deliver, `None` when nothing may leave.
    /// `on_step(room, now_ms, sessions)` runs after each step.
    ///
    /// Performance: runs every tick.
    pub(crate) fn tick(
        &mut self,
        due: Due,
        on_step: &mut dyn FnMut(&Room, u64, &mut dyn Iterator<Item = SessionId>),
    ) -> Option<Batch> {
        let now = self.clock.now();
        self.ran = false;
        if due == Due::Scheduled {
            if !self.lease.may_commit() {
                self.withhold(now);
                return None;
            }
            if self.withheld_since.take().is_some() {
                tracing::info!(room = %self.room_id, "lease confirmed; ticks resume");
            }
            self.expire_awaited(now);
        }
        let mut out = std::mem::take(&mut self.out);
        let links = &self.links;
        let advanced = self.room.advance_with(now, due, &mut out, |room, now_ms| {
            on_step(room, now_ms, &mut links.keys().copied());
        });
        self.ran = advanced.ran();
        if advanced.skipped > 0 {
            self.metrics.tick_overruns.inc_by(advanced.skipped);
        }
        if advanced.broadcast {
            let elapsed_ms = now.as_secs_f64() * 1000.0;
            self.admin
                .bytes
                .record(elapsed_ms as u64, self.room.stats().frame_bytes);
        }
        // The lease was confirmed before the steps ran, but the process may have been paused
        // (SIGSTOP, a long GC-like stall of the host) while they ran, and another activation may
        // hold the room now. Check again right before anything leaves: frames of a lapsed lease
        // are dropped (a later frame replaces them), everything else waits for the next
        // confirmed tick (or dies with the room when the writer finds the lease lost).
        let checked_ms = self.clock.unix_ms();
        if !self.lease.may_commit() {
            out.retain(|o| !matches!(o, Outbound::Frame { .. }));
            self.metrics.placement("delivery_withheld");
            self.out = out;
            return None;
        }
        Some(Batch {
            out: out.into(),
            broadcast: advanced.broadcast,
            checked_ms,
        })
    }

    /// Whether the last [`RoomHost::tick`] ran a step or a broadcast (the shell times those).
    pub(crate) fn ran_last_tick(&self) -> bool {
        self.ran
    }

    /// How long the last tick took, seconds (measured by the shell).
    pub(crate) fn record_tick_duration(&mut self, took_s: f64) {
        self.metrics.tick_duration.observe(took_s);
        self.admin.ticks.record(took_s);
    }

    /// The lease is unconfirmed at `now`.
    fn withhold(&mut self, now: Duration) {
        // The lease may have lapsed (the process was paused, or the directory is out of
        // reach): another node may run this room now. Commit nothing, not even a frame,
        // until the writer renews the lease (or reclaims it) or finds it lost and stops us.
        // Inputs stay queued (bounded); missed steps are skipped as overruns.
        //
        // Withheld for a whole TTL, the store's lease has lapsed. A room that still has
        // sessions keeps waiting, frozen with its state: if only this node lost the
        // directory, the gateways see the room silent and move the sessions to the next
        // activation once the lease can have lapsed (then the room is left without links);
        // if the directory is down for everyone (Redis paused or unreachable), nobody can
        // run the room elsewhere, and it carries on in place, props and consents intact,
        // when the writer renews or reclaims the lease. A room without sessions gives up
        // after a TTL, and any room after `FROZEN_MAX_TTLS` TTLs (bounded memory).
        let since = *self.withheld_since.get_or_insert_with(|| {
            tracing::warn!(room = %self.room_id, "lease not confirmed in time; ticks withheld");
            self.metrics.placement("ticks_withheld");
            now
        });
        let frozen = now.saturating_sub(since);
        if (frozen >= self.lease_ttl && self.links.is_empty())
            || frozen >= self.lease_ttl * FROZEN_MAX_TTLS
        {
            tracing::error!(room = %self.room_id, "lease not confirmed for a whole TTL; the room gives up");
            self.metrics.placement("lease_lapsed");
            self.request_stop("lease lapsed");
        }
    }

    /// Delivers `batch` up to its next run of audit records and returns that run, to be
    /// appended durably (in order) before the rest is delivered; empty when the batch is done.
    /// A room that cannot append stops: no consent transition is acknowledged without its
    /// audit record.
    pub(crate) fn deliver_until_audits(&mut self, batch: &mut Batch) -> Vec<AuditRecord> {
        let mut audits = Vec::new();
        while let Some(o) = batch.out.pop_front() {
            match o {
                Outbound::Audit {
                    local_seq,
                    kind,
                    detail_json,
                    at_ms,
                } => audits.push(AuditRecord {
                    local_seq,
                    kind,
                    detail_json,
                    at_ms,
                }),
                other if audits.is_empty() => self.deliver(other),
                other => {
                    batch.out.push_front(other);
                    break;
                }
            }
        }
        audits
    }

    /// An audit record was appended as `seq` in the room's log.
    pub(crate) fn audit_appended(&mut self, seq: u64) {
        self.last_audit_seq = self.last_audit_seq.max(seq);
    }

    /// The batch is delivered: exports the room's counters and returns when the lease was last
    /// seen held if it carried a broadcast (the shell logs it as a commit).
    pub(crate) fn finish(&mut self, batch: Batch) -> Option<u64> {
        let mut out: Vec<Outbound> = batch.out.into();
        out.clear();
        self.out = out;
        self.export_stats();
        batch.broadcast.then_some(batch.checked_ms)
    }

    /// After a tick: an empty room past its grace stops (its checkpoint dropped), a busy one
    /// checkpoints when one is due.
    pub(crate) fn after_tick(&mut self) {
        if self.stop.is_some() {
            return;
        }
        let now = self.clock.now();
        if self.room.is_empty() && self.links.is_empty() {
            let since = *self.empty_since.get_or_insert(now);
            // A wallet another source holds (voice after its room session left) keeps the
            // room, which renews its entry, until that source is released.
            if now.saturating_sub(since) >= self.cfg.empty_grace && !self.lease.held_elsewhere() {
                tracing::info!(room = %self.room_id, "room empty past its grace period, stopping");
                self.metrics.placement("stopped_empty");
                self.write(PresenceOp::DropCheckpoint);
                self.request_stop("empty");
                return;
            }
        } else {
            self.empty_since = None;
        }
        self.maybe_checkpoint(now);
    }

    /// Handed-off members whose sessions did not come back in time leave.
    fn expire_awaited(&mut self, now: Duration) {
        if self.awaited.is_empty() {
            return;
        }
        let gone: Vec<SessionId> = self
            .awaited
            .iter()
            .filter(|(_, a)| a.deadline <= now)
            .map(|(s, _)| *s)
            .collect();
        for session in gone {
            self.awaited.remove(&session);
            tracing::info!(room = %self.room_id, session, "handed-off session did not re-attach; it leaves");
            self.metrics.placement("handoff_member_expired");
            self.room.leave(session);
        }
    }

    /// A member's session has a new stream: it starts with `Joined` (its entity, where it
    /// stands) and a keyframe.
    fn welcome_back(&mut self, session: SessionId) {
        if let (Some(entity), Some(pose)) =
            (self.room.entity_of(session), self.room.pose_of(session))
        {
            self.deliver(Outbound::Joined {
                session,
                entity,
                spawn: pose.position,
            });
            self.room.request_keyframe(session);
        }
    }

    /// The encoded handoff state: every member with its wallet (attached, or handed off to
    /// this activation and not back yet) and the room core's state.
    pub(crate) fn handoff_bytes(&self) -> Vec<u8> {
        let mut members: Vec<crate::handoff::HandedOffMember> = self
            .links
            .iter()
            .filter_map(|(session, l)| {
                Some(crate::handoff::HandedOffMember {
                    wallet: l.wallet.clone(),
                    session: *session,
                    entity: l.entity?,
                })
            })
            .chain(
                self.awaited
                    .iter()
                    .map(|(session, a)| crate::handoff::HandedOffMember {
                        wallet: a.wallet.clone(),
                        session: *session,
                        entity: a.entity,
                    }),
            )
            .collect();
        members.sort_by_key(|m| m.session);
        crate::handoff::encode_at(
            &self.room_id,
            &members,
            Some(&self.room.save_state()),
            self.last_audit_seq,
        )
    }

    /// Checkpoints the room's state when one is due: the handoff state, written by the directory
    /// writer under the epoch (in order with the room's other directory writes, and only
    /// while the lease is surely held).
    fn maybe_checkpoint(&mut self, now: Duration) {
        let every = self.cfg.checkpoint_interval;
        if every.is_zero()
            || self.frozen
            || now.saturating_sub(self.last_checkpoint) < every
            || !self.lease.may_commit()
        {
            return;
        }
        self.last_checkpoint = now;
        let bytes = self.handoff_bytes();
        self.write(PresenceOp::Checkpoint(bytes));
    }

    /// The room stops: every joined link's presence is released (the writer then gives the
    /// lease up). Returns how many links there were.
    pub(crate) fn release_all(&mut self) -> usize {
        let n = self.links.len();
        let links: Vec<Link> = self.links.drain().map(|(_, l)| l).collect();
        for link in &links {
            self.release_presence(link);
        }
        n
    }

    /// Releases the presence of a link that leaves without a `Left` (its stream ended or was
    /// dropped), if it had joined; `Left` releases the others.
    pub(crate) fn release_presence(&mut self, link: &Link) {
        if link.entity.is_some() {
            self.write(PresenceOp::Release {
                wallet: link.wallet.clone(),
            });
        }
    }

    /// Maps one room output to the wire and hands it to its link(s).
    pub(crate) fn deliver(&mut self, o: Outbound) {
        match o {
            Outbound::Joined {
                session,
                entity,
                spawn,
            } => self.deliver_joined(session, entity, spawn),
            Outbound::JoinRefused { session, reason } => {
                let (detach, msg) = match reason {
                    JoinRefusal::RoomFull => (node::DetachReason::RoomFull, "room is full"),
                    JoinRefusal::AlreadyJoined => {
                        (node::DetachReason::Rejected, "already in this room")
                    }
                };
                if let Some(link) = self.links.get(&session) {
                    let _ = link.tx.offer(super::detach_message(detach, msg));
                }
                self.drop_link(session);
            }
            Outbound::Frame {
                session,
                bytes,
                keyframe,
            } => {
                self.send_envelope(
                    session,
                    server_envelope::Body::SnapshotFrame(pb::SnapshotFrame {
                        frame: bytes.into(),
                    }),
                    if keyframe {
                        FrameKind::Keyframe
                    } else {
                        FrameKind::Delta
                    },
                );
            }
            Outbound::Correction {
                session,
                reason,
                pose,
                last_input_seq,
            } => {
                let c = pb::Correction {
                    reason: reject_to_pb(reason) as i32,
                    position: Some(wire::vec3(pose.position)),
                    velocity: Some(wire::vec3(pose.velocity)),
                    rotation_y: pose.yaw_deg,
                    last_input_sequence: last_input_seq,
                };
                self.send_envelope(
                    session,
                    server_envelope::Body::Correction(c),
                    FrameKind::Control,
                );
            }
            Outbound::Event(e) => {
                let ev = wire::event(&e);
                for session in &e.to {
                    self.send_envelope(
                        *session,
                        server_envelope::Body::Event(ev.clone()),
                        FrameKind::Control,
                    );
                }
            }
            Outbound::Expressions {
                session,
                tick,
                full,
                states,
            } => {
                // Droppable like a delta frame: a dropped one costs the client a keyframe, and
                // the keyframe's next expression message is `full`.
                let frame = wire::expression_frame(tick, full, &states);
                self.send_envelope(
                    session,
                    server_envelope::Body::Expressions(frame),
                    FrameKind::Delta,
                );
            }
            // Split off by `deliver_until_audits` and appended first; never reaches here.
            Outbound::Audit { .. } => {}
            Outbound::ProfileAnnounced { session, version } => {
                if let Some(link) = self.links.get(&session) {
                    let wallet = link.wallet.clone();
                    self.write(PresenceOp::Announce { wallet, version });
                }
            }
            Outbound::Left { session, entity } => self.deliver_left(session, entity),
        }
    }

    /// The join is applied: register presence, acknowledge the attach, send `Joined`.
    fn deliver_joined(&mut self, session: SessionId, entity: u32, spawn: [f32; 3]) {
        let Some(link) = self.links.get_mut(&session) else {
            return;
        };
        link.entity = Some(entity);
        let wallet = link.wallet.clone();
        let ack = NodeOutbound {
            body: Some(node_outbound::Body::Ack(Box::new(node::AttachAck {
                entity_id: entity,
                epoch: self.epoch.counter,
                era: self.epoch.era,
                node_id: self.node_id.clone(),
            }))),
            droppable: false,
            keyframe: false,
        };
        let acked = link.tx.offer(ack).is_ok();
        self.write(PresenceOp::Register { wallet, entity });
        if !acked {
            self.drop_link(session);
            return;
        }
        let cfg = self.room.config();
        let joined = pb::Joined {
            room_id: self.room_id.clone(),
            entity_id: entity,
            tick_hz: cfg.tick_hz,
            broadcast_hz: cfg.broadcast_hz,
            capacity_tier: match cfg.tier {
                plaza_room_core::CapacityTier::Class => pb::CapacityTier::Class as i32,
                plaza_room_core::CapacityTier::Stadium => pb::CapacityTier::Stadium as i32,
            },
            interest_cap: cfg.interest_cap,
            position: Some(wire::vec3(spawn)),
            room: Some(wire::room_description(cfg)),
            rotation_y: self.room.pose_of(session).map_or(0.0, |p| p.yaw_deg),
        };
        self.send_envelope(
            session,
            server_envelope::Body::Joined(joined),
            FrameKind::Control,
        );
    }

    /// The session left the room: release its presence, tell it, close its link.
    fn deliver_left(&mut self, session: SessionId, entity: u32) {
        // The link may already belong to a newer attachment of this session whose join is
        // queued behind this leave (its old stream ended, then it re-attached): that link has
        // not joined yet and must not be told it left.
        if self
            .links
            .get(&session)
            .is_some_and(|l| l.entity != Some(entity))
        {
            return;
        }
        if let Some(link) = self.links.get(&session) {
            let wallet = link.wallet.clone();
            self.write(PresenceOp::Release { wallet });
        }
        self.send_envelope(
            session,
            server_envelope::Body::Left(pb::Left {
                room_id: self.room_id.clone(),
            }),
            FrameKind::Control,
        );
        if self.links.remove(&session).is_some() {
            self.metrics.sessions.dec();
        }
    }

    /// Encodes and queues one server envelope for `session`. A full queue drops droppable
    /// frames (and asks for a keyframe); a closed one detaches the session.
    pub(crate) fn send_envelope(
        &mut self,
        session: SessionId,
        body: server_envelope::Body,
        kind: FrameKind,
    ) {
        let sent_at_ms = self.clock.unix_ms();
        let Some(link) = self.links.get_mut(&session) else {
            return;
        };
        link.seq = link.seq.wrapping_add(1);
        let env = pb::ServerEnvelope {
            sequence: link.seq,
            sent_at_ms,
            body: Some(body),
        };
        let msg = NodeOutbound::envelope(self.envelopes.encode(&env), kind);
        match link.tx.offer(msg) {
            Ok(()) => {}
            Err(Refused::Full) => {
                self.metrics.outbound_dropped.inc();
                if kind != FrameKind::Control {
                    self.room.request_keyframe(session);
                } else {
                    // A control message could not be queued: the stream is hopelessly behind.
                    self.drop_link(session);
                }
            }
            Err(Refused::Closed) => self.drop_link(session),
        }
    }

    /// Forgets a session's link (its stream is gone or hopelessly behind): it leaves the room.
    pub(crate) fn drop_link(&mut self, session: SessionId) {
        if let Some(link) = self.links.remove(&session) {
            self.metrics.sessions.dec();
            if link.entity.is_some() {
                self.room.leave(session);
            }
            self.release_presence(&link);
        }
    }

    fn export_stats(&mut self) {
        let s = self.room.stats();
        let e = &mut self.exported;
        self.metrics.frames_sent.inc_by(s.frames - e.frames);
        self.metrics
            .frame_bytes
            .inc_by(s.frame_bytes - e.frame_bytes);
        self.metrics.keyframes.inc_by(s.keyframes - e.keyframes);
        self.metrics
            .bandwidth_deferrals
            .inc_by(s.deferrals - e.deferrals);
        for (i, r) in RejectReason::ALL.iter().enumerate() {
            let d = s.moves_rejected[i] - e.moves_rejected[i];
            if d > 0 {
                self.metrics
                    .inputs_rejected
                    .get_or_create(&ReasonLabel {
                        reason: r.code().to_owned(),
                    })
                    .inc_by(d);
            }
        }
        for (kind, now, before) in [
            ("teleport", s.teleports, e.teleports),
            ("roster_update", s.roster_updates, e.roster_updates),
            ("block_change", s.block_changes, e.block_changes),
            (
                "profile_superseded",
                s.profiles_superseded,
                e.profiles_superseded,
            ),
            ("profile_merged", s.profiles_merged, e.profiles_merged),
            ("profile_stale", s.profiles_stale, e.profiles_stale),
        ] {
            if now > before {
                self.metrics
                    .people_events
                    .get_or_create(&crate::metrics::EventLabel {
                        event: kind.to_owned(),
                    })
                    .inc_by(now - before);
            }
        }
        *e = s.clone();
    }
}

fn reject_to_pb(r: RejectReason) -> pb::RejectReason {
    match r {
        RejectReason::Speed => pb::RejectReason::Speed,
        RejectReason::NonFinite => pb::RejectReason::NonFinite,
        RejectReason::NonPositiveDt => pb::RejectReason::NonPositiveDt,
        RejectReason::OutOfBounds => pb::RejectReason::OutOfBounds,
        RejectReason::Teleport => pb::RejectReason::Teleport,
        RejectReason::Blocked => pb::RejectReason::Blocked,
        RejectReason::Clock => pb::RejectReason::Clock,
        RejectReason::Airborne => pb::RejectReason::Airborne,
        RejectReason::UnknownEntity => pb::RejectReason::UnknownEntity,
    }
}

mod envelopes;
#[cfg(test)]
mod pair;
#[cfg(test)]
pub(crate) mod tests;
