//! Lockstep scene actions (seed 001), with the room as the master.
//!
//! A scene is game state that every client runs identically. Clients never change it directly:
//! they submit input actions; the room orders them onto its ticks (the room tick at which it
//! applied them, in the order it received them) and sends every synced client of the scene one
//! [`EventBody::SceneTick`] per tick that has actions, at the end of that tick's step. A
//! `SceneTick` for tick `t` also means every tick before `t` is complete; when nothing happens
//! the room still sends an empty tick every `heartbeat_ticks` so clients can run ahead. Tick
//! numbers of a scene only go up: actions that arrive in a tick whose `SceneTick` already went
//! (see the single-player fast path) are ordered onto the next tick.
//!
//! # Single-player fast path (seed 001's single-player mode)
//! While a scene has exactly one client, that client is told so ([`SceneClientEvent::Alone`],
//! on joining an empty scene and whenever the others have left) and its first action of a tick
//! comes back at once, as that tick's `SceneTick`, when the room applies it (not at the end of
//! the step); more actions in the same tick come with the next tick. They are logged like any
//! other, for the next joiner. A second client joining ends the fast path (its `ClientJoined`
//! says so).
//!
//! # Late joiners
//! The room keeps the last game state the scene's **master client** reported (`SceneState`, with
//! the tick it was captured after) and the ordered action log since that tick (bounded by
//! `max_log_actions`). The scene starts with an empty state at the tick before its first client
//! joined, so until the log overflows a late joiner can always be served at once:
//! 1. join: the joiner is `waiting_for_late_joiner_sync` (nobody is told yet);
//! 2. the room sends the joiner `SceneSync` (state and its tick, the scene's roster with every
//!    client's state, and the master's entity) and every logged `SceneTick` after it; the
//!    joiner is `catching_up`, and only now, with its data, every client gets `ClientJoined`
//!    and then `BeginCatchUp`;
//! 3. once it has run them, the joiner sends `CaughtUp`: it is `normal`, everyone gets
//!    `CaughtUp`.
//!
//! When the log holds more than half its bound, the room asks the master for a fresh state
//! ([`EventBody::SceneStateRequest`]); a reported state trims the log. If the log had to drop
//! actions the state does not cover, joiners wait until a newer state arrives, but never
//! forever: when the master has not answered a request within `state_timeout_ticks`, every
//! waiting joiner is told ([`SceneClientEvent::SyncRetry`]) and the room asks again; after
//! `max_state_retries` unanswered requests the master is replaced by the lowest other client
//! running live or catching up (`MasterChanged`; the old master is `normal`) and the new master
//! is asked; with no other client to ask, the waiting joiners are dropped from the scene
//! (`ClientLeft`, they may join again). A client that leaves raises `ClientLeft`; if it was the
//! master, the lowest session running live (else the lowest catching up, whose later
//! `CaughtUp` leaves it master) becomes master (`MasterChanged`) and is asked for the state if
//! a joiner needs it. A scene with no client left is forgotten; if only unsynced joiners
//! remain, the first of them restarts the scene from an empty state.
//!
//! Waiting joiners may not send actions (they would act on a state they do not have); catching
//! up ones may (their actions run after everything they are catching up on).
//!
//! This module does not interpret payloads or game states: they are opaque bytes.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::SessionId;
use crate::events::{EventBody, Refusal};

/// A scene client's state (seed 001's "client states" game state).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SceneClientState {
    /// The client whose game state the room keeps for late joiners.
    Master,
    /// Joined, has no state yet.
    WaitingForLateJoinerSync,
    /// Has the state, is running the ticks since.
    CatchingUp,
    /// Running live.
    Normal,
}

impl SceneClientState {
    /// The stable name (`SceneSync.client_state`, `SceneClientEvent.client_state`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Master => "master",
            Self::WaitingForLateJoinerSync => "waiting_for_late_joiner_sync",
            Self::CatchingUp => "catching_up",
            Self::Normal => "normal",
        }
    }
}

