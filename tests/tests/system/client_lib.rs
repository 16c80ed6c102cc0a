//! `plaza-client` against a real Plaza (issue 13): a walker and an observer built on the
//! library; the observer's replica directory follows the walker with smoothed positions, and a
//! lost connection resumes with the same session and entity while the replica keeps its render
//! binding and does not jump.

use std::time::{Duration, Instant};

use plaza_client::tokio::{Client, ClientOptions, Polled};
use plaza_client::{Event, ReplicaDirectory};
use plaza_proto::pb;
use plaza_tests::{start_plaza, test_config, ws_url};

/// Drives `c` until `until`, feeding `dir` and rendering it each 16 ms; returns the events.
async fn pump(
    c: &mut Client,
    dir: &mut ReplicaDirectory<u32>,
    until: Instant,
    mut each_frame: impl FnMut(&ReplicaDirectory<u32>),
) -> Vec<Event> {
    let mut evs = Vec::new();
    let mut next = Instant::now();
    while Instant::now() < until {
        match c.next(Some(next.min(until))).await {
            Polled::Event(e) => {
                dir.handle_event(&e, c.now());
                let ids: Vec<u32> = dir.unbound_entries().collect();
                for id in ids {
                    dir.bind(id, id).unwrap();
                }
                evs.push(e);
            }
            Polled::Deadline => {
                next += Duration::from_millis(16);
                dir.advance(c.now());
                each_frame(dir);
            }
            Polled::Ended => panic!("client ended"),
        }
    }
    evs
}

fn joined(evs: &[Event]) -> Option<u32> {
    evs.iter().rev().find_map(|e| match e {
        Event::Joined(j) => Some(j.entity),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_client_smooths_and_resumes_with_its_entity() {
    let plaza = start_plaza(&test_config()).await;
    let url = ws_url(&plaza);
    let mut obs = Client::connect(ClientOptions::new(&url).room("lib"))
        .await
        .unwrap();
    let mut dir: ReplicaDirectory<u32> = ReplicaDirectory::default();
    let evs = pump(
        &mut obs,
        &mut dir,
        Instant::now() + Duration::from_millis(500),
        |_| {},
    )
    .await;
    let me = joined(&evs).expect("observer joined");
    let session = obs.connection().session_id();

    // A walker: +x at 2 m/s, 20 moves a second, in a task.
    let walker = tokio::spawn(async move {
        let mut w = Client::connect(ClientOptions::new(url).room("lib"))
            .await
            .unwrap();
        let mut spawn = None;
        let mut entity = 0;
        let t_end = Instant::now() + Duration::from_secs(6);
        let mut next = Instant::now();
        let mut first = true;
        let mut x = 0.0f32;
        while Instant::now() < t_end {
            match w.next(Some(next)).await {
                Polled::Event(Event::Joined(j)) => {
                    spawn = Some(j.spawn);
                    entity = j.entity;
                    x = j.spawn[0];
                }
                Polled::Event(_) => {}
                Polled::Deadline => {
                    next += Duration::from_millis(50);
                    let Some(s) = spawn else { continue };
                    if !first {
                        x += 0.1;
                    }
                    let t = w.now();
                    w.connection_mut().send_movement(pb::Movement {
                        position: Some(pb::Vec3 {
                            x,
                            y: s[1],
                            z: s[2],
                        }),
                        velocity: Some(pb::Vec3 {
                            x: 2.0,
                            y: 0.0,
                            z: 0.0,
                        }),
                        movement_kind: pb::MovementKind::Walk as i32,
                        anim_flags: 1,
                        is_instant: first,
                        timestamp: t,
                        ..Default::default()
                    });
                    first = false;
                }
                Polled::Ended => panic!("walker ended"),
            }
        }
        entity
    });

    // The observer sees the walker and its smoothed position advances.
    let mut xs = Vec::new();
    pump(
        &mut obs,
        &mut dir,
        Instant::now() + Duration::from_secs(2),
        |d| {
            if let Some(p) = d.iter().find(|r| r.kind == 0).and_then(|r| r.position()) {
                xs.push(p[0]);
            }
        },
    )
    .await;
    assert!(xs.len() > 30, "rendered {} frames of the walker", xs.len());
    assert!(
        xs.last().unwrap() - xs.first().unwrap() > 1.0,
        "it walked: {xs:?}"
    );
    let walker_entity = dir.iter().find(|r| r.kind == 0).map(|r| r.entity).unwrap();
    assert_eq!(dir.get(walker_entity).unwrap().binding, Some(walker_entity));
    let inserted = dir.stats().inserted;

    // The observer's connection is lost: it resumes, same session, same entity; the replica
    // keeps its binding and the shown position does not jump.
    let before = dir.get(walker_entity).unwrap().position().unwrap();
    obs.drop_transport();
    let mut steps = Vec::new();
    let mut last: Option<[f64; 3]> = None;
    let evs = pump(
        &mut obs,
        &mut dir,
        Instant::now() + Duration::from_secs(2),
        |d| {
            if let Some(p) = d.get(walker_entity).and_then(|r| r.position()) {
                if let Some(l) = last {
                    steps.push((p[0] - l[0]).abs());
                }
                last = Some(p);
            }
        },
    )
    .await;
    assert!(
        evs.iter()
            .any(|e| matches!(e, Event::Negotiated { resumed: true, .. })),
        "resumed: {evs:?}"
    );
    assert_eq!(joined(&evs), Some(me), "same entity");
    assert_eq!(obs.connection().session_id(), session, "same session (u64)");
    let r = dir.get(walker_entity).expect("the replica is still there");
    assert_eq!(r.binding, Some(walker_entity), "binding kept");
    assert_eq!(dir.stats().inserted, inserted, "no new entry");
    assert!(dir.stats().kept_across_resume >= 1);
    assert!(
        r.smoothing().snaps == [0; 4],
        "no snap: {:?}",
        r.smoothing().snaps
    );
    // At 2 m/s a 16 ms frame moves 3 cm; the resume blends at 5 m/s at most on top of it.
    let max_step = steps.iter().copied().fold(0.0, f64::max);
    assert!(
        max_step < 0.25,
        "largest step {max_step} m (before {before:?})"
    );
    assert_eq!(obs.connection().stats().resyncs, 0);
    assert_eq!(walker.await.unwrap(), walker_entity);
    obs.close().await;
    plaza.shutdown().await;
}
