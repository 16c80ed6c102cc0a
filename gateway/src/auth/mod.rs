//! Authentication: a negotiate's `auth_token` becomes an [`Identity`], or a typed [`AuthError`]
//! that closes the session with 4003 and a reason the client reads (never retried).
//!
//! * [`DevAuthenticator`]: guests (`""` → a fresh guest, `guest:<name>` → that guest).
//! * [`jwt::JwtAuthenticator`]: signed JWTs (RS256 / ES256 / EdDSA from a JWKS file or URL,
//!   HS256 with a shared secret for development), `exp`/`nbf` with bounded leeway, issuer and
//!   audience checks, a configurable identity claim and an operator role claim.
//! * [`wallet::WalletAuthenticator`]: EIP-191 `personal_sign` signatures of a secp256k1 wallet
//!   over a timestamped message, replay-checked through the directory (shared by every gateway).
//! * [`Combined`]: the deployment's set of the above (`auth.mode = "jwt+wallet"`, …) plus a ban
//!   list; it routes a token by its shape.
//!
//! Token formats are in docs/PROTOCOL.md ("Authentication").

pub mod fetch;
pub mod jwt;
#[cfg(any(test, feature = "test-util"))]
pub mod test_keys;
pub mod wallet;

use std::collections::HashSet;
use std::sync::Arc;

use rand::Rng as _;

/// Longest `auth_token` any authenticator looks at (bytes); longer ones are refused unparsed.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Longest identity (bytes): the directory's id limit.
pub const MAX_IDENTITY_BYTES: usize = plaza_directory::MAX_ID_LEN;

/// Who a session acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The wallet (or guest id, or the JWT's identity claim) the session is known by in rooms
    /// and presence.
    pub wallet: String,
    /// Whether the session may use the operator messages of the client protocol (a JWT with
    /// the operator role; never a guest or a wallet).
    pub operator: bool,
}

impl Identity {
    /// A plain (non-operator) identity.
    pub fn member(wallet: impl Into<String>) -> Self {
        Self {
            wallet: wallet.into(),
            operator: false,
        }
    }
}

/// Why authentication failed. Every variant but [`AuthError::Unavailable`] is terminal.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The token is malformed, of a kind this deployment does not accept, or lacks a claim.
    #[error("invalid token: {0}")]
    InvalidToken(String),
    /// No credentials where they are needed: no token, or a guest token while guests are
    /// off.
    #[error("{0}")]
    Required(&'static str),
    /// The token's `exp` (or the wallet message's time window) has passed.
    #[error("the token has expired")]
    Expired,
    /// The token's `nbf` (or the wallet message's time) is in the future.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// The signature does not verify (or does not recover the claimed wallet).
    #[error("bad signature")]
    BadSignature,
    /// The token's `iss` is not the configured issuer.
    #[error("wrong issuer")]
    WrongIssuer,
    /// The token's `aud` does not name the configured audience.
    #[error("wrong audience")]
    WrongAudience,
    /// No key of the key set has the token's key id (after one refresh).
    #[error("unknown key id")]
    UnknownKey,
    /// This wallet signature was used before (on any gateway).
    #[error("the signature was used before")]
    Replayed,
    /// The identity is banned.
    #[error("the identity is banned")]
    Banned,
    /// A resume token presented with another identity's credentials (or none, for an
    /// identity that has credentials).
    #[error("the resume token belongs to another identity")]
    ResumeMismatch,
    /// The keys or the anti-replay store could not be reached: try again later.
    #[error("authentication unavailable: {0}")]
    Unavailable(String),
}

impl AuthError {
    /// Shorthand for [`AuthError::InvalidToken`].
    pub fn invalid(why: impl Into<String>) -> Self {
        Self::InvalidToken(why.into())
    }

    /// The gateway refusal (row of the refusal table) this error closes the session with.
    pub fn refusal(&self) -> crate::refusal::Refusal {
        use crate::refusal::Refusal as R;
        match self {
            Self::InvalidToken(_) => R::Auth,
            Self::Required(_) => R::AuthRequired,
            Self::Expired => R::AuthExpired,
            Self::NotYetValid => R::AuthNotYetValid,
            Self::BadSignature => R::AuthBadSignature,
            Self::WrongIssuer => R::AuthWrongIssuer,
            Self::WrongAudience => R::AuthWrongAudience,
            Self::UnknownKey => R::AuthUnknownKey,
            Self::Replayed => R::AuthReplayed,
            Self::Banned => R::AuthBanned,
            Self::ResumeMismatch => R::AuthResumeMismatch,
            Self::Unavailable(_) => R::AuthUnavailable,
        }
    }

    /// The message the client reads: `<reason>: <detail>`, the reason being the refusal's
    /// stable name (`auth_expired`, …; `auth` for an invalid token).
    pub fn client_message(&self) -> String {
        format!("{}: {self}", self.refusal().name())
    }

    /// The refusal and the message, as `SessionCore::on_identity` takes a failed
    /// authentication.
    pub fn verdict(&self) -> (crate::refusal::Refusal, String) {
        (self.refusal(), self.client_message())
    }
}