/// Scene membership events (seed 001's OnClientJoined, OnClientBeginCatchUp, OnClientCaughtUp,
/// OnClientLeft, MasterChanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SceneClientEvent {
    /// A client joined.
    ClientJoined,
    /// A late joiner got the state and starts catching up.
    BeginCatchUp,
    /// A late joiner caught up.
    CaughtUp,
    /// A client left.
    ClientLeft,
    /// A client became master.
    MasterChanged,
    /// To a waiting joiner: the master did not answer the state request in time; the room asks
    /// again (or asks a new master).
    SyncRetry,
    /// To the only client of a scene: its actions apply at once (the single-player fast path).
    Alone,
}

/// What a member does in a scene.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SceneOp {
    /// Join the scene (created if new).
    Join,
    /// Leave the scene.
    Leave,
    /// The late joiner has run every tick it was sent.
    CaughtUp,
    /// An input action.
    Action(Vec<u8>),
    /// The master's game state, captured after running `tick`.
    State {
        /// The tick.
        tick: u64,
        /// The state.
        game_state: Vec<u8>,
    },
}

/// Limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SceneConfig {
    /// Most scenes a room has at once.
    pub max_scenes: usize,
    /// Longest scene id, bytes.
    pub max_scene_id_bytes: usize,
    /// Largest action payload, bytes.
    pub max_payload_bytes: usize,
    /// Most actions one tick of one scene takes; more are refused with `TickFull`.
    pub max_actions_per_tick: usize,
    /// Most actions the late-joiner log keeps.
    pub max_log_actions: usize,
    /// Largest game state, bytes.
    pub max_state_bytes: usize,
    /// An empty `SceneTick` after this many ticks without one.
    pub heartbeat_ticks: u64,
    /// Ticks the master has to answer a state request a joiner waits for (150: 3 s at 50 Hz).
    pub state_timeout_ticks: u64,
    /// Unanswered state requests before another client is made master (or, with none, the
    /// waiting joiners are dropped).
    pub max_state_retries: u32,
}

impl Default for SceneConfig {
    fn default() -> Self {
        Self {
            max_scenes: 16,
            max_scene_id_bytes: 64,
            max_payload_bytes: 1024,
            max_actions_per_tick: 64,
            max_log_actions: 4096,
            max_state_bytes: 256 * 1024,
            heartbeat_ticks: 10,
            state_timeout_ticks: 150,
            max_state_retries: 3,
        }
    }
}

/// One scene's state (public for the saved state).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scene {
    /// Clients: session -> (entity, state).
    pub clients: BTreeMap<SessionId, (u32, SceneClientState)>,
    /// Actions of the tick being stepped.
    pub current: TickActions,
    /// Ticks with actions after `state_tick`, oldest first.
    pub log: VecDeque<(u64, TickActions)>,
    /// Actions in `log`.
    pub log_actions: usize,
    /// The last game state (empty: the initial state).
    pub state: Vec<u8>,
    /// The tick `state` was captured after.
    pub state_tick: u64,
    /// The newest tick whose actions were dropped from the log (0: none).
    pub dropped_upto: u64,
    /// The last tick a `SceneTick` went out for.
    pub last_sent_tick: u64,
    /// A state request is outstanding.
    pub state_requested: bool,
    /// Clients sent a state that have not reported `CaughtUp` yet.
    pub catching_up: BTreeSet<SessionId>,
}

/// The actions of one tick: `(entity, payload)` in arrival order.
pub type TickActions = Vec<(u32, Vec<u8>)>;

/// One output: recipients (ascending) and the event.
pub type SceneOut = (Vec<SessionId>, EventBody);

/// The room's scenes.
#[derive(Clone, Debug, Default)]
pub struct Scenes {
    cfg: SceneConfig,
    scenes: BTreeMap<String, Scene>,
    /// Per scene: the joiners' wait for a state (not saved: a restored scene's wait starts
    /// again at its first tick).
    waits: BTreeMap<String, StateWait>,
    /// Per scene: sessions in join order (not saved: restored clients come first, by session).
    order: BTreeMap<String, Vec<SessionId>>,
}

