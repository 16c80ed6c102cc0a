//! Runs `plaza_load::run` in-process against a small fake gateway that speaks protocol v1 with
//! the real `plaza_proto` frame encoder, and checks what the report counted: joins, decoded
//! frames, move-to-seen matches, RTT, a deliberately broken frame chain (check failure, `Resync`,
//! keyframe), a going-away close followed by a resume, refused joins and an unreachable gateway.
//!
//! The fake is not the real gateway (that end-to-end run lives in the `tests` crate and
//! `docs/BENCHMARKS.md`); it exists so the bot loop is tested without the rest of Plaza.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use parking_lot::Mutex;
use plaza_load::{LoadConfig, Report, Scenario};
use plaza_proto::frame::{EncoderConfig, EntityRecord, FrameEncoder, Visible};
use plaza_proto::pb::{
    self, ServerEnvelope, client_envelope::Body as CBody, server_envelope::Body as SBody,
};
use plaza_proto::quant::{Pose, quantize};
use prost::Message as _;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// Faults the fake injects.
#[derive(Clone, Copy, Debug, Default)]
struct Faults {
    /// The first session to reach this many frames has one frame skipped (a chain break).
    skip_frame_at: Option<u32>,
    /// The first session to reach this many frames is closed with 1001 (going away).
    going_away_at: Option<u32>,
    /// Every join is refused with this close code (e.g. 4005 room full).
    refuse_join_with: Option<u16>,
    /// The first session to reach this many frames is moved to a "new node": a fresh `Joined`
    /// and a keyframe, without a reconnect.
    rejoin_at: Option<u32>,
    /// The first session to reach this many frames gets a keyframe it did not ask for.
    keyframe_at: Option<u32>,
}

#[derive(Default)]
struct Room {
    poses: BTreeMap<u32, Pose>,
}

struct Fake {
    faults: Faults,
    rooms: Mutex<BTreeMap<String, Room>>,
    next_entity: AtomicU32,
    next_session: AtomicU64,
    skip_done: AtomicU32,
    going_away_done: AtomicU32,
    rejoin_done: AtomicU32,
    keyframe_done: AtomicU32,
    resyncs: AtomicU32,
    resumed: AtomicU32,
    /// resume token → (session id, room, entity).
    tokens: Mutex<BTreeMap<String, (u64, String, u32)>>,
}

async fn start_fake(faults: Faults) -> (SocketAddr, Arc<Fake>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = Arc::new(Fake {
        faults,
        rooms: Mutex::new(BTreeMap::new()),
        next_entity: AtomicU32::new(1),
        next_session: AtomicU64::new(1),
        skip_done: AtomicU32::new(0),
        going_away_done: AtomicU32::new(0),
        rejoin_done: AtomicU32::new(0),
        keyframe_done: AtomicU32::new(0),
        resyncs: AtomicU32::new(0),
        resumed: AtomicU32::new(0),
        tokens: Mutex::new(BTreeMap::new()),
    });
    let f = fake.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(serve(f.clone(), tcp));
        }
    });
    (addr, fake)
}

fn env(body: SBody) -> Message {
    let e = ServerEnvelope {
        sequence: 0,
        sent_at_ms: 0,
        body: Some(body),
    };
    Message::Binary(e.encode_to_vec().into())
}

