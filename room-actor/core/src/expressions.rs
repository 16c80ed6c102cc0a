//! The expression channel (seed 004): each avatar's expression (an id and an intensity in basis
//! points), carried to the members who see it at the room's expression rate, delta-coded per
//! viewer and budgeted on its own share of the viewer's bandwidth.
//!
//! * [`Expression::from_wire`] validates what a client sends: the intensity is clamped to
//!   0..=[`MAX_INTENSITY_BP`] and quantized to steps of [`INTENSITY_STEP_BP`]; an id of 0 or an
//!   intensity that quantizes to 0 is neutral (0, 0).
//! * [`ExpressionView`] remembers what one viewer's client holds and, at each expression tick,
//!   yields only the states that differ ([`ExpressionView::update`]); after the viewer's
//!   keyframe ([`ExpressionView::reset`]) the next update is `full` and replaces everything the
//!   client holds (sent at once when the client held any expression, else with the first
//!   state). An avatar that leaves the viewer's frames leaves its expression too (the
//!   client drops it with the record); it is sent again when it comes back.

use std::collections::BTreeMap;

/// Largest intensity, basis points (100 %).
pub const MAX_INTENSITY_BP: u32 = 10_000;
/// The intensity quantum, basis points (1 %).
pub const INTENSITY_STEP_BP: u32 = 100;
/// Bytes an `ExpressionFrame` envelope costs beside its states, about (envelope, tick, full).
pub const MESSAGE_OVERHEAD_BYTES: i64 = 16;
/// Credit a viewer may save up, bytes, at least (or two messages' worth if more): under a tight
/// budget the overhead is paid once for several states instead of once per state, and any
/// state (at most 17 bytes) always fits eventually.
pub const MIN_CREDIT_CAP_BYTES: i64 = 128;

/// One avatar's expression.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Expression {
    /// Application-defined expression id; 0 is neutral.
    pub id: u32,
    /// Intensity, basis points: a multiple of [`INTENSITY_STEP_BP`] in 0..=[`MAX_INTENSITY_BP`].
    pub intensity_bp: u16,
}

impl Expression {
    /// The neutral expression (what an avatar shows until it sends one).
    pub const NEUTRAL: Self = Self {
        id: 0,
        intensity_bp: 0,
    };

    /// What the room keeps of a client's `Expression`: the intensity clamped to
    /// 0..=[`MAX_INTENSITY_BP`] and rounded to the nearest [`INTENSITY_STEP_BP`] (half up); id 0
    /// or intensity 0 is neutral.
    pub fn from_wire(id: u32, intensity_bp: u32) -> Self {
        let clamped = intensity_bp.min(MAX_INTENSITY_BP);
        let q = (clamped + INTENSITY_STEP_BP / 2) / INTENSITY_STEP_BP * INTENSITY_STEP_BP;
        let q = q.min(MAX_INTENSITY_BP) as u16;
        if id == 0 || q == 0 {
            Self::NEUTRAL
        } else {
            Self {
                id,
                intensity_bp: q,
            }
        }
    }

    /// Whether this is the neutral expression.
    pub fn is_neutral(self) -> bool {
        self == Self::NEUTRAL
    }
}

fn varint_len(v: u64) -> i64 {
    i64::from((64 - v.max(1).leading_zeros()).div_ceil(7))
}

/// Bytes one `ExpressionState` costs on the wire (the repeated field's tag and length, then its
/// three fields; zero fields are not written).
pub fn state_bytes(entity: u32, e: Expression) -> i64 {
    let field = |v: u64| if v == 0 { 0 } else { 1 + varint_len(v) };
    let body = field(u64::from(entity)) + field(u64::from(e.id)) + field(u64::from(e.intensity_bp));
    2 + body
}

/// One viewer's expression message: `full` replaces everything its client holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpressionUpdate {
    /// Replace everything held (the first message after a keyframe).
    pub full: bool,
    /// `(entity, expression)` in entity order; neutral ones say "back to neutral".
    pub states: Vec<(u32, Expression)>,
}

