//! The Lua scripts (`directory/src/redis/scripts/*.lua`, each behind the shared prelude; the
//! room scripts behind the room prelude too) and how they are invoked: EVALSHA with automatic
//! reload after a Redis restart, on the keys of one slot.

use redis::{Script, Value};

use super::RedisDirectory;
use super::reply::unavailable;
use crate::error::DirectoryError;

macro_rules! scripts {
    ($( $name:ident : $kind:ident ),* $(,)?) => {
        /// The loaded scripts.
        pub(super) struct Scripts {
            $( pub(super) $name: Script, )*
        }

        impl Scripts {
            pub(super) fn new() -> Self {
                Self {
                    $( $name: scripts!(@make $kind, $name), )*
                }
            }
        }
    };
    (@make room, $name:ident) => {
        Script::new(concat!(
            include_str!("../redis/scripts/prelude.lua"),
            include_str!("../redis/scripts/room_prelude.lua"),
            include_str!(concat!("../redis/scripts/", stringify!($name), ".lua")),
        ))
    };
    (@make plain, $name:ident) => {
        Script::new(concat!(
            include_str!("../redis/scripts/prelude.lua"),
            include_str!(concat!("../redis/scripts/", stringify!($name), ".lua")),
        ))
    };
}

scripts! {
    register_node: plain,
    live_nodes: plain,
    sweep_nodes: plain,
    next_epoch: plain,
    due: plain,
    cas_remove: plain,
    w_point: plain,
    w_unpoint: plain,
    announce: plain,
    sweep_prof: plain,
    put_held: plain,
    take_held: plain,
    resolve: room,
    claim_try: room,
    claim_set: room,
    renew: room,
    release: room,
    check: room,
    join: room,
    leave: room,
    src_add: room,
    src_del: room,
    pres_renew: room,
    member: room,
    by_entity: room,
    members: room,
    raise_pv: room,
    sweep_room: room,
    audit_append: room,
    put_handoff: room,
    take_handoff: room,
}

impl RedisDirectory {
    pub(super) async fn run(
        &self,
        script: &Script,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<Vec<Value>, DirectoryError> {
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(*k);
        }
        for a in args {
            inv.arg(*a);
        }
        let mut con = self.con().await?;
        let v: Value = match inv.invoke_async(&mut con).await {
            Ok(v) => v,
            Err(e) => {
                self.failed(&e).await;
                return Err(unavailable(e));
            }
        };
        match v {
            Value::Array(items) if !items.is_empty() => Ok(items),
            other => Err(DirectoryError::Unavailable(format!(
                "unexpected script reply {other:?}"
            ))),
        }
    }

    pub(super) async fn room(
        &self,
        script: &Script,
        room: &str,
        args: &[&[u8]],
    ) -> Result<Vec<Value>, DirectoryError> {
        let k = self.room_keys(room);
        let keys: Vec<&[u8]> = k.0.iter().map(Vec::as_slice).collect();
        self.run(script, &keys, args).await
    }

    pub(super) async fn wallet(
        &self,
        script: &Script,
        wallet: &str,
        args: &[&[u8]],
    ) -> Result<Vec<Value>, DirectoryError> {
        self.run(script, &[&self.wallet_key(wallet)], args).await
    }
}
