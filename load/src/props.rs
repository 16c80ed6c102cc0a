//! Prop holder bookkeeping across observers, to count double holds (issue 4).
//!
//! Every bot that receives a `PropEvent` reports it here. Per room and prop the board keeps the
//! newest `(revision, holder)`. Two events with the same revision but different holders mean two
//! authorities spoke for the prop at once (for example a room live twice): a **double hold**.
//! A holder changing from one avatar straight to another at the next revision is counted as a
//! hand-off (informational). This is a cross-check from the clients' side, not the room's rules.

use std::collections::HashMap;

use parking_lot::Mutex;
use plaza_proto::pb::PropEvent;

use crate::stats::{Counters, Stats};

#[derive(Clone, Copy, Debug)]
struct Seen {
    revision: u64,
    holder: u32,
    /// Whether a conflict at this revision was already counted.
    conflict_counted: bool,
}

/// Per-room prop state as the bots saw it.
#[derive(Default)]
pub(crate) struct PropBoard {
    props: Mutex<HashMap<(String, u32), Seen>>,
}

impl PropBoard {
    /// Records one observed prop event.
    pub(crate) fn observe(&self, room: &str, ev: &PropEvent, stats: &Stats) {
        let mut props = self.props.lock();
        let key = (room.to_owned(), ev.prop_id);
        let Some(seen) = props.get_mut(&key) else {
            props.insert(
                key,
                Seen {
                    revision: ev.revision,
                    holder: ev.holder_entity,
                    conflict_counted: false,
                },
            );
            return;
        };
        if ev.revision == seen.revision {
            if ev.holder_entity != seen.holder && !seen.conflict_counted {
                seen.conflict_counted = true;
                Counters::add(&stats.counters.double_holds, 1);
            }
        } else if ev.revision > seen.revision {
            if ev.revision == seen.revision + 1
                && seen.holder != 0
                && ev.holder_entity != 0
                && ev.holder_entity != seen.holder
            {
                Counters::add(&stats.counters.holder_handoffs, 1);
            }
            *seen = Seen {
                revision: ev.revision,
                holder: ev.holder_entity,
                conflict_counted: false,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(prop: u32, revision: u64, holder: u32) -> PropEvent {
        PropEvent {
            prop_id: prop,
            holder_entity: holder,
            revision,
            ..PropEvent::default()
        }
    }

    #[test]
    fn counts_conflicting_holders_of_one_revision_once() {
        let stats = Stats::new();
        let board = PropBoard::default();
        board.observe("r", &ev(1, 1, 5), &stats);
        // Many observers see the same event: no conflict.
        board.observe("r", &ev(1, 1, 5), &stats);
        board.observe("r", &ev(1, 1, 6), &stats);
        board.observe("r", &ev(1, 1, 7), &stats);
        assert_eq!(Counters::get(&stats.counters.double_holds), 1);
        // Another room's prop 1 is another prop.
        board.observe("q", &ev(1, 1, 9), &stats);
        assert_eq!(Counters::get(&stats.counters.double_holds), 1);
        // Release then pickup is normal; a direct switch is a hand-off; old revisions are ignored.
        board.observe("r", &ev(1, 2, 0), &stats);
        board.observe("r", &ev(1, 3, 8), &stats);
        board.observe("r", &ev(1, 4, 9), &stats);
        board.observe("r", &ev(1, 2, 3), &stats);
        assert_eq!(Counters::get(&stats.counters.double_holds), 1);
        assert_eq!(Counters::get(&stats.counters.holder_handoffs), 1);
    }
}
