//! Fuzzes `FrameDecoder::apply`: arbitrary bytes as a first frame, and as a delta onto a decoder
//! that holds a real keyframe. Must never panic; on error the held state is unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plaza_proto::frame::{EncoderConfig, EntityRecord, FrameDecoder, FrameEncoder, Visible};
use plaza_proto::quant::{Pose, quantize};

fuzz_target!(|data: &[u8]| {
    let mut fresh = FrameDecoder::new();
    let _ = fresh.apply(data);

    let recs: Vec<EntityRecord> = (0..8u32)
        .map(|i| EntityRecord {
            id: i * 3,
            generation: 0,
            kind: 0,
            pose: quantize(&Pose {
                position: [i as f32, 0.0, 2.0],
                velocity: [1.0, 0.0, 0.0],
                ..Pose::default()
            }),
        })
        .collect();
    let vis: Vec<Visible<'_>> = recs.iter().map(|r| Visible { record: r, tier: 0 }).collect();
    let mut enc = FrameEncoder::new(EncoderConfig::default());
    let mut key = Vec::new();
    enc.encode(1, None, &vis, &mut key);
    let mut dec = FrameDecoder::new();
    dec.apply(&key).expect("keyframe");
    let before = dec.check();
    if dec.apply(data).is_err() {
        assert_eq!(dec.check(), before, "fail closed");
        assert_eq!(dec.last_seq(), Some(1));
    }
});
