//! Drain handoff between two nodes' room supervisors sharing one directory: the draining node's
//! room saves its state (held props, open and active consents, counters), the next activation
//! on the other node restores it, and sessions that re-attach find their avatar, prop and
//! consents where they were; the audit trail continues gap-free under the newer epoch; a
//! handed-off session that never comes back leaves after the grace.

use std::sync::Arc;
use std::time::Duration;

use plaza_directory::{MemoryDirectory, SharedDirectory};
use plaza_node_proto::{NodeOutbound, node_outbound};
use plaza_proto::pb::{self, client_envelope, server_envelope};
use plaza_room_actor::EventLog;
use plaza_room_actor::metrics::{EventLabel, NodeMetrics};
use plaza_room_actor::room::{RoomActorConfig, RoomMsg};
use plaza_room_actor::supervisor::{Rooms, RoomsArgs};
use prost::Message as _;
use ractor::ActorRef;
use tokio::sync::mpsc;

const ROOM: &str = "hall";

fn room_cfg() -> RoomActorConfig {
    let mut cfg = RoomActorConfig {
        presence_ttl: Duration::from_secs(2),
        ..Default::default()
    };
    // Spawn beside crate 1 so pickups are in reach without walking.
    cfg.room.definition.spawn = [5.5, 0.0, 3.0];
    cfg.room.reach_m = 4.0;
    cfg
}

async fn node(id: &str, dir: &SharedDirectory, metrics: &NodeMetrics) -> Rooms {
    Rooms::start(RoomsArgs {
        node_id: id.into(),
        room_cfg: room_cfg(),
        metrics: metrics.clone(),
        directory: dir.clone(),
        lease_ttl: Duration::from_secs(3),
        events: EventLog::disabled(),
    })
    .await
    .unwrap()
    .0
}

struct Sess {
    session: u64,
    room: ActorRef<RoomMsg>,
    rx: mpsc::Receiver<NodeOutbound>,
    entity: u32,
    seq: u32,
}

impl Sess {
    async fn attach(room: &ActorRef<RoomMsg>, session: u64, entity: u32, link_id: u64) -> Self {
        let (tx, mut rx) = mpsc::channel(1024);
        room.cast(RoomMsg::Join {
            session,
            wallet: format!("0x{session}"),
            tx,
            entity,
            link_id,
            operator: false,
        })
        .unwrap();
        let entity = loop {
            let m = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .expect("attach acknowledged in time")
                .expect("stream open");
            if let Some(node_outbound::Body::Ack(a)) = m.body {
                break a.entity_id;
            }
        };
        Self {
            session,
            room: room.clone(),
            rx,
            entity,
            seq: 0,
        }
    }

    fn send(&mut self, body: client_envelope::Body) {
        self.seq += 1;
        self.room
            .cast(RoomMsg::Input {
                session: self.session,
                envelope: pb::ClientEnvelope {
                    sequence: self.seq,
                    body: Some(body),
                    ..Default::default()
                },
            })
            .unwrap();
    }

    fn consent(&mut self, op: pb::ConsentOp, kind: &str, target: u32, id: u64) {
        self.send(client_envelope::Body::Consent(pb::ConsentAction {
            op: op as i32,
            kind: kind.into(),
            target_entity: target,
            consent_id: id,
        }));
    }

    fn interact(&mut self, kind: pb::InteractionKind, at: [f32; 3]) {
        self.send(client_envelope::Body::Interaction(pb::Interaction {
            kind: kind as i32,
            prop_id: 1,
            position: Some(pb::Vec3 {
                x: at[0],
                y: at[1],
                z: at[2],
            }),
            velocity: None,
            room_id: String::new(),
        }));
    }

    /// The next event matching `f` (other envelopes are skipped).
    async fn event<F: FnMut(&pb::event::Kind) -> bool>(
        &mut self,
        what: &str,
        mut f: F,
    ) -> pb::event::Kind {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let m = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .unwrap_or_else(|_| panic!("{what}: no such event in time"))
                .unwrap_or_else(|| panic!("{what}: stream ended"));
            let Some(node_outbound::Body::ServerEnvelope(bytes)) = m.body else {
                continue;
            };
            let env = pb::ServerEnvelope::decode(bytes).unwrap();
            if let Some(server_envelope::Body::Event(e)) = env.body
                && let Some(k) = e.kind
                && f(&k)
            {
                return k;
            }
        }
    }

    /// Waits until the stream ends (the room stopped).
    async fn closed(&mut self) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while self.rx.recv().await.is_some() {}
        })
        .await
        .expect("the stream ends when the room stops");
    }
}

fn consent_is(k: &pb::event::Kind, state: &str) -> Option<u64> {
    match k {
        pb::event::Kind::Consent(c) if c.state == state => Some(c.consent_id),
        _ => None,
    }
}

