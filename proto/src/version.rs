//! Protocol version negotiation: the highest version both sides list wins; no overlap is a
//! typed `unsupported_version` error carrying the server's list.

use crate::pb::ProtocolVersion;

/// The versions this build speaks, highest last.
pub const SUPPORTED: [ProtocolVersion; 1] = [ProtocolVersion { major: 1, minor: 0 }];

/// The highest version in both `client` and [`SUPPORTED`], if any.
pub fn negotiate(client: &[ProtocolVersion]) -> Option<ProtocolVersion> {
    negotiate_with(client, &SUPPORTED)
}

/// The highest version in both lists, if any.
pub fn negotiate_with(
    client: &[ProtocolVersion],
    server: &[ProtocolVersion],
) -> Option<ProtocolVersion> {
    server
        .iter()
        .filter(|s| client.contains(s))
        .max_by_key(|v| (v.major, v.minor))
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32) -> ProtocolVersion {
        ProtocolVersion { major, minor }
    }

    #[test]
    fn picks_the_highest_mutual_version() {
        let server = [v(1, 0), v(1, 1), v(2, 0)];
        assert_eq!(
            negotiate_with(&[v(1, 1), v(1, 0), v(3, 0)], &server),
            Some(v(1, 1))
        );
        assert_eq!(negotiate_with(&[v(2, 0), v(1, 0)], &server), Some(v(2, 0)));
    }

    #[test]
    fn no_overlap_is_none() {
        assert_eq!(negotiate_with(&[v(4, 0)], &[v(1, 0)]), None);
        assert_eq!(negotiate(&[]), None);
        assert_eq!(negotiate(&[v(1, 0)]), Some(v(1, 0)));
    }
}
