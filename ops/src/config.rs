//! Layered configuration with the `config` crate: built-in defaults → `plaza.toml` → environment
//! `PLAZA__SECTION__KEY`. Unknown keys are an error at start-up; values parse into validated
//! types. [`Provenance`] says where each effective value came from (`plaza config print`).
//!
//! The built-in defaults are `ops/plaza.example.toml` itself (embedded), so the documented
//! example and the defaults cannot drift apart; a test checks that every key of the schema is
//! in it.
//!
//! # Files
//! - this file: the schema (one struct per section, the value types).
//! - `load`: layering the sources, provenance, and the errors that name their origin.
//! - `validate`: the checks between values that types alone do not express.
//! - `components`: the validated configuration as each component's own config.
//! - `render`: `plaza config print` (values with their source, secrets redacted).

mod components;
mod load;
mod render;
#[cfg(test)]
mod tests;
mod validate;

use std::net::{SocketAddr, ToSocketAddrs as _};

use serde::{Deserialize, Serialize};

/// The built-in defaults, which are also the documented example file.
pub const DEFAULTS_TOML: &str = include_str!("../plaza.example.toml");

/// Environment prefix: `PLAZA__GATEWAY__LISTEN` sets `gateway.listen`.
pub const ENV_PREFIX: &str = "PLAZA";

/// The whole configuration.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlazaConfig {
    /// The client edge.
    pub gateway: GatewaySection,
    /// Health and metrics.
    pub admin: AdminSection,
    /// Client authentication.
    pub auth: AuthSection,
    /// The room node.
    pub node: NodeSection,
    /// Rooms.
    pub room: RoomSection,
    /// The directory.
    pub directory: DirectorySection,
    /// Logs.
    pub log: LogSection,
    /// Traces.
    pub telemetry: TelemetrySection,
    /// Per-room definitions (`[[rooms]]`), tried in order: the first whose `match` fits a
    /// room's id gives that room its settings; a room none matches runs `[room]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rooms: Vec<RoomRuleSection>,
}

/// A listen address as written: `host:port`, where host is an IP address (IPv6 in brackets)
/// or a host name resolved at start (`localhost:7777`, `0.0.0.0:7777`, `[::1]:7777`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Address(String);

impl Address {
    /// The first address the host name resolves to (IPv4 first, as `localhost` should bind
    /// where clients dial).
    pub fn resolve(&self) -> std::io::Result<SocketAddr> {
        if let Ok(a) = self.0.parse::<SocketAddr>() {
            return Ok(a);
        }
        let addrs: Vec<SocketAddr> = self.0.to_socket_addrs()?.collect();
        addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| std::io::Error::other(format!("{} resolves to no address", self.0)))
    }

    /// As written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Address {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        if s.parse::<SocketAddr>().is_ok() {
            return Ok(Self(s));
        }
        let Some((host, port)) = s.rsplit_once(':') else {
            return Err(format!("`{s}` is not host:port"));
        };
        if port.parse::<u16>().is_err() {
            return Err(format!("`{s}`: port `{port}` is not 0..=65535"));
        }
        let name_ok = !host.is_empty()
            && host.len() <= 253
            && host
                .split('.')
                .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        if !name_ok {
            return Err(format!("`{s}`: `{host}` is not an IP address or host name"));
        }
        Ok(Self(s))
    }
}

impl std::str::FromStr for Address {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::try_from(s.to_owned())
    }
}

impl From<Address> for String {
    fn from(a: Address) -> Self {
        a.0
    }
}

impl From<SocketAddr> for Address {
    fn from(a: SocketAddr) -> Self {
        Self(a.to_string())
    }
}

/// `[gateway]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct GatewaySection {
    pub listen: Address,
    pub max_frame_bytes: usize,
    pub movement_hz: u32,
    pub expression_hz: u32,
    pub events_per_s: u32,
    pub events_burst: u32,
    pub handshake_timeout_ms: u64,
    pub outbound_queue: usize,
    pub slow_strikes: u32,
    pub slow_window_ms: u64,
    pub max_connections: usize,
    pub max_preauth: usize,
    pub max_preauth_per_ip: usize,
    pub max_sessions_per_ip: usize,
    pub joins_per_ip_per_s: u32,
    pub joins_per_ip_burst: u32,
    pub unjoined_idle_ms: u64,
    pub fd_reserve: usize,
    pub tls_cert: String,
    pub tls_key: String,
    pub tls_reload_ms: u64,
    pub node_tls_ca: String,
    pub node_tls_cert: String,
    pub node_tls_key: String,
    pub resume_ttl_ms: u64,
    pub resume_deadline_ms: u64,
    pub node_silence_ms: u64,
    pub reconnect_window_ms: u64,
    pub socket_send_buffer: usize,
    pub in_process_node: bool,
    pub shutdown_timeout_ms: u64,
}

