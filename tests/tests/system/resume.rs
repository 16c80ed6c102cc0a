//! Sessions survive the loss of their gateway: the client reconnects with its resume token to
//! another gateway and gets its session, identity and entity back (REQUIREMENTS.md G4).

use std::sync::Arc;
use std::time::Duration;

use plaza_directory::MemoryDirectory;
use plaza_ops::{Plaza, Roles};
use plaza_proto::pb;
use plaza_tests::{Client, test_config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_through_another_gateway_with_its_entity() {
    let dir: plaza_directory::SharedDirectory = Arc::new(MemoryDirectory::new());
    let cfg = test_config();
    let node = Plaza::start_with_directory(&cfg, Roles::Node, dir.clone())
        .await
        .unwrap();
    let gw_a = Plaza::start_with_directory(&cfg, Roles::Gateway, dir.clone())
        .await
        .unwrap();
    let gw_b = Plaza::start_with_directory(&cfg, Roles::Gateway, dir.clone())
        .await
        .unwrap();
    let url_a = format!("ws://{}/v1/ws", gw_a.ws_addr().unwrap());
    let url_b = format!("ws://{}/v1/ws", gw_b.ws_addr().unwrap());

    let mut peer = Client::connect(&url_b).await.unwrap();
    let peer_entity = peer.join("lobby").await.unwrap();
    let mut c = Client::connect(&url_a).await.unwrap();
    let entity = c.join("lobby").await.unwrap();
    c.pump_for(Duration::from_millis(200)).await.unwrap();
    assert!(c.decoder().get(peer_entity).is_some());
    let (session, wallet, token) = (c.session_id, c.wallet.clone(), c.resume_token.clone());

    // Gateway A goes away: the client is told 1001 and keeps its token.
    let reader = tokio::spawn(async move { c.until_closed().await.unwrap() });
    gw_a.shutdown().await;
    assert_eq!(reader.await.unwrap().code, Some(1001));

    // Through gateway B, with the token: same session, same wallet, same room and entity.
    let mut c2 = Client::connect_raw(&url_b).await.unwrap();
    c2.negotiate(vec![pb::ProtocolVersion { major: 1, minor: 0 }], &token)
        .await
        .unwrap();
    assert_eq!(
        (c2.session_id, c2.wallet.as_str()),
        (session, wallet.as_str())
    );
    let entity2 = c2.wait_joined().await.unwrap();
    assert_eq!(entity2, entity, "the entity is kept");
    c2.pump_for(Duration::from_millis(200)).await.unwrap();
    assert!(
        c2.decoder().get(peer_entity).is_some(),
        "the room view is back"
    );
    assert_eq!(c2.frame_errors, 0);
    // A token is good once.
    let mut c3 = Client::connect_raw(&url_b).await.unwrap();
    c3.negotiate(vec![pb::ProtocolVersion { major: 1, minor: 0 }], &token)
        .await
        .unwrap();
    assert_ne!(c3.session_id, session, "a used token gives a fresh session");
    peer.pump_for(Duration::from_millis(50)).await.unwrap();
    gw_b.shutdown().await;
    node.shutdown().await;
}
