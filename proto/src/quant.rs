//! Pose quantizer: float poses (metres, m/s, degrees) to small integers and back.
//!
//! The room quantizes every entity once per tick ([`quantize`]) and hands the [`QuantPose`] to
//! every client's [`crate::frame::FrameEncoder`]; the client's [`crate::frame::FrameDecoder`]
//! holds exactly these integers. Resolutions: position 1 mm, velocity 5 cm/s, yaw 360/512° (≈0.7°),
//! head IK 1°, point-at 1 mm. This module does no delta coding and knows nothing of the wire.

/// Position resolution: millimetres per metre.
pub const POSITION_UNITS_PER_M: f64 = 1000.0;
/// Positions are meaningful for `|coordinate| <= POSITION_RANGE_M`; beyond it they clamp.
pub const POSITION_RANGE_M: f32 = 4000.0;
/// Max absolute per-axis error of `quantize(p).to_pose().position` (and `position_m()`) for every
/// coordinate in `[-POSITION_RANGE_M, POSITION_RANGE_M]`: 0.5 mm rounding plus the f32 rounding of
/// the result (≤ 0.13 mm at 4 km), bounded by 1 mm.
pub const POSITION_ERROR_M: f32 = 0.001;
/// Velocity step in m/s (each axis is an `i16` count of this step).
pub const VELOCITY_STEP_M_S: f32 = 0.05;
/// Number of yaw steps in a full turn (9 bits; one step ≈ 0.70°).
pub const YAW_STEPS: u16 = 512;
/// Max movement kind (2 bits: 0 idle, 1 walk, 2 jog, 3 run).
pub const MOVEMENT_KIND_MAX: u8 = 3;

/// The **instant** bit of a frame record's anim flags (bit 15): set by the server only, on the
/// frames that first show an avatar after a server-made teleport, so every receiver snaps to
/// the pose instead of blending. Clients never send it (the room clears it from their moves).
pub const ANIM_INSTANT: u16 = 0x8000;

/// A float pose in world units relative to the room origin.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pose {
    /// Position in metres.
    pub position: [f32; 3],
    /// Velocity in m/s.
    pub velocity: [f32; 3],
    /// Yaw in degrees (any value; quantization wraps it into `[0, 360)`).
    pub yaw_deg: f32,
    /// 0 idle, 1 walk, 2 jog, 3 run.
    pub movement_kind: u8,
    /// `plaza.v1.AnimFlag` bits; jump count in bits 8..9.
    pub anim_flags: u16,
    /// Head IK yaw/pitch in degrees, when head IK is enabled.
    pub head: Option<[f32; 2]>,
    /// World point (metres) the avatar points at, when pointing.
    pub point_at: Option<[f32; 3]>,
}

impl From<&crate::pb::Movement> for Pose {
    /// The pose of the seed's movement message (missing vectors read as zero, an unknown movement
    /// kind as idle; head IK present when either axis is enabled, a disabled axis reads 0).
    fn from(m: &crate::pb::Movement) -> Self {
        let v3 = |v: &Option<crate::pb::Vec3>| v.as_ref().map_or([0.0; 3], |v| [v.x, v.y, v.z]);
        let head = (m.head_ik_yaw_enabled || m.head_ik_pitch_enabled).then_some([
            if m.head_ik_yaw_enabled {
                m.head_yaw
            } else {
                0.0
            },
            if m.head_ik_pitch_enabled {
                m.head_pitch
            } else {
                0.0
            },
        ]);
        Self {
            position: v3(&m.position),
            velocity: v3(&m.velocity),
            yaw_deg: m.rotation_y,
            movement_kind: u8::try_from(m.movement_kind)
                .ok()
                .filter(|&k| k <= MOVEMENT_KIND_MAX)
                .unwrap_or(0),
            anim_flags: (m.anim_flags & 0x03ff) as u16,
            head,
            point_at: m.is_pointing_at.then(|| v3(&m.point_at)),
        }
    }
}

