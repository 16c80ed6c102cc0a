/**
 * Plaza client SDK.
 *
 * # Layout
 * * `frame`: the snapshot-frame decoder ({@link FrameDecoder}), byte-identical to the Rust one.
 * * `compressed`: the 160-bit compressed movement message ({@link MovementCodec}).
 * * `quant`: quantized poses and conversions to world units.
 * * `client`: {@link PlazaClient}, connection management and the room as a client sees it.
 * * `smoothing`: the remote-avatar pipeline ({@link Smoother}), the same as plaza-client's.
 * * `net`: close codes, reconnect backoff, net stats, the link conditioner.
 * * `gen/plaza/v1/client_pb`: the generated protobuf bindings of `plaza.v1` (u64 → bigint).
 */
export * from "./errors.js";
export * from "./quant.js";
export * from "./frame.js";
export * from "./compressed.js";
export { BitReader } from "./bits.js";
export * as pb from "./gen/plaza/v1/client_pb.js";
export * from "./client.js";
export * from "./net.js";
export { Emitter } from "./events.js";
export * from "./smoothing.js";
export * from "./pacer.js";
export * from "./replicas.js";
