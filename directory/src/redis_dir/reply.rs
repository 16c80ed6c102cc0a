//! Parsing script replies (arrays of integers, strings and nested arrays) into the directory's
//! types, and encoding script arguments.

use redis::Value;

use super::{LUA_MAX_INT, RedisDirectory};
use crate::error::DirectoryError;
use crate::types::{Epoch, Placement, PresenceEntry, Sources};

pub(super) fn unavailable(e: redis::RedisError) -> DirectoryError {
    DirectoryError::Unavailable(e.to_string())
}

pub(super) fn bad_reply(what: &str) -> DirectoryError {
    DirectoryError::Unavailable(format!("malformed redis reply: {what}"))
}

pub(super) fn string(r: &[Value], i: usize) -> Result<String, DirectoryError> {
    match r.get(i) {
        Some(Value::BulkString(b)) => String::from_utf8(b.clone()).map_err(|_| bad_reply("utf8")),
        Some(Value::SimpleString(s)) => Ok(s.clone()),
        Some(Value::Int(n)) => Ok(n.to_string()),
        _ => Err(bad_reply("string expected")),
    }
}

pub(super) fn bytes(r: &[Value], i: usize) -> Result<Vec<u8>, DirectoryError> {
    match r.get(i) {
        Some(Value::BulkString(b)) => Ok(b.clone()),
        Some(Value::SimpleString(s)) => Ok(s.clone().into_bytes()),
        _ => Err(bad_reply("bytes expected")),
    }
}

pub(super) fn sint(r: &[Value], i: usize) -> Result<i64, DirectoryError> {
    match r.get(i) {
        Some(Value::Int(n)) => Ok(*n),
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad_reply("integer expected")),
        _ => Err(bad_reply("integer expected")),
    }
}

pub(super) fn int(r: &[Value], i: usize) -> Result<u64, DirectoryError> {
    u64::try_from(sint(r, i)?).map_err(|_| bad_reply("negative integer"))
}

pub(super) fn array(r: &[Value], i: usize) -> Result<&[Value], DirectoryError> {
    match r.get(i) {
        Some(Value::Array(a)) => Ok(a),
        _ => Err(bad_reply("array expected")),
    }
}

/// A member reply `{wallet, entity, '', sources, node, pv, until}` of `room`.
pub(super) fn entry(room: &str, r: &[Value]) -> Result<PresenceEntry, DirectoryError> {
    Ok(PresenceEntry {
        wallet: string(r, 0)?,
        entity: u32::try_from(int(r, 1)?).map_err(|_| bad_reply("entity"))?,
        room: room.to_string(),
        sources: Sources::from_bits(u32::try_from(int(r, 3)?).map_err(|_| bad_reply("src"))?),
        node: string(r, 4)?,
        profile_version: int(r, 5)?,
        lease_until_ms: int(r, 6)?,
    })
}

/// Maps a non-`ok` status reply to its error; `Ok(())` for `ok`.
pub(super) fn status(room: &str, presented: Epoch, r: &[Value]) -> Result<(), DirectoryError> {
    match string(r, 0)?.as_str() {
        "ok" => Ok(()),
        "stale" => Err(DirectoryError::StaleEpoch {
            room: room.to_string(),
            presented,
            current: if r.len() >= 3 {
                Some(Epoch::new(int(r, 1)?, int(r, 2)?))
            } else {
                None
            },
        }),
        "notowner" => Err(DirectoryError::NotOwner),
        "notfound" => Err(DirectoryError::NotFound("no live presence entry".into())),
        "conflict" => Err(DirectoryError::Conflict(format!(
            "room {room}: entity belongs to another wallet"
        ))),
        other => Err(bad_reply(other)),
    }
}

pub(super) fn num(n: u64) -> Vec<u8> {
    n.to_string().into_bytes()
}

pub(super) fn epoch_arg(e: Epoch) -> Result<(Vec<u8>, Vec<u8>), DirectoryError> {
    if e.era > LUA_MAX_INT || e.counter > LUA_MAX_INT {
        return Err(DirectoryError::Invalid("epoch out of range".into()));
    }
    Ok((num(e.era), num(e.counter)))
}

impl RedisDirectory {
    pub(super) fn seen(&self, epoch: Epoch) {
        self.eras.seen(epoch);
    }

    pub(super) fn placement(&self, room: &str, r: &[Value]) -> Result<Placement, DirectoryError> {
        let p = Placement {
            room: room.to_string(),
            node: string(r, 1)?,
            epoch: Epoch::new(int(r, 2)?, int(r, 3)?),
            lease_until_ms: int(r, 4)?,
        };
        self.seen(p.epoch);
        Ok(p)
    }

    pub(super) fn conflict(
        &self,
        room: &str,
        r: &[Value],
    ) -> Result<DirectoryError, DirectoryError> {
        let owner = self.placement(room, r)?;
        Ok(DirectoryError::Conflict(format!(
            "room {room} is held by node {} (epoch {})",
            owner.node, owner.epoch
        )))
    }
}
