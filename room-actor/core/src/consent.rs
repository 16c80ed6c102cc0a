//! The consent state machine for actions one member asks to do with another.
//!
//! Kinds: [`ConsentKind`] (`asana_lock`, `hand_hold`, `follow`, `adjust`). States and the
//! transitions allowed (anything else is refused with a typed [`Refusal`]):
//!
//! | from        | op / cause                     | who            | to          |
//! |-------------|--------------------------------|----------------|-------------|
//! | —           | request                        | requester      | `requested` |
//! | `requested` | consent                        | target only    | `consented` |
//! | `requested` | decline                        | target only    | `declined`  |
//! | `requested` | cancel                         | requester only | `cancelled` |
//! | `consented` | activate                       | requester only | `active`    |
//! | `consented` | cancel                         | requester only | `cancelled` |
//! | `consented` | release                        | either party   | `released`  |
//! | `active`    | release                        | either party   | `released`  |
//! | `requested` | request timeout                | (the room)     | `expired`   |
//! | `consented` | consent timeout (not activated)| (the room)     | `expired`   |
//! | `requested`, `consented` | a party leaves    | (the room)     | `cancelled` |
//! | `active`    | a party leaves                 | (the room)     | `released`  |
//!
//! `declined`, `cancelled`, `expired` and `released` are terminal: the consent is forgotten
//! after its final transition, and later ops on its id are refused with `NoSuchConsent`.
//!
//! This module keeps the open consents and says what happened; it does not write the audit log
//! or send events (the room turns every [`Transition`] and every refusal into one audit record
//! followed by the events, see `Outbound`).

use std::collections::BTreeMap;

use crate::SessionId;
use crate::events::Refusal;

/// Every consent state's stable name, in table order (the load tool matches these).
pub const CONSENT_STATES: [&str; 7] = [
    "requested",
    "consented",
    "active",
    "released",
    "declined",
    "cancelled",
    "expired",
];

/// Every consent kind's stable name.
pub const CONSENT_KINDS: [&str; 4] = ["asana_lock", "hand_hold", "follow", "adjust"];

/// Most open consents one member may have requested at once.
pub const DEFAULT_MAX_OPEN_PER_REQUESTER: usize = 8;

/// What is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConsentKind {
    /// An instructor locks a student into an asana.
    AsanaLock,
    /// Holding hands.
    HandHold,
    /// Following the other avatar.
    Follow,
    /// A physical adjustment.
    Adjust,
}

impl ConsentKind {
    /// All kinds, in [`CONSENT_KINDS`] order.
    pub const ALL: [Self; 4] = [Self::AsanaLock, Self::HandHold, Self::Follow, Self::Adjust];

    /// The stable name.
    pub fn as_str(self) -> &'static str {
        CONSENT_KINDS[self as usize]
    }

    /// Parses a stable name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A consent's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConsentState {
    /// Asked, not yet answered.
    Requested,
    /// The target agreed; the requester may activate.
    Consented,
    /// In effect: the seed's (004) **Locked** state, named `active` on the wire (the mapping
    /// is documented in docs/PROTOCOL.md §6).
    Active,
    /// Ended by a party (or a party left while active).
    Released,
    /// The target said no.
    Declined,
    /// The requester withdrew (or a party left before activation).
    Cancelled,
    /// Not answered or not activated in time.
    Expired,
}

impl ConsentState {
    /// All states, in [`CONSENT_STATES`] order.
    pub const ALL: [Self; 7] = [
        Self::Requested,
        Self::Consented,
        Self::Active,
        Self::Released,
        Self::Declined,
        Self::Cancelled,
        Self::Expired,
    ];

    /// The stable name.
    pub fn as_str(self) -> &'static str {
        CONSENT_STATES[self as usize]
    }

    /// Whether no transition leaves this state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Released | Self::Declined | Self::Cancelled | Self::Expired
        )
    }

    /// Whether the table allows `self -> to` at all (by any op or cause).
    pub fn allows(self, to: Self) -> bool {
        use ConsentState as S;
        matches!(
            (self, to),
            (
                S::Requested,
                S::Consented | S::Declined | S::Cancelled | S::Expired
            ) | (
                S::Consented,
                S::Active | S::Cancelled | S::Released | S::Expired
            ) | (S::Active, S::Released)
        )
    }
}

/// What a member does to a consent (`plaza.v1.ConsentOp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConsentOp {
    /// Ask.
    Request,
    /// Agree (target).
    Consent,
    /// Refuse (target).
    Decline,
    /// Start (requester).
    Activate,
    /// End (either party).
    Release,
    /// Withdraw (requester).
    Cancel,
}

impl ConsentOp {
    /// The stable name (audit records).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Consent => "consent",
            Self::Decline => "decline",
            Self::Activate => "activate",
            Self::Release => "release",
            Self::Cancel => "cancel",
        }
    }
}

