//! Telemetry setup: `tracing` to stderr and OpenTelemetry OTLP/gRPC export of traces.
//!
//! * **Logs**: `log.level` is a `tracing` filter (`RUST_LOG` wins when set), validated before
//!   anything starts ([`validate_filter`]: a typo such as `debugg` or `[[[` is an error naming
//!   the directive and where it came from, never a silent "log nothing"); `log.format` is `text`
//!   (ANSI colour only when stderr is a terminal and `NO_COLOR` is unset) or `json` (one JSON
//!   object per line: `timestamp`, `level`, `target`, the event's fields, the current `span`
//!   and the `spans` list with their fields).
//! * **Traces**: OpenTelemetry's environment conventions are honoured, configuration keys win
//!   when set ([`TraceSettings::resolve`]): `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
//!   `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//!   `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`, `OTEL_SDK_DISABLED`,
//!   `OTEL_TRACES_EXPORTER=none`. The resource always has `service.name`, `service.version`
//!   and `service.instance.id`. Which spans are exported does not depend on `log.level` (the
//!   log filter is a filter of the log output only): Plaza's `info` spans always are, and the
//!   sampler decides which traces are kept.
//!
//! The W3C trace context propagator is installed so that a join's trace spans gateway and node
//! (the gateway injects the context into the `RoomHost.Attach` request metadata; the node
//! extracts it).

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::config::{LogFormat, PlazaConfig};

/// Keeps the exporter alive; [`Telemetry::shutdown`] flushes it.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes and stops the trace exporter (bounded).
    pub fn shutdown(self) {
        if let Some(p) = self.provider {
            let _ = p.shutdown_with_timeout(std::time::Duration::from_secs(2));
        }
    }

    /// Flushes spans now (tests).
    pub fn flush(&self) {
        if let Some(p) = &self.provider {
            let _ = p.force_flush();
        }
    }
}

/// A refused telemetry setting, naming its source.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A log filter directive does not parse or names no level.
    #[error("{source_name}: bad log filter directive `{directive}`: {why}")]
    Filter {
        /// `log.level` or `RUST_LOG`.
        source_name: String,
        /// The offending directive.
        directive: String,
        /// Why.
        why: String,
    },
    /// A trace setting is invalid.
    #[error("{source_name}: {why}")]
    Trace {
        /// The key or environment variable.
        source_name: String,
        /// Why.
        why: String,
    },
}

const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// Checks a `tracing` filter strictly: the whole string must parse, and a bare word must be a
/// level or a plausible target (a word that looks like a misspelt level, such as `debugg` or
/// `warning`, is refused: `EnvFilter` would read it as "everything of target `debugg`" and log
/// nothing).
pub fn validate_filter(source_name: &str, filter: &str) -> Result<(), TelemetryError> {
    let bad = |directive: &str, why: String| TelemetryError::Filter {
        source_name: source_name.to_owned(),
        directive: directive.to_owned(),
        why,
    };
    if filter.trim().is_empty() {
        return Err(bad(filter, "empty filter".into()));
    }
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if directive.matches('[').count() != directive.matches(']').count()
            || directive.matches('{').count() != directive.matches('}').count()
        {
            return Err(bad(directive, "unbalanced brackets".into()));
        }
        EnvFilter::builder()
            .with_regex(false)
            .parse(directive)
            .map_err(|e| bad(directive, e.to_string()))?;
        let is_bare = !directive.contains(['=', '[', '{', ':']);
        if !is_bare {
            if let Some((_, level)) = directive.rsplit_once('=') {
                let level = level.trim().to_ascii_lowercase();
                if !LEVELS.contains(&level.as_str()) && level.parse::<u8>().is_err() {
                    return Err(bad(directive, format!("unknown level `{level}`")));
                }
            }
            continue;
        }
        let word = directive.to_ascii_lowercase();
        if LEVELS.contains(&word.as_str()) || word.parse::<u8>().is_ok() {
            continue;
        }
        if let Some(level) = LEVELS
            .iter()
            .find(|l| word.starts_with(**l) || l.starts_with(&word) || edit_distance(l, &word) <= 2)
        {
            return Err(bad(
                directive,
                format!(
                    "not a level (did you mean `{level}`?); levels are {}",
                    LEVELS.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The effective log filter and the name of where it came from (`RUST_LOG` wins).
fn log_filter(cfg: &PlazaConfig, env: &BTreeMap<String, String>) -> (String, String) {
    match env.get("RUST_LOG").filter(|v| !v.trim().is_empty()) {
        Some(v) => ("environment variable RUST_LOG".into(), v.clone()),
        None => ("log.level".into(), cfg.log.level.clone()),
    }
}

/// TLS of an `https://` OTLP endpoint: the CA file of `OTEL_EXPORTER_OTLP_CERTIFICATE`, else
/// the system's roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` are honoured); rustls with `ring`.
fn otlp_tls(settings: &TraceSettings) -> anyhow::Result<tonic::transport::ClientTlsConfig> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|e| anyhow::anyhow!("OTLP TLS file {}: {e}", p.display()))
    };
    let mut tls = tonic::transport::ClientTlsConfig::new();
    tls = match &settings.ca_certificate {
        Some(ca) => tls.ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?)),
        None => tls.with_native_roots(),
    };
    if let Some((c, k)) = &settings.client_identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(read(c)?, read(k)?));
    }
    Ok(tls)
}

