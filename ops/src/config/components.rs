//! The validated configuration as each component's own config: the room definition and
//! rules, the room actor's, the node's and the gateway's, and TLS material.

use std::time::Duration;

use super::{DirectorySection, PlazaConfig};

impl PlazaConfig {
    /// The room definition `room.definition` names (the built-in plaza when empty), loaded and
    /// validated.
    pub fn room_definition(&self) -> Result<plaza_room_core::RoomDefinition, String> {
        let path = &self.room.definition;
        if path.is_empty() {
            return Ok(plaza_room_core::RoomDefinition::default_plaza());
        }
        plaza_room_core::RoomDefinition::from_path(path).map_err(|e| e.to_string())
    }

    /// The node's default room config (`[room]`, reading `room.definition`).
    fn default_room(&self) -> Result<plaza_room_core::RoomConfig, String> {
        use plaza_room_core::RoomConfig;
        let r = &self.room;
        let mut room = RoomConfig::for_tier(r.tier);
        room.tick_hz = r.tick_hz;
        room.broadcast_hz = r.broadcast_hz;
        room.max_members = r.max_members;
        room.check_every = r.check_every;
        if r.interest_cap > 0 {
            room.interest_cap = r.interest_cap;
        }
        if r.budget_bytes_per_s > 0 {
            room.budget_bytes_per_s = r.budget_bytes_per_s;
        }
        room.expression_hz = r.expression_hz;
        if r.expression_budget_bytes_per_s > 0 {
            room.expression_budget_bytes_per_s = r.expression_budget_bytes_per_s;
        }
        room.definition = self.room_definition()?;
        Ok(room)
    }

    /// The `[[rooms]]` rules as room configs over the node default, in order, each checked
    /// (rates, members, definition file, spawn inside the bounds). An error names the entry.
    pub fn room_rules(&self) -> Result<Vec<plaza_room_core::RoomRule>, String> {
        let base = self.default_room()?;
        let mut out = Vec::with_capacity(self.rooms.len());
        for (i, rule) in self.rooms.iter().enumerate() {
            let at = |why: String| format!("rooms[{i}] (match = {:?}): {why}", rule.pattern);
            out.push(plaza_room_core::RoomRule {
                pattern: rule.pattern.clone(),
                cfg: rule.apply(&base).map_err(at)?,
            });
        }
        Ok(out)
    }

    /// The room actor config these settings describe (reads `room.definition` and every
    /// `[[rooms]]` definition file).
    pub fn room_actor(&self) -> std::io::Result<plaza_room_actor::room::RoomActorConfig> {
        let r = &self.room;
        let room = self.default_room().map_err(std::io::Error::other)?;
        let rules = self.room_rules().map_err(std::io::Error::other)?;
        Ok(plaza_room_actor::room::RoomActorConfig {
            room,
            max_catch_up: r.max_catch_up,
            empty_grace: Duration::from_millis(r.empty_grace_ms),
            presence_ttl: Duration::from_millis(r.presence_ttl_ms),
            rooms: plaza_room_core::RoomRegistry::new(rules),
            checkpoint_interval: Duration::from_millis(r.checkpoint_interval_ms),
        })
    }

    /// The node config these settings describe.
    pub fn node_config(&self) -> std::io::Result<plaza_room_actor::NodeConfig> {
        let n = &self.node;
        Ok(plaza_room_actor::NodeConfig {
            node_id: n.id.clone(),
            listen: n.listen.resolve()?,
            advertise: (!n.advertise.is_empty()).then(|| n.advertise.clone()),
            room: self.room_actor()?,
            lease_ttl: Duration::from_millis(n.lease_ttl_ms),
            heartbeat_ttl: Duration::from_millis(n.heartbeat_ttl_ms),
            session_queue: n.session_queue,
            unique_id: true,
            event_log: (!n.event_log.is_empty()).then(|| n.event_log.clone().into()),
            grpc_token: non_empty(&n.grpc_token),
            tls: tls_files(&n.tls_cert, &n.tls_key).map(|f| plaza_room_actor::NodeTls {
                cert: f.cert,
                key: f.key,
                client_ca: non_empty(&n.tls_client_ca).map(Into::into),
            }),
        })
    }

    /// The gateway config these settings describe.
    pub fn gateway_config(&self) -> std::io::Result<plaza_gateway::GatewayConfig> {
        let g = &self.gateway;
        Ok(plaza_gateway::GatewayConfig {
            listen: g.listen.resolve()?,
            limits: plaza_gateway::limits::Limits {
                max_frame_bytes: g.max_frame_bytes,
                movement_hz: g.movement_hz,
                expression_hz: g.expression_hz,
                events_per_s: g.events_per_s,
                events_burst: g.events_burst,
                handshake_deadline: Duration::from_millis(g.handshake_timeout_ms),
                unjoined_idle: Duration::from_millis(g.unjoined_idle_ms),
                outbound_queue: g.outbound_queue,
                slow_strikes: g.slow_strikes,
                slow_window: Duration::from_millis(g.slow_window_ms),
                resume_deadline: Duration::from_millis(g.resume_deadline_ms),
                node_silence: Duration::from_millis(g.node_silence_ms),
                reconnect_window: Duration::from_millis(g.reconnect_window_ms),
            },
            resume_ttl: Duration::from_millis(g.resume_ttl_ms),
            edge: plaza_gateway::edge::EdgeLimits {
                max_connections: g.max_connections,
                max_preauth: g.max_preauth,
                max_preauth_per_ip: g.max_preauth_per_ip,
                max_sessions_per_ip: g.max_sessions_per_ip,
                joins_per_ip_per_s: g.joins_per_ip_per_s,
                joins_per_ip_burst: g.joins_per_ip_burst,
                fd_reserve: g.fd_reserve,
            },
            tls: tls_files(&g.tls_cert, &g.tls_key),
            tls_reload: Duration::from_millis(g.tls_reload_ms),
            node_token: non_empty(&self.node.grpc_token),
            node_tls: non_empty(&g.node_tls_ca).map(|ca| plaza_gateway::NodeClientTls {
                ca: ca.into(),
                identity: tls_files(&g.node_tls_cert, &g.node_tls_key),
            }),
            socket_send_buffer: (g.socket_send_buffer > 0).then_some(g.socket_send_buffer),
        })
    }
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

/// The TLS material of `directory.redis_ca` / `redis_cert` / `redis_key` (read now); `None`
/// when none is set (a `rediss://` URL then trusts the system's roots).
pub fn redis_tls(d: &DirectorySection) -> Result<Option<plaza_directory::RedisTls>, String> {
    let read = |key: &str, path: &str| -> Result<Option<Vec<u8>>, String> {
        let path = path.trim();
        if path.is_empty() {
            return Ok(None);
        }
        std::fs::read(path)
            .map(Some)
            .map_err(|e| format!("directory.{key} {path}: {e}"))
    };
    let ca = read("redis_ca", &d.redis_ca)?;
    let client = match (
        read("redis_cert", &d.redis_cert)?,
        read("redis_key", &d.redis_key)?,
    ) {
        (Some(c), Some(k)) => Some((c, k)),
        _ => None,
    };
    Ok((ca.is_some() || client.is_some()).then_some(plaza_directory::RedisTls { ca, client }))
}

/// A certificate and key pair of the configuration; `None` when unset.
pub fn tls_files(cert: &str, key: &str) -> Option<plaza_gateway::edge::TlsFiles> {
    let (cert, key) = (cert.trim(), key.trim());
    (!cert.is_empty() && !key.is_empty()).then(|| plaza_gateway::edge::TlsFiles {
        cert: cert.into(),
        key: key.into(),
    })
}
