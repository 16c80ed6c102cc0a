//! The wallet sign-in handshake: `wallet:<address>:<issued_at_ms>:<signature>` tokens built from
//! the input — half of them signed for real (EIP-191 `personal_sign` with a test key) over a
//! fuzzed domain and time and then possibly corrupted, half with a raw address, time and
//! signature — go through the parser, secp256k1 recovery, the time window and the directory's
//! replay cache. Each ends in an identity or a typed refusal, never a panic.
#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use plaza_gateway::auth::Purpose;
use plaza_gateway::auth::test_keys::{wallet, wallet_token};
use plaza_gateway::auth::wallet::{WalletAuthenticator, WalletConfig};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

fn verifier() -> &'static WalletAuthenticator {
    static V: OnceLock<WalletAuthenticator> = OnceLock::new();
    V.get_or_init(|| {
        let dir: plaza_directory::SharedDirectory =
            Arc::new(plaza_directory::MemoryDirectory::new());
        WalletAuthenticator::new(
            WalletConfig {
                domain: "plaza".into(),
                window: Duration::from_secs(60),
                leeway: Duration::from_secs(30),
            },
            dir,
        )
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn u64_at(data: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    for (o, i) in b.iter_mut().zip(at..) {
        *o = data.get(i).copied().unwrap_or(0);
    }
    u64::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let now_ms = 1_700_000_000_000 + (u64_at(rest, 0) % 10_000_000);
    let token = if mode & 1 == 0 {
        // A real signature over a fuzzed domain and time, maybe with one byte changed.
        let (key, _) = wallet(1 + (mode >> 1) % 4);
        let skew = (u64_at(rest, 8) % 400_000) as i64 - 200_000;
        let issued = now_ms.saturating_add_signed(skew);
        let domain = match rest.get(16..) {
            Some(d) if mode & 2 == 0 => String::from_utf8_lossy(d).into_owned(),
            _ => "plaza".to_owned(),
        };
        let mut t = wallet_token(&key, &domain, issued).into_bytes();
        if mode & 4 != 0
            && let Some(&at) = rest.get(16)
        {
            let i = usize::from(at) % t.len();
            t[i] = rest.get(17).copied().unwrap_or(b'0');
        }
        String::from_utf8_lossy(&t).into_owned()
    } else {
        // Raw parts: any address, time and signature bytes, in any case, with or without 0x.
        let addr = hex(rest.get(..20).unwrap_or(rest));
        let addr = if mode & 2 == 0 {
            addr
        } else {
            addr.to_ascii_uppercase()
        };
        let ts = u64_at(rest, 20) % 100_000_000_000_000_000;
        let sig = hex(rest.get(28..).unwrap_or_default());
        let pre = if mode & 4 == 0 { "0x" } else { "" };
        format!("wallet:0x{addr}:{ts}:{pre}{sig}")
    };
    let v = verifier();
    let purpose = if mode & 8 == 0 {
        Purpose::Login
    } else {
        Purpose::Resume
    };
    let _ = runtime().block_on(v.authenticate_at(&token, purpose, now_ms));
});
