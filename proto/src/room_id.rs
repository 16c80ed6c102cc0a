//! The protocol's rule for room ids, shared by the gateway (which refuses a bad `Join`) and the
//! node (which refuses a bad `AttachRequest`).

/// Longest room id accepted.
pub const MAX_ROOM_ID_LEN: usize = 64;

/// Validates a room id: 1..=64 characters of `[A-Za-z0-9._-]`.
pub fn valid_room_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ROOM_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_ids_are_validated() {
        assert!(valid_room_id("load-0"));
        assert!(valid_room_id("a.b_c-9"));
        assert!(!valid_room_id(""));
        assert!(!valid_room_id("has space"));
        assert!(!valid_room_id(&"x".repeat(65)));
        assert!(!valid_room_id("ünïcode"));
    }
}
