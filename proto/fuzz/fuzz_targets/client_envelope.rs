//! Fuzzes prost decoding of `plaza.v1.ClientEnvelope`: never panics, and what decoded re-encodes
//! to bytes that decode and re-encode to the same bytes (compared as bytes: NaN floats differ
//! from themselves).
#![no_main]

use libfuzzer_sys::fuzz_target;
use plaza_proto::pb;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    if let Ok(env) = pb::ClientEnvelope::decode(data) {
        let once = env.encode_to_vec();
        let back = pb::ClientEnvelope::decode(once.as_slice()).expect("re-decodes");
        assert_eq!(back.encode_to_vec(), once);
    }
});