/// A pose in integers: what travels and what a client holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QuantPose {
    /// Position in millimetres relative to the room origin.
    pub position_mm: [i32; 3],
    /// Velocity in steps of [`VELOCITY_STEP_M_S`].
    pub velocity: [i16; 3],
    /// Yaw in steps of `360 / YAW_STEPS` degrees, `0..YAW_STEPS`.
    pub yaw: u16,
    /// Movement kind, `0..=3`.
    pub movement_kind: u8,
    /// Animation flag bits.
    pub anim_flags: u16,
    /// Head IK yaw/pitch in whole degrees.
    pub head: Option<[i16; 2]>,
    /// Point-at world point in millimetres.
    pub point_at_mm: Option<[i32; 3]>,
}

fn mm(v: f32) -> i32 {
    let c = v.clamp(-POSITION_RANGE_M, POSITION_RANGE_M);
    // NaN clamps to NaN and `as` turns it into 0.
    (f64::from(c) * POSITION_UNITS_PER_M).round() as i32
}

fn from_mm(v: i32) -> f32 {
    (f64::from(v) / POSITION_UNITS_PER_M) as f32
}

fn vel(v: f32) -> i16 {
    (f64::from(v) / f64::from(VELOCITY_STEP_M_S))
        .round()
        .clamp(-32767.0, 32767.0) as i16
}

fn deg(v: f32) -> i16 {
    f64::from(v).round().clamp(-32767.0, 32767.0) as i16
}

/// A prop's orientation (unit quaternion `[x, y, z, w]`) as its frame record carries it
/// (docs/PROTOCOL.md §2.11): the yaw field (steps of `360 / YAW_STEPS`, `0..YAW_STEPS`) and, in
/// the head slot, pitch and roll in the same steps (pitch `−128..=128`, roll `−256..=256`),
/// `None` when both are 0 (an upright prop's record is the same as before props carried
/// rotation). The angles are the `Ry(yaw) · Rx(pitch) · Rz(roll)` decomposition (yaw about +y,
/// 0° = facing +z like an avatar; pitch about +x; roll about +z). A non-finite or zero
/// quaternion reads as upright.
pub fn prop_orientation(q: [f32; 4]) -> (u16, Option<[i16; 2]>) {
    let [x, y, z, w] = q.map(f64::from);
    let n = (x * x + y * y + z * z + w * w).sqrt();
    if !n.is_finite() || n < 1e-9 {
        return (0, None);
    }
    let (x, y, z, w) = (x / n, y / n, z / n, w / n);
    // Rotation matrix entries of R = Ry · Rx · Rz.
    let m13 = 2.0 * (x * z + w * y);
    let m33 = 1.0 - 2.0 * (x * x + y * y);
    let m23 = 2.0 * (y * z - w * x);
    let m21 = 2.0 * (x * y + w * z);
    let m22 = 1.0 - 2.0 * (x * x + z * z);
    let m31 = 2.0 * (x * z - w * y);
    let m11 = 1.0 - 2.0 * (y * y + z * z);
    let pitch = (-m23).clamp(-1.0, 1.0).asin();
    let (yaw, roll) = if m23.abs() < 0.999_999 {
        (m13.atan2(m33), m21.atan2(m22))
    } else {
        // Gimbal lock: the roll folds into the yaw.
        ((-m31).atan2(m11), 0.0)
    };
    let steps = f64::from(YAW_STEPS) / 360.0;
    let yaw_q =
        ((yaw.to_degrees().rem_euclid(360.0) * steps).round() as u32 % u32::from(YAW_STEPS)) as u16;
    let tilt = |a: f64| (a.to_degrees() * steps).round() as i16;
    let (p, r) = (tilt(pitch), tilt(roll));
    (yaw_q, (p != 0 || r != 0).then_some([p, r]))
}

/// Quantizes a pose (once per entity per tick on the server).
pub fn quantize(p: &Pose) -> QuantPose {
    let yaw = if p.yaw_deg.is_finite() {
        let turns = f64::from(p.yaw_deg).rem_euclid(360.0) / 360.0;
        ((turns * f64::from(YAW_STEPS)).round() as u32 % u32::from(YAW_STEPS)) as u16
    } else {
        0
    };
    QuantPose {
        position_mm: p.position.map(mm),
        velocity: p.velocity.map(vel),
        yaw,
        movement_kind: p.movement_kind.min(MOVEMENT_KIND_MAX),
        anim_flags: p.anim_flags,
        head: p.head.map(|h| h.map(deg)),
        point_at_mm: p.point_at.map(|a| a.map(mm)),
    }
}

