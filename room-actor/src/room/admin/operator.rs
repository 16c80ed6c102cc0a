//! A moderator's `OperatorAction`, sans I/O: what it does ([`decide`]), how it is answered
//! ([`result_body`]) and audited ([`audit`]). `RoomHost::on_operator` (`room/admin.rs`) carries
//! the step out on the room.

use plaza_proto::pb::{self, server_envelope};

/// What an admitted operator action does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step<S> {
    /// Detach the member's session `S` (`KICKED`) and remove it from the room.
    Kick(S),
    /// Mute (`true`) or unmute the target.
    SetMuted(bool),
    /// Answer first, then close the room.
    Close,
}

/// Decides an `OperatorAction` of a session (`operator`: its attach carries the operator role)
/// on the target, whose session is `member` if it is an attached member. Refusals are the
/// reasons the client reads (`not_operator`, `not_member`, `unknown_op`).
pub(crate) fn decide<S>(
    operator: bool,
    op: pb::OperatorOp,
    member: Option<S>,
) -> Result<Step<S>, &'static str> {
    use pb::OperatorOp as Op;
    if !operator {
        return Err("not_operator");
    }
    match op {
        Op::Kick => member.map(Step::Kick).ok_or("not_member"),
        Op::Mute | Op::Unmute => member
            .map(|_| Step::SetMuted(op == Op::Mute))
            .ok_or("not_member"),
        Op::CloseRoom => Ok(Step::Close),
        Op::Unspecified => Err("unknown_op"),
    }
}

/// The `OperatorResult` answering the action of client sequence `seq`.
pub(crate) fn result_body(
    seq: u32,
    op: pb::OperatorOp,
    target: String,
    outcome: Result<(), &'static str>,
) -> server_envelope::Body {
    server_envelope::Body::OperatorResult(pb::OperatorResult {
        in_reply_to: seq,
        op: op as i32,
        target_wallet: target,
        ok: outcome.is_ok(),
        reason: outcome.err().unwrap_or_default().to_owned(),
    })
}

/// Writes the action, done or refused, to the `plaza::audit` log target.
pub(crate) fn audit(
    room: &str,
    session: u64,
    by: &str,
    op: pb::OperatorOp,
    target: &str,
    outcome: Result<(), &'static str>,
) {
    match outcome {
        Ok(()) => tracing::info!(
            target: "plaza::audit",
            room = %room,
            session,
            wallet = by,
            op = op.as_str_name(),
            target,
            outcome = "done",
            "operator action"
        ),
        Err(reason) => tracing::warn!(
            target: "plaza::audit",
            room = %room,
            session,
            wallet = by,
            op = op.as_str_name(),
            target,
            outcome = "refused",
            reason,
            "operator action"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::OperatorOp as Op;

    const ALL: [Op; 5] = [
        Op::Unspecified,
        Op::Kick,
        Op::Mute,
        Op::Unmute,
        Op::CloseRoom,
    ];

    #[test]
    fn a_session_without_the_operator_role_is_refused_every_action() {
        for op in ALL {
            assert_eq!(decide(false, op, Some(3u64)), Err("not_operator"), "{op:?}");
            assert_eq!(
                decide::<u64>(false, op, None),
                Err("not_operator"),
                "{op:?}"
            );
        }
    }

    #[test]
    fn an_operator_acts_on_members_only() {
        assert_eq!(decide(true, Op::Kick, Some(3u64)), Ok(Step::Kick(3)));
        assert_eq!(decide(true, Op::Mute, Some(3u64)), Ok(Step::SetMuted(true)));
        assert_eq!(
            decide(true, Op::Unmute, Some(3u64)),
            Ok(Step::SetMuted(false))
        );
        for op in [Op::Kick, Op::Mute, Op::Unmute] {
            assert_eq!(decide::<u64>(true, op, None), Err("not_member"), "{op:?}");
        }
    }

    #[test]
    fn closing_needs_no_target_and_an_unknown_op_is_refused() {
        assert_eq!(decide::<u64>(true, Op::CloseRoom, None), Ok(Step::Close));
        assert_eq!(decide(true, Op::CloseRoom, Some(1u64)), Ok(Step::Close));
        assert_eq!(decide(true, Op::Unspecified, Some(1u64)), Err("unknown_op"));
    }

    #[test]
    fn the_result_carries_the_reason_of_a_refusal() {
        let ok = result_body(7, Op::Mute, "w".into(), Ok(()));
        let server_envelope::Body::OperatorResult(r) = ok else {
            panic!("an OperatorResult");
        };
        assert_eq!(
            (r.in_reply_to, r.op, r.target_wallet.as_str()),
            (7, Op::Mute as i32, "w")
        );
        assert!(r.ok && r.reason.is_empty());
        let refused = result_body(8, Op::Kick, "x".into(), Err("not_member"));
        let server_envelope::Body::OperatorResult(r) = refused else {
            panic!("an OperatorResult");
        };
        assert!(!r.ok);
        assert_eq!(r.reason, "not_member");
    }
}
