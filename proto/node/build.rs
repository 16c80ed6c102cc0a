//! Compiles `node.proto` with a vendored `protoc`; its `plaza.v1` messages are `plaza-proto`'s.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/plaza/node/v1/node.proto";
    println!("cargo:rerun-if-changed={proto}");
    println!("cargo:rerun-if-changed=../proto/plaza/v1/client.proto");
    let mut cfg = prost_build::Config::new();
    if std::env::var_os("PROTOC").is_none() {
        cfg.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    }
    cfg.bytes(["."]);
    // Every frame to a session travels as a `NodeOutbound` through a channel whose blocks hold
    // 32 of them; the ack (48 bytes, once per attach) sized the message at 64 bytes, boxed it
    // is 48 (the frame's `Bytes` and the detach are 32).
    cfg.boxed(".plaza.node.v1.NodeOutbound.body.ack");
    cfg.extern_path(".plaza.v1", "::plaza_proto::pb");
    tonic_prost_build::configure().compile_with_config(cfg, &[proto], &["proto", "../proto"])?;
    Ok(())
}
