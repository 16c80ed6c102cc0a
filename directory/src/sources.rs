//! Presence held by services beside the room (a voice SFU, a chat): the seed's reference-counted
//! `RoomSource` flags, added and released from outside the room.
//!
//! A wallet's entry is created by its room (source [`Sources::ROOM`]) and renewed with the
//! room's lease. Another service adds its own source to that entry while the wallet is in a
//! room, and releases it when its channel ends; the entry — and with it the wallet in the
//! online-users lookup (`GET /v1/peers`) — lives while any source holds it, and is deleted
//! exactly when the last one goes (the room's own release of [`Sources::ROOM`] when the member
//! leaves, or the service's). A rejoin of the same room (the room registers the wallet again)
//! keeps the sources the other services hold. The avatar follows the room source only: a member who left the
//! room is no longer in it, whatever else holds the wallet. The entry is renewed with its
//! room's activation, and an empty room does not stop while such an entry is held (the room
//! actor's writer counts them); if the activation ends anyway (a drain, a failover), an entry
//! kept only by another source lapses after the presence TTL.
//!
//! Every write is fenced by the epoch of the room's live lease, read from the placement: a
//! write raced by a new activation is retried once under the new epoch.

use crate::{Directory, DirectoryError, PresenceEntry, Sources};

/// The sources another service may hold, by the name the APIs use.
pub const EXTERNAL: [(&str, Sources); 3] = [
    ("voice", Sources::VOICE),
    ("chat", Sources::CHAT),
    ("transport2", Sources::TRANSPORT2),
];

/// The external source called `name` (`voice`, `chat`, `transport2`); the room's own source is
/// not one (only the room adds and releases it).
pub fn external(name: &str) -> Result<Sources, DirectoryError> {
    EXTERNAL
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| {
            DirectoryError::Invalid(format!(
                "`{name}` is not a source a service may hold (voice, chat or transport2)"
            ))
        })
}

/// The names of the sources set in `s` (`room` for the room's own).
pub fn names(s: Sources) -> Vec<&'static str> {
    let mut out = Vec::new();
    if s.contains(Sources::ROOM) {
        out.push("room");
    }
    out.extend(
        EXTERNAL
            .iter()
            .filter(|(_, f)| s.contains(*f))
            .map(|(n, _)| *n),
    );
    out
}

/// Adds `source` to `wallet`'s live entry; returns the entry as it is now. `NotFound` if the
/// wallet has no live entry (a source can only join a wallet that is in a room) or its room has
/// no live lease.
pub async fn hold(
    dir: &dyn Directory,
    wallet: &str,
    source: Sources,
) -> Result<PresenceEntry, DirectoryError> {
    let mut last = None;
    for _ in 0..2 {
        let (entry, epoch) = entry_and_epoch(dir, wallet).await?;
        match dir.presence_add_source(wallet, source, epoch).await {
            Ok(()) => {
                return Ok(PresenceEntry {
                    sources: entry.sources | source,
                    ..entry
                });
            }
            Err(e) if e.is_fenced() => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or(DirectoryError::NotOwner))
}

/// Releases `source` from `wallet`'s entry; `true` iff that was its last source (the entry is
/// gone: the wallet is no longer online). A wallet with no live entry, or without that source,
/// yields `false`.
pub async fn release(
    dir: &dyn Directory,
    wallet: &str,
    source: Sources,
) -> Result<bool, DirectoryError> {
    let mut last = None;
    for _ in 0..2 {
        let epoch = match entry_and_epoch(dir, wallet).await {
            Ok((_, epoch)) => epoch,
            Err(DirectoryError::NotFound(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        match dir.presence_release(wallet, source, epoch).await {
            Ok(gone) => return Ok(gone),
            Err(e) if e.is_fenced() => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or(DirectoryError::NotOwner))
}

/// Holds (`hold`) or releases `source` for `wallet`, as [`hold`] and [`release`] do; returns the
/// wallet's entry afterwards (`None`: it is no longer online). What the admin port's
/// `/v1/presence/…` and the node's `PresenceSource` call both run.
pub async fn apply(
    dir: &dyn Directory,
    wallet: &str,
    source: Sources,
    hold_it: bool,
) -> Result<Option<PresenceEntry>, DirectoryError> {
    if hold_it {
        return hold(dir, wallet, source).await.map(Some);
    }
    if release(dir, wallet, source).await? {
        return Ok(None);
    }
    dir.presence_get(wallet).await
}

async fn entry_and_epoch(
    dir: &dyn Directory,
    wallet: &str,
) -> Result<(PresenceEntry, crate::Epoch), DirectoryError> {
    let entry = dir
        .presence_get(wallet)
        .await?
        .ok_or_else(|| DirectoryError::NotFound(format!("{wallet} is not online")))?;
    let placement = dir.resolve(&entry.room).await?.ok_or_else(|| {
        DirectoryError::NotFound(format!("{wallet}'s room {} is not live", entry.room))
    })?;
    Ok((entry, placement.epoch))
}