/// A state request joiners wait for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct StateWait {
    /// The tick the last request went.
    asked_at: u64,
    /// Requests that went unanswered.
    retries: u32,
}

impl Scene {
    fn recipients(&self, synced_only: bool) -> Vec<SessionId> {
        self.clients
            .iter()
            .filter(|(_, (_, s))| !synced_only || *s != SceneClientState::WaitingForLateJoinerSync)
            .map(|(s, _)| *s)
            .collect()
    }

    fn client_event(
        &self,
        id: &str,
        entity: u32,
        event: SceneClientEvent,
        state: SceneClientState,
        extra: Option<SessionId>,
        out: &mut Vec<SceneOut>,
    ) {
        let mut to = self.recipients(false);
        if let Some(e) = extra
            && let Err(i) = to.binary_search(&e)
        {
            to.insert(i, e);
        }
        out.push((
            to,
            EventBody::SceneClient {
                scene: id.to_owned(),
                entity,
                event,
                state,
            },
        ));
    }

    /// Makes `session` (avatar `entity`) the master and tells every client.
    fn promote(&mut self, id: &str, session: SessionId, entity: u32, out: &mut Vec<SceneOut>) {
        self.clients
            .insert(session, (entity, SceneClientState::Master));
        self.client_event(
            id,
            entity,
            SceneClientEvent::MasterChanged,
            SceneClientState::Master,
            None,
            out,
        );
    }

    fn log_covers_state(&self) -> bool {
        self.dropped_upto <= self.state_tick
    }

    /// Send every waiting joiner the state and the log, if the log reaches back to the state.
    /// `order`: the scene's sessions in join order.
    fn sync_waiting(&mut self, id: &str, order: &[SessionId], out: &mut Vec<SceneOut>) {
        if !self.log_covers_state() {
            return;
        }
        let waiting: Vec<(SessionId, u32)> = self
            .clients
            .iter()
            .filter(|(_, (_, s))| *s == SceneClientState::WaitingForLateJoinerSync)
            .map(|(s, (e, _))| (*s, *e))
            .collect();
        for (session, entity) in waiting {
            self.clients
                .insert(session, (entity, SceneClientState::CatchingUp));
            out.push((
                vec![session],
                EventBody::SceneSync {
                    scene: id.to_owned(),
                    tick: self.state_tick,
                    game_state: self.state.clone(),
                    client_state: SceneClientState::CatchingUp,
                    members: self.members(order),
                    master_entity: self.master_entity(),
                },
            ));
            for (tick, actions) in &self.log {
                out.push((
                    vec![session],
                    EventBody::SceneTick {
                        scene: id.to_owned(),
                        tick: *tick,
                        actions: actions.clone(),
                    },
                ));
            }
            self.catching_up.insert(session);
            // Seed 001: OnClientJoined runs when the joiner has its data.
            self.client_event(
                id,
                entity,
                SceneClientEvent::ClientJoined,
                SceneClientState::CatchingUp,
                None,
                out,
            );
            self.client_event(
                id,
                entity,
                SceneClientEvent::BeginCatchUp,
                SceneClientState::CatchingUp,
                None,
                out,
            );
        }
    }

    /// Every client's entity and state, in join order (`order`; clients it does not list, as
    /// after a restore, first by session).
    fn members(&self, order: &[SessionId]) -> Vec<(u32, SceneClientState)> {
        let listed: BTreeSet<SessionId> = order.iter().copied().collect();
        self.clients
            .iter()
            .filter(|(s, _)| !listed.contains(s))
            .map(|(s, _)| *s)
            .chain(order.iter().copied())
            .filter_map(|s| self.clients.get(&s).copied())
            .collect()
    }

    /// The master's entity (0: none).
    fn master_entity(&self) -> u32 {
        self.master()
            .and_then(|s| self.clients.get(&s))
            .map_or(0, |(e, _)| *e)
    }

    fn has_waiting(&self) -> bool {
        self.clients
            .values()
            .any(|(_, s)| *s == SceneClientState::WaitingForLateJoinerSync)
    }

