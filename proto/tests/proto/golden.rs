//! Golden fixtures: the exact bytes of a canonical keyframe, delta frame, server envelope and
//! compressed movement envelope. `docs/PROTOCOL.md` documents the same bytes field by field;
//! another implementation of the client must produce and accept exactly these.

use plaza_proto::compressed::{TimestampDecoder, compress, decompress};
use plaza_proto::frame::{
    EncoderConfig, EntityRecord, FrameDecoder, FrameEncoder, OwnState, Visible,
};
use plaza_proto::pb;
use plaza_proto::quant::{Pose, quantize};
use prost::Message;

const KEYFRAME_HEX: &str = "17010178af1446c926000000c0f2357d71f9810100249bd01708fa7812400d0020854f062227ca4802007404f410370f6412000c00289a00";
const DELTA_HEX: &str = "140201a2c36c666600a80a3c14d213f403413f0900060000";
const SERVER_ENVELOPE_HEX: &str =
    "08071080d095ffbc31621a0a18140201a2c36c666600a80a3c14d213f403413f0900060000";
const CLIENT_ENVELOPE_HEX: &str = "082a100318b2d095ffbc3182010e0d7182046311807e7efecd000824";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn rec(id: u32, kind: u8, pose: Pose) -> EntityRecord {
    EntityRecord {
        id,
        generation: 0,
        kind,
        pose: quantize(&pose),
    }
}

/// The canonical two frames (see docs/PROTOCOL.md, "Golden fixtures").
fn canonical_frames() -> (Vec<u8>, Vec<u8>, Vec<EntityRecord>, OwnState) {
    let walker = Pose {
        position: [1.0, 0.0, 2.0],
        velocity: [1.4, 0.0, 0.0],
        yaw_deg: 90.0,
        movement_kind: 1,
        anim_flags: 1,
        ..Pose::default()
    };
    let prop = Pose {
        position: [-3.5, 0.75, 4.25],
        ..Pose::default()
    };
    let looker = Pose {
        position: [0.5, 0.0, -1.0],
        anim_flags: 1,
        head: Some([10.0, -5.0]),
        ..Pose::default()
    };
    let a = [rec(1, 0, walker), rec(2, 1, prop), rec(5, 0, looker)];
    let own_a = OwnState {
        entity: 9,
        pose: Pose {
            position: [0.25, 0.0, 0.5],
            anim_flags: 1,
            ..Pose::default()
        },
        last_input_seq: 41,
    };
    let mut enc = FrameEncoder::new(EncoderConfig {
        budget_bytes_per_s: 0,
        broadcast_hz: 20,
        check_every: 0,
    });
    let vis: Vec<Visible<'_>> = a.iter().map(|r| Visible { record: r, tier: 0 }).collect();
    let mut key = Vec::new();
    enc.encode(100, Some(&own_a), &vis, &mut key);

    let walker2 = Pose {
        position: [1.07, 0.0, 2.0],
        ..walker
    };
    let newcomer = Pose {
        position: [2.0, 0.0, 2.0],
        anim_flags: 1,
        ..Pose::default()
    };
    let b = vec![rec(1, 0, walker2), rec(5, 0, looker), rec(7, 0, newcomer)];
    let own_b = OwnState {
        entity: 9,
        pose: Pose {
            position: [0.3, 0.0, 0.5],
            ..own_a.pose
        },
        last_input_seq: 42,
    };
    let vis: Vec<Visible<'_>> = b.iter().map(|r| Visible { record: r, tier: 0 }).collect();
    let mut delta = Vec::new();
    enc.encode(101, Some(&own_b), &vis, &mut delta);
    (key, delta, b, own_b)
}

#[test]
fn canonical_frames_match_golden_hex() {
    let (key, delta, b, own_b) = canonical_frames();
    eprintln!("KEYFRAME_HEX {}", hex(&key));
    eprintln!("DELTA_HEX {}", hex(&delta));
    assert_eq!(hex(&key), KEYFRAME_HEX);
    assert_eq!(hex(&delta), DELTA_HEX);
    let mut dec = FrameDecoder::new();
    dec.apply(&key).unwrap();
    let d = dec.apply(&delta).unwrap();
    assert_eq!((d.seq, d.base_seq, d.tick, d.keyframe), (2, 1, 101, false));
    assert_eq!(d.changed, vec![1, 7]);
    assert_eq!(d.removed, vec![2]);
    assert_eq!(dec.entities().copied().collect::<Vec<_>>(), b);
    assert_eq!(dec.own(), Some(&own_b));
}

