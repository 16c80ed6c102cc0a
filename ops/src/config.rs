//! Layered configuration with the `config` crate: built-in defaults → `plaza.toml` → environment
//! `PLAZA__SECTION__KEY`. Unknown keys are an error at start-up; values parse into validated
//! types. [`Provenance`] says where each effective value came from (`plaza config print`).
//!
//! The built-in defaults are `ops/plaza.example.toml` itself (embedded), so the documented
//! example and the defaults cannot drift apart; a test checks that every key of the schema is
//! in it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, ToSocketAddrs as _};
use std::path::Path;
use std::time::Duration;

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

/// A room's capacity tier.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// 32 visible, 32 kbit/s.
    Class,
    /// 256 visible, 256 kbit/s.
    Stadium,
}

/// `[room]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RoomSection {
    pub tick_hz: u32,
    pub broadcast_hz: u32,
    pub max_members: u32,
    pub tier: Tier,
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
    pub tier: Option<Tier>,
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

fn core_tier(t: Tier) -> plaza_room_core::CapacityTier {
    match t {
        Tier::Class => plaza_room_core::CapacityTier::Class,
        Tier::Stadium => plaza_room_core::CapacityTier::Stadium,
    }
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
        if let Some(t) = self.tier {
            let tier = core_tier(t);
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

/// Why the configuration was refused. Every message names where the bad value came from (the
/// file's path, the environment variable, or the key of a built-in default).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or environment could not be read or parsed, or names an unknown key.
    #[error("{origin}: {message}")]
    Load {
        /// The file path or `environment variable NAME`.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A value is out of its valid range (or breaks a rule between keys).
    #[error("{key}{origin}: {why}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// ` (from …)`, filled in by [`load`] from the provenance; empty otherwise.
        origin: String,
        /// Why.
        why: String,
    },
}

impl ConfigError {
    fn load(origin: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Self::Load {
            origin: origin.into(),
            message: message.to_string(),
        }
    }
}

/// Where an effective value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The built-in default.
    Default,
    /// The configuration file.
    File,
    /// An environment variable.
    Env,
    /// A command-line flag.
    Flag,
}

/// Where every key's value came from, by dotted key.
pub type Provenance = BTreeMap<String, Source>;

/// Loads the configuration: defaults, then `file` if given, then the environment (`env` is the
/// process environment unless a map is passed, for tests).
pub fn load(
    file: Option<&Path>,
    env: Option<BTreeMap<String, String>>,
) -> Result<(PlazaConfig, Provenance), ConfigError> {
    let env_map: BTreeMap<String, String> = match env {
        Some(m) => m,
        None => std::env::vars()
            .filter(|(k, _)| k.starts_with("PLAZA__"))
            .collect(),
    };
    let defaults: toml::Table = DEFAULTS_TOML
        .parse()
        .expect("embedded defaults parse (tested)");
    let mut known = Vec::new();
    flatten("", &toml::Value::Table(defaults), &mut known);
    let mut known: BTreeSet<String> = known.into_iter().collect();
    // `[[rooms]]` has no built-in entry (an array of tables; not settable from the environment).
    known.insert("rooms".to_owned());

    let base = config::Config::builder().add_source(config::File::from_str(
        DEFAULTS_TOML,
        config::FileFormat::Toml,
    ));
    let mut file_keys = Vec::new();
    let mut b = base;
    if let Some(path) = file {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::load(&origin, format!("cannot read: {e}")))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::load(&origin, e.to_string().trim_end()))?;
        flatten("", &toml::Value::Table(table), &mut file_keys);
        if let Some(k) = file_keys.iter().find(|k| !known.contains(*k)) {
            return Err(ConfigError::load(&origin, format!("unknown key `{k}`")));
        }
        b = b.add_source(config::File::from_str(&text, config::FileFormat::Toml));
        // The file alone over the defaults: a bad value here is the file's.
        b.build_cloned()
            .and_then(config::Config::try_deserialize::<PlazaConfig>)
            .map_err(|e| ConfigError::load(&origin, strip_config_noise(&e)))?;
    }
    for var in env_map.keys() {
        let key = env_key(var);
        if !known.contains(&key) {
            return Err(ConfigError::load(
                format!("environment variable {var}"),
                format!("unknown key `{key}`"),
            ));
        }
    }
    b = b.add_source(
        config::Environment::with_prefix(ENV_PREFIX)
            .prefix_separator("__")
            .separator("__")
            .try_parsing(true)
            .source(Some(env_map.clone().into_iter().collect())),
    );
    let cfg: PlazaConfig = b
        .build()
        .and_then(config::Config::try_deserialize)
        .map_err(|e| {
            let text = strip_config_noise(&e);
            // Name the variable whose key the message mentions, else every variable set.
            let vars: Vec<&String> = env_map
                .keys()
                .filter(|v| {
                    text.contains(&format!("`{}`", env_key(v))) || text.contains(&env_key(v))
                })
                .collect();
            let vars: Vec<&String> = if vars.is_empty() {
                env_map.keys().collect()
            } else {
                vars
            };
            let names: Vec<&str> = vars.iter().map(|v| v.as_str()).collect();
            ConfigError::load(format!("environment variable {}", names.join(", ")), text)
        })?;

    let mut prov = Provenance::new();
    for key in known {
        if key == "rooms" && !file_keys.contains(&key) {
            // No entry anywhere: nothing to say where it came from.
            continue;
        }
        let src = if env_map.contains_key(&env_var(&key)) {
            Source::Env
        } else if file_keys.contains(&key) {
            Source::File
        } else {
            Source::Default
        };
        prov.insert(key, src);
    }
    cfg.validate().map_err(|e| e.with_origin(&prov, file))?;
    Ok((cfg, prov))
}

