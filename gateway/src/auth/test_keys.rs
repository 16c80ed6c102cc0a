//! Keys and tokens for tests (feature `test-util`): Ed25519 and P-256 JWT signers with their
//! JWKS entries, and wallet tokens signed by a real secp256k1 key. Deterministic from a seed.

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

/// Base64url without padding (JWT encoding).
pub fn b64(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A JWT signing key with its public JWK.
pub struct Signer {
    /// The key id.
    pub kid: String,
    /// The algorithm.
    pub alg: Algorithm,
    key: EncodingKey,
    /// The public key as a JWK (with `kid`, `alg`, `use`).
    pub jwk: Value,
}

impl Signer {
    /// An Ed25519 (EdDSA) key from `seed`.
    pub fn ed25519(kid: &str, seed: u8) -> Self {
        let secret = [seed; 32];
        let public = ed25519_dalek::SigningKey::from_bytes(&secret)
            .verifying_key()
            .to_bytes();
        // PKCS#8 v1 of an Ed25519 key: a fixed prefix and the 32-byte seed.
        let mut der = vec![
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        der.extend_from_slice(&secret);
        Self {
            kid: kid.into(),
            alg: Algorithm::EdDSA,
            key: EncodingKey::from_ed_der(&der),
            jwk: json!({"kty": "OKP", "crv": "Ed25519", "x": b64(public), "kid": kid, "alg": "EdDSA", "use": "sig"}),
        }
    }

    /// A P-256 (ES256) key from `seed`.
    pub fn es256(kid: &str, seed: u8) -> Self {
        let secret = [seed; 32];
        let sk = p256::SecretKey::from_slice(&secret).expect("a valid P-256 scalar");
        let point = p256::elliptic_curve::sec1::ToSec1Point::to_sec1_point(&sk.public_key(), false);
        let (x, y) = (point.x().expect("x"), point.y().expect("y"));
        // PKCS#8 of a P-256 key (SEC1 ECPrivateKey without the optional public key).
        let mut der = vec![
            0x30, 0x41, 0x02, 0x01, 0x00, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d,
            0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x04, 0x27,
            0x30, 0x25, 0x02, 0x01, 0x01, 0x04, 0x20,
        ];
        der.extend_from_slice(&secret);
        Self {
            kid: kid.into(),
            alg: Algorithm::ES256,
            key: EncodingKey::from_ec_der(&der),
            jwk: json!({"kty": "EC", "crv": "P-256", "x": b64(x), "y": b64(y), "kid": kid, "alg": "ES256", "use": "sig"}),
        }
    }

    /// A compact JWT of `claims` signed with this key (header `kid` set).
    pub fn sign(&self, claims: &Value) -> String {
        let mut h = Header::new(self.alg);
        h.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&h, claims, &self.key).expect("sign a test token")
    }
}

/// A JWKS document of `keys`.
pub fn jwks_json(keys: &[&Signer]) -> String {
    json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()}).to_string()
}

/// A wallet (secp256k1 key from `seed`, which must be non-zero) and its lowercase address.
pub fn wallet(seed: u8) -> (k256::ecdsa::SigningKey, String) {
    let mut b = [0u8; 32];
    b[0] = 0x17;
    b[31] = seed;
    let key = k256::ecdsa::SigningKey::from_slice(&b).expect("a valid secp256k1 scalar");
    let addr = super::wallet::address_of(key.verifying_key());
    (key, addr)
}

/// A `wallet:` token: `personal_sign` of the sign-in message for `domain` at `issued_at_ms`.
pub fn wallet_token(key: &k256::ecdsa::SigningKey, domain: &str, issued_at_ms: u64) -> String {
    let addr = super::wallet::address_of(key.verifying_key());
    let msg = super::wallet::message(domain, &addr, issued_at_ms);
    let (sig, recid) = key.sign_prehash_recoverable(&super::wallet::eip191_hash(msg.as_bytes()));
    let mut out = sig.to_bytes().to_vec();
    out.push(27 + recid.to_byte());
    let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
    format!("wallet:{addr}:{issued_at_ms}:0x{hex}")
}