    /// Whether the scene's one client may take the fast path in `tick`.
    fn alone_in(&self, tick: u64) -> bool {
        self.clients.len() == 1 && tick > self.last_sent_tick
    }

    /// Appends `tick`'s actions to the log (merging with a logged entry of the same tick) and
    /// keeps it within its bound; asks the master for a state when it is over half full.
    fn log_tick(
        &mut self,
        id: &str,
        tick: u64,
        actions: TickActions,
        cfg: &SceneConfig,
        out: &mut Vec<SceneOut>,
    ) {
        self.log_actions += actions.len();
        match self.log.back_mut() {
            Some((t, a)) if *t == tick => a.extend(actions),
            _ => self.log.push_back((tick, actions)),
        }
        while self.log_actions > cfg.max_log_actions {
            let Some((t, a)) = self.log.pop_front() else {
                break;
            };
            self.log_actions -= a.len();
            self.dropped_upto = t;
        }
        if self.log_actions > cfg.max_log_actions / 2 && !self.state_requested {
            request_state(self, id, out);
        }
    }

    fn alone_event(&self, id: &str, out: &mut Vec<SceneOut>) {
        if let Some((s, (e, st))) = self.clients.iter().next()
            && self.clients.len() == 1
        {
            out.push((
                vec![*s],
                EventBody::SceneClient {
                    scene: id.to_owned(),
                    entity: *e,
                    event: SceneClientEvent::Alone,
                    state: *st,
                },
            ));
        }
    }

    fn master(&self) -> Option<SessionId> {
        self.clients
            .iter()
            .find(|(_, (_, s))| *s == SceneClientState::Master)
            .map(|(s, _)| *s)
    }
}

impl Scenes {
    /// No scenes yet.
    pub fn new(cfg: SceneConfig) -> Self {
        Self {
            cfg,
            scenes: BTreeMap::new(),
            waits: BTreeMap::new(),
            order: BTreeMap::new(),
        }
    }

    /// Every scene, by id.
    pub fn scenes(&self) -> &BTreeMap<String, Scene> {
        &self.scenes
    }

    /// Replace the state (restore).
    pub fn restore(&mut self, scenes: BTreeMap<String, Scene>) {
        self.scenes = scenes;
        self.waits.clear();
        self.order.clear();
    }

