#!/usr/bin/env bash
# Upstream Cluster API's own e2e specs (sigs.k8s.io/cluster-api/test/e2e v$CAPI_VERSION, from the
# Go module proxy) against capd-rs, on a kind management cluster of hack/kind.sh, or one made by
# upstream's framework (E2E_KIND=framework). The logic is the Go suite in hack/upstream-e2e/ (the
# suite: suite_test.go and bootstrap_test.go; the specs: specs_test.go); this script builds it,
# brings the cluster up (or has the suite do it), runs it and tears down what it made.
#   hack/upstream-e2e.sh [run] [LABEL-FILTER]   default filter: quick-start
#   hack/upstream-e2e.sh build                  only compile the suite (cached by a hash of its inputs)
#   hack/upstream-e2e.sh plan [LABEL-FILTER]    the specs a run would select and what it would prepare
#   hack/upstream-e2e.sh down                   delete the kind cluster and its network
# Labels (Ginkgo label filter syntax, e.g. 'quick-start || md-scale', or 'all'):
#   quick-start               QuickStartSpec, upstream's default flavor (Dev* kinds, KCP, MachineDeployment, CRS),
#                             with upstream's owner-reference, finalizer and resourceVersion checks
#   quick-start-clusterclass  QuickStartSpec, flavor topology (ClusterClass quick-start)
#   md-scale                  MachineDeploymentScaleSpec (1 -> 3 -> 1 workers)
#   kcp-scale                 QuickStartSpec + ScaleAndWaitControlPlane 1 -> 3 -> 1
#   machine-pool              MachinePoolSpec, upstream's machine-pool flavor
#   self-hosted, self-hosted-ha, self-hosted-single-node
#                             SelfHostedSpec, upstream's three forms (clusterctl init on the workload
#                             cluster, move onto it, upgrade v$UPGRADE_FROM -> v$K8S_VERSION, move back)
#   cluster-upgrade, cluster-upgrade-ha, cluster-upgrade-ha-scale-in
#                             ClusterUpgradeConformanceSpec without conformance, upstream's three
#   quick-start-ignition, quick-start-no-workers, kcp-remediation, md-remediation, kcp-adoption,
#   node-drain, cluster-deletion   upstream's specs of those names, with upstream's inputs
#   quick-start-ipv6          QuickStartSpec, flavor ipv6 (IPv6-only workload cluster)
#   quick-start-dualstack-ipv4-primary, quick-start-dualstack-ipv6-primary   QuickStartSpec, flavors
#                             topology-dualstack-*, then upstream's kubetest [Feature:IPv6DualStack]
#                             run, whose conformance image cannot be pulled here: they fail there
#   A filter selecting an ipv6 or dualstack spec (or 'all') makes a new kind cluster dual-stack
#   (KIND_IPV6=1, hack/kind.sh); KIND_IPV6=0 or 1 set by hand wins.
#   quick-start-v1beta1-clusterclass  QuickStartSpec, flavor topology-runtimesdk-v1beta1: the
#                             ClusterClass's patches come from upstream's test runtime extension
#                             (built by hack/kind-providers.sh build, installed by the suite's
#                             clusterctl init in every run)
#   clusterclass-changes, clusterclass-rollout, scale, in-place-update,
#   cluster-upgrade-runtimesdk, cluster-upgrade-runtimesdk-cross-ns
#                             upstream's specs of those names on its in-memory flavors
#                             (in-memory-topology, in-memory-scale), on capd-rs's in-memory
#                             backend as its Deployment serves it by default
# Environment: E2E_KIND, who makes the kind management cluster:
#   script     (default) hack/kind.sh up, then hack/kind-providers.sh load; the suite gets its
#              kubeconfig and talks to no Docker Engine (no node logs in the artifacts)
#   framework  the suite, as upstream's CI does: bootstrap.CreateKindBootstrapClusterAndLoadImages
#              of upstream's framework (node image kindest/node for config.yaml's
#              KUBERNETES_VERSION_MANAGEMENT, its IP_FAMILY `dual`, config.yaml's images loaded from
#              the local engine, nothing pulled), on the labelled network of `hack/kind.sh network`;
#              the framework's DockerLogCollector writes every Machine's node logs to
#              ARTIFACTS/clusters/<cluster>/machines/<machine>/ and the management node's to
#              ARTIFACTS/clusters/bootstrap/machines/; the suite deletes the cluster at the end
#              (KEEP_CLUSTER=1: upstream's -e2e.skip-resource-cleanup, which keeps the workload
#              clusters too). KIND_CLUSTER must be config.yaml's managementClusterName (capd-e2e).
# KIND_CLUSTER (default capd-e2e), KIND_EXPERIMENTAL_DOCKER_NETWORK (default capd-e2e;
# workload containers join it too), CAPD_IMAGE (default docker.io/capd-rs/manager:e2e, rebuilt from
# this tree unless CAPD_IMAGE_REBUILD=false), KEEP_CLUSTER=1 (keep the kind cluster afterwards),
# ARTIFACTS (default $CACHE_DIR/upstream-e2e/<time>, the last 5 kept: logs, resource dumps, the
# Ginkgo report), E2E_ARGS (more arguments for the suite, e.g. -e2e.skip-resource-cleanup or
# -ginkgo.focus=REGEXP; the -ginkgo.* ones only with one process), E2E_PROCS (default 1: the
# specs in that many parallel Ginkgo processes sharing the management cluster, run by Ginkgo's CLI), KUBERNETES_VERSION (the workload clusters' version instead of
# config.yaml's, e.g. v1.36.3 for kcp-adoption; the framework reads it from the environment
# first; its node image is built here, for the versions hack/lib.sh's kubeadm_deps knows).
# hack/test.sh runs three specs (QuickStart, QuickStart with ClusterClass, MachineDeployment
# remediation) in three processes on the framework's cluster; `run all` is by hand.
source "$(dirname "$0")/lib.sh"

