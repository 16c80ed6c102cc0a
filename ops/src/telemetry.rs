//! Telemetry setup: `tracing` to stderr (filter from `telemetry.log`, `RUST_LOG` overrides), and
//! OpenTelemetry OTLP/gRPC export of traces when `telemetry.otlp_endpoint` is set. The W3C trace
//! context propagator is installed so that a join's trace spans gateway and node (the gateway
//! injects the context into the `RoomHost.Attach` request metadata; the node extracts it).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::config::PlazaConfig;

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

/// Installs the global subscriber (once per process; later calls keep the first) and, if an
/// endpoint is configured, the OTLP exporter. Must run inside a tokio runtime when exporting.
pub fn init(cfg: &PlazaConfig, service: &str) -> anyhow::Result<Telemetry> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cfg.telemetry.log))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let endpoint = cfg.telemetry.otlp_endpoint.trim();
    if endpoint.is_empty() {
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .try_init();
        return Ok(Telemetry::default());
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service.to_owned())
                .build(),
        )
        .build();
    let tracer = provider.tracer("plaza");
    let otel = tracing_opentelemetry::layer().with_tracer(tracer);
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init();
    opentelemetry::global::set_tracer_provider(provider.clone());
    Ok(Telemetry {
        provider: Some(provider),
    })
}
