//! OpenTelemetry by its conventions, as a user runs it: `plaza up` started as a process with
//! only `OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:PORT` exports the spans of a client join
//! to an OTLP/gRPC collector (a real `TraceService` server in this test), with the resource
//! attributes `service.name`, `service.version` and `service.instance.id`; with
//! `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` those show up in the resource.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use plaza_tests::cluster::{free_port, plaza_bin, wait_until};
use plaza_tests::{Client, http_get};

/// One exported span: its name and the resource attributes it came with.
#[derive(Clone, Debug)]
struct Got {
    name: String,
    resource: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Got>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
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
                for s in ss.spans {
                    spans.push(Got {
                        name: s.name,
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

async fn start_collector() -> (Collector, SocketAddr) {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = TraceServiceServer::new(collector.clone());
    let incoming = futures_util::stream::unfold(listener, |l| async move {
        let r = l.accept().await.map(|(s, _)| s);
        Some((r, l))
    });
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(incoming)
            .await
            .unwrap();
    });
    (collector, addr)
}

struct Up {
    child: Child,
    ws: SocketAddr,
    admin: SocketAddr,
    log: std::path::PathBuf,
}

impl Up {
    fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `plaza up` with a clean environment (no `OTEL_*`, no `PLAZA__*`) plus `env`.
fn plaza_up(bin: &Path, name: &str, env: &[(&str, String)]) -> Up {
    let ws: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let log = std::env::temp_dir().join(format!("plaza-otel-{}-{name}.log", std::process::id()));
    let out = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(bin);
    cmd.args(["up", "--listen", &ws.to_string()])
        .args(["--admin-listen", &admin.to_string()]);
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_") || k.starts_with("PLAZA__") || k == "RUST_LOG" {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    Up {
        child,
        ws,
        admin,
        log,
    }
}

/// Starts `plaza up` with `env`, joins a room, leaves, and returns the spans the collector got
/// (waiting, bounded, for the `session` and `gateway.attach` spans of that join).
async fn join_and_collect(name: &str, env: Vec<(&str, String)>, c: &Collector) -> Vec<Got> {
    let bin = plaza_bin().unwrap();
    let up = plaza_up(&bin, name, &env);
    let ready = wait_until(Duration::from_secs(30), || async {
        matches!(http_get(up.admin, "/readyz").await, Ok((200, _)))
    })
    .await;
    assert!(ready.is_some(), "plaza up never ready:\n{}", up.log_tail());
    let mut client = Client::connect(&format!("ws://{}/v1/ws", up.ws))
        .await
        .unwrap();
    client.join("otel-room").await.unwrap();
    client.pump_for(Duration::from_millis(300)).await.unwrap();
    client.close().await;
    // The batch exporter sends every 5 s (OTEL_BSP_SCHEDULE_DELAY's default): no shutdown,
    // no flush from outside; the spans must arrive while the process runs.
    let want = ["session", "gateway.attach"];
    let got = wait_until(Duration::from_secs(20), || async {
        let spans = c.spans.lock().unwrap();
        want.iter().all(|w| spans.iter().any(|s| s.name == *w))
    })
    .await;
    let spans = c.spans.lock().unwrap().clone();
    assert!(
        got.is_some(),
        "{name}: spans {want:?} never exported; got {:?}\n{}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>(),
        up.log_tail()
    );
    spans
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_endpoint_alone_makes_plaza_up_export_traces() {
    let (c, addr) = start_collector().await;
    let spans = join_and_collect(
        "endpoint-only",
        vec![("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))],
        &c,
    )
    .await;
    let s = spans.iter().find(|s| s.name == "gateway.attach").unwrap();
    assert_eq!(
        s.resource.get("service.name").map(String::as_str),
        Some("plaza")
    );
    assert_eq!(
        s.resource.get("service.version").map(String::as_str),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let id = s
        .resource
        .get("service.instance.id")
        .cloned()
        .unwrap_or_default();
    assert!(!id.is_empty(), "no service.instance.id: {:?}", s.resource);
    // The room actor's own span is exported too: spans are made in every role of the process.
    assert!(
        spans.iter().any(|s| s.name == "node.attach"),
        "no node.attach span: {:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_service_name_and_resource_attributes_are_honoured() {
    let (c, addr) = start_collector().await;
    let spans = join_and_collect(
        "named",
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")),
            ("OTEL_SERVICE_NAME", "plaza-edge".into()),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=staging,service.instance.id=pod-7,team=a%2Cb".into(),
            ),
        ],
        &c,
    )
    .await;
    let s = spans.iter().find(|s| s.name == "gateway.attach").unwrap();
    let r = &s.resource;
    assert_eq!(
        r.get("service.name").map(String::as_str),
        Some("plaza-edge")
    );
    assert_eq!(
        r.get("service.version").map(String::as_str),
        Some(env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        r.get("service.instance.id").map(String::as_str),
        Some("pod-7")
    );
    assert_eq!(
        r.get("deployment.environment").map(String::as_str),
        Some("staging")
    );
    assert_eq!(r.get("team").map(String::as_str), Some("a,b"));
}

/// Traces follow the sampler, not the log filter: a process that logs only warnings still
/// exports the spans of a join.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_log_level_does_not_turn_traces_off() {
    let (c, addr) = start_collector().await;
    let spans = join_and_collect(
        "quiet",
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")),
            ("PLAZA__LOG__LEVEL", "warn".into()),
        ],
        &c,
    )
    .await;
    assert!(spans.iter().any(|s| s.name == "gateway.attach"));
}
