//! Any `auth_token` (the negotiate's string): the wallet token parser, signature recovery and the
//! JWT header / signature / claims path must refuse it with a typed error, never panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use plaza_gateway::auth::jwt::{JwtAuthenticator, JwtConfig};
use plaza_gateway::auth::wallet;
use plaza_gateway::auth::{Authenticator as _, Combined, Purpose};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

fn auth() -> &'static Combined {
    static AUTH: OnceLock<Combined> = OnceLock::new();
    AUTH.get_or_init(|| {
        let jwt = runtime()
            .block_on(JwtAuthenticator::start(JwtConfig {
                hs256_secret: Some(b"fuzz-secret".to_vec()),
                issuer: Some("https://issuer.fuzz/".into()),
                audience: Some("plaza".into()),
                ..JwtConfig::new()
            }))
            .unwrap();
        Combined {
            guest: true,
            jwt: Some(jwt),
            wallet: None,
            banned: Combined::parse_ban_list("guest-x"),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(t) = wallet::parse_token(token) {
        let msg = wallet::message("plaza", &t.address, t.issued_at_ms);
        let _ = wallet::recover(msg.as_bytes(), &t.signature);
    }
    let _ = wallet::recover(data, &{
        let mut s = [0u8; 65];
        for (o, b) in s.iter_mut().zip(data) {
            *o = *b;
        }
        s
    });
    let a = auth();
    let _ = runtime().block_on(a.authenticate(token, Purpose::Login));
});
