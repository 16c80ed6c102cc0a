//! Every way the gateway refuses something a client did, in one table.
//!
//! A [`Refusal`] names one refusal; the table gives its wire [`pb::ErrorCode`], whether the
//! session closes (and with which [`CloseCode`]) or continues, whether a retry later may succeed
//! (`pb::Error.retryable`), and the message the client reads. The session never pairs an error
//! code with a close code by hand: it names the refusal, and [`Refusal::error`] builds the
//! envelope body.
//!
//! This table does not cover refusals decided by the room (a rejected pickup, a denied consent):
//! those travel as room events. It does cover the node's answers to an attach (room full,
//! rejected, unavailable), which the gateway turns into a refusal of the client's join.

use plaza_proto::pb;

use crate::close::CloseCode;

/// One refusal of the gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// No protocol version in common.
    UnsupportedVersion,
    /// The first message was not `negotiate`.
    NotNegotiated,
    /// A second `negotiate`.
    AlreadyNegotiated,
    /// An envelope carrying another session's id.
    WrongSession,
    /// A frame that does not decode, or a text frame.
    BadFrame,
    /// A frame over the frame size cap.
    TooLarge,
    /// No valid `negotiate` within the handshake deadline.
    HandshakeTimeout,
    /// A negotiated session that stayed in no room past `gateway.unjoined_idle_ms`.
    IdleTimeout,
    /// The client's address holds `gateway.max_sessions_per_ip` sessions already.
    TooManySessions,
    /// Authentication failed: a malformed token, or one of a kind this deployment does not
    /// accept (reason `auth`).
    Auth,
    /// No credentials where this deployment needs them: no token, or a guest token while
    /// guests are off (`auth.mode` without `guest`).
    AuthRequired,
    /// The token (or wallet message) has expired.
    AuthExpired,
    /// The token is not valid yet (`nbf`, or a wallet message from the future).
    AuthNotYetValid,
    /// The signature does not verify.
    AuthBadSignature,
    /// The token's issuer is not the configured one.
    AuthWrongIssuer,
    /// The token's audience does not name this deployment.
    AuthWrongAudience,
    /// The token's key id is not in the key set.
    AuthUnknownKey,
    /// The wallet signature was used before (on any gateway).
    AuthReplayed,
    /// The identity is banned.
    AuthBanned,
    /// A resume token presented with another identity's credentials.
    AuthResumeMismatch,
    /// The keys or the anti-replay store could not be reached (retryable).
    AuthUnavailable,
    /// Inputs far over the session's rate.
    RateLimited,
    /// A join while in a room.
    AlreadyJoined,
    /// A join with a room id that is not valid.
    InvalidRoomId,
    /// The node refused the attach's arguments.
    InvalidInput,
    /// An input that needs a room, with none joined.
    NotJoined,
    /// An input that needs the room while the room is moving to another node (it is dropped;
    /// the client may send it again once the room is back).
    RoomMoving,
    /// The room is full.
    RoomFull,
    /// The room refused the join.
    Rejected,
    /// The room could not be reached.
    RoomUnavailable,
    /// The client did not keep up with its frames.
    SlowConsumer,
    /// The gateway is shutting down.
    GoingAway,
    /// An operator kicked the session (admin API).
    Kicked,
}

/// What a refusal does to the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The session goes on.
    Continue,
    /// The session closes with this code.
    Close(CloseCode),
}

impl Refusal {
    /// Every refusal, for tests and docs.
    pub const ALL: [Self; 33] = [
        Self::UnsupportedVersion,
        Self::NotNegotiated,
        Self::AlreadyNegotiated,
        Self::WrongSession,
        Self::BadFrame,
        Self::TooLarge,
        Self::HandshakeTimeout,
        Self::IdleTimeout,
        Self::TooManySessions,
        Self::Auth,
        Self::AuthRequired,
        Self::AuthExpired,
        Self::AuthNotYetValid,
        Self::AuthBadSignature,
        Self::AuthWrongIssuer,
        Self::AuthWrongAudience,
        Self::AuthUnknownKey,
        Self::AuthReplayed,
        Self::AuthBanned,
        Self::AuthResumeMismatch,
        Self::AuthUnavailable,
        Self::RateLimited,
        Self::AlreadyJoined,
        Self::InvalidRoomId,
        Self::InvalidInput,
        Self::NotJoined,
        Self::RoomMoving,
        Self::RoomFull,
        Self::Rejected,
        Self::RoomUnavailable,
        Self::SlowConsumer,
        Self::GoingAway,
        Self::Kicked,
    ];

