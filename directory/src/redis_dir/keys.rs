//! The key of every record. A room's records share the hash tag `{r:ROOM}`, a wallet's
//! `{w:WALLET}`; the node registry, the epoch source and the sweep index are one slot each
//! (see the key list in [`super`]).

use super::RedisDirectory;

/// The keys of one room, all in the room's slot (the order the room scripts expect).
pub(super) struct RoomKeys(pub(super) [Vec<u8>; 8]);

impl RedisDirectory {
    pub(super) fn room_keys(&self, room: &str) -> RoomKeys {
        let base = format!("{}{{r:{room}}}", self.prefix);
        let k = |s: &str| format!("{base}{s}").into_bytes();
        RoomKeys([
            k("place"),
            k("last"),
            k("act"),
            k("mem"),
            k("ents"),
            k("pend"),
            k("audit"),
            k("handoff"),
        ])
    }
    pub(super) fn wallet_key(&self, wallet: &str) -> Vec<u8> {
        format!("{}{{w:{wallet}}}", self.prefix).into_bytes()
    }
    pub(super) fn nodes_key(&self) -> Vec<u8> {
        format!("{}{{n}}nodes", self.prefix).into_bytes()
    }
    pub(super) fn epoch_keys(&self) -> [Vec<u8>; 2] {
        [
            format!("{}{{e}}epoch", self.prefix).into_bytes(),
            format!("{}{{e}}mark", self.prefix).into_bytes(),
        ]
    }
    pub(super) fn due_key(&self) -> Vec<u8> {
        format!("{}{{i}}due", self.prefix).into_bytes()
    }
    pub(super) fn resume_key(&self, token: &str) -> Vec<u8> {
        format!("{}resume:{token}", self.prefix).into_bytes()
    }
    pub(super) fn holder_key(&self, holder: &str) -> Vec<u8> {
        format!("{}{{h:{holder}}}resume", self.prefix).into_bytes()
    }
}

pub(super) fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The index item of a room.
pub(super) fn room_item(room: &str) -> Vec<u8> {
    format!("r:{room}").into_bytes()
}
