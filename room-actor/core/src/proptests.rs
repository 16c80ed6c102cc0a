//! Property test: random interleavings of joins, leaves, grabs, places, throws and consent ops
//! against a small reference model of the ownership and consent rules.
//!
//! Checked after every step: the room's prop events, consent audit trail and refusals equal the
//! model's prediction (so a consent never leaves the table and a prop never has two holders);
//! prop ownership agrees with the physics world; every audit record comes before the event that
//! acknowledges it, with gap-free local sequence numbers; and a second room fed the same calls
//! produces the same outputs.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use crate::consent::ConsentOp;
use crate::events::EventBody;
use crate::interactions::{InteractionKind, InteractionRequest};
use crate::{Input, Outbound, Room, RoomConfig, RoomEvent, SessionId};

const SESSIONS: u64 = 4;
const PROPS: u32 = 2;
const REQUEST_TIMEOUT_MS: u64 = 1_000;
const CONSENT_TIMEOUT_MS: u64 = 2_000;
const KINDS: [&str; 3] = ["follow", "hand_hold", "hug"];

#[derive(Clone, Debug)]
enum Op {
    Join(SessionId),
    Leave(SessionId),
    Grab(SessionId, u32),
    Place(SessionId, u32),
    Throw(SessionId, u32),
    Request(SessionId, SessionId, usize),
    /// A consent op on an id, by a session (`Some`), or (`None`) on the id-th open consent of
    /// the model by the party the op is meant for (resolved when fed, so that answers often
    /// come from the right party).
    Answer(Option<SessionId>, u64, Option<ConsentOp>),
    Step(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let s = 1..=SESSIONS;
    let p = 1..=PROPS;
    let cop = prop_oneof![
        1 => Just(None),
        3 => Just(Some(ConsentOp::Consent)),
        1 => Just(Some(ConsentOp::Decline)),
        3 => Just(Some(ConsentOp::Activate)),
        2 => Just(Some(ConsentOp::Release)),
        1 => Just(Some(ConsentOp::Cancel)),
        1 => Just(Some(ConsentOp::Request)),
    ];
    prop_oneof![
        2 => s.clone().prop_map(Op::Join),
        1 => s.clone().prop_map(Op::Leave),
        3 => (s.clone(), p.clone()).prop_map(|(s, p)| Op::Grab(s, p)),
        2 => (s.clone(), p.clone()).prop_map(|(s, p)| Op::Place(s, p)),
        1 => (s.clone(), p).prop_map(|(s, p)| Op::Throw(s, p)),
        3 => (s.clone(), 1..=SESSIONS + 1, 0..KINDS.len()).prop_map(|(a, b, k)| Op::Request(a, b, k)),
        2 => (s, 1..=8u64, cop.clone()).prop_map(|(a, id, op)| Op::Answer(Some(a), id, op)),
        6 => (1..=6u64, cop).prop_map(|(id, op)| Op::Answer(None, id, op)),
        // A wake of the shell 20 to 80 ms, or 0.5 to 2.5 s, after the last one (on the 20 ms
        // step grid).
        3 => (1..5u64).prop_map(|k| Op::Step(k * 20)),
        1 => (25..125u64).prop_map(|k| Op::Step(k * 20)),
    ]
}

/// The reference model's consent.
#[derive(Clone, Copy, Debug)]
struct MConsent {
    requester: SessionId,
    target: SessionId,
    kind: usize,
    state: &'static str,
    since: u64,
}

#[derive(Debug, Default)]
struct Model {
    members: BTreeMap<SessionId, u32>,
    next_entity: u32,
    free: BTreeSet<u32>,
    holders: BTreeMap<u32, SessionId>,
    /// Avatar entity of each prop's holder.
    holder_entities: BTreeMap<u32, u32>,
    consents: BTreeMap<u64, MConsent>,
    next_consent: u64,
    pending: Vec<Op>,
    actions: Vec<Op>,
    /// Predicted outputs of the step: "prop:<id>:<holder entity>:<change>",
    /// "refused:<code>", "audit:<kind>" (refusals: "audit:consent.refused:<code>").
    trail: Vec<String>,
}

impl Model {
    fn session_of_entity(&self, e: u32) -> Option<SessionId> {
        self.members.iter().find(|(_, m)| **m == e).map(|(s, _)| *s)
    }

