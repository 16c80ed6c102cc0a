//! The directory writer's machine, and its one presence write against `MemoryDirectory`.

use std::sync::Arc;

use plaza_directory::{MemoryDirectory, RoomLease};

use super::*;

fn register(wallet: &str, entity: u32) -> PresenceOp {
    PresenceOp::Register {
        wallet: wallet.into(),
        entity,
    }
}

fn release(wallet: &str) -> PresenceOp {
    PresenceOp::Release {
        wallet: wallet.into(),
    }
}

fn write(wallet: &str, entity: Option<u32>) -> PresenceWrite {
    PresenceWrite {
        wallet: wallet.into(),
        entity,
    }
}

#[test]
fn presence_writes_go_out_while_the_lease_may_commit() {
    let mut m = WriterMachine::default();
    assert_eq!(
        m.on_op(register("a", 1), true),
        Next::Write(write("a", Some(1)))
    );
    assert_eq!(m.on_op(release("a"), true), Next::Write(write("a", None)));
    assert!(!m.has_retries());
}

#[test]
fn withheld_writes_are_retried_newest_per_wallet() {
    let mut m = WriterMachine::default();
    assert_eq!(m.on_op(register("a", 1), false), Next::Withheld);
    assert_eq!(m.on_op(register("b", 2), false), Next::Withheld);
    assert_eq!(m.on_op(release("a"), false), Next::Withheld);
    assert_eq!(
        m.take_retries(),
        vec![write("a", None), write("b", Some(2))],
        "a's release supersedes its register"
    );
    assert!(!m.has_retries());
}

#[test]
fn a_newer_write_supersedes_a_waiting_retry() {
    let mut m = WriterMachine::default();
    m.failed(write("a", Some(1)), false);
    assert!(m.has_retries());
    assert_eq!(m.on_op(release("a"), true), Next::Write(write("a", None)));
    assert!(!m.has_retries(), "the retry is gone");
}

#[test]
fn a_fenced_failure_is_not_retried_any_other_is() {
    let mut m = WriterMachine::default();
    m.failed(write("a", Some(1)), true);
    assert!(!m.has_retries());
    m.failed(write("b", None), false);
    assert_eq!(m.take_retries(), vec![write("b", None)]);
}

#[test]
fn other_operations_pass_through() {
    let mut m = WriterMachine::default();
    assert_eq!(
        m.on_op(PresenceOp::Checkpoint(vec![1]), false),
        Next::Checkpoint(vec![1])
    );
    assert_eq!(
        m.on_op(PresenceOp::DropCheckpoint, true),
        Next::DropCheckpoint
    );
    assert_eq!(
        m.on_op(
            PresenceOp::Announce {
                wallet: "a".into(),
                version: 3
            },
            false
        ),
        Next::Announce {
            wallet: "a".into(),
            version: 3
        }
    );
    assert!(!m.has_retries(), "never retried");
}

#[tokio::test]
async fn the_presence_store_registers_releases_and_is_fenced_by_a_stale_epoch() {
    let d: SharedDirectory = Arc::new(MemoryDirectory::new());
    let lease = RoomLease::claim(
        &*d,
        "r",
        "node-a",
        Duration::from_secs(10),
        Duration::from_secs(2),
    )
    .await
    .expect("a lease");
    let store = PresenceStore {
        dir: d.clone(),
        room: "r".into(),
        node: "node-a".into(),
        ttl_ms: 15_000,
    };
    let epoch = lease.epoch();
    store
        .write(&write("w1", Some(3)), epoch, false)
        .await
        .expect("registered");
    let e = d.presence_get("w1").await.unwrap().expect("an entry");
    assert_eq!(
        (e.entity, e.room.as_str(), e.node.as_str()),
        (3, "r", "node-a")
    );
    store
        .write(&write("w1", None), epoch, false)
        .await
        .expect("released");
    assert!(d.presence_get("w1").await.unwrap().is_none());
    // Released again, as a retry does after the entry went: done.
    store
        .write(&write("w1", None), epoch, true)
        .await
        .expect("a retry of a release that is done is done");
    // A write under an epoch that does not hold the room is fenced.
    let stale = Epoch::new(epoch.era, epoch.counter + 7);
    let fenced = store.write(&write("w2", Some(4)), stale, false).await;
    assert!(fenced.is_err_and(|e| e.is_fenced()));
}
