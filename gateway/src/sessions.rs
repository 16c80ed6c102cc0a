//! The gateway's session registry, for the admin API: every negotiated session with its wallet,
//! room, node and age ([`Sessions::list`]), and the kick ([`Sessions::kick`]) that closes one
//! with [`CloseCode::Kicked`](crate::close::CloseCode::Kicked) (4010, reason `kicked`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// One session as the admin API lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionInfo {
    /// Session id.
    pub id: u64,
    /// Wallet address or guest id.
    pub wallet: String,
    /// The room it is in, joining or moving to.
    pub room: Option<String>,
    /// The node its room stream is attached to.
    pub node: Option<String>,
    /// Since its negotiation.
    pub age: Duration,
}

#[derive(Debug)]
struct Entry {
    wallet: String,
    room: Option<String>,
    node: Option<String>,
    since: Instant,
    kick: Option<oneshot::Sender<()>>,
    /// The connection that registered it (a resumed session may register again on a new
    /// connection before the old one's end removes it).
    conn: u64,
}

/// The registry (cheap to clone; one per gateway).
#[derive(Clone, Debug, Default)]
pub struct Sessions {
    inner: Arc<Mutex<HashMap<u64, Entry>>>,
    next_conn: Arc<AtomicU64>,
}

impl Sessions {
    /// A negotiated session; the receiver fires when an operator kicks it. Also answers the
    /// connection's registration id, for [`Sessions::remove`].
    pub(crate) fn register(&self, id: u64, wallet: &str) -> (oneshot::Receiver<()>, u64) {
        let (tx, rx) = oneshot::channel();
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
        self.inner.lock().insert(
            id,
            Entry {
                wallet: wallet.to_owned(),
                room: None,
                node: None,
                since: Instant::now(),
                kick: Some(tx),
                conn,
            },
        );
        (rx, conn)
    }

    /// Where the session is now.
    pub(crate) fn set_room(&self, id: u64, room: Option<&str>, node: Option<&str>) {
        if let Some(e) = self.inner.lock().get_mut(&id) {
            e.room = room.map(str::to_owned);
            e.node = node.map(str::to_owned);
        }
    }

    /// The connection `conn` of session `id` ended (a newer connection's entry stays).
    pub(crate) fn remove(&self, id: u64, conn: u64) {
        let mut g = self.inner.lock();
        if g.get(&id).is_some_and(|e| e.conn == conn) {
            g.remove(&id);
        }
    }

    /// How many sessions are registered.
    pub fn len(&self) -> usize {
        self.inner.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// At most `limit` sessions, oldest first (ties by id), and the total count.
    pub fn list(&self, limit: usize) -> (Vec<SessionInfo>, usize) {
        let g = self.inner.lock();
        let now = Instant::now();
        let mut all: Vec<SessionInfo> = g
            .iter()
            .map(|(id, e)| SessionInfo {
                id: *id,
                wallet: e.wallet.clone(),
                room: e.room.clone(),
                node: e.node.clone(),
                age: now.saturating_duration_since(e.since),
            })
            .collect();
        let total = all.len();
        drop(g);
        all.sort_by(|a, b| b.age.cmp(&a.age).then(a.id.cmp(&b.id)));
        all.truncate(limit);
        (all, total)
    }

    /// One session, if registered.
    pub fn get(&self, id: u64) -> Option<SessionInfo> {
        let g = self.inner.lock();
        g.get(&id).map(|e| SessionInfo {
            id,
            wallet: e.wallet.clone(),
            room: e.room.clone(),
            node: e.node.clone(),
            age: e.since.elapsed(),
        })
    }

    /// Kicks session `id`: it closes with 4010 `kicked` at once. `false` when there is no such
    /// session (or it is already being kicked).
    pub fn kick(&self, id: u64) -> bool {
        let tx = self.inner.lock().get_mut(&id).and_then(|e| e.kick.take());
        tx.is_some_and(|tx| tx.send(()).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lists_oldest_first_and_kicks_once() {
        let s = Sessions::default();
        let (mut a, conn_a) = s.register(1, "alice");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _b = s.register(2, "bob");
        s.set_room(1, Some("r"), Some("n1"));
        let (list, total) = s.list(10);
        assert_eq!(total, 2);
        assert_eq!(list[0].id, 1);
        assert_eq!(list[0].room.as_deref(), Some("r"));
        assert_eq!(list[0].node.as_deref(), Some("n1"));
        assert_eq!(list[1].wallet, "bob");
        let (list, total) = s.list(1);
        assert_eq!((list.len(), total), (1, 2), "bounded, total exact");
        assert!(s.kick(1));
        assert!(a.try_recv().is_ok());
        assert!(!s.kick(1), "a kick is delivered once");
        assert!(!s.kick(99));
        // A newer connection of session 1 keeps its entry when the old one ends.
        let (_a2, conn_a2) = s.register(1, "alice");
        s.remove(1, conn_a);
        assert!(s.get(1).is_some());
        s.remove(1, conn_a2);
        assert!(s.get(1).is_none());
        assert_eq!(s.len(), 1);
    }
}
