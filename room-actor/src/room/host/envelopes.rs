//! Server envelopes cut from shared chunks.
//!
//! A room broadcast sends one envelope per member. Encoded one `Vec` each, that was an
//! allocation (and a free on the gateway's side) per frame per client. [`Envelopes`] encodes
//! them one after the other into one buffer and hands each out as a [`Bytes`] slice of it: a
//! chunk holds about one broadcast of a room of 50 (frames are ~80–150 bytes), and once every
//! slice of a chunk is written out, the next envelope reuses it in place (no allocation at all
//! while the sessions keep up). The bytes are prost's, identical to `encode_to_vec`.

use bytes::{Bytes, BytesMut};
use plaza_proto::pb;
use prost::Message as _;

/// Capacity of one shared chunk. A chunk lives while any envelope cut from it is queued, so a
/// slow client's queued frames pin at most one chunk each.
const CHUNK: usize = 4096;

/// The room's envelope encoder (see the module doc).
#[derive(Debug)]
pub(crate) struct Envelopes {
    buf: BytesMut,
}

impl Default for Envelopes {
    fn default() -> Self {
        Self {
            buf: BytesMut::with_capacity(CHUNK),
        }
    }
}

impl Envelopes {
    /// `env`'s prost encoding, as a slice of the current chunk.
    pub(crate) fn encode(&mut self, env: &pb::ServerEnvelope) -> Bytes {
        // Room for it in the chunk: the rest of the chunk, the whole chunk again once it is no
        // longer shared, or a fresh chunk (at least `CHUNK`, the buffer's original capacity).
        self.buf.reserve(env.encoded_len());
        env.encode_raw(&mut self.buf);
        self.buf.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaza_proto::pb::server_envelope;

    fn frame(seq: u32, len: usize) -> pb::ServerEnvelope {
        pb::ServerEnvelope {
            sequence: seq,
            sent_at_ms: 1_700_000_000_000 + u64::from(seq),
            body: Some(server_envelope::Body::SnapshotFrame(pb::SnapshotFrame {
                frame: Bytes::from(vec![seq as u8; len]),
            })),
        }
    }

    #[test]
    fn envelopes_are_prosts_bytes_and_stay_intact_across_chunks() {
        let mut e = Envelopes::default();
        let mut kept = Vec::new();
        // Sizes around and above a chunk: slices of shared chunks, fresh chunks, a big one.
        for seq in 0..400u32 {
            let env = frame(
                seq,
                (seq as usize * 37) % 300 + if seq == 200 { CHUNK * 2 } else { 0 },
            );
            let got = e.encode(&env);
            assert_eq!(got.as_ref(), env.encode_to_vec().as_slice(), "seq {seq}");
            kept.push((got, env));
        }
        // Nothing written later overwrote an earlier envelope.
        for (got, env) in &kept {
            assert_eq!(got.as_ref(), env.encode_to_vec().as_slice());
        }
    }

    #[test]
    fn a_chunk_whose_envelopes_are_gone_is_reused_in_place() {
        let mut e = Envelopes::default();
        let first = e.encode(&frame(0, 80));
        let start = first.as_ptr() as usize;
        let in_chunk = |b: &Bytes| (start..start + CHUNK).contains(&(b.as_ptr() as usize));
        drop(first);
        // Envelopes written out one by one (sessions that keep up) never leave the chunk.
        for seq in 1..1000 {
            let b = e.encode(&frame(seq, 80));
            assert!(in_chunk(&b), "seq {seq}");
        }
        // One envelope still queued keeps its chunk: past the chunk's end comes a fresh one.
        let held = e.encode(&frame(0, 80));
        let moved = (0..100).any(|seq| !in_chunk(&e.encode(&frame(seq, 80))));
        assert!(moved, "a chunk still shared is not written over");
        assert_eq!(held.as_ref(), frame(0, 80).encode_to_vec().as_slice());
    }
}
