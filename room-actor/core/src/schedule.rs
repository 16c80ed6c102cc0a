//! When the room steps and broadcasts: the production schedule, owned by the core.
//!
//! The shell wakes the room at the times of [`WakeGrid`]: every simulation step and every
//! broadcast, each on its own evenly spaced grid (so broadcasts go out every 50 ms rather than
//! alternating 40/60 ms on the 20 ms step grid), and, while the room's frames are spread
//! ([`crate::RoomConfig::spread_from_members`]), every slot of the group grid: the broadcast
//! period cut into [`group_count`] equal slots (10 ms at 20 Hz: five groups), each group's wake
//! in the middle of its slot. At each wake it calls [`Room::advance`] with the time since the
//! activation started. The room runs as many fixed steps as that time says are due (at most
//! [`Room::set_max_catch_up`] of them; the rest are skipped and reported as
//! [`Advanced::skipped`]), then the broadcast if one is due, then the frame groups whose wakes
//! are due. Missed broadcasts are not replayed: one frame of the latest state replaces them.
//!
//! A spread room's broadcast builds the period's interest index and encodes nothing; group `g`
//! of broadcast period `k` is encoded at `k · P + (g + ½) · P / G` (`P` the broadcast period,
//! `G` the group count; 5, 15, 25, 35 and 45 ms into the period at 20 Hz), from the latest
//! step's state. A member (group = entity id modulo `G`) gets its frames exactly one period
//! apart, at a fixed phase, whatever the step rate; and the group wakes never meet a step of
//! the 50 Hz or 60 Hz grid (steps fall on whole multiples of 20 or 50/3 ms, group wakes on odd
//! multiples of 5 ms), so no wake pays for a step and a group at once. A late wake encodes the
//! groups it finds due at once, so no member misses its period.
//!
//! Step `k` of an activation runs at room time `base + k · 1000 / tick_hz` ms (rounded down),
//! where `base` is 0 for a fresh room and the restored state's time for a restored one, so room
//! time never goes back across a handoff.
//!
//! [`Room::advance`] is the only way in: the shell, the benches and the proptests call it. The
//! crate's unit tests also have `Room::step` (compiled for them only), one step at a time of the
//! test's choosing; it broadcasts every `tick_hz / broadcast_hz` steps on average (on the step
//! grid), which is what [`Room::advance`] does when it is called at the step grid's times, and
//! encodes the groups whose wakes the step's room time has reached since the broadcast.

use std::time::Duration;

use crate::{Outbound, Room, RoomConfig};

/// Most steps one [`Room::advance`] runs to catch up, unless [`Room::set_max_catch_up`] says
/// otherwise (`room_actor.max_catch_up`'s default).
pub const DEFAULT_MAX_CATCH_UP: u32 = 5;

/// The slot of the group grid a spread room aims for: the broadcast period is cut into as many
/// groups as fit slots this long (10 ms: five groups at 20 Hz).
pub const GROUP_SLOT_MS: u32 = 10;

/// Frame groups a spread room's broadcast period is cut into: one per [`GROUP_SLOT_MS`] of the
/// period (at least 1, at most 16).
pub fn group_count(cfg: &RoomConfig) -> u32 {
    let period_ms = 1000 / cfg.broadcast_hz.max(1);
    (period_ms / GROUP_SLOT_MS).clamp(1, 16)
}

const NANOS_PER_S: u128 = 1_000_000_000;

/// Where the wake at `t` (since the activation started) stands on a grid of `per_s` slots per
/// second: the number of slots started by then.
fn slots_by(t: Duration, per_s: u64) -> u64 {
    (t.as_nanos() * u128::from(per_s) / NANOS_PER_S) as u64
}

/// The first time of slot `k` on a grid of `per_s` slots per second (rounded up to the
/// nanosecond, so a wake at it finds the slot due).
fn slot_time(k: u64, per_s: u64) -> Duration {
    let ns = (u128::from(k) * NANOS_PER_S).div_ceil(u128::from(per_s.max(1)));
    Duration::from_nanos(ns as u64)
}

