//! Reliability row F10: client links with 50 ms delay each way, 30 ms jitter and 5 % loss.
//!
//! This kernel has no `netem` qdisc, so every client reaches an in-process Plaza's gateway
//! through the emulated-link TCP proxy of `plaza-felt` ([`plaza_felt::proxy`], shared with its
//! observers): each chunk is released `rtt/2 ± jitter/2` after it was read, in order (TCP keeps
//! order), and 5 % of chunks stall their direction for one retransmission timeout
//! (`max(200 ms, rtt + 4 × jitter)` = 220 ms), as a lost TCP segment does.
//!
//! Twelve clients walk circles at 20 Hz for 8 s, reading their frames as they go, then stop.
//! Asserted: no resync storm — no client asks for a resync (no decode error, no chain break)
//! and each receives at most 2 keyframes (its join's, and at most one more); the gateway's
//! queue overflowed for none and the node produced no more keyframes than that; every client's
//! decoded view converges on the server's own state (every other avatar at the position the
//! room holds for it, `Rooms::inspect`, within quantization) within 2 s of the last move; no
//! movement was corrected; every ping is answered.

use std::time::Duration;

use plaza_felt::proxy::{Link, Proxy};
use plaza_load::prom::parse_sample;
use plaza_proto::pb;
use plaza_proto::pb::server_envelope::Body;
use plaza_proto::quant::POSITION_ERROR_M;
use plaza_tests::{Client, scrape_metrics, start_plaza, test_config};
use tokio::time::Instant;

const CLIENTS: usize = 12;
const ROOM: &str = "f10";
const WALK: Duration = Duration::from_secs(8);
const INPUT_PERIOD: Duration = Duration::from_millis(50);

/// The point of a circle of radius 0.4 m through `spawn` at angle `a` (0 = the spawn).
fn on_circle(spawn: [f32; 3], a: f32) -> [f32; 3] {
    let r = 0.4;
    [spawn[0] + r * a.sin(), spawn[1], spawn[2] - r + r * a.cos()]
}

/// What one client counted over the run.
#[derive(Debug)]
struct Seen {
    keyframes: usize,
    frames: usize,
    pongs: u32,
    pings: u32,
}

