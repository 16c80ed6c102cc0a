//! Fuzzes prost decoding of `plaza.v1.ClientEnvelope` (and re-encoding what decoded).
#![no_main]

use libfuzzer_sys::fuzz_target;
use plaza_proto::pb;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    if let Ok(env) = pb::ClientEnvelope::decode(data) {
        let again = env.encode_to_vec();
        let back = pb::ClientEnvelope::decode(again.as_slice()).expect("re-decodes");
        assert_eq!(back, env);
    }
});