/// The times the shell wakes a room at (see the module doc): the step grid, the broadcast grid
/// and the group wakes (the middle of each group slot). Pure arithmetic on the configuration,
/// so the shell's ticker can run it without the room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WakeGrid {
    /// Steps per second.
    steps_per_s: u64,
    /// Broadcasts per second.
    broadcasts_per_s: u64,
    /// Half group slots per second (`2 · group_count` per broadcast): a group wakes at the odd
    /// ones.
    halves_per_s: u64,
}

impl WakeGrid {
    /// The grid of a room with `cfg`.
    pub fn new(cfg: &RoomConfig) -> Self {
        let broadcasts_per_s = u64::from(cfg.broadcast_hz.max(1));
        Self {
            steps_per_s: u64::from(cfg.tick_hz.max(1)),
            broadcasts_per_s,
            halves_per_s: 2 * broadcasts_per_s * u64::from(group_count(cfg)),
        }
    }

    /// The first wake after `t`: the next step or broadcast, or with `spread` (the room's frames
    /// are spread, [`Room::wakes_on_group_grid`]) the next group wake.
    pub fn next_after(&self, t: Duration, spread: bool) -> Duration {
        let step = slot_time(slots_by(t, self.steps_per_s) + 1, self.steps_per_s);
        let bcast = slot_time(
            slots_by(t, self.broadcasts_per_s) + 1,
            self.broadcasts_per_s,
        );
        let mut next = step.min(bcast);
        if spread {
            let h = slots_by(t, self.halves_per_s) + 1;
            let odd = h | 1;
            next = next.min(slot_time(odd, self.halves_per_s));
        }
        next
    }
}

/// Where an activation stands on its step and broadcast grids.
#[derive(Debug)]
pub(crate) struct Schedule {
    /// Steps run or skipped since the activation started.
    steps: u64,
    /// Broadcast periods started or skipped since the activation started.
    broadcasts: u64,
    /// Room time (ms) at the activation's start: the restored state's, 0 for a fresh room.
    time_base_ms: u64,
    /// Most steps one advance runs; beyond it steps are skipped.
    max_catch_up: u32,
}

impl Default for Schedule {
    fn default() -> Self {
        Self {
            steps: 0,
            broadcasts: 0,
            time_base_ms: 0,
            max_catch_up: DEFAULT_MAX_CATCH_UP,
        }
    }
}

impl Schedule {
    /// The activation starts at room time `base_ms` (a restored state's).
    pub(crate) fn rebase(&mut self, base_ms: u64) {
        self.steps = 0;
        self.broadcasts = 0;
        self.time_base_ms = base_ms;
    }
}

/// What one [`Room::advance`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Advanced {
    /// Steps run.
    pub steps: u64,
    /// Steps that were due but skipped (beyond the catch-up cap): tick overruns.
    pub skipped: u64,
    /// A broadcast ran.
    pub broadcast: bool,
    /// Frame groups of a spread period encoded after the broadcast (at their slots).
    pub groups: u32,
}

/// Which steps [`Room::advance_with`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// The steps and the broadcast due by the schedule ([`Room::advance`]).
    Scheduled,
    /// A drain's last step ([`Room::advance_final`]): the steps due, at least one, no broadcast.
    Final,
}

impl Advanced {
    /// Whether anything ran (a step, a broadcast or a frame group).
    pub fn ran(&self) -> bool {
        self.steps > 0 || self.broadcast || self.groups > 0
    }
}

impl Room {
    /// Most steps one [`Room::advance`] runs to catch up (at least 1; default
    /// [`DEFAULT_MAX_CATCH_UP`]).
    pub fn set_max_catch_up(&mut self, steps: u32) {
        self.schedule.max_catch_up = steps;
    }

    /// Run the steps and the broadcast that are due at `now`, the time since this activation
    /// started, appending what must be delivered to `out`. This is the room's entry point: the
    /// shell calls it at every wake, tests and benchmarks call it to run the production
    /// schedule.
    ///
    /// Performance: runs every tick.
    pub fn advance(&mut self, now: Duration, out: &mut Vec<Outbound>) -> Advanced {
        self.advance_with(now, Due::Scheduled, out, |_, _| {})
    }

    /// A drain's last step: the steps due at `now`, at least one, and no broadcast (the queued
    /// joins and inputs are applied and acknowledged before the state is handed off).
    pub fn advance_final(&mut self, now: Duration, out: &mut Vec<Outbound>) -> Advanced {
        self.advance_with(now, Due::Final, out, |_, _| {})
    }

