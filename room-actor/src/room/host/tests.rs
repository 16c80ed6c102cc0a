//! The room host on simulated time: a manual clock, a lease switch and in-memory outlets.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use plaza_proto::pb::{self, client_envelope, server_envelope};
use prost::Message as _;

use super::*;

/// Time under the test's control.
#[derive(Debug, Default)]
pub(crate) struct ManualClock(Mutex<Duration>);

impl ManualClock {
    pub(crate) fn advance(&self, by: Duration) {
        *self.0.lock() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        *self.0.lock()
    }

    fn unix_ms(&self) -> u64 {
        1_700_000_000_000 + self.0.lock().as_millis() as u64
    }
}

/// A lease the test confirms or lets lapse.
#[derive(Debug)]
pub(crate) struct Switch(pub(crate) AtomicBool);

impl LeaseView for Switch {
    fn may_commit(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn epoch(&self) -> Epoch {
        Epoch::new(1, 1)
    }
}

/// A bounded in-memory outlet; `closed` makes it refuse everything as a gone stream.
#[derive(Clone, Debug)]
pub(crate) struct Queue {
    pub(crate) q: Arc<Mutex<VecDeque<NodeOutbound>>>,
    cap: usize,
    pub(crate) closed: Arc<AtomicBool>,
}

impl Queue {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            q: Default::default(),
            cap,
            closed: Default::default(),
        }
    }

    /// Everything queued so far, taken.
    pub(crate) fn take(&self) -> Vec<NodeOutbound> {
        self.q.lock().drain(..).collect()
    }
}

impl Outlet for Queue {
    fn offer(&self, msg: NodeOutbound) -> Result<(), Refused> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Refused::Closed);
        }
        let mut q = self.q.lock();
        if q.len() >= self.cap {
            return Err(Refused::Full);
        }
        q.push_back(msg);
        Ok(())
    }
}

/// What a node message says, for assertions.
#[derive(Debug, PartialEq)]
pub(crate) enum Seen {
    Ack(u32),
    Detach(i32),
    Joined(u32),
    Frame { keyframe: bool },
    Left,
    Correction(i32),
    Event,
    Error(i32),
    Other,
}

pub(crate) fn seen(m: &NodeOutbound) -> Seen {
    match &m.body {
        Some(node_outbound::Body::Ack(a)) => Seen::Ack(a.entity_id),
        Some(node_outbound::Body::Detach(d)) => Seen::Detach(d.reason),
        Some(node_outbound::Body::ServerEnvelope(b)) => {
            let env = pb::ServerEnvelope::decode(b.as_ref()).expect("an envelope");
            match env.body {
                Some(server_envelope::Body::Joined(j)) => Seen::Joined(j.entity_id),
                Some(server_envelope::Body::SnapshotFrame(_)) => Seen::Frame {
                    keyframe: m.keyframe,
                },
                Some(server_envelope::Body::Left(_)) => Seen::Left,
                Some(server_envelope::Body::Correction(c)) => Seen::Correction(c.reason),
                Some(server_envelope::Body::Event(_)) => Seen::Event,
                Some(server_envelope::Body::Error(e)) => Seen::Error(e.code),
                _ => Seen::Other,
            }
        }
        _ => Seen::Other,
    }
}

/// A host on simulated time.
pub(crate) struct Sim {
    pub(crate) host: RoomHost,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) lease: Arc<Switch>,
    /// Audit records appended so far (kinds), in order.
    pub(crate) audits: Vec<String>,
    /// Directory writes so far.
    pub(crate) writes: Vec<PresenceOp>,
}

impl Sim {
    pub(crate) fn new(cfg: RoomActorConfig) -> Self {
        Self::restored(cfg, Room::new("r", RoomConfig::default()), HashMap::new())
    }

    pub(crate) fn restored(
        mut cfg: RoomActorConfig,
        room: Room,
        awaited: HashMap<SessionId, Awaited>,
    ) -> Self {
        cfg.room = room.config().clone();
        let clock = Arc::new(ManualClock::default());
        let lease = Arc::new(Switch(AtomicBool::new(true)));
        let host = RoomHost::new(HostArgs {
            room,
            room_id: "r".into(),
            cfg,
            metrics: NodeMetrics::default(),
            node_id: "node-a".into(),
            epoch: Epoch::new(1, 1),
            lease: lease.clone(),
            lease_ttl: Duration::from_secs(10),
            clock: clock.clone(),
            awaited,
            last_audit_seq: 0,
        });
        Self {
            host,
            clock,
            lease,
            audits: Vec::new(),
            writes: Vec::new(),
        }
    }

