//! Roster, profiles, blocks and personal space through the room.

use std::collections::{BTreeMap, BTreeSet};

use plaza_proto::frame::FrameDecoder;
use plaza_proto::quant::Pose;
use proptest::prelude::*;

use crate::consent::ConsentOp;
use crate::events::{EventBody, Refusal};
use crate::people::{BlockOp, RosterEntry};
use crate::test_support::refusals;
use crate::{Input, MoveInput, Outbound, Room, RoomConfig, SessionId};

type Decoders = BTreeMap<SessionId, FrameDecoder>;

/// What one client holds of the roster, built from its roster events only.
#[derive(Default, Debug)]
struct ClientRoster(BTreeMap<u32, RosterEntry>);

impl ClientRoster {
    fn apply(&mut self, body: &EventBody) {
        if let EventBody::Roster {
            full,
            upserts,
            removed,
        } = body
        {
            if *full {
                self.0.clear();
            }
            for id in removed {
                self.0.remove(id);
            }
            for u in upserts {
                self.0.insert(u.entity, u.clone());
            }
        }
    }
}

#[derive(Default)]
struct Clients {
    frames: Decoders,
    rosters: BTreeMap<SessionId, ClientRoster>,
}

impl Clients {
    fn feed(&mut self, out: &[Outbound]) {
        for o in out {
            match o {
                Outbound::Frame { session, bytes, .. } => {
                    self.frames
                        .entry(*session)
                        .or_default()
                        .apply(bytes)
                        .expect("frame applies");
                }
                Outbound::Event(e) => {
                    for s in &e.to {
                        self.rosters.entry(*s).or_default().apply(&e.body);
                    }
                }
                _ => {}
            }
        }
    }

    /// Avatars (kind 0) in `session`'s frames.
    fn avatars(&self, session: SessionId) -> BTreeSet<u32> {
        self.frames
            .get(&session)
            .map(|d| d.entities().filter(|r| r.kind == 0).map(|r| r.id).collect())
            .unwrap_or_default()
    }
}

fn steps(room: &mut Room, now: &mut u64, n: usize, clients: &mut Clients) -> Vec<Outbound> {
    let mut all = Vec::new();
    for _ in 0..n {
        let mut out = Vec::new();
        *now += 20;
        room.advance(crate::test_support::ms(*now), &mut out);
        clients.feed(&out);
        all.extend(out);
    }
    all
}

fn room_of(wallets: &[&str], cfg: RoomConfig) -> (Room, u64, Clients) {
    let mut room = Room::new("r", cfg);
    for (i, w) in wallets.iter().enumerate() {
        room.join_member(i as u64 + 1, (*w).to_owned(), 0);
    }
    let mut clients = Clients::default();
    let mut now = 0;
    steps(&mut room, &mut now, 5, &mut clients);
    (room, now, clients)
}

fn audits(out: &[Outbound]) -> Vec<(String, String)> {
    out.iter()
        .filter_map(|o| match o {
            Outbound::Audit {
                kind, detail_json, ..
            } => Some((kind.clone(), detail_json.clone())),
            _ => None,
        })
        .collect()
}

fn block(seq: u32, op: BlockOp, target_entity: u32, target_wallet: &str) -> Input {
    Input::Block {
        seq,
        op: Some(op),
        target_entity,
        target_wallet: target_wallet.into(),
    }
}

fn profile(seq: u32, version: u64, name: &str) -> Input {
    Input::Profile {
        seq,
        version,
        display_name: name.into(),
    }
}

#[test]
fn every_client_learns_who_the_avatars_in_its_frames_are() {
    let (mut room, mut now, mut clients) = room_of(&["0xa", "0xb", "0xc"], RoomConfig::default());
    for s in 1..=3u64 {
        let held = &clients.rosters[&s].0;
        let ids: BTreeSet<u32> = held.keys().copied().collect();
        assert_eq!(ids, clients.avatars(s), "roster = avatars in frames");
        for (e, entry) in held {
            assert_eq!(
                Some(entry.wallet.as_str()),
                room.identity(*e).map(|i| i.wallet.as_str())
            );
            assert_eq!(entry.profile_version, 0);
        }
    }
    // A profile announcement reaches the others once; equal and lower versions do nothing.
    room.input(1, profile(5, 2, "Ana"));
    let out = steps(&mut room, &mut now, 3, &mut clients);
    assert!(out.contains(&Outbound::ProfileAnnounced {
        session: 1,
        version: 2
    }));
    let a = room.entity_of(1).unwrap();
    for s in [2, 3] {
        let e = &clients.rosters[&s].0[&a];
        assert_eq!((e.display_name.as_str(), e.profile_version), ("Ana", 2));
    }
    let before = room.stats().roster_updates;
    room.input(1, profile(6, 2, "Other"));
    room.input(1, profile(7, 1, "Old"));
    let out = steps(&mut room, &mut now, 5, &mut clients);
    assert!(
        !out.iter()
            .any(|o| matches!(o, Outbound::ProfileAnnounced { .. }))
    );
    assert_eq!(
        room.stats().roster_updates,
        before,
        "no news, no roster update"
    );
    assert_eq!(clients.rosters[&2].0[&a].display_name, "Ana");
    assert_eq!(
        (room.stats().profiles_merged, room.stats().profiles_stale),
        (1, 1)
    );
    // A leaver's entry is removed; a keyframe sends the whole roster again.
    room.leave(3);
    let c = room.entity_of(3).unwrap();
    steps(&mut room, &mut now, 3, &mut clients);
    assert!(!clients.rosters[&2].0.contains_key(&c));
    room.request_keyframe(2);
    let out = steps(&mut room, &mut now, 3, &mut clients);
    let full = out.iter().any(|o| {
        matches!(o, Outbound::Event(e) if e.to == vec![2]
            && matches!(&e.body, EventBody::Roster { full: true, upserts, .. } if upserts.len() == 1))
    });
    assert!(full, "{out:?}");
}

