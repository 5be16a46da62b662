#!/usr/bin/env bash
# The soak (tests/soak.rs): create / scale / delete cycles of light machines under one manager
# (release build), its RSS, file descriptors, threads, tasks and Docker calls sampled throughout;
# then the plot (docs/soak.png) and the series (docs/soak.json).
#   hack/soak.sh                          # 30 minutes, 50 machines
#   SOAK_MINUTES=5 SOAK_MACHINES=20 hack/soak.sh
# Needs the plane (`hack/plane.sh up`); the CAPI managers should be down (the soak plays CAPI).
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
export CAPD_RS_KUBECONFIG="$KUBECONFIG_PATH"
export SOAK_MINUTES=${SOAK_MINUTES:-30} SOAK_MACHINES=${SOAK_MACHINES:-50}
status=0
cargo test --locked --release --test soak -- --ignored --nocapture || status=$?
json="$TARGET_DIR/tmp/soak/soak.json"
[[ -f $json ]] || die "the soak wrote no series ($json)"
cp "$json" docs/soak.json
cargo run --locked --release --quiet -p xtask -- soak-plot docs/soak.json docs/soak.png || status=$?
exit "$status"
