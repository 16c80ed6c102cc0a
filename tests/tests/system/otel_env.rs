//! OpenTelemetry by its conventions, as a user runs it: `plaza up` started as a process with
//! only `OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:PORT` exports the spans of a client join
//! to an OTLP/gRPC collector (a real `TraceService` server in this test), with the resource
//! attributes `service.name`, `service.version` and `service.instance.id`; with
//! `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` those show up in the resource.

use plaza_tests::otlp::{Collector, join_and_collect};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_endpoint_alone_makes_plaza_up_export_traces() {
    let (c, addr) = Collector::start().await;
    let spans = join_and_collect(
        "endpoint-only",
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))],
        &c,
    )
    .await;
    let s = spans
        .iter()
        .find(|s| s.span.name == "gateway.attach")
        .unwrap();
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
        spans.iter().any(|s| s.span.name == "node.attach"),
        "no node.attach span: {:?}",
        spans.iter().map(|s| &s.span.name).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_service_name_and_resource_attributes_are_honoured() {
    let (c, addr) = Collector::start().await;
    let spans = join_and_collect(
        "named",
        &[
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
    let s = spans
        .iter()
        .find(|s| s.span.name == "gateway.attach")
        .unwrap();
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
    let (c, addr) = Collector::start().await;
    let spans = join_and_collect(
        "quiet",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")),
            ("PLAZA__LOG__LEVEL", "warn".into()),
        ],
        &c,
    )
    .await;
    assert!(spans.iter().any(|s| s.span.name == "gateway.attach"));
}
