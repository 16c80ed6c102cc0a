//! The node's gRPC gate (the bearer token every call must carry) and error formatting.

/// An error and its sources, `: `-joined.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The node's gRPC gate: with a token configured, every call must carry
/// `authorization: Bearer <token>` (compared in constant time), else `UNAUTHENTICATED`.
pub(crate) fn require_token(
    token: Option<String>,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |req: tonic::Request<()>| {
        let Some(token) = &token else {
            return Ok(req);
        };
        let presented = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let same = presented.len() == token.len()
            && presented
                .bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if same {
            Ok(req)
        } else {
            Err(tonic::Status::unauthenticated(
                "this node requires the cluster's node.grpc_token",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(token: Option<&str>, header: Option<&str>) -> Result<(), tonic::Code> {
        let mut gate = require_token(token.map(str::to_owned));
        let mut req = tonic::Request::new(());
        if let Some(h) = header {
            req.metadata_mut()
                .insert("authorization", h.parse().expect("ascii"));
        }
        gate(req).map(|_| ()).map_err(|s| s.code())
    }

    #[test]
    fn without_a_token_every_call_passes() {
        assert_eq!(call(None, None), Ok(()));
        assert_eq!(call(None, Some("Bearer whatever")), Ok(()));
    }

    #[test]
    fn with_a_token_only_the_same_bearer_passes() {
        let t = Some("s3cret");
        assert_eq!(call(t, Some("Bearer s3cret")), Ok(()));
        for bad in [
            None,
            Some("Bearer s3cre"),
            Some("Bearer s3creT"),
            Some("s3cret"),
            Some("Bearer s3cret2"),
        ] {
            assert_eq!(call(t, bad), Err(tonic::Code::Unauthenticated), "{bad:?}");
        }
    }

    #[test]
    fn an_error_chain_joins_the_sources() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("outer")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(error_chain(&e), "outer: inner");
    }
}
