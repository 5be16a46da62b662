#!/usr/bin/env bash
# Side-by-side benchmark: capd-rs, upstream CAPD v$CAPD_UPSTREAM_VERSION and the floor (the Docker
# Engine alone, doing the same container creates, starts and execs) provision N light machines
# each, on the same plane and engine, in one run. The measuring is `cargo run -p xtask -- bench`
# (xtask/src/bench/); this script only prepares its inputs: the plane, the images, both managers.
#   hack/bench.sh              N = 1 10 50 100, then the real-node workload
#   hack/bench.sh 10 50        only these N
#   hack/bench.sh 10 nodes     N = 10, then real nodes: 1 control plane + 2 workers to all Nodes
#                              Ready, from the default template (both providers; no floor)
#   hack/bench.sh 100 clusters:10:100
#                              N = 100 in one Cluster, then the same 100 spread evenly over 10
#                              Clusters, each in a namespace of its own (remainder to the first)
#   hack/bench.sh nodes nodes:3+5
#                              real nodes 1 + 2, then 3 control planes + 5 workers (nodes:C+W, C
#                              odd: KCP refuses an even count with stacked etcd)
#   hack/bench.sh in-memory:100 in-memory:pairs:100
#                              in-memory machines (both providers; no floor), last: one cluster
#                              of 1 control plane + 99 workers, then 50 clusters of 1 + 1, each
#                              to all Machines Running (real CAPI core, CABPK and KCP)
# Settings (environment):
#   BENCH_SUBJECTS   any of floor,capd-rs,upstream (default: all three)
#   BENCH_ROUNDS     rounds per N (default 1); round r runs the subjects in row r of a Williams
#                    design (balanced at 6 rounds for three subjects, 2 for two), and each ratio
#                    is the median of the rounds' own ratios, with their range
#   BENCH_DROP_CACHES  1 (default): sync and drop the kernel's clean caches before each phase,
#                    so that each starts from the same state (see xtask/src/bench/process.rs)
#   BENCH_IDLE       seconds of steady state observed with the machines provisioned (default 20)
#   BENCH_FRESH_PLANE  1 (default): empty the plane first (hack/plane.sh down: etcd's data, and
#                    every container labelled capd-rs.test/run, go), so that a run does not pay
#                    for what earlier tests and runs left on it; 0 keeps the plane as it is
#   BENCH_RESUME     a partial.json (the work dir's, $TMPDIR/capd-rs-bench/, after each phase)
#                    of an unfinished run of the same command and committed code on this host:
#                    its phases are kept, the others run (a run longer than one sitting)
#   BENCH_OUT_DIR    where bench.json and bench.png go (default docs/); the Markdown table goes
#                    to target/bench.md and stdout
# Traffic: only 127.0.0.1 (plane apiserver, the managers' endpoints) and the containers created
# here. Containers and networks carry capd-rs.test/run=<run id> (upstream's: its cluster label,
# whose value is the run id); each run removes its own.
source "$(dirname "$0")/lib.sh"