    /// [`Room::advance`] (`Due::Scheduled`) or [`Room::advance_final`] (`Due::Final`), calling
    /// `on_step(room, now_ms)` after each step (a recorder of every step's poses).
    pub fn advance_with(
        &mut self,
        now: Duration,
        due: Due,
        out: &mut Vec<Outbound>,
        mut on_step: impl FnMut(&Self, u64),
    ) -> Advanced {
        let force = due == Due::Final;
        // Exact in integers (floats are not: 250 ms / (1000 / 60) ms gives 14.999…).
        let step_ms = 1000.0 / f64::from(self.cfg.tick_hz.max(1));
        let due_steps = slots_by(now, u64::from(self.cfg.tick_hz.max(1)));
        let mut n = due_steps.saturating_sub(self.schedule.steps);
        let cap = u64::from(self.schedule.max_catch_up.max(1));
        let mut skipped = 0;
        if n > cap {
            skipped = n - cap;
            self.schedule.steps += skipped;
            n = cap;
        }
        if force && n == 0 {
            n = 1;
        }
        for _ in 0..n {
            self.schedule.steps += 1;
            let now_ms = self.schedule.time_base_ms + (self.schedule.steps as f64 * step_ms) as u64;
            self.simulate(now_ms, out);
            // `step`'s accumulator follows the step grid too, so a test may mix the two.
            self.broadcast_acc += self.cfg.broadcast_hz.min(self.cfg.tick_hz);
            if self.broadcast_acc >= self.cfg.tick_hz {
                self.broadcast_acc -= self.cfg.tick_hz;
            }
            on_step(self, now_ms);
        }
        // Exact in integers: half slot `h` of period `k` starts at `k · P + h · P / 2G`.
        let halves = 2 * u64::from(group_count(&self.cfg));
        let due_half = slots_by(now, u64::from(self.cfg.broadcast_hz.max(1)) * halves);
        let due_bcast = due_half / halves;
        let broadcast = !force && due_bcast > self.schedule.broadcasts;
        if broadcast {
            self.schedule.broadcasts = due_bcast;
            self.broadcast(out);
        }
        let mut encoded = 0;
        let h = due_half % halves;
        if !force && due_bcast == self.schedule.broadcasts && h >= 1 {
            // The groups of this period whose wakes (the odd half slots) have come.
            encoded = self.encode_groups_through(((h - 1) / 2) as u32, out);
        }
        Advanced {
            steps: n,
            skipped,
            broadcast,
            groups: encoded,
        }
    }

    /// Run one simulation step at `now_ms`, then a broadcast when the broadcast rate says one
    /// is due (every `tick_hz / broadcast_hz` steps on average): a test helper for one step at
    /// a time of the test's choosing. It counts on the schedule's grids like [`Room::advance`],
    /// so a test may mix the two when it steps at the step grid's times.
    ///
    /// Performance: runs every tick.
    #[cfg(test)]
    pub(crate) fn step(&mut self, now_ms: u64, out: &mut Vec<Outbound>) {
        self.schedule.steps += 1;
        self.simulate(now_ms, out);
        self.broadcast_acc += self.cfg.broadcast_hz.min(self.cfg.tick_hz);
        if self.broadcast_acc >= self.cfg.tick_hz {
            self.broadcast_acc -= self.cfg.tick_hz;
            self.schedule.broadcasts += 1;
            self.broadcast(out);
        } else {
            // The groups whose wakes this step's room time has reached since the broadcast.
            let since = now_ms.saturating_sub(self.period_start_ms);
            let per_s = 2 * u64::from(self.cfg.broadcast_hz.max(1)) * u64::from(self.groups);
            let h = since.saturating_mul(per_s) / 1000;
            if h >= 1 {
                let last = ((h - 1) / 2).min(u64::from(u32::MAX));
                self.encode_groups_through(last as u32, out);
            }
        }
    }

    /// Whether the shell should wake the room on the group grid ([`WakeGrid::next_after`]'s
    /// `spread`): its frames are spread, or will be from the next broadcast on.
    pub fn wakes_on_group_grid(&self) -> bool {
        self.next_group < self.groups
            || (self.cfg.spread_from_members > 0
                && self.members.len() >= self.cfg.spread_from_members as usize)
    }

