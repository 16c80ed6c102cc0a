//! The bounded outbound queue of one client.
//!
//! A slow client gets the latest state, not an ever-growing queue: when the queue is full,
//! every queued delta frame is dropped, further deltas are dropped until the next keyframe
//! (which the session asks the room for), and the overflow is reported so the session can
//! disconnect a client that stays behind. Control messages (joined, errors, corrections) are
//! never dropped; they count against the same cap.

use std::collections::VecDeque;

use bytes::Bytes;
use parking_lot::Mutex;
use plaza_node_proto::FrameKind;
use tokio::sync::Notify;

/// One item for the writer.
#[derive(Debug)]
pub enum OutItem {
    /// A binary frame; `droppable` for snapshot deltas and keyframes.
    Frame {
        /// The encoded server envelope.
        bytes: Bytes,
        /// May be dropped under backpressure.
        droppable: bool,
    },
    /// Close the socket with this code and reason, then stop.
    Close(u16, String),
}

/// What a push did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Queued.
    Queued,
    /// Dropped because the queue waits for a keyframe.
    Skipped,
    /// The queue was full: droppable frames were purged; the caller must ask for a keyframe.
    Overflow,
}

#[derive(Debug, Default)]
struct Inner {
    items: VecDeque<OutItem>,
    /// After an overflow, deltas are dropped until a keyframe arrives.
    awaiting_keyframe: bool,
    closed: bool,
}

/// The queue between the session's producers (the node stream, the gateway's own messages) and
/// the socket's write side.
#[derive(Debug)]
pub struct OutQueue {
    cap: usize,
    inner: Mutex<Inner>,
    notify: Notify,
}

impl OutQueue {
    /// A queue of at most `cap` items.
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(2),
            inner: Mutex::new(Inner::default()),
            notify: Notify::new(),
        }
    }

    /// Queues a frame. Deltas and keyframes may be dropped under backpressure; a keyframe ends
    /// an awaiting-keyframe phase.
    pub fn push_frame(&self, bytes: Bytes, kind: FrameKind) -> Pushed {
        let (droppable, keyframe) = (kind.droppable(), kind.is_keyframe());
        let mut g = self.inner.lock();
        if g.closed {
            return Pushed::Skipped;
        }
        if droppable && g.awaiting_keyframe {
            if !keyframe {
                return Pushed::Skipped;
            }
            g.awaiting_keyframe = false;
        }
        let mut res = Pushed::Queued;
        if g.items.len() >= self.cap {
            g.items.retain(|i| {
                !matches!(
                    i,
                    OutItem::Frame {
                        droppable: true,
                        ..
                    }
                )
            });
            if droppable {
                g.awaiting_keyframe = !keyframe;
                res = Pushed::Overflow;
                if !keyframe {
                    drop(g);
                    self.notify.notify_one();
                    return res;
                }
            } else {
                g.awaiting_keyframe = true;
                res = Pushed::Overflow;
            }
        }
        g.items.push_back(OutItem::Frame { bytes, droppable });
        drop(g);
        self.notify.notify_one();
        res
    }

    /// Queues a close; nothing is queued after it.
    pub fn close(&self, code: u16, reason: impl Into<String>) {
        let mut g = self.inner.lock();
        if g.closed {
            return;
        }
        g.closed = true;
        g.items.push_back(OutItem::Close(code, reason.into()));
        drop(g);
        self.notify.notify_one();
    }

    /// Whether a close was queued.
    pub fn is_closed(&self) -> bool {
        self.inner.lock().closed
    }

    /// Takes everything queued now (nothing when the queue is empty).
    pub fn take_all(&self, into: &mut VecDeque<OutItem>) {
        let mut g = self.inner.lock();
        if into.is_empty() {
            // Swap the buffers: neither side allocates once both have grown.
            std::mem::swap(into, &mut g.items);
        } else {
            into.extend(g.items.drain(..));
        }
    }

    /// Takes everything queued, waiting until there is something.
    pub async fn drain(&self, into: &mut Vec<OutItem>) {
        loop {
            {
                let mut g = self.inner.lock();
                if !g.items.is_empty() {
                    into.extend(g.items.drain(..));
                    return;
                }
            }
            self.notify.notified().await;
        }
    }

    /// Items queued now.
    pub fn len(&self) -> usize {
        self.inner.lock().items.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: u8) -> Bytes {
        Bytes::from(vec![n])
    }

    #[test]
    fn overflow_purges_deltas_and_waits_for_a_keyframe() {
        let q = OutQueue::new(4);
        assert_eq!(q.push_frame(frame(0), FrameKind::Control), Pushed::Queued);
        for i in 1..4 {
            assert_eq!(q.push_frame(frame(i), FrameKind::Delta), Pushed::Queued);
        }
        assert_eq!(q.push_frame(frame(9), FrameKind::Delta), Pushed::Overflow);
        assert_eq!(q.len(), 1, "only the control frame is kept");
        assert_eq!(q.push_frame(frame(10), FrameKind::Delta), Pushed::Skipped);
        assert_eq!(q.push_frame(frame(11), FrameKind::Keyframe), Pushed::Queued);
        assert_eq!(q.push_frame(frame(12), FrameKind::Delta), Pushed::Queued);
        assert_eq!(q.len(), 3);
    }

    #[tokio::test]
    async fn drain_returns_items_in_order_and_close_is_last() {
        let q = OutQueue::new(8);
        q.push_frame(frame(1), FrameKind::Keyframe);
        q.close(1001, "bye");
        assert_eq!(q.push_frame(frame(2), FrameKind::Control), Pushed::Skipped);
        let mut v = Vec::new();
        q.drain(&mut v).await;
        assert_eq!(v.len(), 2);
        assert!(matches!(v[1], OutItem::Close(1001, _)));
    }
}
