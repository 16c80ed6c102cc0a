//! Compiles `proto/*.proto` with a vendored `protoc`, so a fresh machine needs only cargo.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/plaza/v1/client.proto",
        "proto/plaza/node/v1/node.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let mut cfg = prost_build::Config::new();
    if std::env::var_os("PROTOC").is_none() {
        cfg.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    }
    cfg.bytes(["."]);
    tonic_prost_build::configure().compile_with_config(cfg, &protos, &["proto"])?;
    Ok(())
}
