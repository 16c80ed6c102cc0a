//! The room actor's side of the operator calls ([`AdminCall`], sent by
//! [`crate::admin`] through the supervisor): the room view, mute, close and teleport. The
//! decisions (who is a member, where a teleport leads, what a mute drops) are the room core's
//! ([`plaza_room_core::admin`]); this module executes them on the actor's state.
//!
//! It also carries out the client protocol's moderator messages (`plaza.v1.OperatorAction`:
//! kick, mute, unmute, close room) of a session whose attach says its identity has the operator
//! role, refuses them (`not_operator`) for anyone else, and writes every one, done or refused,
//! to the `plaza::audit` log target (`RoomHost::on_operator`; the decision, the answer and the
//! audit line are `admin/operator.rs`, sans I/O).

use std::collections::BTreeMap;

use plaza_directory::Epoch;
use plaza_node_proto as node;
use plaza_node_proto::FrameKind;
use plaza_proto::pb;
use plaza_room_core::admin::{
    AdminRefusal, Identity, Moderation, RateWindow, RoomView, TeleportTarget, TickWindow,
    member_session, resolve_teleport, room_view,
};
use plaza_room_core::{Input, SessionId};
use ractor::RpcReplyPort;

use super::host::RoomHost;
use operator::Step;

mod operator;

/// The message every member of a closed room reads (with `REJECTED`).
pub const CLOSED_MESSAGE: &str = "room closed by an operator";

/// The message a kicked member's session is detached with (`KICKED`).
pub const KICKED_MESSAGE: &str = "kicked by an operator";

/// An operator call on one room.
#[derive(Debug)]
pub enum AdminCall {
    /// The room as the console shows it.
    Inspect(RpcReplyPort<RoomReport>),
    /// Mute (`true`) or unmute a member, by wallet.
    Mute {
        /// The member.
        wallet: String,
        /// Mute or unmute.
        muted: bool,
        /// Answer.
        reply: RpcReplyPort<Result<(), AdminRefusal>>,
    },
    /// Close the room: every member is told ([`CLOSED_MESSAGE`]) and detached, presence is
    /// released and the activation ends. Answers how many sessions were detached.
    Close(RpcReplyPort<usize>),
    /// Move a member's avatar (an instant move, not interpolated). Answers where it leads.
    Teleport {
        /// The member.
        wallet: String,
        /// Where to.
        target: TeleportTarget,
        /// Answer.
        reply: RpcReplyPort<Result<[f32; 3], AdminRefusal>>,
    },
}

/// What [`AdminCall::Inspect`] answers.
#[derive(Clone, Debug)]
pub struct RoomReport {
    /// The room core's view (members, props, consents, tick p99, bytes per client).
    pub view: RoomView,
    /// The epoch this activation commits under.
    pub epoch: Epoch,
    /// The node it runs on.
    pub node: String,
    /// Attached sessions (members and joiners).
    pub sessions: usize,
    /// Handed off to this activation and not back yet.
    pub awaited: usize,
    /// Handed off (draining): nothing changes any more.
    pub frozen: bool,
    /// Inputs dropped because their sender was muted.
    pub muted_dropped: u64,
}

/// The actor's operator state: mutes, recent tick durations and frame bytes.
#[derive(Debug, Default)]
pub(crate) struct AdminSide {
    pub(crate) moderation: Moderation,
    pub(crate) ticks: TickWindow,
    pub(crate) bytes: RateWindow,
}

impl RoomHost {
    /// Feeds a decoded input to the core unless the sender's mute drops it.
    pub(crate) fn admit_input(&mut self, session: SessionId, input: Input) {
        let wallet = self.links.get(&session).map(|l| l.wallet.as_str());
        if let Some(w) = wallet
            && !self.admin.moderation.admits(w, &input)
        {
            return;
        }
        self.room.input(session, input);
    }

    pub(crate) fn on_admin(&mut self, call: AdminCall) {
        match call {
            AdminCall::Inspect(reply) => {
                let _ = reply.send(self.report());
            }
            AdminCall::Mute {
                wallet,
                muted,
                reply,
            } => {
                let res = self.member(&wallet).and_then(|_| {
                    if self.admin.moderation.set_muted(&wallet, muted) {
                        Ok(())
                    } else {
                        Err(AdminRefusal::NotMember(wallet.clone()))
                    }
                });
                if res.is_ok() {
                    tracing::info!(room = %self.room_id, wallet, muted, "operator mute");
                }
                let _ = reply.send(res);
            }
            AdminCall::Close(reply) => {
                let n = self.close();
                let _ = reply.send(n);
                self.request_stop("closed by an operator");
            }
            AdminCall::Teleport {
                wallet,
                target,
                reply,
            } => {
                let res = self.teleport(&wallet, &target);
                let _ = reply.send(res);
            }
        }
    }

