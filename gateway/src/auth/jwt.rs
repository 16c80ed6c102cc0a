//! JWT verification with keys from a JWKS (file or URL).
//!
//! * Algorithms: RS256, ES256 (P-256) and EdDSA (Ed25519) with keys of the key set; HS256 with
//!   a shared secret, for development only. The token's `alg` must be the key's; `none` and
//!   every other algorithm are refused.
//! * Keys: a JWKS file or URL, loaded at start and refreshed every `refresh`; a token whose
//!   `kid` is not in the set triggers one refresh, at most one per `min_refresh` (a flood of
//!   made-up key ids costs one fetch per interval), then fails with `unknown_key`. Symmetric
//!   (`oct`) and encryption keys of the set are ignored. Until a URL key set was loaded once,
//!   JWTs are refused as unavailable (retryable), not as unknown keys.
//! * Claims: `exp` required; `exp`/`nbf` checked with `leeway` (bounded by
//!   [`MAX_LEEWAY`]); `iss` and `aud` checked when configured; the identity is the string claim
//!   `identity_claim` (default `sub`); the operator role is `role_claim` equal to (or, as an
//!   array, containing) `"operator"`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use parking_lot::RwLock;
use serde_json::Value;
use tokio::time::Instant;

use super::{AuthError, Identity, MAX_IDENTITY_BYTES, Purpose};

/// Largest accepted clock-skew leeway.
pub const MAX_LEEWAY: Duration = Duration::from_secs(300);
/// Most keys kept from one key set.
pub const MAX_KEYS: usize = 64;
/// The role value that makes a session an operator.
pub const OPERATOR_ROLE: &str = "operator";

/// Where the key set comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwksSource {
    /// A JWKS JSON file, re-read at every refresh (rotation by replacing the file).
    File(PathBuf),
    /// A JWKS URL (`https://…/.well-known/jwks.json`), fetched at every refresh.
    Url(String),
}

/// The JWT verifier's settings.
#[derive(Clone, Debug)]
pub struct JwtConfig {
    /// The key set, if asymmetric tokens are accepted.
    pub jwks: Option<JwksSource>,
    /// The required `iss`, if any.
    pub issuer: Option<String>,
    /// The audience `aud` must contain, if any.
    pub audience: Option<String>,
    /// The claim naming the identity.
    pub identity_claim: String,
    /// The claim carrying the role.
    pub role_claim: String,
    /// Clock-skew leeway for `exp` and `nbf` (clamped to [`MAX_LEEWAY`]).
    pub leeway: Duration,
    /// HS256 secret (development); `None` refuses HS256.
    pub hs256_secret: Option<Vec<u8>>,
    /// Key-set refresh period.
    pub refresh: Duration,
    /// Shortest time between two refreshes caused by unknown key ids.
    pub min_refresh: Duration,
    /// Deadline of one key-set fetch.
    pub fetch_timeout: Duration,
}

impl JwtConfig {
    /// Defaults: no keys, `sub`, `role`, 30 s leeway, refresh every 5 min, at most one forced
    /// refresh per 10 s, 5 s fetch deadline.
    pub fn new() -> Self {
        Self {
            jwks: None,
            issuer: None,
            audience: None,
            identity_claim: "sub".into(),
            role_claim: "role".into(),
            leeway: Duration::from_secs(30),
            hs256_secret: None,
            refresh: Duration::from_secs(300),
            min_refresh: Duration::from_secs(10),
            fetch_timeout: Duration::from_secs(5),
        }
    }
}

impl Default for JwtConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// One verification key.
#[derive(Clone)]
struct Key {
    key: DecodingKey,
    alg: Algorithm,
}

/// The loaded key set.
#[derive(Clone, Default)]
struct KeySet {
    /// Keys with an id.
    by_kid: HashMap<String, Key>,
    /// Keys without one (used only for tokens without a `kid`).
    anonymous: Vec<Key>,
    /// Whether a load ever succeeded.
    loaded: bool,
}