    /// Apply one op by `session` (avatar `entity`) during `tick`.
    pub fn apply(
        &mut self,
        session: SessionId,
        entity: u32,
        id: &str,
        op: SceneOp,
        tick: u64,
    ) -> Result<Vec<SceneOut>, Refusal> {
        let mut out = Vec::new();
        if id.is_empty() || id.len() > self.cfg.max_scene_id_bytes {
            return Err(Refusal::TooLarge);
        }
        if op == SceneOp::Join {
            if !self.scenes.contains_key(id) && self.scenes.len() >= self.cfg.max_scenes {
                return Err(Refusal::TooMany);
            }
            let scene = self.scenes.entry(id.to_owned()).or_insert_with(|| Scene {
                state_tick: tick.saturating_sub(1),
                last_sent_tick: tick.saturating_sub(1),
                ..Scene::default()
            });
            if scene.clients.contains_key(&session) {
                return Err(Refusal::AlreadyInScene);
            }
            let order = self.order.entry(id.to_owned()).or_default();
            order.retain(|s| scene.clients.contains_key(s));
            order.push(session);
            if scene.clients.is_empty() {
                scene
                    .clients
                    .insert(session, (entity, SceneClientState::Master));
                out.push((
                    vec![session],
                    EventBody::SceneSync {
                        scene: id.to_owned(),
                        tick: scene.state_tick,
                        game_state: scene.state.clone(),
                        client_state: SceneClientState::Master,
                        members: scene.members(order),
                        master_entity: entity,
                    },
                ));
                scene.client_event(
                    id,
                    entity,
                    SceneClientEvent::ClientJoined,
                    SceneClientState::Master,
                    None,
                    &mut out,
                );
                scene.alone_event(id, &mut out);
                return Ok(out);
            }
            scene.clients.insert(
                session,
                (entity, SceneClientState::WaitingForLateJoinerSync),
            );
            scene.sync_waiting(id, order, &mut out);
            if scene.has_waiting() {
                // A joiner waits for a state: ask now (again, if an older request is
                // outstanding) and time the answer from here.
                let wait = self.waits.entry(id.to_owned()).or_default();
                if !scene.state_requested || wait.asked_at == 0 {
                    request_state(scene, id, &mut out);
                    *wait = StateWait {
                        asked_at: tick.max(1),
                        retries: 0,
                    };
                }
            }
            return Ok(out);
        }
        let scene = self.scenes.get_mut(id).ok_or(Refusal::NotInScene)?;
        let (_, state) = *scene.clients.get(&session).ok_or(Refusal::NotInScene)?;
        match op {
            // Handled above; a member in the scene asking again is refused like there.
            SceneOp::Join => return Err(Refusal::AlreadyInScene),
            SceneOp::Leave => {
                self.leave_scene(session, id, &mut out);
            }
            SceneOp::CaughtUp => {
                if !scene.catching_up.remove(&session) {
                    return Err(Refusal::WrongState);
                }
                // A master may have been promoted while catching up: it stays master.
                let after = match state {
                    SceneClientState::CatchingUp => SceneClientState::Normal,
                    other => other,
                };
                scene.clients.insert(session, (entity, after));
                scene.client_event(
                    id,
                    entity,
                    SceneClientEvent::CaughtUp,
                    after,
                    None,
                    &mut out,
                );
            }
            SceneOp::Action(payload) => {
                if state == SceneClientState::WaitingForLateJoinerSync {
                    return Err(Refusal::NotSynced);
                }
                if payload.len() > self.cfg.max_payload_bytes {
                    return Err(Refusal::TooLarge);
                }
                // This tick's actions: those waiting for its end, and those the fast path
                // already sent in it.
                let sent_now = match scene.log.back() {
                    Some((t, a)) if *t == tick && scene.last_sent_tick == tick => a.len(),
                    _ => 0,
                };
                if scene.current.len() + sent_now >= self.cfg.max_actions_per_tick {
                    return Err(Refusal::TickFull);
                }
                if scene.alone_in(tick) {
                    // The single-player fast path: back at once, as this tick's SceneTick.
                    let actions = vec![(entity, payload)];
                    scene.last_sent_tick = tick;
                    out.push((
                        vec![session],
                        EventBody::SceneTick {
                            scene: id.to_owned(),
                            tick,
                            actions: actions.clone(),
                        },
                    ));
                    let cfg = self.cfg;
                    scene.log_tick(id, tick, actions, &cfg, &mut out);
                } else {
                    scene.current.push((entity, payload));
                }
            }
            SceneOp::State {
                tick: at,
                game_state,
            } => {
                if state != SceneClientState::Master {
                    return Err(Refusal::NotSynced);
                }
                if game_state.len() > self.cfg.max_state_bytes {
                    return Err(Refusal::TooLarge);
                }
                if at < scene.state_tick || at > scene.last_sent_tick {
                    return Err(Refusal::BadTick);
                }
                scene.state = game_state;
                scene.state_tick = at;
                scene.state_requested = false;
                while scene.log.front().is_some_and(|(t, _)| *t <= at) {
                    if let Some((_, a)) = scene.log.pop_front() {
                        scene.log_actions -= a.len();
                    }
                }
                self.waits.remove(id);
                let order = self.order.get(id).map_or(&[][..], Vec::as_slice);
                scene.sync_waiting(id, order, &mut out);
                if scene.has_waiting() {
                    // Still older than the log reaches: ask for a newer one.
                    request_state(scene, id, &mut out);
                    self.waits.insert(
                        id.to_owned(),
                        StateWait {
                            asked_at: tick.max(1),
                            retries: 0,
                        },
                    );
                }
            }
        }
        Ok(out)
    }

