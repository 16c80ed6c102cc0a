//! The shared directory test suite: every case runs against both backends through [`Env`].
//! Time passes through [`Env::elapse`] (a manual clock in memory; bounded polling of Redis
//! server time on Redis), never through fixed sleeps.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashSet;

use plaza_directory::{
    AnnounceOutcome, Directory, DirectoryError, Epoch, NodeInfo, PresenceEntry, SharedDirectory,
    Sources,
};

/// A backend under test.
#[async_trait::async_trait]
pub trait Env: Send + Sync {
    /// The directory.
    fn dir(&self) -> &dyn Directory;
    /// The same directory, shareable across tasks.
    fn shared(&self) -> SharedDirectory;
    /// Lets at least `ms` milliseconds of store time pass.
    async fn elapse(&self, ms: u64);
    /// A TTL that tests let lapse with `elapse` (short on Redis).
    fn short_ttl(&self) -> u64;
}

/// A TTL that never lapses during a test.
pub const LONG: u64 = 60_000;

pub fn node(id: &str, load: u32, draining: bool) -> NodeInfo {
    NodeInfo {
        id: id.into(),
        addr: format!("http://{id}:7100"),
        load,
        draining,
        heartbeat_until_ms: 0,
    }
}

pub fn entry(wallet: &str, room: &str, entity: u32, node: &str, sources: Sources) -> PresenceEntry {
    PresenceEntry {
        wallet: wallet.into(),
        entity,
        room: room.into(),
        sources,
        node: node.into(),
        profile_version: 0,
        lease_until_ms: 0,
    }
}

fn assert_stale(r: Result<impl std::fmt::Debug, DirectoryError>, current: Option<Epoch>) {
    match r {
        Err(DirectoryError::StaleEpoch { current: c, .. }) => assert_eq!(c, current),
        other => panic!("expected StaleEpoch(current {current:?}), got {other:?}"),
    }
}

// === nodes and placement ===

