#!/usr/bin/env bash
# The fault matrix (tests/faults.rs), all of it: every fault against a running cluster of light
# machines, then the table (fault -> time to act on a new object -> time to Ready -> what was
# lost, duplicated or leaked -> what the user sees). hack/test.sh runs the fast faults only.
#   hack/faults.sh                 # all faults (about 5 minutes)
#   hack/faults.sh --fast          # the fast ones only (hack/test.sh)
#   hack/faults.sh docker_engine   # the faults whose test name matches
# Needs the plane (`hack/plane.sh up`) and the engine started by hack/docker-engine.sh (faults
# restart the API server, etcd and the engine). Rows land in $TARGET_DIR/tmp/faults.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
export CAPD_RS_KUBECONFIG="$KUBECONFIG_PATH"
rows="$TARGET_DIR/tmp/faults"
rm -rf "$rows"
# One at a time: each fault restarts something every test shares. Failures still print a table.
which=(--include-ignored)
if [[ ${1:-} == --fast ]]; then which=(); shift; fi
status=0
cargo test --locked --test faults -- "${which[@]}" --test-threads=1 --nocapture "$@" || status=$?
cargo run --locked --quiet -p xtask -- faults-table "$rows" || status=$?
exit "$status"
