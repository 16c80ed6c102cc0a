//! Any JWKS document (a file or an HTTP body): parsed into keys or refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = plaza_gateway::auth::jwt::parse_jwks_keys(data);
});