/// Verifies JWTs; cheap to share (`Arc`). Its refresh task stops when the last `Arc` drops.
pub struct JwtAuthenticator {
    cfg: JwtConfig,
    keys: RwLock<Arc<KeySet>>,
    hs256: Option<DecodingKey>,
    /// When the last forced refresh started (serializes forced refreshes).
    forced: tokio::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for JwtAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = self.keys.read();
        f.debug_struct("JwtAuthenticator")
            .field("jwks", &self.cfg.jwks)
            .field("keys", &(keys.by_kid.len() + keys.anonymous.len()))
            .field("hs256", &self.hs256.is_some())
            .finish()
    }
}

impl JwtAuthenticator {
    /// Loads the key set (a file must load; a URL that cannot be reached yet is retried by
    /// the refresh task) and starts the periodic refresh (needs a Tokio runtime).
    pub async fn start(cfg: JwtConfig) -> Result<Arc<Self>, String> {
        if cfg.jwks.is_none() && cfg.hs256_secret.is_none() {
            return Err(
                "JWT mode needs a key set (jwks_file or jwks_url) or an HS256 secret".into(),
            );
        }
        let hs256 = match &cfg.hs256_secret {
            Some(s) if s.is_empty() => return Err("the HS256 secret is empty".into()),
            Some(s) => Some(DecodingKey::from_secret(s).map_err(|e| e.to_string())?),
            None => None,
        };
        let this = Arc::new(Self {
            keys: RwLock::new(Arc::new(KeySet::default())),
            hs256,
            forced: tokio::sync::Mutex::new(None),
            cfg,
        });
        match &this.cfg.jwks {
            Some(JwksSource::File(_)) => this.refresh().await?,
            Some(JwksSource::Url(url)) => {
                if let Err(e) = this.refresh().await {
                    tracing::warn!(url, error = %e, "JWKS not loaded yet; retrying");
                }
            }
            None => {}
        }
        if this.cfg.jwks.is_some() {
            tokio::spawn(refresh_loop(Arc::downgrade(&this)));
        }
        Ok(this)
    }

    /// Number of keys loaded.
    pub fn key_count(&self) -> usize {
        let k = self.keys.read();
        k.by_kid.len() + k.anonymous.len()
    }

    /// Reloads the key set now. On failure the previous set stays.
    pub async fn refresh(&self) -> Result<(), String> {
        let bytes = match &self.cfg.jwks {
            None => return Ok(()),
            Some(JwksSource::File(p)) => tokio::fs::read(p)
                .await
                .map_err(|e| format!("read {}: {e}", p.display()))?,
            Some(JwksSource::Url(u)) => super::fetch::get(u, self.cfg.fetch_timeout).await?,
        };
        let set = parse_jwks(&bytes)?;
        tracing::debug!(keys = set.by_kid.len() + set.anonymous.len(), "JWKS loaded");
        *self.keys.write() = Arc::new(set);
        Ok(())
    }

    /// The key for `kid` and `alg`: from the set, after one rate-limited refresh if absent.
    async fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<Key, AuthError> {
        if let Some(k) = lookup(&self.keys.read(), kid, alg)? {
            return Ok(k);
        }
        {
            let mut last = self.forced.lock().await;
            // Another task may have refreshed while this one waited.
            if let Some(k) = lookup(&self.keys.read(), kid, alg)? {
                return Ok(k);
            }
            let now = Instant::now();
            if last.is_none_or(|t| now.duration_since(t) >= self.cfg.min_refresh) {
                *last = Some(now);
                if let Err(e) = self.refresh().await {
                    tracing::warn!(error = %e, "JWKS refresh for an unknown key id failed");
                }
            }
        }
        let set = self.keys.read().clone();
        match lookup(&set, kid, alg)? {
            Some(k) => Ok(k),
            None if !set.loaded => Err(AuthError::Unavailable("the key set is not loaded".into())),
            None => Err(AuthError::UnknownKey),
        }
    }