async fn serve(fake: Arc<Fake>, tcp: TcpStream) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
        return;
    };
    let mut session_id = 0;
    let mut joined: Option<(String, u32)> = None;
    let mut encoder = FrameEncoder::new(EncoderConfig {
        budget_bytes_per_s: 0,
        broadcast_hz: 20,
        check_every: 10,
    });
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut frames = 0u32;
    let mut room_tick = 0u32;
    loop {
        tokio::select! {
            msg = ws.next() => {
                let Some(Ok(Message::Binary(b))) = msg else { break };
                let Ok(env_in) = pb::ClientEnvelope::decode(b.as_ref()) else { break };
                match env_in.body {
                    Some(CBody::Negotiate(n)) => {
                        let resumed = fake.tokens.lock().get(&n.resume_token).cloned();
                        let token = if let Some((sid, room, entity)) = resumed {
                            fake.resumed.fetch_add(1, Ordering::Relaxed);
                            session_id = sid;
                            joined = Some((room.clone(), entity));
                            n.resume_token.clone()
                        } else {
                            session_id = fake.next_session.fetch_add(1, Ordering::Relaxed);
                            format!("token-{session_id}")
                        };
                        let neg = pb::Negotiated {
                            session_id,
                            resume_token: token,
                            version: Some(pb::ProtocolVersion { major: 1, minor: 0 }),
                            ..Default::default()
                        };
                        if ws.send(env(SBody::Negotiated(neg))).await.is_err() { break }
                        if let Some((room, entity)) = &joined {
                            // A resumed session goes back into its room at once.
                            let j = pb::Joined { room_id: room.clone(), entity_id: *entity, broadcast_hz: 20, ..Default::default() };
                            if ws.send(env(SBody::Joined(j))).await.is_err() { break }
                        }
                    }
                    Some(CBody::Join(j)) => {
                        if let Some(code) = fake.faults.refuse_join_with {
                            let frame = CloseFrame { code: CloseCode::from(code), reason: "refused".into() };
                            let _ = ws.send(Message::Close(Some(frame))).await;
                            break;
                        }
                        let entity = fake.next_entity.fetch_add(1, Ordering::Relaxed);
                        let spawn = [0.0, 0.0, 0.0];
                        fake.rooms.lock().entry(j.room_id.clone()).or_default().poses.insert(entity, Pose { position: spawn, ..Pose::default() });
                        fake.tokens.lock().insert(format!("token-{session_id}"), (session_id, j.room_id.clone(), entity));
                        joined = Some((j.room_id.clone(), entity));
                        let reply = pb::Joined {
                            room_id: j.room_id,
                            entity_id: entity,
                            tick_hz: 50,
                            broadcast_hz: 20,
                            position: Some(pb::Vec3 { x: spawn[0], y: spawn[1], z: spawn[2] }),
                            ..Default::default()
                        };
                        if ws.send(env(SBody::Joined(reply))).await.is_err() { break }
                    }
                    Some(CBody::Movement(m)) => {
                        if let Some((room, entity)) = &joined {
                            let pose = Pose::from(&m);
                            if let Some(r) = fake.rooms.lock().get_mut(room) {
                                r.poses.insert(*entity, pose);
                            }
                        }
                    }
                    Some(CBody::Ping(p)) => {
                        let pong = pb::Pong { client_time_ms: p.client_time_ms, server_time_ms: 0 };
                        if ws.send(env(SBody::Pong(pong))).await.is_err() { break }
                    }
                    Some(CBody::Resync(_)) => {
                        fake.resyncs.fetch_add(1, Ordering::Relaxed);
                        encoder.request_keyframe();
                    }
                    _ => {}
                }
            }
            _ = tick.tick() => {
                let Some((room, own)) = &joined else { continue };
                room_tick += 1;
                if fake.faults.rejoin_at == Some(frames + 1)
                    && fake.rejoin_done.fetch_add(1, Ordering::Relaxed) == 0
                {
                    let j = pb::Joined { room_id: room.clone(), entity_id: *own, broadcast_hz: 20, ..Default::default() };
                    if ws.send(env(SBody::Joined(j))).await.is_err() { break }
                    encoder = FrameEncoder::new(EncoderConfig { budget_bytes_per_s: 0, broadcast_hz: 20, check_every: 10 });
                }
                if fake.faults.keyframe_at == Some(frames + 1)
                    && fake.keyframe_done.fetch_add(1, Ordering::Relaxed) == 0
                {
                    encoder.request_keyframe();
                }
                let records: Vec<EntityRecord> = fake.rooms.lock().get(room).map(|r| {
                    r.poses.iter().filter(|(id, _)| *id != own).map(|(id, p)| EntityRecord { id: *id, generation: 0, kind: 0, pose: quantize(p) }).collect()
                }).unwrap_or_default();
                let visible: Vec<Visible<'_>> = records.iter().map(|record| Visible { record, tier: 0 }).collect();
                let mut out = Vec::new();
                encoder.encode(room_tick, None, &visible, &mut out);
                frames += 1;
                if fake.faults.skip_frame_at == Some(frames)
                    && fake.skip_done.fetch_add(1, Ordering::Relaxed) == 0
                {
                    // Drop this frame: the next one breaks the client's chain.
                    continue;
                }
                if ws.send(env(SBody::SnapshotFrame(pb::SnapshotFrame { frame: out.into() }))).await.is_err() { break }
                if fake.faults.going_away_at == Some(frames)
                    && fake.going_away_done.fetch_add(1, Ordering::Relaxed) == 0
                {
                    let frame = CloseFrame { code: CloseCode::Away, reason: "going away".into() };
                    let _ = ws.send(Message::Close(Some(frame))).await;
                    // Keep the entity: the session may resume.
                    break;
                }
            }
        }
    }
}