/// `[admin]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct AdminSection {
    pub listen: Address,
    pub token: String,
    pub tls_cert: String,
    pub tls_key: String,
}

/// `[auth]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct AuthSection {
    pub mode: String,
    pub jwks_file: String,
    pub jwks_url: String,
    pub jwks_refresh_s: u64,
    pub issuer: String,
    pub audience: String,
    pub identity_claim: String,
    pub role_claim: String,
    pub leeway_s: u64,
    pub hs256_secret: String,
    pub wallet_domain: String,
    pub wallet_window_s: u64,
    pub banned: String,
}

/// The sign-in kinds `auth.mode` enables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthModes {
    /// Guests (`guest:<name>` or no token).
    pub guest: bool,
    /// JWTs.
    pub jwt: bool,
    /// Wallet signatures.
    pub wallet: bool,
}

impl AuthSection {
    /// Parses `mode` (`guest`, `jwt`, `wallet`, joined with `+`); the empty default enables
    /// nothing here (see [`AuthSection::modes_for`] for the role's default).
    pub fn modes(&self) -> Result<AuthModes, String> {
        let mut m = AuthModes::default();
        if self.mode.trim().is_empty() {
            return Ok(m);
        }
        for part in self.mode.split('+').map(str::trim) {
            match part {
                "guest" => m.guest = true,
                "jwt" => m.jwt = true,
                "wallet" => m.wallet = true,
                other => {
                    return Err(format!(
                        "`{other}` is not guest, jwt or wallet (join several with +)"
                    ));
                }
            }
        }
        Ok(m)
    }

    /// The modes a process runs with: `mode` as set, or, when it is empty (the default), the
    /// role's default: guests for the all-in-one `plaza up` (`all_in_one`), nothing for a
    /// `plaza gateway` (every client is refused `auth_required` until `mode` is set).
    pub fn modes_for(&self, all_in_one: bool) -> Result<AuthModes, String> {
        if self.mode.trim().is_empty() {
            return Ok(AuthModes {
                guest: all_in_one,
                ..AuthModes::default()
            });
        }
        self.modes()
    }
}

/// `[node]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct NodeSection {
    pub id: String,
    pub listen: Address,
    pub advertise: String,
    pub lease_ttl_ms: u64,
    pub heartbeat_ttl_ms: u64,
    pub session_queue: usize,
    pub event_log: String,
    pub drain_timeout_ms: u64,
    pub grpc_token: String,
    pub tls_cert: String,
    pub tls_key: String,
    pub tls_client_ca: String,
}

/// A room's capacity tier (`class`: 32 visible, 32 kbit/s; `stadium`: 256 visible,
/// 256 kbit/s): the room core's own type.
pub use plaza_room_core::CapacityTier;

/// `[room]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RoomSection {
    pub tick_hz: u32,
    pub broadcast_hz: u32,
    pub max_members: u32,
    pub tier: CapacityTier,
    pub interest_cap: u32,
    pub budget_bytes_per_s: u32,
    pub expression_hz: u32,
    pub expression_budget_bytes_per_s: u32,
    pub check_every: u32,
    pub empty_grace_ms: u64,
    pub max_catch_up: u32,
    pub presence_ttl_ms: u64,
    pub checkpoint_interval_ms: u64,
    pub definition: String,
}

/// One `[[rooms]]` entry: the rooms whose id matches `match` and how they differ from `[room]`.
/// A key left out keeps the node's value (`room.*`); `tier` brings that tier's interest cap and
/// budget unless `interest_cap` / `budget_bytes_per_s` are set too.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RoomRuleSection {
    /// A room id or a glob over room ids (`*` any run of characters, `?` one).
    #[serde(rename = "match")]
    pub pattern: String,
    /// Capacity tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<CapacityTier>,
    /// Visible avatars per client (0: the tier's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interest_cap: Option<u32>,
    /// Frame budget per client, bytes per second (0: the tier's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_bytes_per_s: Option<u32>,
    /// Simulation steps per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick_hz: Option<u32>,
    /// Snapshot broadcasts per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast_hz: Option<u32>,
    /// Most members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_members: Option<u32>,
    /// Expression messages per second (0: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_hz: Option<u32>,
    /// The expression channel's budget per client, bytes per second (0: the tier's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_budget_bytes_per_s: Option<u32>,
    /// Room definition file (geometry, bounds, spawn, spawn points, portals, props).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<String>,
    /// Where joiners appear (replaces the definition's `spawn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn: Option<[f32; 3]>,
    /// Named spawn points (replace the definition's `spawn_points`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn_points: Option<Vec<plaza_room_core::SpawnPoint>>,
}

