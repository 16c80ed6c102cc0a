//! `impl Directory for RedisDirectory`: each operation of the contract as a short sequence of
//! single-slot scripts (see [`super`] for the ordering rules).

use redis::Value;
use serde::{Deserialize, Serialize};

use super::keys::room_item;
use super::reply::{array, bad_reply, bytes, entry, epoch_arg, int, num, status, string};
use super::sweep::{SWEEP_STEPS, fresh_score};
use super::{LUA_MAX_INT, RedisDirectory};
use crate::error::DirectoryError;
use crate::types::{
    AnnounceOutcome, AuditRecord, Epoch, NodeInfo, Placement, PresenceEntry, Sources,
};
use crate::{Directory, MAX_AUDIT_READ, MAX_ID_LEN, policy, validate};

/// An audit record as stored in the list (its seq is its position).
#[derive(Deserialize, Serialize)]
struct StoredAudit {
    era: u64,
    counter: u64,
    at_ms: u64,
    kind: String,
    detail: String,
}

impl RedisDirectory {
    /// The room the wallet's pointer names, if any.
    async fn wallet_room(&self, wallet: &str) -> Result<Option<String>, DirectoryError> {
        let v: Option<Vec<u8>> = self
            .query(redis::cmd("HGET").arg(self.wallet_key(wallet)).arg("room"))
            .await?;
        v.map(|b| String::from_utf8(b).map_err(|_| bad_reply("utf8")))
            .transpose()
    }

    pub(super) async fn unpoint(&self, wallet: &str, room: &str, drop_profile: bool) {
        let flag: &[u8] = if drop_profile { b"1" } else { b"0" };
        if let Err(e) = self
            .wallet(&self.s.w_unpoint, wallet, &[room.as_bytes(), flag])
            .await
        {
            // A pointer left behind names a room without the wallet: reads treat it as absent.
            tracing::debug!(wallet, room, error = %e, "wallet pointer not cleared");
        }
    }
}

#[async_trait::async_trait]
impl Directory for RedisDirectory {
    async fn register_node(&self, info: NodeInfo, ttl_ms: u64) -> Result<(), DirectoryError> {
        validate::id("node id", &info.id)?;
        validate::ttl(ttl_ms)?;
        let draining: &[u8] = if info.draining { b"1" } else { b"0" };
        let r = self
            .run(
                &self.s.register_node,
                &[&self.nodes_key()],
                &[
                    info.id.as_bytes(),
                    info.addr.as_bytes(),
                    &num(u64::from(info.load)),
                    draining,
                    &num(ttl_ms),
                ],
            )
            .await?;
        status("", Epoch::default(), &r)?;
        if int(&r, 1)? == 1 {
            // A first registration: the sweeper must watch the registry.
            self.index(b"n", fresh_score()).await?;
        }
        Ok(())
    }

    async fn deregister_node(&self, id: &str) -> Result<(), DirectoryError> {
        validate::id("node id", id)?;
        let _: i64 = self
            .query(redis::cmd("HDEL").arg(self.nodes_key()).arg(id))
            .await?;
        Ok(())
    }

