//! WebSocket close codes: one per refusal, so a client knows whether and how to retry.
//!
//! 1000–1015 are the RFC 6455 codes; 4000–4999 are Plaza's own.

/// Why the gateway closed a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseCode {
    /// The client left.
    Normal,
    /// The server is shutting down; reconnect elsewhere (retryable).
    GoingAway,
    /// A frame exceeded the frame size cap (terminal for that frame; RFC 6455 1009).
    TooLarge,
    /// No valid negotiate within the handshake deadline.
    HandshakeTimeout,
    /// No protocol version in common (terminal).
    UnsupportedVersion,
    /// A frame that does not decode, or a message out of place (terminal).
    BadFrame,
    /// Authentication failed (terminal).
    Auth,
    /// The client sent faster than its limits allow.
    RateLimited,
    /// The room is full (retryable later).
    RoomFull,
    /// The client did not keep up with its frames.
    SlowConsumer,
    /// The room could not be reached (retryable).
    RoomUnavailable,
    /// An internal error.
    Internal,
    /// An operator closed the session (the admin API's kick; terminal, no resume).
    Kicked,
}

impl CloseCode {
    /// Every code, for metrics and docs.
    pub const ALL: [Self; 13] = [
        Self::Normal,
        Self::GoingAway,
        Self::TooLarge,
        Self::HandshakeTimeout,
        Self::UnsupportedVersion,
        Self::BadFrame,
        Self::Auth,
        Self::RateLimited,
        Self::RoomFull,
        Self::SlowConsumer,
        Self::RoomUnavailable,
        Self::Internal,
        Self::Kicked,
    ];

    /// The numeric WebSocket close code.
    pub fn code(self) -> u16 {
        match self {
            Self::Normal => 1000,
            Self::GoingAway => 1001,
            Self::TooLarge => 1009,
            Self::HandshakeTimeout => 4000,
            Self::UnsupportedVersion => 4001,
            Self::BadFrame => 4002,
            Self::Auth => 4003,
            Self::RateLimited => 4004,
            Self::RoomFull => 4005,
            Self::SlowConsumer => 4006,
            Self::RoomUnavailable => 4008,
            Self::Internal => 4009,
            Self::Kicked => 4010,
        }
    }

    /// The code for a numeric value, if it is one of ours.
    pub fn from_code(code: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.code() == code)
    }

    /// Stable name for logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::GoingAway => "going_away",
            Self::TooLarge => "too_large",
            Self::HandshakeTimeout => "handshake_timeout",
            Self::UnsupportedVersion => "unsupported_version",
            Self::BadFrame => "bad_frame",
            Self::Auth => "auth",
            Self::RateLimited => "rate_limited",
            Self::RoomFull => "room_full",
            Self::SlowConsumer => "slow_consumer",
            Self::RoomUnavailable => "room_unavailable",
            Self::Internal => "internal",
            Self::Kicked => "kicked",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for c in CloseCode::ALL {
            assert!(seen.insert(c.code()), "duplicate code {}", c.code());
            assert_eq!(CloseCode::from_code(c.code()), Some(c));
        }
    }
}
