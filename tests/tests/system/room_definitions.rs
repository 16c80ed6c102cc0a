//! Issue 12 item 3 end to end: one Plaza process (the shipped defaults plus two `[[rooms]]`
//! entries, loaded from a config file as `plaza up --config` would), real WebSocket clients in
//! two rooms with different definitions.
//!
//! * `class-*`: tier class with its own interest cap (2), frame budget (150 B/s) and most
//!   members (4), on the built-in plaza geometry.
//! * `stadium-*`: tier stadium (cap 256, 32 kB/s) with its own geometry file (a 24 m arena,
//!   spawn at its centre) and most members (8).
//!
//! Each room's `Joined` describes its own values; each enforces its own cap (what a client
//! sees), budget (the delta-frame bytes a client gets while three avatars walk), member limit
//! (a join beyond it is refused with ROOM_FULL) and geometry (a move past the arena's wall is
//! corrected OUT_OF_BOUNDS; the same x is inside the plaza).

use std::path::{Path, PathBuf};
use std::time::Duration;

use plaza_proto::pb::{self, client_envelope};
use plaza_tests::{Client, start_plaza, test_config, walk_from, ws_url};

const PROP_KIND: u8 = 1;

/// The stadium's geometry: a 24 m square arena, spawn at its centre.
fn arena_definition(dir: &Path) -> PathBuf {
    let path = dir.join("arena.toml");
    std::fs::write(
        &path,
        r#"name = "arena"
bounds_min = [-12.0, -2.0, -12.0]
bounds_max = [12.0, 20.0, 12.0]
spawn = [0.0, 0.0, 0.0]

[[statics]]
shape = "box"
name = "floor"
center = [0.0, -0.5, 0.0]
half_extents = [13.0, 0.5, 13.0]

[[spawn_points]]
name = "pitch"
position = [5.0, 0.0, 5.0]
requestable = true
"#,
    )
    .unwrap();
    path
}

/// The test's config file: only the two `[[rooms]]` entries (everything else shipped).
fn config_file(dir: &Path, arena: &Path) -> PathBuf {
    let path = dir.join("plaza.toml");
    std::fs::write(
        &path,
        format!(
            r#"[[rooms]]
match = "class-*"
tier = "class"
interest_cap = 2
budget_bytes_per_s = 150
max_members = 4

[[rooms]]
match = "stadium-*"
tier = "stadium"
definition = "{}"
max_members = 8
"#,
            arena.display()
        ),
    )
    .unwrap();
    path
}

/// Avatars (not props, not itself) `c` holds.
fn others_seen(c: &Client) -> usize {
    c.decoder()
        .entities()
        .filter(|r| r.kind != PROP_KIND && r.id != c.entity)
        .count()
}

async fn pump_all(clients: &mut [Client], d: Duration) {
    for c in clients.iter_mut() {
        c.pump_for(d).await.expect("client stays connected");
    }
}

