//! Resume tokens: a client that lost its connection presents its token to take its session
//! (id, identity, room) back. Entries expire; the local map is bounded.
//!
//! With a directory ([`ResumeStore::with_directory`]) every entry is also stored there
//! (`put_resume`, same TTL), so a client whose gateway died takes its session back through
//! any other gateway ([`ResumeStore::take_shared`]). The directory copy is written in the
//! background: a gateway killed within a few milliseconds of a disconnect may lose that one
//! entry (the client then starts a new session). Entries are encoded with [`encode_entry`];
//! [`decode_entry`] refuses malformed bytes without panicking.
//!
//! A live session's shared entry ([`ResumeStore::share`]) is *held* by this gateway
//! (`put_resume_held`): it is written when the session's room or entity changes, and one
//! background renewal per third of the TTL extends every entry the gateway holds at once
//! (`renew_resume_holder`: one directory write per gateway per period, not one per session).
//! The holder id is the first 16 hex digits of every token this store issues
//! ([`ResumeStore::new_token`]), so any gateway finds a held entry from the token alone; a
//! gateway killed with SIGKILL stops renewing, and its entries lapse one TTL after its last
//! renewal.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use plaza_directory::SharedDirectory;
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

/// A bounded, expiring map of resume tokens, optionally shared through the directory.
pub struct ResumeStore {
    ttl: Duration,
    cap: usize,
    entries: Mutex<HashMap<String, (Instant, ResumeEntry)>>,
    directory: Option<SharedDirectory>,
    /// This store's holder id (16 hex digits), the prefix of its tokens.
    holder: String,
    /// The holder lease renewal task (with a directory).
    renewal: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for ResumeStore {
    fn drop(&mut self) {
        if let Some(t) = &self.renewal {
            t.abort();
        }
    }
}

/// Hex digits of a holder id.
const HOLDER_LEN: usize = 16;

/// The holder id of a token issued by [`ResumeStore::new_token`].
fn holder_of(token: &str) -> Option<&str> {
    (token.len() == HOLDER_LEN + 32 && token.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| &token[..HOLDER_LEN])
}

impl std::fmt::Debug for ResumeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResumeStore")
            .field("ttl", &self.ttl)
            .field("cap", &self.cap)
            .field("shared", &self.directory.is_some())
            .finish()
    }
}

impl ResumeStore {
    /// A per-process store whose entries live `ttl`, holding at most `cap`.
    pub fn new(ttl: Duration, cap: usize) -> Self {
        let h: u64 = rand::rng().random();
        Self {
            ttl,
            cap,
            entries: Mutex::new(HashMap::new()),
            directory: None,
            holder: format!("{h:016x}"),
            renewal: None,
        }
    }