/// `PLAZA__GATEWAY__LISTEN` → `gateway.listen`.
fn env_key(var: &str) -> String {
    var.strip_prefix("PLAZA__")
        .unwrap_or(var)
        .to_lowercase()
        .replace("__", ".")
}

/// `gateway.listen` → `PLAZA__GATEWAY__LISTEN`.
pub fn env_var(key: &str) -> String {
    format!("PLAZA__{}", key.replace('.', "__").to_uppercase())
}

/// The `config` crate's message without its own origin suffixes (we name the origin).
fn strip_config_noise(e: &config::ConfigError) -> String {
    let text = e.to_string();
    match text
        .find(" in the environment")
        .or_else(|| text.find(" in string"))
    {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

impl ConfigError {
    /// Names where an invalid value came from.
    pub fn with_origin(self, prov: &Provenance, file: Option<&Path>) -> Self {
        match self {
            Self::Invalid { key, why, .. } => {
                let origin = match prov.get(key) {
                    Some(Source::Env) => format!(" (from environment variable {})", env_var(key)),
                    Some(Source::File) => format!(
                        " (from {})",
                        file.map_or("the file".into(), |p| p.display().to_string())
                    ),
                    Some(Source::Flag) => " (from a command-line flag)".into(),
                    _ => String::new(),
                };
                Self::Invalid { key, origin, why }
            }
            other => other,
        }
    }
}

fn flatten(prefix: &str, v: &toml::Value, out: &mut Vec<String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

impl PlazaConfig {
    /// The built-in defaults.
    pub fn defaults() -> Self {
        toml::from_str(DEFAULTS_TOML).expect("embedded defaults parse (tested)")
    }

    /// Checks value ranges that types alone do not express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key, why: &str| {
            Err(ConfigError::Invalid {
                key,
                origin: String::new(),
                why: why.to_owned(),
            })
        };
        let r = &self.room;
        if !(1..=1000).contains(&r.tick_hz) {
            return bad("room.tick_hz", "must be 1..=1000");
        }
        if r.broadcast_hz == 0 || r.broadcast_hz > r.tick_hz {
            return bad("room.broadcast_hz", "must be 1..=room.tick_hz");
        }
        if r.max_members == 0 {
            return bad("room.max_members", "must be > 0");
        }
        if r.check_every == 0 {
            return bad("room.check_every", "must be > 0");
        }
        if let Err(why) = self.room_definition() {
            return bad("room.definition", &why);
        }
        if let Err(why) = self.room_rules() {
            return bad("rooms", &why);
        }
        let a = &self.auth;
        let modes = match a.modes() {
            Ok(m) => m,
            Err(why) => return bad("auth.mode", &why),
        };
        if modes.jwt {
            if !a.jwks_file.is_empty() && !a.jwks_url.is_empty() {
                return bad("auth.jwks_url", "set jwks_file or jwks_url, not both");
            }
            if a.jwks_file.is_empty() && a.jwks_url.is_empty() && a.hs256_secret.is_empty() {
                return bad(
                    "auth.mode",
                    "jwt needs auth.jwks_file, auth.jwks_url or auth.hs256_secret",
                );
            }
        }
        let url_ok = a.jwks_url.is_empty()
            || a.jwks_url.starts_with("https://")
            || a.jwks_url.starts_with("http://");
        if !url_ok {
            return bad("auth.jwks_url", "must be an http:// or https:// URL");
        }
        if !(10..=86_400).contains(&a.jwks_refresh_s) {
            return bad("auth.jwks_refresh_s", "must be 10..=86400");
        }
        if a.leeway_s > 300 {
            return bad("auth.leeway_s", "must be 0..=300");
        }
        if a.identity_claim.is_empty() {
            return bad("auth.identity_claim", "must not be empty");
        }
        if a.role_claim.is_empty() {
            return bad("auth.role_claim", "must not be empty");
        }
        if a.wallet_domain.is_empty() || a.wallet_domain.contains(['\n', '\r']) {
            return bad("auth.wallet_domain", "must be one non-empty line");
        }
        if !(1..=3600).contains(&a.wallet_window_s) {
            return bad("auth.wallet_window_s", "must be 1..=3600");
        }
        let g = &self.gateway;
        if !(64..=1 << 20).contains(&g.max_frame_bytes) {
            return bad("gateway.max_frame_bytes", "must be 64..=1048576");
        }
        if g.movement_hz == 0 || g.events_per_s == 0 || g.expression_hz == 0 {
            return bad("gateway.movement_hz", "rates must be > 0");
        }
        if g.outbound_queue < 2 {
            return bad("gateway.outbound_queue", "must be >= 2");
        }
        if g.max_connections == 0 {
            return bad("gateway.max_connections", "must be > 0");
        }
        if g.max_preauth == 0 || g.max_preauth_per_ip == 0 || g.max_sessions_per_ip == 0 {
            return bad(
                "gateway.max_preauth",
                "max_preauth, max_preauth_per_ip and max_sessions_per_ip must be > 0",
            );
        }
        if g.joins_per_ip_per_s == 0 || g.joins_per_ip_burst == 0 {
            return bad(
                "gateway.joins_per_ip_per_s",
                "join rate and burst must be > 0",
            );
        }
        if g.handshake_timeout_ms == 0 || g.unjoined_idle_ms == 0 {
            return bad(
                "gateway.unjoined_idle_ms",
                "handshake_timeout_ms and unjoined_idle_ms must be > 0",
            );
        }
        if g.tls_cert.trim().is_empty() != g.tls_key.trim().is_empty() {
            return bad(
                "gateway.tls_cert",
                "set both gateway.tls_cert and gateway.tls_key, or neither",
            );
        }
        if g.tls_reload_ms < 100 {
            return bad("gateway.tls_reload_ms", "must be >= 100");
        }
        let a = &self.admin;
        if a.tls_cert.trim().is_empty() != a.tls_key.trim().is_empty() {
            return bad(
                "admin.tls_cert",
                "set both admin.tls_cert and admin.tls_key, or neither",
            );
        }
        let set = |s: &str| !s.trim().is_empty();
        if set(&g.node_tls_cert) != set(&g.node_tls_key) {
            return bad(
                "gateway.node_tls_cert",
                "set both gateway.node_tls_cert and gateway.node_tls_key, or neither",
            );
        }
        if set(&g.node_tls_cert) && !set(&g.node_tls_ca) {
            return bad(
                "gateway.node_tls_cert",
                "a client certificate for nodes needs gateway.node_tls_ca (nodes are dialled over \
                 TLS only with a CA to check them against)",
            );
        }
        if g.node_silence_ms < 100 {
            // A room sends a frame per broadcast period (≥ 1 Hz); shorter would flap.
            return bad("gateway.node_silence_ms", "must be >= 100");
        }
        let n = &self.node;
        if n.id.is_empty() {
            return bad("node.id", "must not be empty");
        }
        if set(&n.tls_cert) != set(&n.tls_key) {
            return bad(
                "node.tls_cert",
                "set both node.tls_cert and node.tls_key, or neither",
            );
        }
        if set(&n.tls_client_ca) && !set(&n.tls_cert) {
            return bad(
                "node.tls_client_ca",
                "client certificates are checked only over TLS: set node.tls_cert and node.tls_key",
            );
        }
        if n.lease_ttl_ms < 1000 || n.heartbeat_ttl_ms < 1000 {
            return bad("node.lease_ttl_ms", "leases must be >= 1000 ms");
        }
        if !(10..=3_600_000).contains(&self.directory.sweep_interval_ms) {
            return bad("directory.sweep_interval_ms", "must be 10..=3600000");
        }
        let d = &self.directory;
        let url = d.redis_url.trim();
        if !url.is_empty() {
            let Some((scheme, rest)) = url.split_once("://") else {
                return bad(
                    "directory.redis_url",
                    "must be a redis://, rediss://, unix://, redis+cluster:// or redis+sentinel:// URL",
                );
            };
            if !matches!(
                scheme,
                "redis"
                    | "rediss"
                    | "unix"
                    | "redis+unix"
                    | "redis+cluster"
                    | "rediss+cluster"
                    | "redis+sentinel"
            ) {
                return bad(
                    "directory.redis_url",
                    "scheme must be redis, rediss, unix, redis+cluster, rediss+cluster or redis+sentinel",
                );
            }
            let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
            let tcp = scheme != "unix" && scheme != "redis+unix";
            if scheme == "redis+sentinel"
                && host
                    .split_once('/')
                    .is_none_or(|(_, s)| s.trim_matches('/').is_empty())
            {
                return bad(
                    "directory.redis_url",
                    "a redis+sentinel:// URL names the service: redis+sentinel://host:port,…/SERVICE",
                );
            }
            if host.is_empty() || (tcp && host.starts_with('/')) {
                return bad("directory.redis_url", "has no host");
            }
        }
        if set(&d.redis_cert) != set(&d.redis_key) {
            return bad(
                "directory.redis_cert",
                "set both directory.redis_cert and directory.redis_key, or neither",
            );
        }
        if d.connect_backoff_max_ms == 0 || d.connect_backoff_max_ms > d.connect_timeout_ms.max(1) {
            return bad(
                "directory.connect_backoff_max_ms",
                "must be 1..=directory.connect_timeout_ms",
            );
        }
        if n.drain_timeout_ms == 0 {
            return bad("node.drain_timeout_ms", "must be > 0");
        }
        if g.shutdown_timeout_ms == 0 {
            return bad("gateway.shutdown_timeout_ms", "must be > 0");
        }
        let endpoint = self.telemetry.otlp_endpoint.trim();
        let is_url = endpoint.starts_with("http://") || endpoint.starts_with("https://");
        if !endpoint.is_empty() && !is_url {
            return bad(
                "telemetry.otlp_endpoint",
                "must be an http:// or https:// URL",
            );
        }
        for (key, a) in [
            ("gateway.listen", &self.gateway.listen),
            ("admin.listen", &self.admin.listen),
            ("node.listen", &self.node.listen),
        ] {
            if let Err(e) = a.resolve() {
                return Err(ConfigError::Invalid {
                    key,
                    origin: String::new(),
                    why: format!("cannot resolve `{a}`: {e}"),
                });
            }
        }
        Ok(())
    }

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
        let mut room = RoomConfig::for_tier(core_tier(r.tier));
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

/// Renders the effective configuration with the source of each value, one `key = value  # source`
/// line per key.
pub fn render(cfg: &PlazaConfig, prov: &Provenance) -> String {
    let value = toml::Value::try_from(cfg).expect("config serializes");
    let mut keys = Vec::new();
    flatten("", &value, &mut keys);
    let mut out = String::new();
    for key in keys {
        let mut v = &value;
        for part in key.split('.') {
            v = &v[part];
        }
        let src = prov.get(&key).copied().unwrap_or(Source::Default);
        let shown = match v {
            toml::Value::String(text) => toml::Value::String(redact(&key, text)).to_string(),
            other => other.to_string(),
        };
        out.push_str(&format!("{key} = {shown}  # {}\n", source_name(src)));
    }
    out
}

/// What `plaza config print` shows of a string value: keys that hold a secret (their name has
/// `token`, `secret`, `password` or `passphrase`, but not a `_file`/`_path` suffix) as
/// `<redacted>` when set, and the password of any URL (`redis://:s3cret@host`) as `***`.
pub fn redact(key: &str, value: &str) -> String {
    let name = key.rsplit('.').next().unwrap_or(key);
    let secret_name = ["token", "secret", "password", "passphrase"]
        .iter()
        .any(|w| name.contains(w))
        && !name.ends_with("_file")
        && !name.ends_with("_path");
    if secret_name && !value.is_empty() {
        return "<redacted>".into();
    }
    redact_url_password(value)
}

fn redact_url_password(value: &str) -> String {
    let Some(scheme_end) = value.find("://") else {
        return value.to_owned();
    };
    let rest = &value[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return value.to_owned();
    };
    let userinfo = &authority[..at];
    let redacted_userinfo = match userinfo.split_once(':') {
        Some((user, pass)) if !pass.is_empty() => format!("{user}:***"),
        Some(_) => userinfo.to_owned(),
        // `redis://s3cret@host`: Redis reads a lone userinfo as the password.
        None if !userinfo.is_empty() => "***".into(),
        None => String::new(),
    };
    format!(
        "{}{redacted_userinfo}{}",
        &value[..scheme_end + 3],
        &rest[at..]
    )
}

fn source_name(s: Source) -> &'static str {
    match s {
        Source::Default => "default",
        Source::File => "file",
        Source::Env => "env",
        Source::Flag => "flag",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_auth_mode_is_guests_for_plaza_up_only() {
        let mut a = PlazaConfig::defaults().auth;
        assert_eq!(a.mode, "");
        let none = AuthModes::default();
        assert_eq!(a.modes(), Ok(none));
        assert_eq!(a.modes_for(false), Ok(none), "a cluster gateway");
        assert_eq!(
            a.modes_for(true),
            Ok(AuthModes {
                guest: true,
                ..none
            }),
            "plaza up"
        );
        a.mode = "jwt+wallet".into();
        let set = AuthModes {
            jwt: true,
            wallet: true,
            ..none
        };
        assert_eq!((a.modes_for(true), a.modes_for(false)), (Ok(set), Ok(set)));
        a.mode = "guest+root".into();
        assert!(a.modes_for(true).is_err());
    }

    #[test]
    fn defaults_parse_validate_and_cover_every_key() {
        let cfg = PlazaConfig::defaults();
        cfg.validate().unwrap();
        // Every key of the schema is in the example file (deny_unknown_fields covers the
        // converse), so the documented file and the defaults are one and the same.
        let (loaded, prov) = load(None, Some(BTreeMap::new())).unwrap();
        assert_eq!(loaded, cfg);
        assert!(prov.values().all(|s| *s == Source::Default));
        let mut keys = Vec::new();
        flatten("", &toml::Value::try_from(&cfg).unwrap(), &mut keys);
        assert_eq!(keys.len(), prov.len());
    }

    #[test]
    fn env_overrides_the_file_which_overrides_defaults() {
        let dir = std::env::temp_dir().join(format!("plaza-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plaza.toml");
        std::fs::write(&path, "[room]\ntick_hz = 60\nbroadcast_hz = 30\n").unwrap();
        let env = BTreeMap::from([(
            "PLAZA__GATEWAY__LISTEN".to_owned(),
            "127.0.0.1:7788".to_owned(),
        )]);
        let (cfg, prov) = load(Some(&path), Some(env)).unwrap();
        assert_eq!(cfg.gateway.listen, "127.0.0.1:7788".parse().unwrap());
        assert_eq!(cfg.room.tick_hz, 60);
        assert_eq!(prov["gateway.listen"], Source::Env);
        assert_eq!(prov["room.tick_hz"], Source::File);
        assert_eq!(prov["room.max_members"], Source::Default);
        let text = render(&cfg, &prov);
        assert!(text.contains("gateway.listen = \"127.0.0.1:7788\"  # env"));
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("plaza-cfg-unknown-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plaza.toml");
        std::fs::write(&path, "[gateway]\nlisten_port = 1\n").unwrap();
        let err = load(Some(&path), Some(BTreeMap::new()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("listen_port"), "{err}");
    }

    #[test]
    fn a_room_definition_file_is_loaded_and_a_bad_one_refused() {
        let dir = std::env::temp_dir().join(format!("plaza-cfg-def-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let def = plaza_room_core::RoomDefinition::default_plaza();
        let mut small = def.clone();
        small.name = "small".into();
        let good = dir.join("small.json");
        std::fs::write(&good, serde_json::to_string(&small).unwrap()).unwrap();
        let env = BTreeMap::from([(
            "PLAZA__ROOM__DEFINITION".to_owned(),
            good.display().to_string(),
        )]);
        let (cfg, _) = load(None, Some(env)).unwrap();
        assert_eq!(cfg.room_actor().unwrap().room.definition.name, "small");
        assert_eq!(
            PlazaConfig::defaults()
                .room_actor()
                .unwrap()
                .room
                .definition,
            def,
            "empty: the built-in plaza"
        );
        let env = BTreeMap::from([(
            "PLAZA__ROOM__DEFINITION".to_owned(),
            dir.join("missing.toml").display().to_string(),
        )]);
        let err = load(None, Some(env)).unwrap_err().to_string();
        assert!(err.contains("room.definition"), "{err}");
    }

    #[test]
    fn rooms_entries_override_the_node_default_in_order_and_bad_ones_are_refused() {
        let dir = std::env::temp_dir().join(format!("plaza-cfg-rooms-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rooms.toml");
        std::fs::write(
            &file,
            "[room]\ninterest_cap = 10\n\n[[rooms]]\nmatch = \"stage-*\"\ntier = \"stadium\"\n\
             expression_hz = 30\nspawn = [1.0, 0.0, 2.0]\n\n[[rooms]]\nmatch = \"*\"\n\
             max_members = 7\n",
        )
        .unwrap();
        let (cfg, prov) = load(Some(&file), Some(BTreeMap::new())).unwrap();
        assert_eq!(prov["rooms"], Source::File);
        assert!(render(&cfg, &prov).contains("rooms = "));
        let actor = cfg.room_actor().unwrap();
        assert_eq!(actor.room.interest_cap, 10);
        let (stage, rule) = actor.for_room("stage-1");
        assert_eq!(rule.as_deref(), Some("stage-*"));
        let r = &stage.room;
        // The tier brings its own cap and budgets; the rest is the node's.
        assert_eq!((r.interest_cap, r.budget_bytes_per_s), (256, 32_000));
        assert_eq!(r.expression_budget_bytes_per_s, 8_000);
        assert_eq!((r.expression_hz, r.max_members), (30, 1024));
        assert_eq!(r.definition.spawn, [1.0, 0.0, 2.0]);
        let (other, rule) = actor.for_room("lobby");
        assert_eq!(rule.as_deref(), Some("*"));
        assert_eq!((other.room.max_members, other.room.interest_cap), (7, 10));

        for (bad, what) in [
            ("[[rooms]]\nmatch = \"\"\n", "match"),
            (
                "[[rooms]]\nmatch = \"a\"\nbroadcast_hz = 80\n",
                "broadcast_hz",
            ),
            (
                "[[rooms]]\nmatch = \"a\"\nspawn = [900.0, 0.0, 0.0]\n",
                "spawn",
            ),
            (
                "[[rooms]]\nmatch = \"a\"\ndefinition = \"/nope.toml\"\n",
                "definition",
            ),
            ("[[rooms]]\nmatch = \"a\"\ncolour = 1\n", "colour"),
        ] {
            std::fs::write(&file, bad).unwrap();
            let err = load(Some(&file), Some(BTreeMap::new()))
                .unwrap_err()
                .to_string();
            assert!(err.contains(what), "{bad}: {err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn invalid_values_are_refused_naming_their_source() {
        let env = BTreeMap::from([("PLAZA__ROOM__BROADCAST_HZ".to_owned(), "500".to_owned())]);
        let err = load(None, Some(env)).unwrap_err().to_string();
        assert!(
            err.contains("room.broadcast_hz")
                && err.contains("environment variable PLAZA__ROOM__BROADCAST_HZ"),
            "{err}"
        );
        let env = BTreeMap::from([("PLAZA__GATEWAY__LISTEN_PORT".to_owned(), "1".to_owned())]);
        let err = load(None, Some(env)).unwrap_err().to_string();
        assert_eq!(
            err,
            "environment variable PLAZA__GATEWAY__LISTEN_PORT: unknown key `gateway.listen_port`"
        );
        let env = BTreeMap::from([("PLAZA__ROOM__TICK_HZ".to_owned(), "fast".to_owned())]);
        let err = load(None, Some(env)).unwrap_err().to_string();
        assert!(
            err.starts_with("environment variable PLAZA__ROOM__TICK_HZ: ")
                && err.contains("tick_hz"),
            "{err}"
        );
    }

    #[test]
    fn file_errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("plaza-cfg-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(&path, "[room]\ntick_hz = \"fast\"\n").unwrap();
        let err = load(Some(&path), Some(BTreeMap::new()))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(&path.display().to_string()), "{err}");
        std::fs::write(&path, "[room]\ntick_hz = 10\nbroadcast_hz = 20\n").unwrap();
        let err = load(Some(&path), Some(BTreeMap::new()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("room.broadcast_hz") && err.contains(&path.display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn addresses_accept_host_names() {
        let env = BTreeMap::from([(
            "PLAZA__GATEWAY__LISTEN".to_owned(),
            "localhost:7777".to_owned(),
        )]);
        let (cfg, _) = load(None, Some(env)).unwrap();
        assert_eq!(cfg.gateway.listen.as_str(), "localhost:7777");
        let a = cfg.gateway.listen.resolve().unwrap();
        assert!(a.ip().is_loopback() && a.port() == 7777, "{a}");
        for bad in ["localhost", "localhost:99999", ":80", "a b:1"] {
            assert!(bad.parse::<Address>().is_err(), "{bad}");
        }
        assert!("[::1]:7777".parse::<Address>().is_ok());
    }

    #[test]
    fn redis_urls_of_every_kind_validate() {
        let mut cfg = PlazaConfig::defaults();
        for ok in [
            "redis://redis:6379/0",
            "rediss://:pw@redis:6380",
            "unix:///run/redis.sock",
            "redis+cluster://r1:7000,r2:7001,r3:7002",
            "rediss+cluster://:pw@r1:7000",
            "redis+sentinel://s1:26379,s2:26379/mymaster",
        ] {
            cfg.directory.redis_url = ok.into();
            cfg.validate().unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "http://redis:6379",
            "redis+cluster://",
            "redis+sentinel://s1:26379",
            "redis+sentinel://s1:26379/",
        ] {
            cfg.directory.redis_url = bad.into();
            assert!(cfg.validate().is_err(), "{bad}");
        }
        assert_eq!(
            redact(
                "directory.redis_url",
                "redis+cluster://:s3cret@r1:7000,r2:7001"
            ),
            "redis+cluster://:***@r1:7000,r2:7001"
        );
    }

    #[test]
    fn secrets_are_redacted() {
        assert_eq!(
            redact("directory.redis_url", "redis://:s3cret@redis:6379/0"),
            "redis://:***@redis:6379/0"
        );
        assert_eq!(
            redact("directory.redis_url", "rediss://plaza:s3cret@redis:6379"),
            "rediss://plaza:***@redis:6379"
        );
        assert_eq!(
            redact("directory.redis_url", "redis://redis:6379"),
            "redis://redis:6379"
        );
        assert_eq!(redact("admin.token", "abc"), "<redacted>");
        assert_eq!(redact("admin.token", ""), "");
        assert_eq!(redact("admin.token_file", "/run/t"), "/run/t");
        let mut cfg = PlazaConfig::defaults();
        cfg.directory.redis_url = "redis://:s3cret@redis:6379".into();
        let text = render(&cfg, &Provenance::new());
        assert!(
            !text.contains("s3cret") && text.contains("redis://:***@redis:6379"),
            "{text}"
        );
    }
}