/// What a token is checked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A new session: every check, and one-time tokens (wallet signatures) are used up.
    Login,
    /// A resume (the resume token, single-use, is the session's proof): the token only has to
    /// prove the same identity. Signatures, keys, issuer, audience and JWT expiry are checked;
    /// a wallet signature's time window and replay cache are not (the client signed it when
    /// it first connected).
    Resume,
}

/// Turns a negotiate's token into an identity.
#[async_trait::async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// Authenticates `token` (empty when the client sent none).
    async fn authenticate(&self, token: &str, purpose: Purpose) -> Result<Identity, AuthError>;
}

/// Dev-mode authenticator: no token → a fresh guest; `guest:<name>` → that guest (names of
/// 1..=32 characters `[A-Za-z0-9_-]`); anything else is refused.
#[derive(Clone, Copy, Debug, Default)]
pub struct DevAuthenticator;

impl DevAuthenticator {
    /// The synchronous check (guests need no I/O).
    pub fn guest(token: &str) -> Result<Identity, AuthError> {
        if token.is_empty() {
            let n: u64 = rand::rng().random();
            return Ok(Identity::member(format!("guest-{n:016x}")));
        }
        let name = token
            .strip_prefix("guest:")
            .ok_or_else(|| AuthError::invalid("not a guest token"))?;
        let ok = !name.is_empty()
            && name.len() <= 32
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(AuthError::invalid(
                "a guest name is 1..=32 characters [A-Za-z0-9_-]",
            ));
        }
        Ok(Identity::member(format!("guest-{name}")))
    }
}

#[async_trait::async_trait]
impl Authenticator for DevAuthenticator {
    async fn authenticate(&self, token: &str, _purpose: Purpose) -> Result<Identity, AuthError> {
        Self::guest(token)
    }
}

/// Whether an identity was issued without credentials (a guest): only those may resume with
/// the resume token alone.
pub fn is_guest(wallet: &str) -> bool {
    wallet.starts_with("guest-")
}

/// The deployment's authenticators and ban list. A token is routed by its shape: empty or
/// `guest:…` → guests, `wallet:…` → wallet signatures, anything else → JWT. A kind that is not
/// enabled is refused as an invalid token.
#[derive(Default)]
pub struct Combined {
    /// Guests allowed.
    pub guest: bool,
    /// The JWT verifier, if JWTs are accepted.
    pub jwt: Option<Arc<jwt::JwtAuthenticator>>,
    /// The wallet verifier, if wallet signatures are accepted.
    pub wallet: Option<Arc<wallet::WalletAuthenticator>>,
    /// Banned identities (wallets lowercase; compared after authentication).
    pub banned: HashSet<String>,
}

impl std::fmt::Debug for Combined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combined")
            .field("guest", &self.guest)
            .field("jwt", &self.jwt.is_some())
            .field("wallet", &self.wallet.is_some())
            .field("banned", &self.banned.len())
            .finish()
    }
}

impl Combined {
    /// Parses a ban list: identities separated by commas or whitespace (wallet addresses are
    /// compared case-insensitively).
    pub fn parse_ban_list(text: &str) -> HashSet<String> {
        text.split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(normalize_identity)
            .collect()
    }

    fn is_banned(&self, wallet: &str) -> bool {
        !self.banned.is_empty() && self.banned.contains(&normalize_identity(wallet))
    }
}

/// Wallet addresses (`0x` + 40 hex) compare case-insensitively; other identities as they are.
fn normalize_identity(id: &str) -> String {
    if wallet::parse_address(id).is_some() {
        id.to_ascii_lowercase()
    } else {
        id.to_owned()
    }
}

