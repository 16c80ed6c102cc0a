//! With an OTLP endpoint configured, a join produces one trace spanning gateway and node.
//! The collector is a real OTLP/gRPC server in this test.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use plaza_tests::{Client, start_plaza, test_config, ws_url};

#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for rs in req.into_inner().resource_spans {
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_is_one_trace_across_gateway_and_node() {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = TraceServiceServer::new(collector.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream_incoming(listener))
            .await
            .unwrap();
    });

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
        {
            let spans = collector.spans.lock().unwrap();
            let gw = spans.iter().find(|s| s.name == "gateway.attach").cloned();
            let node = spans.iter().find(|s| s.name == "node.attach").cloned();
            if let (Some(g), Some(n)) = (gw, node) {
                break (g, n);
            }
        }
        if tokio::time::Instant::now() >= deadline {
            let names: Vec<String> = collector
                .spans
                .lock()
                .unwrap()
                .iter()
                .map(|s| s.name.clone())
                .collect();
            panic!("spans never exported; got {names:?}");
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

fn tokio_stream_incoming(
    l: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(l, |l| async move {
        let r = l.accept().await.map(|(s, _)| s);
        Some((r, l))
    })
}
