//! The room actor: a ractor shell around one [`plaza_room_core::Room`].
//!
//! The actor owns the room, the outbound channel of every attached session, and a ticker task
//! that wakes it at the simulation rate. On each wake it calls [`Room::advance`] with the time
//! since the activation started (the core runs the steps and the broadcast that are due, at most
//! `max_catch_up` steps; the rest are counted as overruns and skipped), then delivers what they
//! produced. It stops itself after it has been empty for the grace
//! period; its supervisor ([`crate::supervisor`]) then forgets it.
//!
//! Sending to a session never blocks the room: the channel to the gRPC stream is bounded, a full
//! channel drops the frame and asks the room for a keyframe for that session, so a slow gateway
//! gets the latest state instead of an ever-growing queue.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use plaza_directory::{Epoch, PresenceEntry, Renewal, RoomLease, SharedDirectory, Sources};
use plaza_node_proto::{self as node, NodeOutbound, node_outbound};
use plaza_proto::pb::{self, server_envelope};
use plaza_proto::quant::Pose;
use plaza_room_core::{Due, JoinRefusal, Outbound, RejectReason, Room, SessionId};
use prost::Message as _;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::EventLog;
use crate::metrics::{NodeMetrics, ReasonLabel};

pub mod admin;
use crate::wire::vec3;

/// How a room actor runs (the simulation parameters live in [`plaza_room_core::RoomConfig`]).
#[derive(Clone, Debug)]
pub struct RoomActorConfig {
    /// The room's own config.
    pub room: plaza_room_core::RoomConfig,
    /// Most steps run in one wake to catch up; beyond it steps are skipped and counted.
    pub max_catch_up: u32,
    /// How long an empty room lives before it stops.
    pub empty_grace: Duration,
    /// Presence lease, renewed at a third of it.
    pub presence_ttl: Duration,
    /// Per-room definitions: the first rule matching a room's id replaces `room` for that
    /// room ([`RoomActorConfig::for_room`]).
    pub rooms: plaza_room_core::RoomRegistry,
    /// How often the room checkpoints its state (the handoff state) to the directory under its
    /// epoch, so the next activation after a crash restores held props and open consents;
    /// zero turns checkpoints off.
    pub checkpoint_interval: Duration,
}

impl Default for RoomActorConfig {
    fn default() -> Self {
        Self {
            room: plaza_room_core::RoomConfig::default(),
            max_catch_up: 5,
            empty_grace: Duration::from_secs(10),
            presence_ttl: Duration::from_secs(15),
            rooms: plaza_room_core::RoomRegistry::default(),
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
        }
    }
}

impl RoomActorConfig {
    /// How `room_id` runs: the first per-room rule matching it, else the node default; with
    /// the pattern of the rule that matched.
    pub fn for_room(&self, room_id: &str) -> (Self, Option<String>) {
        match self.rooms.resolve(room_id) {
            Some(rule) => (
                Self {
                    room: rule.cfg.clone(),
                    ..self.clone()
                },
                Some(rule.pattern.clone()),
            ),
            None => (self.clone(), None),
        }
    }
}

/// The shipped checkpoint interval (`room.checkpoint_interval_ms`).
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5);

/// Messages a room actor handles.
#[derive(Debug)]
pub enum RoomMsg {
    /// A session attaches: join it at the next tick and send its frames to `tx`.
    Join {
        /// The session.
        session: SessionId,
        /// Its identity.
        wallet: String,
        /// Where its server envelopes go.
        tx: mpsc::Sender<NodeOutbound>,
        /// The entity a resumed session asks to get back (0: any).
        entity: u32,
        /// Identifies this attachment: a later `Detach` of an older stream of the same session
        /// must not detach this one.
        link_id: u64,
        /// The gateway authenticated the session as an operator: its `OperatorAction`s are
        /// carried out (anyone else's are refused `not_operator`).
        operator: bool,
    },
    /// An envelope from an attached session.
    Input {
        /// The session.
        session: SessionId,
        /// What it sent.
        envelope: pb::ClientEnvelope,
    },
    /// The gateway dropped frames for this session: its next frame must be a keyframe.
    KeyframeNeeded {
        /// The session.
        session: SessionId,
    },
    /// The session's stream ended: it leaves.
    Detach {
        /// The session.
        session: SessionId,
        /// The attachment whose stream ended.
        link_id: u64,
    },
    /// The ticker's wake-up.
    Tick,
    /// Drain: run one last step (queued joins and inputs are applied and acknowledged), reply
    /// with the encoded `plaza.node.v1.Handoff` (members with wallets and the room
    /// core's whole state), and from then on change nothing: later joins, inputs and ticks are
    /// ignored until the supervisor, having stored the handoff, stops the room.
    Handoff(RpcReplyPort<Vec<u8>>),
    /// An operator call (the admin API): view, mute, close, teleport ([`admin`]).
    Admin(admin::AdminCall),
    /// Test hook: the room panics in its handler.
    #[cfg(feature = "test-util")]
    Panic,
}

/// Arguments of a room actor.
pub struct RoomArgs {
    /// The room id.
    pub room_id: String,
    /// How it runs.
    pub cfg: RoomActorConfig,
    /// The node's metrics.
    pub metrics: NodeMetrics,
    /// The directory (presence writes are fenced by `epoch`).
    pub directory: SharedDirectory,
    /// This node's id.
    pub node_id: String,
    /// The placement epoch this activation holds (at activation; see [`Activation::epoch`]).
    pub epoch: Epoch,
    /// The claimed placement lease; the room's directory writer renews it, stops committing
    /// before it can lapse, stops the room if it is lost, and releases it after the room.
    pub lease: RoomLease,
    /// Members and current epoch, shared with the supervisor (drain handoffs).
    pub activation: Arc<Activation>,
    /// Where activations and directory commits are logged (may be disabled).
    pub events: EventLog,
    /// The handoff state the previous activation left (a drain, or its last checkpoint if it
    /// crashed), if any, with the epoch that wrote it: an encoded `plaza.node.v1.Handoff`. The
    /// room restores the core state it carries (a checkpoint brought up to date from the
    /// writer's later audit records); each handed-off member waits for its session to re-attach
    /// (for `presence_ttl`) and leaves if it does not.
    pub handoff: Option<(Epoch, Vec<u8>)>,
}

