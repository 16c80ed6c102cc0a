//! A client that stops reading gets the latest state, not an ever-growing queue, and is
//! disconnected with 4006 (slow consumer) when it stays behind; the others see no gap.

use std::time::Duration;

use futures_util::StreamExt as _;
use plaza_tests::{Client, scrape_metrics, start_plaza, test_config, ws_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_disconnected_and_others_are_unaffected() {
    let mut cfg = test_config();
    cfg.room.tier = plaza_ops::config::CapacityTier::Stadium;
    cfg.gateway.outbound_queue = 4;
    cfg.gateway.slow_strikes = 2;
    cfg.gateway.socket_send_buffer = 4096;
    let plaza = start_plaza(&cfg).await;
    let url = ws_url(&plaza);
    let admin = plaza.admin_addr();

    // A crowd that moves, so frames carry real changes.
    let mut crowd = Vec::new();
    for _ in 0..30 {
        let mut c = Client::connect(&url).await.unwrap();
        c.join("slow").await.unwrap();
        crowd.push(c);
    }
    // The slow client: a tiny receive window, and it never reads after joining.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(1024).unwrap();
    let stream = socket.connect(plaza.ws_addr().unwrap()).await.unwrap();
    let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
    let (ws, _) = tokio_tungstenite::client_async(url.clone(), stream)
        .await
        .unwrap();
    let mut slow = Client::from_stream(ws);
    slow.negotiate(
        vec![plaza_proto::pb::ProtocolVersion { major: 1, minor: 0 }],
        "",
    )
    .await
    .unwrap();
    slow.join("slow").await.unwrap();

    let start = tokio::time::Instant::now();
    let mut t = 1.0;
    let closed = loop {
        t += 0.1;
        for c in crowd.iter_mut() {
            let s = c.spawn;
            let dx = (t as f32 * 3.0).sin() * 0.5;
            c.move_to([s[0] + dx, s[1], s[2]], t).await.unwrap();
        }
        for c in crowd.iter_mut() {
            c.pump_for(Duration::from_millis(5)).await.unwrap();
        }
        let body = scrape_metrics(admin).await.unwrap();
        if body.contains("plaza_gateway_closes_total{reason=\"slow_consumer\"} 1") {
            break true;
        }
        if start.elapsed() > Duration::from_secs(60) {
            break false;
        }
    };
    assert!(
        closed,
        "the slow client was disconnected with slow_consumer"
    );
    // Its queue overflowed (latest state, not a growing queue) before the disconnect.
    let body = scrape_metrics(admin).await.unwrap();
    assert!(
        !body.contains("plaza_gateway_queue_overflows_total 0"),
        "{body}"
    );
    // The others kept an unbroken chain throughout.
    let w = &mut crowd[0];
    w.pump_for(Duration::from_millis(300)).await.unwrap();
    assert_eq!(w.frame_errors, 0);
    for pair in w.frames.windows(2) {
        assert_eq!(pair[1].seq, pair[0].seq.wrapping_add(1));
    }
    // The slow client, when it finally reads, finds the close frame with code 4006 after at most
    // the bounded backlog.
    let mut code = None;
    while let Ok(Some(msg)) =
        tokio::time::timeout(Duration::from_secs(5), slow.ws_mut().next()).await
    {
        if let Ok(tokio_tungstenite::tungstenite::Message::Close(Some(f))) = msg {
            code = Some(u16::from(f.code));
            break;
        }
    }
    assert_eq!(code, Some(4006));
    plaza.shutdown().await;
}
