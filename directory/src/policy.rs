//! Placement policy: weighted rendezvous (highest-random-weight) hashing.
//!
//! Every live, non-draining node gets the score `-w / ln(u)` where `u ∈ (0, 1)` is a stable
//! hash of `(room, node id)` and `w = 1 / (1 + load)`; the highest score wins (ties: smallest
//! id). Without load differences each room maps to the same node from every gateway, and
//! adding/removing a node moves only the rooms that node wins/loses; heavier nodes win
//! proportionally fewer new rooms. It does not claim anything: the chosen node claims the lease
//! when it activates the room.

use crate::types::NodeInfo;

/// Picks the node for `room` among `nodes` that are live at `now_ms` and not draining.
pub fn rendezvous_pick<'a>(room: &str, nodes: &'a [NodeInfo], now_ms: u64) -> Option<&'a NodeInfo> {
    let mut best: Option<(f64, &NodeInfo)> = None;
    for n in nodes
        .iter()
        .filter(|n| !n.draining && n.heartbeat_until_ms > now_ms)
    {
        let s = score(room, &n.id, n.load);
        let better = match best {
            None => true,
            Some((bs, bn)) => s > bs || (s == bs && n.id < bn.id),
        };
        if better {
            best = Some((s, n));
        }
    }
    best.map(|(_, n)| n)
}

/// The weighted rendezvous score of `node` for `room`.
fn score(room: &str, node: &str, load: u32) -> f64 {
    let h = stable_hash(room, node);
    // 53 random bits mapped into the open interval (0, 1).
    let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let w = 1.0 / (1.0 + f64::from(load));
    -w / u.ln()
}

/// FNV-1a over `room \0 node`, finished with the splitmix64 mixer (stable across processes,
/// platforms and Rust versions, unlike `DefaultHasher`).
fn stable_hash(room: &str, node: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in room.bytes().chain(std::iter::once(0)).chain(node.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, load: u32, draining: bool) -> NodeInfo {
        NodeInfo {
            id: id.into(),
            addr: format!("{id}:1"),
            load,
            draining,
            heartbeat_until_ms: 100,
        }
    }

    #[test]
    fn skips_draining_and_dead_and_is_stable() {
        let mut nodes = vec![node("a", 0, false), node("b", 0, true), node("c", 0, false)];
        nodes[2].heartbeat_until_ms = 10;
        for r in 0..50 {
            let room = format!("r{r}");
            assert_eq!(
                rendezvous_pick(&room, &nodes, 50).map(|n| n.id.as_str()),
                Some("a")
            );
        }
        assert!(rendezvous_pick("x", &nodes[1..2], 50).is_none());
    }

    #[test]
    fn spreads_rooms_and_prefers_light_nodes() {
        let nodes = vec![
            node("a", 0, false),
            node("b", 0, false),
            node("c", 0, false),
        ];
        let mut counts = [0usize; 3];
        for r in 0..3000 {
            let id = &rendezvous_pick(&format!("room-{r}"), &nodes, 0).unwrap().id;
            counts[(id.as_bytes()[0] - b'a') as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        let nodes = vec![
            node("a", 0, false),
            node("b", 0, false),
            node("c", 100, false),
        ];
        let heavy = (0..3000)
            .filter(|r| rendezvous_pick(&format!("room-{r}"), &nodes, 0).unwrap().id == "c")
            .count();
        assert!(heavy < 100, "heavy node got {heavy}");
    }
}
