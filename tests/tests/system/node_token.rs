//! Gateway ↔ node gRPC with a shared secret (`node.grpc_token`): a gateway that sends it serves
//! a join through a separate node; a caller without it (or with another) is refused
//! `UNAUTHENTICATED` by the node before any attach runs.

use std::sync::Arc;
use std::time::Duration;

use plaza_directory::MemoryDirectory;
use plaza_node_proto::NodeInbound;
use plaza_node_proto::room_host_client::RoomHostClient;
use plaza_ops::{Plaza, Roles};
use plaza_tests::{Client, test_config, ws_url};

async fn attach_code(addr: std::net::SocketAddr, token: Option<&str>) -> Option<tonic::Code> {
    let mut client = RoomHostClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut req = tonic::Request::new(futures_util::stream::pending::<NodeInbound>());
    if let Some(t) = token {
        req.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    match tokio::time::timeout(Duration::from_secs(2), client.attach(req)).await {
        Ok(Err(status)) => Some(status.code()),
        // Accepted (the node waits for the attach message) or still waiting for it.
        Ok(Ok(_)) | Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_takes_calls_only_with_the_cluster_token() {
    let dir: plaza_directory::SharedDirectory = Arc::new(MemoryDirectory::new());
    let mut cfg = test_config();
    cfg.node.grpc_token = "cluster-s3cret".into();
    let node = Plaza::start_with_directory(&cfg, Roles::Node, dir.clone())
        .await
        .unwrap();
    let gw = Plaza::start_with_directory(&cfg, Roles::Gateway, dir.clone())
        .await
        .unwrap();
    let addr = node.node_addr().unwrap();

    // The gateway sends the token: a client joins through it.
    let mut c = Client::connect(&ws_url(&gw)).await.unwrap();
    c.join("guarded").await.unwrap();
    c.close().await;

    // Without the token, or with another one, the node refuses the call itself.
    assert_eq!(
        attach_code(addr, None).await,
        Some(tonic::Code::Unauthenticated)
    );
    assert_eq!(
        attach_code(addr, Some("guess")).await,
        Some(tonic::Code::Unauthenticated)
    );
    assert_ne!(
        attach_code(addr, Some("cluster-s3cret")).await,
        Some(tonic::Code::Unauthenticated)
    );
    gw.shutdown().await;
    node.shutdown().await;
}