    fn transition(&mut self, id: u64, to: &'static str, now: u64) {
        self.trail.push(format!("audit:consent.{to}"));
        let terminal = matches!(to, "released" | "declined" | "cancelled" | "expired");
        if terminal {
            self.consents.remove(&id);
        } else if let Some(c) = self.consents.get_mut(&id) {
            c.state = to;
            c.since = now;
        }
    }

    fn step(&mut self, now: u64) {
        self.trail.clear();
        for op in std::mem::take(&mut self.pending) {
            match op {
                Op::Join(s) if !self.members.contains_key(&s) => {
                    let e = match self.free.pop_first() {
                        Some(e) => e,
                        None => {
                            self.next_entity += 1;
                            self.next_entity
                        }
                    };
                    self.members.insert(s, e);
                    // The joiner learns the current holders.
                    for (p, h) in &self.holder_entities {
                        self.trail.push(format!("prop:{p}:{h}:pickup"));
                    }
                }
                Op::Leave(s) => {
                    if let Some(e) = self.members.remove(&s) {
                        let held: Vec<u32> = self
                            .holders
                            .iter()
                            .filter(|(_, h)| **h == s)
                            .map(|(p, _)| *p)
                            .collect();
                        for p in held {
                            self.holders.remove(&p);
                            self.holder_entities.remove(&p);
                            // Prop events go to the members; with none left there is no event.
                            if !self.members.is_empty() {
                                self.trail.push(format!("prop:{p}:0:drop"));
                            }
                        }
                        let theirs: Vec<(u64, &'static str)> = self
                            .consents
                            .iter()
                            .filter(|(_, c)| c.requester == s || c.target == s)
                            .map(|(id, c)| (*id, c.state))
                            .collect();
                        for (id, state) in theirs {
                            let to = if state == "active" {
                                "released"
                            } else {
                                "cancelled"
                            };
                            self.transition(id, to, now);
                        }
                        self.free.insert(e);
                    }
                }
                _ => {}
            }
        }
        for op in std::mem::take(&mut self.actions) {
            match op {
                Op::Grab(s, p) | Op::Place(s, p) | Op::Throw(s, p) => {
                    let r = if !self.members.contains_key(&s) {
                        Err("not_member")
                    } else if matches!(op, Op::Grab(..)) {
                        match self.holders.entry(p) {
                            std::collections::btree_map::Entry::Occupied(_) => Err("already_held"),
                            std::collections::btree_map::Entry::Vacant(v) => {
                                v.insert(s);
                                let e = self.members[&s];
                                self.holder_entities.insert(p, e);
                                Ok(format!("prop:{p}:{e}:pickup"))
                            }
                        }
                    } else if self.holders.get(&p) != Some(&s) {
                        Err("not_holder")
                    } else {
                        self.holders.remove(&p);
                        self.holder_entities.remove(&p);
                        let what = if matches!(op, Op::Place(..)) {
                            "place"
                        } else {
                            "throw"
                        };
                        Ok(format!("prop:{p}:0:{what}"))
                    };
                    match r {
                        Ok(t) => self.trail.push(t),
                        Err(code) => self.trail.push(format!("refused:{code}")),
                    }
                }
                Op::Request(a, target_entity, k) => {
                    let target_entity = target_entity as u32;
                    let r = self.request(a, target_entity, k, now);
                    if let Err(code) = r {
                        self.trail.push(format!("audit:consent.refused:{code}"));
                        self.trail.push(format!("refused:{code}"));
                    }
                }
                Op::Answer(a, id, op) => {
                    let a = a.unwrap_or(1);
                    if let Err(code) = self.answer(a, id, op, now) {
                        self.trail.push(format!("audit:consent.refused:{code}"));
                        self.trail.push(format!("refused:{code}"));
                    }
                }
                _ => {}
            }
        }
        let due: Vec<u64> = self
            .consents
            .iter()
            .filter(|(_, c)| match c.state {
                "requested" => now - c.since >= REQUEST_TIMEOUT_MS,
                "consented" => now - c.since >= CONSENT_TIMEOUT_MS,
                _ => false,
            })
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.transition(id, "expired", now);
        }
    }