/// A handed-off member whose session has not re-attached to this activation yet.
#[derive(Debug)]
struct Awaited {
    wallet: String,
    entity: u32,
    deadline: Instant,
}

/// The room actor (behaviour only; state is [`RoomState`]).
#[derive(Debug)]
pub struct RoomActor;

/// One attached session, as the room actor sees it.
#[derive(Debug)]
struct Link {
    wallet: String,
    tx: mpsc::Sender<NodeOutbound>,
    /// Server envelope sequence for this session.
    seq: u32,
    entity: Option<u32>,
    /// Decoder of this sender's compressed movement timestamps (one per sender).
    timestamps: plaza_proto::compressed::TimestampDecoder,
    /// The attachment (stream) this link belongs to.
    link_id: u64,
    /// The session's identity has the operator role (the attach's flag, set by the gateway).
    operator: bool,
}

impl Link {
    /// A fresh attachment: not joined yet, sequences and timestamps from the start.
    fn new(wallet: String, tx: mpsc::Sender<NodeOutbound>, link_id: u64, operator: bool) -> Self {
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

/// A room actor's state.
pub struct RoomState {
    room: Room,
    /// The room's tracing span (room id and epoch): ticks and inputs run inside it.
    span: tracing::Span,
    room_id: String,
    cfg: RoomActorConfig,
    metrics: NodeMetrics,
    links: HashMap<SessionId, Link>,
    ticker: JoinHandle<()>,
    started: Instant,
    empty_since: Option<Instant>,
    out: Vec<Outbound>,
    /// Room stats already exported to metrics, to export deltas.
    exported: plaza_room_core::RoomStats,
    presence: mpsc::UnboundedSender<PresenceOp>,
    /// The directory writer task: it ends after the room's last presence write, releasing the
    /// lease; the room's stop waits for it (bounded), so a draining node does not exit holding
    /// leases the next activation would have to wait out.
    writer: Option<JoinHandle<()>>,
    node_id: String,
    epoch: Epoch,
    /// For durable audit appends (fenced by the activation's current epoch; the store refuses
    /// an epoch whose lease is not live).
    directory: SharedDirectory,
    activation: Arc<Activation>,
    /// Handed-off members restored from the previous activation, by session, until they
    /// re-attach or their grace runs out.
    awaited: HashMap<SessionId, Awaited>,
    /// The handoff state was taken: nothing changes any more.
    frozen: bool,
    /// Since when ticks are withheld because the lease's local deadline passed.
    withheld_since: Option<Instant>,
    /// The placement lease's TTL: withheld this long, the store's lease has surely lapsed; a
    /// room without sessions then gives up (stops), one with sessions after
    /// `FROZEN_MAX_TTLS` TTLs (see `on_tick`).
    lease_ttl: Duration,
    /// The room gave up its lease; the actor stops after this tick.
    gave_up: bool,
    /// Where activations and commits are logged: broadcasts are logged as commits at most once
    /// a second (and always the first after a gap), so the single-activation checker sees them.
    events: EventLog,
    last_logged_broadcast: Option<Instant>,
    /// Operator state: mutes, tick and byte windows ([`admin`]).
    admin: admin::AdminSide,
    /// Test mode: authoritative poses per step (`PLAZA_RECORD_POSES`, [`crate::record`]).
    poses: Option<crate::record::PoseRecorder>,
    /// The directory's sequence number of the last audit record appended (or replayed) by
    /// this activation: checkpoints carry it.
    last_audit_seq: u64,
    /// When the last checkpoint was taken.
    last_checkpoint: Instant,
}

/// A room whose lease is unconfirmed waits at most this many lease TTLs, frozen, before it
/// gives up even with sessions attached (60 s with the shipped 10 s TTL: longer than the 30 s
/// Redis outage the cluster must survive with its state).
const FROZEN_MAX_TTLS: u32 = 6;

/// How soon a failed lease renewal is tried again.
const RENEW_RETRY: Duration = Duration::from_millis(250);

/// What an outbound envelope is, for backpressure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Must arrive (joined, corrections, errors).
    Control,
    /// A delta frame: may be dropped, then a keyframe heals the client.
    Delta,
    /// A keyframe.
    Keyframe,
}

/// An ordered presence write, done by the room's presence task off the tick path.
#[derive(Debug)]
enum PresenceOp {
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

impl Actor for RoomActor {
    type Msg = RoomMsg;
    type State = RoomState;
    type Arguments = RoomArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<RoomMsg>,
        args: RoomArgs,
    ) -> Result<RoomState, ActorProcessingErr> {
        let started = Instant::now();
        let step = Duration::from_secs_f64(1.0 / f64::from(args.cfg.room.tick_hz.max(1)));
        let bcast = Duration::from_secs_f64(1.0 / f64::from(args.cfg.room.broadcast_hz.max(1)));
        let me = myself.clone();
        // Wakes the room at every simulation step and every broadcast, each on its own evenly
        // spaced grid, so broadcasts go out every 50 ms rather than alternating 40/60 ms on the
        // 20 ms step grid. A late wake is not repeated: the actor catches up from wall time.
        let ticker = tokio::spawn(async move {
            let (mut next_step, mut next_bcast) = (started + step, started + bcast);
            loop {
                let next = next_step.min(next_bcast);
                tokio::time::sleep_until(next).await;
                let now = Instant::now();
                while next_step <= now {
                    next_step += step;
                }
                while next_bcast <= now {
                    next_bcast += bcast;
                }
                if me.cast(RoomMsg::Tick).is_err() {
                    break;
                }
            }
        });
        let (presence, writer) = spawn_directory_writer(DirectoryWriter {
            directory: args.directory.clone(),
            room: args.room_id.clone(),
            node: args.node_id.clone(),
            lease: args.lease.clone(),
            presence_ttl: args.cfg.presence_ttl,
            metrics: args.metrics.clone(),
            actor: myself.clone(),
            activation: args.activation.clone(),
            events: args.events.clone(),
        });
        args.metrics.rooms.inc();
        let mut room = Room::new(args.room_id.clone(), args.cfg.room.clone());
        room.set_max_catch_up(args.cfg.max_catch_up);
        let (awaited, last_audit_seq) = match &args.handoff {
            Some((writer, bytes)) => restore_handoff(&mut room, &args, *writer, bytes).await,
            None => (HashMap::new(), 0),
        };
        Ok(RoomState {
            room,
            // A root span: a long-lived child would keep the span that spawned the room (a
            // join's attach span) open, and its trace would never be exported.
            span: tracing::info_span!(parent: None, "room", room = %args.room_id, epoch = %args.epoch),
            room_id: args.room_id,
            cfg: args.cfg,
            metrics: args.metrics,
            links: HashMap::new(),
            ticker,
            started,
            empty_since: awaited.is_empty().then(Instant::now),
            out: Vec::new(),
            exported: Default::default(),
            presence,
            writer: Some(writer),
            node_id: args.node_id,
            epoch: args.epoch,
            directory: args.directory,
            activation: args.activation,
            awaited,
            frozen: false,
            withheld_since: None,
            lease_ttl: args.lease.ttl(),
            gave_up: false,
            events: args.events,
            last_logged_broadcast: None,
            admin: Default::default(),
            poses: crate::record::PoseRecorder::from_env(),
            last_audit_seq,
            last_checkpoint: Instant::now(),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<RoomMsg>,
        state: &mut RoomState,
    ) -> Result<(), ActorProcessingErr> {
        state.ticker.abort();
        state.metrics.rooms.dec();
        state.metrics.sessions.dec_by(state.links.len() as i64);
        // Release the presence of everyone still here; the writer task drains then exits.
        for (_, link) in state.links.drain() {
            if link.entity.is_some() {
                let _ = state.presence.send(PresenceOp::Release {
                    wallet: link.wallet,
                });
            }
        }
        // Close the writer's queue and wait (bounded) until it has written the releases and
        // given the lease up, so the room's next activation need not wait for the lease to lapse.
        state.presence = mpsc::unbounded_channel().0;
        if let Some(writer) = state.writer.take() {
            let grace = Duration::from_secs(3);
            if tokio::time::timeout(grace, writer).await.is_err() {
                tracing::warn!(room = %state.room_id, "directory writer still busy after the room stopped");
            }
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<RoomMsg>,
        msg: RoomMsg,
        state: &mut RoomState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            RoomMsg::Join { .. } | RoomMsg::Input { .. } | RoomMsg::Tick if state.frozen => {
                // Handed off: the stream of a joiner ends with the room; the gateway resumes it
                // on the room's next activation.
            }
            RoomMsg::Join {
                session,
                wallet,
                tx,
                entity,
                link_id,
                operator,
            } => {
                if let Some(link) = state.links.get_mut(&session) {
                    // The same session attaches again while it is still a member (its gateway
                    // re-attached, or it came back through another gateway before the old
                    // stream's end reached us): swap the stream, keep the membership and the
                    // entity, and start the new stream with Joined and a keyframe. The old
                    // stream's later Detach carries the old link id and is ignored.
                    *link = Link {
                        entity: link.entity,
                        ..Link::new(wallet, tx, link_id, operator)
                    };
                    state.welcome_back(session);
                    return Ok(());
                }
                if let Some(awaited) = state.awaited.remove(&session) {
                    if awaited.wallet == wallet
                        && state.room.entity_of(session) == Some(awaited.entity)
                    {
                        // A handed-off member is back: its avatar, held props and consents are
                        // where the previous activation left them.
                        state.relink(session, wallet, tx, link_id, operator);
                        return Ok(());
                    }
                    tracing::warn!(room = %state.room_id, session, "a handed-off session came back under another wallet; it joins afresh");
                    state.room.leave(session);
                }
                state
                    .links
                    .insert(session, Link::new(wallet, tx, link_id, operator));
                state.metrics.sessions.inc();
                let wallet = state
                    .links
                    .get(&session)
                    .map_or_else(String::new, |l| l.wallet.clone());
                state.room.join_member(session, wallet, entity);
                state.empty_since = None;
            }
            RoomMsg::Input { session, envelope } => {
                let span = state.span.clone();
                span.in_scope(|| state.on_envelope(session, envelope, &myself));
            }
            RoomMsg::KeyframeNeeded { session } => state.room.request_keyframe(session),
            RoomMsg::Detach { session, link_id } => {
                let current = state
                    .links
                    .get(&session)
                    .is_some_and(|l| l.link_id == link_id);
                if let Some(link) = current.then(|| state.links.remove(&session)).flatten() {
                    state.metrics.sessions.dec();
                    state.room.leave(session);
                    release_presence(&state.presence, &link);
                }
            }
            RoomMsg::Tick => {
                let span = state.span.clone();
                state.on_tick().instrument(span).await?;
                if state.gave_up {
                    myself.stop(Some("lease lapsed".into()));
                    return Ok(());
                }
                if state.room.is_empty() && state.links.is_empty() {
                    let since = *state.empty_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= state.cfg.empty_grace {
                        tracing::info!(room = %state.room_id, "room empty past its grace period, stopping");
                        state.metrics.placement("stopped_empty");
                        let _ = state.presence.send(PresenceOp::DropCheckpoint);
                        myself.stop(Some("empty".into()));
                        return Ok(());
                    }
                } else {
                    state.empty_since = None;
                }
                state.maybe_checkpoint();
            }
            RoomMsg::Handoff(reply) => {
                if !state.frozen {
                    if state.activation.may_commit() {
                        let span = state.span.clone();
                        state.step_now().instrument(span).await?;
                    }
                    state.frozen = true;
                    // No checkpoint written after this one may replace the handoff state.
                    state.activation.freeze();
                }
                let _ = reply.send(state.handoff_bytes());
            }
            RoomMsg::Admin(call) => state.on_admin(call, &myself),
            #[cfg(feature = "test-util")]
            RoomMsg::Panic => panic!("test hook: room {} panics", state.room_id),
        }
        Ok(())
    }
}

// === impl RoomState ===

impl RoomState {
    /// Turns a client envelope into room input.
    fn on_envelope(
        &mut self,
        session: SessionId,
        env: pb::ClientEnvelope,
        myself: &ActorRef<RoomMsg>,
    ) {
        let seq = env.sequence;
        let Some(body) = env.body else { return };
        let Some(link) = self.links.get_mut(&session) else {
            return;
        };
        match crate::wire::decode(body, seq, &mut link.timestamps) {
            crate::wire::Decoded::Input(input) => self.admit_input(session, input),
            // The stream stays open until the Left envelope is out; then the link closes.
            crate::wire::Decoded::Leave => self.room.leave(session),
            crate::wire::Decoded::Invalid(what, why) => {
                self.send_envelope(
                    session,
                    server_envelope::Body::Error(pb::Error {
                        code: pb::ErrorCode::InvalidInput as i32,
                        message: format!("{what}: {why}"),
                        in_reply_to: seq,
                        ..Default::default()
                    }),
                    Kind::Control,
                );
            }
            crate::wire::Decoded::Operator { op, target_wallet } => {
                self.on_operator(session, seq, op, target_wallet, myself);
            }
            crate::wire::Decoded::Ignore => {}
        }
    }

    /// Runs the simulation steps and the broadcast that wall time says are due.
    ///
    /// Performance: runs every tick.
    async fn on_tick(&mut self) -> Result<(), ActorProcessingErr> {
        if !self.activation.may_commit() {
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
                Instant::now()
            });
            let frozen = since.elapsed();
            if (frozen >= self.lease_ttl && self.links.is_empty())
                || frozen >= self.lease_ttl * FROZEN_MAX_TTLS
            {
                tracing::error!(room = %self.room_id, "lease not confirmed for a whole TTL; the room gives up");
                self.metrics.placement("lease_lapsed");
                self.gave_up = true;
            }
            return Ok(());
        }
        if self.withheld_since.take().is_some() {
            tracing::info!(room = %self.room_id, "lease confirmed; ticks resume");
        }
        self.expire_awaited();
        self.run_due(false).await
    }

