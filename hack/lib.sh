#!/usr/bin/env bash
# Shared settings and helpers for the hack/ scripts. Source it; do not run it.
# shellcheck disable=SC2034  # the settings are used by the scripts that source this file
set -euo pipefail
# Every early exit names what failed: under `set -e` a failing command or pipeline whose stderr
# was discarded would otherwise end a script without a word. errtrace: also inside functions.
set -o errtrace
trap 'printf "\033[1;31mERROR:\033[0m %s line %s: \`%s\` failed (exit %s)\n" "${BASH_SOURCE[0]:-$0}" "$LINENO" "$BASH_COMMAND" "$?" >&2' ERR

HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HACK_DIR/.." && pwd)

# Pinned versions of everything the local plane builds from the registries.
K8S_VERSION=${K8S_VERSION:-1.35.4}
# etcd: the version kubeadm v$K8S_VERSION deploys (its DefaultEtcdVersion), so the plane and the
# node image share one build.
ETCD_VERSION=${ETCD_VERSION:-3.6.6}
# CoreDNS: the version kubeadm v$K8S_VERSION deploys (its CoreDNSVersion).
COREDNS_VERSION=${COREDNS_VERSION:-1.13.1}
# The version upgrade tests start from (hack/upgrade.sh, upstream's upgrade e2e specs), with the
# etcd and CoreDNS versions kubeadm v$UPGRADE_FROM deploys; they upgrade to v$K8S_VERSION.
UPGRADE_FROM=${UPGRADE_FROM:-1.34.4}
UPGRADE_ETCD=${UPGRADE_ETCD:-3.6.5}
UPGRADE_COREDNS=${UPGRADE_COREDNS:-1.12.1}
# kubeadm_deps VERSION: "ETCD COREDNS", the versions kubeadm vVERSION deploys, for every Kubernetes
# version a node image is built for (hack/node-image.sh refuses a pair kubeadm does not list).
kubeadm_deps() {
  case $1 in
    "$K8S_VERSION") echo "$ETCD_VERSION $COREDNS_VERSION" ;;
    "$UPGRADE_FROM") echo "$UPGRADE_ETCD $UPGRADE_COREDNS" ;;
    1.36.3) echo "3.6.8 1.14.2" ;;
    *) return 1 ;;
  esac
}
# crictl in the node image, as kind's has it (upstream CAPD v1.14 waits for `crictl ps` before
# it bootstraps a node). v1.34.0 is the newest sigs.k8s.io/cri-tools the module proxy has.
CRICTL_VERSION=${CRICTL_VERSION:-1.34.0}
# Cluster API core, CABPK and KCP on the plane: the newest release whose core module the Go
# module proxy has (v1.14.2; CAPI_VERSION=1.13.5 runs the previous minor, also proven). Keep
# tests/common/capi_e2e.rs's CAPI_VERSION in step (tests/hack_scripts.rs checks).
CAPI_VERSION=${CAPI_VERSION:-1.14.2}
# Upstream CAPD, the benchmark peer of hack/bench.sh: the newest release for which the Go module
# proxy has both the test module and the core module it needs (test has v1.13.7+ and v1.14.1-4, core
# v1.13.4-6 and v1.14.2 only).
CAPD_UPSTREAM_VERSION=${CAPD_UPSTREAM_VERSION:-1.14.2}

# The kind CLI of hack/kind.sh (management clusters from our node image): the newest on the proxy.
KIND_VERSION=${KIND_VERSION:-0.33.0}
# cert-manager of the kind management cluster: the newest release whose main packages the Go module
# proxy serves (clusterctl v1.14.2 defaults to v1.21.1, whose mains are in nested modules the proxy
# lacks; see build_cert_manager in hack/build-binaries.sh).
CERT_MANAGER_VERSION=${CERT_MANAGER_VERSION:-1.11.5}

# This provider's version, as releases and clusterctl name it: v + Cargo.toml's package version.
CAPD_VERSION=v$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$REPO_ROOT/Cargo.toml" | head -n1)

# Cache outside the repository: built binaries, images' rootfs tarballs, Go caches.
CACHE_DIR=${CAPD_RS_CACHE:-$HOME/.cache/capd-rs}
BIN_DIR="$CACHE_DIR/bin"
# Where cargo puts what it builds: $CARGO_TARGET_DIR if set (hack/test.sh sets it to the cache,
# so CI reuses compiled dependencies across clean clones), else the repository's target/.
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO_ROOT/target}
# Runtime state of the local plane (certs, data, pid files, logs, kubeconfig).
PLANE_DIR=${CAPD_RS_PLANE:-$CACHE_DIR/plane}
KUBECONFIG_PATH="$PLANE_DIR/kubeconfig"