#[async_trait::async_trait]
impl Authenticator for Combined {
    async fn authenticate(&self, token: &str, purpose: Purpose) -> Result<Identity, AuthError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(AuthError::invalid(format!(
                "longer than {MAX_TOKEN_BYTES} bytes"
            )));
        }
        let ident = if token.is_empty() || token.starts_with("guest:") {
            if !self.guest {
                return Err(AuthError::Required(if token.is_empty() {
                    "this gateway needs a token (guests are not accepted)"
                } else {
                    "guests are not accepted here: sign in with a token"
                }));
            }
            DevAuthenticator::guest(token)?
        } else if token.starts_with(wallet::PREFIX) {
            match &self.wallet {
                Some(w) => w.authenticate(token, purpose).await?,
                None => return Err(AuthError::invalid("wallet sign-in is not accepted")),
            }
        } else {
            match &self.jwt {
                Some(j) => j.authenticate(token, purpose).await?,
                None => return Err(AuthError::invalid("not a token this gateway accepts")),
            }
        };
        if self.is_banned(&ident.wallet) {
            return Err(AuthError::Banned);
        }
        Ok(ident)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dev_auth_issues_guests_and_refuses_other_tokens() {
        let a = DevAuthenticator;
        let login = |t: &'static str| a.authenticate(t, Purpose::Login);
        assert!(login("").await.unwrap().wallet.starts_with("guest-"));
        assert_eq!(login("guest:ann").await.unwrap().wallet, "guest-ann");
        assert!(!login("guest:ann").await.unwrap().operator);
        for bad in ["jwt.abc", "guest:", "guest:a b"] {
            assert!(
                matches!(login(bad).await, Err(AuthError::InvalidToken(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_error_has_its_own_terminal_4003_refusal() {
        let all = [
            AuthError::invalid("x"),
            AuthError::Required("no token"),
            AuthError::Expired,
            AuthError::NotYetValid,
            AuthError::BadSignature,
            AuthError::WrongIssuer,
            AuthError::WrongAudience,
            AuthError::UnknownKey,
            AuthError::Replayed,
            AuthError::Banned,
            AuthError::ResumeMismatch,
        ];
        let refusals: HashSet<_> = all.iter().map(AuthError::refusal).collect();
        assert_eq!(refusals.len(), all.len());
        for e in &all {
            let r = e.refusal();
            assert_eq!(r.close().map(crate::close::CloseCode::code), Some(4003));
            assert!(!r.retryable());
            assert!(e.client_message().starts_with(&format!("{}: ", r.name())));
        }
        assert_eq!(
            AuthError::Expired.client_message(),
            "auth_expired: the token has expired"
        );
        // Unavailable keys or replay cache: retryable, not 4003.
        let u = AuthError::Unavailable("down".into()).refusal();
        assert!(u.retryable());
        assert_ne!(u.close().map(crate::close::CloseCode::code), Some(4003));
    }

    /// The fuzz targets' property (gateway/fuzz), run briefly on every test run: mutations of
    /// valid tokens and random strings are refused with a typed error, never a panic.
    #[tokio::test]
    async fn mutated_and_random_tokens_never_panic() {
        use rand::{Rng as _, SeedableRng as _};
        let jwt = jwt::JwtAuthenticator::start(jwt::JwtConfig {
            hs256_secret: Some(b"k".to_vec()),
            ..jwt::JwtConfig::new()
        })
        .await
        .unwrap();
        let dir: plaza_directory::SharedDirectory =
            Arc::new(plaza_directory::MemoryDirectory::new());
        let c = Combined {
            guest: true,
            jwt: Some(jwt),
            wallet: Some(Arc::new(wallet::WalletAuthenticator::new(
                wallet::WalletConfig::default(),
                dir,
            ))),
            banned: HashSet::new(),
        };
        let (key, _) = test_keys::wallet(5);
        let signer = test_keys::Signer::ed25519("k", 1);
        let seeds = [
            test_keys::wallet_token(&key, "plaza", 1_700_000_000_000),
            signer.sign(&serde_json::json!({"sub": "a", "exp": 4_000_000_000u64})),
            "guest:ann".to_owned(),
        ];
        let alphabet = b"0123456789abcdefxX:.-_=+/{}\"eyJwallet guest";
        let mut rng = rand::rngs::SmallRng::seed_from_u64(15);
        for i in 0..3_000 {
            let mut t = seeds[i % seeds.len()].clone().into_bytes();
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..=t.len());
                match rng.random_range(0..3) {
                    0 if at < t.len() => t[at] = alphabet[rng.random_range(0..alphabet.len())],
                    1 if at < t.len() => {
                        t.truncate(at);
                    }
                    _ => t.insert(at, alphabet[rng.random_range(0..alphabet.len())]),
                }
            }
            let t = String::from_utf8_lossy(&t).into_owned();
            let _ = c.authenticate(&t, Purpose::Login).await;
            let _ = c.authenticate(&t, Purpose::Resume).await;
            let _ = jwt::parse_jwks_keys(t.as_bytes());
        }
    }

    #[tokio::test]
    async fn combined_routes_by_shape_and_bans() {
        let mut c = Combined {
            guest: true,
            banned: Combined::parse_ban_list(
                "guest-mallory, 0xABCDEFabcdefABCDEFabcdefABCDEFabcdefABCD",
            ),
            ..Default::default()
        };
        assert_eq!(
            c.authenticate("guest:ann", Purpose::Login).await.unwrap(),
            Identity::member("guest-ann")
        );
        assert_eq!(
            c.authenticate("guest:mallory", Purpose::Login).await,
            Err(AuthError::Banned)
        );
        assert!(c.is_banned("0xabcdefabcdefabcdefabcdefabcdefabcdefabcd"));
        // JWTs and wallets are refused when not enabled; so are guests when disabled.
        assert!(matches!(
            c.authenticate("eyJ.a.b", Purpose::Login).await,
            Err(AuthError::InvalidToken(_))
        ));
        assert!(matches!(
            c.authenticate("wallet:0x00:1:00", Purpose::Login).await,
            Err(AuthError::InvalidToken(_))
        ));
        c.guest = false;
        for no_credentials in ["", "guest:ann"] {
            let e = c
                .authenticate(no_credentials, Purpose::Login)
                .await
                .unwrap_err();
            assert!(matches!(e, AuthError::Required(_)), "{e:?}");
            assert!(e.client_message().starts_with("auth_required: "), "{e}");
        }
        let long = "x".repeat(MAX_TOKEN_BYTES + 1);
        assert!(matches!(
            c.authenticate(&long, Purpose::Login).await,
            Err(AuthError::InvalidToken(_))
        ));
    }
}