impl QuantPose {
    /// Back to world units (the inverse of [`quantize`] up to its resolution).
    pub fn to_pose(&self) -> Pose {
        Pose {
            position: self.position_m(),
            velocity: self.velocity.map(|v| f32::from(v) * VELOCITY_STEP_M_S),
            yaw_deg: self.yaw_deg(),
            movement_kind: self.movement_kind,
            anim_flags: self.anim_flags,
            head: self.head.map(|h| h.map(f32::from)),
            point_at: self.point_at_mm.map(|a| a.map(from_mm)),
        }
    }

    /// Position in metres.
    #[inline]
    pub fn position_m(&self) -> [f32; 3] {
        self.position_mm.map(from_mm)
    }

    /// Yaw in degrees, `[0, 360)`.
    pub fn yaw_deg(&self) -> f32 {
        (f64::from(self.yaw) * 360.0 / f64::from(YAW_STEPS)) as f32
    }

    /// This pose with every field in its wire range (yaw below [`YAW_STEPS`], movement kind at
    /// most 3): what [`quantize`] makes, and what a client holds
    /// of a hand-built pose.
    #[inline]
    pub fn canonical(&self) -> Self {
        Self {
            yaw: self.yaw % YAW_STEPS,
            movement_kind: self.movement_kind.min(MOVEMENT_KIND_MAX),
            ..*self
        }
    }

    /// A prop record's orientation (docs/PROTOCOL.md §2.11): `[yaw, pitch, roll]` in degrees,
    /// from the yaw field and the head slot (pitch, roll in steps of `360 / YAW_STEPS`; absent:
    /// upright). Meaningless for an avatar record.
    pub fn prop_euler_deg(&self) -> [f32; 3] {
        let step = 360.0 / f32::from(YAW_STEPS);
        let [pitch, roll] = self.head.unwrap_or_default();
        [
            self.yaw_deg(),
            f32::from(pitch) * step,
            f32::from(roll) * step,
        ]
    }

    /// A prop record's orientation as a unit quaternion `[x, y, z, w]`
    /// (`Ry(yaw) · Rx(pitch) · Rz(roll)`, [`prop_euler_deg`](Self::prop_euler_deg)).
    pub fn prop_rotation(&self) -> [f32; 4] {
        let [y, p, r] = self
            .prop_euler_deg()
            .map(|d| f64::from(d).to_radians() / 2.0);
        let (sy, cy) = y.sin_cos();
        let (sp, cp) = p.sin_cos();
        let (sr, cr) = r.sin_cos();
        // q = qy * qx * qz.
        [
            (cy * sp * cr + sy * cp * sr) as f32,
            (sy * cp * cr - cy * sp * sr) as f32,
            (cy * cp * sr - sy * sp * cr) as f32,
            (cy * cp * cr + sy * sp * sr) as f32,
        ]
    }

    /// Whether the quantized velocity is zero (the entity is at rest).
    #[inline]
    pub fn at_rest(&self) -> bool {
        self.velocity == [0; 3]
    }

    /// Feeds the canonical bytes of this pose (the order of the fields, little endian, `0`/`1`
    /// tags for the options) into an FNV-1a state; used by the frame check.
    pub(crate) fn hash_into(&self, h: &mut u32) {
        for v in self.position_mm {
            fnv_feed(h, &v.to_le_bytes());
        }
        for v in self.velocity {
            fnv_feed(h, &v.to_le_bytes());
        }
        fnv_feed(h, &self.yaw.to_le_bytes());
        fnv_feed(h, &[self.movement_kind]);
        fnv_feed(h, &self.anim_flags.to_le_bytes());
        match self.head {
            Some([a, b]) => {
                fnv_feed(h, &[1]);
                fnv_feed(h, &a.to_le_bytes());
                fnv_feed(h, &b.to_le_bytes());
            }
            None => fnv_feed(h, &[0]),
        }
        match self.point_at_mm {
            Some(p) => {
                fnv_feed(h, &[1]);
                for v in p {
                    fnv_feed(h, &v.to_le_bytes());
                }
            }
            None => fnv_feed(h, &[0]),
        }
    }
}

