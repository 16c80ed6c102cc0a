//! Helpers shared by the core's test modules.

use std::time::Duration;

use crate::events::{EventBody, Refusal};
use crate::{Outbound, SessionId};

/// The refusals in `out`: (session, the input's sequence, the reason).
pub(crate) fn refusals(out: &[Outbound]) -> Vec<(SessionId, u32, Refusal)> {
    out.iter()
        .filter_map(|o| match o {
            Outbound::Event(e) => match e.body {
                EventBody::Rejected {
                    in_reply_to,
                    reason,
                } => Some((e.to[0], in_reply_to, reason)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// `ms` milliseconds since the activation started: the time [`crate::Room::advance`] takes.
pub(crate) fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
