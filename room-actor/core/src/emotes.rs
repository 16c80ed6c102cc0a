//! Emote scheduling: start and stop, monotonic per member.
//!
//! Each member's emotes carry its client's timestamp. An emote (start or stop) older than the
//! last one accepted from that member is dropped and counted (it was overtaken in flight); an
//! equal or newer one is accepted and becomes the member's current emote. This module keeps the
//! schedule; who is told is the room's business (the members whose last interest set contained
//! the emoter, plus the emoter; and a member whose frames start showing an avatar while its
//! emote plays is told it is playing, with the time it has been: [`Emotes::running`]).

use std::collections::BTreeMap;

use crate::SessionId;
use crate::events::Refusal;

/// Longest accepted emote id, bytes.
pub const MAX_EMOTE_ID_BYTES: usize = 64;

/// A member's emote request, decoded from `plaza.v1.Emote`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmoteRequest {
    /// The emote; empty with `stop`.
    pub emote_id: String,
    /// Client timestamp, ms.
    pub timestamp_ms: u64,
    /// Stop the current emote (also when `emote_id` is empty).
    pub stop: bool,
}

/// What the schedule decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmoteOutcome {
    /// Accepted: tell the viewers.
    Accepted {
        /// The emote (empty when stopping).
        emote_id: String,
        /// Whether it stops.
        stop: bool,
        /// Its timestamp.
        timestamp_ms: u64,
    },
    /// Older than the last accepted one: dropped silently (counted).
    Stale,
}

/// One member's schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmoteSlot {
    /// Timestamp of the last accepted emote.
    pub last_ms: u64,
    /// The emote playing now, if any.
    pub current: Option<String>,
}

/// The room's emote schedules.
#[derive(Clone, Debug, Default)]
pub struct Emotes {
    slots: BTreeMap<SessionId, EmoteSlot>,
    stale: u64,
    /// Room time (ms) each playing emote was accepted at. Not saved: after a restore a playing
    /// emote's start is unknown (reported as just started).
    started_ms: BTreeMap<SessionId, u64>,
}

impl Emotes {
    /// Schedule `req` from `session`, at room time `now_ms`.
    pub fn apply(
        &mut self,
        session: SessionId,
        req: &EmoteRequest,
        now_ms: u64,
    ) -> Result<EmoteOutcome, Refusal> {
        if req.emote_id.len() > MAX_EMOTE_ID_BYTES {
            return Err(Refusal::TooLarge);
        }
        let stop = req.stop || req.emote_id.is_empty();
        let slot = self.slots.entry(session).or_default();
        if req.timestamp_ms < slot.last_ms {
            self.stale += 1;
            return Ok(EmoteOutcome::Stale);
        }
        slot.last_ms = req.timestamp_ms;
        slot.current = (!stop).then(|| req.emote_id.clone());
        if stop {
            self.started_ms.remove(&session);
        } else {
            self.started_ms.insert(session, now_ms);
        }
        Ok(EmoteOutcome::Accepted {
            emote_id: if stop {
                String::new()
            } else {
                req.emote_id.clone()
            },
            stop,
            timestamp_ms: req.timestamp_ms,
        })
    }

    /// Forget a member (it left).
    pub fn remove(&mut self, session: SessionId) {
        self.slots.remove(&session);
        self.started_ms.remove(&session);
    }

    /// The emotes playing now: `(session, emote id, its client timestamp, room time it started
    /// at (None: unknown, restored))`, by session.
    pub fn running(&self) -> impl Iterator<Item = (SessionId, &str, u64, Option<u64>)> + '_ {
        self.slots.iter().filter_map(|(s, slot)| {
            let id = slot.current.as_deref()?;
            Some((*s, id, slot.last_ms, self.started_ms.get(s).copied()))
        })
    }

    /// Emotes dropped as stale so far.
    pub fn stale(&self) -> u64 {
        self.stale
    }

    /// Every member's schedule.
    pub fn slots(&self) -> &BTreeMap<SessionId, EmoteSlot> {
        &self.slots
    }

    /// Replace the state (restore).
    pub fn restore(&mut self, slots: BTreeMap<SessionId, EmoteSlot>, stale: u64) {
        self.slots = slots;
        self.stale = stale;
        self.started_ms.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(id: &str, ts: u64, stop: bool) -> EmoteRequest {
        EmoteRequest {
            emote_id: id.into(),
            timestamp_ms: ts,
            stop,
        }
    }

    #[test]
    fn older_emotes_are_dropped_and_counted() {
        let mut em = Emotes::default();
        assert!(matches!(
            em.apply(1, &e("wave", 100, false), 0),
            Ok(EmoteOutcome::Accepted { stop: false, .. })
        ));
        assert_eq!(
            em.apply(1, &e("dance", 99, false), 0),
            Ok(EmoteOutcome::Stale)
        );
        assert_eq!(em.stale(), 1);
        assert_eq!(em.slots()[&1].current.as_deref(), Some("wave"));
        // Another member's clock is its own.
        assert!(matches!(
            em.apply(2, &e("clap", 5, false), 0),
            Ok(EmoteOutcome::Accepted { .. })
        ));
        assert_eq!(
            em.apply(1, &e("", 150, true), 0),
            Ok(EmoteOutcome::Accepted {
                emote_id: String::new(),
                stop: true,
                timestamp_ms: 150
            })
        );
        assert_eq!(em.slots()[&1].current, None);
        assert_eq!(
            em.apply(1, &e("late", 120, false), 0),
            Ok(EmoteOutcome::Stale)
        );
        assert_eq!(
            em.apply(1, &e(&"x".repeat(65), 200, false), 0),
            Err(Refusal::TooLarge)
        );
    }
}
