//! Writes the shared smoothing trace: `cargo run -p plaza-client --example smoothing_trace
//! [-- PATH]` (default `fixtures/smoothing/trace.json` under the repository root).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os().nth(1).map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(plaza_client::trace::TRACE_PATH)
        },
        PathBuf::from,
    );
    let tr = plaza_client::trace::generate();
    std::fs::write(&path, plaza_client::trace::to_text(&tr)?)?;
    for c in &tr.cases {
        println!(
            "{}: {} outputs, stats {:?}",
            c.name,
            c.outputs.len(),
            c.stats
        );
    }
    println!("{} inputs -> {}", tr.inputs.len(), path.display());
    Ok(())
}