# Ports on 127.0.0.1 used by the plane.
ETCD_PORT=${ETCD_PORT:-23790}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23800}
APISERVER_PORT=${APISERVER_PORT:-16443}
KCM_PORT=${KCM_PORT:-10257}
# Our manager's conversion webhook on the plane (127.0.0.1; 9443-9445 are the CAPI managers').
CAPD_WEBHOOK_PORT=${CAPD_WEBHOOK_PORT:-9446}

# Every Docker object the scripts create carries this label so cleanup is by label only.
PLANE_LABEL="capd-rs.test/run=plane"
# Every image the scripts build carries this one instead. Docker copies an image's labels onto
# each container made from it, so with the plane's label in the image every kind node and
# workload node of an e2e run, a kind cluster or a demo would be the plane's to remove.
IMAGE_LABEL="capd-rs.image/built-by=capd-rs-hack"

export GOTOOLCHAIN=local
export GOFLAGS=${GOFLAGS:--mod=mod}

log() { printf '\033[1;34m==>\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31mERROR:\033[0m %s\n' "$*" >&2; exit 1; }

# wait_for <seconds> <description> <command...>: poll until the command succeeds.
wait_for() {
  local timeout=$1 what=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || die "timed out after ${timeout}s waiting for $what"
    sleep 0.5
  done
}

mkdir -p "$CACHE_DIR" "$BIN_DIR"

# ---- shared by plane.sh / capi.sh (added with them; the settings above are unchanged) ----------

# Binary directories as laid out by build-binaries.sh.
K8S_BIN_DIR="$BIN_DIR/k8s-v$K8S_VERSION"
ETCD_BIN_DIR="$BIN_DIR/etcd-v$ETCD_VERSION"
CAPI_BIN_DIR="$BIN_DIR/capi-v$CAPI_VERSION"
CAPD_UPSTREAM_BIN_DIR="$BIN_DIR/capd-upstream-v$CAPD_UPSTREAM_VERSION"
KUBECTL="$K8S_BIN_DIR/kubectl"
# Our CRDs, by plural: the Docker* kinds and their Dev* successors (config/crd/bases).
CRD_PLURALS=(dockerclusters dockerclustertemplates dockermachines dockermachinetemplates
  dockermachinepools dockermachinepooltemplates devclusters devclustertemplates devmachines
  devmachinetemplates devmachinepools devmachinepooltemplates)

# capi_core_dir [version]: the folder of the core provider inside the sigs.k8s.io/cluster-api
# module, i.e. of its main package and its config/ (crd, rbac, webhook, default). CAPI v1.14 moved
# both from the module root to core/; CABPK and KCP stay in bootstrap/kubeadm, controlplane/kubeadm.
capi_core_dir() {
  local v=${1:-$CAPI_VERSION} minor
  v=${v#v}; minor=${v#*.}; minor=${minor%%.*}
  if [[ ${v%%.*} == 1 ]] && ((minor < 14)); then echo .; else echo core; fi
}
# capi_core_pkg [version]: the Go package of the core manager.
capi_core_pkg() {
  local dir
  dir=$(capi_core_dir "$@")
  if [[ $dir == . ]]; then echo sigs.k8s.io/cluster-api; else echo "sigs.k8s.io/cluster-api/$dir"; fi
}

# Certificates of the plane (one CA for everything; see plane.sh).
PKI_DIR="$PLANE_DIR/pki"
# Docker objects carrying this label KEY (any value) are removed by `plane.sh down`.
PLANE_LABEL_KEY="${PLANE_LABEL%%=*}"

# kubectl against the plane, whatever $KUBECONFIG says.
kubectl_plane() { "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

# proc_pid <pidfile>: prints the pid and succeeds if the process is alive AND is one of ours
# (its command line mentions $PLANE_DIR), so a recycled pid is never mistaken for ours.
proc_pid() {
  local pid
  [[ -f $1 ]] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  local cmd
  cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmd == *"$PLANE_DIR"* ]] || return 1
  echo "$pid"
}

# ready_or_gone <pidfile> <seconds> <what> <check...>: for a process of ours that is already
# running, wait until the check passes (usable: returns 0) or the process exits (it was shutting
# down, e.g. a kube-apiserver that drains its watches for up to a minute after a stop: returns 1,
# so the caller starts a new one). No process of ours: returns 1 at once. Dies if neither happens
# in time.
ready_or_gone() {
  local pidfile=$1 timeout=$2 what=$3 pid
  shift 3
  pid=$(proc_pid "$pidfile") || return 1
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "$what: the previous process (pid $pid) exited before it was ready; starting a new one"
      rm -f "$pidfile"
      return 1
    fi
    ((SECONDS < deadline)) || die "timed out after ${timeout}s waiting for $what"
    sleep 0.5
  done
}

