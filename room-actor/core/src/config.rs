//! How a room runs: [`RoomConfig`] and the [`CapacityTier`] that sets its defaults.

use plaza_physics::{PhysicsConfig, RoomDefinition};

use crate::consent::ConsentConfig;
use crate::interactions::DEFAULT_REACH_M;
use crate::interest::DEFAULT_TIER_BANDS_M;
use crate::scene::SceneConfig;

/// A room's capacity tier: it sets the default interest cap and bandwidth budget. The one
/// definition: `room.tier` in the configuration deserializes to it (`class`, `stadium`) and
/// `plaza.v1.CapacityTier` is its wire form ([`From`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CapacityTier {
    /// Up to 32 visible avatars, 32 kbit/s per client.
    #[default]
    Class,
    /// Up to 256 visible avatars, 256 kbit/s per client.
    Stadium,
}

impl From<CapacityTier> for plaza_proto::pb::CapacityTier {
    fn from(t: CapacityTier) -> Self {
        match t {
            CapacityTier::Class => Self::Class,
            CapacityTier::Stadium => Self::Stadium,
        }
    }
}

impl CapacityTier {
    /// The tier's default number of avatars a client sees.
    pub fn default_interest_cap(self) -> u32 {
        match self {
            Self::Class => 32,
            Self::Stadium => 256,
        }
    }

    /// The tier's default bandwidth budget, bytes per second per client.
    pub fn default_budget_bytes_per_s(self) -> u32 {
        match self {
            Self::Class => 32_000 / 8,
            Self::Stadium => 256_000 / 8,
        }
    }

    /// The tier's default expression budget (its own share, on top of the frame budget): a
    /// quarter of the frame budget, bytes per second per client.
    pub fn default_expression_budget_bytes_per_s(self) -> u32 {
        self.default_budget_bytes_per_s() / 4
    }
}

/// How a room runs. Defaults follow the seeds: 50 Hz simulation, 20 Hz broadcast.
#[derive(Clone, Debug)]
pub struct RoomConfig {
    /// Simulation steps per second.
    pub tick_hz: u32,
    /// Snapshot broadcasts per second (at most `tick_hz`).
    pub broadcast_hz: u32,
    /// Most members the room admits; a join beyond it is refused with [`crate::JoinRefusal::RoomFull`].
    pub max_members: u32,
    /// Capacity tier (interest cap and budget defaults).
    pub tier: CapacityTier,
    /// Avatars each client sees at most (nearest first).
    pub interest_cap: u32,
    /// Bandwidth budget per client, bytes per second.
    pub budget_bytes_per_s: u32,
    /// A check hash every this many frames.
    pub check_every: u32,
    /// Distance bands (metres) for tiers 0..=2; beyond the last is tier 3.
    pub tier_bands_m: [f32; 3],
    /// Inputs a member may have queued between two ticks; older ones are dropped beyond it.
    pub max_pending_inputs: usize,
    /// From this many members on, a broadcast's frames are spread over its period (0: never).
    /// Members are split by entity id into one group per 10 ms of the period (five at 20 Hz);
    /// the room wakes in the middle of each 10 ms slot to encode one group's frames (of the
    /// latest step's state). Every member gets its frames exactly one broadcast period apart,
    /// always at the same phase; a wake costs a group instead of the whole room.
    pub spread_from_members: u32,
    /// Threads that encode one step's frames (the room's own and scoped helpers), used when
    /// there are at least 64 frames per thread; 1 (the default) encodes on the room's thread
    /// only. The frames are the same whatever the count. On a node whose cores are busy with
    /// other rooms a helper only waits for a core (docs/BENCHMARKS.md, room core).
    pub encode_threads: u32,
    /// The room's static geometry, bounds, spawn point and props.
    pub definition: RoomDefinition,
    /// Physics and movement-validation parameters.
    pub physics: PhysicsConfig,
    /// How far a member reaches to pick up or place a prop, metres (from its capsule centre).
    pub reach_m: f32,
    /// Consent timeouts and limits.
    pub consent: ConsentConfig,
    /// Lockstep scene limits.
    pub scene: SceneConfig,
    /// Most bytes of roster entries one client gets per broadcast (at least one entry when any
    /// is due); a longer roster (a keyframe's) is split over the following broadcasts.
    pub roster_bytes_per_broadcast: u32,
    /// Expression messages per second (seed 004: 60 Hz; at most `tick_hz`; 0 turns the
    /// expression channel off).
    pub expression_hz: u32,
    /// The expression channel's own share of each client's bandwidth, bytes per second (on
    /// top of `budget_bytes_per_s`; the tier's default is a quarter of the tier's frame budget).
    pub expression_budget_bytes_per_s: u32,
}

