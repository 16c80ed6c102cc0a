//! The checks of [`PlazaConfig::validate`]: value ranges and rules between keys that types
//! alone do not express.

use super::{ConfigError, DEFAULTS_TOML, PlazaConfig};

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
}