    fn request(
        &mut self,
        a: SessionId,
        target_entity: u32,
        k: usize,
        now: u64,
    ) -> Result<(), &'static str> {
        if !self.members.contains_key(&a) {
            return Err("not_member");
        }
        if KINDS[k] == "hug" {
            return Err("unknown_kind");
        }
        let t = self
            .session_of_entity(target_entity)
            .ok_or("no_such_target")?;
        if t == a {
            return Err("self_target");
        }
        if self
            .consents
            .values()
            .any(|c| c.requester == a && c.target == t && c.kind == k)
        {
            return Err("duplicate");
        }
        self.next_consent += 1;
        self.consents.insert(
            self.next_consent,
            MConsent {
                requester: a,
                target: t,
                kind: k,
                state: "requested",
                since: now,
            },
        );
        self.trail.push("audit:consent.requested".into());
        Ok(())
    }

    fn answer(
        &mut self,
        a: SessionId,
        id: u64,
        op: Option<ConsentOp>,
        now: u64,
    ) -> Result<(), &'static str> {
        if !self.members.contains_key(&a) {
            return Err("not_member");
        }
        let op = op.ok_or("unknown_op")?;
        if op == ConsentOp::Request {
            // An answer op carrying REQUEST is a request with an empty kind.
            return Err("unknown_kind");
        }
        let c = *self.consents.get(&id).ok_or("no_such_consent")?;
        let (req, tgt) = (c.requester == a, c.target == a);
        let to = match (op, c.state) {
            (ConsentOp::Consent | ConsentOp::Decline, _) if !tgt => return Err("not_target"),
            (ConsentOp::Consent, "requested") => "consented",
            (ConsentOp::Decline, "requested") => "declined",
            (ConsentOp::Activate | ConsentOp::Cancel, _) if !req => return Err("not_requester"),
            (ConsentOp::Activate, "consented") => "active",
            (ConsentOp::Cancel, "requested" | "consented") => "cancelled",
            (ConsentOp::Release, _) if !req && !tgt => return Err("not_party"),
            (ConsentOp::Release, "consented" | "active") => "released",
            _ => return Err("wrong_state"),
        };
        self.transition(id, to, now);
        Ok(())
    }
}

/// The room's outputs of one step in the model's terms, checking audit-before-event on the way.
fn actual_trail(out: &[Outbound], next_audit: &mut u64) -> Vec<String> {
    let mut trail = Vec::new();
    let mut awaiting_ack = false;
    for o in out {
        match o {
            Outbound::Audit {
                local_seq,
                kind,
                detail_json,
                ..
            } => {
                assert!(
                    !awaiting_ack,
                    "two audits without an event between: {out:?}"
                );
                assert_eq!(*local_seq, *next_audit, "audit sequence has a gap");
                *next_audit += 1;
                awaiting_ack = true;
                if kind == "consent.refused" {
                    let reason = detail_json
                        .split("\"reason\":\"")
                        .nth(1)
                        .and_then(|r| r.split('"').next())
                        .unwrap_or("?");
                    trail.push(format!("audit:{kind}:{reason}"));
                } else {
                    trail.push(format!("audit:{kind}"));
                }
            }
            Outbound::Event(RoomEvent { body, .. }) => match body {
                EventBody::Prop {
                    prop_id,
                    holder_entity,
                    change,
                    ..
                } => {
                    assert!(!awaiting_ack, "a prop event between an audit and its ack");
                    trail.push(format!(
                        "prop:{prop_id}:{holder_entity}:{}",
                        change.as_str()
                    ));
                }
                EventBody::Consent { .. } => {
                    assert!(
                        awaiting_ack,
                        "a consent event without its audit record first"
                    );
                    awaiting_ack = false;
                }
                EventBody::Rejected { reason, .. } => {
                    awaiting_ack = false;
                    trail.push(format!("refused:{}", reason.code()));
                }
                _ => {}
            },
            _ => {}
        }
    }
    assert!(!awaiting_ack, "an audit record without its event");
    trail
}