#[test]
fn canonical_envelopes_match_golden_hex() {
    let (_, delta, _, _) = canonical_frames();
    let server = pb::ServerEnvelope {
        sequence: 7,
        sent_at_ms: 1_700_000_000_000,
        body: Some(pb::server_envelope::Body::SnapshotFrame(
            pb::SnapshotFrame {
                frame: delta.into(),
            },
        )),
    };
    let bytes = server.encode_to_vec();
    eprintln!("SERVER_ENVELOPE_HEX {}", hex(&bytes));
    assert_eq!(hex(&bytes), SERVER_ENVELOPE_HEX);
    assert_eq!(
        pb::ServerEnvelope::decode(bytes.as_slice()).unwrap(),
        server
    );

    let pose = Pose {
        position: [10.0, 1.5, -20.0],
        velocity: [1.0, 0.0, -1.0],
        yaw_deg: 200.0,
        movement_kind: 1,
        anim_flags: 1,
        ..Pose::default()
    };
    let client = pb::ClientEnvelope {
        session_id: 42,
        sequence: 3,
        sent_at_ms: 1_700_000_000_050,
        body: Some(pb::client_envelope::Body::MovementCompressed(
            compress(&pose, 12.5, 1).into(),
        )),
    };
    let bytes = client.encode_to_vec();
    eprintln!("CLIENT_ENVELOPE_HEX {}", hex(&bytes));
    assert_eq!(hex(&bytes), CLIENT_ENVELOPE_HEX);
    assert_eq!(
        pb::ClientEnvelope::decode(bytes.as_slice()).unwrap(),
        client
    );
    // 200° is step 35 of the 63-step yaw quantizer (a 64-step reading would say 196.875°).
    let Some(pb::client_envelope::Body::MovementCompressed(m)) = client.body else {
        unreachable!()
    };
    assert_eq!(m.temporal_data, 0x6304_8271);
    assert_eq!((m.temporal_data >> 24) & 0x3f, 35);
    let d = decompress(&m.into(), &mut TimestampDecoder::new()).unwrap();
    assert!((d.pose.yaw_deg - 200.0).abs() < 1e-3, "{}", d.pose.yaw_deg);
}

/// A keyframe with one tilted prop (docs/PROTOCOL.md §2.11): prop 1 (entity 1,048,577) at
/// (1, 0.25, 2) m turned yaw 30°, pitch 10°, roll −20°; no own state.
const PROP_KEYFRAME_HEX: &str = "1301018ade5907c90a0080010054843e041df493ac403139";

fn prop_keyframe() -> (Vec<u8>, EntityRecord) {
    // Ry(30°) · Rx(10°) · Rz(−20°), as f32.
    let half = |d: f64| (d.to_radians() / 2.0).sin_cos();
    let ((sy, cy), (sp, cp), (sr, cr)) = (half(30.0), half(10.0), half(-20.0));
    let q = [
        cy * sp * cr + sy * cp * sr,
        sy * cp * cr - cy * sp * sr,
        cy * cp * sr - sy * sp * cr,
        cy * cp * cr + sy * sp * sr,
    ]
    .map(|v| v as f32);
    let mut pose = quantize(&Pose {
        position: [1.0, 0.25, 2.0],
        ..Pose::default()
    });
    (pose.yaw, pose.head) = plaza_proto::quant::prop_orientation(q);
    let r = EntityRecord {
        id: 1_048_577,
        generation: 0,
        kind: 1,
        pose,
    };
    let mut enc = FrameEncoder::new(EncoderConfig {
        budget_bytes_per_s: 0,
        broadcast_hz: 20,
        check_every: 0,
    });
    let mut key = Vec::new();
    enc.encode(
        100,
        None,
        &[Visible {
            record: &r,
            tier: 0,
        }],
        &mut key,
    );
    (key, r)
}

#[test]
fn a_tilted_prop_keyframe_matches_golden_hex() {
    let (key, r) = prop_keyframe();
    eprintln!("PROP_KEYFRAME_HEX {}", hex(&key));
    assert_eq!(hex(&key), PROP_KEYFRAME_HEX);
    assert!(
        include_str!("../../../fixtures/golden/golden.json").contains(PROP_KEYFRAME_HEX),
        "the shared fixture file carries it"
    );
    // yaw step round(30 × 512 / 360) = 43, pitch 14, roll −28 (steps of 360/512°).
    assert_eq!((r.pose.yaw, r.pose.head), (43, Some([14, -28])));
    let mut dec = FrameDecoder::new();
    dec.apply(&key).unwrap();
    let got = dec.get(1_048_577).copied().unwrap();
    assert_eq!(got, r);
    let [y, p, rl] = got.pose.prop_euler_deg();
    assert!(
        (y - 30.234_375).abs() < 1e-4
            && (p - 9.843_75).abs() < 1e-4
            && (rl + 19.687_5).abs() < 1e-4
    );
}
