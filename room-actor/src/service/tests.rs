//! The session's [`RoomUplink`] into a stand-in room that records its mailbox.

use std::time::Duration;

use plaza_node_proto::{AttachRequest, KeyframeNeeded, NodeInbound, node_inbound};
use plaza_proto::pb;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;

use super::{RoomStopped, RoomUplink};
use crate::room::RoomMsg;

/// A room stand-in: hands every message of its mailbox to the test, in order.
struct Recorder;

impl Actor for Recorder {
    type Msg = RoomMsg;
    type State = mpsc::UnboundedSender<RoomMsg>;
    type Arguments = mpsc::UnboundedSender<RoomMsg>;

    async fn pre_start(
        &self,
        _myself: ActorRef<RoomMsg>,
        tx: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle(
        &self,
        _myself: ActorRef<RoomMsg>,
        msg: RoomMsg,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _ = tx.send(msg);
        Ok(())
    }
}

fn envelope(sequence: u32) -> NodeInbound {
    NodeInbound {
        body: Some(node_inbound::Body::Envelope(pb::ClientEnvelope {
            sequence,
            ..Default::default()
        })),
    }
}

fn keyframe() -> NodeInbound {
    NodeInbound {
        body: Some(node_inbound::Body::KeyframeNeeded(KeyframeNeeded {})),
    }
}

/// What the room got, as text, up to the `Tick` the test casts behind the uplink's messages.
async fn mailbox(rx: &mut mpsc::UnboundedReceiver<RoomMsg>) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("the room answers")
            .expect("the room runs");
        got.push(match msg {
            RoomMsg::Input { session, envelope } => {
                format!("input {session} #{}", envelope.sequence)
            }
            RoomMsg::KeyframeNeeded { session } => format!("keyframe {session}"),
            RoomMsg::Detach { session, link_id } => format!("detach {session} link {link_id}"),
            RoomMsg::Tick => return got,
            other => format!("{other:?}"),
        });
    }
}

async fn room() -> (ActorRef<RoomMsg>, mpsc::UnboundedReceiver<RoomMsg>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (room, _) = Actor::spawn(None, Recorder, tx).await.expect("spawn");
    (room, rx)
}

#[tokio::test]
async fn inputs_reach_the_room_in_order_and_the_drop_detaches_once() {
    let (room, mut rx) = room().await;
    let mut up = RoomUplink::new(room.clone(), 7, 42);
    up.send(envelope(1)).expect("sent");
    up.send(keyframe()).expect("sent");
    // What a stream carries that is not for the room is ignored, as the forwarder did.
    let second_attach = NodeInbound {
        body: Some(node_inbound::Body::Attach(AttachRequest::default())),
    };
    up.send(second_attach).expect("ignored");
    up.send(NodeInbound { body: None }).expect("ignored");
    up.send(envelope(2)).expect("sent");
    up.send(envelope(3)).expect("sent");
    drop(up);
    room.cast(RoomMsg::Tick).expect("cast");
    assert_eq!(
        mailbox(&mut rx).await,
        [
            "input 7 #1",
            "keyframe 7",
            "input 7 #2",
            "input 7 #3",
            "detach 7 link 42"
        ]
    );
    room.stop(None);
}

#[tokio::test]
async fn close_detaches_once_and_takes_nothing_more() {
    let (room, mut rx) = room().await;
    let mut up = RoomUplink::new(room.clone(), 9, 3);
    up.send(envelope(1)).expect("sent");
    up.close();
    up.close();
    assert_eq!(up.send(envelope(2)), Err(RoomStopped));
    drop(up);
    room.cast(RoomMsg::Tick).expect("cast");
    assert_eq!(mailbox(&mut rx).await, ["input 9 #1", "detach 9 link 3"]);
    room.stop(None);
}

#[tokio::test]
async fn two_links_of_one_session_detach_each_their_own() {
    // A re-attach (a stall, a resume on the same node) drops the old stream after the new
    // one joined: the room sees the old link's detach, which its `link_id` check ignores.
    let (room, mut rx) = room().await;
    let old = RoomUplink::new(room.clone(), 5, 10);
    let mut new = RoomUplink::new(room.clone(), 5, 11);
    drop(old);
    new.send(envelope(4)).expect("sent");
    drop(new);
    room.cast(RoomMsg::Tick).expect("cast");
    assert_eq!(
        mailbox(&mut rx).await,
        ["detach 5 link 10", "input 5 #4", "detach 5 link 11"]
    );
    room.stop(None);
}

#[tokio::test]
async fn a_stopped_room_refuses_and_is_not_detached_from() {
    let (room, _rx) = room().await;
    let mut up = RoomUplink::new(room.clone(), 1, 1);
    room.stop_and_wait(None, Some(Duration::from_secs(1)))
        .await
        .expect("the room stops");
    assert!(
        up.send(envelope(1)).is_err(),
        "a stopped room takes no input"
    );
    assert_eq!(up.send(keyframe()), Err(RoomStopped));
    assert!(
        !up.open,
        "nothing is sent to a stopped room, the detach included"
    );
}