/// A party: session and avatar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Party {
    /// Session.
    pub session: SessionId,
    /// Avatar entity.
    pub entity: u32,
}

/// One open consent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Consent {
    /// Server-issued id.
    pub id: u64,
    /// What is asked.
    pub kind: ConsentKind,
    /// Who asked.
    pub requester: Party,
    /// Who is asked.
    pub target: Party,
    /// Current state (never terminal while stored).
    pub state: ConsentState,
    /// When it entered its current state (room time, ms).
    pub since_ms: u64,
}

/// Why a transition happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// A member's op.
    Op(ConsentOp),
    /// A timeout.
    Timeout,
    /// A party left the room.
    Left,
}

impl Cause {
    /// The stable name (audit records).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Op(op) => op.as_str(),
            Self::Timeout => "timeout",
            Self::Left => "left",
        }
    }
}

/// One state change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The consent after the change.
    pub consent: Consent,
    /// The state before (`None` for a new request).
    pub from: Option<ConsentState>,
    /// Why.
    pub cause: Cause,
    /// Who caused it (`None` for timeouts).
    pub actor: Option<Party>,
}

/// A member's consent op, decoded from `plaza.v1.ConsentAction`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsentRequest {
    /// The op (`None` for an unspecified or unknown op).
    pub op: Option<ConsentOp>,
    /// For request: the kind's name.
    pub kind: String,
    /// For request: the target.
    pub target: Option<Party>,
    /// For every other op: the consent id.
    pub consent_id: u64,
}

/// Timeouts and limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsentConfig {
    /// A request not answered within this expires.
    pub request_timeout_ms: u64,
    /// A consent not activated within this expires.
    pub consent_timeout_ms: u64,
    /// Most open consents one member may have requested.
    pub max_open_per_requester: usize,
}

impl Default for ConsentConfig {
    fn default() -> Self {
        Self {
            request_timeout_ms: 30_000,
            consent_timeout_ms: 60_000,
            max_open_per_requester: DEFAULT_MAX_OPEN_PER_REQUESTER,
        }
    }
}

/// The room's open consents.
#[derive(Clone, Debug, Default)]
pub struct ConsentBook {
    cfg: ConsentConfig,
    next_id: u64,
    open: BTreeMap<u64, Consent>,
}

impl ConsentBook {
    /// An empty book.
    pub fn new(cfg: ConsentConfig) -> Self {
        Self {
            cfg,
            next_id: 0,
            open: BTreeMap::new(),
        }
    }

    /// Open consents, by id.
    pub fn open(&self) -> &BTreeMap<u64, Consent> {
        &self.open
    }

    /// The last id issued (restore carries it so ids are never reused).
    pub fn last_id(&self) -> u64 {
        self.next_id
    }

    /// Replace the state (restore).
    pub fn restore(&mut self, last_id: u64, open: impl IntoIterator<Item = Consent>) {
        self.next_id = last_id;
        self.open = open
            .into_iter()
            .filter(|c| !c.state.is_terminal())
            .map(|c| (c.id, c))
            .collect();
    }

    /// Apply one op by `actor` at `now_ms`.
    pub fn apply(
        &mut self,
        actor: Party,
        req: &ConsentRequest,
        now_ms: u64,
    ) -> Result<Transition, Refusal> {
        let op = req.op.ok_or(Refusal::UnknownOp)?;
        if op == ConsentOp::Request {
            let kind = ConsentKind::parse(&req.kind).ok_or(Refusal::UnknownKind)?;
            let target = req.target.ok_or(Refusal::NoSuchTarget)?;
            if target.session == actor.session {
                return Err(Refusal::SelfTarget);
            }
            let mut mine = 0;
            for c in self.open.values() {
                if c.requester.session == actor.session {
                    mine += 1;
                    if c.target.session == target.session && c.kind == kind {
                        return Err(Refusal::Duplicate);
                    }
                }
            }
            if mine >= self.cfg.max_open_per_requester {
                return Err(Refusal::TooMany);
            }
            self.next_id += 1;
            let consent = Consent {
                id: self.next_id,
                kind,
                requester: actor,
                target,
                state: ConsentState::Requested,
                since_ms: now_ms,
            };
            self.open.insert(consent.id, consent);
            return Ok(Transition {
                consent,
                from: None,
                cause: Cause::Op(op),
                actor: Some(actor),
            });
        }
        let c = self
            .open
            .get(&req.consent_id)
            .copied()
            .ok_or(Refusal::NoSuchConsent)?;
        let is_req = c.requester.session == actor.session;
        let is_tgt = c.target.session == actor.session;
        use ConsentState as S;
        let to = match op {
            ConsentOp::Request => return Err(Refusal::UnknownOp),
            ConsentOp::Consent | ConsentOp::Decline => {
                if !is_tgt {
                    return Err(Refusal::NotTarget);
                }
                if c.state != S::Requested {
                    return Err(Refusal::WrongState);
                }
                if op == ConsentOp::Consent {
                    S::Consented
                } else {
                    S::Declined
                }
            }
            ConsentOp::Activate => {
                if !is_req {
                    return Err(Refusal::NotRequester);
                }
                if c.state != S::Consented {
                    return Err(Refusal::WrongState);
                }
                S::Active
            }
            ConsentOp::Cancel => {
                if !is_req {
                    return Err(Refusal::NotRequester);
                }
                if !matches!(c.state, S::Requested | S::Consented) {
                    return Err(Refusal::WrongState);
                }
                S::Cancelled
            }
            ConsentOp::Release => {
                if !is_req && !is_tgt {
                    return Err(Refusal::NotParty);
                }
                if !matches!(c.state, S::Consented | S::Active) {
                    return Err(Refusal::WrongState);
                }
                S::Released
            }
        };
        Ok(self.transition(c.id, to, Cause::Op(op), Some(actor), now_ms))
    }

