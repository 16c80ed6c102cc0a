//! Criterion benches of the directory's hot calls: presence register+release, the fencing check,
//! audit append and the peers listing, on the in-memory backend and (if `redis-server` is on
//! PATH or `REDIS_URL` is set) on Redis.
//!
//! `cargo bench -p plaza-directory --bench directory -- --quick`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use plaza_directory::test_util::RedisServer;
use plaza_directory::{
    Directory, MemoryDirectory, PresenceEntry, RedisDirectory, RedisOptions, Sources,
};
use tokio::runtime::Runtime;

fn entry(i: u32) -> PresenceEntry {
    PresenceEntry {
        wallet: format!("0xwallet{i:08}"),
        entity: i,
        room: "bench".into(),
        sources: Sources::ROOM,
        node: "n".into(),
        profile_version: 0,
        lease_until_ms: 0,
    }
}

fn bench_backend(c: &mut Criterion, name: &str, rt: &Runtime, d: Arc<dyn Directory>) {
    let p = rt.block_on(d.claim("bench", "n", 3_600_000)).unwrap();
    let mut g = c.benchmark_group(name);
    g.bench_function("check_epoch", |b| {
        b.iter(|| {
            rt.block_on(d.check_epoch("bench", black_box(p.epoch)))
                .unwrap()
        })
    });
    g.bench_function("presence_register_release", |b| {
        b.iter(|| {
            rt.block_on(async {
                d.presence_register(entry(1_000_000), p.epoch, 60_000)
                    .await
                    .unwrap();
                assert!(
                    d.presence_release("0xwallet01000000", Sources::ROOM, p.epoch)
                        .await
                        .unwrap()
                );
            })
        })
    });
    g.bench_function("audit_append", |b| {
        b.iter(|| {
            rt.block_on(d.audit_append("bench", p.epoch, "consent_granted", "{}", 0))
                .unwrap()
        })
    });
    rt.block_on(async {
        for i in 0..1_000 {
            d.presence_register(entry(i), p.epoch, 3_600_000)
                .await
                .unwrap();
        }
    });
    g.bench_function("peers_1000", |b| {
        b.iter(|| assert_eq!(rt.block_on(d.peers(None)).unwrap().len(), 1_000))
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    let rt = Runtime::new().unwrap();
    bench_backend(c, "memory", &rt, Arc::new(MemoryDirectory::new()));

    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => match RedisServer::start() {
            Ok(s) => {
                let url = s.url();
                (Some(s), url)
            }
            Err(e) => {
                eprintln!("skipping Redis benches: {e}");
                return;
            }
        },
    };
    let opts = RedisOptions {
        prefix: format!("bench:{}:", std::process::id()),
        ..RedisOptions::default()
    };
    let d = rt
        .block_on(RedisDirectory::connect_with(&url, 0, opts))
        .unwrap();
    bench_backend(c, "redis", &rt, Arc::new(d));
}

criterion_group!(directory, benches);
criterion_main!(directory);