    /// A moderator's `OperatorAction` from `session` (client sequence `seq`): carried out only
    /// when the session's attach carries the operator role, answered with an `OperatorResult`
    /// and audited either way. A kick detaches the target (`KICKED`: its gateway closes it with
    /// 4010 and keeps no resume entry) and removes it from the room at once; a close answers
    /// first, then closes the room as the admin API does.
    pub(crate) fn on_operator(
        &mut self,
        session: SessionId,
        seq: u32,
        op: pb::OperatorOp,
        target: String,
    ) {
        let Some(link) = self.links.get(&session) else {
            return;
        };
        let (by, operator) = (link.wallet.clone(), link.operator);
        let step = operator::decide(operator, op, self.member(&target).ok());
        let close = matches!(step, Ok(Step::Close));
        let outcome = step.as_ref().map(|_| ()).map_err(|r| *r);
        let outcome = match step {
            Ok(Step::Kick(victim)) => {
                self.kick(victim);
                outcome
            }
            Ok(Step::SetMuted(muted)) if !self.admin.moderation.set_muted(&target, muted) => {
                Err("not_member")
            }
            _ => outcome,
        };
        operator::audit(&self.room_id, session, &by, op, &target, outcome);
        self.send_envelope(
            session,
            operator::result_body(seq, op, target, outcome),
            FrameKind::Control,
        );
        if close {
            self.close();
            self.request_stop("closed by an operator");
        }
    }

    /// Detaches the member `victim` (`KICKED`) and removes it from the room and presence now,
    /// without waiting for its stream's end.
    fn kick(&mut self, victim: SessionId) {
        let Some(link) = self.links.remove(&victim) else {
            return;
        };
        let _ = link.tx.offer(super::detach_message(
            node::DetachReason::Kicked,
            KICKED_MESSAGE,
        ));
        self.metrics.sessions.dec();
        self.room.leave(victim);
        self.release_presence(&link);
    }

    /// The session of the attached member `wallet`.
    fn member(&self, wallet: &str) -> Result<SessionId, AdminRefusal> {
        let joined = self
            .links
            .iter()
            .filter(|(_, l)| l.entity.is_some())
            .map(|(s, l)| (*s, l.wallet.as_str()));
        member_session(joined, wallet)
    }

    fn report(&self) -> RoomReport {
        let who: BTreeMap<SessionId, Identity> = self
            .links
            .iter()
            .map(|(s, l)| (*s, l.wallet.clone()))
            .chain(self.awaited.iter().map(|(s, a)| (*s, a.wallet.clone())))
            .map(|(s, wallet)| {
                // The display name is the core's (the member's profile announcement).
                let display_name = self
                    .room
                    .entity_of(s)
                    .and_then(|e| self.room.identity(e))
                    .map(|i| i.display_name.clone())
                    .filter(|n| !n.is_empty());
                (
                    s,
                    Identity {
                        wallet,
                        display_name,
                    },
                )
            })
            .collect();
        RoomReport {
            view: room_view(
                &self.room.save_state(),
                &who,
                &self.admin.moderation,
                &self.admin.ticks,
                &self.admin.bytes,
            ),
            epoch: self.lease.epoch(),
            node: self.node_id.clone(),
            sessions: self.links.len(),
            awaited: self.awaited.len(),
            frozen: self.frozen,
            muted_dropped: self.admin.moderation.dropped,
        }
    }

    /// Tells every attached session the room closed and detaches it; the actor stops next
    /// (its `post_stop` releases the presence of every member and gives the lease up).
    fn close(&mut self) -> usize {
        let n = self.links.len();
        for link in self.links.values() {
            let _ = link.tx.offer(super::detach_message(
                node::DetachReason::Rejected,
                CLOSED_MESSAGE,
            ));
        }
        // Held-off members will not come back to this activation.
        self.awaited.clear();
        self.frozen = true;
        tracing::info!(room = %self.room_id, sessions = n, "room closed by an operator");
        n
    }

    fn teleport(
        &mut self,
        wallet: &str,
        target: &TeleportTarget,
    ) -> Result<[f32; 3], AdminRefusal> {
        if self.frozen {
            // Its state is already handed off: a move now would be lost (and told to nobody
            // who keeps it).
            return Err(AdminRefusal::Frozen);
        }
        let session = self.member(wallet)?;
        let to = resolve_teleport(&self.room.config().definition, target)?;
        // The core's operator teleport: the instant bit on the next frame record and a
        // `Teleported` event (cause OPERATOR) to the mover and those who see it.
        let mut out = Vec::new();
        let to = self
            .room
            .teleport(session, to, &mut out)
            .map_err(|r| match r {
                plaza_room_core::events::Refusal::NotMember => {
                    AdminRefusal::NotMember(wallet.into())
                }
                _ => AdminRefusal::OutOfBounds,
            })?;
        for o in out {
            self.deliver(o);
        }
        tracing::info!(room = %self.room_id, wallet, ?to, "operator teleport");
        Ok(to)
    }
}
