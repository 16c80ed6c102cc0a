//! Differential property test: the same random operation sequence runs against
//! [`MemoryDirectory`] and [`RedisDirectory`] (a real `redis-server`), and every result must be
//! the same after normalising what legitimately differs (the era of epochs, lease deadlines,
//! error message text). Leases are long here, so time does not matter; expiry is covered by the
//! shared suite.

use std::sync::atomic::{AtomicU64, Ordering};

use plaza_directory::test_util::RedisServer;
use plaza_directory::{
    Directory, DirectoryError, Epoch, MemoryDirectory, PresenceEntry, RedisDirectory, RedisOptions,
    Sources,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const LONG: u64 = 600_000;

#[derive(Clone, Debug)]
enum Which {
    Current,
    Previous,
    Bogus,
}

#[derive(Clone, Debug)]
enum Op {
    Claim {
        room: usize,
        node: usize,
    },
    Release {
        room: usize,
        node: usize,
        which: Which,
    },
    Check {
        room: usize,
        which: Which,
    },
    Register {
        w: usize,
        room: usize,
        entity: u32,
        node: usize,
        src: u32,
        which: Which,
    },
    Add {
        w: usize,
        room: usize,
        src: u32,
        which: Which,
    },
    Drop {
        w: usize,
        room: usize,
        src: u32,
        which: Which,
    },
    Renew {
        room: usize,
        node: usize,
        which: Which,
    },
    Announce {
        w: usize,
        version: u64,
        src: u32,
    },
    Audit {
        room: usize,
        which: Which,
    },
    Handoff {
        room: usize,
        which: Which,
        take: bool,
    },
    Read,
}

fn which() -> impl Strategy<Value = Which> {
    prop_oneof![6 => Just(Which::Current), 1 => Just(Which::Previous), 1 => Just(Which::Bogus)]
}

fn op() -> impl Strategy<Value = Op> {
    let room = 0usize..2;
    let node = 0usize..2;
    let w = 0usize..4;
    let src = 1u32..16;
    prop_oneof![
        3 => (room.clone(), node.clone()).prop_map(|(room, node)| Op::Claim { room, node }),
        1 => (room.clone(), node.clone(), which())
            .prop_map(|(room, node, which)| Op::Release { room, node, which }),
        1 => (room.clone(), which()).prop_map(|(room, which)| Op::Check { room, which }),
        4 => (w.clone(), room.clone(), 0u32..3, node.clone(), src.clone(), which()).prop_map(
            |(w, room, entity, node, src, which)| Op::Register { w, room, entity, node, src, which }
        ),
        3 => (w.clone(), room.clone(), src.clone(), which())
            .prop_map(|(w, room, src, which)| Op::Add { w, room, src, which }),
        4 => (w.clone(), room.clone(), src.clone(), which())
            .prop_map(|(w, room, src, which)| Op::Drop { w, room, src, which }),
        1 => (room.clone(), node.clone(), which())
            .prop_map(|(room, node, which)| Op::Renew { room, node, which }),
        2 => (w, 0u64..4, src).prop_map(|(w, version, src)| Op::Announce { w, version, src }),
        2 => (room.clone(), which()).prop_map(|(room, which)| Op::Audit { room, which }),
        1 => (room, which(), any::<bool>())
            .prop_map(|(room, which, take)| Op::Handoff { room, which, take }),
        1 => Just(Op::Read),
    ]
}

/// One backend plus the epochs it issued per room.
struct Side<'a> {
    d: &'a dyn Directory,
    epochs: [Option<Epoch>; 2],
}

