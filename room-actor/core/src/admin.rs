//! Operator decisions, sans I/O: what the admin API's room calls decide, as pure functions and
//! small state machines the room actor holds beside its [`Room`](crate::Room).
//!
//! * [`member_session`]: which attached session a wallet is (the operator names members by
//!   wallet; the room knows sessions).
//! * [`resolve_teleport`]: where an operator teleport leads (a named spawn point, or a point that
//!   must be finite and inside the room's bounds).
//! * [`Moderation`]: who is muted, and which inputs a muted member may still send
//!   ([`is_muted_input`]).
//! * The teleport itself is [`Room::teleport`](crate::Room::teleport) (cause `Operator`).
//! * [`TickWindow`] and [`RateWindow`]: the room's recent tick durations (p99) and frame bytes
//!   per second, for the room view.
//! * [`RoomView`] ([`room_view`]): members with wallet, entity, display name, position and held
//!   props; held props; open consents; the counters above.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use plaza_physics::RoomDefinition;

use crate::state::RoomState;
use crate::{Input, SessionId};

/// Where an operator sends a member.
#[derive(Clone, Debug, PartialEq)]
pub enum TeleportTarget {
    /// A named spawn point of the room's definition.
    Spawn(String),
    /// A feet position, metres.
    Position([f32; 3]),
}

/// Why an operator call on a room was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdminRefusal {
    /// No attached member has this wallet.
    #[error("no member with wallet `{0}` in this room")]
    NotMember(String),
    /// The room's definition has no spawn point of this name.
    #[error("no spawn point named `{0}` in this room")]
    UnknownSpawn(String),
    /// A coordinate is NaN or infinite.
    #[error("position is not finite")]
    NonFinite,
    /// The point is outside the room's bounds.
    #[error("position is outside the room's bounds")]
    OutOfBounds,
    /// The room was handed off (a drain) or closed: it changes nothing any more.
    #[error("the room is handed off or closed; it changes nothing any more")]
    Frozen,
}

impl AdminRefusal {
    /// Stable code for the admin API's `error` field.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotMember(_) => "not_member",
            Self::UnknownSpawn(_) => "unknown_spawn",
            Self::NonFinite => "non_finite",
            Self::OutOfBounds => "out_of_bounds",
            Self::Frozen => "room_frozen",
        }
    }
}

/// The session of the member whose wallet is `wallet`, among `members` (session, wallet). A
/// wallet attached twice (two tabs) names its lowest session: the answer does not depend on the
/// iteration order.
pub fn member_session<'a>(
    members: impl IntoIterator<Item = (SessionId, &'a str)>,
    wallet: &str,
) -> Result<SessionId, AdminRefusal> {
    members
        .into_iter()
        .filter(|(_, w)| *w == wallet)
        .map(|(s, _)| s)
        .min()
        .ok_or_else(|| AdminRefusal::NotMember(wallet.to_owned()))
}

/// The feet position an operator teleport leads to: the named spawn point, or `position` when it
/// is finite and inside the room's bounds (inclusive).
pub fn resolve_teleport(
    def: &RoomDefinition,
    target: &TeleportTarget,
) -> Result<[f32; 3], AdminRefusal> {
    match target {
        TeleportTarget::Spawn(name) => def
            .spawn_point(name)
            .map(|s| s.position)
            .ok_or_else(|| AdminRefusal::UnknownSpawn(name.clone())),
        TeleportTarget::Position(p) => {
            if p.iter().any(|v| !v.is_finite()) {
                return Err(AdminRefusal::NonFinite);
            }
            let inside = (0..3).all(|i| def.bounds_min[i] <= p[i] && p[i] <= def.bounds_max[i]);
            if inside {
                Ok(*p)
            } else {
                Err(AdminRefusal::OutOfBounds)
            }
        }
    }
}

/// Whether a muted member's `input` is dropped.
///
/// Mute silences a member's expressive channel, nothing else: its emotes (and, as the room gains
/// them, its expressions, chat and voice) are not relayed to anyone, while it keeps moving,
/// picking up props, answering consents and taking part in scenes, so a mute never desyncs
/// the room. The room drops these inputs before the core sees them.
pub fn is_muted_input(input: &Input) -> bool {
    match input {
        Input::Emote { .. } | Input::Expression { .. } => true,
        Input::Move(_)
        | Input::Resync
        | Input::Interact { .. }
        | Input::Consent { .. }
        | Input::Scene { .. }
        | Input::Teleport { .. }
        | Input::Block { .. }
        | Input::PersonalSpace { .. }
        | Input::Profile { .. } => false,
    }
}