impl RoomRuleSection {
    /// `base` (the node default) with this entry's settings, checked.
    pub fn apply(
        &self,
        base: &plaza_room_core::RoomConfig,
    ) -> Result<plaza_room_core::RoomConfig, String> {
        let p = &self.pattern;
        let id_chars = |c: char| c.is_ascii_alphanumeric() || "-_.:*?".contains(c);
        if p.is_empty() || p.len() > 128 || !p.chars().all(id_chars) {
            return Err(
                "`match` must be 1..=128 characters of a room id (A-Z a-z 0-9 - _ . :) or the \
                 wildcards * and ?"
                    .into(),
            );
        }
        let mut cfg = base.clone();
        if let Some(tier) = self.tier {
            cfg.tier = tier;
            cfg.interest_cap = tier.default_interest_cap();
            cfg.budget_bytes_per_s = tier.default_budget_bytes_per_s();
            cfg.expression_budget_bytes_per_s = tier.default_expression_budget_bytes_per_s();
        }
        match self.expression_budget_bytes_per_s {
            Some(0) => {
                cfg.expression_budget_bytes_per_s =
                    cfg.tier.default_expression_budget_bytes_per_s();
            }
            Some(n) => cfg.expression_budget_bytes_per_s = n,
            None => {}
        }
        if let Some(hz) = self.expression_hz {
            cfg.expression_hz = hz;
        }
        match self.interest_cap {
            Some(0) => cfg.interest_cap = cfg.tier.default_interest_cap(),
            Some(n) => cfg.interest_cap = n,
            None => {}
        }
        match self.budget_bytes_per_s {
            Some(0) => cfg.budget_bytes_per_s = cfg.tier.default_budget_bytes_per_s(),
            Some(n) => cfg.budget_bytes_per_s = n,
            None => {}
        }
        if let Some(hz) = self.tick_hz {
            cfg.tick_hz = hz;
        }
        if let Some(hz) = self.broadcast_hz {
            cfg.broadcast_hz = hz;
        }
        if !(1..=1000).contains(&cfg.tick_hz) {
            return Err("tick_hz must be 1..=1000".into());
        }
        if cfg.broadcast_hz == 0 || cfg.broadcast_hz > cfg.tick_hz {
            return Err("broadcast_hz must be 1..=tick_hz".into());
        }
        if let Some(n) = self.max_members {
            if n == 0 {
                return Err("max_members must be > 0".into());
            }
            cfg.max_members = n;
        }
        if let Some(path) = &self.definition {
            cfg.definition = if path.is_empty() {
                plaza_room_core::RoomDefinition::default_plaza()
            } else {
                plaza_room_core::RoomDefinition::from_path(path)
                    .map_err(|e| format!("definition: {e}"))?
            };
        }
        if let Some(spawn) = self.spawn {
            cfg.definition.spawn = spawn;
        }
        if let Some(points) = &self.spawn_points {
            cfg.definition.spawn_points = points.clone();
        }
        if self.spawn.is_some() || self.spawn_points.is_some() {
            cfg.definition
                .validate()
                .map_err(|e| format!("spawn: {e}"))?;
        }
        Ok(cfg)
    }
}

/// `[directory]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct DirectorySection {
    pub redis_url: String,
    pub redis_ca: String,
    pub redis_cert: String,
    pub redis_key: String,
    pub key_prefix: String,
    pub sweep_interval_ms: u64,
    pub connect_timeout_ms: u64,
    pub connect_backoff_max_ms: u64,
}

/// `[telemetry]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct TelemetrySection {
    pub otlp_endpoint: String,
    pub service_name: String,
    pub resource_attributes: String,
    pub traces_sampler: String,
    pub traces_sampler_arg: String,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (colour only on a terminal).
    Text,
    /// One JSON object per line.
    Json,
}

/// `[log]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct LogSection {
    pub level: String,
    pub format: LogFormat,
}

pub use components::{redis_tls, tls_files};
use load::flatten;
pub use load::{ConfigError, Provenance, Source, env_var, load};
pub use render::{redact, render};