/// Where traces go, as configuration and the OpenTelemetry environment say.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceSettings {
    /// The OTLP/gRPC endpoint; `None` = no export.
    pub endpoint: Option<String>,
    /// `service.name`.
    pub service_name: String,
    /// `service.instance.id`.
    pub instance_id: String,
    /// Other resource attributes (`OTEL_RESOURCE_ATTRIBUTES`, then `telemetry.resource_attributes`).
    pub attributes: BTreeMap<String, String>,
    /// The sampler name (OpenTelemetry spelling) and its argument.
    pub sampler: (String, Option<f64>),
    /// For an `https://` endpoint: the CA file to trust instead of the system's roots
    /// (`OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE`, else `OTEL_EXPORTER_OTLP_CERTIFICATE`).
    pub ca_certificate: Option<PathBuf>,
    /// For an `https://` endpoint: a client certificate and key file (mTLS;
    /// `OTEL_EXPORTER_OTLP_[TRACES_]CLIENT_CERTIFICATE` / `…_CLIENT_KEY`).
    pub client_identity: Option<(PathBuf, PathBuf)>,
}

impl TraceSettings {
    /// Resolves the settings: a non-empty configuration key wins over its `OTEL_*` variable;
    /// `default_service` names the role when neither sets a service name.
    pub fn resolve(
        cfg: &PlazaConfig,
        env: &BTreeMap<String, String>,
        default_service: &str,
    ) -> Result<Self, TelemetryError> {
        let get = |k: &str| env.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let t = &cfg.telemetry;
        let key = |v: &str| Some(v.trim()).filter(|v| !v.is_empty()).map(str::to_owned);
        let disabled = get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || get("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        let endpoint = key(&t.otlp_endpoint).or_else(|| {
            if disabled {
                return None;
            }
            get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .or_else(|| get("OTEL_EXPORTER_OTLP_ENDPOINT"))
                .map(str::to_owned)
        });
        if let Some(e) = &endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            let source_name = if key(&t.otlp_endpoint).is_some() {
                "telemetry.otlp_endpoint".to_owned()
            } else {
                "environment variable OTEL_EXPORTER_OTLP_ENDPOINT".to_owned()
            };
            return Err(TelemetryError::Trace {
                source_name,
                why: format!("`{e}` is not an http:// or https:// URL"),
            });
        }
        let mut attributes = BTreeMap::new();
        for (source_name, text) in [
            (
                "environment variable OTEL_RESOURCE_ATTRIBUTES",
                get("OTEL_RESOURCE_ATTRIBUTES").unwrap_or(""),
            ),
            (
                "telemetry.resource_attributes",
                t.resource_attributes.as_str(),
            ),
        ] {
            for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let Some((k, v)) = pair.split_once('=') else {
                    return Err(TelemetryError::Trace {
                        source_name: source_name.to_owned(),
                        why: format!("`{pair}` is not key=value"),
                    });
                };
                attributes.insert(k.trim().to_owned(), percent_decode(v.trim()));
            }
        }
        let service_name = key(&t.service_name)
            .or_else(|| get("OTEL_SERVICE_NAME").map(str::to_owned))
            .or_else(|| attributes.remove("service.name"))
            .unwrap_or_else(|| default_service.to_owned());
        attributes.remove("service.name");
        let instance_id = attributes
            .remove("service.instance.id")
            .unwrap_or_else(|| format!("{}-{}", host_name(env), std::process::id()));
        let (sampler_source, sampler) = match key(&t.traces_sampler) {
            Some(s) => ("telemetry.traces_sampler", s),
            None => (
                "environment variable OTEL_TRACES_SAMPLER",
                get("OTEL_TRACES_SAMPLER")
                    .unwrap_or("parentbased_always_on")
                    .to_owned(),
            ),
        };
        let sampler = sampler.to_ascii_lowercase();
        let arg_text = if t.traces_sampler_arg.trim().is_empty() {
            get("OTEL_TRACES_SAMPLER_ARG").map(str::to_owned)
        } else {
            Some(t.traces_sampler_arg.trim().to_owned())
        };
        let needs_ratio = matches!(
            sampler.as_str(),
            "traceidratio" | "parentbased_traceidratio"
        );
        let known = needs_ratio
            || matches!(
                sampler.as_str(),
                "always_on" | "always_off" | "parentbased_always_on" | "parentbased_always_off"
            );
        if !known {
            return Err(TelemetryError::Trace {
                source_name: sampler_source.to_owned(),
                why: format!(
                    "unknown sampler `{sampler}` (always_on, always_off, traceidratio, \
                     parentbased_always_on, parentbased_always_off, parentbased_traceidratio)"
                ),
            });
        }
        let arg = match (needs_ratio, arg_text) {
            (true, Some(a)) => match a.parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => Some(r),
                _ => {
                    return Err(TelemetryError::Trace {
                        source_name: "telemetry.traces_sampler_arg / OTEL_TRACES_SAMPLER_ARG"
                            .into(),
                        why: format!("`{a}` is not a ratio in 0..=1"),
                    });
                }
            },
            (true, None) => Some(1.0),
            (false, _) => None,
        };
        let file = |name: &str| {
            get(&format!("OTEL_EXPORTER_OTLP_TRACES_{name}"))
                .or_else(|| get(&format!("OTEL_EXPORTER_OTLP_{name}")))
                .map(PathBuf::from)
        };
        let ca_certificate = file("CERTIFICATE");
        let client_identity = match (file("CLIENT_CERTIFICATE"), file("CLIENT_KEY")) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => {
                return Err(TelemetryError::Trace {
                    source_name: "environment variable OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
                        .into(),
                    why: "set both OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and \
                          OTEL_EXPORTER_OTLP_CLIENT_KEY, or neither"
                        .into(),
                });
            }
        };
        Ok(Self {
            endpoint,
            service_name,
            instance_id,
            attributes,
            sampler: (sampler, arg),
            ca_certificate,
            client_identity,
        })
    }

    fn sdk_sampler(&self) -> Sampler {
        let ratio = self.sampler.1.unwrap_or(1.0);
        match self.sampler.0.as_str() {
            "always_on" => Sampler::AlwaysOn,
            "always_off" => Sampler::AlwaysOff,
            "traceidratio" => Sampler::TraceIdRatioBased(ratio),
            "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
            "parentbased_traceidratio" => {
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)))
            }
            _ => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        }
    }
}

