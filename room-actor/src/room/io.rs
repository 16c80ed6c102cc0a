//! The room actor's I/O adapters for its host: the session channel as an outlet, tokio's clock,
//! the ticker, the wall clock, the `Detach` message and the audit appends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use plaza_directory::SharedDirectory;
use plaza_node_proto::{self as node, NodeOutbound, node_outbound};
use ractor::{ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::host::{self, AuditRecord, Refused, RoomHost};
use super::{Activation, RoomMsg};

/// A link's outlet in the shell: the bounded channel to the session's gRPC stream.
impl host::Outlet for mpsc::Sender<NodeOutbound> {
    fn offer(&self, msg: NodeOutbound) -> Result<(), Refused> {
        self.try_send(msg).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Refused::Full,
            mpsc::error::TrySendError::Closed(_) => Refused::Closed,
        })
    }
}

/// The shell's clock: tokio's (paused in tests) since the activation started.
#[derive(Debug)]
pub(super) struct ShellClock {
    pub(super) started: Instant,
}

impl host::Clock for ShellClock {
    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn unix_ms(&self) -> u64 {
        unix_ms()
    }
}

/// Wakes the room at the times of the core's [`plaza_room_core::WakeGrid`]: every simulation
/// step and every broadcast, each on its own evenly spaced grid (so broadcasts go out every
/// 50 ms rather than alternating 40/60 ms on the 20 ms step grid), and every group slot while
/// `spread` says the room's frames are spread (the shell stores
/// [`plaza_room_core::Room::wakes_on_group_grid`] there after each tick). A late wake is not
/// repeated: the room catches up from the time.
pub(super) fn spawn_ticker(
    me: ActorRef<RoomMsg>,
    started: Instant,
    cfg: &plaza_room_core::RoomConfig,
    spread: Arc<AtomicBool>,
) -> JoinHandle<()> {
    let grid = plaza_room_core::WakeGrid::new(cfg);
    tokio::spawn(async move {
        let mut next = started + grid.next_after(Duration::ZERO, spread.load(Ordering::Relaxed));
        loop {
            tokio::time::sleep_until(next).await;
            let now = Instant::now();
            if me.cast(RoomMsg::Tick).is_err() {
                break;
            }
            let since = now.saturating_duration_since(started);
            next = started + grid.next_after(since, spread.load(Ordering::Relaxed));
        }
    })
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

/// Milliseconds since the Unix epoch (for `sent_at_ms` only; never for simulation time).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Appends `audits` to the directory in order, fenced by the activation's epoch; each append
/// bounded by 2 s. An append that fails or times out stops the room (its error).
pub(super) async fn append_audits(
    directory: &SharedDirectory,
    activation: &Activation,
    host: &mut RoomHost,
    audits: Vec<AuditRecord>,
) -> Result<(), ActorProcessingErr> {
    let room_id = host.room_id.clone();
    for a in audits {
        let append = directory.audit_append(
            &room_id,
            activation.epoch(),
            &a.kind,
            &a.detail_json,
            a.at_ms,
        );
        let metrics = &host.metrics;
        match tokio::time::timeout(Duration::from_secs(2), append).await {
            Ok(Ok(seq)) => {
                tracing::debug!(room = %room_id, local_seq = a.local_seq, seq, kind = a.kind, "audit appended");
                metrics.audit_appended.inc();
                host.audit_appended(seq);
            }
            Ok(Err(e)) => {
                metrics.directory_error(e.code());
                tracing::error!(room = %room_id, error = %e, "audit append failed; stopping the room");
                return Err(format!("audit append failed: {e}").into());
            }
            Err(_) => {
                metrics.directory_error("timeout");
                tracing::error!(room = %room_id, "audit append timed out; stopping the room");
                return Err("audit append timed out".into());
            }
        }
    }
    Ok(())
}