    /// A store that also keeps every entry in `directory`, so any gateway can take it. Inside
    /// a tokio runtime it renews the lease of the entries it holds every third of `ttl`.
    pub fn with_directory(ttl: Duration, cap: usize, directory: SharedDirectory) -> Self {
        let mut s = Self::new(ttl, cap);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (dir, holder, ttl_ms) = (directory.clone(), s.holder.clone(), s.ttl_ms());
            let every = (ttl / 3).max(Duration::from_millis(1));
            s.renewal = Some(rt.spawn(async move {
                let mut tick = tokio::time::interval_at(Instant::now() + every, every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    if let Err(e) = dir.renew_resume_holder(&holder, ttl_ms).await {
                        tracing::warn!(error = %e, "shared resume entries not renewed");
                    }
                }
            }));
        }
        s.directory = Some(directory);
        s
    }

    fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis().clamp(1, u128::from(u32::MAX)) as u64
    }

    /// A fresh unguessable token naming this store as its holder.
    pub fn new_token(&self) -> String {
        let a: u128 = rand::rng().random();
        format!("{}{a:032x}", self.holder)
    }

    /// Takes the entry of `token`: from this gateway's map, else from the directory (a client
    /// that comes back through another gateway). Either way the token is used up everywhere.
    pub async fn take_shared(&self, token: &str) -> Option<ResumeEntry> {
        let local = self.take(token);
        let Some(dir) = &self.directory else {
            return local;
        };
        if token.is_empty() || token.len() > plaza_directory::MAX_ID_LEN {
            return local;
        }
        let shared = match dir.take_resume(token).await {
            Ok(Some(bytes)) => Some(bytes),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "resume entry lookup failed");
                None
            }
        };
        // The live session's held copy, if its gateway still holds it (taken either way, so
        // the token is used up everywhere).
        let held = match holder_of(token) {
            Some(h) => match dir.take_resume_held(h, token).await {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(error = %e, "held resume entry lookup failed");
                    None
                }
            },
            None => None,
        };
        local.or_else(|| shared.or(held).and_then(|b| decode_entry(&b)))
    }

    /// Keeps `entry` under `token` (and in the directory, in the background, if shared).
    pub fn put(&self, token: String, entry: ResumeEntry) {
        if let (Some(dir), Ok(rt)) = (&self.directory, tokio::runtime::Handle::try_current()) {
            let (dir, token, bytes) = (dir.clone(), token.clone(), encode_entry(&entry));
            let (ttl_ms, holder) = (self.ttl_ms(), self.holder.clone());
            rt.spawn(async move {
                if let Err(e) = dir.put_resume(&token, bytes, ttl_ms).await {
                    tracing::warn!(error = %e, "resume entry not shared");
                }
                // The session is over here: its held copy (if any) goes.
                if let Err(e) = dir.take_resume_held(&holder, &token).await {
                    tracing::debug!(error = %e, "held resume entry not removed");
                }
            });
        }
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

    /// Stores `entry` under `token` in the directory only (in the background; nothing without
    /// a directory): the copy a live session keeps there while it is in a room, so a client
    /// whose gateway is killed (no orderly [`Self::put`]) takes its session back through
    /// another gateway. Held by this store: it lives as long as the store renews its holder
    /// lease (see the module docs), so the session writes it only when it changes.
    pub fn share(&self, token: &str, entry: &ResumeEntry) {
        let (Some(dir), Ok(rt)) = (&self.directory, tokio::runtime::Handle::try_current()) else {
            return;
        };
        let (dir, token, bytes) = (dir.clone(), token.to_owned(), encode_entry(entry));
        let (ttl_ms, holder) = (self.ttl_ms(), self.holder.clone());
        rt.spawn(async move {
            if let Err(e) = dir.put_resume_held(&holder, &token, bytes, ttl_ms).await {
                tracing::warn!(error = %e, "resume entry not shared");
            }
        });
    }

    /// Removes the directory copy of `token` (in the background): the session ended for good.
    pub fn unshare(&self, token: &str) {
        let (Some(dir), Ok(rt)) = (&self.directory, tokio::runtime::Handle::try_current()) else {
            return;
        };
        let (dir, token, holder) = (dir.clone(), token.to_owned(), self.holder.clone());
        rt.spawn(async move {
            if let Err(e) = dir.take_resume_held(&holder, &token).await {
                tracing::debug!(error = %e, "shared resume entry not removed");
            }
        });
    }

    /// How long an entry lives.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Takes the entry of `token` if it has not expired.
    pub fn take(&self, token: &str) -> Option<ResumeEntry> {
        let (t, e) = self.entries.lock().remove(token)?;
        (t.elapsed() < self.ttl).then_some(e)
    }
}

/// Encodes a resume entry for the directory: version 1, session id, entity, wallet, room.
pub fn encode_entry(e: &ResumeEntry) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + e.wallet.len());
    out.push(1u8);
    out.extend_from_slice(&e.session_id.to_le_bytes());
    out.extend_from_slice(&e.entity.to_le_bytes());
    put_str(&mut out, &e.wallet);
    match &e.room {
        Some(r) => {
            out.push(1);
            put_str(&mut out, r);
        }
        None => out.push(0),
    }
    out
}