fn config(addr: SocketAddr, bots: usize) -> LoadConfig {
    let mut cfg = LoadConfig::new(format!("ws://{addr}/v1/ws"), bots);
    cfg.rooms = 2;
    cfg.duration = Duration::from_secs(3);
    cfg.ramp = Some(Duration::from_millis(200));
    cfg.ping_interval = Duration::from_millis(500);
    cfg.connect_timeout = Duration::from_secs(5);
    cfg
}

fn assert_clean(r: &Report) {
    assert_eq!(r.decode_errors, 0, "{r:#?}");
    assert_eq!(r.bots_failed, 0, "{r:#?}");
    assert_eq!(r.bots_lost, 0, "{r:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_join_decode_and_see_each_other() {
    let (addr, fake) = start_fake(Faults::default()).await;
    let report = plaza_load::run(config(addr, 8)).await.unwrap();
    assert_clean(&report);
    assert_eq!(report.bots_requested, 8);
    assert_eq!(report.bots_connected, 8);
    assert_eq!(report.check_failures, 0);
    assert_eq!(report.keyframes_requested, 0);
    assert_eq!(report.keyframes_unrequested, 0);
    assert_eq!(report.resumes, 0);
    assert_eq!(fake.resyncs.load(Ordering::Relaxed), 0);
    assert!(report.frames_received > 0);
    assert_eq!(report.keyframes_received, 8);
    assert!(report.snapshot_interval_ms.count > 0);
    // Every bot is a walker: each sees the three others in its room move.
    assert!(report.move_to_seen_ms.count > 0, "{report:#?}");
    assert!(report.rtt_ms.count > 0);
    assert!(report.movements_sent > 0);
    assert!(report.down_bytes_per_bot_per_s > 0.0 && report.up_bytes_per_bot_per_s > 0.0);
    assert!(!report.series.is_empty());
    assert!(report.series.iter().any(|p| p.connected == 8));
    assert!(report.load_cpu_seconds >= 0.0);
    // The per-room breakdown: two rooms of four bots, adding up to the totals.
    let rooms: Vec<(&str, u64, u64)> = report
        .per_room
        .iter()
        .map(|r| (r.room.as_str(), r.bots, r.connected))
        .collect();
    assert_eq!(rooms, [("load-0", 4, 4), ("load-1", 4, 4)], "{report:#?}");
    assert_eq!(
        report.per_room.iter().map(|r| r.frames).sum::<u64>(),
        report.frames_received
    );
    for r in &report.per_room {
        assert!(r.snapshot_interval_ms.count > 0, "{r:?}");
        assert!(r.down_bytes_per_bot_per_s > 0.0, "{r:?}");
        assert_eq!((r.failed, r.lost), (0, 0), "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_chain_is_counted_and_healed_by_a_keyframe() {
    let (addr, fake) = start_fake(Faults {
        skip_frame_at: Some(5),
        ..Faults::default()
    })
    .await;
    let report = plaza_load::run(config(addr, 4)).await.unwrap();
    assert_clean(&report);
    assert_eq!(report.check_failures, 1, "{report:#?}");
    assert_eq!(report.frame_errors.0.get("chain_break"), Some(&1));
    assert_eq!(report.frame_errors.total(), 1);
    assert_eq!(report.keyframes_requested, 1);
    assert_eq!(fake.resyncs.load(Ordering::Relaxed), 1);
    // The join keyframes plus the one answering the resync.
    assert_eq!(report.keyframes_received, 5, "{report:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn going_away_is_resumed_with_the_token() {
    let (addr, fake) = start_fake(Faults {
        going_away_at: Some(5),
        ..Faults::default()
    })
    .await;
    let report = plaza_load::run(config(addr, 4)).await.unwrap();
    assert_clean(&report);
    assert_eq!(report.close_codes.0.get("1001"), Some(&1), "{report:#?}");
    assert_eq!(report.resumes, 1, "{report:#?}");
    assert_eq!(report.resume_ms.count, 1);
    assert_eq!(fake.resumed.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_session_rejoin_counts_as_resume_and_stray_keyframes_are_counted() {
    let (addr, _fake) = start_fake(Faults {
        rejoin_at: Some(5),
        keyframe_at: Some(8),
        ..Faults::default()
    })
    .await;
    let report = plaza_load::run(config(addr, 4)).await.unwrap();
    assert_clean(&report);
    assert_eq!(report.resumes, 1, "{report:#?}");
    assert_eq!(report.resumes_in_session, 1);
    assert_eq!(report.resume_ms.count, 1);
    assert_eq!(report.close_codes.total(), 0);
    assert_eq!(report.check_failures, 0);
    // The rejoin's keyframe was announced by its Joined; the other one was not.
    assert_eq!(report.keyframes_unrequested, 1, "{report:#?}");
    assert_eq!(report.keyframes_received, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_early_closes_every_bot_and_still_reports() {
    let (addr, fake) = start_fake(Faults::default()).await;
    let mut cfg = config(addr, 6);
    // A long run and a slow ramp (one bot every 50 s): stop once the first bot has joined.
    cfg.duration = Duration::from_secs(600);
    cfg.ramp = Some(Duration::from_secs(300));
    let first_joined = async move {
        // Bounded polling on the fake's join count (entity ids start at 1).
        for _ in 0..3000 {
            if fake.next_entity.load(Ordering::Relaxed) >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let report = plaza_load::run_with_stop(cfg, first_joined).await.unwrap();
    assert!(report.stopped_early);
    assert!(report.elapsed_s < 600.0);
    assert_eq!(report.bots_connected, 1, "{report:#?}");
    assert_eq!(report.bots_not_started, 5);
    assert_eq!(report.bots_failed, 0);
    assert_eq!(report.bots_lost, 0);
    assert_eq!(report.close_codes.total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_joins_count_as_failed_bots_with_their_close_code() {
    let (addr, _fake) = start_fake(Faults {
        refuse_join_with: Some(4005),
        ..Faults::default()
    })
    .await;
    let mut cfg = config(addr, 3);
    cfg.scenario = Scenario::builtin("mixed").unwrap();
    let attempts = u64::from(cfg.connect_attempts);
    let report = plaza_load::run(cfg).await.unwrap();
    assert_eq!(report.bots_connected, 0);
    assert_eq!(report.bots_failed, 3);
    // 4005 (room full) is "retry later" (plaza_client::CloseKind): every attempt, then the bot
    // gives up.
    let tries = 3 * attempts;
    assert_eq!(
        report.close_codes.0.get("4005"),
        Some(&tries),
        "{report:#?}"
    );
    assert_eq!(report.connect_errors.0.get("closed_4005"), Some(&tries));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_gateway_fails_every_bot_after_its_attempts() {
    // Bind then drop a listener: nothing listens on that port any more.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let mut cfg = config(addr, 2);
    cfg.connect_attempts = 2;
    let report = plaza_load::run(cfg).await.unwrap();
    assert_eq!(report.bots_failed, 2);
    assert_eq!(report.connect_failures, 4, "{report:#?}");
    assert_eq!(report.bots_lost, 0);
}