    /// Verifies `token` (a compact JWS).
    pub async fn authenticate(
        &self,
        token: &str,
        _purpose: Purpose,
    ) -> Result<Identity, AuthError> {
        let token = token.strip_prefix("jwt:").unwrap_or(token);
        if token.len() > super::MAX_TOKEN_BYTES {
            return Err(AuthError::invalid("token too long"));
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| AuthError::invalid(format!("header: {e}")))?;
        let key = match header.alg {
            Algorithm::HS256 => match &self.hs256 {
                Some(k) => Key {
                    key: k.clone(),
                    alg: Algorithm::HS256,
                },
                None => return Err(AuthError::invalid("HS256 tokens are not accepted")),
            },
            Algorithm::RS256 | Algorithm::ES256 | Algorithm::EdDSA => {
                if self.cfg.jwks.is_none() {
                    return Err(AuthError::invalid(format!(
                        "{:?} tokens are not accepted (no key set)",
                        header.alg
                    )));
                }
                if header.kid.as_ref().is_some_and(|k| k.len() > 256) {
                    return Err(AuthError::invalid("kid too long"));
                }
                self.key_for(header.kid.as_deref(), header.alg).await?
            }
            other => {
                return Err(AuthError::invalid(format!(
                    "algorithm {other:?} is not accepted"
                )));
            }
        };
        let claims = verify(token, &key, &self.cfg)?;
        identity_from(&claims, &self.cfg)
    }
}

/// Verifies signature and registered claims; returns the claims.
fn verify(
    token: &str,
    key: &Key,
    cfg: &JwtConfig,
) -> Result<serde_json::Map<String, Value>, AuthError> {
    let mut v = Validation::new(key.alg);
    v.leeway = cfg.leeway.min(MAX_LEEWAY).as_secs();
    v.validate_exp = true;
    v.validate_nbf = true;
    v.required_spec_claims = ["exp".to_owned()].into_iter().collect();
    match &cfg.issuer {
        Some(iss) => {
            v.set_issuer(&[iss]);
            v.required_spec_claims.insert("iss".into());
        }
        None => v.iss = None,
    }
    match &cfg.audience {
        Some(aud) => {
            v.set_audience(&[aud]);
            v.required_spec_claims.insert("aud".into());
        }
        None => v.validate_aud = false,
    }
    jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key.key, &v)
        .map(|d| d.claims)
        .map_err(|e| match e.kind() {
            ErrorKind::InvalidSignature => AuthError::BadSignature,
            ErrorKind::ExpiredSignature => AuthError::Expired,
            ErrorKind::ImmatureSignature => AuthError::NotYetValid,
            ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
            ErrorKind::InvalidAudience => AuthError::WrongAudience,
            ErrorKind::MissingRequiredClaim(c) if c == "iss" => AuthError::WrongIssuer,
            ErrorKind::MissingRequiredClaim(c) if c == "aud" => AuthError::WrongAudience,
            ErrorKind::InvalidAlgorithm => AuthError::invalid("algorithm does not match the key"),
            other => AuthError::invalid(format!("{other:?}")),
        })
}

/// The identity (and role) of verified claims.
fn identity_from(
    claims: &serde_json::Map<String, Value>,
    cfg: &JwtConfig,
) -> Result<Identity, AuthError> {
    let wallet = match claims.get(&cfg.identity_claim) {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_IDENTITY_BYTES => {
            // Wallet-shaped identities are kept in one case, as wallet sign-in does.
            if super::wallet::parse_address(s).is_some() {
                s.to_ascii_lowercase()
            } else {
                s.clone()
            }
        }
        Some(_) => {
            return Err(AuthError::invalid(format!(
                "claim `{}` is not a string of 1..={MAX_IDENTITY_BYTES} bytes",
                cfg.identity_claim
            )));
        }
        None => {
            return Err(AuthError::invalid(format!(
                "no `{}` claim",
                cfg.identity_claim
            )));
        }
    };
    let operator = match claims.get(&cfg.role_claim) {
        Some(Value::String(r)) => r == OPERATOR_ROLE,
        Some(Value::Array(rs)) => rs.iter().any(|r| r.as_str() == Some(OPERATOR_ROLE)),
        _ => false,
    };
    Ok(Identity { wallet, operator })
}

fn lookup(set: &KeySet, kid: Option<&str>, alg: Algorithm) -> Result<Option<Key>, AuthError> {
    let key = match kid {
        Some(kid) => set.by_kid.get(kid).cloned(),
        // Without a kid: the only key of the set, if it has exactly one of this algorithm.
        None => {
            let mut of_alg = set
                .by_kid
                .values()
                .chain(&set.anonymous)
                .filter(|k| k.alg == alg);
            match (of_alg.next(), of_alg.next()) {
                (Some(k), None) => Some(k.clone()),
                (Some(_), Some(_)) => {
                    return Err(AuthError::invalid(
                        "the token has no kid and the key set has several keys",
                    ));
                }
                _ => None,
            }
        }
    };
    match key {
        Some(k) if k.alg != alg => Err(AuthError::invalid(format!(
            "the key is for {:?}, the token is {alg:?}",
            k.alg
        ))),
        other => Ok(other),
    }
}

