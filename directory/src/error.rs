//! The directory's error type. Every variant has a stable lowercase [`DirectoryError::code`]
//! for logs, metrics and wire errors; only [`DirectoryError::Unavailable`] is retryable.

use crate::types::Epoch;

/// Errors of every [`crate::Directory`] operation.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
pub enum DirectoryError {
    /// The presented epoch does not hold the room's live lease (lost, expired or superseded):
    /// the writer must stop committing for this room.
    #[error("stale epoch for room {room}: presented {presented}, live {current:?}")]
    StaleEpoch {
        /// The room.
        room: String,
        /// The epoch the caller presented.
        presented: Epoch,
        /// The live placement's epoch, `None` if the room has no live placement.
        current: Option<Epoch>,
    },
    /// The epoch matches but the caller is not the node holding it.
    #[error("not the owner")]
    NotOwner,
    /// The backend is unreachable or failed; retry later.
    #[error("directory unavailable: {0}")]
    Unavailable(String),
    /// Another live owner holds what was asked for.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The request is malformed (empty id, bad TTL, oversized payload…).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The record the operation needs does not exist (or expired).
    #[error("not found: {0}")]
    NotFound(String),
}

impl DirectoryError {
    /// A stable, lowercase code for the variant.
    pub fn code(&self) -> &'static str {
        match self {
            Self::StaleEpoch { .. } => "stale_epoch",
            Self::NotOwner => "not_owner",
            Self::Unavailable(_) => "unavailable",
            Self::Conflict(_) => "conflict",
            Self::Invalid(_) => "invalid",
            Self::NotFound(_) => "not_found",
        }
    }

    /// True if retrying the same call later may succeed (the backend was down).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    /// True if the caller lost the right to write for the room (stale epoch or not owner).
    pub fn is_fenced(&self) -> bool {
        matches!(self, Self::StaleEpoch { .. } | Self::NotOwner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_classes() {
        let stale = DirectoryError::StaleEpoch {
            room: "r".into(),
            presented: Epoch::new(1, 1),
            current: Some(Epoch::new(1, 2)),
        };
        assert_eq!(stale.code(), "stale_epoch");
        assert!(stale.is_fenced() && !stale.is_retryable());
        assert!(stale.to_string().contains("presented 1.1"));
        assert!(DirectoryError::NotOwner.is_fenced());
        assert!(DirectoryError::Unavailable("x".into()).is_retryable());
        let codes: Vec<&str> = [
            DirectoryError::NotOwner,
            DirectoryError::Unavailable(String::new()),
            DirectoryError::Conflict(String::new()),
            DirectoryError::Invalid(String::new()),
            DirectoryError::NotFound(String::new()),
        ]
        .iter()
        .map(DirectoryError::code)
        .collect();
        assert_eq!(
            codes,
            [
                "not_owner",
                "unavailable",
                "conflict",
                "invalid",
                "not_found"
            ]
        );
    }
}
