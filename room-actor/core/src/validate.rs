//! Checks on the numbers of a movement that the physics authority does not look at (yaw, head
//! IK, point-at, the timestamp) and the client's time step between two moves.
//!
//! Every float that arrives from the network is finite before it reaches the room state: a
//! non-finite one refuses the whole move with [`RejectReason::NonFinite`] (and the move leaves
//! no trace); finite values out of their range are sanitised (yaw wrapped into `[0, 360)`, head
//! IK clamped to its ranges, point-at clamped to [`POINT_AT_MAX_M`] of the avatar per axis).
//! Position and velocity are the physics authority's ([`plaza_physics::RoomPhysics`]).

use plaza_proto::compressed::{HEAD_PITCH_MAX_DEG, HEAD_YAW_MAX_DEG, POINT_AT_MAX_M};
use plaza_proto::quant::Pose;

use crate::{MoveInput, RejectReason};

/// Refuses a move with a non-finite yaw, head IK angle, point-at or timestamp.
pub(crate) fn check_finite(mv: &MoveInput) -> Result<(), RejectReason> {
    let p = &mv.pose;
    let head = p.head.is_none_or(|h| h.iter().all(|v| v.is_finite()));
    let point = p.point_at.is_none_or(|v| v.iter().all(|x| x.is_finite()));
    if mv.timestamp_s.is_finite() && p.yaw_deg.is_finite() && head && point {
        Ok(())
    } else {
        Err(RejectReason::NonFinite)
    }
}

/// The pose to store for an accepted move: `claimed` (finite, checked by [`check_finite`] and
/// the physics authority) at the authoritative `position`, with the angles and the point-at
/// brought into their ranges.
pub(crate) fn sanitise(claimed: &Pose, position: [f32; 3]) -> Pose {
    let mut pose = *claimed;
    pose.position = position;
    // The instant bit is the server's (teleports), never a client's.
    pose.anim_flags &= !plaza_proto::quant::ANIM_INSTANT;
    pose.yaw_deg = pose.yaw_deg.rem_euclid(360.0);
    if !(0.0..360.0).contains(&pose.yaw_deg) {
        // rem_euclid of a tiny negative value rounds up to 360.0.
        pose.yaw_deg = 0.0;
    }
    pose.head = pose.head.map(|[yaw, pitch]| {
        [
            yaw.clamp(-HEAD_YAW_MAX_DEG, HEAD_YAW_MAX_DEG),
            pitch.clamp(-HEAD_PITCH_MAX_DEG, HEAD_PITCH_MAX_DEG),
        ]
    });
    pose.point_at = pose.point_at.map(|at| {
        std::array::from_fn(|i| {
            at[i].clamp(position[i] - POINT_AT_MAX_M, position[i] + POINT_AT_MAX_M)
        })
    });
    pose
}

