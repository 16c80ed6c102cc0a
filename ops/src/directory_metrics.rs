//! Directory operation latency: [`InstrumentedDirectory`] wraps any [`Directory`] and times
//! every call into `plaza_directory_operation_duration_seconds{operation}`, counting failures
//! by operation and error code in `plaza_directory_operation_errors_total{operation, code}`.
//!
//! It changes no semantics (every call is passed through as is); its labels are the closed set
//! [`OPERATIONS`] and the directory's stable error codes.

use std::future::Future;
use std::time::Instant;

use plaza_directory::{
    AnnounceOutcome, AuditRecord, Directory, DirectoryError, Epoch, NodeInfo, Placement,
    PresenceEntry, SharedDirectory, Sources,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Every operation label, in [`Directory`] order (pre-created so dashboards see zero series).
pub const OPERATIONS: [&str; 29] = [
    "register_node",
    "deregister_node",
    "live_nodes",
    "resolve",
    "place",
    "claim",
    "renew",
    "release",
    "check_epoch",
    "presence_register",
    "presence_add_source",
    "presence_release",
    "presence_renew",
    "presence_get",
    "presence_by_entity",
    "peers",
    "sweep",
    "announce_profile",
    "audit_append",
    "audit_read",
    "put_handoff",
    "take_handoff",
    "put_resume",
    "take_resume",
    "claim_once",
    "renew_room",
    "put_resume_held",
    "renew_resume_holder",
    "take_resume_held",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrLabel {
    operation: &'static str,
    code: &'static str,
}

/// The directory metrics; cheap to clone.
#[derive(Clone, Debug)]
pub struct DirectoryMetrics {
    duration: Family<OpLabel, Histogram>,
    errors: Family<ErrLabel, Counter>,
}

impl Default for DirectoryMetrics {
    fn default() -> Self {
        // 100 µs .. ~3.3 s: an in-memory call is microseconds, a Redis round trip a millisecond,
        // a Redis that hangs shows in the top buckets.
        let duration = Family::<OpLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 16))
        });
        let errors = Family::<ErrLabel, Counter>::default();
        for operation in OPERATIONS {
            let _ = duration.get_or_create(&OpLabel { operation });
            // Redis down is the failure operators watch for: zero series from the start.
            let _ = errors.get_or_create(&ErrLabel {
                operation,
                code: "unavailable",
            });
        }
        Self { duration, errors }
    }
}

impl DirectoryMetrics {
    /// Registers the families.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "plaza_directory_operation_duration_seconds",
            "Time of one directory call, by operation",
            self.duration.clone(),
        );
        registry.register(
            "plaza_directory_operation_errors",
            "Directory calls that failed, by operation and error code",
            self.errors.clone(),
        );
    }
}

/// A [`Directory`] that times every call of the one it wraps.
pub struct InstrumentedDirectory {
    inner: SharedDirectory,
    metrics: DirectoryMetrics,
}

impl std::fmt::Debug for InstrumentedDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstrumentedDirectory")
            .finish_non_exhaustive()
    }
}

impl InstrumentedDirectory {
    /// Wraps `inner`.
    pub fn new(inner: SharedDirectory, metrics: DirectoryMetrics) -> Self {
        Self { inner, metrics }
    }

    async fn time<T>(
        &self,
        op: usize,
        call: impl Future<Output = Result<T, DirectoryError>>,
    ) -> Result<T, DirectoryError> {
        let operation = OPERATIONS[op];
        let start = Instant::now();
        let out = call.await;
        self.metrics
            .duration
            .get_or_create(&OpLabel { operation })
            .observe(start.elapsed().as_secs_f64());
        if let Err(e) = &out {
            self.metrics
                .errors
                .get_or_create(&ErrLabel {
                    operation,
                    code: e.code(),
                })
                .inc();
        }
        out
    }
}