/// Who is muted in a room, by wallet (a mute outlives a reconnect within the room's activation;
/// it is not handed off on a drain).
#[derive(Clone, Debug, Default)]
pub struct Moderation {
    muted: BTreeSet<String>,
    /// Inputs dropped because their sender is muted.
    pub dropped: u64,
}

/// Most wallets a room keeps muted (an operator's list, but bounded all the same).
pub const MAX_MUTED: usize = 4096;

impl Moderation {
    /// Mutes or unmutes `wallet`; `false` when the mute list is full (nothing changed).
    pub fn set_muted(&mut self, wallet: &str, muted: bool) -> bool {
        if muted {
            if self.muted.len() >= MAX_MUTED && !self.muted.contains(wallet) {
                return false;
            }
            self.muted.insert(wallet.to_owned());
        } else {
            self.muted.remove(wallet);
        }
        true
    }

    /// Whether `wallet` is muted.
    pub fn is_muted(&self, wallet: &str) -> bool {
        self.muted.contains(wallet)
    }

    /// Whether `input` from `wallet` reaches the core (counts what it drops).
    pub fn admits(&mut self, wallet: &str, input: &Input) -> bool {
        if is_muted_input(input) && self.is_muted(wallet) {
            self.dropped += 1;
            return false;
        }
        true
    }
}

/// The durations of a room's recent ticks (the last `cap`), for a p99.
#[derive(Clone, Debug)]
pub struct TickWindow {
    samples: VecDeque<f64>,
    cap: usize,
}

impl Default for TickWindow {
    fn default() -> Self {
        Self::new(1000)
    }
}

