//! Resume tokens: a client that lost its connection presents its token to take its session
//! (id, identity, room) back. Entries expire; the store is bounded.
//!
//! This store is per gateway process; a cluster-wide store through the directory is the next
//! step (see docs/ARCHITECTURE.md).

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use rand::Rng as _;
use tokio::time::Instant;

/// What a resume token gives back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumeEntry {
    /// The session id.
    pub session_id: u64,
    /// The identity.
    pub wallet: String,
    /// The room it was in, if any.
    pub room: Option<String>,
    /// Its entity there (0 if none).
    pub entity: u32,
}

/// A bounded, expiring map of resume tokens.
#[derive(Debug)]
pub struct ResumeStore {
    ttl: Duration,
    cap: usize,
    entries: Mutex<HashMap<String, (Instant, ResumeEntry)>>,
}

impl ResumeStore {
    /// A store whose entries live `ttl`, holding at most `cap`.
    pub fn new(ttl: Duration, cap: usize) -> Self {
        Self {
            ttl,
            cap,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps `entry` under `token`.
    pub fn put(&self, token: String, entry: ResumeEntry) {
        let now = Instant::now();
        let mut g = self.entries.lock();
        if g.len() >= self.cap {
            g.retain(|_, (t, _)| now.duration_since(*t) < self.ttl);
            if g.len() >= self.cap {
                return;
            }
        }
        g.insert(token, (now, entry));
    }

    /// Takes the entry of `token` if it has not expired.
    pub fn take(&self, token: &str) -> Option<ResumeEntry> {
        let (t, e) = self.entries.lock().remove(token)?;
        (t.elapsed() < self.ttl).then_some(e)
    }
}

/// A fresh unguessable token.
pub fn new_token() -> String {
    let a: u128 = rand::rng().random();
    format!("{a:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_taken_once() {
        let s = ResumeStore::new(Duration::from_secs(30), 10);
        let e = ResumeEntry {
            session_id: 7,
            wallet: "w".into(),
            room: Some("r".into()),
            entity: 3,
        };
        s.put("t".into(), e.clone());
        assert_eq!(s.take("t"), Some(e));
        assert_eq!(s.take("t"), None);
        assert_ne!(new_token(), new_token());
    }
}