    fn leave_scene(&mut self, session: SessionId, id: &str, out: &mut Vec<SceneOut>) {
        let Some(scene) = self.scenes.get_mut(id) else {
            return;
        };
        let Some((entity, state)) = scene.clients.remove(&session) else {
            return;
        };
        scene.catching_up.remove(&session);
        scene.client_event(
            id,
            entity,
            SceneClientEvent::ClientLeft,
            state,
            Some(session),
            out,
        );
        if scene.clients.is_empty() {
            self.scenes.remove(id);
            self.waits.remove(id);
            self.order.remove(id);
            return;
        }
        if let Some(o) = self.order.get_mut(id) {
            o.retain(|s| *s != session);
        }
        if state != SceneClientState::Master {
            if scene.clients.len() == 1 && !scene.has_waiting() {
                scene.alone_event(id, out);
            }
            return;
        }
        // The next master: the lowest session running live, else the lowest catching up.
        let synced = [SceneClientState::Normal, SceneClientState::CatchingUp]
            .into_iter()
            .find_map(|want| {
                scene
                    .clients
                    .iter()
                    .find(|(_, (_, s))| *s == want)
                    .map(|(s, (e, _))| (*s, *e))
            });
        match synced {
            Some((s, e)) => {
                scene.promote(id, s, e, out);
                if !scene.log_covers_state() {
                    // The old master's request died with it: ask the new one, timed afresh.
                    request_state(scene, id, out);
                    if scene.has_waiting() {
                        self.waits.insert(
                            id.to_owned(),
                            StateWait {
                                asked_at: scene.last_sent_tick.max(1),
                                retries: 0,
                            },
                        );
                    }
                }
                if scene.clients.len() == 1 {
                    scene.alone_event(id, out);
                }
            }
            None => {
                // Only unsynced joiners remain and the log cannot rebuild the state: start over.
                let first = scene.clients.iter().next().map(|(s, (e, _))| (*s, *e));
                if let Some((s, e)) = first {
                    scene.state.clear();
                    scene.state_tick = scene.last_sent_tick;
                    scene.log.clear();
                    scene.log_actions = 0;
                    scene.dropped_upto = 0;
                    scene.state_requested = false;
                    self.waits.remove(id);
                    scene.clients.insert(s, (e, SceneClientState::Master));
                    let order = self.order.get(id).map_or(&[][..], Vec::as_slice);
                    out.push((
                        vec![s],
                        EventBody::SceneSync {
                            scene: id.to_owned(),
                            tick: scene.state_tick,
                            game_state: Vec::new(),
                            client_state: SceneClientState::Master,
                            members: scene.members(order),
                            master_entity: e,
                        },
                    ));
                    scene.client_event(
                        id,
                        e,
                        SceneClientEvent::MasterChanged,
                        SceneClientState::Master,
                        None,
                        out,
                    );
                    scene.sync_waiting(id, order, out);
                    if scene.clients.len() == 1 {
                        scene.alone_event(id, out);
                    }
                }
            }
        }
    }

    /// A member left the room: it leaves every scene, in scene id order.
    pub fn member_left(&mut self, session: SessionId) -> Vec<SceneOut> {
        let ids: Vec<String> = self
            .scenes
            .iter()
            .filter(|(_, s)| s.clients.contains_key(&session))
            .map(|(id, _)| id.clone())
            .collect();
        let mut out = Vec::new();
        for id in ids {
            self.leave_scene(session, &id, &mut out);
        }
        out
    }