impl Default for RoomConfig {
    fn default() -> Self {
        let tier = CapacityTier::Class;
        Self {
            tick_hz: 50,
            broadcast_hz: 20,
            max_members: 256,
            tier,
            interest_cap: tier.default_interest_cap(),
            budget_bytes_per_s: tier.default_budget_bytes_per_s(),
            check_every: 20,
            tier_bands_m: DEFAULT_TIER_BANDS_M,
            max_pending_inputs: 32,
            spread_from_members: 64,
            encode_threads: 1,
            definition: RoomDefinition::default_plaza(),
            physics: PhysicsConfig::default(),
            reach_m: DEFAULT_REACH_M,
            consent: ConsentConfig::default(),
            scene: SceneConfig::default(),
            roster_bytes_per_broadcast: 1024,
            expression_hz: 60,
            expression_budget_bytes_per_s: tier.default_expression_budget_bytes_per_s(),
        }
    }
}

impl RoomConfig {
    /// A config for `tier` with that tier's cap and budget.
    pub fn for_tier(tier: CapacityTier) -> Self {
        Self {
            tier,
            interest_cap: tier.default_interest_cap(),
            budget_bytes_per_s: tier.default_budget_bytes_per_s(),
            expression_budget_bytes_per_s: tier.default_expression_budget_bytes_per_s(),
            ..Self::default()
        }
    }
}

/// One entry of a [`RoomRegistry`]: the rooms whose id matches `pattern` run `cfg`.
#[derive(Clone, Debug)]
pub struct RoomRule {
    /// A room id, or a glob pattern over room ids (`*` any run of characters, `?` one).
    pub pattern: String,
    /// The config of the rooms it matches.
    pub cfg: RoomConfig,
}

/// The node's per-room definitions: the first rule whose pattern matches a room's id gives the
/// room its config; a room no rule matches runs the node's default. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct RoomRegistry {
    rules: std::sync::Arc<Vec<RoomRule>>,
}

impl RoomRegistry {
    /// A registry of `rules`, tried in order.
    pub fn new(rules: Vec<RoomRule>) -> Self {
        Self {
            rules: std::sync::Arc::new(rules),
        }
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[RoomRule] {
        &self.rules
    }

    /// The first rule matching `room_id`, if any.
    pub fn resolve(&self, room_id: &str) -> Option<&RoomRule> {
        self.rules.iter().find(|r| glob_match(&r.pattern, room_id))
    }
}

/// Whether `text` matches the glob `pattern`: `*` matches any run of characters (also none),
/// `?` exactly one, every other character itself. A pattern without wildcards is an exact id.
///
/// Linear backtracking over the last `*` (no recursion): O(|pattern| · |text|) at worst.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was and the text position it has swallowed up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_ids_and_patterns() {
        assert!(glob_match("hall", "hall"));
        assert!(!glob_match("hall", "hall-2"));
        assert!(glob_match("stadium-*", "stadium-"));
        assert!(glob_match("stadium-*", "stadium-final"));
        assert!(!glob_match("stadium-*", "class-stadium-1"));
        assert!(glob_match("*-class", "maths-class"));
        assert!(glob_match("room-?", "room-7"));
        assert!(!glob_match("room-?", "room-77"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("", "x"));
        assert!(glob_match("**x", "abx"));
    }

    #[test]
    fn the_first_matching_rule_wins() {
        let class = RoomConfig::for_tier(CapacityTier::Class);
        let stadium = RoomConfig::for_tier(CapacityTier::Stadium);
        let reg = RoomRegistry::new(vec![
            RoomRule {
                pattern: "stadium-final".into(),
                cfg: class.clone(),
            },
            RoomRule {
                pattern: "stadium-*".into(),
                cfg: stadium,
            },
        ]);
        assert_eq!(
            reg.resolve("stadium-final").unwrap().pattern,
            "stadium-final"
        );
        let r = reg.resolve("stadium-2").unwrap();
        assert_eq!(r.cfg.tier, CapacityTier::Stadium);
        assert_eq!(r.cfg.interest_cap, 256);
        assert!(reg.resolve("lobby").is_none());
        assert!(RoomRegistry::default().resolve("x").is_none());
    }
}
