//! Authentication seam. Dev mode issues guest identities; a real authenticator (signed tokens,
//! wallets) implements [`Authenticator`] and replaces it without touching the session code.

use rand::Rng as _;

/// Who a session acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The wallet (or guest id) the session is known by in rooms and presence.
    pub wallet: String,
}

/// Why authentication failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The token is not one this authenticator accepts.
    #[error("invalid token")]
    InvalidToken,
}

/// Turns a negotiate's token into an identity.
pub trait Authenticator: Send + Sync + 'static {
    /// Authenticates `token` (empty when the client sent none).
    fn authenticate(&self, token: &str) -> Result<Identity, AuthError>;
}

/// Dev-mode authenticator: no token → a fresh guest; `guest:<name>` → that guest (names of
/// 1..=32 characters `[A-Za-z0-9_-]`); anything else is refused.
#[derive(Clone, Copy, Debug, Default)]
pub struct DevAuthenticator;

impl Authenticator for DevAuthenticator {
    fn authenticate(&self, token: &str) -> Result<Identity, AuthError> {
        if token.is_empty() {
            let n: u64 = rand::rng().random();
            return Ok(Identity {
                wallet: format!("guest-{n:016x}"),
            });
        }
        let name = token
            .strip_prefix("guest:")
            .ok_or(AuthError::InvalidToken)?;
        let ok = !name.is_empty()
            && name.len() <= 32
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(AuthError::InvalidToken);
        }
        Ok(Identity {
            wallet: format!("guest-{name}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_auth_issues_guests_and_refuses_other_tokens() {
        let a = DevAuthenticator;
        assert!(a.authenticate("").unwrap().wallet.starts_with("guest-"));
        assert_eq!(a.authenticate("guest:ann").unwrap().wallet, "guest-ann");
        assert_eq!(a.authenticate("jwt.abc"), Err(AuthError::InvalidToken));
        assert_eq!(a.authenticate("guest:"), Err(AuthError::InvalidToken));
        assert_eq!(a.authenticate("guest:a b"), Err(AuthError::InvalidToken));
    }
}
