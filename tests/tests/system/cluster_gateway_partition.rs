//! Multi-process partition between the gateway and one room node (REQUIREMENTS.md F6): the
//! third node registers a [`Blackhole`] proxy in front of its gRPC port as its address, so
//! every gateway ↔ node stream to it runs through the proxy, which the test cuts mid-run
//! (bytes stop both ways; nothing is reset). The node still reaches Redis and keeps its leases.
//!
//! What must hold (G1, G4): the gateway notices the silent streams and tells its clients the
//! room is moving (RoomStatus MOVING) while it keeps their connections answered; no second
//! activation commits while the partitioned node holds the lease (the event-log checker); once
//! the link heals (or the node's rooms give up their leases), every session is back in its room
//! with the same entity; no bot is lost, none is closed 4004, and the bots' ping RTT p99 stays
//! under 1 s.
//!
//! Run on the shipped defaults (lease TTL 10 s).

use std::net::SocketAddr;
use std::time::Duration;

use plaza_proto::pb;
use plaza_tests::blackhole::Blackhole;
use plaza_tests::cluster::{Cluster, ClusterOpts, NodeSpawn, assert_fault_held, free_port};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_cut_from_a_node_keeps_its_sessions() {
    let mut c = Cluster::start(ClusterOpts {
        nodes: 2,
        ..ClusterOpts::default()
    })
    .await
    .unwrap();
    let listen: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let link = Blackhole::start(listen).await.unwrap();
    let idx = c
        .start_node_with(NodeSpawn {
            listen: Some(listen),
            advertise: Some(link.addr().to_string()),
            ..NodeSpawn::default()
        })
        .await
        .unwrap();
    let cut_for = Duration::from_secs(20);
    let cfg = c.load_config(60, 6, "f6-", 10 + cut_for.as_secs() + 25);
    let bots = cfg.bots;
    let load = tokio::spawn(plaza_load::run(cfg));
    c.wait_all_online(bots).await;

    // A probe in a room of the partitioned-to-be node (join rooms until one lands there).
    let victim_prefix = format!("{}.", c.nodes[idx].name);
    let (mut probe, room, entity) = c.probe_on_node(idx, "f6-").await;
    probe.pump_for(Duration::from_secs(1)).await.unwrap();
    let frames_before = probe.frames.len();
    assert!(frames_before > 0, "the probe gets frames before the cut");

    link.cut();
    eprintln!("cut the gateway from {victim_prefix}* (probe in {room})");
    let cut = tokio::time::Instant::now();
    // While cut, the probe's connection stays answered and it is told the room is moving.
    let mut told_moving = None;
    while cut.elapsed() < cut_for {
        probe
            .pump_for(Duration::from_millis(200))
            .await
            .expect("the probe stays connected through the cut");
        if told_moving.is_none()
            && probe
                .room_statuses
                .iter()
                .any(|s| s.kind == pb::RoomStatusKind::Moving as i32)
        {
            told_moving = Some(cut.elapsed());
        }
    }
    let told = told_moving.expect("the probe was told its room is moving");
    eprintln!("probe told MOVING {told:?} after the cut");
    link.heal();
    let healed = tokio::time::Instant::now();
    // Back in its room (on whichever node holds it now), same entity, frames flowing again.
    let frames_at_heal = probe.frames.len();
    let deadline = healed + Duration::from_secs(15);
    loop {
        probe
            .pump_for(Duration::from_millis(200))
            .await
            .expect("the probe stays connected after the heal");
        if probe.frames.len() > frames_at_heal + 10 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the probe gets no frames after the heal (statuses {:?})\n{}",
            probe.room_statuses,
            c.gateway.log_tail(30)
        );
    }
    eprintln!("probe back {:?} after the heal", healed.elapsed());
    assert_eq!(probe.entity, entity, "same entity after the partition");
    assert!(
        probe
            .room_statuses
            .iter()
            .any(|s| s.kind == pb::RoomStatusKind::Back as i32),
        "the probe was told its room is back: {:?}",
        probe.room_statuses
    );
    probe.close().await;
    let report = load.await.unwrap().unwrap();
    assert_fault_held("gateway-node partition", &report, &c.event_logs());
}
