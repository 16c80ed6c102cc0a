//! JWT header and claims parsing past the signature: the input is split into a header and a
//! claims document (raw bytes, often not JSON), base64url-encoded and signed HS256 with the
//! verifier's own secret, so every input reaches the header parse, the registered-claim checks
//! (`exp`, `nbf`, `iss`, `aud`) and the identity / role claim reading. Each must end in an
//! identity or a typed refusal, never a panic.
#![no_main]

use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jsonwebtoken::{Algorithm, EncodingKey};
use libfuzzer_sys::fuzz_target;
use plaza_gateway::auth::Purpose;
use plaza_gateway::auth::jwt::{JwtAuthenticator, JwtConfig};

const SECRET: &[u8] = b"fuzz-secret";

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

fn verifier() -> &'static Arc<JwtAuthenticator> {
    static V: OnceLock<Arc<JwtAuthenticator>> = OnceLock::new();
    V.get_or_init(|| {
        runtime()
            .block_on(JwtAuthenticator::start(JwtConfig {
                hs256_secret: Some(SECRET.to_vec()),
                issuer: Some("https://issuer.fuzz/".into()),
                audience: Some("plaza".into()),
                ..JwtConfig::new()
            }))
            .unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    // Half the inputs keep a valid header, so the fuzzer spends its time on the claims.
    let (header, claims): (&[u8], &[u8]) = if split & 1 == 0 {
        (br#"{"alg":"HS256","typ":"JWT"}"#, rest)
    } else {
        rest.split_at(usize::from(split >> 1).min(rest.len()))
    };
    let signing_input = format!("{}.{}", B64.encode(header), B64.encode(claims));
    let Ok(key) = EncodingKey::from_secret(SECRET) else {
        return;
    };
    let Ok(sig) = jsonwebtoken::crypto::sign(signing_input.as_bytes(), &key, Algorithm::HS256)
    else {
        return;
    };
    let token = format!("{signing_input}.{sig}");
    let v = verifier();
    let _ = runtime().block_on(v.authenticate(&token, Purpose::Login));
    let _ = runtime().block_on(v.authenticate(&token, Purpose::Resume));
});
