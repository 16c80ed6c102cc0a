//! Scenario files: which kinds of bots a run mixes, by weight, and how each kind behaves.
//!
//! A scenario is TOML (kebab-case keys, unknown keys are an error). Bot kinds:
//!
//! * `walker`: random-walks inside the room bounds; with `walk-s` and `idle-s` it alternates
//!   walking and standing still, otherwise it always walks.
//! * `idler`: joins and stands still; the adaptive rate decays its movement messages to 1 Hz.
//! * `churner`: walks, and after `stay-s` leaves the room, waits `away-s` on the same connection
//!   and joins again (counted as `rejoins`).
//! * `interactor`: walks slowly and every `action-every-s` sends an interaction (pickup / place
//!   of props `1..=props`), a consent request to a visible avatar, or an emote; it answers consent
//!   requests aimed at it and counts the server's events and rejections. It exercises issue 4's
//!   messages; it does not check the room's rules beyond counting double holds.
//!
//! Built-in scenarios ([`Scenario::builtin`]) are the files in `load/scenarios/`. This module
//! does not run bots.

use std::path::Path;

use serde::Deserialize;

/// Errors of loading a scenario.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML did not parse or has unknown keys.
    #[error("invalid scenario: {0}")]
    Parse(#[from] toml::de::Error),
    /// The values are inconsistent.
    #[error("invalid scenario: {0}")]
    Invalid(String),
}

/// A range of seconds (or any non-negative quantity) `[lo, hi]`, written as a two-element array.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(try_from = "[f64; 2]")]
pub struct Range {
    /// Lower bound, `>= 0`.
    pub lo: f64,
    /// Upper bound, `>= lo`.
    pub hi: f64,
}

impl Range {
    /// A range from constants; `lo <= hi` and both finite and non-negative.
    pub const fn new(lo: f64, hi: f64) -> Self {
        Self { lo, hi }
    }

    /// A uniform sample of the range.
    pub fn sample(&self, rng: &mut impl rand::Rng) -> f64 {
        if self.hi > self.lo {
            rng.random_range(self.lo..=self.hi)
        } else {
            self.lo
        }
    }
}

impl TryFrom<[f64; 2]> for Range {
    type Error = String;

    fn try_from([lo, hi]: [f64; 2]) -> Result<Self, Self::Error> {
        if !(lo.is_finite() && hi.is_finite() && lo >= 0.0 && hi >= lo) {
            return Err(format!(
                "range [{lo}, {hi}] must be finite with 0 <= lo <= hi"
            ));
        }
        Ok(Self { lo, hi })
    }
}

/// What a bot does.
#[derive(Clone, Copy, Debug, Deserialize, Eq, Hash, Ord, PartialEq, PartialOrd)]
#[serde(rename_all = "kebab-case")]
pub enum BotKind {
    /// Random walk (optionally alternating with idling).
    Walker,
    /// Stands still.
    Idler,
    /// Walks, leaves, rejoins.
    Churner,
    /// Walks and sends interactions, consent and emotes.
    Interactor,
}

impl BotKind {
    /// The kind's name as written in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Walker => "walker",
            Self::Idler => "idler",
            Self::Churner => "churner",
            Self::Interactor => "interactor",
        }
    }
}

/// One entry of a scenario's bot mix.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct BotMix {
    /// The kind of these bots.
    pub kind: BotKind,
    /// Relative weight in the mix (default 1).
    #[serde(default = "one")]
    pub weight: u32,
    /// Walking speed range in m/s, clamped to 4 m/s (default `[1.0, 3.0]`).
    #[serde(default = "default_speed")]
    pub speed_mps: Range,
    /// Seconds of walking before an idle pause; absent: walk all the time.
    #[serde(default)]
    pub walk_s: Option<Range>,
    /// Seconds of idling between walks (default `[1, 4]` when `walk-s` is set).
    #[serde(default)]
    pub idle_s: Option<Range>,
    /// Churners: seconds joined before leaving (default `[5, 15]`).
    #[serde(default = "default_stay")]
    pub stay_s: Range,
    /// Churners: seconds away before rejoining (default `[1, 3]`).
    #[serde(default = "default_away")]
    pub away_s: Range,
    /// Interactors: seconds between actions (default `[1, 4]`).
    #[serde(default = "default_action")]
    pub action_every_s: Range,
    /// Interactors: props are numbered `1..=props` (default 8).
    #[serde(default = "default_props")]
    pub props: u32,
}

