//! The directory writer's decisions, sans I/O ([`WriterMachine`]: operations in, writes out);
//! the task in `writer.rs` executes them. Its tests are in `writer/tests.rs`.

use std::collections::BTreeMap;

use crate::room::host::PresenceOp;

/// One presence write of a wallet: register it at `entity`, or release it (`None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PresenceWrite {
    pub(crate) wallet: String,
    pub(crate) entity: Option<u32>,
}

impl PresenceWrite {
    /// Its name in the commit log.
    pub(crate) fn what(&self) -> &'static str {
        if self.entity.is_some() {
            "register"
        } else {
            "release"
        }
    }
}

/// What the writer does next for one of the room's operations.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Write this presence now.
    Write(PresenceWrite),
    /// Withheld (the lease is unconfirmed): kept for the next retry.
    Withheld,
    /// Store this checkpoint (if the room has not frozen and the lease may commit).
    Checkpoint(Vec<u8>),
    /// Delete the room's checkpoint (if the room has not frozen and the lease may commit).
    DropCheckpoint,
    /// Announce a profile version (if the lease may commit; never retried: the next
    /// announcement carries a higher version anyway).
    Announce { wallet: String, version: u64 },
}

/// The directory writer's decisions, sans I/O: operations in, writes out. Presence writes are
/// done in order while the lease may commit; a withheld or failed one (unless fenced: another
/// epoch holds the room, the write is moot) waits for the next renewal, newest per wallet (a
/// newer write of a wallet supersedes a waiting one).
#[derive(Debug, Default)]
pub(crate) struct WriterMachine {
    /// Presence writes to retry, newest per wallet.
    retry: BTreeMap<String, Option<u32>>,
}

impl WriterMachine {
    /// The room's next operation; `may_commit`: whether the lease is surely held now.
    pub(crate) fn on_op(&mut self, op: PresenceOp, may_commit: bool) -> Next {
        let w = match op {
            PresenceOp::Register { wallet, entity } => PresenceWrite {
                wallet,
                entity: Some(entity),
            },
            PresenceOp::Release { wallet } => PresenceWrite {
                wallet,
                entity: None,
            },
            PresenceOp::Checkpoint(bytes) => return Next::Checkpoint(bytes),
            PresenceOp::DropCheckpoint => return Next::DropCheckpoint,
            PresenceOp::Announce { wallet, version } => return Next::Announce { wallet, version },
        };
        self.retry.remove(&w.wallet);
        if !may_commit {
            self.retry.insert(w.wallet, w.entity);
            return Next::Withheld;
        }
        Next::Write(w)
    }

    /// A presence write failed: it waits for the next renewal unless it was fenced.
    pub(crate) fn failed(&mut self, w: PresenceWrite, fenced: bool) {
        if !fenced {
            self.retry.insert(w.wallet, w.entity);
        }
    }

    /// The writes to retry now that the lease is confirmed (newest per wallet, by wallet).
    pub(crate) fn take_retries(&mut self) -> Vec<PresenceWrite> {
        std::mem::take(&mut self.retry)
            .into_iter()
            .map(|(wallet, entity)| PresenceWrite { wallet, entity })
            .collect()
    }

    /// Whether writes wait for a retry.
    pub(crate) fn has_retries(&self) -> bool {
        !self.retry.is_empty()
    }
}
