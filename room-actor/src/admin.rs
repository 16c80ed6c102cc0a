//! The node's operator calls, as the admin API makes them: one room's view, mute, close and
//! teleport ([`Rooms`] methods that message the room actor, [`crate::room::admin`]), and
//! [`NodeControl`], the node's drain and status for the admin listener.
//!
//! A call names a room that is live on this node; it never activates one ([`Rooms::get`]).

use std::time::Duration;

use plaza_room_core::admin::{AdminRefusal, TeleportTarget};
use ractor::rpc::CallResult;
use ractor::{ActorRef, RpcReplyPort};

pub use crate::NodeControl;
use crate::room::RoomMsg;
pub use crate::room::admin::{AdminCall, CLOSED_MESSAGE, RoomReport};
use crate::supervisor::Rooms;

/// How long a room may take to answer an operator call.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Why an operator call on a room failed.
#[derive(Debug, thiserror::Error)]
pub enum RoomCallError {
    /// The room is not live on this node.
    #[error("room `{0}` is not live on this node")]
    NotFound(String),
    /// The room refused the call (no such member, a bad teleport target).
    #[error(transparent)]
    Refused(#[from] AdminRefusal),
    /// The room did not answer in time.
    #[error("room `{0}` did not answer")]
    Timeout(String),
}

impl RoomCallError {
    /// Stable code for the admin API's `error` field.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "room_not_found",
            Self::Refused(r) => r.code(),
            Self::Timeout(_) => "timeout",
        }
    }
}

impl Rooms {
    async fn call_room<T: Send + 'static>(
        &self,
        room: &str,
        msg: impl FnOnce(RpcReplyPort<T>) -> AdminCall,
    ) -> Result<T, RoomCallError> {
        let actor: ActorRef<RoomMsg> = self
            .get(room)
            .await
            .ok_or_else(|| RoomCallError::NotFound(room.to_owned()))?;
        match actor
            .call(|reply| RoomMsg::Admin(msg(reply)), Some(CALL_TIMEOUT))
            .await
        {
            Ok(CallResult::Success(v)) => Ok(v),
            Ok(CallResult::Timeout) => Err(RoomCallError::Timeout(room.to_owned())),
            // The actor stopped between the lookup and the call.
            Ok(CallResult::SenderError) | Err(_) => Err(RoomCallError::NotFound(room.to_owned())),
        }
    }

    /// The room as the console shows it.
    pub async fn inspect(&self, room: &str) -> Result<RoomReport, RoomCallError> {
        self.call_room(room, AdminCall::Inspect).await
    }

    /// Mutes or unmutes the member `wallet` (see [`plaza_room_core::admin::is_muted_input`]).
    pub async fn mute(&self, room: &str, wallet: &str, muted: bool) -> Result<(), RoomCallError> {
        let wallet = wallet.to_owned();
        self.call_room(room, |reply| AdminCall::Mute {
            wallet,
            muted,
            reply,
        })
        .await?
        .map_err(Into::into)
    }

    /// Closes the room: members are told and detached, presence released, the activation
    /// ends. Answers how many sessions were detached.
    pub async fn close(&self, room: &str) -> Result<usize, RoomCallError> {
        self.call_room(room, AdminCall::Close).await
    }

    /// Teleports the member `wallet`; answers the feet position it leads to.
    pub async fn teleport(
        &self,
        room: &str,
        wallet: &str,
        target: TeleportTarget,
    ) -> Result<[f32; 3], RoomCallError> {
        let wallet = wallet.to_owned();
        self.call_room(room, |reply| AdminCall::Teleport {
            wallet,
            target,
            reply,
        })
        .await?
        .map_err(Into::into)
    }
}