/// Walks `c` for [`WALK`], sending a movement every [`INPUT_PERIOD`] and a ping every second,
/// reading frames in between; returns the last position sent.
async fn walk(c: &mut Client, i: usize, start: Instant) -> anyhow::Result<([f32; 3], u32, u32)> {
    let spawn = c.spawn;
    // Each client at its own speed and direction (0.3..0.5 rad/s × 0.4 m: well under v_max).
    let w = (0.3 + 0.02 * i as f32) * if i.is_multiple_of(2) { 1.0 } else { -1.0 };
    let (mut pings, mut pongs) = (0u32, 0u32);
    let mut next_move = Instant::now();
    let mut next_ping = Instant::now();
    let mut last = spawn;
    loop {
        let now = Instant::now();
        if now >= start + WALK {
            return Ok((last, pings, pongs));
        }
        if now >= next_move {
            let t = now.duration_since(start).as_secs_f64();
            last = on_circle(spawn, w * t as f32);
            c.move_to(last, 1.0 + t).await?;
            next_move += INPUT_PERIOD;
        }
        if now >= next_ping {
            pings += 1;
            c.send(pb::client_envelope::Body::Ping(pb::Ping {
                client_time_ms: u64::from(pings),
            }))
            .await?;
            next_ping += Duration::from_secs(1);
        }
        let until = next_move.min(next_ping);
        if let Ok(got) = tokio::time::timeout_at(until, c.recv()).await {
            match got? {
                Some(Body::Pong(_)) => pongs += 1,
                Some(_) => {}
                None => anyhow::bail!("client {i} closed: {:?}", c.errors),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossy_jittery_client_links_stay_exact_without_a_resync_storm() {
    let mut cfg = test_config();
    // Everyone sees everyone (a class room shows its 32 nearest; 12 fit either way).
    cfg.room.tier = plaza_ops::config::CapacityTier::Stadium;
    let plaza = start_plaza(&cfg).await;
    let gateway = plaza.ws_addr().expect("plaza runs a gateway");
    let link = Link {
        rtt_ms: 100.0,
        jitter_ms: 30.0,
        loss_pct: 5.0,
    };
    let proxy = Proxy::start(gateway, link, 10).await.unwrap();
    let url = format!("ws://{}/v1/ws", proxy.addr);
    let metric = |name: &'static str| {
        let admin = plaza.admin_addr();
        async move { parse_sample(&scrape_metrics(admin).await.unwrap_or_default(), name) }
    };
    let keyframes_before = metric("plaza_keyframes_total").await.unwrap_or(0.0);

    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut c = Client::connect(&url).await.unwrap();
        c.join(ROOM).await.unwrap();
        clients.push(c);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, mut c) in clients.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let r = walk(&mut c, i, start).await;
            (c, r)
        }));
    }
    let mut clients = Vec::new();
    let mut sent = Vec::new();
    for t in tasks {
        let (c, r) = t.await.unwrap();
        let (last, pings, pongs) = r.unwrap();
        sent.push(last);
        clients.push((c, pings, pongs));
    }
    let last_move = Instant::now();

    // The server's own state once every input is in (the last moves cross the link too).
    let rooms = plaza.node().expect("every role runs a node").rooms();
    let close =
        |p: [f32; 3], q: [f32; 3]| (0..3).all(|k| (p[k] - q[k]).abs() <= POSITION_ERROR_M + 1e-4);
    let holds_sent = |server: &[(u32, [f32; 3])]| {
        clients.iter().enumerate().all(|(i, (c, _, _))| {
            server
                .iter()
                .any(|(e, p)| *e == c.entity && close(*p, sent[i]))
        })
    };
    // Polled (bounded) until the room holds every last move, then asserted below.
    let deadline = Instant::now() + Duration::from_secs(3);
    let (view, server) = loop {
        let view = rooms.inspect(ROOM).await.unwrap().view;
        let server: Vec<(u32, [f32; 3])> = view
            .members
            .iter()
            .map(|m| (m.entity, m.position))
            .collect();
        if holds_sent(&server) || Instant::now() >= deadline {
            break (view, server);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(server.len(), CLIENTS, "{view:?}");
    // The room holds each avatar where its client last put it (no input lost or refused).
    for (i, (c, _, _)) in clients.iter().enumerate() {
        let at = server.iter().find(|(e, _)| *e == c.entity).map(|(_, p)| *p);
        assert!(
            at.is_some_and(|p| close(p, sent[i])),
            "client {i}: the room holds {at:?}, it sent {:?}",
            sent[i]
        );
    }

    // Every client's decoded view converges on the server's.
    let mut seen = Vec::new();
    for (i, (mut c, pings, mut pongs)) in clients.into_iter().enumerate() {
        let deadline = last_move + Duration::from_secs(2);
        loop {
            let wrong: Vec<_> = server
                .iter()
                .filter(|(e, _)| *e != c.entity)
                .filter(|(e, p)| {
                    !c.decoder()
                        .get(*e)
                        .is_some_and(|r| close(r.pose.position_m(), *p))
                })
                .map(|(e, p)| (*e, c.decoder().get(*e).map(|r| r.pose.position_m()), *p))
                .collect();
            if wrong.is_empty() {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "client {i}: view not exact 2 s after the last move: {:?}",
                &wrong[..wrong.len().min(3)]
            );
            if let Ok(got) = tokio::time::timeout(left, c.recv()).await
                && let Some(Body::Pong(_)) = got.unwrap()
            {
                pongs += 1;
            }
        }
        // Pings still in flight get their answer.
        while pongs < pings {
            match tokio::time::timeout(Duration::from_secs(2), c.recv()).await {
                Ok(Ok(Some(Body::Pong(_)))) => pongs += 1,
                Ok(Ok(Some(_))) => {}
                other => panic!("client {i}: {pongs} of {pings} pings answered ({other:?})"),
            }
        }
        assert_eq!(c.frame_errors, 0, "client {i}: frames that did not apply");
        assert_eq!(c.resyncs, 0, "client {i}: resyncs asked for");
        assert!(
            c.corrections.is_empty(),
            "client {i}: corrections {:?}",
            c.corrections
        );
        assert!(c.errors.is_empty(), "client {i}: errors {:?}", c.errors);
        let s = Seen {
            keyframes: c.frames.iter().filter(|f| f.keyframe).count(),
            frames: c.frames.len(),
            pongs,
            pings,
        };
        assert!(s.keyframes <= 2, "client {i}: {s:?}");
        // Frames kept flowing through the stalls (the room sends 20 a second).
        assert!(s.frames >= 50, "client {i}: {s:?}");
        assert_eq!(s.pongs, s.pings, "client {i}: {s:?}");
        seen.push(s);
        c.close().await;
    }
    let stalls = proxy
        .stats
        .stalls
        .load(std::sync::atomic::Ordering::Relaxed);
    let chunks = proxy
        .stats
        .chunks
        .load(std::sync::atomic::Ordering::Relaxed);
    let keyframes = metric("plaza_keyframes_total").await.unwrap_or(0.0) - keyframes_before;
    let overflows = metric("plaza_gateway_queue_overflows_total")
        .await
        .unwrap_or(0.0);
    eprintln!(
        "F10: {CLIENTS} clients, {chunks} chunks through the link, {stalls} stalled; keyframes \
         produced {keyframes}, queue overflows {overflows}; per client: {seen:?}"
    );
    // The link did what it says: about 5 % of chunks stalled.
    assert!(
        stalls * 100 >= chunks * 3 && stalls * 100 <= chunks * 8,
        "{stalls} of {chunks} chunks stalled"
    );
    assert_eq!(overflows, 0.0, "gateway queue overflows");
    assert!(
        keyframes <= (2 * CLIENTS) as f64,
        "{keyframes} keyframes produced for {CLIENTS} clients"
    );
    plaza.shutdown().await;
}