    /// The table: error code, outcome, retryable, message.
    const fn row(self) -> (pb::ErrorCode, Outcome, bool, &'static str) {
        use Outcome::{Close, Continue};
        use pb::ErrorCode as E;
        /// A terminal authentication refusal: `AUTH`, close 4003, never retried. The message
        /// starts with the reason (the refusal's name) and a colon.
        const fn auth(message: &'static str) -> (pb::ErrorCode, Outcome, bool, &'static str) {
            (E::Auth, Close(CloseCode::Auth), false, message)
        }
        match self {
            Self::UnsupportedVersion => (
                E::UnsupportedVersion,
                Close(CloseCode::UnsupportedVersion),
                false,
                "unsupported_version: no protocol version in common",
            ),
            Self::NotNegotiated => (
                E::BadFrame,
                Close(CloseCode::BadFrame),
                false,
                "the first message must be negotiate",
            ),
            Self::AlreadyNegotiated => (
                E::BadFrame,
                Close(CloseCode::BadFrame),
                false,
                "already negotiated",
            ),
            Self::WrongSession => (
                E::BadFrame,
                Close(CloseCode::BadFrame),
                false,
                "wrong session id",
            ),
            Self::BadFrame => (
                E::BadFrame,
                Close(CloseCode::BadFrame),
                false,
                "frame does not decode",
            ),
            Self::TooLarge => (
                E::FrameTooLarge,
                Close(CloseCode::TooLarge),
                false,
                "frame too large",
            ),
            Self::HandshakeTimeout => (
                E::HandshakeTimeout,
                Close(CloseCode::HandshakeTimeout),
                false,
                "no negotiate within the handshake deadline",
            ),
            Self::IdleTimeout => (
                E::HandshakeTimeout,
                Close(CloseCode::HandshakeTimeout),
                true,
                "no join within the idle deadline",
            ),
            Self::TooManySessions => (
                E::RateLimited,
                Close(CloseCode::RateLimited),
                true,
                "too many sessions from this address",
            ),
            Self::Auth => (
                E::Auth,
                Close(CloseCode::Auth),
                false,
                "auth: authentication failed",
            ),
            Self::AuthRequired => {
                auth("auth_required: sign in with a token (guests are not accepted)")
            }
            Self::AuthExpired => auth("auth_expired: the token has expired"),
            Self::AuthNotYetValid => auth("auth_not_yet_valid: the token is not valid yet"),
            Self::AuthBadSignature => auth("auth_bad_signature: the signature does not verify"),
            Self::AuthWrongIssuer => auth("auth_wrong_issuer: the token's issuer is not accepted"),
            Self::AuthWrongAudience => {
                auth("auth_wrong_audience: the token is not for this deployment")
            }
            Self::AuthUnknownKey => auth("auth_unknown_key: the token's key id is not known"),
            Self::AuthReplayed => auth("auth_replayed: the signature was used before"),
            Self::AuthBanned => auth("auth_banned: the identity is banned"),
            Self::AuthResumeMismatch => {
                auth("auth_resume_mismatch: the resume token belongs to another identity")
            }
            Self::AuthUnavailable => (
                E::Internal,
                Close(CloseCode::Internal),
                true,
                "auth_unavailable: authentication is unavailable; try again",
            ),
            Self::RateLimited => (
                E::RateLimited,
                Close(CloseCode::RateLimited),
                false,
                "input rate exceeded",
            ),
            Self::AlreadyJoined => (E::AlreadyJoined, Continue, false, "already in a room"),
            Self::InvalidRoomId => (E::InvalidInput, Continue, false, "invalid room id"),
            Self::InvalidInput => (E::InvalidInput, Continue, false, "invalid attach"),
            Self::NotJoined => (E::NotJoined, Continue, false, "not in a room"),
            Self::RoomMoving => (
                E::RoomUnavailable,
                Continue,
                true,
                "the room is moving; send again when it is back",
            ),
            Self::RoomFull => (
                E::RoomFull,
                Close(CloseCode::RoomFull),
                true,
                "room is full",
            ),
            Self::Rejected => (E::Rejected, Continue, false, "join rejected"),
            Self::RoomUnavailable => (
                E::RoomUnavailable,
                Close(CloseCode::RoomUnavailable),
                true,
                "room unavailable",
            ),
            Self::SlowConsumer => (
                E::SlowConsumer,
                Close(CloseCode::SlowConsumer),
                false,
                "client did not keep up with its frames",
            ),
            Self::GoingAway => (
                E::GoingAway,
                Close(CloseCode::GoingAway),
                true,
                "server shutting down",
            ),
            Self::Kicked => (
                E::Rejected,
                Close(CloseCode::Kicked),
                false,
                "kicked by an operator",
            ),
        }
    }

    /// The wire error code.
    pub const fn code(self) -> pb::ErrorCode {
        self.row().0
    }

    /// Whether the session closes, and how.
    pub const fn outcome(self) -> Outcome {
        self.row().1
    }

    /// The close code, if the refusal closes the session.
    pub const fn close(self) -> Option<CloseCode> {
        match self.outcome() {
            Outcome::Close(c) => Some(c),
            Outcome::Continue => None,
        }
    }

