//! The offline checker: G1 and G2 over one seed's merged history (the store's applied-request
//! log and the nodes' commit records).
//!
//! G1 (single activation):
//! - every new activation's epoch is strictly greater than every epoch issued before it,
//!   across data loss (no reuse, so a stale epoch can never match again);
//! - the store accepts a fenced write (presence, audit, renewals) only with the epoch of the
//!   room's live placement, as tracked by a placement model replayed from the same log — so a
//!   stale epoch's write is refused — and it never grants a claim while another node's lease is
//!   live;
//! - per room, the nodes' commit windows (first to last acknowledged write they decided to
//!   send, per epoch) never overlap across epochs, in epoch order.
//!
//! G2 (no ghost presence, exact refcounts): a presence model replayed over the log predicts
//! every presence result (`presence_release` returns `true` exactly when the last source went),
//! and the wallet's entry right after every request (sources never empty, never a source that
//! was released); after the run, with every node stopped, nothing is left once a lease TTL and
//! a sweep interval have passed.

use std::collections::BTreeMap;

use plaza_directory::{Epoch, Placement, PresenceEntry, Sources};
use serde_json::Value;

use super::node::{Commit, NodeHistory};
use super::wire::{Req, StoreEvent, WireErr};

#[derive(Clone, Debug)]
struct ModelPlace {
    node: String,
    epoch: Epoch,
    until: u64,
}

#[derive(Clone, Debug)]
struct ModelEntry {
    room: String,
    node: String,
    sources: Sources,
    until: u64,
}

fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64()
}

