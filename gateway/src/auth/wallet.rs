//! Wallet sign-in: an EIP-191 `personal_sign` signature of a secp256k1 wallet over a
//! timestamped message, recovered with `k256` and compared with the claimed address.
//!
//! Token: `wallet:<address>:<issued_at_ms>:<signature>` where `address` is `0x` + 40 hex digits
//! (any case), `issued_at_ms` the unix time in ms at signing (decimal), and `signature` the
//! 65-byte `r ‖ s ‖ v` in hex (`0x` optional; `v` 27/28 or 0/1). The signed message is
//! [`message`]:
//!
//! ```text
//! Plaza sign-in
//! domain: <auth.wallet_domain>
//! address: <address, lowercase>
//! issued_at: <issued_at_ms>
//! ```
//!
//! (lines joined by `\n`, no trailing newline), hashed as EIP-191 version `0x45`:
//! `keccak256("\x19Ethereum Signed Message:\n" ‖ len(message) ‖ message)`.
//!
//! A login is accepted when `issued_at` is within `window` before now (and at most `leeway`
//! after), and `(address, issued_at)` was not claimed before: the claim goes through
//! [`plaza_directory::Directory::claim_once`], so a signature used on one gateway is refused
//! on every other (`replayed`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k256::ecdsa::{RecoveryId, Signature, VerifyingKey};
use plaza_directory::SharedDirectory;
use sha3::{Digest as _, Keccak256};

use super::{AuthError, Identity, Purpose};

/// The token prefix.
pub const PREFIX: &str = "wallet:";

/// The wallet verifier's settings.
#[derive(Clone, Debug)]
pub struct WalletConfig {
    /// The domain line of the signed message (names this deployment, so a signature for
    /// another site is not valid here).
    pub domain: String,
    /// How old a signed message may be.
    pub window: Duration,
    /// How far in the future `issued_at` may be (clock skew).
    pub leeway: Duration,
}

impl Default for WalletConfig {
    fn default() -> Self {
        Self {
            domain: "plaza".into(),
            window: Duration::from_secs(60),
            leeway: Duration::from_secs(30),
        }
    }
}

/// A parsed wallet token (not verified).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalletToken {
    /// The claimed address, lowercase `0x…`.
    pub address: String,
    /// When the message was signed (unix ms).
    pub issued_at_ms: u64,
    /// `r ‖ s ‖ v`.
    pub signature: [u8; 65],
}

/// The 20-byte address of `0x` + 40 hex digits (any case), or `None`.
pub fn parse_address(s: &str) -> Option<[u8; 20]> {
    let hex = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    let mut out = [0u8; 20];
    decode_hex(hex, &mut out).then_some(out)
}

fn decode_hex(hex: &str, out: &mut [u8]) -> bool {
    let b = hex.as_bytes();
    if b.len() != out.len() * 2 {
        return false;
    }
    let nib = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    for (i, o) in out.iter_mut().enumerate() {
        match (nib(b[2 * i]), nib(b[2 * i + 1])) {
            (Some(h), Some(l)) => *o = (h << 4) | l,
            _ => return false,
        }
    }
    true
}

fn to_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 15)] as char);
    }
    s
}

/// Parses a `wallet:` token. Never panics on any input.
pub fn parse_token(token: &str) -> Result<WalletToken, AuthError> {
    let rest = token
        .strip_prefix(PREFIX)
        .ok_or_else(|| AuthError::invalid("not a wallet token"))?;
    let mut parts = rest.split(':');
    let (Some(addr), Some(ts), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthError::invalid(
            "a wallet token is wallet:<address>:<issued_at_ms>:<signature>",
        ));
    };
    if parse_address(addr).is_none() {
        return Err(AuthError::invalid("the address is not 0x + 40 hex digits"));
    }
    if ts.is_empty() || ts.len() > 16 || !ts.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AuthError::invalid("issued_at is not a unix time in ms"));
    }
    let issued_at_ms: u64 = ts
        .parse()
        .map_err(|_| AuthError::invalid("issued_at is not a unix time in ms"))?;
    let sig_hex = sig.strip_prefix("0x").unwrap_or(sig);
    let mut signature = [0u8; 65];
    if !decode_hex(sig_hex, &mut signature) {
        return Err(AuthError::invalid("the signature is not 65 bytes of hex"));
    }
    Ok(WalletToken {
        address: addr.to_ascii_lowercase(),
        issued_at_ms,
        signature,
    })
}

/// The message a wallet signs (see the module docs).
pub fn message(domain: &str, address: &str, issued_at_ms: u64) -> String {
    format!(
        "Plaza sign-in\ndomain: {domain}\naddress: {}\nissued_at: {issued_at_ms}",
        address.to_ascii_lowercase()
    )
}

