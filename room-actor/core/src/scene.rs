//! Lockstep scene actions (seed 001), with the room as the master.
//!
//! A scene is game state that every client runs identically. Clients never change it directly:
//! they submit input actions; the room orders them onto its ticks (the room tick at which it
//! applied them, in the order it received them) and sends every synced client of the scene one
//! [`EventBody::SceneTick`] per tick that has actions, at the end of that tick's step. A
//! `SceneTick` for tick `t` also means every tick before `t` is complete; when nothing happens
//! the room still sends an empty tick every `heartbeat_ticks` so clients can run ahead. With one
//! client the action comes straight back at the end of the same step (single-player mode needs
//! no special case: the room never waits for anyone).
//!
//! # Late joiners
//! The room keeps the last game state the scene's **master client** reported (`SceneState`, with
//! the tick it was captured after) and the ordered action log since that tick (bounded by
//! `max_log_actions`). The scene starts with an empty state at the tick before its first client
//! joined, so until the log overflows a late joiner can always be served at once:
//! 1. join: the joiner is `waiting_for_late_joiner_sync`; every client gets `ClientJoined`;
//! 2. the room sends the joiner `SceneSync` (state and its tick) and every logged `SceneTick`
//!    after it; the joiner is `catching_up` and every client gets `BeginCatchUp`;
//! 3. once it has run them, the joiner sends `CaughtUp`: it is `normal`, everyone gets
//!    `CaughtUp`.
//!
//! When the log holds more than half its bound, the room asks the master for a fresh state
//! ([`EventBody::SceneStateRequest`]); a reported state trims the log. If the log had to drop
//! actions the state does not cover, joiners wait until a newer state arrives. A client that
//! leaves raises `ClientLeft`; if it was the master, the lowest session running live (else the
//! lowest catching up, whose later `CaughtUp` leaves it master) becomes master
//! (`MasterChanged`). A scene with no client left is forgotten; if only
//! unsynced joiners remain, the first of them restarts the scene from an empty state.
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

    fn log_covers_state(&self) -> bool {
        self.dropped_upto <= self.state_tick
    }

    /// Send every waiting joiner the state and the log, if the log reaches back to the state.
    fn sync_waiting(&mut self, id: &str, out: &mut Vec<SceneOut>) {
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
            out.push((
                vec![session],
                EventBody::SceneSync {
                    scene: id.to_owned(),
                    tick: self.state_tick,
                    game_state: self.state.clone(),
                    client_state: SceneClientState::CatchingUp,
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
            self.clients
                .insert(session, (entity, SceneClientState::CatchingUp));
            self.catching_up.insert(session);
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
        }
    }

    /// Every scene, by id.
    pub fn scenes(&self) -> &BTreeMap<String, Scene> {
        &self.scenes
    }

    /// Replace the state (restore).
    pub fn restore(&mut self, scenes: BTreeMap<String, Scene>) {
        self.scenes = scenes;
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
                return Ok(out);
            }
            scene.clients.insert(
                session,
                (entity, SceneClientState::WaitingForLateJoinerSync),
            );
            scene.client_event(
                id,
                entity,
                SceneClientEvent::ClientJoined,
                SceneClientState::WaitingForLateJoinerSync,
                None,
                &mut out,
            );
            scene.sync_waiting(id, &mut out);
            if !scene.log_covers_state() && !scene.state_requested {
                request_state(scene, id, &mut out);
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
                if scene.current.len() >= self.cfg.max_actions_per_tick {
                    return Err(Refusal::TickFull);
                }
                scene.current.push((entity, payload));
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
                scene.sync_waiting(id, &mut out);
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
            return;
        }
        if state != SceneClientState::Master {
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
                scene.clients.insert(s, (e, SceneClientState::Master));
                scene.client_event(
                    id,
                    e,
                    SceneClientEvent::MasterChanged,
                    SceneClientState::Master,
                    None,
                    out,
                );
                if !scene.log_covers_state() {
                    request_state(scene, id, out);
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
                    scene.clients.insert(s, (e, SceneClientState::Master));
                    out.push((
                        vec![s],
                        EventBody::SceneSync {
                            scene: id.to_owned(),
                            tick: scene.state_tick,
                            game_state: Vec::new(),
                            client_state: SceneClientState::Master,
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
                    scene.sync_waiting(id, out);
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
        for (id, scene) in &mut self.scenes {
            let to = scene.recipients(true);
            if !scene.current.is_empty() {
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
                scene.log_actions += actions.len();
                scene.log.push_back((tick, actions));
                while scene.log_actions > cfg.max_log_actions {
                    let Some((t, a)) = scene.log.pop_front() else {
                        break;
                    };
                    scene.log_actions -= a.len();
                    scene.dropped_upto = t;
                }
                if scene.log_actions > cfg.max_log_actions / 2 && !scene.state_requested {
                    request_state(scene, id, &mut out);
                }
            } else if tick.saturating_sub(scene.last_sent_tick) >= cfg.heartbeat_ticks {
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
        }
        out
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
mod tests {
    use super::*;

    fn act(p: &[u8]) -> SceneOp {
        SceneOp::Action(p.to_vec())
    }

    fn ticks(out: &[SceneOut]) -> Vec<(Vec<SessionId>, u64, usize)> {
        out.iter()
            .filter_map(|(to, b)| match b {
                EventBody::SceneTick { tick, actions, .. } => {
                    Some((to.clone(), *tick, actions.len()))
                }
                _ => None,
            })
            .collect()
    }

    fn client_events(out: &[SceneOut]) -> Vec<(u32, SceneClientEvent, SceneClientState)> {
        out.iter()
            .filter_map(|(_, b)| match b {
                EventBody::SceneClient {
                    entity,
                    event,
                    state,
                    ..
                } => Some((*entity, *event, *state)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_single_client_gets_its_actions_at_the_end_of_the_step() {
        let mut sc = Scenes::new(SceneConfig::default());
        let out = sc.apply(1, 10, "chess", SceneOp::Join, 5).unwrap();
        assert!(matches!(
            &out[0],
            (to, EventBody::SceneSync { tick: 4, client_state: SceneClientState::Master, .. })
                if to == &vec![1]
        ));
        assert_eq!(
            client_events(&out),
            vec![(10, SceneClientEvent::ClientJoined, SceneClientState::Master)]
        );
        assert!(sc.apply(1, 10, "chess", act(b"e4"), 5).unwrap().is_empty());
        assert_eq!(ticks(&sc.finish_tick(5)), vec![(vec![1], 5, 1)]);
    }

    #[test]
    fn late_joiner_syncs_catches_up_and_goes_normal() {
        let mut sc = Scenes::new(SceneConfig::default());
        sc.apply(1, 10, "s", SceneOp::Join, 1).unwrap();
        sc.apply(1, 10, "s", act(b"a"), 1).unwrap();
        sc.finish_tick(1);
        sc.apply(1, 10, "s", act(b"b"), 3).unwrap();
        sc.finish_tick(3);
        assert_eq!(sc.apply(2, 20, "s", act(b"x"), 4), Err(Refusal::NotInScene));
        let out = sc.apply(2, 20, "s", SceneOp::Join, 4).unwrap();
        assert_eq!(
            client_events(&out),
            vec![
                (
                    20,
                    SceneClientEvent::ClientJoined,
                    SceneClientState::WaitingForLateJoinerSync
                ),
                (
                    20,
                    SceneClientEvent::BeginCatchUp,
                    SceneClientState::CatchingUp
                ),
            ]
        );
        assert!(out.iter().any(|(to, b)| to == &vec![2]
            && matches!(
                b,
                EventBody::SceneSync {
                    tick: 0,
                    client_state: SceneClientState::CatchingUp,
                    ..
                }
            )));
        assert_eq!(
            ticks(&out),
            vec![(vec![2], 1, 1), (vec![2], 3, 1)],
            "the log since the state"
        );
        assert_eq!(
            sc.apply(1, 10, "s", SceneOp::CaughtUp, 4),
            Err(Refusal::WrongState)
        );
        let out = sc.apply(2, 20, "s", SceneOp::CaughtUp, 5).unwrap();
        assert_eq!(
            client_events(&out),
            vec![(20, SceneClientEvent::CaughtUp, SceneClientState::Normal)]
        );
        sc.apply(2, 20, "s", act(b"y"), 5).unwrap();
        sc.apply(1, 10, "s", act(b"z"), 5).unwrap();
        let out = sc.finish_tick(5);
        assert_eq!(ticks(&out), vec![(vec![1, 2], 5, 2)]);
        // The master leaves: the other client becomes master.
        let out = sc.member_left(1);
        assert_eq!(
            client_events(&out),
            vec![
                (10, SceneClientEvent::ClientLeft, SceneClientState::Master),
                (
                    20,
                    SceneClientEvent::MasterChanged,
                    SceneClientState::Master
                ),
            ]
        );
        sc.member_left(2);
        assert!(sc.scenes().is_empty(), "an empty scene is forgotten");
    }

    #[test]
    fn bounded_log_asks_for_state_and_joiners_wait_for_it() {
        let cfg = SceneConfig {
            max_log_actions: 4,
            ..SceneConfig::default()
        };
        let mut sc = Scenes::new(cfg);
        sc.apply(1, 10, "s", SceneOp::Join, 1).unwrap();
        let mut requested = false;
        for t in 1..=6 {
            sc.apply(1, 10, "s", act(&[t as u8]), t).unwrap();
            requested |= sc
                .finish_tick(t)
                .iter()
                .any(|(to, b)| to == &vec![1] && matches!(b, EventBody::SceneStateRequest { .. }));
        }
        assert!(requested);
        // The log dropped ticks 1 and 2; the initial state cannot serve a joiner.
        let out = sc.apply(2, 20, "s", SceneOp::Join, 7).unwrap();
        assert!(
            !out.iter()
                .any(|(_, b)| matches!(b, EventBody::SceneSync { .. }))
        );
        assert_eq!(sc.apply(2, 20, "s", act(b"no"), 7), Err(Refusal::NotSynced));
        let bad = SceneOp::State {
            tick: 9,
            game_state: b"future".to_vec(),
        };
        assert_eq!(sc.apply(1, 10, "s", bad, 7), Err(Refusal::BadTick));
        let st = SceneOp::State {
            tick: 4,
            game_state: b"state@4".to_vec(),
        };
        assert_eq!(sc.apply(2, 20, "s", st.clone(), 7), Err(Refusal::NotSynced));
        let out = sc.apply(1, 10, "s", st, 7).unwrap();
        assert!(out.iter().any(|(to, b)| to == &vec![2]
            && matches!(b, EventBody::SceneSync { tick: 4, game_state, .. } if game_state == b"state@4")));
        assert_eq!(ticks(&out), vec![(vec![2], 5, 1), (vec![2], 6, 1)]);
    }

    #[test]
    fn limits_and_heartbeats() {
        let cfg = SceneConfig {
            max_actions_per_tick: 1,
            max_payload_bytes: 2,
            heartbeat_ticks: 3,
            max_scenes: 1,
            ..SceneConfig::default()
        };
        let mut sc = Scenes::new(cfg);
        sc.apply(1, 10, "s", SceneOp::Join, 1).unwrap();
        assert_eq!(
            sc.apply(1, 10, "t", SceneOp::Join, 1),
            Err(Refusal::TooMany)
        );
        assert_eq!(
            sc.apply(1, 10, "s", SceneOp::Join, 1),
            Err(Refusal::AlreadyInScene)
        );
        assert_eq!(sc.apply(1, 10, "s", act(b"abc"), 1), Err(Refusal::TooLarge));
        sc.apply(1, 10, "s", act(b"ab"), 1).unwrap();
        assert_eq!(sc.apply(1, 10, "s", act(b"c"), 1), Err(Refusal::TickFull));
        assert_eq!(ticks(&sc.finish_tick(1)), vec![(vec![1], 1, 1)]);
        assert!(sc.finish_tick(2).is_empty());
        assert!(sc.finish_tick(3).is_empty());
        assert_eq!(
            ticks(&sc.finish_tick(4)),
            vec![(vec![1], 4, 0)],
            "heartbeat"
        );
    }
}
