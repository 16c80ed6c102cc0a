//! The room actor: a ractor shell around one [`RoomHost`](host) and its [`plaza_room_core::Room`].
//!
//! The actor owns the room host, the ticker task that wakes it on the core's wake grid (steps,
//! broadcasts and, in a spread room, group slots: [`plaza_room_core::WakeGrid`]),
//! and the directory writer task. Every message is handed to the host (the node's decisions,
//! sans I/O: [`host`]); the actor executes what the host asks for: directory writes go to the
//! writer ([`writer`]), audit records are appended (awaited, in order) before the rest of a tick
//! is delivered, and the actor stops when the host says so. On each wake the host calls
//! [`plaza_room_core::Room::advance`] with the time since the activation started (at most
//! `max_catch_up` steps; the rest are counted as overruns and skipped). The actor stops itself
//! after it has been empty for the grace period; its supervisor ([`crate::supervisor`]) then
//! forgets it.
//!
//! Sending to a session never blocks the room: the channel to the gRPC stream is bounded, a full
//! channel drops the frame and asks the room for a keyframe for that session, so a slow gateway
//! gets the latest state instead of an ever-growing queue.
//!
//! # Layout
//! * [`args`]: [`RoomActorConfig`], [`RoomArgs`], [`RoomMsg`].
//! * [`host`]: [`RoomHost`](host), the node's decisions about one room, sans I/O.
//! * [`admin`]: operator calls and the client protocol's moderator messages.
//! * [`activation`]: [`Activation`], shared with the writer and the supervisor.
//! * [`writer`]: the directory writer task.
//! * [`restore`]: restoring from the previous activation's handoff state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use plaza_directory::SharedDirectory;
use plaza_room_core::{Due, Room};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::EventLog;
use host::{Attach, Batch, PresenceOp, RoomHost};

pub mod activation;
pub mod admin;
mod args;
pub(crate) mod host;
mod io;
mod restore;
mod writer;

pub use activation::Activation;
pub use args::{DEFAULT_CHECKPOINT_INTERVAL, RoomActorConfig, RoomArgs, RoomMsg};
pub(crate) use io::detach_message;
pub use io::unix_ms;

/// The room actor (behaviour only; state is [`RoomState`]).
#[derive(Debug)]
pub struct RoomActor;

