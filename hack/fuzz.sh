#!/usr/bin/env bash
# Build the cargo-fuzz targets of hack/fuzz and run each for a fixed budget, one after the other
# (libFuzzer, nightly toolchain; `cargo install cargo-fuzz --locked` once).
#   hack/fuzz.sh [seconds-per-target] [target...]
# Environment: FUZZ_SANITIZER (default none: the code under test is safe Rust; "address" also
# checks the unsafe code of dependencies, at about half the speed), FUZZ_TOOLCHAIN (default
# nightly). A crash leaves its input in hack/fuzz/artifacts/<target>/ and stops the script
# with a non-zero exit; the corpus grows in hack/fuzz/corpus/<target>/ (seeds in hack/fuzz/seeds/).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
toolchain=${FUZZ_TOOLCHAIN:-nightly}
sanitizer=${FUZZ_SANITIZER:-none}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(cloud_config ignition kubeconfig webhook_review)
fi
# cargo-fuzz's options go right after the subcommand: after `--` they would reach libFuzzer.
fuzz() { local cmd=$1; shift; cargo "+$toolchain" fuzz "$cmd" --fuzz-dir hack/fuzz --sanitizer "$sanitizer" "$@"; }
# One job: the machine is shared.
CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} fuzz build
for t in "${targets[@]}"; do
    mkdir -p "hack/fuzz/corpus/$t" "hack/fuzz/artifacts/$t"
    echo "==> $t for ${secs}s"
    # Bounds that turn unbounded memory into a finding: 1 GiB RSS, 256 MiB in one allocation;
    # 10 s for one input is a hang.
    fuzz run "$t" "hack/fuzz/corpus/$t" "hack/fuzz/seeds/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=1024 -malloc_limit_mb=256 -timeout=10 \
        -max_len=65536 -print_final_stats=1
done
