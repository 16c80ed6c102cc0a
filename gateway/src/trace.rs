//! Trace context propagation into the room node: the current span's context travels in the
//! `RoomHost.Attach` request metadata (W3C `traceparent`), so a join is one trace across gateway
//! and node.

use opentelemetry::propagation::Injector;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

struct MetadataInjector<'a>(&'a mut tonic::metadata::MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
            tonic::metadata::MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(k, v);
        }
    }
}

/// Writes the current span's trace context into `req`'s metadata.
pub(crate) fn inject<T>(req: &mut tonic::Request<T>) {
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut MetadataInjector(req.metadata_mut()));
    });
}