fn one() -> u32 {
    1
}
fn default_speed() -> Range {
    Range::new(1.0, 3.0)
}
fn default_stay() -> Range {
    Range::new(5.0, 15.0)
}
fn default_away() -> Range {
    Range::new(1.0, 3.0)
}
fn default_action() -> Range {
    Range::new(1.0, 4.0)
}
fn default_props() -> u32 {
    8
}

impl BotMix {
    /// A mix entry of `kind` with every default.
    pub fn of(kind: BotKind) -> Self {
        Self {
            kind,
            weight: 1,
            speed_mps: default_speed(),
            walk_s: None,
            idle_s: None,
            stay_s: default_stay(),
            away_s: default_away(),
            action_every_s: default_action(),
            props: default_props(),
        }
    }

    /// Idle seconds between walks, if this mix alternates.
    pub fn idle_range(&self) -> Option<Range> {
        self.walk_s
            .map(|_| self.idle_s.unwrap_or(Range::new(1.0, 4.0)))
    }
}

/// Room geometry the bots walk in.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RoomBounds {
    /// Bots stay within `[-half_extent_m, half_extent_m]` on x and z (default 30: inside the
    /// walls of the default plaza room, `physics/rooms/plaza.toml`, 64 m x 64 m).
    #[serde(default = "default_half_extent")]
    pub half_extent_m: f32,
}

fn default_half_extent() -> f32 {
    30.0
}

impl Default for RoomBounds {
    fn default() -> Self {
        Self {
            half_extent_m: default_half_extent(),
        }
    }
}

/// A bot mix with room bounds; see the module docs for the kinds.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Scenario {
    /// Short name (shown in reports).
    pub name: String,
    /// What the scenario exercises.
    #[serde(default)]
    pub description: String,
    /// Room bounds.
    #[serde(default)]
    pub room: RoomBounds,
    /// The bot mix; at least one entry with a positive weight.
    pub bots: Vec<BotMix>,
}

/// The built-in scenario files: name and TOML text.
pub const BUILTIN: &[(&str, &str)] = &[
    ("walkers", include_str!("../scenarios/walkers.toml")),
    ("mixed", include_str!("../scenarios/mixed.toml")),
    ("interact", include_str!("../scenarios/interact.toml")),
    ("churn", include_str!("../scenarios/churn.toml")),
];

impl Scenario {
    /// Parses and checks scenario TOML.
    pub fn from_toml(text: &str) -> Result<Self, ScenarioError> {
        let s: Self = toml::from_str(text)?;
        if s.bots.iter().all(|b| b.weight == 0) {
            return Err(ScenarioError::Invalid(
                "no bot kind has a positive weight".into(),
            ));
        }
        if !(s.room.half_extent_m.is_finite() && s.room.half_extent_m >= 2.0) {
            return Err(ScenarioError::Invalid(
                "room.half-extent-m must be >= 2".into(),
            ));
        }
        if s.bots
            .iter()
            .any(|b| b.kind == BotKind::Interactor && b.props == 0)
        {
            return Err(ScenarioError::Invalid("interactors need props >= 1".into()));
        }
        Ok(s)
    }

    /// A built-in scenario by name (`walkers`, `mixed`, `interact`, `churn`).
    pub fn builtin(name: &str) -> Option<Self> {
        let (_, text) = BUILTIN.iter().find(|(n, _)| *n == name)?;
        // The built-in files are checked by a unit test.
        Self::from_toml(text).ok()
    }