fn config() -> RoomConfig {
    let mut cfg = RoomConfig::default();
    cfg.definition.spawn = [5.5, 0.0, 3.0];
    cfg.reach_m = 100.0;
    cfg.max_pending_inputs = 10_000;
    cfg.consent.request_timeout_ms = REQUEST_TIMEOUT_MS;
    cfg.consent.consent_timeout_ms = CONSENT_TIMEOUT_MS;
    cfg
}

fn feed(room: &mut Room, op: &Op) {
    let interact = |kind, prop_id| InteractionRequest {
        kind,
        prop_id,
        room: None,
        position: [5.5, 0.6, 4.6],
        velocity: [1.0, 3.0, 0.0],
    };
    match *op {
        Op::Join(s) => room.join(s),
        Op::Leave(s) => room.leave(s),
        Op::Grab(s, p) => room.input(
            s,
            Input::Interact {
                seq: 1,
                request: interact(InteractionKind::Pickup, p),
            },
        ),
        Op::Place(s, p) => room.input(
            s,
            Input::Interact {
                seq: 2,
                request: interact(InteractionKind::Place, p),
            },
        ),
        Op::Throw(s, p) => room.input(
            s,
            Input::Interact {
                seq: 3,
                request: interact(InteractionKind::Throw, p),
            },
        ),
        Op::Request(a, t, k) => room.input(
            a,
            Input::Consent {
                seq: 4,
                op: Some(ConsentOp::Request),
                kind: KINDS[k].into(),
                target_entity: t as u32,
                consent_id: 0,
            },
        ),
        Op::Answer(a, id, op) => room.input(
            a.unwrap_or(1),
            Input::Consent {
                seq: 5,
                op,
                kind: String::new(),
                target_entity: 0,
                consent_id: id,
            },
        ),
        Op::Step(_) => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn ownership_and_consent_follow_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        // The production schedule (`Room::advance`), catching up one step a wake: each `Step`
        // is one late wake that runs one step at its grid time (the rest are skipped), which is
        // what the model steps.
        let mut room = Room::new("r", config());
        let mut twin = Room::new("r", config());
        room.set_max_catch_up(1);
        twin.set_max_catch_up(1);
        let mut model = Model::default();
        let mut now = 0u64;
        let mut next_audit = 1u64;
        let mut next_event = 1u64;
        let mut all: Vec<Op> = (1..=SESSIONS).map(Op::Join).collect();
        all.push(Op::Step(20));
        all.extend(ops);
        all.push(Op::Step(20));
        for op in &all {
            // Resolve "the target answers" against what the model knows now.
            let op = &match *op {
                Op::Answer(None, k, cop) => {
                    let open: Vec<(u64, MConsent)> =
                        model.consents.iter().map(|(id, c)| (*id, *c)).collect();
                    match open.get(k as usize % open.len().max(1)) {
                        Some((id, c)) => {
                            let who = match cop {
                                Some(ConsentOp::Activate | ConsentOp::Cancel) => c.requester,
                                Some(ConsentOp::Release) if k % 2 == 0 => c.requester,
                                _ => c.target,
                            };
                            Op::Answer(Some(who), *id, cop)
                        }
                        None => Op::Answer(Some(1), k, cop),
                    }
                }
                ref other => other.clone(),
            };
            feed(&mut room, op);
            feed(&mut twin, op);
            match op {
                Op::Join(_) | Op::Leave(_) => model.pending.push(op.clone()),
                Op::Step(dt) => {
                    now += dt;
                    let mut out = Vec::new();
                    let ran = room.advance(crate::test_support::ms(now), &mut out);
                    let mut twin_out = Vec::new();
                    let twin_ran = twin.advance(crate::test_support::ms(now), &mut twin_out);
                    prop_assert_eq!(ran.steps, 1, "one step a wake");
                    prop_assert_eq!(ran, twin_ran);
                    prop_assert_eq!(&out, &twin_out, "same calls, same outputs");
                    model.step(now);
                    for o in &out {
                        if let Outbound::Event(e) = o {
                            prop_assert_eq!(e.room_seq, next_event, "event sequence has a gap");
                            prop_assert!(!e.to.is_empty());
                            prop_assert!(e.to.windows(2).all(|w| w[0] < w[1]));
                            next_event += 1;
                        }
                    }
                    let actual = actual_trail(&out, &mut next_audit);
                    prop_assert_eq!(&actual, &model.trail);
                    for p in 1..=PROPS {
                        let slot = room.props.slots()[&p];
                        prop_assert_eq!(slot.holder.map(|(_, e)| e), room.physics.prop_holder(p));
                        prop_assert_eq!(room.props.holder(p), model.holders.get(&p).copied());
                    }
                    for c in room.consents.open().values() {
                        prop_assert!(!c.state.is_terminal());
                    }
                }
                _ => model.actions.push(op.clone()),
            }
        }
    }
}