/// Clients 1.. walk back and forth along x around their spawn (0.25 m steps at 20 Hz) for
/// `secs`; client 0 stands. Returns the delta-frame bytes per second client 0 got meanwhile.
async fn walk_and_measure(clients: &mut [Client], t: &mut f64, secs: f64) -> f64 {
    let before = clients[0].delta_frame_bytes;
    let started = tokio::time::Instant::now();
    let mut step = 0u32;
    while started.elapsed().as_secs_f64() < secs {
        step += 1;
        *t += 0.05;
        // A triangle wave of ±1 m around the spawn.
        let phase = (step % 16) as f32;
        let dx = if phase < 8.0 { phase } else { 16.0 - phase } * 0.25 - 1.0;
        for c in clients.iter_mut().skip(1) {
            let s = c.spawn;
            c.move_to([s[0] + dx, s[1], s[2]], *t).await.unwrap();
        }
        pump_all(clients, Duration::from_millis(12)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let rate = (clients[0].delta_frame_bytes - before) as f64 / secs;
    // Back to the spawn (at most 1 m in 0.2 s) for whatever comes next.
    *t += 0.2;
    for c in clients.iter_mut().skip(1) {
        let s = c.spawn;
        c.move_to(s, *t).await.unwrap();
    }
    rate
}

async fn join_all(url: &str, room: &str, n: usize) -> Vec<Client> {
    let mut out = Vec::new();
    for _ in 0..n {
        let mut c = Client::connect(url).await.unwrap();
        c.join(room).await.unwrap();
        out.push(c);
    }
    out
}

/// A fifth client asks to join a room that admits `max`: refused with ROOM_FULL (close 4005).
async fn join_is_refused_full(url: &str, room: &str) {
    let mut c = Client::connect(url).await.unwrap();
    c.send(client_envelope::Body::Join(pb::Join {
        room_id: room.into(),
    }))
    .await
    .unwrap();
    let closed = c.until_closed().await.unwrap();
    assert_eq!(closed.code, Some(4005), "{room}: {closed:?}");
    assert!(
        closed
            .errors
            .iter()
            .any(|e| e.code == pb::ErrorCode::RoomFull as i32),
        "{room}: {closed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rooms_on_one_node_each_enforce_their_own_definition() {
    let dir = std::env::temp_dir().join(format!("plaza-room-defs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let arena = arena_definition(&dir);
    let file = config_file(&dir, &arena);
    // The config is loaded as the binary loads it: built-in defaults, then the file.
    let (loaded, _) = plaza_ops::config::load(Some(&file), Some(Default::default())).unwrap();
    assert_eq!(loaded.rooms.len(), 2);
    let mut cfg = test_config();
    cfg.rooms = loaded.rooms;
    let plaza = start_plaza(&cfg).await;
    let url = ws_url(&plaza);

    // --- the class room: 4 members at most, each sees its 2 nearest, 150 B/s of frames.
    let mut class = join_all(&url, "class-maths", 4).await;
    let j = class[0].joined.clone().expect("Joined");
    assert_eq!(j.capacity_tier, pb::CapacityTier::Class as i32);
    assert_eq!(j.interest_cap, 2);
    let room = j.room.expect("Joined.room");
    assert_eq!(
        (room.max_members, room.budget_bytes_per_s),
        (4, 150),
        "{room:?}"
    );
    assert_eq!(room.definition, "plaza");
    assert_eq!(room.bounds_max.unwrap().x, 32.0);
    join_is_refused_full(&url, "class-maths").await;

    // --- the stadium: its own geometry, 8 members at most, everyone seen, 32 kB/s.
    let mut stadium = join_all(&url, "stadium-final", 4).await;
    let j = stadium[0].joined.clone().expect("Joined");
    assert_eq!(j.capacity_tier, pb::CapacityTier::Stadium as i32);
    assert_eq!(j.interest_cap, 256);
    let room = j.room.expect("Joined.room");
    assert_eq!(
        (room.max_members, room.budget_bytes_per_s),
        (8, 32_000),
        "{room:?}"
    );
    assert_eq!(room.definition, "arena");
    assert_eq!(room.bounds_max.unwrap().x, 12.0);
    assert!(room.destinations.iter().any(|d| d.name == "pitch"));
    // Joiners appear around the arena's spawn (0, 0, 0), not the plaza's (0, 0, -8).
    for c in &stadium {
        assert!(c.spawn[2].abs() < 4.0, "spawned at {:?}", c.spawn);
    }
    for c in &class {
        assert!((c.spawn[2] + 8.0).abs() < 4.0, "spawned at {:?}", c.spawn);
    }

    // Cap and budget, measured while three avatars of each room walk.
    let mut t = 1.0;
    for c in class.iter_mut().chain(stadium.iter_mut()) {
        let s = c.spawn;
        c.move_to(s, t).await.unwrap();
    }
    let class_rate = walk_and_measure(&mut class, &mut t, 3.0).await;
    let stadium_rate = walk_and_measure(&mut stadium, &mut t, 3.0).await;
    pump_all(&mut class, Duration::from_millis(200)).await;
    pump_all(&mut stadium, Duration::from_millis(200)).await;
    for c in &class {
        assert_eq!(others_seen(c), 2, "class cap 2 of 3 others");
        assert!(c.corrections.is_empty(), "{:?}", c.corrections);
    }
    for c in &stadium {
        assert_eq!(others_seen(c), 3, "the stadium shows all 3 others");
        assert!(c.corrections.is_empty(), "{:?}", c.corrections);
    }
    eprintln!(
        "delta-frame bytes/s of a standing viewer: class {class_rate:.0}, stadium {stadium_rate:.0}"
    );
    // The class budget (150 B/s, some slack for a frame's mandatory parts) holds; the stadium,
    // with the same walkers (unbudgeted, about 230 B/s for the class viewer's two), sends more
    // than the class budget allows.
    assert!(class_rate <= 150.0 * 1.2, "class: {class_rate:.0} B/s");
    assert!(
        stadium_rate > 150.0 * 1.2 && stadium_rate > class_rate * 1.5,
        "stadium: {stadium_rate:.0} B/s (class {class_rate:.0})"
    );

    // Geometry: the arena's wall is at x = 12; the plaza's at 32.
    let a = &mut stadium[1];
    let from = a.spawn;
    walk_from(a, from, [11.5, 0.0, from[2]], &mut t).await;
    t += 0.1;
    a.move_to([12.4, 0.0, from[2]], t).await.unwrap();
    a.pump_for(Duration::from_millis(300)).await.unwrap();
    let c = a
        .corrections
        .last()
        .expect("a move past the arena's wall is corrected");
    assert_eq!(c.reason, pb::RejectReason::OutOfBounds as i32, "{c:?}");
    let b = &mut class[1];
    let from = b.spawn;
    // South of the fountain, nothing in the way along z = -8 … -10.
    let lane = [from[0], 0.0, -10.0];
    walk_from(b, from, lane, &mut t).await;
    walk_from(b, lane, [12.4, 0.0, -10.0], &mut t).await;
    assert!(b.corrections.is_empty(), "x = 12.4 is inside the plaza");

    // The stadium admits more than the class room's 4.
    let mut fifth = Client::connect(&url).await.unwrap();
    fifth.join("stadium-final").await.unwrap();
    stadium.push(fifth);

    for c in class.into_iter().chain(stadium) {
        c.close().await;
    }
    plaza.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