fn placement(m: &NodeMetrics, event: &str) -> u64 {
    m.placement_events
        .get_or_create(&EventLabel {
            event: event.into(),
        })
        .get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_room_comes_back_with_its_props_and_consents_on_another_node() {
    let dir: SharedDirectory = Arc::new(MemoryDirectory::new());
    let (ma, mb) = (NodeMetrics::default(), NodeMetrics::default());
    let a = node("node-a", &dir, &ma).await;
    let b = node("node-b", &dir, &mb).await;

    let ra = a.get_or_spawn(ROOM).await.unwrap();
    let mut s1 = Sess::attach(&ra, 101, 0, 1).await;
    let mut s2 = Sess::attach(&ra, 102, 0, 1).await;
    let mut s3 = Sess::attach(&ra, 103, 0, 1).await;
    let (e1, e2) = (s1.entity, s2.entity);

    // s1 holds crate 1.
    s1.interact(pb::InteractionKind::Pickup, [0.0; 3]);
    let k = s1
        .event("pickup", |k| matches!(k, pb::event::Kind::Prop(_)))
        .await;
    let pb::event::Kind::Prop(p) = k else {
        unreachable!()
    };
    assert_eq!((p.prop_id, p.holder_entity), (1, e1));
    let rev = p.revision;
    // s1 and s2 hold hands (active); s2 asks s1 to follow (open, requested).
    s1.consent(pb::ConsentOp::Request, "hand_hold", e2, 0);
    let k = s2
        .event("requested", |k| consent_is(k, "requested").is_some())
        .await;
    let hold = consent_is(&k, "requested").unwrap();
    s2.consent(pb::ConsentOp::Consent, "", 0, hold);
    s1.event("consented", |k| consent_is(k, "consented") == Some(hold))
        .await;
    s1.consent(pb::ConsentOp::Activate, "", 0, hold);
    s2.event("active", |k| consent_is(k, "active") == Some(hold))
        .await;
    s2.consent(pb::ConsentOp::Request, "follow", e1, 0);
    let k = s1
        .event("follow requested", |k| consent_is(k, "requested").is_some())
        .await;
    let follow = consent_is(&k, "requested").unwrap();

    // Drain node a: the room saves its state, the handoff is stored, the room stops.
    assert_eq!(a.drain().await, 1);
    s1.closed().await;
    s2.closed().await;
    s3.closed().await;

    // The next activation, on node b (once a's writer has released the lease).
    let rb = {
        let mut got = None;
        for _ in 0..100 {
            if let Ok(r) = b.get_or_spawn(ROOM).await {
                got = Some(r);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        got.expect("node b activates the room")
    };
    assert_eq!(placement(&mb, "handoff_taken"), 1);
    // s1 and s2 resume (their gateway asks for the same entity); s3 never comes back.
    let mut s1 = Sess::attach(&rb, 101, e1, 2).await;
    let mut s2 = Sess::attach(&rb, 102, e2, 2).await;
    assert_eq!((s1.entity, s2.entity), (e1, e2), "same avatars");

    // The prop is still s1's: s2 cannot take it, s1 can put it down.
    s2.interact(pb::InteractionKind::Pickup, [0.0; 3]);
    let k = s2
        .event("refused pickup", |k| {
            matches!(k, pb::event::Kind::Rejected(_))
        })
        .await;
    assert!(
        matches!(&k, pb::event::Kind::Rejected(r) if r.reason == "already_held"),
        "{k:?}"
    );
    s1.interact(pb::InteractionKind::Place, [5.0, 0.25, 4.5]);
    let k = s1
        .event(
            "placed",
            |k| matches!(k, pb::event::Kind::Prop(p) if p.holder_entity == 0),
        )
        .await;
    let pb::event::Kind::Prop(p) = k else {
        unreachable!()
    };
    assert!(
        p.revision > rev,
        "revisions continue: {} > {rev}",
        p.revision
    );

    // The active hand-hold can be released, the open follow request answered.
    s2.consent(pb::ConsentOp::Release, "", 0, hold);
    s1.event("released", |k| consent_is(k, "released") == Some(hold))
        .await;
    s1.consent(pb::ConsentOp::Consent, "", 0, follow);
    s2.event("follow consented", |k| {
        consent_is(k, "consented") == Some(follow)
    })
    .await;

    // One gap-free audit trail across both activations; the later records carry b's newer epoch.
    let trail = dir.audit_read(ROOM, 1, 100).await.unwrap();
    let kinds: Vec<&str> = trail.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "consent.requested",
            "consent.consented",
            "consent.active",
            "consent.requested",
            "consent.released",
            "consent.consented",
        ]
    );
    for (i, r) in trail.iter().enumerate() {
        assert_eq!(r.seq, i as u64 + 1, "gap-free: {trail:?}");
    }
    assert!(trail[4].epoch > trail[3].epoch, "{trail:?}");

    // s3 did not re-attach within the grace (presence TTL, 2 s): its avatar leaves.
    let mut expired = false;
    for _ in 0..100 {
        if placement(&mb, "handoff_member_expired") == 1 {
            expired = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(expired, "the absent member's grace ran out");
    // Its entity is free again; s1's and s2's are not.
    let mut s4 = Sess::attach(&rb, 104, s3.entity, 1).await;
    assert_eq!(s4.entity, s3.entity, "the absent member's entity was freed");
    let e4 = s4.entity;
    s4.interact(pb::InteractionKind::Pickup, [0.0; 3]);
    s4.event(
        "s4 picks up",
        |k| matches!(k, pb::event::Kind::Prop(p) if p.holder_entity == e4),
    )
    .await;
    a.stop();
    b.stop();
}