fn host_name(env: &BTreeMap<String, String>) -> String {
    env.get("HOSTNAME")
        .cloned()
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "plaza".into())
}

/// `%XX` escapes of `OTEL_RESOURCE_ATTRIBUTES` values (W3C baggage octets).
fn percent_decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(hex) = std::str::from_utf8(&bytes[i + 1..i + 3])
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The environment variables telemetry reads.
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("OTEL_") || matches!(k.as_str(), "RUST_LOG" | "NO_COLOR" | "HOSTNAME")
        })
        .collect()
}

/// Checks everything [`init`] would refuse, without installing anything (`plaza config check`).
pub fn check(cfg: &PlazaConfig, env: &BTreeMap<String, String>) -> Result<(), TelemetryError> {
    let (source_name, filter) = log_filter(cfg, env);
    validate_filter(&source_name, &filter)?;
    TraceSettings::resolve(cfg, env, "plaza").map(|_| ())
}

/// What becomes an OpenTelemetry span: Plaza's own spans at `info` and above (`session`,
/// `gateway.attach`, `node.attach`, `room`), other crates' only at `warn` (the exporter's own
/// gRPC calls never trace themselves). Independent of `log.level`.
fn trace_filter() -> tracing_subscriber::filter::Targets {
    tracing_subscriber::filter::Targets::new()
        .with_target("plaza", tracing::Level::INFO)
        .with_default(tracing::Level::WARN)
}

/// Installs the global subscriber (once per process; later calls keep the first) and, if an
/// endpoint is configured, the OTLP exporter. Must run inside a tokio runtime when exporting.
pub fn init(cfg: &PlazaConfig, service: &str) -> anyhow::Result<Telemetry> {
    init_with_env(cfg, service, &process_env())
}