/// Decodes [`encode_entry`]'s bytes; `None` if they are malformed.
pub fn decode_entry(b: &[u8]) -> Option<ResumeEntry> {
    let mut r = Reader(b);
    if r.take(1)? != [1] {
        return None;
    }
    let session_id = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
    let entity = u32::from_le_bytes(r.take(4)?.try_into().ok()?);
    let wallet = r.string()?;
    let room = match r.take(1)? {
        [0] => None,
        [1] => Some(r.string()?),
        _ => return None,
    };
    r.0.is_empty().then_some(ResumeEntry {
        session_id,
        wallet,
        room,
        entity,
    })
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let n = u16::try_from(s.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..usize::from(n)]);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }

    fn string(&mut self) -> Option<String> {
        let n = u16::from_le_bytes(self.take(2)?.try_into().ok()?);
        String::from_utf8(self.take(usize::from(n))?.to_vec()).ok()
    }
}

/// A fresh unguessable token held by no store (see [`ResumeStore::new_token`]).
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

    #[test]
    fn entries_round_trip_and_malformed_bytes_are_refused() {
        for room in [Some("plaza-1".to_owned()), None] {
            let e = ResumeEntry {
                session_id: u64::MAX - 3,
                wallet: "guest-ü".into(),
                room,
                entity: 42,
            };
            let b = encode_entry(&e);
            assert_eq!(decode_entry(&b), Some(e));
            for cut in 0..b.len() {
                assert_eq!(decode_entry(&b[..cut]), None, "prefix of {cut} bytes");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert_eq!(decode_entry(&longer), None);
        }
        assert_eq!(decode_entry(&[2, 0, 0]), None);
    }

    #[tokio::test]
    async fn a_shared_entry_is_taken_through_another_gateway_once() {
        let dir: SharedDirectory = std::sync::Arc::new(plaza_directory::MemoryDirectory::new());
        let a = ResumeStore::with_directory(Duration::from_secs(30), 10, dir.clone());
        let b = ResumeStore::with_directory(Duration::from_secs(30), 10, dir.clone());
        let e = ResumeEntry {
            session_id: 9,
            wallet: "w".into(),
            room: Some("r".into()),
            entity: 5,
        };
        a.put("tok".into(), e.clone());
        // The directory write is in the background: poll (bounded) until gateway b sees it.
        let deadline = Instant::now() + Duration::from_secs(5);
        let got = loop {
            if let Some(got) = b.take_shared("tok").await {
                break got;
            }
            assert!(Instant::now() < deadline, "entry never shared");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(got, e);
        // Used up everywhere: the first gateway's local copy stays, but the directory's is gone.
        assert_eq!(b.take_shared("tok").await, None);
        assert_eq!(dir.take_resume("tok").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_held_entry_lives_while_its_gateway_renews_and_is_taken_once() {
        let dir: SharedDirectory = std::sync::Arc::new(plaza_directory::MemoryDirectory::new());
        let ttl = Duration::from_millis(300);
        let a = ResumeStore::with_directory(ttl, 10, dir.clone());
        let b = ResumeStore::with_directory(ttl, 10, dir.clone());
        let e = ResumeEntry {
            session_id: 11,
            wallet: "w".into(),
            room: Some("r".into()),
            entity: 6,
        };
        let tok = a.new_token();
        assert_eq!(holder_of(&tok), Some(&a.holder[..]));
        assert_eq!(holder_of("tok"), None);
        a.share(&tok, &e);
        // Written once; alive well past its TTL because gateway a renews its holder lease.
        tokio::time::sleep(ttl * 3).await;
        assert_eq!(b.take_shared(&tok).await, Some(e.clone()));
        assert_eq!(b.take_shared(&tok).await, None);
        // A gateway that stops renewing (killed): its entries lapse after one TTL.
        let tok2 = a.new_token();
        a.share(&tok2, &e);
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(a);
        tokio::time::sleep(ttl * 2).await;
        assert_eq!(b.take_shared(&tok2).await, None);
    }
}