/// Parses a JWKS document; keys that are not RS256 / ES256 / EdDSA signature keys are skipped.
fn parse_jwks(bytes: &[u8]) -> Result<KeySet, String> {
    let set: JwkSet = serde_json::from_slice(bytes).map_err(|e| format!("JWKS: {e}"))?;
    let mut out = KeySet {
        loaded: true,
        ..Default::default()
    };
    for jwk in set.keys {
        if out.by_kid.len() + out.anonymous.len() >= MAX_KEYS {
            tracing::warn!(
                max = MAX_KEYS,
                "JWKS has too many keys; the rest are ignored"
            );
            break;
        }
        if matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
            continue;
        }
        let inferred = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
            AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => {
                Some(Algorithm::ES256)
            }
            AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
                Some(Algorithm::EdDSA)
            }
            _ => None,
        };
        let declared = match jwk.common.key_algorithm {
            None => inferred,
            Some(KeyAlgorithm::RS256) => Some(Algorithm::RS256),
            Some(KeyAlgorithm::ES256) => Some(Algorithm::ES256),
            Some(KeyAlgorithm::EdDSA) => Some(Algorithm::EdDSA),
            Some(_) => None,
        };
        let alg = match (declared, inferred) {
            (Some(d), Some(i)) if d == i => d,
            _ => {
                tracing::debug!(kid = ?jwk.common.key_id, "JWKS key skipped (unsupported)");
                continue;
            }
        };
        if !sizes_ok(&jwk.algorithm) {
            tracing::warn!(kid = ?jwk.common.key_id, "JWKS key skipped (bad key size)");
            continue;
        }
        let key = match DecodingKey::from_jwk(&jwk) {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!(kid = ?jwk.common.key_id, error = %e, "JWKS key skipped");
                continue;
            }
        };
        let k = Key { key, alg };
        match jwk.common.key_id {
            Some(kid) => {
                out.by_kid.insert(kid, k);
            }
            None => out.anonymous.push(k),
        }
    }
    Ok(out)
}

/// How many usable keys a JWKS document holds (the parser of [`JwtAuthenticator::refresh`],
/// for fuzzing and checks).
pub fn parse_jwks_keys(bytes: &[u8]) -> Result<usize, String> {
    parse_jwks(bytes).map(|s| s.by_kid.len() + s.anonymous.len())
}

/// Decoded length of a base64url field.
fn b64_len(s: &str) -> Option<usize> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .ok()
        .map(|b| b.len())
}

/// Key material of the expected size: P-256 coordinates and Ed25519 keys of 32 bytes, RSA
/// moduli of 2048..=8192 bits (the verifiers assume these sizes).
fn sizes_ok(p: &AlgorithmParameters) -> bool {
    match p {
        AlgorithmParameters::EllipticCurve(p) => {
            b64_len(&p.x) == Some(32) && b64_len(&p.y) == Some(32)
        }
        AlgorithmParameters::OctetKeyPair(p) => b64_len(&p.x) == Some(32),
        AlgorithmParameters::RSA(p) => {
            b64_len(&p.n).is_some_and(|n| (256..=1024).contains(&n))
                && b64_len(&p.e).is_some_and(|e| (1..=8).contains(&e))
        }
        _ => false,
    }
}

async fn refresh_loop(this: Weak<JwtAuthenticator>) {
    let mut wait = match this.upgrade() {
        Some(a) => a.cfg.refresh,
        None => return,
    };
    loop {
        tokio::time::sleep(wait).await;
        let Some(a) = this.upgrade() else { return };
        wait = match a.refresh().await {
            Ok(()) => a.cfg.refresh,
            Err(e) => {
                tracing::warn!(error = %e, "JWKS refresh failed; the previous keys stay");
                // Retry sooner while the set was never loaded.
                if a.keys.read().loaded {
                    a.cfg.refresh
                } else {
                    a.cfg.min_refresh
                }
            }
        };
    }
}

#[cfg(test)]
mod tests;