    fn transition(
        &mut self,
        id: u64,
        to: ConsentState,
        cause: Cause,
        actor: Option<Party>,
        now_ms: u64,
    ) -> Transition {
        let mut consent = self.open[&id];
        let from = consent.state;
        debug_assert!(from.allows(to), "{from:?} -> {to:?}");
        consent.state = to;
        consent.since_ms = now_ms;
        if to.is_terminal() {
            self.open.remove(&id);
        } else {
            self.open.insert(id, consent);
        }
        Transition {
            consent,
            from: Some(from),
            cause,
            actor,
        }
    }

    /// Expire what timed out by `now_ms`, in id order.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Transition> {
        let due: Vec<u64> = self
            .open
            .values()
            .filter(|c| {
                let limit = match c.state {
                    ConsentState::Requested => self.cfg.request_timeout_ms,
                    ConsentState::Consented => self.cfg.consent_timeout_ms,
                    _ => return false,
                };
                now_ms.saturating_sub(c.since_ms) >= limit
            })
            .map(|c| c.id)
            .collect();
        due.into_iter()
            .map(|id| self.transition(id, ConsentState::Expired, Cause::Timeout, None, now_ms))
            .collect()
    }

    /// End every consent `session` is a party of (it left), in id order: cancelled before
    /// activation, released after.
    pub fn party_left(&mut self, session: SessionId, now_ms: u64) -> Vec<Transition> {
        let theirs: Vec<(u64, ConsentState, Party)> = self
            .open
            .values()
            .filter_map(|c| {
                if c.requester.session == session {
                    Some((c.id, c.state, c.requester))
                } else if c.target.session == session {
                    Some((c.id, c.state, c.target))
                } else {
                    None
                }
            })
            .collect();
        theirs
            .into_iter()
            .map(|(id, state, who)| {
                let to = if state == ConsentState::Active {
                    ConsentState::Released
                } else {
                    ConsentState::Cancelled
                };
                self.transition(id, to, Cause::Left, Some(who), now_ms)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Party = Party {
        session: 1,
        entity: 1,
    };
    const B: Party = Party {
        session: 2,
        entity: 2,
    };
    const C: Party = Party {
        session: 3,
        entity: 3,
    };

    fn request(target: Party, kind: &str) -> ConsentRequest {
        ConsentRequest {
            op: Some(ConsentOp::Request),
            kind: kind.into(),
            target: Some(target),
            consent_id: 0,
        }
    }

    fn op(op: ConsentOp, id: u64) -> ConsentRequest {
        ConsentRequest {
            op: Some(op),
            kind: String::new(),
            target: None,
            consent_id: id,
        }
    }

    #[test]
    fn full_cycle_request_consent_activate_release() {
        let mut b = ConsentBook::new(ConsentConfig::default());
        let t = b.apply(A, &request(B, "asana_lock"), 0).unwrap();
        assert_eq!((t.from, t.consent.state), (None, ConsentState::Requested));
        let id = t.consent.id;
        assert_eq!(
            b.apply(C, &op(ConsentOp::Consent, id), 1),
            Err(Refusal::NotTarget),
            "consent by anyone but the target is rejected"
        );
        assert_eq!(
            b.apply(A, &op(ConsentOp::Consent, id), 1),
            Err(Refusal::NotTarget),
            "not even the requester"
        );
        assert_eq!(
            b.apply(A, &op(ConsentOp::Activate, id), 1),
            Err(Refusal::WrongState)
        );
        let t = b.apply(B, &op(ConsentOp::Consent, id), 2).unwrap();
        assert_eq!(t.consent.state, ConsentState::Consented);
        assert_eq!(
            b.apply(B, &op(ConsentOp::Activate, id), 3),
            Err(Refusal::NotRequester)
        );
        let t = b.apply(A, &op(ConsentOp::Activate, id), 3).unwrap();
        assert_eq!(t.consent.state, ConsentState::Active);
        assert_eq!(
            b.apply(C, &op(ConsentOp::Release, id), 4),
            Err(Refusal::NotParty)
        );
        let t = b.apply(B, &op(ConsentOp::Release, id), 4).unwrap();
        assert_eq!(
            (t.from, t.consent.state),
            (Some(ConsentState::Active), ConsentState::Released)
        );
        assert_eq!(
            b.apply(A, &op(ConsentOp::Release, id), 5),
            Err(Refusal::NoSuchConsent),
            "terminal consents are gone"
        );
    }

    #[test]
    fn decline_cancel_and_refusals() {
        let mut b = ConsentBook::new(ConsentConfig::default());
        let id = b.apply(A, &request(B, "hand_hold"), 0).unwrap().consent.id;
        assert_eq!(
            b.apply(A, &request(B, "hand_hold"), 0),
            Err(Refusal::Duplicate)
        );
        assert_eq!(
            b.apply(A, &request(A, "follow"), 0),
            Err(Refusal::SelfTarget)
        );
        assert_eq!(b.apply(A, &request(B, "hug"), 0), Err(Refusal::UnknownKind));
        let mut none = request(B, "follow");
        none.target = None;
        assert_eq!(b.apply(A, &none, 0), Err(Refusal::NoSuchTarget));
        let mut unknown = op(ConsentOp::Consent, id);
        unknown.op = None;
        assert_eq!(b.apply(B, &unknown, 0), Err(Refusal::UnknownOp));
        assert_eq!(
            b.apply(B, &op(ConsentOp::Decline, id), 1)
                .unwrap()
                .consent
                .state,
            ConsentState::Declined
        );
        let id = b.apply(A, &request(B, "follow"), 2).unwrap().consent.id;
        assert_eq!(
            b.apply(B, &op(ConsentOp::Cancel, id), 3),
            Err(Refusal::NotRequester)
        );
        assert_eq!(
            b.apply(A, &op(ConsentOp::Release, id), 3),
            Err(Refusal::WrongState),
            "nothing to release before consent"
        );
        assert_eq!(
            b.apply(A, &op(ConsentOp::Cancel, id), 3)
                .unwrap()
                .consent
                .state,
            ConsentState::Cancelled
        );
        assert!(b.open().is_empty());
    }

    #[test]
    fn timeouts_expire_requests_and_unused_consents() {
        let cfg = ConsentConfig {
            request_timeout_ms: 100,
            consent_timeout_ms: 200,
            ..ConsentConfig::default()
        };
        let mut b = ConsentBook::new(cfg);
        let r = b.apply(A, &request(B, "adjust"), 0).unwrap().consent.id;
        let c = b.apply(A, &request(C, "adjust"), 0).unwrap().consent.id;
        b.apply(C, &op(ConsentOp::Consent, c), 50).unwrap();
        assert!(b.expire(99).is_empty());
        let e = b.expire(100);
        assert_eq!(e.len(), 1);
        assert_eq!(
            (e[0].consent.id, e[0].consent.state),
            (r, ConsentState::Expired)
        );
        assert!(b.expire(249).is_empty());
        let e = b.expire(250);
        assert_eq!(
            (e[0].consent.id, e[0].from),
            (c, Some(ConsentState::Consented))
        );
        assert!(b.open().is_empty());
    }

    #[test]
    fn leaving_cancels_or_releases() {
        let mut b = ConsentBook::new(ConsentConfig::default());
        let x = b.apply(A, &request(B, "follow"), 0).unwrap().consent.id;
        let y = b.apply(C, &request(A, "hand_hold"), 0).unwrap().consent.id;
        b.apply(A, &op(ConsentOp::Consent, y), 0).unwrap();
        b.apply(C, &op(ConsentOp::Activate, y), 0).unwrap();
        let z = b.apply(B, &request(C, "follow"), 0).unwrap().consent.id;
        let t = b.party_left(1, 5);
        let got: Vec<_> = t.iter().map(|t| (t.consent.id, t.consent.state)).collect();
        assert_eq!(
            got,
            vec![(x, ConsentState::Cancelled), (y, ConsentState::Released)]
        );
        assert_eq!(b.open().keys().copied().collect::<Vec<_>>(), vec![z]);
    }

    #[test]
    fn the_table_is_what_allows_says() {
        for from in ConsentState::ALL {
            for to in ConsentState::ALL {
                if from.is_terminal() {
                    assert!(!from.allows(to));
                }
            }
        }
        assert_eq!(ConsentState::Expired.as_str(), "expired");
        assert_eq!(
            ConsentKind::parse("asana_lock"),
            Some(ConsentKind::AsanaLock)
        );
    }
}