    pub(crate) fn attach(&mut self, session: SessionId, wallet: &str, link_id: u64, q: &Queue) {
        self.host.on_attach(Attach {
            session,
            wallet: wallet.into(),
            tx: Box::new(q.clone()),
            entity: 0,
            link_id,
            operator: false,
        });
        self.writes.extend(self.host.take_writes());
    }

    pub(crate) fn send(&mut self, session: SessionId, seq: u32, body: client_envelope::Body) {
        self.host.on_envelope(
            session,
            pb::ClientEnvelope {
                sequence: seq,
                body: Some(body),
                ..Default::default()
            },
        );
        self.writes.extend(self.host.take_writes());
    }

    /// Runs the ticks of `ms` milliseconds of simulated time, one wake every 10 ms, as the
    /// shell does (audit records "appended" in order); returns whether the room asked to stop.
    pub(crate) fn run(&mut self, ms: u64) -> Option<&'static str> {
        for _ in 0..ms / 10 {
            self.clock.advance(Duration::from_millis(10));
            if let Some(mut batch) = self.host.tick(Due::Scheduled, &mut |_, _, _| {}) {
                loop {
                    let audits = self.host.deliver_until_audits(&mut batch);
                    if audits.is_empty() {
                        break;
                    }
                    for a in audits {
                        self.audits.push(a.kind);
                        self.host.audit_appended(self.audits.len() as u64);
                    }
                }
                self.host.finish(batch);
            }
            self.host.after_tick();
            self.writes.extend(self.host.take_writes());
            if let Some(stop) = self.host.take_stop() {
                return Some(stop);
            }
        }
        None
    }

    pub(crate) fn registered(&self) -> Vec<String> {
        self.writes
            .iter()
            .filter_map(|w| match w {
                PresenceOp::Register { wallet, .. } => Some(wallet.clone()),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn released(&self) -> Vec<String> {
        self.writes
            .iter()
            .filter_map(|w| match w {
                PresenceOp::Release { wallet } => Some(wallet.clone()),
                _ => None,
            })
            .collect()
    }
}

use plaza_room_core::RoomConfig;

fn kinds(q: &Queue) -> Vec<Seen> {
    q.take().iter().map(seen).collect()
}

#[test]
fn a_join_is_acknowledged_registered_and_gets_a_keyframe() {
    let mut sim = Sim::new(RoomActorConfig::default());
    let q = Queue::new(64);
    sim.attach(1, "w1", 1, &q);
    assert!(kinds(&q).is_empty(), "the join waits for the tick");
    sim.run(60);
    let got = kinds(&q);
    let entity = sim.host.room.entity_of(1).expect("a member");
    assert_eq!(got[0], Seen::Ack(entity));
    assert_eq!(got[1], Seen::Joined(entity));
    assert!(got.contains(&Seen::Frame { keyframe: true }), "{got:?}");
    assert_eq!(sim.registered(), vec!["w1".to_owned()]);
}

#[test]
fn a_new_stream_of_a_member_swaps_the_link_and_the_old_detach_is_ignored() {
    let mut sim = Sim::new(RoomActorConfig::default());
    let (old, new) = (Queue::new(64), Queue::new(64));
    sim.attach(1, "w1", 1, &old);
    sim.run(100);
    let entity = sim.host.room.entity_of(1).expect("a member");
    old.take();
    sim.attach(1, "w1", 2, &new);
    assert_eq!(
        kinds(&new),
        vec![Seen::Ack(entity), Seen::Joined(entity)],
        "acknowledged at once"
    );
    sim.host.on_detach(1, 1);
    sim.run(100);
    assert_eq!(sim.host.room.entity_of(1), Some(entity), "still a member");
    assert!(kinds(&old).is_empty(), "the old stream gets nothing more");
    let got = kinds(&new);
    assert!(got.contains(&Seen::Frame { keyframe: true }), "{got:?}");
    assert!(sim.released().is_empty());
    // The current stream's end is a leave.
    sim.host.on_detach(1, 2);
    sim.run(40);
    assert_eq!(sim.host.room.entity_of(1), None);
    assert_eq!(sim.released(), vec!["w1".to_owned()]);
}

/// issue 12 item 8: a stream swap keeps the sender's compressed-timestamp decoder, so moves
/// across the 655 s wrap of the compressed timestamp are accepted after the swap.
#[test]
fn issue_12_a_stream_swap_keeps_the_timestamp_decoder_across_a_wrap() {
    let mut sim = Sim::new(RoomActorConfig::default());
    let (old, new) = (Queue::new(4096), Queue::new(4096));
    sim.attach(1, "w1", 1, &old);
    sim.run(40);
    let spawn = sim.host.room.pose_of(1).expect("a member").position;
    let mut sender = plaza_proto::compressed::CompressedSender::new();
    let mut seq = 0;
    let buffer = plaza_proto::compressed::TIMESTAMP_BUFFER_S;
    // One move per 100 ms, client clock from 2 s before the wrap to 2 s after it, the stream
    // swapped at the wrap.
    let mut t = buffer - 2.0;
    let mut x = spawn[0];
    while t < buffer + 2.0 {
        if (t - buffer).abs() < 0.05 {
            sim.attach(1, "w1", 2, &new);
        }
        seq += 1;
        x += 0.1;
        let m = pb::Movement {
            position: Some(pb::Vec3 {
                x,
                y: spawn[1],
                z: spawn[2],
            }),
            velocity: Some(pb::Vec3 {
                x: 1.0,
                y: 0.0,
                z: 0.0,
            }),
            movement_kind: 1,
            timestamp: t,
            ..Default::default()
        };
        let (c, _) = sender.encode(&m);
        sim.send(1, seq, client_envelope::Body::MovementCompressed(c.into()));
        sim.run(100);
        t += 0.1;
    }
    let corrections: Vec<Seen> = kinds(&old)
        .into_iter()
        .chain(kinds(&new))
        .filter(|s| matches!(s, Seen::Correction(_)))
        .collect();
    assert!(corrections.is_empty(), "{corrections:?}");
    let stats = sim.host.room.stats();
    assert_eq!(stats.moves_rejected.iter().sum::<u64>(), 0);
    assert!(stats.moves_applied >= 39, "{}", stats.moves_applied);
}

#[test]
fn an_unconfirmed_lease_withholds_ticks_then_the_room_gives_up() {
    let mut sim = Sim::new(RoomActorConfig::default());
    let q = Queue::new(4096);
    sim.attach(1, "w1", 1, &q);
    sim.run(100);
    q.take();
    sim.lease.0.store(false, Ordering::SeqCst);
    let tick = sim.host.room.tick();
    assert_eq!(sim.run(5_000), None);
    assert_eq!(sim.host.room.tick(), tick, "no step while withheld");
    assert!(q.take().is_empty(), "nothing leaves");
    // Confirmed again: the room carries on in place (missed steps are skipped).
    sim.lease.0.store(true, Ordering::SeqCst);
    sim.run(100);
    assert!(sim.host.room.tick() > tick);
    assert!(!q.take().is_empty());
    // A room with a session waits six TTLs, then gives up.
    sim.lease.0.store(false, Ordering::SeqCst);
    assert_eq!(sim.run(59_000), None);
    assert_eq!(sim.run(2_000), Some("lease lapsed"));
}

#[test]
fn a_room_without_sessions_gives_up_after_one_ttl_of_withheld_ticks() {
    let mut sim = Sim::new(RoomActorConfig {
        empty_grace: Duration::from_secs(3600),
        ..RoomActorConfig::default()
    });
    sim.lease.0.store(false, Ordering::SeqCst);
    assert_eq!(sim.run(9_900), None);
    assert_eq!(sim.run(200), Some("lease lapsed"));
}

#[test]
fn a_slow_consumer_loses_frames_then_its_link_when_control_does_not_fit() {
    let mut sim = Sim::new(RoomActorConfig::default());
    // Room for the Ack, Joined, the first keyframe with the roster event that goes with it, and
    // one delta frame.
    let slow = Queue::new(5);
    sim.attach(1, "w1", 1, &slow);
    // The stream is never read: its first messages fit, later frames are dropped (each asks
    // for a keyframe) and the link stays.
    sim.run(160);
    assert_eq!(slow.q.lock().len(), 5);
    assert!(
        sim.host.links.contains_key(&1),
        "a dropped frame keeps the link: {:?}",
        kinds(&slow)
    );
    assert!(sim.host.metrics.outbound_dropped.get() > 0);
    assert!(sim.released().is_empty());
    // A control message (the Error of an invalid input) does not fit: the link is dropped.
    sim.send(
        1,
        10,
        client_envelope::Body::Interaction(pb::Interaction {
            kind: 99,
            ..Default::default()
        }),
    );
    assert!(!sim.host.links.contains_key(&1), "dropped");
    sim.run(40);
    assert_eq!(sim.host.room.entity_of(1), None, "it left the room");
    assert_eq!(sim.released(), vec!["w1".to_owned()]);
}

#[test]
fn a_closed_stream_detaches_its_session() {
    let mut sim = Sim::new(RoomActorConfig::default());
    let q = Queue::new(64);
    sim.attach(1, "w1", 1, &q);
    sim.run(40);
    q.closed.store(true, Ordering::SeqCst);
    sim.run(100);
    assert!(sim.host.links.is_empty());
    assert_eq!(sim.host.room.entity_of(1), None);
}

#[test]
fn a_full_room_refuses_the_join_with_its_detach_reason() {
    let room_cfg = RoomConfig {
        max_members: 1,
        ..RoomConfig::default()
    };
    let mut sim = Sim::restored(
        RoomActorConfig::default(),
        Room::new("r", room_cfg),
        HashMap::new(),
    );
    let (a, b) = (Queue::new(64), Queue::new(64));
    sim.attach(1, "w1", 1, &a);
    sim.attach(2, "w2", 2, &b);
    sim.run(40);
    assert_eq!(
        kinds(&b),
        vec![Seen::Detach(node::DetachReason::RoomFull as i32)]
    );
    assert!(!sim.host.links.contains_key(&2));
    assert_eq!(sim.registered(), vec!["w1".to_owned()]);
}

#[test]
fn audit_records_are_appended_before_what_acknowledges_them() {
    let mut sim = Sim::new(RoomActorConfig::default());
    let q = Queue::new(4096);
    sim.attach(1, "w1", 1, &q);
    sim.run(40);
    q.take();
    // A consent request with no op is refused and audited (`consent.refused`).
    sim.send(
        1,
        5,
        client_envelope::Body::Consent(pb::ConsentAction {
            kind: "hug".into(),
            target_entity: 77,
            ..Default::default()
        }),
    );
    // Deliver the tick by hand: the audit comes back before the refusal's event is queued.
    sim.clock.advance(Duration::from_millis(20));
    let mut batch = sim
        .host
        .tick(Due::Scheduled, &mut |_, _, _| {})
        .expect("a batch");
    let audits = sim.host.deliver_until_audits(&mut batch);
    assert_eq!(audits.len(), 1);
    assert_eq!(audits[0].kind, "consent.refused");
    assert!(
        !kinds(&q).contains(&Seen::Event),
        "the refusal waits for its audit"
    );
    assert!(sim.host.deliver_until_audits(&mut batch).is_empty());
    assert!(kinds(&q).contains(&Seen::Event));
    sim.host.finish(batch);
}

#[test]
fn a_handed_off_member_relinks_or_leaves_at_its_deadline() {
    // The previous activation: two members, handed off.
    let mut prev = Room::new("r", RoomConfig::default());
    prev.join_member(1, "w1".into(), 0);
    prev.join_member(2, "w2".into(), 0);
    let mut out = Vec::new();
    prev.advance(Duration::from_millis(20), &mut out);
    let (e1, e2) = (prev.entity_of(1).unwrap(), prev.entity_of(2).unwrap());
    let mut room = Room::new("r", RoomConfig::default());
    room.restore(prev.save_state());
    let deadline = Duration::from_secs(15);
    let awaited = HashMap::from([
        (
            1,
            Awaited {
                wallet: "w1".into(),
                entity: e1,
                deadline,
            },
        ),
        (
            2,
            Awaited {
                wallet: "w2".into(),
                entity: e2,
                deadline,
            },
        ),
    ]);
    let mut sim = Sim::restored(RoomActorConfig::default(), room, awaited);
    let q = Queue::new(4096);
    sim.run(1_000);
    sim.attach(1, "w1", 7, &q);
    let got = kinds(&q);
    assert_eq!(
        got,
        vec![Seen::Ack(e1), Seen::Joined(e1)],
        "re-linked at once"
    );
    sim.run(13_900);
    assert_eq!(sim.host.room.entity_of(2), Some(e2), "still awaited");
    sim.run(200);
    assert_eq!(sim.host.room.entity_of(2), None, "expired");
    assert_eq!(sim.host.room.entity_of(1), Some(e1));
}

#[test]
fn a_left_for_an_old_stream_is_not_told_to_the_new_one() {
    let mut sim = Sim::new(RoomActorConfig::default());
    let (old, new) = (Queue::new(64), Queue::new(64));
    sim.attach(1, "w1", 1, &old);
    sim.run(40);
    // The old stream ends, and the session attaches again before the leave is applied.
    sim.host.on_detach(1, 1);
    sim.attach(1, "w1", 2, &new);
    sim.run(100);
    let got = kinds(&new);
    assert!(!got.contains(&Seen::Left), "{got:?}");
    let entity = sim.host.room.entity_of(1).expect("a member again");
    assert!(got.contains(&Seen::Ack(entity)), "it joins afresh: {got:?}");
    assert!(got.contains(&Seen::Joined(entity)), "{got:?}");
    assert!(sim.host.links.contains_key(&1));
}

#[test]
fn an_empty_room_stops_after_its_grace_and_drops_its_checkpoint() {
    let mut sim = Sim::new(RoomActorConfig {
        empty_grace: Duration::from_secs(2),
        ..RoomActorConfig::default()
    });
    assert_eq!(sim.run(1_900), None);
    assert_eq!(sim.run(200), Some("empty"));
    assert!(matches!(
        sim.writes.last(),
        Some(PresenceOp::DropCheckpoint)
    ));
}

#[test]
fn checkpoints_follow_their_interval_while_the_lease_is_held() {
    let mut sim = Sim::new(RoomActorConfig {
        checkpoint_interval: Duration::from_secs(1),
        ..RoomActorConfig::default()
    });
    let q = Queue::new(1 << 16);
    sim.attach(1, "w1", 1, &q);
    sim.run(3_050);
    let n = |sim: &Sim| {
        sim.writes
            .iter()
            .filter(|w| matches!(w, PresenceOp::Checkpoint(_)))
            .count()
    };
    assert_eq!(n(&sim), 3);
    sim.lease.0.store(false, Ordering::SeqCst);
    sim.run(2_000);
    assert_eq!(n(&sim), 3, "none while the lease is unconfirmed");
}

/// A room of 50: every member gets every broadcast's frame, its envelopes numbered without a
/// gap, each one exactly prost's encoding of what it says (the envelopes share chunks). Also
/// the driver of the instruction counts in `docs/BENCHMARKS.md` (issue 16).
#[test]
fn fifty_members_get_every_broadcast_in_order_and_byte_exact() {
    let mut sim = Sim::new(RoomActorConfig::default());
    let qs: Vec<Queue> = (0..50).map(|_| Queue::new(4096)).collect();
    for (i, q) in qs.iter().enumerate() {
        let n = i as u64 + 1;
        sim.attach(n, &format!("w{n}"), n, q);
    }
    sim.run(200);
    for q in &qs {
        q.take();
    }
    // 2 s of broadcasts at 20 Hz, read back every 100 ms as the sessions would.
    let mut per_member = vec![Vec::new(); qs.len()];
    for _ in 0..20 {
        sim.run(100);
        for (i, q) in qs.iter().enumerate() {
            per_member[i].extend(q.take());
        }
    }
    for got in &per_member {
        let envs: Vec<(pb::ServerEnvelope, &[u8])> = got
            .iter()
            .filter_map(|m| match &m.body {
                Some(node_outbound::Body::ServerEnvelope(b)) => Some((
                    pb::ServerEnvelope::decode(b.as_ref()).expect("an envelope"),
                    b.as_ref(),
                )),
                _ => None,
            })
            .collect();
        let frames = envs
            .iter()
            .filter(|(e, _)| matches!(e.body, Some(server_envelope::Body::SnapshotFrame(_))))
            .count();
        assert_eq!(frames, 40, "one frame per broadcast");
        for w in envs.windows(2) {
            assert_eq!(w[1].0.sequence, w[0].0.sequence.wrapping_add(1));
        }
        for (env, bytes) in &envs {
            assert_eq!(*bytes, env.encode_to_vec().as_slice());
        }
    }
}
