//! Layered configuration with the `config` crate: built-in defaults → `plaza.toml` → environment
//! `PLAZA__SECTION__KEY`. Unknown keys are an error at start-up; values parse into validated
//! types. [`Provenance`] says where each effective value came from (`plaza config print`).
//!
//! The built-in defaults are `ops/plaza.example.toml` itself (embedded), so the documented
//! example and the defaults cannot drift apart; a test checks that every key of the schema is
//! in it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
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
    /// The room node.
    pub node: NodeSection,
    /// Rooms.
    pub room: RoomSection,
    /// The directory.
    pub directory: DirectorySection,
    /// Logs and traces.
    pub telemetry: TelemetrySection,
}

/// `[gateway]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct GatewaySection {
    pub listen: SocketAddr,
    pub max_frame_bytes: usize,
    pub movement_hz: u32,
    pub events_per_s: u32,
    pub events_burst: u32,
    pub handshake_timeout_ms: u64,
    pub outbound_queue: usize,
    pub slow_strikes: u32,
    pub slow_window_ms: u64,
    pub max_connections: usize,
    pub resume_ttl_ms: u64,
    pub resume_deadline_ms: u64,
    pub socket_send_buffer: usize,
    pub in_process_node: bool,
}

/// `[admin]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct AdminSection {
    pub listen: SocketAddr,
}

/// `[node]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct NodeSection {
    pub id: String,
    pub listen: SocketAddr,
    pub advertise: String,
    pub lease_ttl_ms: u64,
    pub heartbeat_ttl_ms: u64,
    pub session_queue: usize,
    pub event_log: String,
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
    pub check_every: u32,
    pub empty_grace_ms: u64,
    pub max_catch_up: u32,
    pub presence_ttl_ms: u64,
}

/// `[directory]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct DirectorySection {
    pub redis_url: String,
    pub key_prefix: String,
    pub sweep_interval_ms: u64,
}

/// `[telemetry]`
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct TelemetrySection {
    pub log: String,
    pub otlp_endpoint: String,
}

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or environment could not be read or parsed (names the key when it is unknown).
    #[error("configuration: {0}")]
    Load(#[from] config::ConfigError),
    /// A value is out of its valid range.
    #[error("configuration: {key}: {why}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// Why.
        why: &'static str,
    },
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
    let mut b = config::Config::builder().add_source(config::File::from_str(
        DEFAULTS_TOML,
        config::FileFormat::Toml,
    ));
    let mut file_keys = Vec::new();
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            config::ConfigError::Message(format!("cannot read {}: {e}", path.display()))
        })?;
        let table: toml::Table = text
            .parse()
            .map_err(|e| config::ConfigError::Message(format!("{}: {e}", path.display())))?;
        flatten("", &toml::Value::Table(table), &mut file_keys);
        b = b.add_source(config::File::from_str(&text, config::FileFormat::Toml));
    }
    b = b.add_source(
        config::Environment::with_prefix(ENV_PREFIX)
            .prefix_separator("__")
            .separator("__")
            .try_parsing(true)
            .source(Some(env_map.clone().into_iter().collect())),
    );
    let cfg: PlazaConfig = b.build()?.try_deserialize()?;
    cfg.validate()?;

    let mut prov = Provenance::new();
    let defaults: toml::Table = DEFAULTS_TOML
        .parse()
        .expect("embedded defaults parse (tested)");
    let mut keys = Vec::new();
    flatten("", &toml::Value::Table(defaults), &mut keys);
    for key in keys {
        let env_key = format!("PLAZA__{}", key.replace('.', "__").to_uppercase());
        let src = if env_map.contains_key(&env_key) {
            Source::Env
        } else if file_keys.contains(&key) {
            Source::File
        } else {
            Source::Default
        };
        prov.insert(key, src);
    }
    Ok((cfg, prov))
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
        let bad = |key, why| Err(ConfigError::Invalid { key, why });
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
        let g = &self.gateway;
        if !(64..=1 << 20).contains(&g.max_frame_bytes) {
            return bad("gateway.max_frame_bytes", "must be 64..=1048576");
        }
        if g.movement_hz == 0 || g.events_per_s == 0 {
            return bad("gateway.movement_hz", "rates must be > 0");
        }
        if g.outbound_queue < 2 {
            return bad("gateway.outbound_queue", "must be >= 2");
        }
        if g.max_connections == 0 {
            return bad("gateway.max_connections", "must be > 0");
        }
        let n = &self.node;
        if n.id.is_empty() {
            return bad("node.id", "must not be empty");
        }
        if n.lease_ttl_ms < 1000 || n.heartbeat_ttl_ms < 1000 {
            return bad("node.lease_ttl_ms", "leases must be >= 1000 ms");
        }
        if !(10..=3_600_000).contains(&self.directory.sweep_interval_ms) {
            return bad("directory.sweep_interval_ms", "must be 10..=3600000");
        }
        Ok(())
    }

    /// The room actor config these settings describe.
    pub fn room_actor(&self) -> plaza_room_actor::room::RoomActorConfig {
        use plaza_room_core::{CapacityTier, RoomConfig};
        let r = &self.room;
        let tier = match r.tier {
            Tier::Class => CapacityTier::Class,
            Tier::Stadium => CapacityTier::Stadium,
        };
        let mut room = RoomConfig::for_tier(tier);
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
        plaza_room_actor::room::RoomActorConfig {
            room,
            max_catch_up: r.max_catch_up,
            empty_grace: Duration::from_millis(r.empty_grace_ms),
            presence_ttl: Duration::from_millis(r.presence_ttl_ms),
        }
    }

    /// The node config these settings describe.
    pub fn node_config(&self) -> plaza_room_actor::NodeConfig {
        let n = &self.node;
        plaza_room_actor::NodeConfig {
            node_id: n.id.clone(),
            listen: n.listen,
            advertise: (!n.advertise.is_empty()).then(|| n.advertise.clone()),
            room: self.room_actor(),
            lease_ttl: Duration::from_millis(n.lease_ttl_ms),
            heartbeat_ttl: Duration::from_millis(n.heartbeat_ttl_ms),
            session_queue: n.session_queue,
            unique_id: true,
            event_log: (!n.event_log.is_empty()).then(|| n.event_log.clone().into()),
        }
    }

    /// The gateway config these settings describe.
    pub fn gateway_config(&self) -> plaza_gateway::GatewayConfig {
        let g = &self.gateway;
        plaza_gateway::GatewayConfig {
            listen: g.listen,
            limits: plaza_gateway::limits::Limits {
                max_frame_bytes: g.max_frame_bytes,
                movement_hz: g.movement_hz,
                events_per_s: g.events_per_s,
                events_burst: g.events_burst,
                handshake_deadline: Duration::from_millis(g.handshake_timeout_ms),
                outbound_queue: g.outbound_queue,
                slow_strikes: g.slow_strikes,
                slow_window: Duration::from_millis(g.slow_window_ms),
                resume_deadline: Duration::from_millis(g.resume_deadline_ms),
            },
            resume_ttl: Duration::from_millis(g.resume_ttl_ms),
            max_connections: g.max_connections,
            socket_send_buffer: (g.socket_send_buffer > 0).then_some(g.socket_send_buffer),
        }
    }
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
        out.push_str(&format!("{key} = {v}  # {}\n", source_name(src)));
    }
    out
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
    fn invalid_values_are_refused() {
        let env = BTreeMap::from([("PLAZA__ROOM__BROADCAST_HZ".to_owned(), "500".to_owned())]);
        let err = load(None, Some(env)).unwrap_err().to_string();
        assert!(err.contains("room.broadcast_hz"), "{err}");
    }
}
