//! Fuzzes `compressed::decompress` with arbitrary 160-bit messages and a stream of them through
//! one sender's timestamp decoder. Must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plaza_proto::compressed::{Compressed, TimestampDecoder, compress, decompress};

fuzz_target!(|data: &[u8]| {
    let mut ts = TimestampDecoder::new();
    for chunk in data.chunks_exact(20) {
        let u32_at = |i: usize| u32::from_le_bytes([chunk[i], chunk[i + 1], chunk[i + 2], chunk[i + 3]]);
        let c = Compressed {
            temporal_data: u32_at(0),
            movement_data: u64::from(u32_at(4)) | (u64::from(u32_at(8)) << 32),
            head_sync_data: u32_at(12),
            point_at_data: u32_at(16),
        };
        if let Ok(d) = decompress(&c, &mut ts) {
            assert!(d.pose.position.iter().all(|v| v.is_finite()));
            // Re-compressing what decoded must decode again.
            let again = compress(&d.pose, d.timestamp_s, d.tier);
            decompress(&again, &mut TimestampDecoder::new()).expect("re-decodes");
        }
    }
});