# locked <name> <command...>: runs the command holding the build lock <name>. hack/test.sh builds
# in the background what its later steps build again (each "cached by version"); a step that asks
# for a build under way waits for it, then finds its result, instead of building the same files
# beside it. The lock is an open file (fd 8), released however the command ends.
locked() {
  local name=$1; shift
  mkdir -p "$CACHE_DIR/locks"
  {
    flock -n 8 || { log "waiting for the build of $name under way (lock $CACHE_DIR/locks/$name)"; flock 8; }
    "$@"
  } 8>"$CACHE_DIR/locks/$name"
}

# start_proc <pidfile> <logfile> <command...>: runs the command detached (own session, so it
# outlives this script and ignores the terminal's ^C), appending to the log.
start_proc() {
  local pidfile=$1 logfile=$2; shift 2
  mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")"
  # Logs append across restarts (earlier runs help debugging); keep one old generation past 50 MB.
  if [[ -f $logfile ]] && (( $(stat -c %s "$logfile") > 50 * 1024 * 1024 )); then mv -f "$logfile" "$logfile.old"; fi
  printf '\n---- %s: %s\n' "$(date -Is)" "$*" >> "$logfile"
  # Not a process-group leader here, so setsid execs in place and $! is the command's own pid.
  # fd 9 is the scripts' flock, fd 8 the build lock (locked): a daemon holding one would block
  # every later up/down or build.
  setsid "$@" >> "$logfile" 2>&1 < /dev/null 8>&- 9>&- &
  echo $! > "$pidfile"
}

# stop_proc <pidfile> <what> [timeout]: SIGTERM, wait, then SIGKILL; removes the pid file.
stop_proc() {
  local pidfile=$1 what=$2 timeout=${3:-20} pid
  if pid=$(proc_pid "$pidfile"); then
    log "stopping $what (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + timeout))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then log "$what did not stop in ${timeout}s; killing"; kill -KILL "$pid" || true; fi
  fi
  rm -f "$pidfile"
}

# port_free <port>: nothing listens on the TCP port.
port_free() { [[ -z $(ss -Hltn "sport = :$1") ]]; }

# released <pid> <port...>: the process has exited (reaped, or a zombie whose files are closed)
# and nothing listens on the ports. A killed multi-threaded server stops answering, and its
# command line reads empty, before its last thread has closed its sockets: a start in between
# found its own port taken.
released() {
  local pid=$1 port state; shift
  if kill -0 "$pid" 2>/dev/null; then
    state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
    [[ -z $state || $state == Z ]] || return 1
  fi
  for port; do port_free "$port" || return 1; done
}

# A python3 that can `import yaml` (Debian's python3-yaml, else PyYAML from PyPI).
python_yaml() {
  local py
  for py in /usr/bin/python3 python3; do
    if command -v "$py" >/dev/null && "$py" -c 'import yaml' 2>/dev/null; then echo "$py"; return; fi
  done
  log "installing PyYAML from PyPI"
  python3 -m pip install --quiet --user PyYAML >&2 || die "cannot install PyYAML"
  echo python3
}