    /// Whether retrying later may succeed.
    pub const fn retryable(self) -> bool {
        self.row().2
    }

    /// The default message.
    pub const fn message(self) -> &'static str {
        self.row().3
    }

    /// Stable name for logs and metric labels.
    pub const fn name(self) -> &'static str {
        match self {
            Self::UnsupportedVersion => "unsupported_version",
            Self::NotNegotiated => "not_negotiated",
            Self::AlreadyNegotiated => "already_negotiated",
            Self::WrongSession => "wrong_session",
            Self::BadFrame => "bad_frame",
            Self::TooLarge => "too_large",
            Self::HandshakeTimeout => "handshake_timeout",
            Self::IdleTimeout => "idle_timeout",
            Self::TooManySessions => "too_many_sessions",
            Self::Auth => "auth",
            Self::AuthRequired => "auth_required",
            Self::AuthExpired => "auth_expired",
            Self::AuthNotYetValid => "auth_not_yet_valid",
            Self::AuthBadSignature => "auth_bad_signature",
            Self::AuthWrongIssuer => "auth_wrong_issuer",
            Self::AuthWrongAudience => "auth_wrong_audience",
            Self::AuthUnknownKey => "auth_unknown_key",
            Self::AuthReplayed => "auth_replayed",
            Self::AuthBanned => "auth_banned",
            Self::AuthResumeMismatch => "auth_resume_mismatch",
            Self::AuthUnavailable => "auth_unavailable",
            Self::RateLimited => "rate_limited",
            Self::AlreadyJoined => "already_joined",
            Self::InvalidRoomId => "invalid_room_id",
            Self::InvalidInput => "invalid_input",
            Self::NotJoined => "not_joined",
            Self::RoomMoving => "room_moving",
            Self::RoomFull => "room_full",
            Self::Rejected => "rejected",
            Self::RoomUnavailable => "room_unavailable",
            Self::SlowConsumer => "slow_consumer",
            Self::GoingAway => "going_away",
            Self::Kicked => "kicked",
        }
    }

    /// The error the client reads: the table's message, or `detail` when there is one (the
    /// authenticator's or the node's reason).
    pub fn error(self, detail: Option<&str>, in_reply_to: u32) -> pb::Error {
        let supported_versions = if self == Self::UnsupportedVersion {
            plaza_proto::version::SUPPORTED.to_vec()
        } else {
            Vec::new()
        };
        pb::Error {
            code: self.code() as i32,
            message: detail
                .filter(|d| !d.is_empty())
                .unwrap_or(self.message())
                .to_owned(),
            supported_versions,
            retryable: self.retryable(),
            in_reply_to,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn names_are_distinct_and_every_refusal_is_listed() {
        let names: HashSet<_> = Refusal::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), Refusal::ALL.len());
    }

    #[test]
    fn the_table_holds_what_clients_rely_on() {
        // Terminal refusals are never retryable; the retryable ones are exactly these.
        let retryable: Vec<_> = Refusal::ALL.into_iter().filter(|r| r.retryable()).collect();
        assert_eq!(
            retryable,
            [
                Refusal::IdleTimeout,
                Refusal::TooManySessions,
                Refusal::AuthUnavailable,
                Refusal::RoomMoving,
                Refusal::RoomFull,
                Refusal::RoomUnavailable,
                Refusal::GoingAway
            ]
        );
        // Every authentication refusal but `unavailable` is a terminal 4003 whose message
        // starts with its reason.
        for r in Refusal::ALL {
            if r.code() == pb::ErrorCode::Auth {
                assert_eq!(r.close(), Some(CloseCode::Auth), "{r:?}");
                assert_eq!(CloseCode::Auth.code(), 4003);
                assert!(!r.retryable(), "{r:?}");
                assert!(r.message().starts_with(&format!("{}: ", r.name())), "{r:?}");
            }
        }
        for r in Refusal::ALL {
            assert!(!r.message().is_empty(), "{r:?}");
            assert_ne!(r.code(), pb::ErrorCode::Unspecified, "{r:?}");
        }
        assert_eq!(Refusal::RateLimited.close(), Some(CloseCode::RateLimited));
        assert_eq!(Refusal::RoomMoving.close(), None);
        // Every close code a refusal can cause is one of CloseCode::ALL, so it is counted.
        for r in Refusal::ALL {
            if let Some(c) = r.close() {
                assert!(CloseCode::ALL.contains(&c));
            }
        }
    }

    #[test]
    fn the_error_carries_detail_and_versions() {
        let e = Refusal::Auth.error(Some("bad signature"), 3);
        assert_eq!(e.message, "bad signature");
        assert_eq!(e.in_reply_to, 3);
        assert!(!e.retryable);
        let e = Refusal::UnsupportedVersion.error(None, 0);
        assert!(!e.supported_versions.is_empty());
        assert_eq!(e.message, Refusal::UnsupportedVersion.message());
    }
}