/// The EIP-191 `personal_sign` hash of `message`.
pub fn eip191_hash(message: &[u8]) -> [u8; 32] {
    let mut h = Keccak256::new();
    h.update(format!("\x19Ethereum Signed Message:\n{}", message.len()).as_bytes());
    h.update(message);
    h.finalize().into()
}

/// The Ethereum address (lowercase `0x…`) of a public key.
pub fn address_of(key: &VerifyingKey) -> String {
    let point = key.to_sec1_point(false);
    let hash: [u8; 32] = Keccak256::digest(&point.as_bytes()[1..]).into();
    format!("0x{}", to_hex(&hash[12..]))
}

/// Recovers the signer's address of `signature` (`r ‖ s ‖ v`) over `message`.
pub fn recover(message: &[u8], signature: &[u8; 65]) -> Result<String, AuthError> {
    let v = match signature[64] {
        v @ (0 | 1) => v,
        v @ (27 | 28) => v - 27,
        _ => return Err(AuthError::BadSignature),
    };
    let sig = Signature::from_slice(&signature[..64]).map_err(|_| AuthError::BadSignature)?;
    let mut recid = RecoveryId::from_byte(v).ok_or(AuthError::BadSignature)?;
    // A high-s signature is the same signature mirrored: normalize it (and its parity).
    let low = sig.normalize_s();
    if low != sig {
        recid = RecoveryId::new(!recid.is_y_odd(), recid.is_x_reduced());
    }
    let sig = low;
    let key = VerifyingKey::recover_from_prehash(&eip191_hash(message), &sig, recid)
        .map_err(|_| AuthError::BadSignature)?;
    Ok(address_of(&key))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Verifies wallet tokens; one-time use through the directory.
pub struct WalletAuthenticator {
    cfg: WalletConfig,
    directory: SharedDirectory,
}

impl std::fmt::Debug for WalletAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalletAuthenticator")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl WalletAuthenticator {
    /// A verifier whose replay cache is `directory` (shared by every gateway of a cluster).
    pub fn new(cfg: WalletConfig, directory: SharedDirectory) -> Self {
        Self { cfg, directory }
    }

    /// Checks everything but the clock and the replay cache.
    pub fn verify_signature(&self, t: &WalletToken) -> Result<(), AuthError> {
        let msg = message(&self.cfg.domain, &t.address, t.issued_at_ms);
        let signer = recover(msg.as_bytes(), &t.signature)?;
        if signer != t.address {
            return Err(AuthError::BadSignature);
        }
        Ok(())
    }

    /// Verifies `token` at `now_ms`.
    pub async fn authenticate_at(
        &self,
        token: &str,
        purpose: Purpose,
        now_ms: u64,
    ) -> Result<Identity, AuthError> {
        let t = parse_token(token)?;
        self.verify_signature(&t)?;
        if purpose == Purpose::Login {
            let window = self.cfg.window.as_millis() as u64;
            let leeway = self.cfg.leeway.as_millis() as u64;
            if t.issued_at_ms > now_ms.saturating_add(leeway) {
                return Err(AuthError::NotYetValid);
            }
            if t.issued_at_ms.saturating_add(window) < now_ms {
                return Err(AuthError::Expired);
            }
            // Held as long as the signature could still be accepted anywhere.
            let ttl = (window + leeway + 1_000).clamp(1, plaza_directory::MAX_TTL_MS);
            let key = format!("auth:wallet:{}:{}", t.address, t.issued_at_ms);
            match self.directory.claim_once(&key, ttl).await {
                Ok(true) => {}
                Ok(false) => return Err(AuthError::Replayed),
                Err(e) => return Err(AuthError::Unavailable(format!("replay cache: {e}"))),
            }
        }
        Ok(Identity::member(t.address))
    }

    /// Verifies `token` now.
    pub async fn authenticate(&self, token: &str, purpose: Purpose) -> Result<Identity, AuthError> {
        self.authenticate_at(token, purpose, now_ms()).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k256::ecdsa::SigningKey;
    use plaza_directory::MemoryDirectory;

    use super::*;

    /// A real wallet key (fixed bytes, so the test is reproducible).
    fn wallet(seed: u8) -> SigningKey {
        let mut b = [0u8; 32];
        b[0] = 0x42;
        b[31] = seed;
        SigningKey::from_slice(&b).unwrap()
    }

    /// What a wallet's `personal_sign` produces: `r ‖ s ‖ (27 + parity)`.
    pub(crate) fn personal_sign(key: &SigningKey, message: &str) -> [u8; 65] {
        let (sig, recid) = key.sign_prehash_recoverable(&eip191_hash(message.as_bytes()));
        let mut out = [0u8; 65];
        out[..64].copy_from_slice(&sig.to_bytes());
        out[64] = 27 + recid.to_byte();
        out
    }

    fn token(key: &SigningKey, domain: &str, at: u64) -> String {
        let addr = address_of(key.verifying_key());
        let sig = personal_sign(key, &message(domain, &addr, at));
        format!("wallet:{}:{at}:0x{}", checksum_case(&addr), to_hex(&sig))
    }

    /// Mixed case, as wallets show addresses (the check is case-insensitive).
    fn checksum_case(addr: &str) -> String {
        addr.char_indices()
            .map(|(i, c)| {
                if i % 3 == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect::<String>()
            .replacen("0X", "0x", 1)
    }

    fn auth() -> WalletAuthenticator {
        WalletAuthenticator::new(WalletConfig::default(), Arc::new(MemoryDirectory::new()))
    }

    #[test]
    fn eip191_matches_a_known_vector() {
        // keccak256("\x19Ethereum Signed Message:\n11hello world"), as ethers/viem hash it.
        assert_eq!(
            to_hex(&eip191_hash(b"hello world")),
            "d9eba16ed0ecae432b71fe008c98cc872bb4cc214d3220a36f365326cf807d68"
        );
        // The address of private key 1 (the generator point).
        let mut one = [0u8; 32];
        one[31] = 1;
        let k = SigningKey::from_slice(&one).unwrap();
        assert_eq!(
            address_of(k.verifying_key()),
            "0x7e5f4552091a69125d5dfcb7b8c2659029395bdf"
        );
    }

    #[tokio::test]
    async fn a_signed_message_logs_in_once() {
        let a = auth();
        let k = wallet(1);
        let now = 1_700_000_000_000;
        let t = token(&k, "plaza", now - 5_000);
        let id = a.authenticate_at(&t, Purpose::Login, now).await.unwrap();
        assert_eq!(id.wallet, address_of(k.verifying_key()));
        assert!(!id.operator);
        assert_eq!(
            a.authenticate_at(&t, Purpose::Login, now).await,
            Err(AuthError::Replayed)
        );
        // A resume re-proves the identity with the same token (no window, no replay claim).
        assert_eq!(
            a.authenticate_at(&t, Purpose::Resume, now + 3_600_000)
                .await,
            Ok(id)
        );
    }

    #[tokio::test]
    async fn each_bad_case_has_its_reason() {
        let a = auth();
        let k = wallet(2);
        let now = 1_700_000_000_000;
        let login = |t: String| {
            let a = &a;
            async move { a.authenticate_at(&t, Purpose::Login, now).await }
        };
        assert_eq!(
            login(token(&k, "plaza", now - 61_000)).await,
            Err(AuthError::Expired)
        );
        assert_eq!(
            login(token(&k, "plaza", now + 31_000)).await,
            Err(AuthError::NotYetValid)
        );
        // Signed for another site.
        assert_eq!(
            login(token(&k, "evil.example", now)).await,
            Err(AuthError::BadSignature)
        );
        // Claims another wallet's address.
        let other = address_of(wallet(3).verifying_key());
        let t = token(&k, "plaza", now);
        let forged = format!("wallet:{other}:{}", t.splitn(3, ':').nth(2).unwrap());
        assert_eq!(login(forged).await, Err(AuthError::BadSignature));
        // A flipped bit in the signature.
        let mut bad = t.clone().into_bytes();
        let n = bad.len() - 10;
        bad[n] = if bad[n] == b'0' { b'1' } else { b'0' };
        assert_eq!(
            login(String::from_utf8(bad).unwrap()).await,
            Err(AuthError::BadSignature)
        );
        for malformed in [
            "wallet:",
            "wallet:0x12:1:00",
            "wallet:0x7e5f4552091a69125d5dfcb7b8c2659029395bdf:x:00",
            "wallet:0x7e5f4552091a69125d5dfcb7b8c2659029395bdf:1:0011",
            "wallet:0x7e5f4552091a69125d5dfcb7b8c2659029395bdf:1:00:extra",
            "wallet:0x7e5f4552091a69125d5dfcb7b8c2659029395bdf:99999999999999999:00",
        ] {
            assert!(
                matches!(
                    login(malformed.into()).await,
                    Err(AuthError::InvalidToken(_))
                ),
                "{malformed}"
            );
        }
        // A bad v byte.
        let mut sig = personal_sign(&k, "x");
        sig[64] = 29;
        assert_eq!(recover(b"x", &sig), Err(AuthError::BadSignature));
        // The good token still works (nothing above claimed it).
        assert!(login(t).await.is_ok());
    }

    #[tokio::test]
    async fn the_replay_cache_is_the_directory() {
        let dir: SharedDirectory = Arc::new(MemoryDirectory::new());
        let a = WalletAuthenticator::new(WalletConfig::default(), dir.clone());
        let b = WalletAuthenticator::new(WalletConfig::default(), dir);
        let now = 1_700_000_000_000;
        let t = token(&wallet(4), "plaza", now);
        assert!(a.authenticate_at(&t, Purpose::Login, now).await.is_ok());
        assert_eq!(
            b.authenticate_at(&t, Purpose::Login, now).await,
            Err(AuthError::Replayed)
        );
    }
}
