# syntax=docker/dockerfile:1
# The Plaza image: `plaza` (every role: up | node | gateway | config print) and `plaza-load`.
#
#   docker build -t plaza:0.1.0 .
#   docker run --rm -p 7777:7777 -p 9100:9100 plaza:0.1.0            # plaza up, one process
#   docker run --rm plaza:0.1.0 config print                          # effective configuration
#
# Build stage: the workspace's release binaries. protoc comes with the protoc-bin-vendored crate
# and the load tool's plot font with the dejavu crate, so no system packages are needed; the
# binaries link only glibc, libgcc_s and libm (the distroless "cc" base has them).
ARG RUST_VERSION=1.95
FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS build
# Debug info to strip from the binaries: "debuginfo" (small image, backtraces without line
# numbers) or "none" (keeps the release profile's line tables, ~2x larger).
ARG STRIP=debuginfo
ENV CARGO_PROFILE_RELEASE_STRIP=${STRIP} \
    CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --bin plaza --bin plaza-load \
    && mkdir -p /out \
    && cp target/release/plaza target/release/plaza-load /out/ \
    && /out/plaza --version

# Final stage: glibc + libgcc, no shell, no package manager; user 65532 ("nonroot").
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="plaza" \
      org.opencontainers.image.description="Plaza: shared realtime rooms (gateway, room node, load tool)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/plaza /out/plaza-load /usr/local/bin/
# Listen on every interface inside the container (the built-in defaults are loopback). The room
# node's gRPC address (PLAZA__NODE__LISTEN, e.g. 0.0.0.0:7100) and the address it advertises
# (PLAZA__NODE__ADVERTISE) depend on the deployment: the Helm chart sets them per pod.
ENV PLAZA__GATEWAY__LISTEN=0.0.0.0:7777 \
    PLAZA__ADMIN__LISTEN=0.0.0.0:9100
# 7777 client WebSocket (/v1/ws), 9100 admin (/healthz /readyz /metrics), 7100 node gRPC.
EXPOSE 7777 9100 7100
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/plaza"]
CMD ["up"]