    /// Loads `arg` as a file path if it exists, else as a built-in name.
    pub fn load(arg: &str) -> Result<Self, ScenarioError> {
        let path = Path::new(arg);
        if path.exists() {
            let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
                path: arg.to_owned(),
                source,
            })?;
            return Self::from_toml(&text);
        }
        Self::builtin(arg).ok_or_else(|| {
            let names: Vec<_> = BUILTIN.iter().map(|(n, _)| *n).collect();
            ScenarioError::Invalid(format!(
                "{arg:?} is neither a file nor a built-in scenario ({})",
                names.join(", ")
            ))
        })
    }

    /// The default scenario: walkers that always move.
    pub fn walkers() -> Self {
        Self {
            name: "walkers".into(),
            description: "every bot random-walks all the time".into(),
            room: RoomBounds::default(),
            bots: vec![BotMix::of(BotKind::Walker)],
        }
    }

    /// The mix entry for a draw `x` in `0..total_weight`.
    pub fn pick(&self, mut x: u64) -> &BotMix {
        for b in &self.bots {
            if x < u64::from(b.weight) {
                return b;
            }
            x -= u64::from(b.weight);
        }
        // Unreachable for x < total_weight; fall back to the last entry.
        &self.bots[self.bots.len() - 1]
    }

    /// The sum of the weights.
    pub fn total_weight(&self) -> u64 {
        self.bots.iter().map(|b| u64::from(b.weight)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses() {
        for (name, text) in BUILTIN {
            let s = Scenario::from_toml(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&s.name, name);
            assert!(Scenario::builtin(name).is_some());
        }
        assert_eq!(
            Scenario::builtin("walkers").unwrap().bots,
            Scenario::walkers().bots
        );
    }

    #[test]
    fn parses_a_mix_with_defaults() {
        let s = Scenario::from_toml(
            r#"
name = "t"
[room]
half-extent-m = 20.0
[[bots]]
kind = "walker"
weight = 3
walk-s = [2.0, 4.0]
[[bots]]
kind = "churner"
stay-s = [1.0, 1.0]
"#,
        )
        .unwrap();
        assert_eq!(s.room.half_extent_m, 20.0);
        assert_eq!(s.bots[0].kind, BotKind::Walker);
        assert_eq!(s.bots[0].idle_range(), Some(Range::new(1.0, 4.0)));
        assert_eq!(s.bots[1].weight, 1);
        assert_eq!(s.bots[1].idle_range(), None);
        assert_eq!(s.total_weight(), 4);
        assert_eq!(s.pick(0).kind, BotKind::Walker);
        assert_eq!(s.pick(2).kind, BotKind::Walker);
        assert_eq!(s.pick(3).kind, BotKind::Churner);
    }

    #[test]
    fn rejects_unknown_keys_bad_ranges_and_empty_mixes() {
        let unknown = "name = \"t\"\n[[bots]]\nkind = \"walker\"\nspeeed = 1\n";
        assert!(matches!(
            Scenario::from_toml(unknown),
            Err(ScenarioError::Parse(_))
        ));
        let bad_range = "name = \"t\"\n[[bots]]\nkind = \"walker\"\nwalk-s = [3.0, 1.0]\n";
        assert!(matches!(
            Scenario::from_toml(bad_range),
            Err(ScenarioError::Parse(_))
        ));
        let bad_kind = "name = \"t\"\n[[bots]]\nkind = \"flyer\"\n";
        assert!(matches!(
            Scenario::from_toml(bad_kind),
            Err(ScenarioError::Parse(_))
        ));
        let empty = "name = \"t\"\n[[bots]]\nkind = \"walker\"\nweight = 0\n";
        assert!(matches!(
            Scenario::from_toml(empty),
            Err(ScenarioError::Invalid(_))
        ));
        assert!(Scenario::load("no-such-scenario").is_err());
    }
}