export KIND_CLUSTER=${KIND_CLUSTER:-capd-e2e}
export KIND_EXPERIMENTAL_DOCKER_NETWORK=${KIND_EXPERIMENTAL_DOCKER_NETWORK:-capd-e2e}
export CAPD_DOCKER_NETWORK=$KIND_EXPERIMENTAL_DOCKER_NETWORK
export CAPD_IMAGE=${CAPD_IMAGE:-docker.io/capd-rs/manager:e2e}
SUITE_DIR="$HACK_DIR/upstream-e2e"
SUITE_BIN_DIR="$BIN_DIR/upstream-e2e-v$CAPI_VERSION"
KIND_DIR="$CACHE_DIR/kind/$KIND_CLUSTER"
KIND="$BIN_DIR/kind-v$KIND_VERSION/kind"
# Who makes the kind management cluster: hack/kind.sh (script) or upstream's framework (framework).
E2E_KIND=${E2E_KIND:-script}

# build: the suite's test binary, named by a hash of everything it is compiled from; under a build
# lock, as hack/test.sh compiles it in the background before the step that runs it.
build() { locked "upstream-e2e-v$CAPI_VERSION" compile_suite; }
compile_suite() {
  local key bin
  key=$( { cat "$SUITE_DIR"/go.mod "$SUITE_DIR"/go.sum "$SUITE_DIR"/*.go; go version; } | sha256sum | cut -c1-16)
  bin="$SUITE_BIN_DIR/upstream-e2e-$key.test"
  if [[ -x $bin ]]; then log "upstream e2e suite cached ($bin)" >&2; echo "$bin"; return; fi
  log "compiling the upstream e2e suite (sigs.k8s.io/cluster-api/test v$CAPI_VERSION; cold: ~10 min)" >&2
  mkdir -p "$SUITE_BIN_DIR"
  local t0=$SECONDS
  (cd "$SUITE_DIR" && go test -c -tags e2e -o "$bin.tmp" .) >&2
  mv "$bin.tmp" "$bin"
  # Keep the 3 newest: worktrees that run the suite side by side each have their own binary here,
  # and deleting all others removed one that another run was about to execute.
  find "$SUITE_BIN_DIR" -maxdepth 1 -name 'upstream-e2e-*.test' -printf '%T@ %p\n' | sort -rn | tail -n +4 | cut -d' ' -f2- | xargs -r rm -f
  log "compiled $bin in $((SECONDS - t0))s" >&2
  echo "$bin"
}

# ginkgo_cli: Ginkgo's CLI at the version the suite's go.mod requires (Go module proxy), which
# runs the suite binary in E2E_PROCS parallel processes. Cached by version, built under a lock.
ginkgo_cli() { locked ginkgo build_ginkgo_cli; }
build_ginkgo_cli() {
  local version bin
  version=$(sed -n 's|^\s*github.com/onsi/ginkgo/v2 \(v[^ ]*\).*|\1|p' "$SUITE_DIR/go.mod")
  [[ -n $version ]] || die "no github.com/onsi/ginkgo/v2 in $SUITE_DIR/go.mod"
  bin="$BIN_DIR/ginkgo-$version/ginkgo"
  if [[ ! -x $bin ]]; then
    log "building Ginkgo's CLI $version (Go module proxy)" >&2
    mkdir -p "$(dirname "$bin")"
    (cd /tmp && GOBIN="$(dirname "$bin")" CGO_ENABLED=0 go install "github.com/onsi/ginkgo/v2/ginkgo@$version") >&2
  fi
  echo "$bin"
}

# upstream_e2e_dir: test/e2e of the test module of CAPI v$CAPI_VERSION in the Go module cache.
upstream_e2e_dir() {
  local dir
  dir=$(cd /tmp && go mod download -json "sigs.k8s.io/cluster-api/test@v$CAPI_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  echo "$dir/e2e"
}

# upstream_flavors <dir>: upstream's own flavors, as upstream's Makefile renders them: every
# folder of test/e2e/data/infrastructure-docker/main in the test module of CAPI v$CAPI_VERSION
# (Go module cache) built with kustomize (kubectl's, v5) into <dir>/<folder>.yaml, the two steps
# of kcp-adoption joined by a document separator, and the plain ClusterClass files copied.
# Nothing is edited: what an offline host forces is set through variables (config.yaml,
# "Substitutions").
upstream_flavors() {
  local out=$1 data f name
  data="$(upstream_e2e_dir)/data/infrastructure-docker/main"
  [[ -d $data ]] || die "no $data (go mod download sigs.k8s.io/cluster-api/test@v$CAPI_VERSION)"
  mkdir -p "$out"
  kz() { "$KUBECTL" kustomize --load-restrictor LoadRestrictionsNone "$1"; }
  for f in "$data"/*/; do
    name=$(basename "$f")
    [[ $name == bases ]] && continue  # kustomize bases, not flavors
    if [[ -f $f/kustomization.yaml ]]; then
      kz "$f" > "$out/$name.yaml"
    elif [[ -f $f/step1/kustomization.yaml ]]; then
      { kz "$f/step1"; echo "---"; kz "$f/step2"; } > "$out/$name.yaml"
    else
      die "$f: neither a kustomization nor step1/step2"
    fi
  done
  cp "$data"/*.yaml "$out/"
  # The CNI manifest the ClusterResourceSet of every flavor applies: podnet, baked into the node
  # image (kindnetd's image cannot be built here), with the tag hack/node-image.sh gives it.
  sed "s|@PODNET_IMAGE@|capd-rs/podnet:$CAPD_VERSION|g" "$HACK_DIR/node-image/podnet.yaml" > "$out/cni-podnet.yaml"
  log "rendered $(find "$out" -name 'cluster*.yaml' | wc -l) upstream flavors and ClusterClasses into $out"
}

# upstream_test_extension <dir>: upstream's test runtime extension as upstream's e2e config
# installs it (provider test-extension, type RuntimeExtensionProvider): test/extension/config/default
# of the test module rendered with kustomize into <dir>/components.yaml, unchanged (its image,
# gcr.io/k8s-staging-cluster-api/test-extension:main, is the one hack/kind-providers.sh builds and
# loads), and the metadata.yaml upstream gives it (e2e/data/shared/main).
upstream_test_extension() {
  local out=$1 mod
  mod=$(cd /tmp && go mod download -json "sigs.k8s.io/cluster-api/test@v$CAPI_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [[ -d $mod/extension/config/default ]] || die "no $mod/extension/config/default (go mod download sigs.k8s.io/cluster-api/test@v$CAPI_VERSION)"
  mkdir -p "$out"
  "$KUBECTL" kustomize "$mod/extension/config/default" > "$out/components.yaml"
  cp "$mod/e2e/data/shared/main/metadata.yaml" "$out/metadata.yaml"
  log "rendered upstream's test extension into $out"
}

# down: the kind cluster, then workload containers a failed or interrupted spec left on the
# network (only on a network of hack/kind.sh's own, never the shared `kind` one), then the network.
down() {
  "$HACK_DIR/kind.sh" down
  local net=$KIND_EXPERIMENTAL_DOCKER_NETWORK ids
  if [[ $net != kind ]] && docker network ls -q --filter "label=capd-rs.kind/network=$net" | grep -q .; then
    ids=$(docker ps -aq --filter "network=$net" --filter label=io.x-k8s.kind.cluster)
    if [[ -n $ids ]]; then
      log "removing $(wc -w <<<"$ids") leftover workload containers on $net"
      # shellcheck disable=SC2086  # one argument per container id
      docker rm -f -v $ids >/dev/null  # -v: their anonymous /var volumes too
      "$HACK_DIR/kind.sh" down
    fi
  fi
}

# grep without -q: see hack/kind.sh (kind dies of SIGPIPE otherwise).
kind_cluster_exists() { [[ -x $KIND ]] && "$KIND" get clusters 2>/dev/null | grep -x "$KIND_CLUSTER" >/dev/null; }

# framework_cluster_prepare: what E2E_KIND=framework needs before the suite makes the cluster.
# - The cluster's name is config.yaml's managementClusterName (the framework takes it from there);
#   KIND_CLUSTER must agree, since the locks, `down` and the kubeconfig go by KIND_CLUSTER.
# - No cluster of that name may exist (kind would refuse to create it).
# - The kind network: the kind library puts the node on KIND_EXPERIMENTAL_DOCKER_NETWORK (exported
#   above), which workload containers join too; it is ours and labelled, as hack/kind.sh makes it
#   (so that `down` removes it and the leftovers on it, never those on the shared `kind` network).
#   The framework makes the cluster with config.yaml's IP_FAMILY, upstream's `dual`, as upstream's
#   CI does: the network gets an IPv6 subnet too (KIND_IPV6=1).
framework_cluster_prepare() {
  local name
  name=$(sed -n 's/^managementClusterName: *//p' "$SUITE_DIR/config.yaml")
  [[ $KIND_CLUSTER == "$name" ]] ||
    die "E2E_KIND=framework: the framework names the cluster $name (config.yaml managementClusterName), not KIND_CLUSTER=$KIND_CLUSTER"
  ! kind_cluster_exists || die "E2E_KIND=framework: a kind cluster $KIND_CLUSTER exists; hack/upstream-e2e.sh down first"
  [[ ${KIND_IPV6:-1} == 1 ]] ||
    die "E2E_KIND=framework: the framework's cluster is dual-stack (config.yaml IP_FAMILY), KIND_IPV6=0 does not apply"
  KIND_IPV6=1 "$HACK_DIR/kind.sh" network
}

# summary <artifacts>: the Markdown table of every upstream Describe with this run's outcome
# (xtask e2e-report, from the Ginkgo JSON report), written to <artifacts>/report.md.
summary() {
  local dir=$1
  [[ -f $dir/report.json ]] || { log "no report at $dir/report.json"; return; }
  (cd "$REPO_ROOT" && cargo run -q --locked -p xtask -- e2e-report "$dir/report.json" "$dir/report.md" \
    --heading "## Upstream e2e specs against capd-rs ($(date -u +%F), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))") || true
}

# node_image_of <variable> <version>: the node image of a workload version other than
# $K8S_VERSION's, with the etcd and CoreDNS its kubeadm deploys (hack/lib.sh kubeadm_deps).
node_image_of() {
  local what=$1 v=${2#v} deps
  [[ -n $v ]] || die "$what: no version"
  [[ $v == "$K8S_VERSION" ]] && return
  deps=$(kubeadm_deps "$v") ||
    die "$what=v$v: no etcd and CoreDNS versions for it in hack/lib.sh (kubeadm_deps)"
  K8S_VERSION=$v ETCD_VERSION=${deps% *} COREDNS_VERSION=${deps#* } "$HACK_DIR/node-image.sh"
}

# selected_labels <suite binary> <filter> <dir>: the labels the filter selects, one per line,
# from a Ginkgo dry run of the suite (nothing runs, nothing is contacted).
selected_labels() {
  local bin=$1 filter=$2 dir=$3
  mkdir -p "$dir"
  (cd "$SUITE_DIR" && "$bin" -ginkgo.dry-run -ginkgo.label-filter "$filter" \
    -ginkgo.json-report "$dir/report.json" -e2e.artifacts-folder "$dir") > "$dir/run.log" 2>&1 ||
    die "the label filter '$filter' does not parse, or the suite's dry run failed ($dir/run.log)"
  (cd "$REPO_ROOT" && cargo run -q --locked -p xtask -- e2e-selected "$dir/report.json")
}

# needs <selected labels> <filter>: what a run of those specs needs, as NEED_* (0 or 1), logged.
needs() {
  local selected=$1 filter=$2
  [[ -n $selected ]] || die "the label filter '$filter' selects no spec"
  # The IPv6 and dual-stack specs need a dual-stack kind cluster and network (hack/kind.sh
  # KIND_IPV6); the others keep IPv4-only unless KIND_IPV6=1 is given.
  NEED_DUAL_STACK=0 NEED_UPGRADE_IMAGE=0 NEED_ADOPTION_IMAGE=0
  grep -qE 'ipv6|dualstack' <<<"$selected" && NEED_DUAL_STACK=1
  # The upgrade specs on Docker start from a second node image (config.yaml's
  # KUBERNETES_VERSION_UPGRADE_FROM; cold, 15-20 minutes), the in-memory RuntimeSDK ones need none.
  grep -qxE 'cluster-upgrade(-ha(-scale-in)?)?|self-hosted(-ha|-single-node)?|kcp-infra-adoption' \
    <<<"$selected" && NEED_UPGRADE_IMAGE=1
  # The adoption specs run at config.yaml's KUBERNETES_VERSION_ADOPTION.
  grep -qxE 'kcp-(infra-)?adoption' <<<"$selected" && NEED_ADOPTION_IMAGE=1
  log "'${filter:-all}' selects $(wc -l <<<"$selected") specs: $(tr '\n' ' ' <<<"$selected")"
  log "needs: dual-stack kind cluster $NEED_DUAL_STACK, upgrade node image $NEED_UPGRADE_IMAGE, adoption node image $NEED_ADOPTION_IMAGE"
}

# plan [FILTER]: what a run would select and prepare, without preparing or running anything.
plan() {
  local filter=${1:-quick-start} dir
  [[ $filter == all ]] && filter=''
  dir=$(mktemp -d)
  needs "$(selected_labels "$(build)" "$filter" "$dir")" "$filter"
  rm -rf "$dir"
}

run() {
  local filter=${1:-quick-start} bin t0=$SECONDS selected
  [[ $filter == all ]] && filter=''
  local artifacts=${ARTIFACTS:-$CACHE_DIR/upstream-e2e/$(date +%Y%m%d-%H%M%S)}
  mkdir -p "$artifacts"
  bin=$(build)
  # The run's own link to the suite binary, made at once: the cached file may be pruned by another
  # worktree's build meanwhile (see build); removed after the run so old artifacts keep no binary.
  ln -f "$bin" "$artifacts/suite.test" 2>/dev/null || cp "$bin" "$artifacts/suite.test"
  bin=$artifacts/suite.test
  # What the run needs is decided from the labels the filter selects, so that negations
  # ('!kcp-adoption') and regular expressions ('/runtimesdk/') prepare exactly what runs.
  selected=$(selected_labels "$bin" "$filter" "$artifacts/dry-run")
  needs "$selected" "$filter"
  [[ -z ${KIND_IPV6:-} && $NEED_DUAL_STACK == 1 ]] && export KIND_IPV6=1
  # The upgrade image's kube-proxy (loaded on this engine by its build) goes into every node
  # through DOCKER_PRELOAD_IMAGES (config.yaml says why).
  local preload='[]'
  if [[ $NEED_UPGRADE_IMAGE == 1 ]]; then
    K8S_VERSION=$UPGRADE_FROM ETCD_VERSION=$UPGRADE_ETCD COREDNS_VERSION=$UPGRADE_COREDNS \
      "$HACK_DIR/node-image.sh"
    preload="[\"registry.k8s.io/kube-proxy:v$UPGRADE_FROM\"]"
    docker image inspect "registry.k8s.io/kube-proxy:v$UPGRADE_FROM" >/dev/null 2>&1 ||
      die "registry.k8s.io/kube-proxy:v$UPGRADE_FROM is not on this engine after building its node image"
  fi
  if [[ -n ${KUBERNETES_VERSION:-} ]]; then
    node_image_of KUBERNETES_VERSION "$KUBERNETES_VERSION"
  elif [[ $NEED_ADOPTION_IMAGE == 1 ]]; then
    # The adoption specs' own version (config.yaml KUBERNETES_VERSION_ADOPTION says why).
    node_image_of KUBERNETES_VERSION_ADOPTION \
      "$(sed -n 's/^ *KUBERNETES_VERSION_ADOPTION: *//p' "$SUITE_DIR/config.yaml")"
  fi
  "$HACK_DIR/kind-providers.sh" build
  local cluster_args
  if [[ $E2E_KIND == framework ]]; then
    framework_cluster_prepare
    # The suite creates the cluster (suite_test.go, bootstrap_test.go) and deletes it at the end
    # unless -e2e.skip-resource-cleanup; the trap also removes what a crashed or interrupted suite
    # left (the cluster by name, workload containers and the network by label).
    if [[ ${KEEP_CLUSTER:-0} != 1 ]]; then trap down EXIT; fi
    cluster_args=(-e2e.create-bootstrap-cluster)
    # KEEP_CLUSTER=1: upstream's flag, which keeps the framework's kind cluster, and the
    # workload clusters too.
    [[ ${KEEP_CLUSTER:-0} == 1 ]] && cluster_args+=(-e2e.skip-resource-cleanup)
  else
    "$HACK_DIR/kind.sh" up
    if [[ ${KEEP_CLUSTER:-0} != 1 ]]; then trap down EXIT; fi
    "$HACK_DIR/kind-providers.sh" load
    cluster_args=(-e2e.kubeconfig "$KIND_DIR/kubeconfig")
  fi
  local cfg repo version
  cfg=$("$HACK_DIR/kind-providers.sh" repo)
  repo=$(dirname "$cfg")
  version=$CAPD_VERSION
  upstream_flavors "$artifacts/flavors"
  upstream_test_extension "$artifacts/test-extension"
  if [[ -z ${ARTIFACTS:-} ]]; then  # our own runs' folders only: keep the last 5
    find "$CACHE_DIR/upstream-e2e" -mindepth 1 -maxdepth 1 -type d -name '2*' | sort | head -n -5 | xargs -r rm -rf
  fi
  log "running the upstream e2e specs matching '${filter:-all}'; artifacts: $artifacts"
  local rc=0 extra=() procs=${E2E_PROCS:-1} suite_args runner
  read -ra extra <<<"${E2E_ARGS:-}"
  suite_args=(-e2e.config "$SUITE_DIR/config.yaml" "${cluster_args[@]}"
    -e2e.artifacts-folder "$artifacts" "${extra[@]}")
  if ((procs > 1)); then
    # Ginkgo's CLI runs the binary in $procs processes (the first one prepares the management
    # cluster: suite_test.go) and merges their reports into one.
    runner=("$(ginkgo_cli)" run --procs "$procs" -v --timeout 4h --label-filter "$filter"
      --json-report "$artifacts/report.json" "$bin" -- "${suite_args[@]}")
  else
    runner=("$bin" -test.v -test.timeout 4h -ginkgo.v -ginkgo.label-filter "$filter"
      -ginkgo.json-report "$artifacts/report.json" "${suite_args[@]}")
  fi
  log "running the upstream e2e specs in $procs process(es); the kind management cluster made by: $E2E_KIND"
  (
    cd "$SUITE_DIR"
    CAPD_E2E_REPO=$repo CAPD_E2E_VERSION=$version CAPD_E2E_IMAGE=$CAPD_IMAGE \
    CAPD_E2E_FLAVORS="$artifacts/flavors" CAPD_E2E_PRELOAD_IMAGES="$preload" \
    CAPD_E2E_KUBETEST_CONFIG="$(upstream_e2e_dir)/data/kubetest" \
    CAPD_E2E_TEST_EXTENSION="$artifacts/test-extension" \
    CAPD_E2E_CERT_MANAGER_URL="$repo/cert-manager/v$CERT_MANAGER_VERSION/cert-manager.yaml" \
    CAPD_E2E_CERT_MANAGER_VERSION="v$CERT_MANAGER_VERSION" \
      "${runner[@]}"
  ) 2>&1 | tee "$artifacts/run.log" || rc=$?
  rm -f "$bin"
  if [[ $E2E_KIND == framework && ${KEEP_CLUSTER:-0} == 1 ]] && kind_cluster_exists; then
    # The framework wrote its kubeconfig to a temporary file: keep one where hack/kind.sh would.
    mkdir -p "$KIND_DIR"
    "$KIND" get kubeconfig --name "$KIND_CLUSTER" > "$KIND_DIR/kubeconfig"
    log "kept the framework's kind cluster $KIND_CLUSTER; kubeconfig: $KIND_DIR/kubeconfig"
  fi
  log "summary (${filter:-all}; $(( (SECONDS - t0) / 60 )) min in all; artifacts $artifacts):"
  summary "$artifacts"
  return "$rc"
}

# hold_cluster: one run or teardown at a time per kind cluster. A second run would reuse the
# cluster while the first one's teardown deletes it (seen: a spec failing mid-run on "connection
# refused"). The lock is an open file, so it goes with the process, however that ends.
hold_cluster() {
  local lock="$CACHE_DIR/kind/$KIND_CLUSTER.lock"
  mkdir -p "$CACHE_DIR/kind"
  exec 9>"$lock"
  flock -n 9 || die "another hack/upstream-e2e.sh is using the kind cluster $KIND_CLUSTER ($lock)"
}

case $E2E_KIND in
  script | framework) ;;
  *) die "E2E_KIND=$E2E_KIND: script (hack/kind.sh, the default) or framework" ;;
esac

case ${1:-run} in
  build) build >/dev/null; ginkgo_cli >/dev/null ;;  # the CLI too: E2E_PROCS > 1 runs through it
  plan) shift; plan "$@" ;;
  down) hold_cluster; down ;;
  run) shift || true; hold_cluster; run "$@" ;;
  *) hold_cluster; run "$@" ;;
esac