/// FNV-1a 32-bit offset basis.
pub(crate) const FNV_OFFSET: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

/// Feeds bytes into an FNV-1a 32-bit state.
pub(crate) fn fnv_feed(h: &mut u32, bytes: &[u8]) {
    for &b in bytes {
        *h ^= u32::from(b);
        *h = h.wrapping_mul(FNV_PRIME);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quat_mul(a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
        let [ax, ay, az, aw] = a;
        let [bx, by, bz, bw] = b;
        [
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz,
        ]
    }

    fn axis(ax: [f64; 3], deg: f64) -> [f64; 4] {
        let (s, c) = (deg.to_radians() / 2.0).sin_cos();
        [ax[0] * s, ax[1] * s, ax[2] * s, c]
    }

    /// Angle (degrees) between two orientations.
    fn angle(a: [f32; 4], b: [f64; 4]) -> f64 {
        let d: f64 = (0..4).map(|i| f64::from(a[i]) * b[i]).sum();
        2.0 * d.abs().min(1.0).acos().to_degrees()
    }

    #[test]
    fn prop_orientation_round_trips_within_a_step() {
        assert_eq!(
            prop_orientation([0.0, 0.0, 0.0, 1.0]),
            (0, None),
            "upright: as before"
        );
        assert_eq!(prop_orientation([f32::NAN, 0.0, 0.0, 1.0]), (0, None));
        assert_eq!(prop_orientation([0.0; 4]), (0, None));
        // 90° about +y is yaw 90° (step 128), no tilt; it turns +z to +x, as an avatar's yaw.
        let q = axis([0.0, 1.0, 0.0], 90.0).map(|v| v as f32);
        assert_eq!(prop_orientation(q), (128, None));
        let rec = QuantPose {
            yaw: 128,
            ..QuantPose::default()
        };
        assert!(
            angle(rec.prop_rotation(), axis([0.0, 1.0, 0.0], 90.0)) < 0.1,
            "f32 rounding only"
        );
        // Yaw 30°, pitch 10°, roll -20° (Ry · Rx · Rz).
        let q = quat_mul(
            quat_mul(axis([0.0, 1.0, 0.0], 30.0), axis([1.0, 0.0, 0.0], 10.0)),
            axis([0.0, 0.0, 1.0], -20.0),
        );
        let (yaw, tilt) = prop_orientation(q.map(|v| v as f32));
        let steps = 512.0 / 360.0;
        assert_eq!(yaw, (30.0f64 * steps).round() as u16);
        assert_eq!(
            tilt,
            Some([
                (10.0f64 * steps).round() as i16,
                (-20.0f64 * steps).round() as i16
            ])
        );
        // Many orientations: the record's quaternion is within about a step of the body's.
        let mut seed = 7u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        };
        for _ in 0..2000 {
            let q = [rnd(), rnd(), rnd(), rnd()];
            let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
            let q = q.map(|v| v / n);
            let (yaw, head) = prop_orientation(q.map(|v| v as f32));
            assert!(yaw < YAW_STEPS);
            if let Some([p, r]) = head {
                assert!(
                    (-128..=128).contains(&p) && (-256..=256).contains(&r),
                    "{p} {r}"
                );
            }
            let rec = QuantPose {
                yaw,
                head,
                ..QuantPose::default()
            };
            let a = angle(rec.prop_rotation(), q);
            assert!(a < 1.2, "{a}° off for {q:?}");
        }
    }

    #[test]
    fn position_error_is_within_bound() {
        let mut x = -POSITION_RANGE_M;
        while x <= POSITION_RANGE_M {
            for off in [0.0f32, 0.000_49, 0.000_5, 0.000_51, 0.123_456] {
                let v = x + off;
                if v.abs() > POSITION_RANGE_M {
                    continue;
                }
                let q = quantize(&Pose {
                    position: [v, -v, v * 0.5],
                    ..Pose::default()
                });
                let back = q.position_m();
                assert!(
                    (back[0] - v).abs() <= POSITION_ERROR_M,
                    "{v} -> {}",
                    back[0]
                );
                assert!((back[1] + v).abs() <= POSITION_ERROR_M);
                assert!((back[2] - v * 0.5).abs() <= POSITION_ERROR_M);
            }
            x += 13.37;
        }
    }

    #[test]
    fn yaw_wraps_and_rounds_to_nearest_step() {
        let q = |y: f32| {
            quantize(&Pose {
                yaw_deg: y,
                ..Pose::default()
            })
            .yaw
        };
        assert_eq!(q(0.0), 0);
        assert_eq!(q(360.0), 0);
        assert_eq!(q(-90.0), 384);
        assert_eq!(q(90.0), 128);
        assert_eq!(q(359.9), 0);
        assert_eq!(q(f32::NAN), 0);
        let back = quantize(&Pose {
            yaw_deg: 123.4,
            ..Pose::default()
        })
        .yaw_deg();
        assert!((back - 123.4).abs() <= 360.0 / 1024.0 + 1e-4);
    }

    #[test]
    fn velocity_head_point_round_trip() {
        let p = Pose {
            position: [1.0, 2.0, 3.0],
            velocity: [1.42, -0.07, 0.0],
            yaw_deg: 45.0,
            movement_kind: 9,
            anim_flags: 0x0101,
            head: Some([12.4, -30.6]),
            point_at: Some([4.0, 1.5, -2.25]),
        };
        let q = quantize(&p);
        assert_eq!(q.velocity, [28, -1, 0]);
        assert_eq!(q.movement_kind, 3);
        assert_eq!(q.head, Some([12, -31]));
        assert_eq!(q.point_at_mm, Some([4000, 1500, -2250]));
        let back = q.to_pose();
        for i in 0..3 {
            assert!((back.velocity[i] - p.velocity[i]).abs() <= VELOCITY_STEP_M_S / 2.0 + 1e-6);
        }
        assert_eq!(quantize(&back), q, "quantize(to_pose(q)) == q");
        assert!(!q.at_rest());
    }

    #[test]
    fn pose_from_movement_message() {
        let m = crate::pb::Movement {
            position: Some(crate::pb::Vec3 {
                x: 1.0,
                y: 2.0,
                z: 3.0,
            }),
            velocity: None,
            rotation_y: 45.0,
            movement_kind: 7,
            anim_flags: 0xffff,
            head_ik_yaw_enabled: true,
            head_yaw: 20.0,
            head_pitch: 30.0,
            is_pointing_at: true,
            point_at: Some(crate::pb::Vec3 {
                x: 4.0,
                y: 5.0,
                z: 6.0,
            }),
            ..Default::default()
        };
        let p = Pose::from(&m);
        assert_eq!(p.position, [1.0, 2.0, 3.0]);
        assert_eq!(p.velocity, [0.0; 3]);
        assert_eq!(p.movement_kind, 0, "an unknown kind reads idle");
        assert_eq!(p.anim_flags, 0x03ff);
        assert_eq!(p.head, Some([20.0, 0.0]));
        assert_eq!(p.point_at, Some([4.0, 5.0, 6.0]));
    }

    #[test]
    fn non_finite_inputs_do_not_panic() {
        let p = Pose {
            position: [f32::NAN, f32::INFINITY, f32::NEG_INFINITY],
            velocity: [f32::NAN, 1e30, -1e30],
            yaw_deg: f32::INFINITY,
            head: Some([f32::NAN, 1e9]),
            ..Pose::default()
        };
        let q = quantize(&p);
        assert_eq!(q.position_mm, [0, 4_000_000, -4_000_000]);
        assert_eq!(q.velocity, [0, 32767, -32767]);
        assert_eq!(q.head, Some([0, 32767]));
    }
}
