//! [`Rooms`]: the cloneable handle to the room supervisor (calls with their timeouts).

use std::time::Duration;

use ractor::{Actor, ActorRef};

use super::{RoomsArgs, RoomsError, RoomsMsg, RoomsSupervisor};
use crate::room::RoomMsg;

/// A handle to the room supervisor.
#[derive(Clone, Debug)]
pub struct Rooms {
    actor: ActorRef<RoomsMsg>,
}

impl Rooms {
    /// Starts the supervisor.
    pub async fn start(args: RoomsArgs) -> Result<(Self, tokio::task::JoinHandle<()>), RoomsError> {
        let (actor, join) = Actor::spawn(None, RoomsSupervisor, args)
            .await
            .map_err(|e| RoomsError::Spawn(e.to_string()))?;
        Ok((Self { actor }, join))
    }

    /// The actor of `room`, spawned (and claimed in the directory) if it has none.
    pub async fn get_or_spawn(&self, room: &str) -> Result<ActorRef<RoomMsg>, RoomsError> {
        let room = room.to_owned();
        match self
            .actor
            .call(
                |reply| RoomsMsg::GetOrSpawn { room, reply },
                Some(Duration::from_secs(10)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            Ok(_) => Err(RoomsError::Spawn("supervisor timed out".into())),
            Err(e) => Err(RoomsError::Spawn(e.to_string())),
        }
    }

    /// The actor of `room` if it is live on this node (an operator call never activates one).
    pub async fn get(&self, room: &str) -> Option<ActorRef<RoomMsg>> {
        let room = room.to_owned();
        match self
            .actor
            .call(
                |reply| RoomsMsg::Get { room, reply },
                Some(Duration::from_secs(5)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            _ => None,
        }
    }

    /// The live rooms.
    pub async fn list(&self) -> Vec<String> {
        match self
            .actor
            .call(
                |reply| RoomsMsg::List { reply },
                Some(Duration::from_secs(5)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(v)) => v,
            _ => Vec::new(),
        }
    }

    /// Drains: no new rooms; every room's handoff state is stored and the room stopped.
    /// Returns how many rooms were handed off.
    pub async fn drain(&self) -> usize {
        match self
            .actor
            .call(
                |reply| RoomsMsg::Drain { reply },
                Some(Duration::from_secs(30)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(n)) => n,
            _ => 0,
        }
    }

    /// Take no new rooms.
    pub fn set_draining(&self, draining: bool) {
        let _ = self.actor.cast(RoomsMsg::SetDraining(draining));
    }

    /// Stops the supervisor and every room (children are stopped with it).
    pub fn stop(&self) {
        self.actor.stop_children(Some("node stopping".into()));
        self.actor.stop(Some("node stopping".into()));
    }
}