    /// Runs one step now even if none is due (a drain's last step).
    async fn step_now(&mut self) -> Result<(), ActorProcessingErr> {
        self.run_due(true).await
    }

    /// Logs a delivered broadcast as a commit of the current epoch: the first after a quiet
    /// second, then at most one a second. It took effect between `checked_ms` (the lease was
    /// last seen held) and now (every frame handed to its link).
    fn log_broadcast(&mut self, checked_ms: u64) {
        let now = Instant::now();
        if self
            .last_logged_broadcast
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
        {
            self.events.commit(
                &self.room_id,
                self.activation.epoch(),
                checked_ms,
                unix_ms(),
                "broadcast",
            );
            self.last_logged_broadcast = Some(now);
        }
    }

    /// Handed-off members whose sessions did not come back in time leave.
    fn expire_awaited(&mut self) {
        if self.awaited.is_empty() {
            return;
        }
        let now = Instant::now();
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

    /// A handed-off member's session re-attached: link it to its restored avatar, acknowledge
    /// it (presence is registered under this activation) and send it a keyframe.
    fn relink(
        &mut self,
        session: SessionId,
        wallet: String,
        tx: mpsc::Sender<NodeOutbound>,
        link_id: u64,
        operator: bool,
    ) {
        self.links
            .insert(session, Link::new(wallet, tx, link_id, operator));
        self.metrics.sessions.inc();
        self.empty_since = None;
        self.welcome_back(session);
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
    fn handoff_bytes(&self) -> Vec<u8> {
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
    fn maybe_checkpoint(&mut self) {
        let every = self.cfg.checkpoint_interval;
        if every.is_zero()
            || self.frozen
            || self.last_checkpoint.elapsed() < every
            || !self.activation.may_commit()
        {
            return;
        }
        self.last_checkpoint = Instant::now();
        let _ = self
            .presence
            .send(PresenceOp::Checkpoint(self.handoff_bytes()));
    }

    /// Runs the steps and the broadcast wall time says are due (at least one step, and no
    /// broadcast, if `force`): the room core's schedule ([`Room::advance`]).
    async fn run_due(&mut self, force: bool) -> Result<(), ActorProcessingErr> {
        let t0 = std::time::Instant::now();
        let now = self.started.elapsed();
        let mut out = std::mem::take(&mut self.out);
        let (poses, links, room_id) = (&mut self.poses, &self.links, &self.room_id);
        let on_step = |room: &Room, now_ms: u64| {
            if let Some(rec) = poses.as_mut() {
                rec.step(
                    room_id,
                    room.tick(),
                    now_ms,
                    links
                        .keys()
                        .filter_map(|s| Some((room.entity_of(*s)?, room.pose_of(*s)?))),
                );
            }
        };
        let due = if force { Due::Final } else { Due::Scheduled };
        let advanced = self.room.advance_with(now, due, &mut out, on_step);
        if advanced.skipped > 0 {
            self.metrics.tick_overruns.inc_by(advanced.skipped);
        }
        if let Some(rec) = self.poses.as_mut() {
            rec.flush();
        }
        let broadcast = advanced.broadcast;
        if advanced.ran() {
            let took = t0.elapsed().as_secs_f64();
            self.metrics.tick_duration.observe(took);
            self.admin.ticks.record(took);
        }
        if broadcast {
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
        let checked_ms = unix_ms();
        if !self.activation.may_commit() {
            out.retain(|o| !matches!(o, Outbound::Frame { .. }));
            self.metrics.placement("delivery_withheld");
            self.out = out;
            return Ok(());
        }
        // Audit records are appended durably, in order, before anything after them in this
        // batch (the acknowledging events) is delivered. A room that cannot append stops: no
        // consent transition is acknowledged without its audit record.
        let mut audits = Vec::new();
        for o in out.drain(..) {
            match o {
                Outbound::Audit {
                    local_seq,
                    kind,
                    detail_json,
                    at_ms,
                } => audits.push((local_seq, kind, detail_json, at_ms)),
                other => {
                    if !audits.is_empty() {
                        self.append_audits(&mut audits).await?;
                    }
                    self.deliver(other);
                }
            }
        }
        if !audits.is_empty() {
            self.append_audits(&mut audits).await?;
        }
        if broadcast {
            self.log_broadcast(checked_ms);
        }
        self.out = out;
        self.export_stats();
        Ok(())
    }

    /// Appends audit records to the directory in order, fenced by this activation's epoch.
    async fn append_audits(
        &mut self,
        audits: &mut Vec<(u64, String, String, u64)>,
    ) -> Result<(), ActorProcessingErr> {
        for (local_seq, kind, detail, at_ms) in audits.drain(..) {
            let append = self.directory.audit_append(
                &self.room_id,
                self.activation.epoch(),
                &kind,
                &detail,
                at_ms,
            );
            match tokio::time::timeout(Duration::from_secs(2), append).await {
                Ok(Ok(seq)) => {
                    self.last_audit_seq = self.last_audit_seq.max(seq);
                    tracing::debug!(room = %self.room_id, local_seq, seq, kind, "audit appended");
                    self.metrics.audit_appended.inc();
                }
                Ok(Err(e)) => {
                    self.metrics.directory_error(e.code());
                    tracing::error!(room = %self.room_id, error = %e, "audit append failed; stopping the room");
                    return Err(format!("audit append failed: {e}").into());
                }
                Err(_) => {
                    self.metrics.directory_error("timeout");
                    tracing::error!(room = %self.room_id, "audit append timed out; stopping the room");
                    return Err("audit append timed out".into());
                }
            }
        }
        Ok(())
    }

    fn deliver(&mut self, o: Outbound) {
        match o {
            Outbound::Joined {
                session,
                entity,
                spawn,
            } => {
                let Some(link) = self.links.get_mut(&session) else {
                    return;
                };
                link.entity = Some(entity);
                let _ = self.presence.send(PresenceOp::Register {
                    wallet: link.wallet.clone(),
                    entity,
                });
                let ack = NodeOutbound {
                    body: Some(node_outbound::Body::Ack(node::AttachAck {
                        entity_id: entity,
                        epoch: self.epoch.counter,
                        era: self.epoch.era,
                        node_id: self.node_id.clone(),
                    })),
                    droppable: false,
                    keyframe: false,
                };
                if link.tx.try_send(ack).is_err() {
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
                    position: Some(vec3(spawn)),
                    room: Some(crate::wire::room_description(cfg)),
                    rotation_y: self.room.pose_of(session).map_or(0.0, |p| p.yaw_deg),
                };
                self.send_envelope(
                    session,
                    server_envelope::Body::Joined(joined),
                    Kind::Control,
                );
            }
            Outbound::JoinRefused { session, reason } => {
                let (code, msg) = match reason {
                    JoinRefusal::RoomFull => (pb::ErrorCode::RoomFull, "room is full"),
                    JoinRefusal::AlreadyJoined => {
                        (pb::ErrorCode::AlreadyJoined, "already in this room")
                    }
                };
                if let Some(link) = self.links.get(&session) {
                    let reason = match reason {
                        JoinRefusal::RoomFull => node::DetachReason::RoomFull,
                        JoinRefusal::AlreadyJoined => node::DetachReason::Rejected,
                    };
                    let _ = link.tx.try_send(detach_message(reason, msg));
                }
                let _ = code;
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
                        Kind::Keyframe
                    } else {
                        Kind::Delta
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
                    position: Some(vec3(pose.position)),
                    velocity: Some(vec3(pose.velocity)),
                    rotation_y: pose.yaw_deg,
                    last_input_sequence: last_input_seq,
                };
                self.send_envelope(session, server_envelope::Body::Correction(c), Kind::Control);
            }
            Outbound::Event(e) => {
                let ev = crate::wire::event(&e);
                for session in &e.to {
                    self.send_envelope(
                        *session,
                        server_envelope::Body::Event(ev.clone()),
                        Kind::Control,
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
                let frame = crate::wire::expression_frame(tick, full, &states);
                self.send_envelope(
                    session,
                    server_envelope::Body::Expressions(frame),
                    Kind::Delta,
                );
            }
            // Appended in `on_tick` before delivery; never reaches here.
            Outbound::Audit { .. } => {}
            Outbound::ProfileAnnounced { session, version } => {
                if let Some(link) = self.links.get(&session) {
                    let _ = self.presence.send(PresenceOp::Announce {
                        wallet: link.wallet.clone(),
                        version,
                    });
                }
            }
            Outbound::Left { session, entity } => {
                // The link may already belong to a newer attachment of this session whose join
                // is queued behind this leave (its old stream ended, then it re-attached): that
                // link has not joined yet and must not be told it left.
                if self
                    .links
                    .get(&session)
                    .is_some_and(|l| l.entity.is_some_and(|e| e != entity) || l.entity.is_none())
                {
                    return;
                }
                if let Some(link) = self.links.get(&session) {
                    let _ = self.presence.send(PresenceOp::Release {
                        wallet: link.wallet.clone(),
                    });
                }
                self.send_envelope(
                    session,
                    server_envelope::Body::Left(pb::Left {
                        room_id: self.room_id.clone(),
                    }),
                    Kind::Control,
                );
                if self.links.remove(&session).is_some() {
                    self.metrics.sessions.dec();
                }
            }
        }
    }

    /// Encodes and queues one server envelope for `session`. A full queue drops droppable
    /// frames (and asks for a keyframe); a closed one detaches the session.
    fn send_envelope(&mut self, session: SessionId, body: server_envelope::Body, kind: Kind) {
        let Some(link) = self.links.get_mut(&session) else {
            return;
        };
        link.seq = link.seq.wrapping_add(1);
        let env = pb::ServerEnvelope {
            sequence: link.seq,
            sent_at_ms: unix_ms(),
            body: Some(body),
        };
        let msg = NodeOutbound {
            body: Some(node_outbound::Body::ServerEnvelope(
                env.encode_to_vec().into(),
            )),
            droppable: kind != Kind::Control,
            keyframe: kind == Kind::Keyframe,
        };
        match link.tx.try_send(msg) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.metrics.outbound_dropped.inc();
                if kind != Kind::Control {
                    self.room.request_keyframe(session);
                } else {
                    // A control message could not be queued: the stream is hopelessly behind.
                    self.drop_link(session);
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => self.drop_link(session),
        }
    }

    fn drop_link(&mut self, session: SessionId) {
        if let Some(link) = self.links.remove(&session) {
            self.metrics.sessions.dec();
            if link.entity.is_some() {
                self.room.leave(session);
            }
            release_presence(&self.presence, &link);
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

/// What a room activation's directory writer shares with the supervisor and the room: the
/// members it has registered (wallet → entity), the epoch it commits under (a reclaim after the
/// store lost its data changes it), and until when it may commit (the lease's local deadline,
/// moved on by every renewal). The supervisor reads members for drain handoffs; the room reads
/// the deadline before every tick.
#[derive(Debug)]
pub struct Activation {
    members: std::sync::Mutex<BTreeMap<String, u32>>,
    epoch: std::sync::Mutex<Epoch>,
    commit_until: std::sync::Mutex<Instant>,
    /// The room gave its handoff state (a drain): no checkpoint is stored after that.
    frozen: std::sync::atomic::AtomicBool,
    /// Held around every store of this room's handoff state (checkpoints by the writer, the
    /// drain's by the supervisor), so the two are ordered.
    handoff_lock: tokio::sync::Mutex<()>,
}

impl Activation {
    /// A fresh activation holding `lease`.
    pub fn new(lease: &RoomLease) -> Self {
        Self {
            members: std::sync::Mutex::new(BTreeMap::new()),
            epoch: std::sync::Mutex::new(lease.epoch()),
            commit_until: std::sync::Mutex::new(Instant::now() + lease.remaining()),
            frozen: std::sync::atomic::AtomicBool::new(false),
            handoff_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Marks the room handed off: checkpoints stop.
    pub fn freeze(&self) {
        self.frozen.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the room gave its handoff state.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The lock every store of the room's handoff state holds.
    pub fn handoff_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.handoff_lock
    }

    /// True while the activation's lease is surely held (its local deadline, which ends a
    /// safety margin before the store's lease can lapse, has not passed).
    pub fn may_commit(&self) -> bool {
        Instant::now() < *self.commit_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_lease(&self, lease: &RoomLease) {
        *self.commit_until.lock().unwrap_or_else(|e| e.into_inner()) =
            Instant::now() + lease.remaining();
    }

    /// The members whose presence the room has registered, sorted by wallet.
    pub fn members(&self) -> Vec<(String, u32)> {
        let g = self.members.lock().unwrap_or_else(|e| e.into_inner());
        g.iter().map(|(w, e)| (w.clone(), *e)).collect()
    }

    /// The epoch the activation commits under now.
    pub fn epoch(&self) -> Epoch {
        *self.epoch.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_member(&self, wallet: &str, entity: Option<u32>) {
        let mut g = self.members.lock().unwrap_or_else(|e| e.into_inner());
        match entity {
            Some(e) => {
                g.insert(wallet.to_owned(), e);
            }
            None => {
                g.remove(wallet);
            }
        }
    }

    fn set_epoch(&self, epoch: Epoch) {
        *self.epoch.lock().unwrap_or_else(|e| e.into_inner()) = epoch;
    }
}

/// Releases the presence of a link that leaves without a `Left` (its stream ended or was
/// dropped), if it had joined; `Left` releases the others.
fn release_presence(tx: &mpsc::UnboundedSender<PresenceOp>, link: &Link) {
    if link.entity.is_some() {
        let _ = tx.send(PresenceOp::Release {
            wallet: link.wallet.clone(),
        });
    }
}

/// What the room's directory task needs.
struct DirectoryWriter {
    directory: SharedDirectory,
    room: String,
    node: String,
    lease: RoomLease,
    presence_ttl: Duration,
    metrics: NodeMetrics,
    actor: ActorRef<RoomMsg>,
    activation: Arc<Activation>,
    events: EventLog,
}

/// Spawns the room's directory task: presence writes in order, presence and placement lease
/// renewal, and the lease release once the room is gone (after its last presence write).
///
/// Single activation over liveness: a write is sent only while [`RoomLease::may_commit`]
/// (the local deadline ends a safety margin before the store's lease can lapse); a write that
/// cannot be committed is skipped (the member map still records it, so a reclaim re-registers
/// it). A lost lease (another epoch holds the room) stops the room. A room whose placement
/// vanished (Redis restarted empty, or the lease lapsed unclaimed) is reclaimed under a new
/// epoch and every member's presence is registered again.
fn spawn_directory_writer(
    w: DirectoryWriter,
) -> (mpsc::UnboundedSender<PresenceOp>, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<PresenceOp>();
    let DirectoryWriter {
        directory: dir,
        room,
        node,
        mut lease,
        presence_ttl,
        metrics,
        actor,
        activation,
        events,
    } = w;
    let task = tokio::spawn(async move {
        let presence_ttl_ms = presence_ttl.as_millis() as u64;
        // Every lease renewal renews the presence of all of this activation's entries in the
        // same store operation (one per room per period, whatever the number of members).
        lease.set_presence_ttl(Some(presence_ttl));
        let period = lease.renew_every().min(presence_ttl / 3);
        let mut renew = tokio::time::interval_at(Instant::now() + period, period);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Presence writes to retry, newest per wallet (`Some(entity)`: register, `None`: release).
        let mut retry: BTreeMap<String, Option<u32>> = BTreeMap::new();
        let register = |wallet: String, entity: u32, epoch: Epoch| {
            let dir = dir.clone();
            let entry = PresenceEntry {
                wallet,
                entity,
                room: room.clone(),
                sources: Sources::ROOM,
                node: node.clone(),
                profile_version: 0,
                lease_until_ms: 0,
            };
            async move { dir.presence_register(entry, epoch, presence_ttl_ms).await }
        };
        loop {
            tokio::select! {
                op = rx.recv() => {
                    let Some(op) = op else { break };
                    match op {
                        PresenceOp::Checkpoint(bytes) => {
                            // Under the handoff lock: a drain's handoff state, stored after the
                            // room froze, is never replaced by an older checkpoint.
                            let _guard = activation.handoff_lock().lock().await;
                            if activation.is_frozen() || !lease.may_commit() {
                                continue;
                            }
                            let epoch = lease.epoch();
                            let sent = unix_ms();
                            match dir.put_handoff(&room, epoch, bytes).await {
                                Ok(()) => {
                                    metrics.placement("checkpointed");
                                    events.commit(&room, epoch, sent, unix_ms(), "checkpoint");
                                }
                                Err(e) => {
                                    tracing::warn!(room = %room, error = %e, "checkpoint not stored");
                                    metrics.directory_error(e.code());
                                }
                            }
                            continue;
                        }
                        PresenceOp::DropCheckpoint => {
                            let _guard = activation.handoff_lock().lock().await;
                            if !activation.is_frozen()
                                && lease.may_commit()
                                && let Err(e) = dir.take_handoff(&room).await
                            {
                                metrics.directory_error(e.code());
                            }
                            continue;
                        }
                        _ => {}
                    }
                    if let PresenceOp::Announce { wallet, version } = &op {
                        // The profile version travels to the directory (its own dedup keeps
                        // the highest); a write that cannot be committed now is not retried:
                        // the next announcement carries a higher version anyway.
                        if lease.may_commit() {
                            let sent = unix_ms();
                            match dir.announce_profile(wallet, *version, Sources::ROOM).await {
                                Ok(_) => events.commit(&room, lease.epoch(), sent, unix_ms(), "announce"),
                                Err(e) => {
                                    tracing::warn!(room = %room, error = %e, "profile announcement failed");
                                    metrics.directory_error(e.code());
                                }
                            }
                        }
                        continue;
                    }
                    let (what, wallet, want) = match &op {
                        PresenceOp::Register { wallet, entity } => {
                            activation.set_member(wallet, Some(*entity));
                            ("register", wallet.clone(), Some(*entity))
                        }
                        PresenceOp::Release { wallet } => {
                            activation.set_member(wallet, None);
                            ("release", wallet.clone(), None)
                        }
                        PresenceOp::Announce { .. }
                        | PresenceOp::Checkpoint(_)
                        | PresenceOp::DropCheckpoint => continue,
                    };
                    // The newest write of a wallet supersedes one waiting for a retry.
                    retry.remove(&wallet);
                    if !lease.may_commit() {
                        metrics.placement("commit_withheld");
                        retry.insert(wallet, want);
                        continue;
                    }
                    let epoch = lease.epoch();
                    let sent = unix_ms();
                    let res = match op {
                        PresenceOp::Register { wallet, entity } => {
                            register(wallet, entity, epoch).await
                        }
                        PresenceOp::Release { wallet } => dir
                            .presence_release(&wallet, Sources::ROOM, epoch)
                            .await
                            .map(|_| ()),
                        PresenceOp::Announce { .. }
                        | PresenceOp::Checkpoint(_)
                        | PresenceOp::DropCheckpoint => Ok(()),
                    };
                    match res {
                        Ok(()) => events.commit(&room, epoch, sent, unix_ms(), what),
                        Err(e) => {
                            tracing::warn!(room = %room, wallet, error = %e, "presence write failed; retried after the next renewal");
                            metrics.directory_error(e.code());
                            if !e.is_fenced() {
                                retry.insert(wallet, want);
                            }
                        }
                    }
                }
                _ = renew.tick() => {
                    let sent = unix_ms();
                    match lease.renew_or_reclaim(&*dir).await {
                        Ok(Renewal::Renewed) => {
                            activation.set_lease(&lease);
                            events.commit(&room, lease.epoch(), sent, unix_ms(), "renew");
                        }
                        Ok(Renewal::Reclaimed { old }) => {
                            let epoch = lease.epoch();
                            tracing::warn!(room = %room, %old, new = %epoch,
                                "placement vanished (store lost its data?); room reclaimed");
                            metrics.placement("reclaimed");
                            events.activate(&room, epoch, &node);
                            activation.set_epoch(epoch);
                            activation.set_lease(&lease);
                            for (wallet, entity) in activation.members() {
                                if !lease.may_commit() {
                                    break;
                                }
                                let sent = unix_ms();
                                match register(wallet, entity, epoch).await {
                                    Ok(()) => events.commit(&room, epoch, sent, unix_ms(), "register"),
                                    Err(e) => metrics.directory_error(e.code()),
                                }
                            }
                        }
                        Err(e) if e.is_fenced() => {
                            tracing::error!(room = %room, error = %e, "placement lease lost; stopping the room");
                            metrics.placement("lease_lost");
                            actor.stop(Some("lease lost".into()));
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(room = %room, error = %e, "lease renew failed");
                            metrics.directory_error(e.code());
                            // Try again soon (each try is bounded by the directory's response
                            // timeout): a directory that comes back finds this room's renewal
                            // waiting, so the room resumes in place before anyone places it
                            // elsewhere.
                            renew.reset_after(period.min(RENEW_RETRY));
                        }
                    }
                    // Withheld or failed presence writes, now that the lease is confirmed. A
                    // release must not be lost: the renewal above keeps every entry of this room
                    // alive, so a lost one would be a ghost for as long as the room runs.
                    if !retry.is_empty() && lease.may_commit() {
                        let epoch = lease.epoch();
                        for (wallet, want) in std::mem::take(&mut retry) {
                            let sent = unix_ms();
                            let res = match want {
                                Some(entity) => register(wallet.clone(), entity, epoch).await,
                                None => match dir.presence_release(&wallet, Sources::ROOM, epoch).await {
                                    Ok(_) => Ok(()),
                                    Err(e) if e.code() == "not_found" => Ok(()),
                                    Err(e) => Err(e),
                                },
                            };
                            match res {
                                Ok(()) => events.commit(&room, epoch, sent, unix_ms(), "retry"),
                                Err(e) => {
                                    metrics.directory_error(e.code());
                                    if !e.is_fenced() {
                                        retry.insert(wallet, want);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        // The room is gone and its last presence writes are done: give the lease up.
        let epoch = lease.epoch();
        match lease.release(&*dir).await {
            Ok(()) => events.release(&room, epoch, &node),
            Err(e) => metrics.directory_error(e.code()),
        }
    });
    (tx, task)
}

/// The `Detach` that ends a session's stream with `reason` (never dropped, not a frame).
pub(crate) fn detach_message(reason: node::DetachReason, message: &str) -> NodeOutbound {
    NodeOutbound {
        body: Some(node_outbound::Body::Detach(node::Detach {
            reason: reason as i32,
            message: message.into(),
        })),
        droppable: false,
        keyframe: false,
    }
}

/// The float pose of a movement message; missing vectors are zero.
pub fn pose_from_movement(m: &pb::Movement) -> Pose {
    let v = |o: &Option<pb::Vec3>| o.as_ref().map_or([0.0; 3], |v| [v.x, v.y, v.z]);
    let head =
        (m.head_ik_yaw_enabled || m.head_ik_pitch_enabled).then_some([m.head_yaw, m.head_pitch]);
    Pose {
        position: v(&m.position),
        velocity: v(&m.velocity),
        yaw_deg: m.rotation_y,
        movement_kind: m.movement_kind.clamp(0, 3) as u8,
        anim_flags: (m.anim_flags & 0xffff) as u16,
        head,
        point_at: m.is_pointing_at.then(|| v(&m.point_at)),
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

/// Milliseconds since the Unix epoch (for `sent_at_ms` only; never for simulation time).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Restores the room from a handoff state written by the activation of epoch `writer`;
/// returns the handed-off members to wait for and the audit sequence number the room's log
/// stands at (the room's steps continue from the restored room time, [`Room::restore`]). A handoff that does not decode is logged and
/// skipped: the room starts fresh and resumed sessions join with the entity their gateway
/// remembers.
///
/// A checkpoint may be older than the writer's last audit records (it crashed between two
/// checkpoints): the audit log is the truth, so the consent records the writer appended after
/// the checkpoint are folded in first ([`crate::handoff::fold_audit`]) — a consent the audit
/// shows ended is not brought back — and a consent the audit shows open that the room cannot
/// restore (a party is not in the state) gets the record that ends it. If the log cannot be
/// read, no consent is brought back.
async fn restore_handoff(
    room: &mut Room,
    args: &RoomArgs,
    writer: Epoch,
    bytes: &[u8],
) -> (HashMap<SessionId, Awaited>, u64) {
    let h = match crate::handoff::decode(&args.room_id, bytes) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(room = %args.room_id, error = %e, "handoff state not usable; the room starts fresh");
            args.metrics.placement("handoff_unusable");
            return (HashMap::new(), 0);
        }
    };
    let Some(mut snap) = h.room else {
        return (HashMap::new(), h.audit_seq);
    };
    let last_audit_seq = match read_audit_after(args, h.audit_seq).await {
        Ok(records) => {
            let fold = crate::handoff::fold_audit(&mut snap, writer, h.audit_seq, &records);
            if fold.replayed > 0 {
                tracing::info!(room = %args.room_id, replayed = fold.replayed, ended = fold.ended,
                    changed = fold.changed, "audit records after the checkpoint folded into it");
            }
            fold.last_seq
        }
        Err(e) => {
            tracing::warn!(room = %args.room_id, error = %e,
                "audit log unreadable; the handoff state's consents are not brought back");
            args.metrics.directory_error(e.code());
            snap.consents.clear();
            h.audit_seq
        }
    };
    let sessions: Vec<SessionId> = snap.members.iter().map(|m| m.session).collect();
    let audited_open = snap.consents.clone();
    let dropped = room.restore(snap);
    if dropped > 0 {
        tracing::warn!(room = %args.room_id, dropped, "handoff state had inconsistent entries; they were dropped");
    }
    // Consents the audit shows open that the room could not keep: their closing records.
    let kept: std::collections::BTreeSet<u64> =
        room.save_state().consents.iter().map(|c| c.id).collect();
    let mut last_audit_seq = last_audit_seq;
    for c in audited_open.iter().filter(|c| !kept.contains(&c.id)) {
        let to = if c.state == plaza_room_core::consent::ConsentState::Active {
            "released"
        } else {
            "cancelled"
        };
        let detail = serde_json::json!({
            "consent_id": c.id,
            "kind": c.kind.as_str(),
            "requester": c.requester.entity,
            "requester_session": c.requester.session,
            "target": c.target.entity,
            "target_session": c.target.session,
            "from": c.state.as_str(),
            "to": to,
            "cause": "restore",
        })
        .to_string();
        let kind = format!("consent.{to}");
        let append =
            args.directory
                .audit_append(&args.room_id, args.epoch, &kind, &detail, unix_ms());
        match tokio::time::timeout(Duration::from_secs(2), append).await {
            Ok(Ok(seq)) => last_audit_seq = last_audit_seq.max(seq),
            Ok(Err(e)) => args.metrics.directory_error(e.code()),
            Err(_) => args.metrics.directory_error("timeout"),
        }
    }
    let deadline = Instant::now() + args.cfg.presence_ttl;
    let mut awaited = HashMap::new();
    for m in h.members {
        if m.session != 0 && room.entity_of(m.session) == Some(m.entity) {
            awaited.insert(
                m.session,
                Awaited {
                    wallet: m.wallet,
                    entity: m.entity,
                    deadline,
                },
            );
        }
    }
    // A restored member nobody can vouch for (no wallet) leaves at the first step.
    for session in sessions {
        if room.entity_of(session).is_some() && !awaited.contains_key(&session) {
            room.leave(session);
        }
    }
    tracing::info!(room = %args.room_id, members = awaited.len(), "room state restored from the handoff state");
    (awaited, last_audit_seq)
}

/// Most audit records read to bring a checkpoint up to date (pages of 1,000).
const MAX_AUDIT_REPLAY: usize = 20_000;

/// The room's audit records after `seq` (bounded by [`MAX_AUDIT_REPLAY`]; each read bounded
/// by 2 s).
async fn read_audit_after(
    args: &RoomArgs,
    seq: u64,
) -> Result<Vec<plaza_directory::AuditRecord>, plaza_directory::DirectoryError> {
    const PAGE: usize = 1_000;
    let mut out = Vec::new();
    let mut from = seq + 1;
    while out.len() < MAX_AUDIT_REPLAY {
        let read = args.directory.audit_read(&args.room_id, from, PAGE);
        let page = tokio::time::timeout(Duration::from_secs(2), read)
            .await
            .map_err(|_| {
                plaza_directory::DirectoryError::Unavailable("audit read timed out".into())
            })??;
        let n = page.len();
        if let Some(last) = page.last() {
            from = last.seq + 1;
        }
        out.extend(page);
        if n < PAGE {
            break;
        }
    }
    Ok(out)
}