/// A room actor's state: the host and the I/O around it.
pub struct RoomState {
    host: RoomHost,
    /// The room's tracing span (room id and epoch): ticks and inputs run inside it.
    span: tracing::Span,
    ticker: JoinHandle<()>,
    /// Whether the ticker wakes the room on the group grid (set after each tick from
    /// [`Room::wakes_on_group_grid`]).
    spread: Arc<AtomicBool>,
    presence: mpsc::UnboundedSender<PresenceOp>,
    /// The directory writer task: it ends after the room's last presence write, releasing the
    /// lease; the room's stop waits for it (bounded), so a draining node does not exit holding
    /// leases the next activation would have to wait out.
    writer: Option<JoinHandle<()>>,
    /// For durable audit appends (fenced by the activation's current epoch; the store refuses
    /// an epoch whose lease is not live).
    directory: SharedDirectory,
    activation: Arc<Activation>,
    /// Where activations and commits are logged: broadcasts are logged as commits at most once
    /// a second (and always the first after a gap), so the single-activation checker sees them.
    events: EventLog,
    last_logged_broadcast: Option<Instant>,
    /// Test mode: authoritative poses per step (`PLAZA_RECORD_POSES`, [`crate::record`]).
    poses: Option<crate::record::PoseRecorder>,
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
        let spread = Arc::new(AtomicBool::new(false));
        let ticker = io::spawn_ticker(myself.clone(), started, &args.cfg.room, spread.clone());
        let (presence, writer) = writer::spawn_directory_writer(writer::DirectoryWriter {
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
        // A root span: a long-lived child would keep the span that spawned the room (a join's
        // attach span) open, and its trace would never be exported.
        let span =
            tracing::info_span!(parent: None, "room", room = %args.room_id, epoch = %args.epoch);
        let (directory, activation, events) = (
            args.directory.clone(),
            args.activation.clone(),
            args.events.clone(),
        );
        let host = restore::new_host(args, started).await;
        Ok(RoomState {
            host,
            span,
            ticker,
            spread,
            presence,
            writer: Some(writer),
            directory,
            activation,
            events,
            last_logged_broadcast: None,
            poses: crate::record::PoseRecorder::from_env(),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<RoomMsg>,
        state: &mut RoomState,
    ) -> Result<(), ActorProcessingErr> {
        state.ticker.abort();
        state.host.metrics.rooms.dec();
        // Release the presence of everyone still here; the writer task drains then exits.
        let n = state.host.release_all();
        state.host.metrics.sessions.dec_by(n as i64);
        state.flush_writes();
        // Close the writer's queue and wait (bounded) until it has written the releases and
        // given the lease up, so the room's next activation need not wait for the lease to lapse.
        state.presence = mpsc::unbounded_channel().0;
        if let Some(writer) = state.writer.take() {
            let grace = Duration::from_secs(3);
            if tokio::time::timeout(grace, writer).await.is_err() {
                tracing::warn!(room = %state.host.room_id, "directory writer still busy after the room stopped");
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
        let host = &mut state.host;
        match msg {
            RoomMsg::Join { .. } | RoomMsg::Input { .. } | RoomMsg::Tick if host.frozen => {
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
            } => host.on_attach(Attach {
                session,
                wallet,
                tx: Box::new(tx),
                entity,
                link_id,
                operator,
            }),
            RoomMsg::Input { session, envelope } => {
                let span = state.span.clone();
                span.in_scope(|| host.on_envelope(session, envelope));
            }
            RoomMsg::KeyframeNeeded { session } => host.on_keyframe_needed(session),
            RoomMsg::Detach { session, link_id } => host.on_detach(session, link_id),
            RoomMsg::Tick => {
                let span = state.span.clone();
                state.tick(Due::Scheduled).instrument(span).await?;
                state.host.after_tick();
            }
            RoomMsg::Handoff(reply) => {
                if !host.frozen {
                    if state.activation.may_commit() {
                        let span = state.span.clone();
                        state.tick(Due::Final).instrument(span).await?;
                    }
                    state.host.frozen = true;
                    // No checkpoint written after this one may replace the handoff state.
                    state.activation.freeze();
                }
                let _ = reply.send(state.host.handoff_bytes());
            }
            RoomMsg::Admin(call) => host.on_admin(call),
            #[cfg(feature = "test-util")]
            RoomMsg::Panic => panic!("test hook: room {} panics", host.room_id),
        }
        state.flush_writes();
        if let Some(reason) = state.host.take_stop() {
            myself.stop(Some(reason.into()));
        }
        Ok(())
    }
}

impl std::fmt::Debug for RoomState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoomState")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

// === impl RoomState ===

impl RoomState {
    /// Hands the host's directory writes to the writer, in order.
    fn flush_writes(&mut self) {
        for op in self.host.take_writes() {
            let _ = self.presence.send(op);
        }
    }

    /// One tick of the host, delivered: its audit records appended (in order, fenced by the
    /// epoch) before anything after them in the batch.
    ///
    /// Performance: runs every tick.
    async fn tick(&mut self, due: Due) -> Result<(), ActorProcessingErr> {
        let t0 = std::time::Instant::now();
        let (poses, room_id) = (&mut self.poses, &self.host.room_id.clone());
        let mut on_step = |room: &Room, now_ms: u64, sessions: &mut dyn Iterator<Item = _>| {
            if let Some(rec) = poses.as_mut() {
                rec.room_step(room_id, room, now_ms, sessions);
            }
        };
        let batch = self.host.tick(due, &mut on_step);
        self.spread
            .store(self.host.room.wakes_on_group_grid(), Ordering::Relaxed);
        if let Some(rec) = self.poses.as_mut() {
            rec.flush();
        }
        if self.host.ran_last_tick() {
            self.host.record_tick_duration(t0.elapsed().as_secs_f64());
        }
        let Some(batch) = batch else {
            return Ok(());
        };
        self.deliver(batch).await
    }

    async fn deliver(&mut self, mut batch: Batch) -> Result<(), ActorProcessingErr> {
        loop {
            let audits = self.host.deliver_until_audits(&mut batch);
            self.flush_writes();
            if audits.is_empty() {
                break;
            }
            io::append_audits(&self.directory, &self.activation, &mut self.host, audits).await?;
        }
        if let Some(checked_ms) = self.host.finish(batch) {
            self.log_broadcast(checked_ms);
        }
        Ok(())
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
                &self.host.room_id,
                self.activation.epoch(),
                checked_ms,
                unix_ms(),
                "broadcast",
            );
            self.last_logged_broadcast = Some(now);
        }
    }
}