ARGS=("$@")
((${#ARGS[@]})) || ARGS=(1 10 50 100 nodes)
NS_LIST=() NODE_SHAPES=() NODES=() IN_MEMORY=()
for n in "${ARGS[@]}"; do
  if [[ $n == in-memory:* ]]; then
    IN_MEMORY+=("${n#in-memory:}")  # xtask checks the shape and N
  elif [[ $n == clusters:* ]]; then
    NS_LIST+=("$n")  # xtask checks K and N
  elif [[ $n == nodes ]]; then
    NODE_SHAPES+=(1+2)
  elif [[ $n == nodes:* ]]; then
    NODE_SHAPES+=("${n#nodes:}")  # xtask checks C and W
  else
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, 'clusters:K:N', 'nodes', 'nodes:C+W' or 'in-memory:[pairs:]N', got '$n'"
    NS_LIST+=("$n")
  fi
done
((${#NODE_SHAPES[@]})) && NODES=(--real-nodes "$(IFS=,; echo "${NODE_SHAPES[*]}")"
  --nodes-clusterctl "$CAPI_BIN_DIR/clusterctl"
  --nodes-template "$REPO_ROOT/templates/cluster-template.yaml"
  --nodes-kubernetes-version "v$K8S_VERSION" --nodes-image "kindest/node:v$K8S_VERSION")
SUBJECTS=${BENCH_SUBJECTS:-floor,capd-rs,upstream}
OUT_DIR=${BENCH_OUT_DIR:-$REPO_ROOT/docs}
LIGHT_IMAGE=capd-rs/node:light
LB_IMAGE=kindest/haproxy:v20230606-42a2262b
# The light node as both providers accept it: upstream v1.14 waits for systemd's "Reached target
# Multi-User System" in the container log and for `crictl ps` to succeed before it bootstraps.
BENCH_IMAGE=capd-rs-bench/node:light
UPSTREAM_IMAGE=capd-rs-bench/capd-upstream:v$CAPD_UPSTREAM_VERSION
OWN_IMAGE=capd-rs/manager:dev

# The same in-memory load ran severalfold slower on a plane that had been through a session of
# tests than on one that had been through a single CI run (docs/performance.md, "Same plane").
if [[ ${BENCH_FRESH_PLANE:-1} == 1 ]]; then
  log "emptying the plane (BENCH_FRESH_PLANE=0 keeps it)"
  "$HACK_DIR/plane.sh" down >&2
fi
"$HACK_DIR/plane.sh" up >&2
# The real CAPI core (and CABPK/KCP) managers: they own the Clusters and Machines, as for a user,
# and their webhooks are registered with the plane.
"$HACK_DIR/capi.sh" up >&2
"$HACK_DIR/images.sh" >&2
((${#NODES[@]})) && "$HACK_DIR/node-image.sh" >&2
docker image inspect "$LB_IMAGE" >/dev/null 2>&1 || die "image $LB_IMAGE missing after hack/images.sh"
"$HACK_DIR/build-binaries.sh" capd-upstream >&2
UPSTREAM_CRDS=$("$HACK_DIR/build-binaries.sh" capd-upstream-crd-dir)

log "building $BENCH_IMAGE from $LIGHT_IMAGE"
docker build -q -t "$BENCH_IMAGE" --label capd-rs.test/run=bench - >/dev/null <<EOF
FROM $LIGHT_IMAGE
RUN printf '#!/bin/sh\nexit 0\n' > /usr/local/bin/crictl && chmod 0755 /usr/local/bin/crictl
CMD ["/bin/sh", "-c", "echo 'Reached target Multi-User System.'; trap 'exit 0' TERM INT; while :; do sleep 3600 & wait \$!; done"]
EOF

# Image sizes: ours as shipped (FROM scratch, static binary); upstream's binary in a scratch image,
# a lower bound of its real image (distroless/static adds about 2 MB, not reachable here).
log "building the manager images whose sizes the bench reports"
"$HACK_DIR/build-image.sh" "$OWN_IMAGE" >&2
ctx=$(mktemp -d)
cp "$CAPD_UPSTREAM_BIN_DIR/manager" "$ctx/manager"
printf 'FROM scratch\nCOPY manager /manager\nENTRYPOINT ["/manager"]\n' >"$ctx/Dockerfile"
docker build -q -t "$UPSTREAM_IMAGE" --label capd-rs.test/run=bench "$ctx" >/dev/null
rm -rf "$ctx"

# The manager measured is the binary in that image (static, release), staged by build-image.sh.
OWN_BIN="$REPO_ROOT/.tiltbuild/bin/manager"
[[ -x $OWN_BIN ]] || die "build-image.sh staged no $OWN_BIN"
log "building the bench (release)"
(cd "$REPO_ROOT" && cargo build --release -p xtask >&2)

# Each manager's API requests are counted at the API server, from its audit log.
AUDIT_LOG=$("$HACK_DIR/plane.sh" audit-log)

mkdir -p "$OUT_DIR" "$TARGET_DIR"
LIGHT=() DROP=()
[[ ${BENCH_DROP_CACHES:-1} == 1 ]] && DROP=(--drop-caches)
((${#NS_LIST[@]})) && LIGHT=(--n "$(IFS=,; echo "${NS_LIST[*]}")")
MEMORY=() RESUME=()
[[ -n ${BENCH_RESUME:-} ]] && RESUME=(--resume "$BENCH_RESUME")
# The code measured, recorded in the result (a resumed run must measure the same): the last
# commit that changed the manager, the bench or these scripts, -dirty with changes not committed.
CODE_PATHS=(src xtask config hack Cargo.toml Cargo.lock Dockerfile)
CODE=$(git -C "$REPO_ROOT" log -1 --format=%h -- "${CODE_PATHS[@]}" 2>/dev/null || true)
[[ -z $(git -C "$REPO_ROOT" status --porcelain -- "${CODE_PATHS[@]}" 2>/dev/null) ]] || CODE+=-dirty
((${#IN_MEMORY[@]})) && MEMORY=(--in-memory "$(IFS=,; echo "${IN_MEMORY[*]}")" --in-memory-version "v$K8S_VERSION")
"$TARGET_DIR/release/xtask" bench \
  --kubeconfig "$KUBECONFIG_PATH" \
  "${LIGHT[@]}" \
  --subjects "$SUBJECTS" \
  --rounds "${BENCH_ROUNDS:-1}" \
  "${DROP[@]}" \
  --capd-rs-manager "$OWN_BIN" \
  --upstream-manager "$CAPD_UPSTREAM_BIN_DIR/manager" \
  --upstream-version "v$CAPD_UPSTREAM_VERSION" \
  --code "$CODE" \
  --own-crds "$REPO_ROOT/config/crd/bases" \
  --upstream-crds "$UPSTREAM_CRDS" \
  --webhook-cert-dir "$PKI_DIR/webhook" \
  --image "$BENCH_IMAGE" \
  --lb-image "$LB_IMAGE" \
  --work-dir "${TMPDIR:-/tmp}/capd-rs-bench" \
  --idle-seconds "${BENCH_IDLE:-20}" \
  --manager-image "capd-rs=$OWN_IMAGE" \
  --manager-image "upstream=$UPSTREAM_IMAGE" \
  --command "${BENCH_FRESH_PLANE:+BENCH_FRESH_PLANE=$BENCH_FRESH_PLANE }${BENCH_ROUNDS:+BENCH_ROUNDS=$BENCH_ROUNDS }${BENCH_IDLE:+BENCH_IDLE=$BENCH_IDLE }hack/bench.sh ${ARGS[*]}" \
  "${NODES[@]}" \
  "${MEMORY[@]}" \
  "${RESUME[@]}" \
  --after-crd-swap "$HACK_DIR/capi.sh restart" \
  --audit-log "$AUDIT_LOG" \
  --json "$OUT_DIR/bench.json" \
  --png "$OUT_DIR/bench.png" \
  --markdown "$TARGET_DIR/bench.md"
