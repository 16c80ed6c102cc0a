//! Prometheus metrics of a room node.
//!
//! Names follow `plaza_<name>_<unit>`; labels never carry a wallet, session or entity id (only
//! bounded values such as a rejection reason).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A label with one bounded string value (a reason code).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// The reason code (e.g. `speed`).
    pub reason: String,
}

/// A label naming a placement/lifecycle event.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabel {
    /// The event (`activated`, `stopped`, `failed`, `claim_refused`, ...).
    pub event: String,
}

/// The node's metrics; cheap to clone (every field is an `Arc` inside).
#[derive(Clone, Debug)]
pub struct NodeMetrics {
    /// Wall time of one simulation step, seconds.
    pub tick_duration: Histogram,
    /// Steps skipped because a room fell further behind than the catch-up cap.
    pub tick_overruns: Counter,
    /// Rooms live on this node.
    pub rooms: Gauge,
    /// Sessions attached to rooms on this node.
    pub sessions: Gauge,
    /// Snapshot frames produced.
    pub frames_sent: Counter,
    /// Bytes of snapshot frames produced.
    pub frame_bytes: Counter,
    /// Keyframes produced.
    pub keyframes: Counter,
    /// Movement inputs rejected, by reason.
    pub inputs_rejected: Family<ReasonLabel, Counter>,
    /// Entity changes deferred by per-client bandwidth budgets.
    pub bandwidth_deferrals: Counter,
    /// Frames dropped because a session's outbound queue to the gateway was full.
    pub outbound_dropped: Counter,
    /// Room lifecycle and placement events.
    pub placement_events: Family<EventLabel, Counter>,
    /// Directory calls that failed, by error code.
    pub directory_errors: Family<ReasonLabel, Counter>,
    /// Consent audit records appended durably.
    pub audit_appended: Counter,
    /// Who-is-who events of the rooms, by kind ([`PEOPLE_EVENTS`]; never ids).
    pub people_events: Family<EventLabel, Counter>,
}

/// Kinds of [`NodeMetrics::people_events`], pre-created so dashboards see zero series:
/// server-made teleports, roster updates sent, blocks and unblocks that changed something, and
/// profile announcements by dedup outcome.
pub const PEOPLE_EVENTS: [&str; 6] = [
    "teleport",
    "roster_update",
    "block_change",
    "profile_superseded",
    "profile_merged",
    "profile_stale",
];

/// Placement and lifecycle events, pre-created so dashboards see zero series.
pub const PLACEMENT_EVENTS: [&str; 13] = [
    "activated",
    "stopped",
    "stopped_empty",
    "failed",
    "claim_refused",
    "lease_lost",
    "handed_off",
    "handoff_taken",
    "handoff_unusable",
    "handoff_member_expired",
    "ticks_withheld",
    "lease_lapsed",
    "checkpointed",
];

/// Directory error codes, pre-created.
pub const DIRECTORY_ERRORS: [&str; 6] = [
    "stale_epoch",
    "not_owner",
    "unavailable",
    "conflict",
    "invalid",
    "not_found",
];

impl Default for NodeMetrics {
    fn default() -> Self {
        let m = Self::empty();
        for r in plaza_room_core::RejectReason::ALL {
            let _ = m.inputs_rejected.get_or_create(&ReasonLabel {
                reason: r.code().to_owned(),
            });
        }
        for e in PLACEMENT_EVENTS {
            let _ = m.placement_events.get_or_create(&EventLabel {
                event: e.to_owned(),
            });
        }
        for e in DIRECTORY_ERRORS {
            let _ = m.directory_errors.get_or_create(&ReasonLabel {
                reason: e.to_owned(),
            });
        }
        for e in PEOPLE_EVENTS {
            let _ = m.people_events.get_or_create(&EventLabel {
                event: e.to_owned(),
            });
        }
        m
    }
}

impl NodeMetrics {
    fn empty() -> Self {
        Self {
            tick_duration: Histogram::new(exponential_buckets(0.000_05, 1.4, 24)),
            tick_overruns: Counter::default(),
            rooms: Gauge::default(),
            sessions: Gauge::default(),
            frames_sent: Counter::default(),
            frame_bytes: Counter::default(),
            keyframes: Counter::default(),
            inputs_rejected: Family::default(),
            bandwidth_deferrals: Counter::default(),
            outbound_dropped: Counter::default(),
            placement_events: Family::default(),
            directory_errors: Family::default(),
            audit_appended: Counter::default(),
            people_events: Family::default(),
        }
    }

    /// Registers every metric in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("plaza");
        r.register(
            "room_tick_duration_seconds",
            "Wall time of one room simulation step",
            self.tick_duration.clone(),
        );
        r.register(
            "room_tick_overruns",
            "Simulation steps skipped because a room fell behind more than the catch-up cap",
            self.tick_overruns.clone(),
        );
        r.register("rooms", "Rooms live on this node", self.rooms.clone());
        r.register(
            "node_sessions",
            "Sessions attached to rooms on this node",
            self.sessions.clone(),
        );
        r.register(
            "frames_sent",
            "Snapshot frames produced",
            self.frames_sent.clone(),
        );
        r.register(
            "frame_bytes",
            "Bytes of snapshot frames produced",
            self.frame_bytes.clone(),
        );
        r.register("keyframes", "Keyframes produced", self.keyframes.clone());
        r.register(
            "inputs_rejected",
            "Movement inputs rejected by the room, by reason",
            self.inputs_rejected.clone(),
        );
        r.register(
            "bandwidth_deferrals",
            "Entity changes deferred by per-client bandwidth budgets",
            self.bandwidth_deferrals.clone(),
        );
        r.register(
            "node_outbound_dropped",
            "Frames dropped because a session's queue to its gateway was full",
            self.outbound_dropped.clone(),
        );
        r.register(
            "placement_events",
            "Room lifecycle and placement events on this node",
            self.placement_events.clone(),
        );
        r.register(
            "audit_records",
            "Consent audit records appended durably",
            self.audit_appended.clone(),
        );
        r.register(
            "room_people_events",
            "Teleports, roster updates, block changes and profile announcements, by kind",
            self.people_events.clone(),
        );
        r.register(
            "directory_errors",
            "Directory calls that failed, by error code",
            self.directory_errors.clone(),
        );
    }

    /// Counts one placement/lifecycle event.
    pub fn placement(&self, event: &str) {
        self.placement_events
            .get_or_create(&EventLabel {
                event: event.to_owned(),
            })
            .inc();
    }

    /// Counts one directory error.
    pub fn directory_error(&self, code: &str) {
        self.directory_errors
            .get_or_create(&ReasonLabel {
                reason: code.to_owned(),
            })
            .inc();
    }
}