# shipped_rbac_kubeconfig <kubeconfig> <dir> <namespace> <prefix> <label key=value>: creates
# config/rbac on the cluster of <kubeconfig> under names prefixed "<prefix>-" in <namespace>
# (labelled), and writes <dir>/kubeconfig (mode 0600) for its ServiceAccount (a 2 h token): a
# manager run with it has exactly the shipped permissions. The objects are listed in
# <dir>/rbac.yaml; `kubectl delete -f` it to clean up. Callers use `|| fail`, which turns off
# set -e and the ERR trap inside: each step returns on failure itself.
shipped_rbac_kubeconfig() {
  local kc=(--kubeconfig "$1") dir=$2 ns=$3 prefix=$4 label=$5 token server ca
  mkdir -p "$dir/rbac" || return 1
  cat > "$dir/rbac/kustomization.yaml" <<EOF || return 1
namespace: $ns
namePrefix: $prefix-
labels:
- pairs:
    ${label%%=*}: ${label#*=}
resources:
- $(realpath --relative-to="$dir/rbac" "$REPO_ROOT/config/rbac")
EOF
  "$KUBECTL" kustomize "$dir/rbac" > "$dir/rbac.yaml" || return 1
  "$KUBECTL" "${kc[@]}" create -f "$dir/rbac.yaml" >/dev/null || return 1
  token=$("$KUBECTL" "${kc[@]}" create token "$prefix-manager" -n "$ns" --duration=2h) || return 1
  server=$("$KUBECTL" "${kc[@]}" config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}') || return 1
  ca=$("$KUBECTL" "${kc[@]}" config view --raw --minify --flatten -o jsonpath='{.clusters[0].cluster.certificate-authority-data}') || return 1
  [[ -n $token && -n $server ]] || return 1
  (umask 077 && cat > "$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: plane
  cluster: {server: "$server", certificate-authority-data: "$ca"}
users:
- name: manager
  user: {token: "$token"}
contexts:
- name: manager
  context: {cluster: plane, user: manager, namespace: $ns}
current-context: manager
EOF
  ) || return 1
}

# The workspace packages whose binaries go into images: the manager's (capd-rs) and podnet's
# (capd-podnet, hack/podnet).
IMAGE_PACKAGES=(capd-rs capd-podnet)

# static_build <profile> <bin>...: `cargo build --profile <profile>` of these binaries of the
# workspace, statically linked for the images (FROM scratch for the manager; podnet's too): the
# target is x86_64-unknown-linux-musl when that Rust target is installed (musl-gcc from musl-tools
# if present, else the host gcc, compiles ring's C code), otherwise the glibc target with
# `-C target-feature=+crt-static` (a static-pie; fine here: no NSS or dlopen is used).
# CAPD_RS_RUST_TARGET=<triple> forces one. Every image binary goes through here, so they share
# one set of compiled dependencies per profile (a cold cache compiles them once, not per binary):
# cargo enables a dependency's features by the packages it is asked for, so every image package is
# selected (-p) whichever binary is built (--bin); podnet alone would resolve tokio, hyper, kube
# and others with fewer features and recompile them.
# The images use `release`; Tilt's inner loop uses `tilt` (Cargo.toml says why).
# Prints the folder the binaries are in.
static_build() {
  local profile=$1 triple installed bin pkg args=()
  shift
  if [[ -n ${CAPD_RS_RUST_TARGET:-} ]]; then
    triple=$CAPD_RS_RUST_TARGET
  else
    installed=$(rustup target list --installed 2>/dev/null || true)
    triple=$(uname -m)-unknown-linux-gnu
    grep -qx "$(uname -m)-unknown-linux-musl" <<<"$installed" && triple=$(uname -m)-unknown-linux-musl
  fi
  case $triple in
    *-linux-musl)
      local cc_var="CC_${triple//-/_}"
      if [[ -z ${!cc_var:-} ]]; then
        if command -v musl-gcc >/dev/null; then export "$cc_var=musl-gcc"; else export "$cc_var=gcc"; fi
      fi
      ;;
    *-linux-gnu)
      # Scoped to the target, so build scripts and proc-macros stay dynamically linked.
      local rf_var
      rf_var="CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$triple")_RUSTFLAGS"
      export "$rf_var=${!rf_var:-} -C target-feature=+crt-static"
      ;;
  esac
  for pkg in "${IMAGE_PACKAGES[@]}"; do args+=(-p "$pkg"); done
  for bin in "$@"; do args+=(--bin "$bin"); done
  log "building ${*} (cargo build --profile $profile --target $triple)"
  (cd "$REPO_ROOT" && cargo build --quiet --profile "$profile" --locked --target "$triple" "${args[@]}") >&2 ||
    die "cargo build --profile $profile of ${*} failed"
  # Cargo names the folder of its built-in `dev` profile `debug`.
  [[ $profile == dev ]] && profile=debug
  echo "$TARGET_DIR/$triple/$profile"
}

# --- the runc shim (hack/runc-shim), for hack/docker-engine.sh and hack/podman.sh ---------------
# An engine asks runc for every capability the kernel knows when a container (or an exec) is
# --privileged; where the host's bounding set lacks one (CAP_SYS_RESOURCE on our CI VMs), runc
# fails with "unable to apply caps". Without that capability runc cannot raise a hard rlimit
# either, which Podman's Docker API asks for every container. The shim removes exactly the missing
# capabilities from the OCI spec, lowers its rlimits to what the runtime holds, and execs runc.
SHIM_BIN="$BIN_DIR/capd-runc-shim"

# Succeeds when the bounding set lacks a capability the kernel knows.
bounding_set_incomplete() {
  local last bnd
  last=$(cat /proc/sys/kernel/cap_last_cap) || die "cannot read /proc/sys/kernel/cap_last_cap"
  bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status) || die "cannot read CapBnd from /proc/self/status"
  [[ -n $bnd ]] || die "no CapBnd line in /proc/self/status"
  (( (0x$bnd & ((1 << (last + 1)) - 1)) != ((1 << (last + 1)) - 1) ))
}

# Builds the shim (serde_json only: seconds; a no-op when built) and installs it at $SHIM_BIN.
install_shim() {
  log "building the runc shim (the host's capability bounding set is incomplete)"
  cargo build --quiet --release --locked -p capd-runc-shim --manifest-path "$REPO_ROOT/Cargo.toml" \
    --target-dir "$CACHE_DIR/runc-shim-target" || die "cannot build hack/runc-shim"
  install -m 0755 "$CACHE_DIR/runc-shim-target/release/capd-runc-shim" "$SHIM_BIN.new"
  mv -f "$SHIM_BIN.new" "$SHIM_BIN"
}