#[test]
fn a_roster_update_comes_before_the_frame_that_shows_the_avatar() {
    let (mut room, mut now, mut clients) = room_of(&["0xa"], RoomConfig::default());
    room.join_member(2, "0xb".into(), 0);
    let out = steps(&mut room, &mut now, 3, &mut clients);
    let b = room.entity_of(2).unwrap();
    let roster_at = out.iter().position(|o| {
        matches!(o, Outbound::Event(e) if e.to == vec![1]
            && matches!(&e.body, EventBody::Roster { upserts, .. } if upserts.iter().any(|u| u.entity == b)))
    });
    let frame_at = out
        .iter()
        .position(|o| matches!(o, Outbound::Frame { session: 1, .. }));
    assert!(roster_at.unwrap() < frame_at.unwrap());
    // Gap-free event numbers across roster updates and other events.
    let seqs: Vec<u64> = out
        .iter()
        .filter_map(|o| match o {
            Outbound::Event(e) => Some(e.room_seq),
            _ => None,
        })
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
}

#[test]
fn a_long_roster_stays_within_its_budget_per_broadcast() {
    let wallets: Vec<String> = (0..20).map(|i| format!("0x{:040}", i)).collect();
    let refs: Vec<&str> = wallets.iter().map(String::as_str).collect();
    let cfg = RoomConfig {
        roster_bytes_per_broadcast: 200,
        ..RoomConfig::default()
    };
    let (mut room, mut now, mut clients) = room_of(&refs, cfg);
    steps(&mut room, &mut now, 20, &mut clients);
    // Each update carries at most 200 bytes of entries (each costs 16 + 42 here: 3 fit).
    let out = {
        room.request_keyframe(1);
        steps(&mut room, &mut now, 3, &mut clients)
    };
    let sizes: Vec<usize> = out
        .iter()
        .filter_map(|o| match o {
            Outbound::Event(e) if e.to == vec![1] => match &e.body {
                EventBody::Roster { upserts, .. } => Some(upserts.len()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(sizes, vec![3]);
    steps(&mut room, &mut now, 20, &mut clients);
    assert_eq!(clients.rosters[&1].0.len(), 19, "the rest followed");
}

#[test]
fn a_block_hides_both_members_from_each_other_and_refuses_their_consents() {
    let (mut room, mut now, mut clients) = room_of(&["0xa", "0xb", "0xc"], RoomConfig::default());
    let (a, b, c) = (
        room.entity_of(1).unwrap(),
        room.entity_of(2).unwrap(),
        room.entity_of(3).unwrap(),
    );
    assert!(clients.avatars(1).contains(&b) && clients.avatars(2).contains(&a));
    room.input(1, block(4, BlockOp::Block, b, ""));
    let out = steps(&mut room, &mut now, 3, &mut clients);
    let au = audits(&out);
    assert_eq!(au.len(), 1);
    assert_eq!(au[0].0, "block.added");
    assert!(au[0].1.contains(r#""blocker":"0xa""#) && au[0].1.contains(r#""blocked":"0xb""#));
    let ack = out.iter().any(|o| {
        matches!(o, Outbound::Event(e) if e.to == vec![1]
            && e.body == EventBody::Block { target_wallet: "0xb".into(), target_entity: b, blocked: true })
    });
    assert!(ack);
    assert!(!clients.avatars(1).contains(&b), "B left A's frames");
    assert!(!clients.avatars(2).contains(&a), "A left B's frames");
    assert!(clients.avatars(1).contains(&c) && clients.avatars(2).contains(&c));
    assert!(!clients.rosters[&1].0.contains_key(&b) && !clients.rosters[&2].0.contains_key(&a));
    assert!(room.blocks("0xa", "0xb") && !room.blocks("0xb", "0xa"));
    // Consent requests either way are refused and audited as refused.
    let req = |seq, target| Input::Consent {
        seq,
        op: Some(ConsentOp::Request),
        kind: "hand_hold".into(),
        target_entity: target,
        consent_id: 0,
    };
    room.input(2, req(9, a));
    room.input(1, req(10, b));
    room.input(3, req(11, a));
    let out = steps(&mut room, &mut now, 1, &mut clients);
    assert_eq!(
        refusals(&out),
        vec![(2, 9, Refusal::Blocked), (1, 10, Refusal::Blocked)]
    );
    assert!(
        audits(&out)
            .iter()
            .filter(|(k, _)| k == "consent.refused")
            .count()
            == 2
    );
    // The frames stay without each other.
    steps(&mut room, &mut now, 20, &mut clients);
    assert!(!clients.avatars(1).contains(&b) && !clients.avatars(2).contains(&a));
    // Unblock (by wallet): back at the next broadcast, audited.
    room.input(1, block(12, BlockOp::Unblock, 0, "0xb"));
    let out = steps(&mut room, &mut now, 3, &mut clients);
    assert_eq!(audits(&out)[0].0, "block.removed");
    assert!(clients.avatars(1).contains(&b) && clients.avatars(2).contains(&a));
    assert!(clients.rosters[&1].0.contains_key(&b));
    assert_eq!(room.stats().block_changes, 2);
}

#[test]
fn bad_blocks_are_refused() {
    let (mut room, mut now, mut clients) = room_of(&["0xa", "0xb"], RoomConfig::default());
    let a = room.entity_of(1).unwrap();
    room.input(1, block(1, BlockOp::Block, a, ""));
    room.input(1, block(2, BlockOp::Block, 999, ""));
    room.input(1, block(3, BlockOp::Block, 0, "0xnobody"));
    room.input(
        1,
        Input::Block {
            seq: 4,
            op: None,
            target_entity: 0,
            target_wallet: "0xb".into(),
        },
    );
    room.input(9, block(5, BlockOp::Block, 0, "0xb"));
    room.input(1, block(6, BlockOp::Block, 0, &"x".repeat(200)));
    // Unblocking someone not blocked: acknowledged, no audit record.
    room.input(1, block(7, BlockOp::Unblock, 0, "0xb"));
    let out = steps(&mut room, &mut now, 1, &mut clients);
    assert_eq!(
        refusals(&out),
        vec![
            (1, 1, Refusal::SelfTarget),
            (1, 2, Refusal::NoSuchTarget),
            (1, 3, Refusal::NoSuchTarget),
            (1, 4, Refusal::UnknownOp),
            (9, 5, Refusal::NotMember),
            (1, 6, Refusal::TooLarge),
        ]
    );
    assert!(audits(&out).is_empty());
}

#[test]
fn personal_space_hides_avatars_inside_it() {
    let (mut room, mut now, mut clients) = room_of(&["0xa", "0xb"], RoomConfig::default());
    let (pa, pb) = (room.pose_of(1).unwrap(), room.pose_of(2).unwrap());
    let b = room.entity_of(2).unwrap();
    let d = ((pa.position[0] - pb.position[0]).powi(2) + (pa.position[2] - pb.position[2]).powi(2))
        .sqrt();
    assert!(d < 3.0, "spawns are close: {d}");
    room.input(
        1,
        Input::PersonalSpace {
            seq: 1,
            radius_m: 100.0,
        },
    );
    room.input(
        2,
        Input::PersonalSpace {
            seq: 2,
            radius_m: f32::NAN,
        },
    );
    let out = steps(&mut room, &mut now, 3, &mut clients);
    assert_eq!(refusals(&out), vec![(2, 2, Refusal::InvalidValue)]);
    assert!(
        !clients.avatars(1).contains(&b),
        "capped at 4 m, still covers B"
    );
    assert!(
        clients.avatars(2).contains(&room.entity_of(1).unwrap()),
        "B has none"
    );
    room.input(
        1,
        Input::PersonalSpace {
            seq: 3,
            radius_m: 0.0,
        },
    );
    steps(&mut room, &mut now, 3, &mut clients);
    assert!(clients.avatars(1).contains(&b), "off again");
}

#[test]
fn blocks_profiles_and_personal_space_survive_save_and_restore() {
    let (mut room, mut now, mut clients) = room_of(&["0xa", "0xb", "0xc"], RoomConfig::default());
    let b = room.entity_of(2).unwrap();
    room.input(1, block(1, BlockOp::Block, b, ""));
    room.input(3, profile(2, 7, "Cy"));
    room.input(
        2,
        Input::PersonalSpace {
            seq: 3,
            radius_m: 2.5,
        },
    );
    steps(&mut room, &mut now, 3, &mut clients);
    let saved = room.save_state();
    assert_eq!(saved.blocks, vec![("0xa".to_owned(), "0xb".to_owned())]);
    let mut next = Room::new("r", RoomConfig::default());
    assert_eq!(next.restore(saved.clone()), 0);
    assert_eq!(next.save_state().blocks, saved.blocks);
    assert_eq!(next.save_state().members, saved.members);
    assert!(next.blocks("0xa", "0xb"));
    let c = next.entity_of(3).unwrap();
    assert_eq!(next.identity(c).unwrap().display_name, "Cy");
    // The restored room hides the blocked pair from the first frame on.
    let mut clients = Clients::default();
    steps(&mut next, &mut now, 3, &mut clients);
    let a = next.entity_of(1).unwrap();
    assert!(!clients.avatars(1).contains(&b) && !clients.avatars(2).contains(&a));
    assert_eq!(clients.rosters[&1].0[&c].display_name, "Cy");
}

fn walk(seq: u32, p: [f32; 3], t: f64) -> Input {
    Input::Move(MoveInput {
        seq,
        pose: Pose {
            position: p,
            velocity: [0.5, 0.0, 0.0],
            movement_kind: 1,
            ..Pose::default()
        },
        timestamp_s: t,
        is_instant: false,
        timestamp_period_s: None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever members block, unblock, join and leave, after each broadcast no member's frames
    /// hold an avatar of a member it blocks or is blocked by, and every client's roster is
    /// exactly the avatars in its frames once the roster has caught up.
    #[test]
    fn blocked_pairs_never_see_each_other(
        ops in proptest::collection::vec((0u8..4, 1u64..=6, 1u64..=6), 1..30),
    ) {
        let wallet = |s: u64| format!("0xw{s}");
        let mut room = Room::new("r", RoomConfig::default());
        for s in 1..=6 {
            room.join_member(s, wallet(s), 0);
        }
        let mut clients = Clients::default();
        let mut now = 0;
        steps(&mut room, &mut now, 3, &mut clients);
        let mut seq = 0;
        for (op, x, y) in ops {
            seq += 1;
            match op {
                0 => room.input(x, block(seq, BlockOp::Block, 0, &wallet(y))),
                1 => room.input(x, block(seq, BlockOp::Unblock, 0, &wallet(y))),
                2 => {
                    if let Some(p) = room.pose_of(x) {
                        let t = f64::from(seq);
                        room.input(x, walk(seq, [p.position[0] + 0.3, 0.0, p.position[2]], t));
                    }
                }
                _ => {
                    if room.entity_of(x).is_some() {
                        room.leave(x);
                    } else {
                        room.join_member(x, wallet(x), 0);
                        clients.frames.remove(&x);
                        clients.rosters.remove(&x);
                    }
                }
            }
            steps(&mut room, &mut now, 3, &mut clients);
            for s in 1..=6u64 {
                let Some(_) = room.entity_of(s) else { continue };
                for o in 1..=6u64 {
                    let Some(oe) = room.entity_of(o) else { continue };
                    if o != s && room.blocks.between(&wallet(s), &wallet(o)) {
                        prop_assert!(!clients.avatars(s).contains(&oe), "{s} sees blocked {o}");
                    }
                }
                let roster: BTreeSet<u32> = clients.rosters[&s].0.keys().copied().collect();
                prop_assert_eq!(roster, clients.avatars(s));
            }
        }
    }
}

#[test]
fn a_block_outlives_a_leave_and_a_rejoin_of_either_member() {
    let (mut room, mut now, mut clients) = room_of(&["0xa", "0xb"], RoomConfig::default());
    let b = room.entity_of(2).unwrap();
    room.input(1, block(1, BlockOp::Block, b, ""));
    steps(&mut room, &mut now, 3, &mut clients);
    // Both leave; they come back as new sessions of the same wallets.
    room.leave(1);
    room.leave(2);
    steps(&mut room, &mut now, 1, &mut clients);
    room.join_member(11, "0xa".into(), 0);
    room.join_member(12, "0xb".into(), 0);
    steps(&mut room, &mut now, 5, &mut clients);
    let (a2, b2) = (room.entity_of(11).unwrap(), room.entity_of(12).unwrap());
    assert!(!clients.avatars(11).contains(&b2) && !clients.avatars(12).contains(&a2));
    // A joiner of another wallet sees both.
    room.join_member(13, "0xc".into(), 0);
    steps(&mut room, &mut now, 5, &mut clients);
    assert!(clients.avatars(13).contains(&a2) && clients.avatars(13).contains(&b2));
}