/// Replays the store log; returns the first violation.
pub(crate) fn check_store(log: &[StoreEvent]) -> Result<CheckStats, String> {
    let mut places: BTreeMap<String, ModelPlace> = BTreeMap::new();
    let mut pres: BTreeMap<String, ModelEntry> = BTreeMap::new();
    let mut max_issued: Option<Epoch> = None;
    let mut stats = CheckStats::default();
    for (i, ev) in log.iter().enumerate() {
        let (t, req, result, post) = match ev {
            StoreEvent::Start { t, era } => {
                // A store that lost its data must not be able to issue an old epoch again.
                if let Some(m) = max_issued
                    && *era <= m.era
                {
                    return Err(format!(
                        "store event #{i} at t={t}: epoch reuse: the store restarted at era {era}, \
                         not above epoch {m} issued before"
                    ));
                }
                places.clear();
                pres.clear();
                stats.restarts += 1;
                continue;
            }
            StoreEvent::Applied {
                t,
                req,
                result,
                post,
            } => (*t, req, result, post),
        };
        let at = |msg: String| format!("store event #{i} at t={t} ({req:?} -> {result:?}): {msg}");
        let live_place = |places: &BTreeMap<String, ModelPlace>, room: &str| {
            places.get(room).filter(|p| p.until > t).cloned()
        };
        // Fencing as the model sees it: Ok iff `epoch` holds the room's live placement.
        let fence_ok = |places: &BTreeMap<String, ModelPlace>, room: &str, epoch: Epoch| {
            live_place(places, room).is_some_and(|p| p.epoch == epoch)
        };
        let live_entry = |pres: &BTreeMap<String, ModelEntry>, w: &str| {
            pres.get(w).filter(|e| e.until > t).cloned()
        };
        match req {
            Req::Claim { room, node, ttl_ms } => match result {
                Ok(v) => {
                    let p: Placement =
                        serde_json::from_value(v.clone()).map_err(|e| at(e.to_string()))?;
                    match live_place(&places, room) {
                        Some(cur) if cur.node != *node => {
                            return Err(at(format!(
                                "double activation: claim granted to {node} while {} holds epoch {} until {}",
                                cur.node, cur.epoch, cur.until
                            )));
                        }
                        Some(cur) => {
                            if cur.epoch != p.epoch {
                                return Err(at(format!(
                                    "re-claim by the holder changed the epoch {} -> {}",
                                    cur.epoch, p.epoch
                                )));
                            }
                        }
                        None => {
                            if let Some(m) = max_issued
                                && p.epoch <= m
                            {
                                return Err(at(format!(
                                    "epoch reuse: new activation {} not above {} issued before",
                                    p.epoch, m
                                )));
                            }
                            max_issued = Some(p.epoch);
                            stats.activations += 1;
                        }
                    }
                    if live_place(&places, room).is_none() && p.lease_until_ms != t + ttl_ms {
                        return Err(at(format!("lease until {} != now + ttl", p.lease_until_ms)));
                    }
                    let until = live_place(&places, room)
                        .map_or(0, |c| c.until)
                        .max(t + ttl_ms);
                    places.insert(
                        room.clone(),
                        ModelPlace {
                            node: node.clone(),
                            epoch: p.epoch,
                            until,
                        },
                    );
                }
                Err(WireErr::Conflict(_)) => {
                    if live_place(&places, room).is_none_or(|p| p.node == *node) {
                        return Err(at("claim refused but the room was free".into()));
                    }
                }
                Err(e) => return Err(at(format!("unexpected claim error {e:?}"))),
            },
            Req::Renew {
                room,
                node,
                epoch,
                ttl_ms,
            } => {
                let ok = fence_ok(&places, room, *epoch);
                match result {
                    Ok(_) => {
                        if !ok {
                            return Err(at("renewed a stale or lapsed epoch".into()));
                        }
                        let p = places.get_mut(room).expect("live");
                        if p.node != *node {
                            return Err(at("renewed by a node that is not the owner".into()));
                        }
                        p.until = p.until.max(t + ttl_ms);
                        stats.fenced_ok += 1;
                    }
                    Err(WireErr::Stale { .. }) if !ok => stats.fenced_refused += 1,
                    Err(WireErr::NotOwner) if ok => {}
                    Err(e) => return Err(at(format!("renew error {e:?} but model fence_ok={ok}"))),
                }
            }
            Req::Release { room, node, epoch } => {
                let live = live_place(&places, room);
                match (result, &live) {
                    (Ok(_), None) => {}
                    (Ok(_), Some(p)) if p.epoch == *epoch && p.node == *node => {
                        places.remove(room);
                    }
                    (Err(WireErr::Stale { .. }), Some(p)) if p.epoch != *epoch => {}
                    (Err(WireErr::NotOwner), Some(p)) if p.node != *node => {}
                    (r, l) => return Err(at(format!("release {r:?} with live placement {l:?}"))),
                }
            }
            Req::AuditAppend { room, epoch, .. } => {
                let ok = fence_ok(&places, room, *epoch);
                match result {
                    Ok(_) if ok => stats.fenced_ok += 1,
                    Ok(_) => {
                        return Err(at(format!(
                            "stale epoch {epoch} committed an audit record (live: {:?})",
                            live_place(&places, room)
                        )));
                    }
                    Err(WireErr::Stale { .. }) if !ok => stats.fenced_refused += 1,
                    Err(e) => return Err(at(format!("audit error {e:?}, model fence_ok={ok}"))),
                }
            }
            Req::PresenceRegister {
                entry,
                epoch,
                ttl_ms,
            } => {
                let ok = fence_ok(&places, &entry.room, *epoch);
                let owner_ok =
                    live_place(&places, &entry.room).is_some_and(|p| p.node == entry.node);
                match result {
                    Ok(_) if ok && owner_ok => {
                        stats.fenced_ok += 1;
                        // A rejoin of the same room keeps the other services' sources.
                        let kept = live_entry(&pres, &entry.wallet)
                            .filter(|e| e.room == entry.room)
                            .map_or(Sources::NONE, |e| e.sources - Sources::ROOM);
                        pres.insert(
                            entry.wallet.clone(),
                            ModelEntry {
                                room: entry.room.clone(),
                                node: entry.node.clone(),
                                sources: entry.sources | kept,
                                until: t + ttl_ms,
                            },
                        );
                    }
                    Ok(_) => {
                        return Err(at(format!(
                            "stale epoch {epoch} registered presence (live: {:?})",
                            live_place(&places, &entry.room)
                        )));
                    }
                    Err(WireErr::Stale { .. }) if !ok => stats.fenced_refused += 1,
                    Err(WireErr::NotOwner) if ok && !owner_ok => {}
                    Err(e) => return Err(at(format!("register error {e:?}, model fence_ok={ok}"))),
                }
            }
            Req::PresenceAddSource {
                wallet,
                source,
                epoch,
            } => {
                let entry = live_entry(&pres, wallet);
                match (result, entry) {
                    (Err(WireErr::NotFound(_)), None) => {}
                    (Ok(_), Some(e)) if fence_ok(&places, &e.room, *epoch) => {
                        stats.fenced_ok += 1;
                        pres.get_mut(wallet).expect("live").sources |= *source;
                    }
                    (Err(WireErr::Stale { .. }), Some(e))
                        if !fence_ok(&places, &e.room, *epoch) =>
                    {
                        stats.fenced_refused += 1;
                    }
                    (r, e) => return Err(at(format!("add_source {r:?} with model entry {e:?}"))),
                }
            }
            Req::PresenceRelease {
                wallet,
                source,
                epoch,
            } => {
                let entry = live_entry(&pres, wallet);
                match (result, entry) {
                    (Ok(v), None) => {
                        if v.as_bool() != Some(false) {
                            return Err(at("release of an absent entry returned true".into()));
                        }
                    }
                    (Ok(v), Some(e)) if fence_ok(&places, &e.room, *epoch) => {
                        stats.fenced_ok += 1;
                        let last =
                            e.sources.intersects(*source) && (e.sources - *source).is_empty();
                        if v.as_bool() != Some(last) {
                            return Err(at(format!(
                                "refcount: release of {source:?} from {:?} returned {v}, model says {last}",
                                e.sources
                            )));
                        }
                        if last {
                            pres.remove(wallet);
                            stats.last_releases += 1;
                        } else {
                            pres.get_mut(wallet).expect("live").sources.remove(*source);
                        }
                    }
                    (Err(WireErr::Stale { .. }), Some(e))
                        if !fence_ok(&places, &e.room, *epoch) =>
                    {
                        stats.fenced_refused += 1;
                    }
                    (r, e) => return Err(at(format!("release {r:?} with model entry {e:?}"))),
                }
            }
            Req::PresenceRenew {
                node,
                room,
                epoch,
                ttl_ms,
            } => {
                let ok = fence_ok(&places, room, *epoch);
                let owner_ok = live_place(&places, room).is_some_and(|p| p.node == *node);
                match result {
                    Ok(v) if ok && owner_ok => {
                        stats.fenced_ok += 1;
                        let mut n = 0;
                        for e in pres.values_mut() {
                            if e.room == *room && e.node == *node && e.until > t {
                                e.until = e.until.max(t + ttl_ms);
                                n += 1;
                            }
                        }
                        if as_u64(v) != Some(n) {
                            return Err(at(format!("presence_renew renewed {v}, model {n}")));
                        }
                    }
                    Ok(_) => return Err(at("stale epoch renewed presence".into())),
                    Err(WireErr::Stale { .. }) if !ok => stats.fenced_refused += 1,
                    Err(WireErr::NotOwner) if ok && !owner_ok => {}
                    Err(e) => return Err(at(format!("presence_renew error {e:?}, fence_ok={ok}"))),
                }
            }
            Req::Place { room } => {
                // A placed room is placed on its owner (or unavailable if the owner's
                // registration lapsed); never on another node.
                if let (Ok(v), Some(p)) = (result, live_place(&places, room)) {
                    let id = v.get("id").and_then(Value::as_str).unwrap_or_default();
                    if id != p.node {
                        return Err(at(format!("placed room on {id}, owner is {}", p.node)));
                    }
                }
            }
            Req::Resolve { room } => {
                let got: Option<Placement> = result
                    .as_ref()
                    .ok()
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .flatten();
                let want = live_place(&places, room);
                if got.as_ref().map(|p| p.epoch) != want.as_ref().map(|p| p.epoch) {
                    return Err(at(format!("resolve {got:?}, model {want:?}")));
                }
            }
            Req::RegisterNode { .. } | Req::PresenceGet { .. } | Req::Peers | Req::Sweep => {}
        }
        // The wallet's entry right after the request is exactly the model's.
        if let Some(w) = req.wallet() {
            let want = live_entry(&pres, w);
            let same = match (post, &want) {
                (None, None) => true,
                (Some(p), Some(m)) => {
                    p.room == m.room && p.sources == m.sources && p.lease_until_ms == m.until
                }
                _ => false,
            };
            if !same {
                return Err(at(format!("entry of {w}: store {post:?}, model {want:?}")));
            }
            if post
                .as_ref()
                .is_some_and(|p: &PresenceEntry| p.sources.is_empty())
            {
                return Err(at("stored entry with no source".into()));
            }
        }
    }
    Ok(stats)
}