    async fn live_nodes(&self) -> Result<Vec<NodeInfo>, DirectoryError> {
        let r = self
            .run(&self.s.live_nodes, &[&self.nodes_key()], &[])
            .await?;
        let mut out = Vec::new();
        for n in array(&r, 1)? {
            let Value::Array(f) = n else {
                return Err(bad_reply("node"));
            };
            out.push(NodeInfo {
                id: string(f, 0)?,
                addr: string(f, 1)?,
                load: u32::try_from(int(f, 2)?).map_err(|_| bad_reply("load"))?,
                draining: int(f, 3)? != 0,
                heartbeat_until_ms: int(f, 4)?,
            });
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    async fn resolve(&self, room: &str) -> Result<Option<Placement>, DirectoryError> {
        validate::id("room", room)?;
        let r = self.room(&self.s.resolve, room, &[]).await?;
        match string(&r, 0)?.as_str() {
            "ok" => self.placement(room, &r).map(Some),
            _ => Ok(None),
        }
    }

    async fn place(&self, room: &str) -> Result<NodeInfo, DirectoryError> {
        let placed = self.resolve(room).await?;
        let nodes = self.live_nodes().await?;
        if let Some(p) = placed {
            return nodes.into_iter().find(|n| n.id == p.node).ok_or_else(|| {
                DirectoryError::Unavailable(format!(
                    "room {room} is leased by unregistered node {}",
                    p.node
                ))
            });
        }
        // Every node in `nodes` was live at the script's server time.
        policy::rendezvous_pick(room, &nodes, 0)
            .cloned()
            .ok_or_else(|| DirectoryError::Unavailable("no live node accepts rooms".into()))
    }

    async fn claim(
        &self,
        room: &str,
        node: &str,
        ttl_ms: u64,
    ) -> Result<Placement, DirectoryError> {
        validate::id("room", room)?;
        validate::id("node id", node)?;
        validate::ttl(ttl_ms)?;
        let ttl = num(ttl_ms);
        let r = self
            .room(&self.s.claim_try, room, &[node.as_bytes(), &ttl])
            .await?;
        let (mut last_era, mut last_ctr) = match string(&r, 0)?.as_str() {
            "ok" => return self.placement(room, &r),
            "conflict" => return Err(self.conflict(room, &r)?),
            "free" => (int(&r, 1)?, int(&r, 2)?),
            other => return Err(bad_reply(other)),
        };
        let item = room_item(room);
        // Watched before the room holds anything, so a crash in between leaves nothing
        // unwatched; re-scored after, so a sweeper that found the room empty just before does
        // not drop the item (cas_remove.lua).
        self.index(&item, 0).await?;
        let [ek, mk] = self.epoch_keys();
        for _ in 0..4 {
            let (min_era, seen_era) = self.eras.claim_args();
            let (seen_era, seen_ctr) = if last_era > seen_era {
                (last_era, last_ctr)
            } else {
                (seen_era, 0)
            };
            let e = self
                .run(
                    &self.s.next_epoch,
                    &[&ek, &mk],
                    &[&num(min_era.max(seen_era)), &num(seen_era), &num(seen_ctr)],
                )
                .await?;
            let (era, ctr) = (int(&e, 1)?, int(&e, 2)?);
            let r = self
                .room(
                    &self.s.claim_set,
                    room,
                    &[node.as_bytes(), &ttl, &num(era), &num(ctr)],
                )
                .await?;
            match string(&r, 0)?.as_str() {
                "ok" => {
                    self.index(&item, fresh_score()).await?;
                    let p = self.placement(room, &r)?;
                    tracing::debug!(room, node, epoch = %p.epoch, "room claimed");
                    return Ok(p);
                }
                "conflict" => return Err(self.conflict(room, &r)?),
                "behind" => {
                    // The epoch source is behind this room's history (it lost data): ask
                    // again above it.
                    (last_era, last_ctr) = (int(&r, 1)?, int(&r, 2)?);
                    self.seen(Epoch::new(last_era, last_ctr));
                }
                other => return Err(bad_reply(other)),
            }
        }
        Err(DirectoryError::Unavailable(format!(
            "room {room}: the epoch source stays behind the room's history"
        )))
    }

    async fn renew(
        &self,
        room: &str,
        node: &str,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<Placement, DirectoryError> {
        self.renew_room(room, node, epoch, ttl_ms, 0)
            .await
            .map(|(p, _)| p)
    }

    async fn renew_room(
        &self,
        room: &str,
        node: &str,
        epoch: Epoch,
        ttl_ms: u64,
        presence_ttl_ms: u64,
    ) -> Result<(Placement, u32), DirectoryError> {
        validate::id("room", room)?;
        validate::id("node id", node)?;
        validate::ttl(ttl_ms)?;
        if presence_ttl_ms != 0 {
            validate::ttl(presence_ttl_ms)?;
        }
        let (e, c) = epoch_arg(epoch)?;
        let r = self
            .room(
                &self.s.renew,
                room,
                &[node.as_bytes(), &e, &c, &num(ttl_ms), &num(presence_ttl_ms)],
            )
            .await?;
        status(room, epoch, &r)?;
        let p = self.placement(room, &r)?;
        let n = u32::try_from(int(&r, 5)?).map_err(|_| bad_reply("count"))?;
        Ok((p, n))
    }

    async fn release(&self, room: &str, node: &str, epoch: Epoch) -> Result<(), DirectoryError> {
        validate::id("room", room)?;
        validate::id("node id", node)?;
        let (e, c) = epoch_arg(epoch)?;
        let r = self
            .room(&self.s.release, room, &[node.as_bytes(), &e, &c])
            .await?;
        status(room, epoch, &r)
    }

    async fn check_epoch(&self, room: &str, epoch: Epoch) -> Result<(), DirectoryError> {
        validate::id("room", room)?;
        let (e, c) = epoch_arg(epoch)?;
        let r = self.room(&self.s.check, room, &[&e, &c]).await?;
        status(room, epoch, &r)
    }

    async fn presence_register(
        &self,
        entry: PresenceEntry,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        validate::id("wallet", &entry.wallet)?;
        validate::id("room", &entry.room)?;
        validate::id("node id", &entry.node)?;
        validate::sources(entry.sources)?;
        validate::ttl(ttl_ms)?;
        if entry.profile_version > LUA_MAX_INT {
            return Err(DirectoryError::Invalid(
                "profile_version must be below 2^53".into(),
            ));
        }
        let (e, c) = epoch_arg(epoch)?;
        let (w, room) = (entry.wallet.as_str(), entry.room.as_str());
        // 1. Where the wallet is now, and its announced profile version.
        let (old_room, known): (Option<String>, Option<u64>) = self
            .query(
                redis::cmd("HMGET")
                    .arg(self.wallet_key(w))
                    .arg("room")
                    .arg("version"),
            )
            .await?;
        let pv = entry.profile_version.max(known.unwrap_or(0));
        // 2. The member, fenced, in the room's slot.
        let r = self
            .room(
                &self.s.join,
                room,
                &[
                    w.as_bytes(),
                    &num(u64::from(entry.entity)),
                    &num(u64::from(entry.sources.bits())),
                    entry.node.as_bytes(),
                    &num(pv),
                    &e,
                    &c,
                    &num(ttl_ms),
                ],
            )
            .await?;
        status(room, epoch, &r)?;
        let until = int(&r, 1)?;
        let evicted = string(&r, 2)?;
        // 3. The wallet points at the room (a profile announced meanwhile is carried over).
        let p = self.wallet(&self.s.w_point, w, &[room.as_bytes()]).await?;
        let version = int(&p, 1)?;
        if version > pv {
            self.room(&self.s.raise_pv, room, &[w.as_bytes(), &num(version)])
                .await?;
        }
        // 4. Out of the room it was in, and the evicted wallet's pointer.
        if let Some(old) = old_room.filter(|o| o != room) {
            self.room(&self.s.leave, &old, &[w.as_bytes()]).await?;
        }
        if !evicted.is_empty() {
            self.unpoint(&evicted, room, true).await;
        }
        // 5. The sweeper looks at the room by the member's lease end at the latest.
        self.index(&room_item(room), i64::try_from(until).unwrap_or(i64::MAX))
            .await
    }

    async fn presence_add_source(
        &self,
        wallet: &str,
        source: Sources,
        epoch: Epoch,
    ) -> Result<(), DirectoryError> {
        validate::id("wallet", wallet)?;
        validate::sources(source)?;
        let (e, c) = epoch_arg(epoch)?;
        let Some(room) = self.wallet_room(wallet).await? else {
            return Err(DirectoryError::NotFound("no live presence entry".into()));
        };
        let r = self
            .room(
                &self.s.src_add,
                &room,
                &[wallet.as_bytes(), &num(u64::from(source.bits())), &e, &c],
            )
            .await?;
        status(&room, epoch, &r)
    }

    async fn presence_release(
        &self,
        wallet: &str,
        source: Sources,
        epoch: Epoch,
    ) -> Result<bool, DirectoryError> {
        validate::id("wallet", wallet)?;
        validate::sources(source)?;
        let (e, c) = epoch_arg(epoch)?;
        let Some(room) = self.wallet_room(wallet).await? else {
            return Ok(false);
        };
        let r = self
            .room(
                &self.s.src_del,
                &room,
                &[wallet.as_bytes(), &num(u64::from(source.bits())), &e, &c],
            )
            .await?;
        status(&room, epoch, &r)?;
        let last = int(&r, 1)? == 1;
        if last {
            self.unpoint(wallet, &room, true).await;
        }
        Ok(last)
    }

    async fn presence_renew(
        &self,
        node: &str,
        room: &str,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<u32, DirectoryError> {
        validate::id("node id", node)?;
        validate::id("room", room)?;
        validate::ttl(ttl_ms)?;
        let (e, c) = epoch_arg(epoch)?;
        let r = self
            .room(
                &self.s.pres_renew,
                room,
                &[node.as_bytes(), &e, &c, &num(ttl_ms)],
            )
            .await?;
        status(room, epoch, &r)?;
        u32::try_from(int(&r, 1)?).map_err(|_| bad_reply("count"))
    }

    async fn presence_get(&self, wallet: &str) -> Result<Option<PresenceEntry>, DirectoryError> {
        validate::id("wallet", wallet)?;
        let Some(room) = self.wallet_room(wallet).await? else {
            return Ok(None);
        };
        let r = self
            .room(&self.s.member, &room, &[wallet.as_bytes()])
            .await?;
        match string(&r, 0)?.as_str() {
            "ok" => entry(&room, array(&r, 1)?).map(Some),
            _ => Ok(None),
        }
    }

    async fn presence_by_entity(
        &self,
        room: &str,
        entity: u32,
    ) -> Result<Option<PresenceEntry>, DirectoryError> {
        validate::id("room", room)?;
        let r = self
            .room(&self.s.by_entity, room, &[&num(u64::from(entity))])
            .await?;
        match string(&r, 0)?.as_str() {
            "ok" => entry(room, array(&r, 1)?).map(Some),
            _ => Ok(None),
        }
    }

    async fn peers(&self, filter: Option<&[String]>) -> Result<Vec<PresenceEntry>, DirectoryError> {
        validate::peers_filter(filter)?;
        // Room → wallets asked for (`None`: every member).
        let mut rooms: std::collections::BTreeMap<String, Option<Vec<String>>> = Default::default();
        match filter {
            None => {
                let items: Vec<Vec<u8>> = self
                    .query(redis::cmd("ZRANGE").arg(self.due_key()).arg(0).arg(-1))
                    .await?;
                for i in items {
                    if let Some(r) = i.strip_prefix(b"r:") {
                        let r = String::from_utf8(r.to_vec()).map_err(|_| bad_reply("room"))?;
                        rooms.insert(r, None);
                    }
                }
            }
            Some(ids) => {
                let mut ids: Vec<&String> = ids.iter().collect();
                ids.sort();
                ids.dedup();
                for w in ids {
                    if let Some(r) = self.wallet_room(w).await?
                        && let Some(list) = rooms.entry(r).or_insert_with(|| Some(Vec::new()))
                    {
                        list.push(w.clone());
                    }
                }
            }
        }
        let mut out = Vec::new();
        for (room, ids) in rooms {
            if room.is_empty() || room.len() > MAX_ID_LEN {
                continue;
            }
            let mut args: Vec<&[u8]> = Vec::new();
            match &ids {
                None => args.push(b"all"),
                Some(list) => {
                    args.push(b"ids");
                    args.extend(list.iter().map(|w| w.as_bytes()));
                }
            }
            let r = self.room(&self.s.members, &room, &args).await?;
            for e in array(&r, 1)? {
                let Value::Array(f) = e else {
                    return Err(bad_reply("peer"));
                };
                out.push(entry(&room, f)?);
            }
        }
        // A wallet whose move between rooms is half done shows up once.
        out.sort_by(|a, b| a.wallet.cmp(&b.wallet));
        out.dedup_by(|a, b| a.wallet == b.wallet);
        Ok(out)
    }

    async fn sweep(&self) -> Result<u32, DirectoryError> {
        let mut total = 0u32;
        for _ in 0..SWEEP_STEPS {
            let (n, more) = self.sweep_step().await?;
            total = total.saturating_add(n);
            if !more {
                break;
            }
        }
        if total > 0 {
            tracing::debug!(removed = total, "directory sweep");
        }
        Ok(total)
    }

    async fn announce_profile(
        &self,
        wallet: &str,
        version: u64,
        source: Sources,
    ) -> Result<AnnounceOutcome, DirectoryError> {
        validate::id("wallet", wallet)?;
        validate::sources(source)?;
        if version > LUA_MAX_INT {
            return Err(DirectoryError::Invalid(
                "profile version must be below 2^53".into(),
            ));
        }
        let r = self
            .wallet(
                &self.s.announce,
                wallet,
                &[&num(version), &num(u64::from(source.bits()))],
            )
            .await?;
        let outcome = match string(&r, 0)?.as_str() {
            "fresh" => AnnounceOutcome::Fresh,
            "superseded" => AnnounceOutcome::Superseded {
                previous: int(&r, 1)?,
            },
            "merged" => AnnounceOutcome::Merged {
                sources: Sources::from_bits(
                    u32::try_from(int(&r, 1)?).map_err(|_| bad_reply("sources"))?,
                ),
            },
            "dropped" => AnnounceOutcome::Dropped {
                current: int(&r, 1)?,
            },
            other => return Err(bad_reply(other)),
        };
        if int(&r, 2)? == 1 {
            let mut item = b"f:".to_vec();
            item.extend_from_slice(wallet.as_bytes());
            self.index(&item, fresh_score()).await?;
        }
        let room = string(&r, 3)?;
        if !room.is_empty()
            && matches!(
                outcome,
                AnnounceOutcome::Fresh | AnnounceOutcome::Superseded { .. }
            )
        {
            self.room(&self.s.raise_pv, &room, &[wallet.as_bytes(), &num(version)])
                .await?;
        }
        Ok(outcome)
    }

    async fn audit_append(
        &self,
        room: &str,
        epoch: Epoch,
        kind: &str,
        detail: &str,
        at_ms: u64,
    ) -> Result<u64, DirectoryError> {
        validate::id("room", room)?;
        validate::audit(kind, detail)?;
        let (e, c) = epoch_arg(epoch)?;
        let payload = serde_json::to_vec(&StoredAudit {
            era: epoch.era,
            counter: epoch.counter,
            at_ms,
            kind: kind.to_string(),
            detail: detail.to_string(),
        })
        .map_err(|e| DirectoryError::Invalid(e.to_string()))?;
        let r = self
            .room(&self.s.audit_append, room, &[&e, &c, &payload])
            .await?;
        status(room, epoch, &r)?;
        int(&r, 1)
    }

    async fn audit_read(
        &self,
        room: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, DirectoryError> {
        validate::id("room", room)?;
        let limit = limit.min(MAX_AUDIT_READ);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let from = from_seq.max(1);
        let start = i64::try_from(from - 1).unwrap_or(i64::MAX);
        let stop = start.saturating_add(limit as i64 - 1);
        let key = self.room_keys(room).0[6].clone();
        let raw: Vec<Vec<u8>> = self
            .query(redis::cmd("LRANGE").arg(key).arg(start).arg(stop))
            .await?;
        raw.into_iter()
            .enumerate()
            .map(|(i, b)| {
                let s: StoredAudit =
                    serde_json::from_slice(&b).map_err(|_| bad_reply("audit record"))?;
                Ok(AuditRecord {
                    room: room.to_string(),
                    seq: from + i as u64,
                    epoch: Epoch::new(s.era, s.counter),
                    at_ms: s.at_ms,
                    kind: s.kind,
                    detail: s.detail,
                })
            })
            .collect()
    }

    async fn put_handoff(
        &self,
        room: &str,
        epoch: Epoch,
        state: Vec<u8>,
    ) -> Result<(), DirectoryError> {
        validate::id("room", room)?;
        validate::handoff(&state)?;
        let (e, c) = epoch_arg(epoch)?;
        let r = self
            .room(&self.s.put_handoff, room, &[&e, &c, &state])
            .await?;
        status(room, epoch, &r)
    }

    async fn take_handoff(&self, room: &str) -> Result<Option<(Epoch, Vec<u8>)>, DirectoryError> {
        validate::id("room", room)?;
        let r = self.room(&self.s.take_handoff, room, &[]).await?;
        match string(&r, 0)?.as_str() {
            "ok" => Ok(Some((Epoch::new(int(&r, 1)?, int(&r, 2)?), bytes(&r, 3)?))),
            _ => Ok(None),
        }
    }

    async fn put_resume(
        &self,
        token: &str,
        entry: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        validate::id("resume token", token)?;
        validate::ttl(ttl_ms)?;
        validate::resume(&entry)?;
        let _: () = self
            .query(
                redis::cmd("SET")
                    .arg(self.resume_key(token))
                    .arg(entry)
                    .arg("PX")
                    .arg(ttl_ms),
            )
            .await?;
        Ok(())
    }

    async fn take_resume(&self, token: &str) -> Result<Option<Vec<u8>>, DirectoryError> {
        validate::id("resume token", token)?;
        self.query(redis::cmd("GETDEL").arg(self.resume_key(token)))
            .await
    }

    async fn claim_once(&self, key: &str, ttl_ms: u64) -> Result<bool, DirectoryError> {
        validate::id("claim key", key)?;
        validate::ttl(ttl_ms)?;
        // One key, one command: `SET NX PX`, the first claim wins; Redis expires the key.
        let ok: Option<String> = self
            .query(
                redis::cmd("SET")
                    .arg(format!("{}once:{key}", self.prefix))
                    .arg("1")
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms),
            )
            .await?;
        Ok(ok.is_some())
    }

    async fn put_resume_held(
        &self,
        holder: &str,
        token: &str,
        entry: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        validate::id("resume holder", holder)?;
        validate::id("resume token", token)?;
        validate::ttl(ttl_ms)?;
        validate::resume(&entry)?;
        let r = self
            .run(
                &self.s.put_held,
                &[&self.holder_key(holder)],
                &[token.as_bytes(), &entry, &num(ttl_ms)],
            )
            .await?;
        status("", Epoch::default(), &r)
    }

    async fn renew_resume_holder(&self, holder: &str, ttl_ms: u64) -> Result<(), DirectoryError> {
        validate::id("resume holder", holder)?;
        validate::ttl(ttl_ms)?;
        let _: i64 = self
            .query(
                redis::cmd("PEXPIRE")
                    .arg(self.holder_key(holder))
                    .arg(ttl_ms),
            )
            .await?;
        Ok(())
    }

    async fn take_resume_held(
        &self,
        holder: &str,
        token: &str,
    ) -> Result<Option<Vec<u8>>, DirectoryError> {
        validate::id("resume holder", holder)?;
        validate::id("resume token", token)?;
        let r = self
            .run(
                &self.s.take_held,
                &[&self.holder_key(holder)],
                &[token.as_bytes()],
            )
            .await?;
        match string(&r, 0)?.as_str() {
            "ok" => Ok(Some(bytes(&r, 1)?)),
            _ => Ok(None),
        }
    }
}