    /// Run one simulation step at `now_ms` without broadcasting: the step half of
    /// [`Room::advance`] (benchmarks that time the step and the broadcast apart do it with
    /// [`Room::advance_with`]'s `on_step`).
    ///
    /// Performance: runs every tick.
    pub(crate) fn simulate(&mut self, now_ms: u64, out: &mut Vec<Outbound>) {
        self.now_ms = now_ms;
        self.tick += 1;
        self.stats.ticks += 1;
        self.apply_pending(out);
        self.apply_inputs(out);
        self.apply_actions(out);
        let expired = self.consents.expire(now_ms);
        for t in expired {
            self.consent_transition(&t, out);
        }
        self.physics.step();
        for up in self.props.reconcile(&self.physics) {
            self.prop_event(&up, out);
        }
        let tick = self.tick;
        for (to, body) in self.scenes.finish_tick(tick) {
            self.emit(to, body, out);
        }
        if self.cfg.expression_hz > 0 {
            self.expression_acc += self.cfg.expression_hz.min(self.cfg.tick_hz);
            if self.expression_acc >= self.cfg.tick_hz {
                self.expression_acc -= self.cfg.tick_hz;
                self.send_expressions(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::test_support::ms;
    use crate::{Input, MoveInput, RoomConfig, SessionId};

    /// A room with `n` members walking along x, one move per member per step.
    fn walkers(n: u64) -> Room {
        walkers_with(n, RoomConfig::default())
    }

    fn walkers_with(n: u64, cfg: RoomConfig) -> Room {
        let mut room = Room::new("schedule", cfg);
        for s in 1..=n {
            room.join(s);
        }
        room
    }

    fn moves(room: &mut Room, step: u64) {
        for s in 1..=room.member_count() as u64 {
            let Some(mut pose) = room.pose_of(s) else {
                continue;
            };
            pose.position[0] += 0.02;
            pose.velocity = [1.0, 0.0, 0.0];
            pose.movement_kind = 1;
            room.input(
                s,
                Input::Move(MoveInput {
                    seq: step as u32,
                    pose,
                    timestamp_s: step as f64 * 0.02,
                    is_instant: false,
                    timestamp_period_s: None,
                }),
            );
        }
    }

    /// `advance` at the shell's wakes (every step and every broadcast, each on its own grid)
    /// gives what the shell's own schedule gave: the due step first, then the due broadcast.
    #[test]
    fn advance_at_the_wakes_is_the_shells_schedule() {
        let mut a = walkers(12);
        let mut b = walkers(12);
        let (mut steps, mut bcasts) = (0u64, 0u64);
        while steps < 120 {
            let (next_step, next_bcast) = ((steps + 1) * 20, (bcasts + 1) * 50);
            let now = next_step.min(next_bcast);
            let mut by_hand = Vec::new();
            let mut advanced = Vec::new();
            if next_step == now {
                steps += 1;
                moves(&mut a, steps);
                moves(&mut b, steps);
                a.simulate(now, &mut by_hand);
            }
            if next_bcast == now {
                bcasts += 1;
                a.broadcast(&mut by_hand);
            }
            let r = b.advance(ms(now), &mut advanced);
            assert_eq!(r.steps, u64::from(next_step == now));
            assert_eq!(r.broadcast, next_bcast == now);
            assert_eq!(r.skipped, 0);
            assert!(by_hand == advanced, "wake at {now} ms differs");
        }
        assert_eq!(a.tick(), b.tick());
        assert_eq!(a.stats().frame_bytes, b.stats().frame_bytes);
        assert!(b.stats().broadcasts >= 47);
    }

    /// A late wake runs at most the catch-up cap of steps (the rest are reported skipped) and
    /// one broadcast, and room time still follows the step grid.
    #[test]
    fn a_late_wake_catches_up_at_most_the_cap() {
        let mut room = walkers(2);
        room.set_max_catch_up(3);
        let mut out = Vec::new();
        let r = room.advance(ms(200), &mut out);
        assert_eq!(
            r,
            Advanced {
                steps: 3,
                skipped: 7,
                broadcast: true,
                groups: 0,
            }
        );
        assert_eq!(room.tick(), 3);
        assert_eq!(room.now_ms, 200, "the last step runs at its own grid time");
        let r = room.advance(ms(200), &mut out);
        assert!(!r.ran(), "nothing more is due at the same time");
        let r = room.advance(ms(220), &mut out);
        assert_eq!((r.steps, r.skipped, r.broadcast), (1, 0, false));
        assert_eq!(room.now_ms, 220);
    }

    /// A drain's last step runs even when no step is due, and never broadcasts.
    #[test]
    fn the_final_advance_steps_once_and_does_not_broadcast() {
        let mut room = walkers(2);
        let mut out = Vec::new();
        let r = room.advance_final(ms(5), &mut out);
        assert_eq!((r.steps, r.broadcast), (1, false));
        assert_eq!(room.member_count(), 2, "the queued joins are applied");
        assert!(!out.iter().any(|o| matches!(o, Outbound::Frame { .. })));
    }

    /// A restored room's steps continue from the restored room time.
    #[test]
    fn a_restored_room_continues_from_its_time() {
        let mut room = walkers(2);
        let mut out = Vec::new();
        for t in 1..=50 {
            room.advance(ms(t * 20), &mut out);
        }
        let state = room.save_state();
        assert_eq!(state.now_ms, 1000);
        let mut next = Room::new("schedule", RoomConfig::default());
        next.restore(state);
        next.advance(ms(20), &mut out);
        assert_eq!(next.now_ms, 1020);
        assert_eq!(next.tick(), 51);
    }

    /// `step` and `advance` count on the same grids: a test may mix them at the grid's times.
    #[test]
    fn step_and_advance_agree_on_the_step_grid() {
        let mut a = walkers(6);
        let mut b = walkers(6);
        let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
        for t in 1..=60u64 {
            moves(&mut a, t);
            moves(&mut b, t);
            a.step(t * 20, &mut out_a);
            if t % 2 == 0 {
                b.advance(ms(t * 20), &mut out_b);
            } else {
                b.step(t * 20, &mut out_b);
            }
        }
        assert!(out_a == out_b);
    }

    /// Drives `room` through the shell's wakes ([`WakeGrid`]) up to `until`, every member moving
    /// at every step; returns each wake's time, what it ran and the sessions that got a frame.
    fn run_wakes(room: &mut Room, until: Duration) -> Vec<(Duration, Advanced, Vec<SessionId>)> {
        let grid = WakeGrid::new(room.config());
        let tick_hz = u64::from(room.config().tick_hz);
        let mut t = Duration::ZERO;
        let mut wakes = Vec::new();
        loop {
            t = grid.next_after(t, room.wakes_on_group_grid());
            if t > until {
                return wakes;
            }
            if slots_by(t, tick_hz) > room.tick() {
                let next = room.tick() + 1;
                moves(room, next);
            }
            let mut out = Vec::new();
            let ran = room.advance(t, &mut out);
            let got = out
                .iter()
                .filter_map(|o| match o {
                    Outbound::Frame { session, .. } => Some(*session),
                    _ => None,
                })
                .collect();
            wakes.push((t, ran, got));
        }
    }

    /// The wake grid at 50 Hz steps and 20 Hz broadcasts: steps and broadcasts alone, every
    /// 10 ms while the room is spread.
    #[test]
    fn the_wake_grid_adds_the_group_slots_only_when_spread() {
        let grid = WakeGrid::new(&RoomConfig::default());
        let walk = |spread: bool| {
            let mut t = Duration::ZERO;
            (0..8)
                .map(|_| {
                    t = grid.next_after(t, spread);
                    t.as_millis() as u64
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(walk(false), [20, 40, 50, 60, 80, 100, 120, 140]);
        assert_eq!(walk(true), [5, 15, 20, 25, 35, 40, 45, 50]);
        // A late wake is not repeated: the next wake is the first after it.
        assert_eq!(grid.next_after(ms(33), true), ms(35));
        assert_eq!(grid.next_after(ms(35), true), ms(40));
        assert_eq!(grid.next_after(ms(40), false), ms(50));
        assert_eq!(group_count(&RoomConfig::default()), 5);
        // 60 Hz steps: every 16.67 ms, rounded up to the nanosecond.
        let grid = WakeGrid::new(&RoomConfig {
            tick_hz: 60,
            ..RoomConfig::default()
        });
        assert_eq!(
            grid.next_after(ms(10), false),
            Duration::from_nanos(16_666_667)
        );
        assert_eq!(grid.next_after(ms(10), true), ms(15));
        assert_eq!(
            grid.next_after(ms(15), true),
            Duration::from_nanos(16_666_667)
        );
        assert_eq!(grid.next_after(ms(17), true), ms(25));
    }

    /// In a spread room driven at the shell's wakes, every member's frames are exactly one
    /// broadcast period (50 ms) apart, at the fixed phase `5 + (entity mod 5) · 10 ms` of the
    /// period, at 50 Hz steps and at 60 Hz; each wake encodes one group and no wake both steps
    /// and encodes; every group has members.
    #[test]
    fn spread_frames_are_exactly_one_period_apart_at_a_fixed_phase() {
        for tick_hz in [50, 60] {
            let cfg = RoomConfig {
                tick_hz,
                spread_from_members: 8,
                ..RoomConfig::default()
            };
            let mut room = walkers_with(40, cfg);
            let wakes = run_wakes(&mut room, ms(3_000));
            let mut times: BTreeMap<SessionId, Vec<Duration>> = BTreeMap::new();
            for (t, ran, sessions) in &wakes {
                assert!(
                    ran.steps == 0 || sessions.is_empty(),
                    "a step and frames at {t:?}"
                );
                assert_eq!(ran.groups, u32::from(!sessions.is_empty()), "at {t:?}");
                let mut groups: Vec<u32> = sessions
                    .iter()
                    .map(|s| room.entity_of(*s).expect("a member") % 5)
                    .collect();
                groups.dedup();
                assert!(groups.len() <= 1, "one group per wake at {t:?}: {groups:?}");
                for s in sessions {
                    times.entry(*s).or_default().push(*t);
                }
            }
            assert_eq!(times.len(), 40, "tick_hz {tick_hz}");
            let mut per_group = [0; 5];
            for (s, ts) in &times {
                let entity = room.entity_of(*s).expect("a member");
                per_group[(entity % 5) as usize] += 1;
                assert!(ts.len() >= 58, "session {s}: {} frames", ts.len());
                let phase = ms(5 + u64::from(entity % 5) * 10);
                for t in ts {
                    assert_eq!(
                        t.as_nanos() % ms(50).as_nanos(),
                        phase.as_nanos(),
                        "session {s} at {t:?} (tick_hz {tick_hz})"
                    );
                }
                for w in ts.windows(2) {
                    assert_eq!(w[1] - w[0], ms(50), "session {s} (tick_hz {tick_hz})");
                }
            }
            assert!(per_group.iter().all(|n| *n >= 4), "{per_group:?}");
        }
    }

    /// A late wake encodes every group whose wake has come, in one pass: nobody misses its
    /// period, and the next wakes keep the grid.
    #[test]
    fn a_late_wake_encodes_the_groups_it_finds_due() {
        let cfg = RoomConfig {
            spread_from_members: 8,
            ..RoomConfig::default()
        };
        let mut room = walkers_with(20, cfg);
        let mut out = Vec::new();
        let grid = WakeGrid::new(room.config());
        let mut t = Duration::ZERO;
        while t < ms(100) {
            t = grid.next_after(t, room.wakes_on_group_grid());
            room.advance(t, &mut out);
        }
        let frames = |out: &[Outbound]| {
            out.iter()
                .filter(|o| matches!(o, Outbound::Frame { .. }))
                .count()
        };
        // The period from 100 ms: the broadcast (no frames) and group 0 on time, then nothing
        // until 140 ms.
        out.clear();
        let r = room.advance(ms(105), &mut out);
        assert_eq!(r.groups, 1);
        let first = frames(&out);
        assert!(first > 0 && first < 20);
        out.clear();
        let r = room.advance(ms(140), &mut out);
        assert_eq!(r.groups, 3, "groups 1 to 3 at once");
        let late = frames(&out);
        out.clear();
        room.advance(ms(145), &mut out);
        assert_eq!(
            first + late + frames(&out),
            20,
            "one frame each in the period"
        );
        out.clear();
        let r = room.advance(ms(150), &mut out);
        assert!(r.broadcast && r.groups == 0 && frames(&out) == 0);
    }
}