/// Counts of what one seed exercised.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CheckStats {
    pub(crate) zombies_refused: u32,
    pub(crate) restarts: u32,
    pub(crate) activations: u32,
    pub(crate) fenced_ok: u32,
    pub(crate) fenced_refused: u32,
    pub(crate) last_releases: u32,
}

/// First and last send time of an epoch's commits, and who sent the last one.
type Window = (u64, u64, String);

/// Per room, the nodes' commit windows per epoch never overlap, in epoch order.
pub(crate) fn check_commit_windows(h: &NodeHistory) -> Result<(), String> {
    // (room, epoch) → (first sent, last sent, "node kind" of the last).
    let mut windows: BTreeMap<(String, Epoch), Window> = BTreeMap::new();
    for Commit {
        room,
        epoch,
        node,
        sent_ms,
        kind,
    } in &h.commits
    {
        let w =
            windows
                .entry((room.clone(), *epoch))
                .or_insert((*sent_ms, *sent_ms, String::new()));
        w.0 = w.0.min(*sent_ms);
        if *sent_ms >= w.1 {
            w.1 = *sent_ms;
            w.2 = format!("{node} {kind}");
        }
    }
    let mut prev: Option<(&(String, Epoch), &Window)> = None;
    for (k, w) in &windows {
        if let Some((pk, pw)) = prev
            && pk.0 == k.0
            && pw.1 >= w.0
        {
            return Err(format!(
                "G1: room {}: epoch {} ({}) committed until {} ms, epoch {} ({}) from {} ms",
                k.0, pk.1, pw.2, pw.1, k.1, w.2, w.0
            ));
        }
        prev = Some((k, w));
    }
    Ok(())
}