/// [`init`] with an explicit environment (tests).
pub fn init_with_env(
    cfg: &PlazaConfig,
    service: &str,
    env: &BTreeMap<String, String>,
) -> anyhow::Result<Telemetry> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let (source_name, filter_text) = log_filter(cfg, env);
    validate_filter(&source_name, &filter_text)?;
    let filter = EnvFilter::builder()
        .parse(&filter_text)
        .map_err(|e| anyhow::anyhow!("{source_name}: {e}"))?;
    let settings = TraceSettings::resolve(cfg, env, service)?;
    let ansi = std::io::stderr().is_terminal() && !env.contains_key("NO_COLOR");
    // The log filter applies to the log output only (a per-layer filter): traces follow the
    // sampler, so `log.level = "warn"` keeps exporting the spans of joins and attaches.
    let fmt = match cfg.log.format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_current_span(true)
            .with_span_list(true)
            .flatten_event(true)
            .with_filter(filter)
            .boxed(),
    };
    let Some(endpoint) = settings.endpoint.clone() else {
        let _ = tracing_subscriber::registry().with(fmt).try_init();
        return Ok(Telemetry::default());
    };
    let https = endpoint.starts_with("https://");
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint);
    if https {
        builder = builder.with_tls_config(otlp_tls(&settings)?);
    }
    let exporter = builder.build()?;
    let mut attributes = vec![
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("service.instance.id", settings.instance_id.clone()),
    ];
    attributes.extend(
        settings
            .attributes
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
    );
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(settings.sdk_sampler())
        .with_resource(
            opentelemetry_sdk::Resource::builder_empty()
                .with_service_name(settings.service_name.clone())
                .with_attributes(attributes)
                .build(),
        )
        .build();
    let tracer = provider.tracer("plaza");
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(trace_filter());
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init();
    opentelemetry::global::set_tracer_provider(provider.clone());
    Ok(Telemetry {
        provider: Some(provider),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_with_typos_are_refused_by_directive() {
        for ok in [
            "info",
            "warn,plaza_gateway=debug",
            "plaza_room_actor::room=trace",
            "tonic",
            "off",
            "h2=warn,info",
        ] {
            validate_filter("log.level", ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, directive) in [
            ("debugg", "debugg"),
            ("warning", "warning"),
            ("info,infoo", "infoo"),
            ("[[[", "[[["),
            ("plaza_gateway=loud", "plaza_gateway=loud"),
            ("", ""),
        ] {
            let err = validate_filter("log.level", bad).unwrap_err().to_string();
            assert!(
                err.contains(&format!("`{directive}`")) && err.starts_with("log.level"),
                "{bad}: {err}"
            );
        }
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn otel_environment_is_honoured_and_config_keys_win() {
        let mut cfg = PlazaConfig::defaults();
        let none = TraceSettings::resolve(&cfg, &env(&[]), "plaza").unwrap();
        assert_eq!(none.endpoint, None);
        assert_eq!(none.service_name, "plaza");
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_SERVICE_NAME", "edge"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=prod,team=a%2Cb",
            ),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ("HOSTNAME", "pod-7"),
        ]);
        let s = TraceSettings::resolve(&cfg, &e, "plaza").unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:4317"));
        assert_eq!(s.service_name, "edge");
        assert_eq!(s.attributes["deployment.environment"], "prod");
        assert_eq!(s.attributes["team"], "a,b");
        assert_eq!(s.sampler, ("parentbased_traceidratio".into(), Some(0.25)));
        assert!(s.instance_id.starts_with("pod-7-"));
        cfg.telemetry.otlp_endpoint = "http://collector:4317".into();
        cfg.telemetry.service_name = "mine".into();
        cfg.telemetry.traces_sampler = "always_off".into();
        let s = TraceSettings::resolve(&cfg, &e, "plaza").unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("http://collector:4317"));
        assert_eq!(s.service_name, "mine");
        assert_eq!(s.sampler, ("always_off".into(), None));
        let off = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_SDK_DISABLED", "true"),
        ]);
        let s = TraceSettings::resolve(&PlazaConfig::defaults(), &off, "plaza").unwrap();
        assert_eq!(s.endpoint, None);
    }

    #[test]
    fn bad_otel_values_name_their_source() {
        let cfg = PlazaConfig::defaults();
        let err = TraceSettings::resolve(&cfg, &env(&[("OTEL_TRACES_SAMPLER", "sometimes")]), "p")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("OTEL_TRACES_SAMPLER") && err.contains("sometimes"),
            "{err}"
        );
        let err = TraceSettings::resolve(
            &cfg,
            &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4317")]),
            "p",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{err}");
    }
}