#[async_trait::async_trait]
impl Directory for InstrumentedDirectory {
    async fn register_node(&self, info: NodeInfo, ttl_ms: u64) -> Result<(), DirectoryError> {
        self.time(0, self.inner.register_node(info, ttl_ms)).await
    }
    async fn deregister_node(&self, id: &str) -> Result<(), DirectoryError> {
        self.time(1, self.inner.deregister_node(id)).await
    }
    async fn live_nodes(&self) -> Result<Vec<NodeInfo>, DirectoryError> {
        self.time(2, self.inner.live_nodes()).await
    }
    async fn resolve(&self, room: &str) -> Result<Option<Placement>, DirectoryError> {
        self.time(3, self.inner.resolve(room)).await
    }
    async fn place(&self, room: &str) -> Result<NodeInfo, DirectoryError> {
        self.time(4, self.inner.place(room)).await
    }
    async fn claim(
        &self,
        room: &str,
        node: &str,
        ttl_ms: u64,
    ) -> Result<Placement, DirectoryError> {
        self.time(5, self.inner.claim(room, node, ttl_ms)).await
    }
    async fn renew(
        &self,
        room: &str,
        node: &str,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<Placement, DirectoryError> {
        self.time(6, self.inner.renew(room, node, epoch, ttl_ms))
            .await
    }
    async fn release(&self, room: &str, node: &str, epoch: Epoch) -> Result<(), DirectoryError> {
        self.time(7, self.inner.release(room, node, epoch)).await
    }
    async fn check_epoch(&self, room: &str, epoch: Epoch) -> Result<(), DirectoryError> {
        self.time(8, self.inner.check_epoch(room, epoch)).await
    }
    async fn presence_register(
        &self,
        entry: PresenceEntry,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        self.time(9, self.inner.presence_register(entry, epoch, ttl_ms))
            .await
    }
    async fn presence_add_source(
        &self,
        wallet: &str,
        source: Sources,
        epoch: Epoch,
    ) -> Result<(), DirectoryError> {
        self.time(10, self.inner.presence_add_source(wallet, source, epoch))
            .await
    }
    async fn presence_release(
        &self,
        wallet: &str,
        source: Sources,
        epoch: Epoch,
    ) -> Result<bool, DirectoryError> {
        self.time(11, self.inner.presence_release(wallet, source, epoch))
            .await
    }
    async fn presence_renew(
        &self,
        node: &str,
        room: &str,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<u32, DirectoryError> {
        self.time(12, self.inner.presence_renew(node, room, epoch, ttl_ms))
            .await
    }
    async fn presence_get(&self, wallet: &str) -> Result<Option<PresenceEntry>, DirectoryError> {
        self.time(13, self.inner.presence_get(wallet)).await
    }
    async fn presence_by_entity(
        &self,
        room: &str,
        entity: u32,
    ) -> Result<Option<PresenceEntry>, DirectoryError> {
        self.time(14, self.inner.presence_by_entity(room, entity))
            .await
    }
    async fn peers(&self, filter: Option<&[String]>) -> Result<Vec<PresenceEntry>, DirectoryError> {
        self.time(15, self.inner.peers(filter)).await
    }
    async fn sweep(&self) -> Result<u32, DirectoryError> {
        self.time(16, self.inner.sweep()).await
    }
    async fn announce_profile(
        &self,
        wallet: &str,
        version: u64,
        source: Sources,
    ) -> Result<AnnounceOutcome, DirectoryError> {
        self.time(17, self.inner.announce_profile(wallet, version, source))
            .await
    }
    async fn audit_append(
        &self,
        room: &str,
        epoch: Epoch,
        kind: &str,
        detail: &str,
        at_ms: u64,
    ) -> Result<u64, DirectoryError> {
        self.time(
            18,
            self.inner.audit_append(room, epoch, kind, detail, at_ms),
        )
        .await
    }
    async fn audit_read(
        &self,
        room: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, DirectoryError> {
        self.time(19, self.inner.audit_read(room, from_seq, limit))
            .await
    }
    async fn put_handoff(
        &self,
        room: &str,
        epoch: Epoch,
        state: Vec<u8>,
    ) -> Result<(), DirectoryError> {
        self.time(20, self.inner.put_handoff(room, epoch, state))
            .await
    }
    async fn take_handoff(&self, room: &str) -> Result<Option<(Epoch, Vec<u8>)>, DirectoryError> {
        self.time(21, self.inner.take_handoff(room)).await
    }
    async fn put_resume(
        &self,
        token: &str,
        entry: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        self.time(22, self.inner.put_resume(token, entry, ttl_ms))
            .await
    }
    async fn take_resume(&self, token: &str) -> Result<Option<Vec<u8>>, DirectoryError> {
        self.time(23, self.inner.take_resume(token)).await
    }
    async fn claim_once(&self, key: &str, ttl_ms: u64) -> Result<bool, DirectoryError> {
        self.time(24, self.inner.claim_once(key, ttl_ms)).await
    }
    async fn renew_room(
        &self,
        room: &str,
        node: &str,
        epoch: Epoch,
        ttl_ms: u64,
        presence_ttl_ms: u64,
    ) -> Result<(Placement, u32), DirectoryError> {
        self.time(
            25,
            self.inner
                .renew_room(room, node, epoch, ttl_ms, presence_ttl_ms),
        )
        .await
    }
    async fn put_resume_held(
        &self,
        holder: &str,
        token: &str,
        entry: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        self.time(26, self.inner.put_resume_held(holder, token, entry, ttl_ms))
            .await
    }
    async fn renew_resume_holder(&self, holder: &str, ttl_ms: u64) -> Result<(), DirectoryError> {
        self.time(27, self.inner.renew_resume_holder(holder, ttl_ms))
            .await
    }
    async fn take_resume_held(
        &self,
        holder: &str,
        token: &str,
    ) -> Result<Option<Vec<u8>>, DirectoryError> {
        self.time(28, self.inner.take_resume_held(holder, token))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use plaza_directory::MemoryDirectory;

    use super::*;

    #[tokio::test]
    async fn calls_are_timed_by_operation_and_failures_counted_by_code() {
        let metrics = DirectoryMetrics::default();
        let dir = InstrumentedDirectory::new(Arc::new(MemoryDirectory::new()), metrics.clone());
        dir.live_nodes().await.unwrap();
        dir.live_nodes().await.unwrap();
        // An empty room id is refused by every backend.
        assert!(dir.resolve("").await.is_err());
        let mut r = Registry::default();
        metrics.register(&mut r);
        let text = crate::metrics::encode(&r, crate::metrics::Format::Classic).unwrap();
        assert!(
            text.contains(
                "plaza_directory_operation_duration_seconds_count{operation=\"live_nodes\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "plaza_directory_operation_errors_total{operation=\"resolve\",code=\"invalid\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("operation=\"take_resume\""),
            "pre-created: {text}"
        );
    }
}
