//! How a room runs: [`RoomConfig`] and the [`CapacityTier`] that sets its defaults.

use plaza_physics::{PhysicsConfig, RoomDefinition};

use crate::consent::ConsentConfig;
use crate::interactions::DEFAULT_REACH_M;
use crate::interest::DEFAULT_TIER_BANDS_M;
use crate::scene::SceneConfig;

/// A room's capacity tier: it sets the default interest cap and bandwidth budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CapacityTier {
    /// Up to 32 visible avatars, 32 kbit/s per client.
    #[default]
    Class,
    /// Up to 256 visible avatars, 256 kbit/s per client.
    Stadium,
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
}

/// How a room runs. Defaults follow the seeds: 50 Hz simulation, 20 Hz broadcast.
#[derive(Clone, Debug)]
pub struct RoomConfig {
    /// Simulation steps per second.
    pub tick_hz: u32,
    /// Snapshot broadcasts per second (at most `tick_hz`).
    pub broadcast_hz: u32,
    /// Most members the room admits; a join beyond it is refused with [`JoinRefusal::RoomFull`].
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
    /// From this many members on, a broadcast's frames are spread over the steps that follow it
    /// (0: never). Members are split into `1 + tick_hz / broadcast_hz` groups by entity id; a
    /// broadcast encodes the first group's frames, each of the next simulation steps one more
    /// group (of the state at that step), and the next broadcast first finishes any group still
    /// due. Every member still gets one frame per broadcast period, always at the same phase of
    /// it; the cost of a step is bounded by a group instead of the whole room.
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
            ..Self::default()
        }
    }
}