/// The client's time step from its last accepted move at `prev_s` to `timestamp_s`.
///
/// A circular timestamp (`period_s`, the compressed movement's) is taken modulo its period, the
/// number of whole periods chosen nearest to `server_elapsed_s` (the server's time since that
/// accepted move). So an unwrapped value that the session's decoder shifted by whole periods
/// (a refused timestamp far ahead made it count a wrap) does not shift later honest moves.
pub(crate) fn time_step_s(
    timestamp_s: f64,
    prev_s: f64,
    period_s: Option<f64>,
    server_elapsed_s: f64,
) -> f32 {
    let d = timestamp_s - prev_s;
    match period_s {
        Some(p) if p > 0.0 && d.is_finite() => {
            let r = d.rem_euclid(p);
            let k = ((server_elapsed_s - r) / p).round();
            (r + k * p) as f32
        }
        _ => d as f32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(pose: Pose, t: f64) -> MoveInput {
        MoveInput {
            seq: 1,
            pose,
            timestamp_s: t,
            is_instant: false,
            timestamp_period_s: None,
        }
    }

    #[test]
    fn every_non_finite_number_is_refused() {
        let ok = Pose {
            head: Some([10.0, 5.0]),
            point_at: Some([1.0, 1.0, 1.0]),
            ..Pose::default()
        };
        assert_eq!(check_finite(&mv(ok, 1.0)), Ok(()));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut p = ok;
            p.yaw_deg = bad;
            assert_eq!(check_finite(&mv(p, 1.0)), Err(RejectReason::NonFinite));
            for i in 0..2 {
                let mut p = ok;
                p.head.as_mut().unwrap()[i] = bad;
                assert_eq!(check_finite(&mv(p, 1.0)), Err(RejectReason::NonFinite));
            }
            for i in 0..3 {
                let mut p = ok;
                p.point_at.as_mut().unwrap()[i] = bad;
                assert_eq!(check_finite(&mv(p, 1.0)), Err(RejectReason::NonFinite));
            }
        }
        for t in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(check_finite(&mv(ok, t)), Err(RejectReason::NonFinite));
        }
    }

    #[test]
    fn finite_values_are_brought_into_range() {
        let p = Pose {
            yaw_deg: -90.0,
            head: Some([400.0, -1.0e30]),
            point_at: Some([1.0e9, 2.0, -1.0e9]),
            ..Pose::default()
        };
        let s = sanitise(&p, [1.0, 0.0, 1.0]);
        assert_eq!(s.yaw_deg, 270.0);
        assert_eq!(s.head, Some([HEAD_YAW_MAX_DEG, -HEAD_PITCH_MAX_DEG]));
        assert_eq!(s.point_at, Some([65.0, 2.0, -63.0]));
        assert_eq!(s.position, [1.0, 0.0, 1.0]);
        assert!(
            (0.0..360.0).contains(
                &sanitise(
                    &Pose {
                        yaw_deg: -1.0e-30,
                        ..p
                    },
                    [0.0; 3]
                )
                .yaw_deg
            )
        );
        assert!(
            (0.0..360.0).contains(
                &sanitise(
                    &Pose {
                        yaw_deg: 3.0e38,
                        ..p
                    },
                    [0.0; 3]
                )
                .yaw_deg
            )
        );
    }

    #[test]
    fn circular_steps_follow_server_time_not_the_decoder_offset() {
        let period = 655.36;
        // Honest: 0.1 s later, 0.1 s of server time.
        let dt = time_step_s(10.1, 10.0, Some(period), 0.1);
        assert!((dt - 0.1).abs() < 1e-4, "{dt}");
        // The decoder counted a spurious wrap: the same honest move, one period later.
        let dt = time_step_s(10.1 + period, 10.0, Some(period), 0.1);
        assert!((dt - 0.1).abs() < 1e-3, "{dt}");
        // A timestamp from the past stays in the past.
        assert!(time_step_s(9.9, 10.0, Some(period), 0.1) < 0.0);
        // A real wrap after an idle stretch longer than half a period.
        let dt = time_step_s(10.0 + 400.0, 10.0, Some(period), 400.0);
        assert!((dt - 400.0).abs() < 1e-3, "{dt}");
        // Not circular: the plain difference.
        assert_eq!(time_step_s(1.0e9, 10.0, None, 0.1), (1.0e9 - 10.0) as f32);
    }

    // === whole-room regressions (issue 15) ===

    use crate::{Outbound, Room, RoomConfig, SessionId};
    use plaza_proto::compressed::{TIMESTAMP_BUFFER_S, TIMESTAMP_QUANTUM_S, TimestampDecoder};

    /// A room with one member placed at its spawn point by a first move at client time `t0`;
    /// returns the room, the spawn and the room time.
    fn placed(t0: f64) -> (Room, [f32; 3], u64) {
        let mut room = Room::new("r", RoomConfig::default());
        room.join(1);
        let mut out = Vec::new();
        room.step(20, &mut out);
        let spawn = room.pose_of(1).expect("joined").position;
        room.input(1, walk(1, spawn, 0.0, t0, None));
        out.clear();
        room.step(40, &mut out);
        assert!(corrections(&out).is_empty(), "{out:?}");
        (room, spawn, 40)
    }

    fn walk(seq: u32, spawn: [f32; 3], dx: f32, t: f64, period: Option<f64>) -> crate::Input {
        crate::Input::Move(MoveInput {
            seq,
            pose: Pose {
                position: [spawn[0] + dx, spawn[1], spawn[2]],
                velocity: [1.0, 0.0, 0.0],
                movement_kind: 1,
                ..Pose::default()
            },
            timestamp_s: t,
            is_instant: false,
            timestamp_period_s: period,
        })
    }

    fn corrections(out: &[Outbound]) -> Vec<(SessionId, RejectReason)> {
        out.iter()
            .filter_map(|o| match o {
                Outbound::Correction {
                    session, reason, ..
                } => Some((*session, *reason)),
                _ => None,
            })
            .collect()
    }

    /// One move per 100 ms of room time (5 ticks of 20 ms); returns the corrections.
    fn send(room: &mut Room, now: &mut u64, input: crate::Input) -> Vec<(SessionId, RejectReason)> {
        room.input(1, input);
        let mut all = Vec::new();
        for _ in 0..5 {
            let mut out = Vec::new();
            *now += 20;
            room.advance(crate::test_support::ms(*now), &mut out);
            all.extend(corrections(&out));
        }
        all
    }

    fn pose_is_finite(p: &Pose) -> bool {
        p.position.iter().chain(&p.velocity).all(|v| v.is_finite())
            && p.yaw_deg.is_finite()
            && p.head.is_none_or(|h| h.iter().all(|v| v.is_finite()))
            && p.point_at.is_none_or(|v| v.iter().all(|x| x.is_finite()))
    }

    #[test]
    fn issue_15_non_finite_angles_and_point_at_are_refused_and_never_stored() {
        let (mut room, spawn, mut now) = placed(1.0);
        let bad_poses: [fn(&mut Pose); 6] = [
            |p| p.yaw_deg = f32::NAN,
            |p| p.yaw_deg = f32::INFINITY,
            |p| p.head = Some([f32::NAN, 0.0]),
            |p| p.head = Some([0.0, f32::NEG_INFINITY]),
            |p| p.point_at = Some([0.0, f32::INFINITY, 0.0]),
            |p| p.point_at = Some([f32::NAN; 3]),
        ];
        let mut t = 1.0;
        for (i, bad) in bad_poses.iter().enumerate() {
            t += 0.1;
            let crate::Input::Move(mut mv) = walk(2 + i as u32, spawn, 0.0, t, None) else {
                unreachable!("walk builds a move")
            };
            bad(&mut mv.pose);
            let got = send(&mut room, &mut now, crate::Input::Move(mv));
            assert_eq!(got, vec![(1, RejectReason::NonFinite)], "case {i}");
            assert!(pose_is_finite(&room.pose_of(1).unwrap()), "case {i}");
        }
        assert_eq!(room.stats().moves_rejected[1], 6);
        // A finite but absurd head and point-at are sanitised, not stored as sent.
        t += 0.1;
        let crate::Input::Move(mut mv) = walk(20, spawn, 0.05, t, None) else {
            unreachable!("walk builds a move")
        };
        mv.pose.head = Some([1.0e30, -1.0e30]);
        mv.pose.point_at = Some([1.0e30, 0.0, -1.0e30]);
        mv.pose.yaw_deg = -1.0e30;
        assert_eq!(send(&mut room, &mut now, crate::Input::Move(mv)), vec![]);
        let p = room.pose_of(1).unwrap();
        assert_eq!(p.head, Some([HEAD_YAW_MAX_DEG, -HEAD_PITCH_MAX_DEG]));
        assert!((0.0..360.0).contains(&p.yaw_deg));
        let at = p.point_at.unwrap();
        assert!(
            (at[0] - p.position[0] - POINT_AT_MAX_M).abs() < 1e-3,
            "{at:?}"
        );
        // The saved state holds only finite numbers and restores every member.
        let snap = room.save_state();
        assert!(snap.members.iter().all(|m| pose_is_finite(&m.pose)));
        let mut fresh = Room::new("r", RoomConfig::default());
        assert_eq!(fresh.restore(snap), 0);
        assert_eq!(fresh.pose_of(1), room.pose_of(1));
    }

    #[test]
    fn issue_15_a_clock_refused_move_does_not_become_the_reference_time() {
        for ahead in [5.0, 1.0e9] {
            let (mut room, spawn, mut now) = placed(1.0);
            let mut t = 1.0;
            let mut x = 0.0;
            for seq in 2..5 {
                t += 0.1;
                x += 0.1;
                assert_eq!(
                    send(&mut room, &mut now, walk(seq, spawn, x, t, None)),
                    vec![]
                );
            }
            // A move claiming to be `ahead` seconds later is refused by the clock check.
            let got = send(&mut room, &mut now, walk(5, spawn, x, t + ahead, None));
            assert_eq!(got, vec![(1, RejectReason::Clock)], "ahead {ahead}");
            // The client's later honest moves are accepted, for as long as it keeps moving.
            for seq in 6..40 {
                t += 0.1;
                x += 0.1;
                let got = send(&mut room, &mut now, walk(seq, spawn, x, t, None));
                assert_eq!(got, vec![], "ahead {ahead}, seq {seq}");
            }
            let p = room.pose_of(1).unwrap().position;
            assert!((p[0] - (spawn[0] + x)).abs() < 0.01, "{p:?}");
        }
    }

    #[test]
    fn issue_15_a_refused_non_finite_timestamp_leaves_no_trace() {
        let (mut room, spawn, mut now) = placed(1.0);
        for (seq, t) in [(2, f64::NAN), (3, f64::INFINITY), (4, -1.0e300)] {
            let got = send(&mut room, &mut now, walk(seq, spawn, 0.0, t, None));
            assert_eq!(got.len(), 1, "{got:?}");
        }
        assert_eq!(
            send(&mut room, &mut now, walk(5, spawn, 0.1, 1.1, None)),
            vec![]
        );
    }

    #[test]
    fn issue_15_a_compressed_timestamp_wrap_does_not_poison_later_moves() {
        // The session's decoder unwraps the circular compressed timestamp; an attacker's value
        // far ahead makes it count a wrap on the next honest value.
        let q = |t: f64| (t / TIMESTAMP_QUANTUM_S).round() as u32;
        let mut decoder = TimestampDecoder::new();
        let period = Some(TIMESTAMP_BUFFER_S);
        let t0 = decoder.decompress(q(1.0));
        let (mut room, spawn, mut now) = placed(t0);
        let mut t = 1.0;
        let mut x = 0.0;
        for seq in 2..5 {
            t += 0.1;
            x += 0.1;
            let ts = decoder.decompress(q(t));
            assert_eq!(
                send(&mut room, &mut now, walk(seq, spawn, x, ts, period)),
                vec![]
            );
        }
        let far = decoder.decompress(q(t + 0.8 * TIMESTAMP_BUFFER_S));
        let got = send(&mut room, &mut now, walk(5, spawn, x, far, period));
        assert_eq!(got.len(), 1, "{got:?}");
        for seq in 6..40 {
            t += 0.1;
            x += 0.1;
            let ts = decoder.decompress(q(t));
            let got = send(&mut room, &mut now, walk(seq, spawn, x, ts, period));
            assert_eq!(got, vec![], "seq {seq}, decoded {ts}");
        }
    }
}
