//! Prometheus metrics of a gateway. Labels carry only bounded values (codes, reasons).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::close::CloseCode;

/// A bounded label value.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Label {
    /// The code or reason.
    pub reason: String,
}

/// The gateway's metrics; cheap to clone.
#[derive(Clone, Debug)]
pub struct GatewayMetrics {
    /// Open client sessions.
    pub sessions: Gauge,
    /// WebSocket payload bytes received from clients.
    pub bytes_in: Counter,
    /// WebSocket payload bytes sent to clients.
    pub bytes_out: Counter,
    /// Frames sent to clients.
    pub frames_out: Counter,
    /// Connections closed, by close code name.
    pub closes: Family<Label, Counter>,
    /// Client messages dropped, by reason.
    pub inputs_dropped: Family<Label, Counter>,
    /// Outbound queue overflows (slow clients).
    pub overflows: Counter,
    /// Resume events, by outcome.
    pub resumes: Family<Label, Counter>,
    /// Time to resume a session after its room stream broke.
    pub resume_seconds: Histogram,
    /// Sockets and sessions refused at the edge, by reason ([`crate::edge::EdgeRefusal`]).
    pub edge_refusals: Family<Label, Counter>,
    /// Sockets open now that have not negotiated.
    pub edge_preauth: Gauge,
    /// Sockets open now (every accepted socket).
    pub edge_connections: Gauge,
    /// Accepts that failed for lack of file descriptors (EMFILE/ENFILE).
    pub accept_emfile: Counter,
    /// Attaches to a node that failed in the TLS handshake (the node's certificate did not
    /// verify, or the node refused this gateway's client certificate).
    pub node_tls_failures: Counter,
}

/// Outcomes of resume events, pre-created so dashboards see zero series.
pub const RESUME_OUTCOMES: [&str; 8] = [
    "resumed",
    "reconnect",
    "node_stream",
    "draining",
    "stalled",
    "failed",
    "unknown_token",
    "identity_mismatch",
];

/// Reasons client messages are dropped, pre-created.
pub const DROP_REASONS: [&str; 7] = [
    "rate_limited",
    "not_joined",
    "replayed_sequence",
    "node_backlog",
    "too_large",
    "bad_frame",
    // Inputs that arrived while the session's room was moving (all but the latest movement).
    "room_moving",
];

impl Default for GatewayMetrics {
    fn default() -> Self {
        let m = Self::empty();
        for c in CloseCode::ALL {
            let _ = m.closes.get_or_create(&Label {
                reason: c.name().to_owned(),
            });
        }
        for r in RESUME_OUTCOMES {
            let _ = m.resumes.get_or_create(&Label {
                reason: r.to_owned(),
            });
        }
        for r in DROP_REASONS {
            let _ = m.inputs_dropped.get_or_create(&Label {
                reason: r.to_owned(),
            });
        }
        for r in crate::edge::EdgeRefusal::ALL {
            let _ = m.edge_refusals.get_or_create(&Label {
                reason: r.name().to_owned(),
            });
        }
        m
    }
}

impl GatewayMetrics {
    fn empty() -> Self {
        Self {
            sessions: Gauge::default(),
            bytes_in: Counter::default(),
            bytes_out: Counter::default(),
            frames_out: Counter::default(),
            closes: Family::default(),
            inputs_dropped: Family::default(),
            overflows: Counter::default(),
            resumes: Family::default(),
            resume_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            edge_refusals: Family::default(),
            edge_preauth: Gauge::default(),
            edge_connections: Gauge::default(),
            accept_emfile: Counter::default(),
            node_tls_failures: Counter::default(),
        }
    }

    /// Registers every metric in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("plaza_gateway");
        r.register("sessions", "Open client sessions", self.sessions.clone());
        r.register(
            "received_bytes",
            "WebSocket payload bytes received from clients",
            self.bytes_in.clone(),
        );
        r.register(
            "sent_bytes",
            "WebSocket payload bytes sent to clients",
            self.bytes_out.clone(),
        );
        r.register(
            "frames_sent",
            "Frames sent to clients",
            self.frames_out.clone(),
        );
        r.register(
            "closes",
            "Client connections closed, by close code",
            self.closes.clone(),
        );
        r.register(
            "inputs_dropped",
            "Client messages dropped, by reason",
            self.inputs_dropped.clone(),
        );
        r.register(
            "queue_overflows",
            "Outbound queue overflows (slow clients)",
            self.overflows.clone(),
        );
        r.register(
            "resumes",
            "Session resume events, by outcome",
            self.resumes.clone(),
        );
        r.register(
            "resume_duration_seconds",
            "Time to resume a session after its room stream broke",
            self.resume_seconds.clone(),
        );
        r.register(
            "edge_refusals",
            "Sockets and sessions refused at the edge, by reason",
            self.edge_refusals.clone(),
        );
        r.register(
            "edge_preauth_connections",
            "Client sockets open that have not negotiated yet",
            self.edge_preauth.clone(),
        );
        r.register(
            "edge_connections",
            "Client sockets open (every accepted socket)",
            self.edge_connections.clone(),
        );
        r.register(
            "accept_fd_exhausted",
            "Client accepts that failed for lack of file descriptors (EMFILE/ENFILE)",
            self.accept_emfile.clone(),
        );
        r.register(
            "node_tls_failures",
            "Attaches to a room node that failed in the TLS handshake (certificate not trusted \
             or refused)",
            self.node_tls_failures.clone(),
        );
    }

    /// Counts an edge refusal.
    pub fn edge_refused(&self, reason: &str) {
        self.edge_refusals
            .get_or_create(&Label {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts a close.
    pub fn close(&self, code: CloseCode) {
        self.closes
            .get_or_create(&Label {
                reason: code.name().to_owned(),
            })
            .inc();
    }

    /// Counts a dropped client message.
    pub fn dropped(&self, reason: &str) {
        self.inputs_dropped
            .get_or_create(&Label {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts a resume event.
    pub fn resume(&self, outcome: &str) {
        self.resumes
            .get_or_create(&Label {
                reason: outcome.to_owned(),
            })
            .inc();
    }
}
