#!/usr/bin/env bash
# Runs every fuzz target of every decoder of network input for a bounded time each.
#   scripts/fuzz.sh            # 60 s per target
#   FUZZ_SECONDS=600 scripts/fuzz.sh
#   FUZZ_ASAN=1 scripts/fuzz.sh  # with AddressSanitizer (slower; for unsafe code)
# Not part of .ci/run (it would take too long); run it before releases and after codec changes.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-60}
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --version 0.13.2 --locked
fi
# The proto decoders, then the gateway's token parsers (wallet tokens, JWTs, JWKS documents).
for crate in proto gateway; do
    pushd "$crate" >/dev/null
    for t in $(cargo fuzz list); do
        echo "=== fuzz $crate/$t for ${secs}s"
        if [ "${FUZZ_ASAN:-0}" = 1 ]; then
            RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" -- -max_total_time="$secs"
        else
            cargo fuzz run --sanitizer none "$t" -- -max_total_time="$secs"
        fi
    done
    popd >/dev/null
done
echo "fuzz: all targets ran ${secs}s without a crash"
