//! Basic frame round trips: keyframe, deltas, removal, generation change, own state.

use plaza_proto::frame::{
    EncoderConfig, EntityRecord, FrameDecoder, FrameEncoder, OwnState, Visible,
};
use plaza_proto::quant::{Pose, quantize};

fn rec(id: u32, generation: u16, x: f32) -> EntityRecord {
    let pose = Pose {
        position: [x, 0.0, 1.0],
        velocity: [1.0, 0.0, 0.0],
        yaw_deg: 90.0,
        ..Pose::default()
    };
    EntityRecord {
        id,
        generation,
        kind: 0,
        pose: quantize(&pose),
    }
}

fn assert_holds(dec: &FrameDecoder, recs: &[EntityRecord]) {
    assert_eq!(dec.len(), recs.len());
    for r in recs {
        assert_eq!(dec.get(r.id), Some(r), "entity {}", r.id);
    }
}

#[test]
fn keyframe_then_deltas() {
    let mut enc = FrameEncoder::new(EncoderConfig {
        budget_bytes_per_s: 0,
        ..EncoderConfig::default()
    });
    let mut dec = FrameDecoder::new();
    let mut recs: Vec<EntityRecord> = (0..10).map(|i| rec(i * 3 + 1, 0, i as f32)).collect();
    let own = OwnState {
        entity: 999,
        pose: Pose {
            position: [5.0, 0.0, 5.0],
            ..Pose::default()
        },
        last_input_seq: 7,
    };
    for tick in 0..50u32 {
        for r in &mut recs {
            r.pose.position_mm[0] += 50;
        }
        if tick == 20 {
            recs.remove(3);
        }
        if tick == 30 {
            recs[2].generation += 1;
        }
        if tick == 40 {
            recs.push(rec(1000, 0, -3.0));
        }
        let vis: Vec<Visible<'_>> = recs
            .iter()
            .map(|r| Visible { record: r, tier: 0 })
            .collect();
        let mut out = Vec::new();
        let mut own2 = own.clone();
        own2.last_input_seq += tick;
        own2.pose.position[0] += tick as f32 * 0.013;
        let st = enc.encode(tick, Some(&own2), &vis, &mut out);
        assert_eq!(st.keyframe, tick == 0);
        let d = dec
            .apply(&out)
            .unwrap_or_else(|e| panic!("tick {tick}: {e} {out:02x?}"));
        assert_eq!(d.tick, tick);
        assert_holds(&dec, &recs);
        assert_eq!(dec.own(), Some(&own2));
        assert_eq!(dec.check(), enc.held_check());
    }
}
