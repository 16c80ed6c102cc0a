//! With an OTLP endpoint configured, a join produces one trace spanning gateway and node.
//! The collector is a real OTLP/gRPC server in this test.
//!
//! Its own test binary, not a module of `system` (tests/tests/system/main.rs): it installs the
//! process-wide tracing subscriber and OpenTelemetry tracer provider
//! (`plaza_ops::telemetry::init`, once per process), which would then export the spans of every
//! other in-process test to this test's collector, where it finds spans by name.

use std::time::Duration;

use plaza_tests::otlp::Collector;
use plaza_tests::{Client, start_plaza, test_config, ws_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_is_one_trace_across_gateway_and_node() {
    let (collector, addr) = Collector::start().await;

    let mut cfg = test_config();
    cfg.telemetry.otlp_endpoint = format!("http://{addr}");
    cfg.log.level = "info".into();
    let telemetry = plaza_ops::telemetry::init(&cfg, "plaza-test").unwrap();
    let plaza = start_plaza(&cfg).await;
    let mut c = Client::connect(&ws_url(&plaza)).await.unwrap();
    c.join("traced").await.unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (gw, node) = loop {
        telemetry.flush();
        let gw = collector.find("gateway.attach");
        let node = collector.find("node.attach");
        if let (Some(g), Some(n)) = (gw, node) {
            break (g.span, n.span);
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("spans never exported; got {:?}", collector.names());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        gw.trace_id, node.trace_id,
        "one trace across gateway and node"
    );
    assert_eq!(
        node.parent_span_id, gw.span_id,
        "the node's span continues the gateway's"
    );
    plaza.shutdown().await;
    telemetry.shutdown();
}
