//! When the room steps and broadcasts: the production schedule, owned by the core.
//!
//! The shell wakes the room at every simulation step and every broadcast, each on its own evenly
//! spaced grid (so broadcasts go out every 50 ms rather than alternating 40/60 ms on the 20 ms
//! step grid), and calls [`Room::advance`] with the time since the activation started. The room
//! runs as many fixed steps as that time says are due (at most [`Room::set_max_catch_up`] of
//! them; the rest are skipped and reported as [`Advanced::skipped`]), then the broadcast if one
//! is due. Missed broadcasts are not replayed: one frame of the latest state replaces them.
//!
//! Step `k` of an activation runs at room time `base + k · 1000 / tick_hz` ms (rounded down),
//! where `base` is 0 for a fresh room and the restored state's time for a restored one, so room
//! time never goes back across a handoff.
//!
//! [`Room::advance`] is the only way in: the shell, the benches and the proptests call it. The
//! crate's unit tests also have `Room::step` (compiled for them only), one step at a time of the
//! test's choosing; it broadcasts every `tick_hz / broadcast_hz` steps on average (on the step
//! grid), which is what [`Room::advance`] does when it is called at the step grid's times.

use std::time::Duration;

use crate::{Outbound, Room};

/// Most steps one [`Room::advance`] runs to catch up, unless [`Room::set_max_catch_up`] says
/// otherwise (`room_actor.max_catch_up`'s default).
pub const DEFAULT_MAX_CATCH_UP: u32 = 5;

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
    /// Whether anything ran (a step or a broadcast).
    pub fn ran(&self) -> bool {
        self.steps > 0 || self.broadcast
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
        // Exact for whole milliseconds (`as_secs_f64() * 1000.0` is not: 60 ms gives 59.999…).
        let elapsed_ms = now.as_nanos() as f64 / 1e6;
        let step_ms = 1000.0 / f64::from(self.cfg.tick_hz.max(1));
        let bcast_ms = 1000.0 / f64::from(self.cfg.broadcast_hz.max(1));
        let due_steps = (elapsed_ms / step_ms) as u64;
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
        let due_bcast = (elapsed_ms / bcast_ms) as u64;
        let broadcast = !force && due_bcast > self.schedule.broadcasts;
        if broadcast {
            self.schedule.broadcasts = due_bcast;
            self.broadcast(out);
        }
        Advanced {
            steps: n,
            skipped,
            broadcast,
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
        }
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
        // The next group of the current broadcast period, if its frames are spread.
        if self.next_group < self.groups {
            let g = self.next_group;
            self.next_group += 1;
            self.build_arena();
            self.encode_frames(g..g + 1, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::ms;
    use crate::{Input, MoveInput, RoomConfig};

    /// A room with `n` members walking along x, one move per member per step.
    fn walkers(n: u64) -> Room {
        let mut room = Room::new("schedule", RoomConfig::default());
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
}