impl Side<'_> {
    fn epoch(&self, room: usize, which: &Which) -> Epoch {
        let cur = self.epochs[room].unwrap_or_default();
        match which {
            Which::Current => cur,
            Which::Previous => Epoch::new(cur.era, cur.counter.saturating_sub(1)),
            Which::Bogus => Epoch::new(1, 99),
        }
    }

    async fn apply(&mut self, op: &Op) -> String {
        let d = self.d;
        let norm_err = |e: DirectoryError| match e {
            DirectoryError::StaleEpoch { current, .. } => {
                format!("stale({:?})", current.map(|c| c.counter))
            }
            e => e.code().to_string(),
        };
        let norm_entry = |e: PresenceEntry| {
            format!(
                "{}/{}/{}/{:?}/{}/{}",
                e.wallet, e.entity, e.room, e.sources, e.node, e.profile_version
            )
        };
        match op {
            Op::Claim { room, node } => match d
                .claim(&format!("r{room}"), &format!("n{node}"), LONG)
                .await
            {
                Ok(p) => {
                    self.epochs[*room] = Some(p.epoch);
                    format!("ok {} {}", p.node, p.epoch.counter)
                }
                Err(e) => norm_err(e),
            },
            Op::Release { room, node, which } => {
                let ep = self.epoch(*room, which);
                format!(
                    "{:?}",
                    d.release(&format!("r{room}"), &format!("n{node}"), ep)
                        .await
                        .map_err(norm_err)
                )
            }
            Op::Check { room, which } => {
                let ep = self.epoch(*room, which);
                format!(
                    "{:?}",
                    d.check_epoch(&format!("r{room}"), ep)
                        .await
                        .map_err(norm_err)
                )
            }
            Op::Register {
                w,
                room,
                entity,
                node,
                src,
                which,
            } => {
                let e = PresenceEntry {
                    wallet: format!("w{w}"),
                    entity: *entity,
                    room: format!("r{room}"),
                    sources: Sources::from_bits(*src),
                    node: format!("n{node}"),
                    profile_version: 0,
                    lease_until_ms: 0,
                };
                let ep = self.epoch(*room, which);
                format!(
                    "{:?}",
                    d.presence_register(e, ep, LONG).await.map_err(norm_err)
                )
            }
            Op::Add {
                w,
                room,
                src,
                which,
            } => {
                let ep = self.epoch(*room, which);
                let r = d
                    .presence_add_source(&format!("w{w}"), Sources::from_bits(*src), ep)
                    .await;
                format!("{:?}", r.map_err(norm_err))
            }
            Op::Drop {
                w,
                room,
                src,
                which,
            } => {
                let ep = self.epoch(*room, which);
                let r = d
                    .presence_release(&format!("w{w}"), Sources::from_bits(*src), ep)
                    .await;
                format!("{:?}", r.map_err(norm_err))
            }
            Op::Renew { room, node, which } => {
                let ep = self.epoch(*room, which);
                let r = d
                    .presence_renew(&format!("n{node}"), &format!("r{room}"), ep, LONG)
                    .await;
                format!("{:?}", r.map_err(norm_err))
            }
            Op::Announce { w, version, src } => {
                let r = d
                    .announce_profile(&format!("w{w}"), *version, Sources::from_bits(*src))
                    .await;
                format!("{:?}", r.map_err(norm_err))
            }
            Op::Audit { room, which } => {
                let ep = self.epoch(*room, which);
                let r = d
                    .audit_append(&format!("r{room}"), ep, "k", "{\"a\":1}", 5)
                    .await;
                format!("{:?}", r.map_err(norm_err))
            }
            Op::Handoff { room, which, take } => {
                let r = format!("r{room}");
                if *take {
                    match d.take_handoff(&r).await {
                        Ok(v) => format!("{:?}", v.map(|(e, s)| (e.counter, s))),
                        Err(e) => norm_err(e),
                    }
                } else {
                    let ep = self.epoch(*room, which);
                    format!(
                        "{:?}",
                        d.put_handoff(&r, ep, vec![*room as u8, 7])
                            .await
                            .map_err(norm_err)
                    )
                }
            }
            Op::Read => {
                let mut out = String::new();
                for e in d.peers(None).await.unwrap() {
                    out += &norm_entry(e);
                    out += ";";
                }
                for room in 0..2 {
                    let r = format!("r{room}");
                    for a in d.audit_read(&r, 1, 100).await.unwrap() {
                        out += &format!("{}:{}:{};", a.room, a.seq, a.epoch.counter);
                    }
                    for ent in 0..3 {
                        if let Some(e) = d.presence_by_entity(&r, ent).await.unwrap() {
                            out += &format!("[{}]", norm_entry(e));
                        }
                    }
                    out += &format!(
                        "{:?}",
                        d.resolve(&r)
                            .await
                            .unwrap()
                            .map(|p| (p.node, p.epoch.counter))
                    );
                }
                out
            }
        }
    }
}

static N: AtomicU64 = AtomicU64::new(0);

async fn run(url: &str, ops: &[Op]) -> Result<(), TestCaseError> {
    let mem = MemoryDirectory::new();
    let opts = RedisOptions {
        prefix: format!("diff:{}:", N.fetch_add(1, Ordering::Relaxed)),
        ..RedisOptions::default()
    };
    let red = RedisDirectory::connect_with(url, 0, opts)
        .await
        .expect("connect");
    let mut a = Side {
        d: &mem,
        epochs: [None, None],
    };
    let mut b = Side {
        d: &red,
        epochs: [None, None],
    };
    for (i, op) in ops.iter().enumerate() {
        let ra = a.apply(op).await;
        let rb = b.apply(op).await;
        prop_assert_eq!(&ra, &rb, "step {} {:?}", i, op);
    }
    let ra = a.apply(&Op::Read).await;
    let rb = b.apply(&Op::Read).await;
    prop_assert_eq!(ra, rb);
    Ok(())
}

#[test]
fn memory_and_redis_agree() {
    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let s = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
            let url = s.url();
            (Some(s), url)
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 32,
        ..Config::default()
    });
    let strategy = proptest::collection::vec(op(), 1..50);
    let result = runner.run(&strategy, |ops| rt.block_on(run(&url, &ops)));
    if let Err(e) = result {
        panic!("{e}");
    }
}