// === lockstep scenes: every synced client runs the same actions ===

mod lockstep {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use crate::SessionId;
    use crate::events::EventBody;
    use crate::scene::{SceneClientEvent, SceneConfig, SceneOp, Scenes};

    #[derive(Clone, Debug)]
    enum SOp {
        Join(SessionId),
        Leave(SessionId),
        Action(SessionId),
        Report,
        Step,
    }

    fn sop() -> impl Strategy<Value = SOp> {
        prop_oneof![
            2 => (1..=4u64).prop_map(SOp::Join),
            1 => (1..=4u64).prop_map(SOp::Leave),
            5 => (1..=4u64).prop_map(SOp::Action),
            1 => Just(SOp::Report),
            4 => Just(SOp::Step),
        ]
    }

    /// A client that runs the scene: its game state is the list of actions it ran.
    #[derive(Clone, Debug, Default)]
    struct Client {
        /// `None` until it has a state.
        ran: Option<Vec<(u64, u32, Vec<u8>)>>,
        applied_tick: u64,
        catching_up: bool,
        master: bool,
    }

    fn encode(ran: &[(u64, u32, Vec<u8>)]) -> Vec<u8> {
        let mut b = Vec::new();
        for (t, e, p) in ran {
            b.extend_from_slice(&t.to_le_bytes());
            b.extend_from_slice(&e.to_le_bytes());
            b.push(p.len() as u8);
            b.extend_from_slice(p);
        }
        b
    }

    fn decode(mut b: &[u8]) -> Vec<(u64, u32, Vec<u8>)> {
        let mut out = Vec::new();
        while b.len() >= 13 {
            let t = u64::from_le_bytes(b[..8].try_into().unwrap());
            let e = u32::from_le_bytes(b[8..12].try_into().unwrap());
            let n = b[12] as usize;
            out.push((t, e, b[13..13 + n].to_vec()));
            b = &b[13 + n..];
        }
        out
    }

