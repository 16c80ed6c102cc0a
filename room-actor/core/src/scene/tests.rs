//! Unit tests of the lockstep scenes.

use super::*;

fn act(p: &[u8]) -> SceneOp {
    SceneOp::Action(p.to_vec())
}

fn ticks(out: &[SceneOut]) -> Vec<(Vec<SessionId>, u64, usize)> {
    out.iter()
        .filter_map(|(to, b)| match b {
            EventBody::SceneTick { tick, actions, .. } => Some((to.clone(), *tick, actions.len())),
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
fn a_single_client_is_told_it_is_alone_and_its_actions_apply_at_once() {
    let mut sc = Scenes::new(SceneConfig::default());
    let out = sc.apply(1, 10, "chess", SceneOp::Join, 5).unwrap();
    assert!(matches!(
        &out[0],
        (to, EventBody::SceneSync { tick: 4, client_state: SceneClientState::Master, .. })
            if to == &vec![1]
    ));
    assert_eq!(
        client_events(&out),
        vec![
            (10, SceneClientEvent::ClientJoined, SceneClientState::Master),
            (10, SceneClientEvent::Alone, SceneClientState::Master),
        ]
    );
    // The fast path: the action is this tick's SceneTick, at once.
    let out = sc.apply(1, 10, "chess", act(b"e4"), 5).unwrap();
    assert_eq!(ticks(&out), vec![(vec![1], 5, 1)]);
    // A second action in the same tick goes with the next tick (tick numbers only rise).
    assert!(ticks(&sc.apply(1, 10, "chess", act(b"e5"), 5).unwrap()).is_empty());
    assert!(ticks(&sc.finish_tick(5)).is_empty());
    assert_eq!(ticks(&sc.finish_tick(6)), vec![(vec![1], 6, 1)]);
    // Both are in the log for a joiner, who ends the fast path.
    let out = sc.apply(2, 20, "chess", SceneOp::Join, 7).unwrap();
    assert_eq!(ticks(&out), vec![(vec![2], 5, 1), (vec![2], 6, 1)]);
    assert!(ticks(&sc.apply(1, 10, "chess", act(b"d4"), 7).unwrap()).is_empty());
    assert_eq!(ticks(&sc.finish_tick(7)), vec![(vec![1, 2], 7, 1)]);
    // The other leaves: the master is alone again, and told so.
    let out = sc.member_left(2);
    assert_eq!(
        client_events(&out),
        vec![
            (
                20,
                SceneClientEvent::ClientLeft,
                SceneClientState::CatchingUp
            ),
            (10, SceneClientEvent::Alone, SceneClientState::Master),
        ]
    );
    assert_eq!(
        out.last().unwrap().0,
        vec![1],
        "only the lone client is told"
    );
    assert_eq!(
        ticks(&sc.apply(1, 10, "chess", act(b"x"), 8).unwrap()),
        vec![(vec![1], 8, 1)]
    );
    // The master leaves a catching-up client alone: it becomes master and is told.
    sc.apply(3, 30, "chess", SceneOp::Join, 9).unwrap();
    let out = sc.member_left(1);
    assert_eq!(
        client_events(&out),
        vec![
            (10, SceneClientEvent::ClientLeft, SceneClientState::Master),
            (
                30,
                SceneClientEvent::MasterChanged,
                SceneClientState::Master
            ),
            (30, SceneClientEvent::Alone, SceneClientState::Master),
        ]
    );
}

/// A `SceneSync`'s recipients, tick, members and master.
type Sync = (Vec<SessionId>, u64, Vec<(u32, SceneClientState)>, u32);

fn syncs(out: &[SceneOut]) -> Vec<Sync> {
    out.iter()
        .filter_map(|(to, b)| match b {
            EventBody::SceneSync {
                tick,
                members,
                master_entity,
                ..
            } => Some((to.clone(), *tick, members.clone(), *master_entity)),
            _ => None,
        })
        .collect()
}

#[test]
fn late_joiner_sync_carries_the_roster_and_the_master_and_client_joined_follows_it() {
    use SceneClientState as S;
    let mut sc = Scenes::new(SceneConfig::default());
    // Sessions join out of session order: the roster is in join order.
    let out = sc.apply(5, 50, "s", SceneOp::Join, 1).unwrap();
    assert_eq!(syncs(&out), vec![(vec![5], 0, vec![(50, S::Master)], 50)]);
    sc.apply(5, 50, "s", act(b"a"), 1).unwrap();
    sc.finish_tick(1);
    let out = sc.apply(2, 20, "s", SceneOp::Join, 2).unwrap();
    assert_eq!(
        syncs(&out),
        vec![(vec![2], 0, vec![(50, S::Master), (20, S::CatchingUp)], 50)]
    );
    sc.apply(2, 20, "s", SceneOp::CaughtUp, 3).unwrap();
    let out = sc.apply(9, 90, "s", SceneOp::Join, 3).unwrap();
    assert_eq!(
        syncs(&out),
        vec![(
            vec![9],
            0,
            vec![(50, S::Master), (20, S::Normal), (90, S::CatchingUp)],
            50
        )]
    );
    // ClientJoined goes after the joiner has its data (the sync and the logged ticks), to
    // everyone, then BeginCatchUp.
    let pos = |f: &dyn Fn(&EventBody) -> bool| out.iter().position(|(_, b)| f(b)).unwrap();
    let sync = pos(&|b| matches!(b, EventBody::SceneSync { .. }));
    let tick = pos(&|b| matches!(b, EventBody::SceneTick { .. }));
    let joined = pos(&|b| {
        matches!(
            b,
            EventBody::SceneClient {
                event: SceneClientEvent::ClientJoined,
                ..
            }
        )
    });
    assert!(sync < tick && tick < joined, "{out:?}");
    assert_eq!(out[joined].0, vec![2, 5, 9]);
    assert_eq!(
        client_events(&out),
        vec![
            (90, SceneClientEvent::ClientJoined, S::CatchingUp),
            (90, SceneClientEvent::BeginCatchUp, S::CatchingUp),
        ]
    );
}

/// A scene whose log (bound 2) dropped actions the initial state does not cover; session 1
/// (entity 10) is master and, with `second`, session 2 (entity 20) runs live.
fn overflowed(cfg: SceneConfig, second: bool) -> Scenes {
    let mut sc = Scenes::new(cfg);
    sc.apply(1, 10, "s", SceneOp::Join, 1).unwrap();
    if second {
        sc.apply(2, 20, "s", SceneOp::Join, 1).unwrap();
        sc.apply(2, 20, "s", SceneOp::CaughtUp, 1).unwrap();
    }
    for t in 1..=4 {
        sc.apply(1, 10, "s", act(&[t as u8]), t).unwrap();
        sc.finish_tick(t);
    }
    sc
}

fn requests(out: &[SceneOut]) -> Vec<Vec<SessionId>> {
    out.iter()
        .filter(|(_, b)| matches!(b, EventBody::SceneStateRequest { .. }))
        .map(|(to, _)| to.clone())
        .collect()
}

#[test]
fn a_waiting_joiner_is_told_and_the_request_retried_then_another_master_asked() {
    use SceneClientState as S;
    let cfg = SceneConfig {
        max_log_actions: 2,
        state_timeout_ticks: 10,
        max_state_retries: 2,
        ..SceneConfig::default()
    };
    let mut sc = overflowed(cfg, true);
    let out = sc.apply(3, 30, "s", SceneOp::Join, 5).unwrap();
    assert!(syncs(&out).is_empty(), "the joiner waits");
    assert!(
        client_events(&out).is_empty(),
        "nobody is told before it has its data"
    );
    assert_eq!(requests(&out), vec![vec![1]], "the master is asked at once");
    // The master stays silent: nothing until the timeout.
    for t in 5..15 {
        let out = sc.finish_tick(t);
        assert!(
            requests(&out).is_empty() && client_events(&out).is_empty(),
            "tick {t}"
        );
    }
    let out = sc.finish_tick(15);
    assert_eq!(
        client_events(&out),
        vec![(30, SceneClientEvent::SyncRetry, S::WaitingForLateJoinerSync)]
    );
    assert_eq!(
        out.iter()
            .find(|(_, b)| matches!(b, EventBody::SceneClient { .. }))
            .unwrap()
            .0,
        vec![3]
    );
    assert_eq!(requests(&out), vec![vec![1]], "asked again");
    // The second timeout (max_state_retries = 2): session 2 becomes master and is asked.
    for t in 16..25 {
        assert!(requests(&sc.finish_tick(t)).is_empty());
    }
    let out = sc.finish_tick(25);
    assert_eq!(
        client_events(&out),
        vec![
            (20, SceneClientEvent::MasterChanged, S::Master),
            (30, SceneClientEvent::SyncRetry, S::WaitingForLateJoinerSync),
        ]
    );
    assert_eq!(requests(&out), vec![vec![2]]);
    let clients = &sc.scenes()["s"].clients;
    assert_eq!(
        clients[&1].1,
        S::Normal,
        "the silent master runs on as a normal client"
    );
    assert_eq!(clients[&2].1, S::Master);
    // The old master may no longer report; the new one does, and the joiner is served.
    let st = |tick| SceneOp::State {
        tick,
        game_state: b"board".to_vec(),
    };
    assert_eq!(sc.apply(1, 10, "s", st(4), 26), Err(Refusal::NotSynced));
    let out = sc.apply(2, 20, "s", st(4), 26).unwrap();
    assert_eq!(
        syncs(&out),
        vec![(
            vec![3],
            4,
            vec![(10, S::Normal), (20, S::Master), (30, S::CatchingUp)],
            20
        )]
    );
    assert!(
        requests(&sc.finish_tick(40)).is_empty(),
        "nothing is waited for any more"
    );
}

#[test]
fn a_waiting_joiner_nobody_can_serve_is_dropped_not_kept_waiting() {
    use SceneClientState as S;
    let cfg = SceneConfig {
        max_log_actions: 2,
        state_timeout_ticks: 10,
        max_state_retries: 2,
        ..SceneConfig::default()
    };
    let mut sc = overflowed(cfg, false);
    sc.apply(3, 30, "s", SceneOp::Join, 5).unwrap();
    let out = sc.finish_tick(15);
    assert_eq!(
        client_events(&out),
        vec![(30, SceneClientEvent::SyncRetry, S::WaitingForLateJoinerSync)]
    );
    let out = sc.finish_tick(25);
    assert_eq!(
        client_events(&out),
        vec![
            (
                30,
                SceneClientEvent::ClientLeft,
                S::WaitingForLateJoinerSync
            ),
            (10, SceneClientEvent::Alone, S::Master),
        ]
    );
    let left = out
        .iter()
        .find(|(_, b)| {
            matches!(
                b,
                EventBody::SceneClient {
                    event: SceneClientEvent::ClientLeft,
                    ..
                }
            )
        })
        .unwrap();
    assert_eq!(left.0, vec![1, 3], "the joiner is told too");
    assert!(!sc.scenes()["s"].clients.contains_key(&3));
    assert!(requests(&out).is_empty());
    assert!(
        sc.finish_tick(60)
            .iter()
            .all(|(_, b)| !matches!(b, EventBody::SceneClient { .. }))
    );
    // It may join again (and waits afresh, the master asked again).
    let out = sc.apply(3, 30, "s", SceneOp::Join, 61).unwrap();
    assert_eq!(requests(&out), vec![vec![1]]);
}

#[test]
fn the_master_leaving_a_waiting_joiner_hands_the_request_to_the_new_master() {
    use SceneClientState as S;
    let cfg = SceneConfig {
        max_log_actions: 2,
        state_timeout_ticks: 10,
        ..SceneConfig::default()
    };
    let mut sc = overflowed(cfg, true);
    sc.apply(3, 30, "s", SceneOp::Join, 5).unwrap();
    let out = sc.member_left(1);
    assert_eq!(
        client_events(&out),
        vec![
            (10, SceneClientEvent::ClientLeft, S::Master),
            (20, SceneClientEvent::MasterChanged, S::Master),
        ]
    );
    assert_eq!(requests(&out), vec![vec![2]], "the new master is asked");
    let out = sc
        .apply(
            2,
            20,
            "s",
            SceneOp::State {
                tick: 4,
                game_state: b"g".to_vec(),
            },
            6,
        )
        .unwrap();
    assert_eq!(
        syncs(&out),
        vec![(vec![3], 4, vec![(20, S::Master), (30, S::CatchingUp)], 20)]
    );
    // A state older than what the log reaches still leaves a later joiner waiting, and
    // the master is asked again at once.
    for t in 6..=9 {
        sc.apply(2, 20, "s", act(&[t as u8]), t).unwrap();
        sc.finish_tick(t);
    }
    sc.apply(4, 40, "s", SceneOp::Join, 10).unwrap();
    let out = sc
        .apply(
            2,
            20,
            "s",
            SceneOp::State {
                tick: 5,
                game_state: b"old".to_vec(),
            },
            10,
        )
        .unwrap();
    assert!(syncs(&out).is_empty());
    assert_eq!(requests(&out), vec![vec![2]]);
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
                SceneClientState::CatchingUp
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
            (20, SceneClientEvent::Alone, SceneClientState::Master),
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
        // (The lone master's actions take the fast path: the request comes with them.)
        let mut out = sc.apply(1, 10, "s", act(&[t as u8]), t).unwrap();
        out.extend(sc.finish_tick(t));
        requested |= out
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
    // (Alone: the action comes back at once; it still counts against the tick's limit.)
    assert_eq!(
        ticks(&sc.apply(1, 10, "s", act(b"ab"), 1).unwrap()),
        vec![(vec![1], 1, 1)]
    );
    assert_eq!(sc.apply(1, 10, "s", act(b"c"), 1), Err(Refusal::TickFull));
    assert!(ticks(&sc.finish_tick(1)).is_empty());
    assert!(sc.finish_tick(2).is_empty());
    assert!(sc.finish_tick(3).is_empty());
    assert_eq!(
        ticks(&sc.finish_tick(4)),
        vec![(vec![1], 4, 0)],
        "heartbeat"
    );
}