    /// End of `tick`'s step: send each scene's ordered actions (or a heartbeat), log them.
    pub fn finish_tick(&mut self, tick: u64) -> Vec<SceneOut> {
        let mut out = Vec::new();
        let cfg = self.cfg;
        let mut overdue = Vec::new();
        for (id, scene) in &mut self.scenes {
            let to = scene.recipients(true);
            // Actions of a tick whose SceneTick already went (the fast path) wait for the next.
            if !scene.current.is_empty() && tick > scene.last_sent_tick {
                let actions = std::mem::take(&mut scene.current);
                scene.last_sent_tick = tick;
                out.push((
                    to,
                    EventBody::SceneTick {
                        scene: id.clone(),
                        tick,
                        actions: actions.clone(),
                    },
                ));
                scene.log_tick(id, tick, actions, &cfg, &mut out);
            } else if scene.current.is_empty()
                && tick.saturating_sub(scene.last_sent_tick) >= cfg.heartbeat_ticks
            {
                scene.last_sent_tick = tick;
                out.push((
                    to,
                    EventBody::SceneTick {
                        scene: id.clone(),
                        tick,
                        actions: Vec::new(),
                    },
                ));
            }
            if scene.has_waiting() && !scene.log_covers_state() {
                let wait = self.waits.entry(id.clone()).or_default();
                if wait.asked_at == 0 {
                    // A restored scene (or one whose request was never timed): time it now.
                    wait.asked_at = tick.max(1);
                } else if tick.saturating_sub(wait.asked_at) >= cfg.state_timeout_ticks {
                    overdue.push(id.clone());
                }
            } else {
                self.waits.remove(id);
            }
        }
        for id in overdue {
            self.state_overdue(&id, tick, &mut out);
        }
        out
    }

    /// The master did not answer the state request joiners of `id` wait for in time: tell them,
    /// ask again; after `max_state_retries` ask another client (made master); with none, drop
    /// the joiners (they are told they left the scene and may join again).
    fn state_overdue(&mut self, id: &str, tick: u64, out: &mut Vec<SceneOut>) {
        let cfg = self.cfg;
        let Some(scene) = self.scenes.get_mut(id) else {
            return;
        };
        let wait = self.waits.entry(id.to_owned()).or_default();
        wait.retries += 1;
        wait.asked_at = tick.max(1);
        let waiting: Vec<(SessionId, u32)> = scene
            .clients
            .iter()
            .filter(|(_, (_, s))| *s == SceneClientState::WaitingForLateJoinerSync)
            .map(|(s, (e, _))| (*s, *e))
            .collect();
        if wait.retries >= cfg.max_state_retries {
            let old = scene.master();
            let next = [SceneClientState::Normal, SceneClientState::CatchingUp]
                .into_iter()
                .find_map(|want| {
                    scene
                        .clients
                        .iter()
                        .find(|(s, (_, st))| *st == want && Some(**s) != old)
                        .map(|(s, (e, _))| (*s, *e))
                });
            match next {
                Some((s, e)) => {
                    if let Some(m) = old
                        && let Some((me, _)) = scene.clients.get(&m).copied()
                    {
                        scene.clients.insert(m, (me, SceneClientState::Normal));
                    }
                    wait.retries = 0;
                    scene.promote(id, s, e, out);
                }
                None => {
                    // Nobody else can serve them: the joiners do not wait forever.
                    self.waits.remove(id);
                    for (s, e) in waiting {
                        scene.clients.remove(&s);
                        if let Some(o) = self.order.get_mut(id) {
                            o.retain(|x| *x != s);
                        }
                        scene.client_event(
                            id,
                            e,
                            SceneClientEvent::ClientLeft,
                            SceneClientState::WaitingForLateJoinerSync,
                            Some(s),
                            out,
                        );
                    }
                    scene.state_requested = false;
                    if scene.clients.len() == 1 {
                        scene.alone_event(id, out);
                    }
                    return;
                }
            }
        }
        for (s, e) in waiting {
            out.push((
                vec![s],
                EventBody::SceneClient {
                    scene: id.to_owned(),
                    entity: e,
                    event: SceneClientEvent::SyncRetry,
                    state: SceneClientState::WaitingForLateJoinerSync,
                },
            ));
        }
        request_state(scene, id, out);
    }
}

fn request_state(scene: &mut Scene, id: &str, out: &mut Vec<SceneOut>) {
    if let Some(m) = scene.master() {
        scene.state_requested = true;
        out.push((
            vec![m],
            EventBody::SceneStateRequest {
                scene: id.to_owned(),
                min_tick: scene.dropped_upto.max(scene.state_tick),
            },
        ));
    }
}

#[cfg(test)]
mod tests;
