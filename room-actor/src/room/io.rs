//! The room actor's I/O adapters for its host: the session channel as an outlet, tokio's clock,
//! the ticker, the wall clock, the `Detach` message and the audit appends.

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

/// Wakes the room at every simulation step and every broadcast, each on its own evenly spaced
/// grid, so broadcasts go out every 50 ms rather than alternating 40/60 ms on the 20 ms step
/// grid. A late wake is not repeated: the room catches up from the time.
pub(super) fn spawn_ticker(
    me: ActorRef<RoomMsg>,
    started: Instant,
    cfg: &plaza_room_core::RoomConfig,
) -> JoinHandle<()> {
    let step = Duration::from_secs_f64(1.0 / f64::from(cfg.tick_hz.max(1)));
    let bcast = Duration::from_secs_f64(1.0 / f64::from(cfg.broadcast_hz.max(1)));
    tokio::spawn(async move {
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