/// What one viewer's client holds of the others' expressions.
#[derive(Debug, Default)]
pub struct ExpressionView {
    /// Entity → expression as told (neutral ones are not kept: absent means neutral).
    told: BTreeMap<u32, Expression>,
    /// The next update carries `full` (the client's keyframe reset what it holds).
    full: bool,
    /// The client held expressions at that keyframe: the `full` update is due even if empty
    /// (it clears them). Without, `full` waits for the first update with states.
    clear_due: bool,
    /// Byte credit of the budget.
    credit: i64,
    /// The last entity sent: the next update starts after it, so a tight budget serves every
    /// avatar in turn.
    cursor: u32,
}

impl ExpressionView {
    /// The client's keyframe replaced what it holds: the next update is `full`.
    pub fn reset(&mut self) {
        self.clear_due |= !self.told.is_empty();
        self.told.clear();
        self.full = true;
    }

    /// Whether the client holds nothing and no clearing `full` is due (a pass in a room where
    /// nobody shows an expression can skip this viewer).
    pub fn is_idle(&self) -> bool {
        self.told.is_empty() && !self.clear_due
    }

    /// Entities whose expression the client holds (test and debug aid).
    pub fn held(&self) -> impl Iterator<Item = (u32, Expression)> + '_ {
        self.told.iter().map(|(e, x)| (*e, *x))
    }

    /// The update for one expression tick: the avatars in `seen` (sorted; the viewer's frames)
    /// whose current expression (`current`) differs from what the client holds, starting after
    /// the last one sent, as many as the credit allows (`per_message` bytes a tick, saved up to
    /// two messages' worth or [`MIN_CREDIT_CAP_BYTES`]; while not everything due fits, nothing
    /// is sent until the credit is full, so a tight budget sends fewer, fuller messages).
    /// `None` when there is nothing to send (yet).
    ///
    /// Performance: runs per viewer per expression tick; O(|seen|), no allocation when nothing
    /// changed.
    pub fn update(
        &mut self,
        seen: &[u32],
        current: impl Fn(u32) -> Expression,
        per_message: i64,
    ) -> Option<ExpressionUpdate> {
        let per_message = per_message.max(1);
        let cap = per_message.saturating_mul(2).max(MIN_CREDIT_CAP_BYTES);
        self.credit = self.credit.saturating_add(per_message).min(cap);
        self.told.retain(|e, _| seen.binary_search(e).is_ok());
        let due = |e: u32, told: &BTreeMap<u32, Expression>| {
            current(e) != told.get(&e).copied().unwrap_or_default()
        };
        let start = seen.partition_point(|e| *e <= self.cursor);
        let order = seen[start..].iter().chain(&seen[..start]);
        let mut states = Vec::new();
        let mut left = self.credit - MESSAGE_OVERHEAD_BYTES;
        let mut more_due = false;
        for &e in order {
            if !due(e, &self.told) {
                continue;
            }
            let x = current(e);
            let cost = state_bytes(e, x);
            if cost > left {
                more_due = true;
                break;
            }
            left -= cost;
            states.push((e, x));
        }
        let clearing = self.full && self.clear_due;
        // Under a tight budget, save up for a fuller message (one overhead for several states)
        // until everything due fits or the credit is full.
        if (states.is_empty() || (more_due && self.credit < cap)) && !clearing {
            return None;
        }
        self.clear_due = false;
        self.credit = left;
        if let Some(&(last, _)) = states.last() {
            self.cursor = last;
        }
        for &(e, x) in &states {
            if x.is_neutral() {
                self.told.remove(&e);
            } else {
                self.told.insert(e, x);
            }
        }
        states.sort_unstable_by_key(|s| s.0);
        let full = std::mem::take(&mut self.full);
        Some(ExpressionUpdate { full, states })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(id: u32, bp: u16) -> Expression {
        Expression {
            id,
            intensity_bp: bp,
        }
    }

    #[test]
    fn intensities_are_clamped_and_quantized() {
        assert_eq!(Expression::from_wire(3, 7349), x(3, 7300));
        assert_eq!(Expression::from_wire(3, 7350), x(3, 7400));
        assert_eq!(Expression::from_wire(3, 10_049), x(3, 10_000));
        assert_eq!(Expression::from_wire(3, u32::MAX), x(3, 10_000));
        assert_eq!(Expression::from_wire(3, 49), Expression::NEUTRAL);
        assert_eq!(Expression::from_wire(0, 5000), Expression::NEUTRAL);
        assert_eq!(Expression::from_wire(u32::MAX, 100), x(u32::MAX, 100));
    }

    #[test]
    fn state_bytes_match_prost() {
        use plaza_proto::pb;
        use prost::Message as _;
        for (entity, e) in [
            (1, x(1, 100)),
            (300, x(70_000, 10_000)),
            (5, Expression::NEUTRAL),
        ] {
            let frame = pb::ExpressionFrame {
                tick: 0,
                full: false,
                states: vec![pb::ExpressionState {
                    entity_id: entity,
                    expression_id: e.id,
                    intensity_bp: u32::from(e.intensity_bp),
                }],
            };
            assert_eq!(frame.encoded_len() as i64, state_bytes(entity, e));
        }
    }

    #[test]
    fn only_changes_are_sent_and_a_reset_sends_everything() {
        let mut v = ExpressionView::default();
        let mut cur: BTreeMap<u32, Expression> = BTreeMap::new();
        cur.insert(2, x(1, 500));
        let get = |c: &BTreeMap<u32, Expression>| {
            let c = c.clone();
            move |e: u32| c.get(&e).copied().unwrap_or_default()
        };
        // Nothing held, nothing due for a neutral avatar.
        assert_eq!(v.update(&[3], get(&cur), 1000), None);
        let u = v.update(&[2, 3], get(&cur), 1000).unwrap();
        assert_eq!((u.full, u.states), (false, vec![(2, x(1, 500))]));
        assert_eq!(v.update(&[2, 3], get(&cur), 1000), None);
        cur.insert(3, x(4, 200));
        cur.insert(2, Expression::NEUTRAL);
        let u = v.update(&[2, 3], get(&cur), 1000).unwrap();
        assert_eq!(u.states, vec![(2, Expression::NEUTRAL), (3, x(4, 200))]);
        // A keyframe: the next update is full, with every non-neutral state.
        v.reset();
        let u = v.update(&[2, 3], get(&cur), 1000).unwrap();
        assert_eq!((u.full, u.states), (true, vec![(3, x(4, 200))]));
        // A full update goes out even with nothing to say when the client held something (it
        // clears what it holds) ...
        v.reset();
        let u = v.update(&[2], get(&cur), 1000).unwrap();
        assert!(u.full && u.states.is_empty());
        // ... and waits for the first state when it held nothing.
        v.reset();
        assert!(v.is_idle());
        assert_eq!(v.update(&[2], get(&cur), 1000), None);
        let u = v.update(&[2, 3], get(&cur), 1000).unwrap();
        assert_eq!((u.full, u.states), (true, vec![(3, x(4, 200))]));
    }

    #[test]
    fn an_avatar_that_leaves_the_view_is_sent_again_when_it_comes_back() {
        let mut v = ExpressionView::default();
        let get = |e: u32| {
            if e == 7 {
                x(2, 900)
            } else {
                Expression::NEUTRAL
            }
        };
        assert_eq!(
            v.update(&[7], get, 1000).unwrap().states,
            vec![(7, x(2, 900))]
        );
        assert_eq!(v.update(&[], get, 1000), None);
        assert_eq!(
            v.update(&[7], get, 1000).unwrap().states,
            vec![(7, x(2, 900))]
        );
    }

    #[test]
    fn a_tight_budget_serves_everyone_in_turn_and_loses_nothing() {
        let mut v = ExpressionView::default();
        let seen: Vec<u32> = (1..=40).collect();
        let get = |e: u32| x(e, 100 * (e as u16 % 50 + 1));
        // 20 bytes per tick: no message can carry a state at first (16 bytes of overhead); then
        // a few states per message, never more bytes than the credit saved.
        let mut got: BTreeMap<u32, Expression> = BTreeMap::new();
        let (mut ticks, mut sent) = (0i64, 0i64);
        while got.len() < seen.len() {
            ticks += 1;
            if let Some(u) = v.update(&seen, get, 20) {
                assert!(!u.states.is_empty());
                sent += MESSAGE_OVERHEAD_BYTES
                    + u.states
                        .iter()
                        .map(|(e, x)| state_bytes(*e, *x))
                        .sum::<i64>();
                assert!(sent <= 20 * ticks, "{sent} bytes in {ticks} ticks");
                got.extend(u.states);
            }
            assert!(ticks < 100, "starved");
        }
        for e in &seen {
            assert_eq!(got[e], get(*e));
        }
        // Everything held: nothing more to send.
        assert_eq!(v.update(&seen, get, 40), None);
    }
}
