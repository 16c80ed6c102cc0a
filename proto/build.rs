//! Compiles `proto/plaza/v1/client.proto` with a vendored `protoc`, so a fresh machine needs only
//! cargo. Messages only (prost): the inter-node service is `plaza-node-proto`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/plaza/v1/client.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let mut cfg = prost_build::Config::new();
    if std::env::var_os("PROTOC").is_none() {
        cfg.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    }
    cfg.bytes(["."]);
    cfg.compile_protos(&protos, &["proto"])?;
    Ok(())
}
