//! Issue 12 item 4 end to end (one Plaza process, the shipped defaults, real WebSockets):
//!
//! * one client's `Expression` reaches the other as an `ExpressionFrame` state, clamped and
//!   quantized to 100 basis points, only while it changes, and its return to neutral too;
//!   `Joined.room.expression_hz` says the rate (60 Hz, capped at the 50 Hz tick);
//! * a blocked member hears nothing of the blocker's expressions;
//! * `plaza-load --expressions 10`: 50 bots in one room send (the done-when's count) expressions at 10 Hz through the gateway's own
//!   expression bucket (no rate-limit drops, no close), the others decode them, and the report
//!   shows the expression bytes per bot separately.

use std::collections::BTreeMap;
use std::time::Duration;

use plaza_proto::pb::{self, client_envelope, server_envelope};
use plaza_tests::{Client, start_plaza, test_config, ws_url};

/// Every `ExpressionFrame` `c` receives over `d`, folded into what it holds.
async fn pump_expressions(
    c: &mut Client,
    d: Duration,
    held: &mut BTreeMap<u32, (u32, u32)>,
) -> Vec<pb::ExpressionFrame> {
    let deadline = tokio::time::Instant::now() + d;
    let mut frames = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return frames;
        }
        let Ok(body) = tokio::time::timeout(left, c.recv()).await else {
            return frames;
        };
        if let Some(server_envelope::Body::Expressions(x)) = body.expect("connected") {
            if x.full {
                held.clear();
            }
            for s in &x.states {
                if s.expression_id == 0 && s.intensity_bp == 0 {
                    held.remove(&s.entity_id);
                } else {
                    held.insert(s.entity_id, (s.expression_id, s.intensity_bp));
                }
            }
            frames.push(x);
        }
    }
}

async fn express(c: &mut Client, id: u32, bp: u32) {
    c.send(client_envelope::Body::Expression(pb::Expression {
        expression_id: id,
        intensity_bp: bp,
    }))
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_sees_anothers_expression() {
    let plaza = start_plaza(&test_config()).await;
    let url = ws_url(&plaza);
    let mut a = Client::connect(&url).await.unwrap();
    a.join("faces").await.unwrap();
    let mut b = Client::connect(&url).await.unwrap();
    b.join("faces").await.unwrap();
    let room = b.joined.clone().unwrap().room.unwrap();
    assert_eq!(room.expression_hz, 50);
    let mut held = BTreeMap::new();
    // B sees A in its frames first.
    b.pump_for(Duration::from_millis(300)).await.unwrap();
    assert!(b.decoder().get(a.entity).is_some());

    express(&mut a, 5, 6789).await;
    let frames = pump_expressions(&mut b, Duration::from_millis(500), &mut held).await;
    assert_eq!(held.get(&a.entity), Some(&(5, 6800)), "{frames:?}");
    assert!(
        frames.len() <= 2,
        "one change, one message (and maybe the keyframe's full): {frames:?}"
    );
    // Out of range: clamped to 10,000.
    express(&mut a, 6, 99_999).await;
    pump_expressions(&mut b, Duration::from_millis(300), &mut held).await;
    assert_eq!(held.get(&a.entity), Some(&(6, 10_000)));
    // Back to neutral.
    express(&mut a, 0, 0).await;
    pump_expressions(&mut b, Duration::from_millis(300), &mut held).await;
    assert!(!held.contains_key(&a.entity), "{held:?}");
    assert!(a.errors.is_empty() && b.errors.is_empty());

    // B blocks A: A's expressions no longer reach B.
    b.send(client_envelope::Body::Block(pb::BlockAction {
        op: pb::BlockOp::Block as i32,
        target_entity: a.entity,
        target_wallet: String::new(),
    }))
    .await
    .unwrap();
    b.pump_for(Duration::from_millis(200)).await.unwrap();
    a.pump_for(Duration::from_millis(10)).await.unwrap();
    express(&mut a, 3, 3000).await;
    let frames = pump_expressions(&mut b, Duration::from_millis(400), &mut held).await;
    assert!(
        frames
            .iter()
            .all(|f| f.states.iter().all(|s| s.entity_id != a.entity)),
        "{frames:?}"
    );
    a.close().await;
    b.close().await;
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_bots_send_expressions_and_the_report_counts_their_bytes() {
    let plaza = start_plaza(&test_config()).await;
    const BOTS: usize = 50;
    let mut cfg = plaza_load::LoadConfig::new(ws_url(&plaza), BOTS);
    cfg.duration = Duration::from_secs(4);
    cfg.ramp = Some(Duration::from_millis(300));
    cfg.progress = false;
    cfg.expression_hz = 10;
    let report = plaza_load::run(cfg).await.unwrap();
    let s = report.summary();
    assert_eq!(report.bots_connected as usize, BOTS, "{s}");
    assert_eq!(report.bots_lost, 0, "{s}");
    assert_eq!(report.decode_errors, 0, "{s}");
    // About 50 bots × 10 Hz × ~3.5 s joined.
    assert!(report.expressions_sent > 1250, "{s}");
    assert!(
        report.error_codes.0.is_empty(),
        "no rate-limit refusals: {s}"
    );
    assert!(report.expression_states_received > 2500, "{s}");
    assert!(report.expression_down_bytes_total > 0, "{s}");
    assert!(report.expression_down_bytes_per_bot_per_s > 0.0, "{s}");
    assert!(
        report.expression_down_bytes_total < report.down_bytes_total,
        "{s}"
    );
    assert!(s.contains("expressions"), "{s}");
    plaza.shutdown().await;
}