    fn deliver(
        clients: &mut BTreeMap<SessionId, Client>,
        outs: Vec<(Vec<SessionId>, EventBody)>,
    ) -> Result<(), TestCaseError> {
        for (to, body) in outs {
            for s in to {
                let c = clients.entry(s).or_default();
                match &body {
                    EventBody::SceneSync {
                        tick,
                        game_state,
                        client_state,
                        ..
                    } => {
                        c.ran = Some(decode(game_state));
                        c.applied_tick = *tick;
                        c.catching_up = client_state.as_str() == "catching_up";
                        c.master = client_state.as_str() == "master";
                    }
                    EventBody::SceneTick { tick, actions, .. } => {
                        let ran = c.ran.as_mut().ok_or_else(|| {
                            TestCaseError::fail(format!("tick {tick} to unsynced client {s}"))
                        })?;
                        prop_assert!(
                            *tick > c.applied_tick,
                            "tick {} after {}",
                            tick,
                            c.applied_tick
                        );
                        for (e, p) in actions {
                            ran.push((*tick, *e, p.clone()));
                        }
                        c.applied_tick = *tick;
                    }
                    // Events about this client itself.
                    EventBody::SceneClient { entity, event, .. }
                        if u64::from(*entity) == s * 10 =>
                    {
                        match event {
                            SceneClientEvent::MasterChanged => c.master = true,
                            SceneClientEvent::ClientLeft => *c = Client::default(),
                            _ => {}
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn every_synced_client_runs_the_same_actions(ops in proptest::collection::vec(sop(), 1..150)) {
            let cfg = SceneConfig {
                max_log_actions: 3,
                heartbeat_ticks: 2,
                ..SceneConfig::default()
            };
            let mut scenes = Scenes::new(cfg);
            let mut clients: BTreeMap<SessionId, Client> = BTreeMap::new();
            let mut tick = 1u64;
            let mut next_payload = 0u32;
            for op in ops {
                let r = match op {
                    SOp::Join(s) => scenes.apply(s, s as u32 * 10, "g", SceneOp::Join, tick),
                    SOp::Leave(s) => scenes.apply(s, s as u32 * 10, "g", SceneOp::Leave, tick),
                    SOp::Action(s) => {
                        next_payload += 1;
                        scenes.apply(
                            s,
                            s as u32 * 10,
                            "g",
                            SceneOp::Action(next_payload.to_le_bytes().to_vec()),
                            tick,
                        )
                    }
                    SOp::Report => {
                        let master = clients.iter().find(|(_, c)| c.master).map(|(s, c)| (*s, c.clone()));
                        match master {
                            Some((s, c)) => scenes.apply(
                                s,
                                s as u32 * 10,
                                "g",
                                SceneOp::State {
                                    tick: c.applied_tick,
                                    game_state: encode(c.ran.as_deref().unwrap_or(&[])),
                                },
                                tick,
                            ),
                            None => Ok(Vec::new()),
                        }
                    }
                    SOp::Step => {
                        let outs = scenes.finish_tick(tick);
                        deliver(&mut clients, outs)?;
                        tick += 1;
                        // Catching-up clients have run everything they got: say so.
                        let catching: Vec<SessionId> =
                            clients.iter().filter(|(_, c)| c.catching_up).map(|(s, _)| *s).collect();
                        for s in catching {
                            let outs = scenes.apply(s, s as u32 * 10, "g", SceneOp::CaughtUp, tick)
                                .map_err(|e| TestCaseError::fail(format!("caught up refused: {e}")))?;
                            if let Some(c) = clients.get_mut(&s) {
                                c.catching_up = false;
                            }
                            deliver(&mut clients, outs)?;
                        }
                        // The lockstep property: every synced client ran the same actions.
                        let synced: Vec<&Vec<(u64, u32, Vec<u8>)>> =
                            clients.values().filter_map(|c| c.ran.as_ref()).collect();
                        for w in synced.windows(2) {
                            prop_assert_eq!(w[0], w[1]);
                        }
                        if let Some(ran) = synced.first() {
                            let mut ids: Vec<&Vec<u8>> = ran.iter().map(|(_, _, p)| p).collect();
                            ids.sort();
                            ids.dedup();
                            prop_assert_eq!(ids.len(), ran.len(), "an action ran twice");
                        }
                        Ok(Vec::new())
                    }
                };
                if let Ok(outs) = r {
                    deliver(&mut clients, outs)?;
                }
            }
        }
    }
}