pub async fn nodes_heartbeat_and_expiry(env: &dyn Env) {
    let d = env.dir();
    d.register_node(node("a", 1, false), LONG).await.unwrap();
    d.register_node(node("b", 2, false), env.short_ttl())
        .await
        .unwrap();
    let live = d.live_nodes().await.unwrap();
    assert_eq!(
        live.iter().map(|n| n.id.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(live[1].load, 2);
    assert!(live[0].heartbeat_until_ms > live[1].heartbeat_until_ms);
    // Heartbeat updates load and draining.
    d.register_node(node("a", 9, true), LONG).await.unwrap();
    env.elapse(env.short_ttl() + 1).await;
    let live = d.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(
        (live[0].id.as_str(), live[0].load, live[0].draining),
        ("a", 9, true)
    );
    assert!(d.sweep().await.unwrap() >= 1);
    d.deregister_node("a").await.unwrap();
    assert!(d.live_nodes().await.unwrap().is_empty());
}

pub async fn place_policy(env: &dyn Env) {
    let d = env.dir();
    let e = d.place("r").await.unwrap_err();
    assert_eq!(e.code(), "unavailable");
    assert!(e.is_retryable());
    d.register_node(node("a", 0, false), LONG).await.unwrap();
    d.register_node(node("b", 0, true), LONG).await.unwrap();
    for i in 0..20 {
        assert_eq!(
            d.place(&format!("room{i}")).await.unwrap().id,
            "a",
            "draining skipped"
        );
    }
    // Once placed, place() returns the owner even if the policy would now pick another node.
    d.register_node(node("b", 0, false), LONG).await.unwrap();
    d.register_node(node("a", 0, true), LONG).await.unwrap();
    let p = d.claim("r", "a", LONG).await.unwrap();
    assert_eq!(d.place("r").await.unwrap().id, "a");
    d.release("r", "a", p.epoch).await.unwrap();
    assert_eq!(d.place("r").await.unwrap().id, "b");
    // Spread: with equal load both nodes get rooms.
    d.register_node(node("a", 0, false), LONG).await.unwrap();
    let mut ids = HashSet::new();
    for i in 0..64 {
        ids.insert(d.place(&format!("spread{i}")).await.unwrap().id);
    }
    assert_eq!(ids.len(), 2);
}

pub async fn claim_renew_conflict_release(env: &dyn Env) {
    let d = env.dir();
    assert_eq!(d.resolve("r").await.unwrap(), None);
    let p1 = d.claim("r", "a", LONG).await.unwrap();
    assert_eq!((p1.room.as_str(), p1.node.as_str()), ("r", "a"));
    // Re-claim by the owner renews with the same epoch.
    let again = d.claim("r", "a", LONG).await.unwrap();
    assert_eq!(again.epoch, p1.epoch);
    assert!(again.lease_until_ms >= p1.lease_until_ms);
    let e = d.claim("r", "b", LONG).await.unwrap_err();
    assert!(matches!(e, DirectoryError::Conflict(_)), "{e:?}");
    assert_eq!(d.resolve("r").await.unwrap().unwrap().epoch, p1.epoch);
    // Renew extends.
    let r = d.renew("r", "a", p1.epoch, 3 * LONG).await.unwrap();
    assert!(r.lease_until_ms >= p1.lease_until_ms + LONG);
    assert_eq!(
        d.renew("r", "b", p1.epoch, LONG).await.unwrap_err(),
        DirectoryError::NotOwner
    );
    d.check_epoch("r", p1.epoch).await.unwrap();
    assert_eq!(
        d.release("r", "b", p1.epoch).await.unwrap_err(),
        DirectoryError::NotOwner
    );
    d.release("r", "a", p1.epoch).await.unwrap();
    assert_eq!(d.resolve("r").await.unwrap(), None);
    assert_stale(d.check_epoch("r", p1.epoch).await, None);
    // The next claim gets a strictly greater epoch.
    let p2 = d.claim("r", "b", LONG).await.unwrap();
    assert!(p2.epoch > p1.epoch);
    assert_stale(d.check_epoch("r", p1.epoch).await, Some(p2.epoch));
    assert_stale(d.renew("r", "a", p1.epoch, LONG).await, Some(p2.epoch));
    assert_stale(d.release("r", "a", p1.epoch).await, Some(p2.epoch));
    d.release("r", "b", p2.epoch).await.unwrap();
    // Releasing an unplaced room is idempotent.
    d.release("r", "b", p2.epoch).await.unwrap();
    // Rooms are independent, and an epoch names one activation of one room.
    let q = d.claim("other", "a", LONG).await.unwrap();
    assert!(q.epoch > p2.epoch);
    d.check_epoch("other", q.epoch).await.unwrap();
    assert_stale(d.check_epoch("r", q.epoch).await, None);
}

pub async fn lease_expiry_gives_new_epoch(env: &dyn Env) {
    let d = env.dir();
    let p1 = d.claim("r", "a", env.short_ttl()).await.unwrap();
    env.elapse(env.short_ttl() + 1).await;
    assert_eq!(d.resolve("r").await.unwrap(), None);
    assert_stale(d.check_epoch("r", p1.epoch).await, None);
    // An expired lease can not be renewed: the owner must stop and re-claim.
    assert_stale(d.renew("r", "a", p1.epoch, LONG).await, None);
    assert!(d.sweep().await.unwrap() >= 1);
    let p2 = d.claim("r", "b", LONG).await.unwrap();
    assert!(p2.epoch > p1.epoch);
    assert_eq!(d.resolve("r").await.unwrap().unwrap().node, "b");
    // The old owner's writes are refused.
    assert_stale(
        d.audit_append("r", p1.epoch, "k", "{}", 1).await,
        Some(p2.epoch),
    );
    let e = entry("w", "r", 1, "a", Sources::ROOM);
    assert_stale(d.presence_register(e, p1.epoch, LONG).await, Some(p2.epoch));
    assert_stale(d.put_handoff("r", p1.epoch, vec![1]).await, Some(p2.epoch));
}

pub async fn concurrent_claims_single_winner(env: &dyn Env) {
    let d = env.shared();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let d = d.clone();
        tasks.push(tokio::spawn(async move {
            d.claim("hot", &format!("n{i}"), LONG).await
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(p) => winners.push(p),
            Err(DirectoryError::Conflict(_)) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(d.resolve("hot").await.unwrap().unwrap(), winners[0]);
}

// === presence ===

pub async fn presence_register_add_release(env: &dyn Env) {
    let d = env.dir();
    let p = d.claim("r", "a", LONG).await.unwrap();
    d.presence_register(entry("w1", "r", 7, "a", Sources::ROOM), p.epoch, LONG)
        .await
        .unwrap();
    let got = d.presence_get("w1").await.unwrap().unwrap();
    assert_eq!(
        (got.entity, got.room.as_str(), got.sources),
        (7, "r", Sources::ROOM)
    );
    assert!(got.lease_until_ms > 0);
    assert_eq!(
        d.presence_by_entity("r", 7).await.unwrap().unwrap().wallet,
        "w1"
    );
    assert_eq!(d.presence_by_entity("r", 8).await.unwrap(), None);
    assert_eq!(d.presence_by_entity("other", 7).await.unwrap(), None);

    d.presence_add_source("w1", Sources::VOICE, p.epoch)
        .await
        .unwrap();
    d.presence_add_source("w1", Sources::VOICE, p.epoch)
        .await
        .unwrap();
    assert_eq!(
        d.presence_get("w1").await.unwrap().unwrap().sources,
        Sources::ROOM | Sources::VOICE
    );
    assert!(
        !d.presence_release("w1", Sources::ROOM, p.epoch)
            .await
            .unwrap()
    );
    assert_eq!(
        d.presence_get("w1").await.unwrap().unwrap().sources,
        Sources::VOICE
    );
    // Releasing a source the entry does not have changes nothing.
    assert!(
        !d.presence_release("w1", Sources::CHAT, p.epoch)
            .await
            .unwrap()
    );
    assert!(
        !d.presence_release("w1", Sources::ROOM, p.epoch)
            .await
            .unwrap()
    );
    assert!(
        d.presence_release("w1", Sources::VOICE, p.epoch)
            .await
            .unwrap()
    );
    assert_eq!(d.presence_get("w1").await.unwrap(), None);
    assert_eq!(d.presence_by_entity("r", 7).await.unwrap(), None);
    // Never negative: a second release of a deleted entry is false.
    assert!(
        !d.presence_release("w1", Sources::VOICE, p.epoch)
            .await
            .unwrap()
    );
    let e = d
        .presence_add_source("w1", Sources::ROOM, p.epoch)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "not_found");
    // Releasing several sources at once.
    d.presence_register(
        entry("w2", "r", 8, "a", Sources::ROOM | Sources::CHAT),
        p.epoch,
        LONG,
    )
    .await
    .unwrap();
    assert!(
        d.presence_release("w2", Sources::ALL, p.epoch)
            .await
            .unwrap()
    );
    assert!(d.peers(None).await.unwrap().is_empty());
}

pub async fn presence_fencing(env: &dyn Env) {
    let d = env.dir();
    let p1 = d.claim("r", "a", LONG).await.unwrap();
    let bad = Epoch::new(p1.epoch.era, p1.epoch.counter + 5);
    assert_stale(
        d.presence_register(entry("w", "r", 1, "a", Sources::ROOM), bad, LONG)
            .await,
        Some(p1.epoch),
    );
    assert_eq!(
        d.presence_register(entry("w", "r", 1, "b", Sources::ROOM), p1.epoch, LONG)
            .await
            .unwrap_err(),
        DirectoryError::NotOwner
    );
    assert_stale(
        d.presence_register(
            entry("w", "unclaimed", 1, "a", Sources::ROOM),
            p1.epoch,
            LONG,
        )
        .await,
        None,
    );
    d.presence_register(entry("w", "r", 1, "a", Sources::ROOM), p1.epoch, LONG)
        .await
        .unwrap();
    d.release("r", "a", p1.epoch).await.unwrap();
    let p2 = d.claim("r", "b", LONG).await.unwrap();
    assert_stale(
        d.presence_add_source("w", Sources::VOICE, p1.epoch).await,
        Some(p2.epoch),
    );
    assert_stale(
        d.presence_release("w", Sources::ROOM, p1.epoch).await,
        Some(p2.epoch),
    );
    assert_stale(
        d.presence_renew("a", "r", p1.epoch, LONG).await,
        Some(p2.epoch),
    );
    assert_eq!(
        d.presence_renew("a", "r", p2.epoch, LONG)
            .await
            .unwrap_err(),
        DirectoryError::NotOwner
    );
    assert_eq!(
        d.presence_get("w").await.unwrap().unwrap().sources,
        Sources::ROOM
    );
    // The new owner may release it.
    assert!(
        d.presence_release("w", Sources::ROOM, p2.epoch)
            .await
            .unwrap()
    );
}

pub async fn presence_lease_expiry_renew_sweep(env: &dyn Env) {
    let d = env.dir();
    let short = env.short_ttl();
    let p = d.claim("r", "a", LONG).await.unwrap();
    d.presence_register(entry("dies", "r", 1, "a", Sources::ROOM), p.epoch, short)
        .await
        .unwrap();
    d.presence_register(entry("lives", "r", 2, "a", Sources::ROOM), p.epoch, LONG)
        .await
        .unwrap();
    let before = d
        .presence_get("lives")
        .await
        .unwrap()
        .unwrap()
        .lease_until_ms;
    // Renewal extends every live entry of the room registered by the node.
    let n = d.presence_renew("a", "r", p.epoch, 4 * LONG).await.unwrap();
    assert_eq!(n, 2);
    let after = d
        .presence_get("lives")
        .await
        .unwrap()
        .unwrap()
        .lease_until_ms;
    assert!(after >= before + 2 * LONG, "{before} -> {after}");
    // Re-register "dies" with a short lease and let it lapse.
    d.presence_register(entry("dies", "r", 1, "a", Sources::ROOM), p.epoch, short)
        .await
        .unwrap();
    env.elapse(short + 1).await;
    assert_eq!(d.presence_get("dies").await.unwrap(), None);
    assert_eq!(d.presence_by_entity("r", 1).await.unwrap(), None);
    let peers = d.peers(None).await.unwrap();
    assert_eq!(
        peers.iter().map(|e| e.wallet.as_str()).collect::<Vec<_>>(),
        ["lives"]
    );
    // Expired entries are not renewed, and releasing them is a no-op.
    assert_eq!(d.presence_renew("a", "r", p.epoch, LONG).await.unwrap(), 1);
    assert!(
        !d.presence_release("dies", Sources::ROOM, p.epoch)
            .await
            .unwrap()
    );
    assert!(d.sweep().await.unwrap() >= 1);
    assert_eq!(d.sweep().await.unwrap(), 0);
    assert_eq!(d.peers(None).await.unwrap().len(), 1);
    // Its entity can be reused.
    d.presence_register(entry("new", "r", 1, "a", Sources::ROOM), p.epoch, LONG)
        .await
        .unwrap();
    assert_eq!(
        d.presence_by_entity("r", 1).await.unwrap().unwrap().wallet,
        "new"
    );
}

pub async fn dead_node_presence_expires(env: &dyn Env) {
    // A node dies: neither its room lease nor its presence is renewed; a sweep clears both.
    let d = env.dir();
    let short = env.short_ttl();
    let p = d.claim("r", "a", short).await.unwrap();
    for i in 0..5u32 {
        d.presence_register(
            entry(&format!("w{i}"), "r", i, "a", Sources::ROOM),
            p.epoch,
            short,
        )
        .await
        .unwrap();
    }
    assert_eq!(d.peers(None).await.unwrap().len(), 5);
    env.elapse(short + 1).await;
    assert!(d.peers(None).await.unwrap().is_empty());
    assert_eq!(d.sweep().await.unwrap(), 6);
    assert!(d.peers(None).await.unwrap().is_empty());
}

pub async fn entity_conflict_and_stale_eviction(env: &dyn Env) {
    let d = env.dir();
    let p1 = d.claim("r", "a", LONG).await.unwrap();
    d.presence_register(entry("w1", "r", 7, "a", Sources::ROOM), p1.epoch, LONG)
        .await
        .unwrap();
    let e = d
        .presence_register(entry("w2", "r", 7, "a", Sources::ROOM), p1.epoch, LONG)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "conflict");
    // After failover, the new activation reuses entity ids: the stale entry is evicted.
    d.release("r", "a", p1.epoch).await.unwrap();
    let p2 = d.claim("r", "b", LONG).await.unwrap();
    d.presence_register(entry("w2", "r", 7, "b", Sources::ROOM), p2.epoch, LONG)
        .await
        .unwrap();
    assert_eq!(d.presence_get("w1").await.unwrap(), None);
    assert_eq!(
        d.presence_by_entity("r", 7).await.unwrap().unwrap().wallet,
        "w2"
    );
}

pub async fn reregister_moves_rooms(env: &dyn Env) {
    let d = env.dir();
    let a = d.claim("r1", "a", LONG).await.unwrap();
    let b = d.claim("r2", "b", LONG).await.unwrap();
    assert_ne!(a.epoch, b.epoch, "epochs are unique across rooms");
    d.presence_register(
        entry("w", "r1", 1, "a", Sources::ROOM | Sources::VOICE),
        a.epoch,
        LONG,
    )
    .await
    .unwrap();
    d.presence_register(entry("w", "r2", 5, "b", Sources::ROOM), b.epoch, LONG)
        .await
        .unwrap();
    assert_eq!(d.presence_by_entity("r1", 1).await.unwrap(), None);
    let got = d.presence_get("w").await.unwrap().unwrap();
    assert_eq!(
        (got.room.as_str(), got.entity, got.sources),
        ("r2", 5, Sources::ROOM)
    );
    assert_eq!(d.presence_renew("a", "r1", a.epoch, LONG).await.unwrap(), 0);
    assert_eq!(d.presence_renew("b", "r2", b.epoch, LONG).await.unwrap(), 1);
    // r1's owner can not touch the moved wallet; the error names the wallet's new room.
    match d.presence_release("w", Sources::ROOM, a.epoch).await {
        Err(DirectoryError::StaleEpoch { room, current, .. }) => {
            assert_eq!((room.as_str(), current), ("r2", Some(b.epoch)));
        }
        other => panic!("expected stale epoch, got {other:?}"),
    }
    assert_eq!(
        d.presence_get("w").await.unwrap().unwrap().sources,
        Sources::ROOM
    );
}

/// A rejoin of the same room (the wallet re-registered, say on a new entity after a reconnect)
/// keeps the sources other services hold: a held voice flag is not dropped by the room.
pub async fn reregister_keeps_held_sources(env: &dyn Env) {
    let d = env.dir();
    let p = d.claim("r", "a", LONG).await.unwrap();
    d.presence_register(entry("w", "r", 1, "a", Sources::ROOM), p.epoch, LONG)
        .await
        .unwrap();
    d.presence_add_source("w", Sources::VOICE, p.epoch)
        .await
        .unwrap();
    d.presence_register(entry("w", "r", 2, "a", Sources::ROOM), p.epoch, LONG)
        .await
        .unwrap();
    let got = d.presence_get("w").await.unwrap().unwrap();
    assert_eq!(
        (got.entity, got.sources),
        (2, Sources::ROOM | Sources::VOICE)
    );
    assert_eq!(d.presence_by_entity("r", 1).await.unwrap(), None);
    // The room's own release leaves the wallet held by voice; voice's release ends it.
    assert!(
        !d.presence_release("w", Sources::ROOM, p.epoch)
            .await
            .unwrap()
    );
    assert_eq!(
        d.presence_get("w").await.unwrap().unwrap().sources,
        Sources::VOICE
    );
    // A rejoin while only voice holds it: the room source comes back beside voice.
    d.presence_register(entry("w", "r", 3, "a", Sources::ROOM), p.epoch, LONG)
        .await
        .unwrap();
    assert_eq!(
        d.presence_get("w").await.unwrap().unwrap().sources,
        Sources::ROOM | Sources::VOICE
    );
    assert!(
        !d.presence_release("w", Sources::VOICE, p.epoch)
            .await
            .unwrap()
    );
    assert!(
        d.presence_release("w", Sources::ROOM, p.epoch)
            .await
            .unwrap()
    );
    assert_eq!(d.presence_get("w").await.unwrap(), None);
}

pub async fn peers_filter(env: &dyn Env) {
    let d = env.dir();
    let p = d.claim("r", "a", LONG).await.unwrap();
    for (i, w) in ["w3", "w1", "w2"].iter().enumerate() {
        d.presence_register(entry(w, "r", i as u32, "a", Sources::ROOM), p.epoch, LONG)
            .await
            .unwrap();
    }
    let all = d.peers(None).await.unwrap();
    assert_eq!(
        all.iter().map(|e| e.wallet.as_str()).collect::<Vec<_>>(),
        ["w1", "w2", "w3"]
    );
    let f: Vec<String> = ["w3", "w1", "w1", "nobody"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let some = d.peers(Some(&f)).await.unwrap();
    assert_eq!(
        some.iter().map(|e| e.wallet.as_str()).collect::<Vec<_>>(),
        ["w1", "w3"]
    );
    assert!(d.peers(Some(&[])).await.unwrap().is_empty());
}

pub async fn profile_dedup(env: &dyn Env) {
    let d = env.dir();
    let a = |o: Result<AnnounceOutcome, DirectoryError>| o.unwrap();
    assert_eq!(
        a(d.announce_profile("w", 1, Sources::ROOM).await),
        AnnounceOutcome::Fresh
    );
    assert_eq!(
        a(d.announce_profile("w", 1, Sources::VOICE).await),
        AnnounceOutcome::Merged {
            sources: Sources::ROOM | Sources::VOICE
        }
    );
    assert_eq!(
        a(d.announce_profile("w", 0, Sources::CHAT).await),
        AnnounceOutcome::Dropped { current: 1 }
    );
    let o = a(d.announce_profile("w", 2, Sources::CHAT).await);
    assert_eq!(o, AnnounceOutcome::Superseded { previous: 1 });
    assert!(o.should_fetch());
    assert_eq!(
        a(d.announce_profile("w", 2, Sources::ROOM).await),
        AnnounceOutcome::Merged {
            sources: Sources::CHAT | Sources::ROOM
        }
    );
    // A registration picks up the announced version; later announcements raise it.
    let p = d.claim("r", "a", LONG).await.unwrap();
    d.presence_register(entry("w", "r", 1, "a", Sources::ROOM), p.epoch, LONG)
        .await
        .unwrap();
    assert_eq!(
        d.presence_get("w").await.unwrap().unwrap().profile_version,
        2
    );
    a(d.announce_profile("w", 3, Sources::ROOM).await);
    assert_eq!(
        d.presence_get("w").await.unwrap().unwrap().profile_version,
        3
    );
    a(d.announce_profile("w", 1, Sources::ROOM).await);
    assert_eq!(
        d.presence_get("w").await.unwrap().unwrap().profile_version,
        3
    );
    // The record dies with the entry.
    assert!(
        d.presence_release("w", Sources::ROOM, p.epoch)
            .await
            .unwrap()
    );
    assert_eq!(
        a(d.announce_profile("w", 1, Sources::ROOM).await),
        AnnounceOutcome::Fresh
    );
}

// === audit and handoff ===

pub async fn audit_gap_free_and_fenced(env: &dyn Env) {
    let d = env.dir();
    let p1 = d.claim("r", "a", LONG).await.unwrap();
    for i in 1..=3u64 {
        let seq = d
            .audit_append(
                "r",
                p1.epoch,
                "consent_granted",
                &format!("{{\"i\":{i}}}"),
                100 + i,
            )
            .await
            .unwrap();
        assert_eq!(seq, i);
    }
    let bad = Epoch::new(p1.epoch.era + 1, 1);
    assert_stale(d.audit_append("r", bad, "x", "{}", 0).await, Some(p1.epoch));
    assert_stale(
        d.audit_append("unclaimed", p1.epoch, "x", "{}", 0).await,
        None,
    );
    d.release("r", "a", p1.epoch).await.unwrap();
    assert_stale(d.audit_append("r", p1.epoch, "x", "{}", 0).await, None);
    let p2 = d.claim("r", "b", LONG).await.unwrap();
    assert_eq!(
        d.audit_append("r", p2.epoch, "consent_denied", "{}", 200)
            .await
            .unwrap(),
        4
    );
    let all = d.audit_read("r", 1, 100).await.unwrap();
    assert_eq!(all.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(all[0].detail, "{\"i\":1}");
    assert_eq!(all[0].at_ms, 101);
    assert_eq!(all[0].kind, "consent_granted");
    assert_eq!(all[2].epoch, p1.epoch);
    assert_eq!(
        (all[3].epoch, all[3].kind.as_str()),
        (p2.epoch, "consent_denied")
    );
    assert!(all.iter().all(|r| r.room == "r"));
    let mid = d.audit_read("r", 2, 2).await.unwrap();
    assert_eq!(mid.iter().map(|r| r.seq).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(d.audit_read("r", 0, 1).await.unwrap()[0].seq, 1);
    assert!(d.audit_read("r", 5, 10).await.unwrap().is_empty());
    assert!(d.audit_read("r", 1, 0).await.unwrap().is_empty());
    assert!(d.audit_read("nothing", 1, 10).await.unwrap().is_empty());
}

pub async fn audit_concurrent_appends(env: &dyn Env) {
    let d = env.shared();
    let p = d.claim("r", "a", LONG).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..20u64 {
        let d = d.clone();
        tasks.push(tokio::spawn(async move {
            d.audit_append("r", p.epoch, "k", &i.to_string(), i).await
        }));
    }
    let mut seqs = Vec::new();
    for t in tasks {
        seqs.push(t.await.unwrap().unwrap());
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
    let log = d.audit_read("r", 1, 100).await.unwrap();
    assert_eq!(log.len(), 20);
    for r in &log {
        // The record stored under each seq is the one whose append returned that seq.
        assert_eq!(r.seq as usize, log.iter().position(|x| x == r).unwrap() + 1);
    }
}

pub async fn handoff_roundtrip(env: &dyn Env) {
    let d = env.dir();
    let p1 = d.claim("r", "a", LONG).await.unwrap();
    assert_eq!(d.take_handoff("r").await.unwrap(), None);
    d.put_handoff("r", p1.epoch, vec![0, 1, 2, 255, 0])
        .await
        .unwrap();
    d.put_handoff("r", p1.epoch, vec![9, 0, 9]).await.unwrap();
    assert_stale(
        d.put_handoff("r", Epoch::new(0, 0), vec![1]).await,
        Some(p1.epoch),
    );
    d.release("r", "a", p1.epoch).await.unwrap();
    let p2 = d.claim("r", "b", LONG).await.unwrap();
    assert!(p2.epoch > p1.epoch);
    assert_eq!(
        d.take_handoff("r").await.unwrap(),
        Some((p1.epoch, vec![9, 0, 9]))
    );
    assert_eq!(d.take_handoff("r").await.unwrap(), None);
    d.put_handoff("r", p2.epoch, Vec::new()).await.unwrap();
    assert_eq!(
        d.take_handoff("r").await.unwrap(),
        Some((p2.epoch, Vec::new()))
    );
}

pub async fn held_resume_entries_live_with_their_holder(env: &dyn Env) {
    let d = env.dir();
    let short = env.short_ttl();
    assert_eq!(d.take_resume_held("g1", "t1").await.unwrap(), None);
    d.put_resume_held("g1", "t1", vec![1], short).await.unwrap();
    d.put_resume_held("g1", "t2", vec![2], short).await.unwrap();
    d.put_resume_held("g2", "t1", vec![9], short).await.unwrap();
    // One renewal of the holder keeps every entry it holds.
    env.elapse(short / 2).await;
    d.renew_resume_holder("g1", LONG).await.unwrap();
    env.elapse(short / 2 + 1).await;
    assert_eq!(d.take_resume_held("g1", "t1").await.unwrap(), Some(vec![1]));
    assert_eq!(d.take_resume_held("g1", "t1").await.unwrap(), None);
    // A holder that stopped renewing (a killed gateway): its entries lapsed.
    assert_eq!(d.take_resume_held("g2", "t1").await.unwrap(), None);
    d.renew_resume_holder("g2", LONG).await.unwrap();
    assert_eq!(d.take_resume_held("g2", "t1").await.unwrap(), None);
    assert_eq!(d.take_resume_held("g1", "t2").await.unwrap(), Some(vec![2]));
    // Held entries are not plain ones.
    d.put_resume_held("g1", "t3", vec![3], LONG).await.unwrap();
    assert_eq!(d.take_resume("t3").await.unwrap(), None);
    assert_eq!(
        d.put_resume_held("", "t", vec![], LONG)
            .await
            .unwrap_err()
            .code(),
        "invalid"
    );
    assert_eq!(
        d.renew_resume_holder("g1", 0).await.unwrap_err().code(),
        "invalid"
    );
}

pub async fn resume_entries_taken_once_and_expire(env: &dyn Env) {
    let d = env.dir();
    assert_eq!(d.take_resume("tok-a").await.unwrap(), None);
    d.put_resume("tok-a", vec![1, 0, 255], LONG).await.unwrap();
    d.put_resume("tok-a", vec![7, 7], LONG).await.unwrap();
    d.put_resume("tok-b", Vec::new(), LONG).await.unwrap();
    // Taken once, the latest value.
    assert_eq!(d.take_resume("tok-a").await.unwrap(), Some(vec![7, 7]));
    assert_eq!(d.take_resume("tok-a").await.unwrap(), None);
    assert_eq!(d.take_resume("tok-b").await.unwrap(), Some(Vec::new()));
    // Expired entries are gone (invisible at once, deleted by the sweep or Redis).
    d.put_resume("tok-c", vec![3], env.short_ttl())
        .await
        .unwrap();
    d.put_resume("tok-d", vec![4], LONG).await.unwrap();
    env.elapse(env.short_ttl() + 1).await;
    d.sweep().await.unwrap();
    assert_eq!(d.take_resume("tok-c").await.unwrap(), None);
    assert_eq!(d.take_resume("tok-d").await.unwrap(), Some(vec![4]));
    // Bounds.
    assert!(d.put_resume("", vec![1], LONG).await.is_err());
    assert!(d.put_resume("t", vec![1], 0).await.is_err());
    let big = vec![0u8; plaza_directory::MAX_RESUME_BYTES + 1];
    assert!(d.put_resume("t", big, LONG).await.is_err());
}

pub async fn one_time_claims_first_wins_and_expire(env: &dyn Env) {
    let d = env.dir();
    assert!(d.claim_once("wallet:0xab:1000", LONG).await.unwrap());
    assert!(!d.claim_once("wallet:0xab:1000", LONG).await.unwrap());
    // Another key is independent.
    assert!(d.claim_once("wallet:0xab:1001", LONG).await.unwrap());
    // Concurrent claims of one key: exactly one wins.
    let shared = env.shared();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let d = shared.clone();
            tokio::spawn(async move { d.claim_once("wallet:0xcd:7", LONG).await })
        })
        .collect();
    let mut wins = 0;
    for t in tasks {
        wins += usize::from(t.await.unwrap().unwrap());
    }
    assert_eq!(wins, 1);
    // A lapsed claim frees the key (swept or expired by Redis).
    assert!(d.claim_once("short", env.short_ttl()).await.unwrap());
    env.elapse(env.short_ttl() + 1).await;
    d.sweep().await.unwrap();
    assert!(d.claim_once("short", LONG).await.unwrap());
    assert!(!d.claim_once("short", LONG).await.unwrap());
    // Bounds.
    assert_eq!(d.claim_once("", LONG).await.unwrap_err().code(), "invalid");
    assert_eq!(d.claim_once("k", 0).await.unwrap_err().code(), "invalid");
    let long = "x".repeat(plaza_directory::MAX_ID_LEN + 1);
    assert_eq!(
        d.claim_once(&long, LONG).await.unwrap_err().code(),
        "invalid"
    );
}

pub async fn rejects_invalid_input(env: &dyn Env) {
    let d = env.dir();
    let inv = |r: Result<(), DirectoryError>| assert_eq!(r.unwrap_err().code(), "invalid");
    inv(d.claim("", "a", LONG).await.map(|_| ()));
    inv(d.claim("r", "a", 0).await.map(|_| ()));
    inv(d.claim(&"x".repeat(300), "a", LONG).await.map(|_| ()));
    inv(d.register_node(node("", 0, false), LONG).await);
    let p = d.claim("r", "a", LONG).await.unwrap();
    inv(d
        .presence_register(entry("w", "r", 1, "a", Sources::NONE), p.epoch, LONG)
        .await);
    inv(d
        .presence_register(entry("", "r", 1, "a", Sources::ROOM), p.epoch, LONG)
        .await);
    inv(d.presence_add_source("w", Sources::NONE, p.epoch).await);
    inv(d
        .presence_release("w", Sources::NONE, p.epoch)
        .await
        .map(|_| ()));
    inv(d.audit_append("r", p.epoch, "", "{}", 0).await.map(|_| ()));
    inv(d.announce_profile("", 1, Sources::ROOM).await.map(|_| ()));
    inv(d.peers(Some(&[String::new()])).await.map(|_| ()));
    // Nothing was written.
    assert!(d.peers(None).await.unwrap().is_empty());
    assert!(d.audit_read("r", 1, 10).await.unwrap().is_empty());
}

pub async fn odd_ids_are_opaque(env: &dyn Env) {
    // Ids with separators, glob characters and non-ASCII text never collide or break keys.
    let d = env.dir();
    let rooms = ["a:b", "a", "p:x", "*", "späce room ✓"];
    let mut epochs = Vec::new();
    for (i, r) in rooms.iter().enumerate() {
        let p = d.claim(r, "node:1", LONG).await.unwrap();
        let w = format!("{r}:wallet");
        d.presence_register(
            entry(&w, r, i as u32, "node:1", Sources::ROOM),
            p.epoch,
            LONG,
        )
        .await
        .unwrap();
        assert_eq!(d.audit_append(r, p.epoch, "k", r, 0).await.unwrap(), 1);
        epochs.push(p.epoch);
    }
    for (i, r) in rooms.iter().enumerate() {
        let w = format!("{r}:wallet");
        assert_eq!(d.resolve(r).await.unwrap().unwrap().epoch, epochs[i]);
        assert_eq!(
            d.presence_by_entity(r, i as u32)
                .await
                .unwrap()
                .unwrap()
                .wallet,
            w
        );
        assert_eq!(d.audit_read(r, 1, 10).await.unwrap()[0].detail, *r);
    }
    assert_eq!(d.peers(None).await.unwrap().len(), rooms.len());
}

/// Runs one named case (so each backend's test file lists every case as its own `#[test]`).
#[macro_export]
macro_rules! suite_tests {
    ($make:path, $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let env = $make().await;
                suite::$case(&env).await;
            }
        )*
    };
}

/// Every case, one after another, each on a fresh environment from `$make` (for a backend
/// whose environment is costly to start many times at once, e.g. a Redis Cluster); returns
/// how many ran.
#[macro_export]
macro_rules! run_all_suite_cases {
    ($make:expr) => {{
        let mut n = 0usize;
        $crate::run_all_suite_cases!(@each $make, n,
            nodes_heartbeat_and_expiry,
            place_policy,
            claim_renew_conflict_release,
            lease_expiry_gives_new_epoch,
            concurrent_claims_single_winner,
            presence_register_add_release,
            presence_fencing,
            presence_lease_expiry_renew_sweep,
            dead_node_presence_expires,
            entity_conflict_and_stale_eviction,
            reregister_moves_rooms,
            reregister_keeps_held_sources,
            peers_filter,
            profile_dedup,
            audit_gap_free_and_fenced,
            audit_concurrent_appends,
            handoff_roundtrip,
            resume_entries_taken_once_and_expire,
            one_time_claims_first_wins_and_expire,
            held_resume_entries_live_with_their_holder,
            rejects_invalid_input,
            odd_ids_are_opaque,
        );
        n
    }};
    (@each $make:expr, $n:ident, $($case:ident),* $(,)?) => {
        $(
            {
                let env = $make.await;
                eprintln!("suite case {}", stringify!($case));
                suite::$case(&env).await;
                $n += 1;
            }
        )*
    };
}

/// Every case name, for the backends' test files.
#[macro_export]
macro_rules! all_suite_tests {
    ($make:path) => {
        $crate::suite_tests!(
            $make,
            nodes_heartbeat_and_expiry,
            place_policy,
            claim_renew_conflict_release,
            lease_expiry_gives_new_epoch,
            concurrent_claims_single_winner,
            presence_register_add_release,
            presence_fencing,
            presence_lease_expiry_renew_sweep,
            dead_node_presence_expires,
            entity_conflict_and_stale_eviction,
            reregister_moves_rooms,
            reregister_keeps_held_sources,
            peers_filter,
            profile_dedup,
            audit_gap_free_and_fenced,
            audit_concurrent_appends,
            handoff_roundtrip,
            resume_entries_taken_once_and_expire,
            one_time_claims_first_wins_and_expire,
            held_resume_entries_live_with_their_holder,
            rejects_invalid_input,
            odd_ids_are_opaque,
        );
    };
}
