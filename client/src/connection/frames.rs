//! Frames: apply one through the decoder, and the events it makes (entered / updated / left
//! against what was reported, or none with `entity_events` off).

use plaza_proto::frame::{DecodedFrame, EntityRecord, FrameDecoder, FrameError, MAX_ENTITIES};
use plaza_proto::pb;

use super::{Connection, EntityChange, Event, FrameErrorKind, FrameFailure, push_event};

/// An entity reported entered and not yet left (what entity events are diffed against).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Reported {
    pub(super) id: u32,
    generation: u16,
    kind: u8,
}

impl Reported {
    fn of(r: &EntityRecord) -> Self {
        Self {
            id: r.id,
            generation: r.generation,
            kind: r.kind,
        }
    }
}

impl Connection {
    pub(super) fn frame(&mut self, bytes: &[u8], now: f64) {
        let keyframe = bytes
            .first()
            .is_some_and(|b| b & plaza_proto::frame::FLAG_KEYFRAME != 0);
        if self.awaiting_keyframe && !keyframe {
            // A delta against a base the client no longer trusts (PROTOCOL 2.9).
            self.stats.dropped_awaiting_keyframe += 1;
            return;
        }
        let mut d = std::mem::take(&mut self.spare_frame);
        match self.decoder.apply_into(bytes, &mut d) {
            Ok(()) => {
                self.awaiting_keyframe = false;
                self.resync_sent_at = None;
                self.applied(d);
            }
            Err(error) => {
                self.spare_frame = d;
                let reason = match error {
                    FrameError::ChainBreak { .. } => {
                        self.stats.chain_breaks += 1;
                        pb::ResyncReason::ChainBreak
                    }
                    FrameError::CheckMismatch { .. } => {
                        self.stats.check_mismatches += 1;
                        pb::ResyncReason::CheckMismatch
                    }
                    _ => {
                        self.stats.decode_errors += 1;
                        pb::ResyncReason::DecodeError
                    }
                };
                let resync_sent = !self.awaiting_keyframe;
                if resync_sent {
                    self.awaiting_keyframe = true;
                    self.send_resync(reason, now);
                }
                self.push_event(Event::FrameFailed(FrameFailure {
                    error: error.to_string(),
                    kind: FrameErrorKind::of(&error),
                    reason,
                    resync_sent,
                }));
            }
        }
    }

    fn applied(&mut self, d: DecodedFrame) {
        self.stats.frames += 1;
        if d.keyframe {
            self.stats.keyframes += 1;
        }
        if !self.cfg.entity_events {
            self.held.clear();
        } else if d.keyframe {
            self.keyframe_events(d.tick);
        } else {
            self.delta_events(&d);
        }
        if let Some(own) = self.decoder.own() {
            self.push_event(Event::Own(own.clone()));
        }
        self.push_event(Event::Frame {
            seq: d.seq,
            base_seq: d.base_seq,
            tick: d.tick,
            keyframe: d.keyframe,
        });
        if let Some(old) = self.last_frame.replace(d) {
            self.spare_frame = old;
        }
    }

    /// The change event's payload for `record` (held by the decoder).
    fn change(
        decoder: &FrameDecoder,
        record: EntityRecord,
        tick: u32,
        keyframe: bool,
    ) -> EntityChange {
        let id = record.id;
        EntityChange {
            record,
            pose_tick: decoder.pose_tick(id).unwrap_or(tick),
            tier: decoder.tier(id).unwrap_or(0),
            keyframe,
        }
    }

    /// A keyframe: everything reported that it does not hold (or holds under another
    /// generation or kind) left; what it holds entered, or was updated when reported as it is.
    fn keyframe_events(&mut self, tick: u32) {
        let old = std::mem::take(&mut self.held);
        for h in &old {
            match self.decoder.get(h.id) {
                Some(r) if Reported::of(r) == *h => {}
                _ => push_event(
                    &mut self.events,
                    &mut self.stats,
                    Event::EntityLeft { entity: h.id },
                ),
            }
        }
        let mut next = std::mem::take(&mut self.held_scratch);
        next.clear();
        let mut k = 0;
        for r in self.decoder.entities() {
            while old.get(k).is_some_and(|h| h.id < r.id) {
                k += 1;
            }
            let was = old.get(k).is_some_and(|h| *h == Reported::of(r));
            let change = Self::change(&self.decoder, *r, tick, true);
            let ev = if was {
                Event::EntityUpdated(change)
            } else {
                Event::EntityEntered(change)
            };
            push_event(&mut self.events, &mut self.stats, ev);
            next.push(Reported::of(r));
        }
        self.held = next;
        self.held_scratch = old;
    }

    /// A delta: its removed ids left; the ids it changed were updated, or entered when not
    /// reported before (new, or a new generation under a removed id).
    fn delta_events(&mut self, d: &DecodedFrame) {
        // Performance: runs every frame. A delta with no removal whose held set is the size of
        // what was reported brought nothing new (what was reported is the held set before the
        // frame): every change is an update, with no lookup in the reported index.
        if d.removed.is_empty() && self.held.len() == self.decoder.len() {
            for &id in &d.changed {
                let Some(record) = self.decoder.get(id).copied() else {
                    continue;
                };
                let change = Self::change(&self.decoder, record, d.tick, false);
                push_event(
                    &mut self.events,
                    &mut self.stats,
                    Event::EntityUpdated(change),
                );
            }
            return;
        }
        for &entity in &d.removed {
            if let Ok(i) = self.held.binary_search_by_key(&entity, |h| h.id) {
                self.held.remove(i);
                push_event(
                    &mut self.events,
                    &mut self.stats,
                    Event::EntityLeft { entity },
                );
            }
        }
        for &id in &d.changed {
            let Some(record) = self.decoder.get(id).copied() else {
                continue;
            };
            let change = Self::change(&self.decoder, record, d.tick, false);
            let now = Reported::of(&record);
            match self.held.binary_search_by_key(&id, |h| h.id) {
                Ok(i) if self.held[i] == now => {
                    push_event(
                        &mut self.events,
                        &mut self.stats,
                        Event::EntityUpdated(change),
                    );
                }
                Ok(i) => {
                    push_event(
                        &mut self.events,
                        &mut self.stats,
                        Event::EntityLeft { entity: id },
                    );
                    self.held[i] = now;
                    push_event(
                        &mut self.events,
                        &mut self.stats,
                        Event::EntityEntered(change),
                    );
                }
                Err(i) => {
                    if self.held.len() < MAX_ENTITIES {
                        self.held.insert(i, now);
                    }
                    push_event(
                        &mut self.events,
                        &mut self.stats,
                        Event::EntityEntered(change),
                    );
                }
            }
        }
    }
}