impl TickWindow {
    /// A window of the last `cap` ticks (at least 1).
    pub fn new(cap: usize) -> Self {
        Self {
            samples: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// One tick took `seconds`.
    pub fn record(&mut self, seconds: f64) {
        if self.samples.len() == self.cap {
            self.samples.pop_front();
        }
        self.samples.push_back(seconds);
    }

    /// The 99th percentile (nearest rank) of the window, `None` while empty.
    pub fn p99(&self) -> Option<f64> {
        percentile(self.samples.iter().copied(), 0.99)
    }
}

/// The nearest-rank `q` quantile (0 < q ≤ 1) of `values`; `None` when empty. NaNs sort last.
pub fn percentile(values: impl IntoIterator<Item = f64>, q: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// A cumulative counter's rate over the last `span_ms` of room time (frame bytes per second).
#[derive(Clone, Debug)]
pub struct RateWindow {
    samples: VecDeque<(u64, u64)>,
    span_ms: u64,
}

impl Default for RateWindow {
    fn default() -> Self {
        Self::new(10_000)
    }
}

impl RateWindow {
    /// A rate over the last `span_ms` (at least 1 ms).
    pub fn new(span_ms: u64) -> Self {
        Self {
            samples: VecDeque::new(),
            span_ms: span_ms.max(1),
        }
    }

    /// The counter was `total` at `now_ms` (monotonic time; an older time is ignored).
    pub fn record(&mut self, now_ms: u64, total: u64) {
        if self.samples.back().is_some_and(|(t, _)| *t > now_ms) {
            return;
        }
        self.samples.push_back((now_ms, total));
        // Keep one sample at or before the span's start, so the rate covers the whole span.
        while self.samples.len() > 2 && self.samples[1].0 + self.span_ms <= now_ms {
            self.samples.pop_front();
        }
    }

    /// Units per second between the oldest and newest samples; `None` with less than two
    /// samples or no time between them.
    pub fn per_second(&self) -> Option<f64> {
        let (t0, v0) = *self.samples.front()?;
        let (t1, v1) = *self.samples.back()?;
        (t1 > t0).then(|| v1.saturating_sub(v0) as f64 * 1000.0 / (t1 - t0) as f64)
    }
}

/// Who a session is: its wallet (the shell's) and the display name it announced (the core's
/// [`people::Identity`](crate::people::Identity)).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Identity {
    /// Wallet address or guest id.
    pub wallet: String,
    /// The display name it announced, if any.
    pub display_name: Option<String>,
}

/// One member in a [`RoomView`].
#[derive(Clone, Debug, PartialEq)]
pub struct MemberView {
    /// Session.
    pub session: SessionId,
    /// Wallet (empty when the shell does not know the session).
    pub wallet: String,
    /// Avatar entity.
    pub entity: u32,
    /// Display name, if announced.
    pub display_name: Option<String>,
    /// Feet position.
    pub position: [f32; 3],
    /// Props this member holds.
    pub props_held: Vec<u32>,
    /// Muted ([`Moderation`]).
    pub muted: bool,
}

/// One open consent in a [`RoomView`].
#[derive(Clone, Debug, PartialEq)]
pub struct ConsentView {
    /// Consent id.
    pub id: u64,
    /// Kind's name.
    pub kind: &'static str,
    /// State's name.
    pub state: &'static str,
    /// Requester's avatar.
    pub requester: u32,
    /// Target's avatar.
    pub target: u32,
}

/// What the console shows of a room.
#[derive(Clone, Debug, PartialEq)]
pub struct RoomView {
    /// Room id.
    pub room: String,
    /// Steps run.
    pub tick: u64,
    /// Members, by session.
    pub members: Vec<MemberView>,
    /// Held props: `(prop id, holder's entity)`.
    pub props_held: Vec<(u32, u32)>,
    /// Open consents, by id.
    pub consents: Vec<ConsentView>,
    /// The 99th percentile of the last ticks' durations, seconds.
    pub tick_p99_s: Option<f64>,
    /// Frame bytes per second per member over the last seconds.
    pub bytes_per_client_per_s: Option<f64>,
}

/// Most members a [`RoomView`] lists (the member count is always exact).
pub const MAX_VIEW_MEMBERS: usize = 1000;

/// The console's view of a room from its saved state, who its sessions are, and its windows.
/// Members beyond [`MAX_VIEW_MEMBERS`] are left out (lowest sessions first).
pub fn room_view(
    state: &RoomState,
    who: &BTreeMap<SessionId, Identity>,
    moderation: &Moderation,
    ticks: &TickWindow,
    bytes: &RateWindow,
) -> RoomView {
    let mut held: BTreeMap<SessionId, Vec<u32>> = BTreeMap::new();
    let mut props_held = Vec::new();
    for p in &state.props {
        if let Some((session, entity)) = p.holder {
            held.entry(session).or_default().push(p.prop_id);
            props_held.push((p.prop_id, entity));
        }
    }
    let members: Vec<MemberView> = state
        .members
        .iter()
        .take(MAX_VIEW_MEMBERS)
        .map(|m| {
            let id = who.get(&m.session).cloned().unwrap_or_default();
            MemberView {
                session: m.session,
                muted: moderation.is_muted(&id.wallet),
                wallet: id.wallet,
                entity: m.entity,
                display_name: id.display_name,
                position: m.pose.position,
                props_held: held.remove(&m.session).unwrap_or_default(),
            }
        })
        .collect();
    let consents = state
        .consents
        .iter()
        .map(|c| ConsentView {
            id: c.id,
            kind: c.kind.as_str(),
            state: c.state.as_str(),
            requester: c.requester.entity,
            target: c.target.entity,
        })
        .collect();
    let n = state.members.len();
    RoomView {
        room: state.room_id.clone(),
        tick: state.tick,
        members,
        props_held,
        consents,
        tick_p99_s: ticks.p99(),
        bytes_per_client_per_s: bytes
            .per_second()
            .map(|b| if n == 0 { 0.0 } else { b / n as f64 }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emotes::EmoteRequest;
    use crate::{Outbound, Room, RoomConfig};

    fn def() -> RoomDefinition {
        RoomDefinition::default_plaza()
    }

    #[test]
    fn refusal_codes_are_distinct() {
        let all = [
            AdminRefusal::NotMember("w".into()),
            AdminRefusal::UnknownSpawn("s".into()),
            AdminRefusal::NonFinite,
            AdminRefusal::OutOfBounds,
            AdminRefusal::Frozen,
        ];
        let codes: BTreeSet<_> = all.iter().map(AdminRefusal::code).collect();
        assert_eq!(codes.len(), all.len());
    }

    #[test]
    fn member_session_finds_the_wallet_and_refuses_a_stranger() {
        let members = [(7, "alice"), (3, "bob"), (5, "alice")];
        assert_eq!(member_session(members, "alice"), Ok(5));
        assert_eq!(member_session(members, "bob"), Ok(3));
        assert_eq!(
            member_session(members, "carol"),
            Err(AdminRefusal::NotMember("carol".into()))
        );
    }

    #[test]
    fn teleport_to_a_spawn_point_or_a_point_inside_the_bounds() {
        let d = def();
        let stage = d.spawn_point("stage").unwrap().position;
        assert_eq!(
            resolve_teleport(&d, &TeleportTarget::Spawn("stage".into())),
            Ok(stage)
        );
        assert_eq!(
            resolve_teleport(&d, &TeleportTarget::Spawn("nowhere".into())),
            Err(AdminRefusal::UnknownSpawn("nowhere".into()))
        );
        let inside = [1.0, 0.0, 2.0];
        assert_eq!(
            resolve_teleport(&d, &TeleportTarget::Position(inside)),
            Ok(inside)
        );
        // The corners are inside; a hair beyond is not.
        assert!(resolve_teleport(&d, &TeleportTarget::Position(d.bounds_min)).is_ok());
        assert!(resolve_teleport(&d, &TeleportTarget::Position(d.bounds_max)).is_ok());
        let mut out = d.bounds_max;
        out[0] += 0.01;
        assert_eq!(
            resolve_teleport(&d, &TeleportTarget::Position(out)),
            Err(AdminRefusal::OutOfBounds)
        );
        assert_eq!(
            resolve_teleport(&d, &TeleportTarget::Position([f32::NAN, 0.0, 0.0])),
            Err(AdminRefusal::NonFinite)
        );
        assert_eq!(
            resolve_teleport(&d, &TeleportTarget::Position([0.0, f32::INFINITY, 0.0])),
            Err(AdminRefusal::NonFinite)
        );
    }

    #[test]
    fn a_muted_member_loses_its_emotes_only() {
        let mut m = Moderation::default();
        let emote = Input::Emote {
            seq: 1,
            request: EmoteRequest {
                emote_id: "wave".into(),
                timestamp_ms: 10,
                stop: false,
            },
        };
        assert!(m.admits("alice", &emote));
        assert!(m.set_muted("alice", true));
        assert!(m.is_muted("alice"));
        assert!(!m.admits("alice", &emote));
        assert!(
            m.admits("alice", &Input::Resync),
            "non-expressive input goes on"
        );
        assert!(m.admits("bob", &emote), "others are not muted");
        assert_eq!(m.dropped, 1);
        assert!(m.set_muted("alice", false));
        assert!(m.admits("alice", &emote));
    }

    #[test]
    fn the_mute_list_is_bounded() {
        let mut m = Moderation::default();
        for i in 0..MAX_MUTED {
            assert!(m.set_muted(&format!("w{i}"), true));
        }
        assert!(!m.set_muted("one-more", true));
        assert!(!m.is_muted("one-more"));
        assert!(m.set_muted("w0", true), "re-muting a muted wallet is fine");
    }

    #[test]
    fn tick_p99_is_the_nearest_rank_over_the_window() {
        let mut w = TickWindow::new(100);
        assert_eq!(w.p99(), None);
        for i in 1..=100 {
            w.record(f64::from(i));
        }
        assert_eq!(w.p99(), Some(99.0));
        // The window slides: the oldest samples go.
        for _ in 0..100 {
            w.record(1.0);
        }
        assert_eq!(w.p99(), Some(1.0));
        assert_eq!(percentile([5.0], 0.99), Some(5.0));
    }

    #[test]
    fn byte_rate_covers_the_span() {
        let mut r = RateWindow::new(1000);
        assert_eq!(r.per_second(), None);
        r.record(0, 0);
        assert_eq!(r.per_second(), None);
        r.record(500, 1000);
        assert_eq!(r.per_second(), Some(2000.0));
        for t in 1..=20 {
            r.record(500 + t * 100, 1000 + t * 100);
        }
        // 1000 bytes/s over the last second.
        assert_eq!(r.per_second(), Some(1000.0));
        // Time going backwards is ignored.
        r.record(10, 0);
        assert_eq!(r.per_second(), Some(1000.0));
    }

    #[test]
    fn room_view_lists_members_with_who_they_are() {
        let mut room = Room::new("r", RoomConfig::default());
        room.join(1);
        room.join(2);
        let mut out: Vec<Outbound> = Vec::new();
        room.step(20, &mut out);
        let mut who = BTreeMap::new();
        who.insert(
            1,
            Identity {
                wallet: "alice".into(),
                display_name: Some("Alice".into()),
            },
        );
        let mut moderation = Moderation::default();
        moderation.set_muted("alice", true);
        let v = room_view(
            &room.save_state(),
            &who,
            &moderation,
            &TickWindow::default(),
            &RateWindow::default(),
        );
        assert_eq!(v.room, "r");
        assert_eq!(v.members.len(), 2);
        let a = &v.members[0];
        assert_eq!(
            (
                a.session,
                a.wallet.as_str(),
                a.display_name.as_deref(),
                a.muted
            ),
            (1, "alice", Some("Alice"), true)
        );
        assert_eq!(Some(a.entity), room.entity_of(1));
        assert_eq!(a.position, room.pose_of(1).unwrap().position);
        // A session the shell does not know is listed with an empty wallet.
        assert_eq!(v.members[1].wallet, "");
        assert!(!v.members[1].muted);
        assert!(v.consents.is_empty() && v.props_held.is_empty());
        assert_eq!(v.tick_p99_s, None);
    }
}
