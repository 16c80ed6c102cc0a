/**
 * Plaza client SDK.
 *
 * # Layout
 * * `frame`: the snapshot-frame decoder ({@link FrameDecoder}), byte-identical to the Rust one.
 * * `compressed`: the 160-bit compressed movement message ({@link MovementCodec}).
 * * `quant`: quantized poses and conversions to world units.
 * * `gen/plaza/v1/client_pb`: the generated protobuf bindings of `plaza.v1` (u64 → bigint).
 */
export * from "./errors.js";
export * from "./quant.js";
export * from "./frame.js";
export * from "./compressed.js";
export { BitReader } from "./bits.js";
export * as pb from "./gen/plaza/v1/client_pb.js";
