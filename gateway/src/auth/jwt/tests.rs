//! One test per refusal, with keys generated here (Ed25519 and P-256; HS256 for the dev path).

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

use super::*;
use crate::auth::test_keys::{Signer, jwks_json};

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn cfg(path: &std::path::Path) -> JwtConfig {
    JwtConfig {
        jwks: Some(JwksSource::File(path.to_owned())),
        issuer: Some("https://issuer.test".into()),
        audience: Some("plaza".into()),
        min_refresh: Duration::from_millis(1),
        ..JwtConfig::new()
    }
}

fn claims() -> Value {
    json!({
        "sub": "user-1",
        "iss": "https://issuer.test",
        "aud": "plaza",
        "exp": now() + 600,
        "nbf": now() - 10,
    })
}

fn with(mut c: Value, key: &str, v: Value) -> Value {
    c[key] = v;
    c
}

struct Fixture {
    _dir: tempdir::Dir,
    path: PathBuf,
    ed: Signer,
    es: Signer,
    auth: Arc<JwtAuthenticator>,
}

mod tempdir {
    /// A directory removed on drop.
    pub(super) struct Dir(pub(super) std::path::PathBuf);
    impl Dir {
        pub(super) fn new() -> Self {
            let p = std::env::temp_dir().join(format!(
                "plaza-jwt-{}-{}",
                std::process::id(),
                rand::random::<u64>()
            ));
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

async fn fixture() -> Fixture {
    let dir = tempdir::Dir::new();
    let path = dir.0.join("jwks.json");
    let ed = Signer::ed25519("ed-1", 7);
    let es = Signer::es256("es-1", 9);
    std::fs::write(&path, jwks_json(&[&ed, &es])).unwrap();
    let auth = JwtAuthenticator::start(cfg(&path)).await.unwrap();
    assert_eq!(auth.key_count(), 2);
    Fixture {
        _dir: dir,
        path,
        ed,
        es,
        auth,
    }
}

async fn check(f: &Fixture, token: &str) -> Result<Identity, AuthError> {
    f.auth.authenticate(token, Purpose::Login).await
}

#[tokio::test]
async fn valid_tokens_of_each_algorithm_give_the_identity_claim() {
    let f = fixture().await;
    for s in [&f.ed, &f.es] {
        let id = check(&f, &s.sign(&claims())).await.unwrap();
        assert_eq!(id, Identity::member("user-1"));
    }
    // The `jwt:` prefix is accepted too.
    let t = format!("jwt:{}", f.ed.sign(&claims()));
    assert!(check(&f, &t).await.is_ok());
    // The operator role, as a string or in an array.
    for role in [json!("operator"), json!(["member", "operator"])] {
        let id = check(&f, &f.es.sign(&with(claims(), "role", role)))
            .await
            .unwrap();
        assert!(id.operator);
    }
    assert!(
        !check(&f, &f.es.sign(&with(claims(), "role", json!("member"))))
            .await
            .unwrap()
            .operator
    );
}

#[tokio::test]
async fn every_bad_token_has_its_typed_refusal() {
    let f = fixture().await;
    let t = now();
    // Expired beyond the leeway (30 s); within the leeway still fine.
    assert_eq!(
        check(&f, &f.ed.sign(&with(claims(), "exp", json!(t - 31)))).await,
        Err(AuthError::Expired)
    );
    assert!(
        check(&f, &f.ed.sign(&with(claims(), "exp", json!(t - 20))))
            .await
            .is_ok()
    );
    assert_eq!(
        check(&f, &f.ed.sign(&with(claims(), "nbf", json!(t + 120)))).await,
        Err(AuthError::NotYetValid)
    );
    assert_eq!(
        check(
            &f,
            &f.ed
                .sign(&with(claims(), "iss", json!("https://evil.test")))
        )
        .await,
        Err(AuthError::WrongIssuer)
    );
    assert_eq!(
        check(&f, &f.ed.sign(&with(claims(), "aud", json!("other")))).await,
        Err(AuthError::WrongAudience)
    );
    // Signed by a key that is not in the set, under a known kid: bad signature.
    let impostor = Signer::ed25519("ed-1", 8);
    assert_eq!(
        check(&f, &impostor.sign(&claims())).await,
        Err(AuthError::BadSignature)
    );
    // A key id that is not in the set (after one refresh).
    let stranger = Signer::ed25519("ed-unknown", 8);
    assert_eq!(
        check(&f, &stranger.sign(&claims())).await,
        Err(AuthError::UnknownKey)
    );
    // A tampered payload.
    let good = f.es.sign(&claims());
    let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
    parts[1] = crate::auth::test_keys::b64(
        serde_json::to_vec(&with(claims(), "sub", json!("admin"))).unwrap(),
    );
    assert_eq!(
        check(&f, &parts.join(".")).await,
        Err(AuthError::BadSignature)
    );
    // Malformed, `none`, HS256 without a secret, a missing exp, a missing identity claim.
    for bad in [
        "a.b.c".to_owned(),
        "not a jwt".to_owned(),
        format!(
            "{}.{}.",
            crate::auth::test_keys::b64(br#"{"alg":"none","typ":"JWT"}"#),
            crate::auth::test_keys::b64(serde_json::to_vec(&claims()).unwrap())
        ),
        hs256(b"s3cret", &claims()),
        f.ed.sign(&json!({"sub": "u", "iss": "https://issuer.test", "aud": "plaza"})),
        f.ed.sign(&json!({"iss": "https://issuer.test", "aud": "plaza", "exp": t + 60})),
        f.ed.sign(&with(claims(), "sub", json!(42))),
    ] {
        assert!(
            matches!(check(&f, &bad).await, Err(AuthError::InvalidToken(_))),
            "{bad}: {:?}",
            check(&f, &bad).await
        );
    }
    // The key of one algorithm under the kid of another: refused before any verification.
    let mixed = Signer::ed25519("es-1", 7);
    assert!(matches!(
        check(&f, &mixed.sign(&claims())).await,
        Err(AuthError::InvalidToken(_))
    ));
}

#[tokio::test]
async fn a_rotated_key_set_is_picked_up_on_an_unknown_kid() {
    let f = fixture().await;
    let next = Signer::es256("es-2", 11);
    // Not yet published: unknown.
    assert_eq!(
        check(&f, &next.sign(&claims())).await,
        Err(AuthError::UnknownKey)
    );
    // Published (the old ed key retired): the unknown kid triggers a refresh.
    std::fs::write(&f.path, jwks_json(&[&f.es, &next])).unwrap();
    assert!(check(&f, &next.sign(&claims())).await.is_ok());
    assert_eq!(f.auth.key_count(), 2);
    assert_eq!(
        check(&f, &f.ed.sign(&claims())).await,
        Err(AuthError::UnknownKey)
    );
}

#[tokio::test]
async fn forced_refreshes_are_rate_limited() {
    let dir = tempdir::Dir::new();
    let path = dir.0.join("jwks.json");
    let a = Signer::ed25519("a", 1);
    std::fs::write(&path, jwks_json(&[&a])).unwrap();
    let auth = JwtAuthenticator::start(JwtConfig {
        min_refresh: Duration::from_secs(3600),
        ..cfg(&path)
    })
    .await
    .unwrap();
    let b = Signer::ed25519("b", 2);
    // The first unknown kid refreshes (b is not there yet); the key then appears, but the
    // next unknown kid within min_refresh does not refresh again.
    assert_eq!(
        auth.authenticate(&b.sign(&claims()), Purpose::Login).await,
        Err(AuthError::UnknownKey)
    );
    std::fs::write(&path, jwks_json(&[&a, &b])).unwrap();
    assert_eq!(
        auth.authenticate(&b.sign(&claims()), Purpose::Login).await,
        Err(AuthError::UnknownKey)
    );
    auth.refresh().await.unwrap();
    assert!(
        auth.authenticate(&b.sign(&claims()), Purpose::Login)
            .await
            .is_ok()
    );
}

fn hs256(secret: &[u8], claims: &Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn hs256_works_with_the_dev_secret_only() {
    let auth = JwtAuthenticator::start(JwtConfig {
        hs256_secret: Some(b"dev-secret".to_vec()),
        ..JwtConfig::new()
    })
    .await
    .unwrap();
    let c = json!({"sub": "dev", "exp": now() + 60});
    assert_eq!(
        auth.authenticate(&hs256(b"dev-secret", &c), Purpose::Login)
            .await,
        Ok(Identity::member("dev"))
    );
    assert_eq!(
        auth.authenticate(&hs256(b"other", &c), Purpose::Login)
            .await,
        Err(AuthError::BadSignature)
    );
    // No key set: asymmetric tokens are refused.
    let ed = Signer::ed25519("k", 3);
    assert!(matches!(
        auth.authenticate(&ed.sign(&c), Purpose::Login).await,
        Err(AuthError::InvalidToken(_))
    ));
    assert!(JwtAuthenticator::start(JwtConfig::new()).await.is_err());
}

#[test]
fn odd_key_sets_are_parsed_without_panicking() {
    // Short Ed25519 x, an oct key, an encryption key, garbage: all skipped or refused.
    let set = parse_jwks(
        br#"{"keys":[
            {"kty":"OKP","crv":"Ed25519","x":"AAAA","kid":"short"},
            {"kty":"oct","k":"c2VjcmV0","kid":"sym"},
            {"kty":"OKP","crv":"Ed25519","use":"enc","kid":"enc","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty":"EC","crv":"P-256","kid":"badec","x":"AAAA","y":"AAAA"}
        ]}"#,
    )
    .unwrap();
    assert!(
        set.by_kid.is_empty(),
        "{:?}",
        set.by_kid.keys().collect::<Vec<_>>()
    );
    assert!(parse_jwks(b"not json").is_err());
    assert!(parse_jwks(b"{\"keys\":7}").is_err());
}
