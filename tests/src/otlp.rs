//! An OTLP/gRPC trace collector for the telemetry tests: a real `TraceService` server on a
//! loopback port (plain or TLS) that keeps every span it is sent, with the resource attributes
//! it came with.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;

use crate::Client;
use crate::cluster::wait_until;
use crate::up::PlazaUp;

/// One exported span and the resource attributes of its batch (string values as they are,
/// others in their debug form).
#[derive(Clone, Debug)]
pub struct Exported {
    /// The span.
    pub span: Span,
    /// The resource's attributes (`service.name`, …).
    pub resource: BTreeMap<String, String>,
}

/// The collector: clones share what it received.
#[derive(Clone, Default)]
pub struct Collector {
    spans: Arc<Mutex<Vec<Exported>>>,
}

impl Collector {
    /// Serves OTLP/gRPC over plain HTTP/2 on a free loopback port.
    pub async fn start() -> (Self, SocketAddr) {
        Self::serve(None).await
    }

    /// Serves OTLP/gRPC over TLS with the PEM certificate chain and key in these files.
    pub async fn start_tls(cert: &Path, key: &Path) -> (Self, SocketAddr) {
        let identity = tonic::transport::Identity::from_pem(
            std::fs::read(cert).expect("collector certificate"),
            std::fs::read(key).expect("collector key"),
        );
        Self::serve(Some(
            tonic::transport::ServerTlsConfig::new().identity(identity),
        ))
        .await
    }

    async fn serve(tls: Option<tonic::transport::ServerTlsConfig>) -> (Self, SocketAddr) {
        let collector = Self::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("bound address");
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).expect("collector TLS config");
        }
        let server = builder.add_service(TraceServiceServer::new(collector.clone()));
        tokio::spawn(async move {
            server
                .serve_with_incoming(incoming)
                .await
                .expect("collector serves");
        });
        (collector, addr)
    }

    /// Every span received so far, in order.
    pub fn spans(&self) -> Vec<Exported> {
        self.spans.lock().expect("collector lock").clone()
    }

    /// The names of the spans received so far, in order.
    pub fn names(&self) -> Vec<String> {
        let spans = self.spans.lock().expect("collector lock");
        spans.iter().map(|s| s.span.name.clone()).collect()
    }

    /// The first span received with this name.
    pub fn find(&self, name: &str) -> Option<Exported> {
        let spans = self.spans.lock().expect("collector lock");
        spans.iter().find(|s| s.span.name == name).cloned()
    }

    /// Whether a span of every name in `names` has been received.
    pub fn has_all(&self, names: &[&str]) -> bool {
        let spans = self.spans.lock().expect("collector lock");
        names
            .iter()
            .all(|n| spans.iter().any(|s| s.span.name == *n))
    }
}

/// Starts `plaza up` with `env` (see [`PlazaUp::start`]), joins a room through it, leaves, and
/// waits (bounded: 20 s) until `c` has the join's `session` and `gateway.attach` spans; returns
/// every span `c` got. Panics with the process's log otherwise.
///
/// The batch exporter sends every 5 s (`OTEL_BSP_SCHEDULE_DELAY`'s default): no shutdown, no
/// flush from outside; the spans must arrive while the process runs.
pub async fn join_and_collect(name: &str, env: &[(&str, String)], c: &Collector) -> Vec<Exported> {
    let log = std::env::temp_dir().join(format!("plaza-otel-{}-{name}.log", std::process::id()));
    let up = PlazaUp::start(log, env);
    up.wait_ready().await;
    let mut client = Client::connect(&up.url()).await.expect("connect");
    client.join("otel-room").await.expect("join");
    client
        .pump_for(Duration::from_millis(300))
        .await
        .expect("stay connected");
    client.close().await;
    let want = ["session", "gateway.attach"];
    let got = wait_until(Duration::from_secs(20), || async { c.has_all(&want) }).await;
    assert!(
        got.is_some(),
        "{name}: spans {want:?} never exported; got {:?}\n{}",
        c.names(),
        up.log_tail(30)
    );
    c.spans()
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().expect("collector lock");
        for rs in req.into_inner().resource_spans {
            let resource: BTreeMap<String, String> = rs
                .resource
                .map(|r| r.attributes)
                .unwrap_or_default()
                .into_iter()
                .map(|kv| {
                    let v = match kv.value.and_then(|v| v.value) {
                        Some(Value::StringValue(s)) => s,
                        Some(other) => format!("{other:?}"),
                        None => String::new(),
                    };
                    (kv.key, v)
                })
                .collect();
            for ss in rs.scope_spans {
                for span in ss.spans {
                    spans.push(Exported {
                        span,
                        resource: resource.clone(),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}
