//! The sweep index `{i}due` (room, node registry, profile → when to look at it) and one sweep
//! step: lease a batch of due items, sweep each with its single-slot script, re-score or
//! remove it.

use super::RedisDirectory;
use super::reply::{array, bad_reply, bytes, int, num, sint, string};
use crate::PROFILE_ORPHAN_GRACE_MS;
use crate::error::DirectoryError;

/// Index items one sweep step reads.
const SWEEP_BATCH: u32 = 500;
/// How long a sweeper holds the index items it is looking at (others skip them), ms.
const SWEEP_LEASE_MS: u64 = 5_000;
/// Most sweep steps of one [`crate::Directory::sweep`] call (bounds one call's work).
pub(super) const SWEEP_STEPS: u32 = 64;

impl RedisDirectory {
    /// Adds (or lowers the score of) a sweep index item.
    pub(super) async fn index(&self, item: &[u8], score: i64) -> Result<(), DirectoryError> {
        let _: i64 = self
            .query(
                redis::cmd("ZADD")
                    .arg(self.due_key())
                    .arg("LT")
                    .arg(score)
                    .arg(item),
            )
            .await?;
        Ok(())
    }

    /// One sweep step over up to [`SWEEP_BATCH`] due index items; returns (removed, more).
    pub(super) async fn sweep_step(&self) -> Result<(u32, bool), DirectoryError> {
        let due = self.due_key();
        let r = self
            .run(
                &self.s.due,
                &[&due],
                &[&num(u64::from(SWEEP_BATCH)), &num(SWEEP_LEASE_MS)],
            )
            .await?;
        let items = array(&r, 1)?;
        let mut removed = 0u32;
        for pair in items.chunks(2) {
            let item = bytes(pair, 0)?;
            let score = bytes(pair, 1)?;
            let (n, next) = if let Some(room) = item.strip_prefix(b"r:") {
                let room = String::from_utf8(room.to_vec()).map_err(|_| bad_reply("room"))?;
                let r = self.room(&self.s.sweep_room, &room, &[]).await?;
                for i in 3..r.len() {
                    self.unpoint(&string(&r, i)?, &room, true).await;
                }
                (int(&r, 1)?, sint(&r, 2)?)
            } else if item == b"n" {
                let r = self
                    .run(&self.s.sweep_nodes, &[&self.nodes_key()], &[])
                    .await?;
                (int(&r, 1)?, sint(&r, 2)?)
            } else if let Some(w) = item.strip_prefix(b"f:") {
                let w = String::from_utf8(w.to_vec()).map_err(|_| bad_reply("wallet"))?;
                let r = self
                    .wallet(&self.s.sweep_prof, &w, &[&num(PROFILE_ORPHAN_GRACE_MS)])
                    .await?;
                (int(&r, 1)?, sint(&r, 2)?)
            } else {
                (0, -1)
            };
            removed = removed.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
            if next < 0 {
                self.run(&self.s.cas_remove, &[&due], &[&item, &score])
                    .await?;
            } else {
                // Only ever later: a registration or claim that lowered the score meanwhile is
                // looked at by the next sweep of the new score at the latest (a later look at
                // a lapsed record only delays its deletion; reads treat it as absent already).
                let _: i64 = self
                    .query(
                        redis::cmd("ZADD")
                            .arg(&due)
                            .arg("XX")
                            .arg("GT")
                            .arg(next)
                            .arg(&item),
                    )
                    .await?;
            }
        }
        Ok((removed, items.len() / 2 >= SWEEP_BATCH as usize))
    }
}

/// A score below every deadline and unlikely to repeat: an index item a claim re-scored is
/// never removed by a sweeper that read the item before the claim (see `cas_remove.lua`).
pub(super) fn fresh_score() -> i64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    -(i64::from(nanos) + 1)
}
