#!/usr/bin/env bash
# Scale benchmark of the manager on the local plane: for each N (default 1 10 50) it starts the
# release manager as a process, creates a Cluster + DockerCluster, then N Machines + DockerMachines
# (1 control plane, N-1 workers, image capd-rs/node:light) in one go, and measures
#   - seconds from applying the DockerMachines until all have status.initialization.provisioned
#   - the manager's peak RSS (VmHWM) and CPU seconds (utime+stime) at that point
#   - Docker Engine API calls made by then (capd_docker_api_calls from /metrics, summed)
# then deletes everything, stops the manager and removes the containers/network it labelled.
#   hack/bench.sh            N = 1 10 50
#   hack/bench.sh 1 10       N = 1 10
# Settings (environment):
#   BENCH_OUT       where the markdown table goes (default target/bench.md)
#   BENCH_TIMEOUT   seconds to wait for all DockerMachines provisioned (default 100 + 10*N)
#   BENCH_IMAGE     node image (default capd-rs/node:light)
#   BENCH_MANAGER_ARGS  extra manager flags (word-split), e.g. "--docker-machine-concurrency=10"
#   BENCH_IDLE      seconds of steady state observed after provisioning (default 10)
#   BENCH_KEEP_LOGS=1   keep the manager logs even on success (always kept on failure)
# Progress goes to stderr with timestamps; the table to stdout and $BENCH_OUT.
# Traffic: only 127.0.0.1 (plane apiserver, manager /metrics) and the containers created here.
source "$(dirname "$0")/lib.sh"

NS_LIST=("$@")
((${#NS_LIST[@]})) || NS_LIST=(1 10 50)
for n in "${NS_LIST[@]}"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$n'"
done

BENCH_OUT=${BENCH_OUT:-$TARGET_DIR/bench.md}
IDLE=${BENCH_IDLE:-10}
BENCH_IMAGE=${BENCH_IMAGE:-capd-rs/node:light}
LB_IMAGE=${LB_IMAGE:-kindest/haproxy:v20230606-42a2262b}
read -r -a EXTRA_ARGS <<<"${BENCH_MANAGER_ARGS:-}"
LABEL_KEY=capd-rs.test/run
MANAGER_BIN="$TARGET_DIR/release/manager"
LOG_DIR="${TMPDIR:-/tmp}/capd-rs-bench"
CLK_TCK=$(getconf CLK_TCK)
RUN_START=$SECONDS

# ---- helpers --------------------------------------------------------------------------------

ts() { date '+%H:%M:%S'; }
say() { printf '%s [bench] %s\n' "$(ts)" "$*" >&2; }
fail() { printf '%s [bench] ERROR: %s\n' "$(ts)" "$*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
k() { kubectl_plane "$@"; }

free_tcp_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# proc_rss_mib <pid>: VmHWM (peak resident set) in MiB.
proc_rss_mib() {
  awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"
}
# proc_cpu_s <pid>: utime + stime in seconds (fields 14 and 15; comm may contain spaces).
proc_cpu_s() {
  local stat
  stat=$(<"/proc/$1/stat")
  stat=${stat##*) }   # after "pid (comm) ": field 3 (state) onwards
  # shellcheck disable=SC2086
  set -- $stat
  awk -v u="${12}" -v s="${13}" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", (u + s) / hz }'
}

# metrics <port>: the manager's /metrics text.
metrics() { curl -sf --max-time 5 "http://127.0.0.1:$1/metrics"; }
# docker_calls <metrics text>: "operation count" lines; docker_calls_total: their sum.
docker_calls() { awk -F'[{}" ]+' '/^capd_docker_api_calls\{/ { print $3, $NF }' <<<"$1" | sort; }
docker_calls_total() { awk -F' ' '/^capd_docker_api_calls\{/ { s += $NF } END { print s + 0 }' <<<"$1"; }
# kube_requests <metrics text>: "verb count" lines (capd_kube_api_requests_total summed per verb).
kube_requests() {
  awk '/^capd_kube_api_requests_total\{/ { match($0, /verb="[a-z]+"/); s[substr($0, RSTART + 6, RLENGTH - 7)] += $NF }
       END { for (v in s) print v, s[v] }' <<<"$1" | sort
}
reconciles() { awk -F'[{}" ]+' '/^capd_reconcile_total\{/ { print $3, $NF }' <<<"$1" | sort; }
reconcile_errors() { awk '/^capd_reconcile_errors_total\{/ { sub(/^capd_reconcile_errors_total/, ""); print }' <<<"$1"; }

# ---- per-run state (used by the EXIT trap) ----------------------------------------------------

ID="" NS="" MANAGER_PID="" MANAGER_LOG="" PORT="" APPLY_PID=""
WATCH_PIDS=()
WATCHED=(clusters.cluster.x-k8s.io dockerclusters machines.cluster.x-k8s.io dockermachines)

# Stop the kubectl watches and a still-running apply (only processes this script started).
stop_watches() {
  local pid
  # The apply runs in a subshell: its kubectl child first.
  [[ -z $APPLY_PID ]] || pkill -P "$APPLY_PID" 2>/dev/null || true
  for pid in "${WATCH_PIDS[@]}" ${APPLY_PID:+"$APPLY_PID"}; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  WATCH_PIDS=() APPLY_PID=""
}

stop_manager() {
  [[ -n $MANAGER_PID ]] || return 0
  if kill -0 "$MANAGER_PID" 2>/dev/null; then
    say "stopping manager (pid $MANAGER_PID, SIGTERM)"
    kill -TERM "$MANAGER_PID" 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while kill -0 "$MANAGER_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "$MANAGER_PID" 2>/dev/null; then
      say "manager did not stop in 30s; SIGKILL"
      kill -KILL "$MANAGER_PID" 2>/dev/null || true
    fi
  fi
  wait "$MANAGER_PID" 2>/dev/null || true
  MANAGER_PID=""
}

# Remove exactly the containers and networks labelled with this run's id.
cleanup_docker() {
  [[ -n $ID ]] || return 0
  local ids
  ids=$(docker ps -aq --filter "label=$LABEL_KEY=$ID")
  if [[ -n $ids ]]; then
    say "removing $(wc -w <<<"$ids") container(s) labelled $LABEL_KEY=$ID"
    # shellcheck disable=SC2086
    docker rm -f -v $ids >/dev/null || true
  fi
  ids=$(docker network ls -q --filter "label=$LABEL_KEY=$ID")
  if [[ -n $ids ]]; then
    say "removing network(s) labelled $LABEL_KEY=$ID"
    # shellcheck disable=SC2086
    docker network rm $ids >/dev/null || true
  fi
}

# Delete the run's objects. With a live manager the finalizers are honoured (containers removed
# by the provider); what is left after the timeout loses its finalizers (our namespace only).
cleanup_objects() {
  local timeout=$1
  [[ -n $NS ]] || return 0
  # Without a live manager nobody removes the finalizers: do not wait long for that.
  [[ -n $MANAGER_PID ]] && kill -0 "$MANAGER_PID" 2>/dev/null || timeout=5
  k get namespace "$NS" >/dev/null 2>&1 || return 0
  say "deleting DockerMachines in $NS"
  k -n "$NS" delete dockermachines --all --wait=false >/dev/null 2>&1 || true
  if ! wait_gone dockermachines "$timeout"; then
    say "DockerMachines not gone after ${timeout}s; removing their finalizers"
    strip_finalizers dockermachines
  fi
  say "deleting DockerCluster in $NS"
  k -n "$NS" delete dockerclusters --all --wait=false >/dev/null 2>&1 || true
  if ! wait_gone dockerclusters 120; then
    say "DockerCluster not gone after 120s; removing its finalizers"
    strip_finalizers dockerclusters
  fi
  say "deleting Machines, Cluster and namespace $NS"
  k -n "$NS" delete machines.cluster.x-k8s.io --all --wait=false >/dev/null 2>&1 || true
  k -n "$NS" delete clusters.cluster.x-k8s.io --all --wait=false >/dev/null 2>&1 || true
  k delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  if ! k wait --for=delete "namespace/$NS" --timeout=90s >/dev/null 2>&1; then
    say "namespace $NS not gone after 90s; removing finalizers of the CAPI objects left in it"
    strip_finalizers machines.cluster.x-k8s.io
    strip_finalizers clusters.cluster.x-k8s.io
    strip_finalizers dockermachines
    strip_finalizers dockerclusters
    k wait --for=delete "namespace/$NS" --timeout=60s >/dev/null 2>&1 ||
      say "WARNING: namespace $NS is still terminating"
  fi
}

# wait_gone <resource> <seconds>: poll until no object of the resource is left in $NS.
wait_gone() {
  local deadline=$((SECONDS + $2)) left
  while :; do
    left=$(k -n "$NS" get "$1" -o name 2>/dev/null | wc -l) || left=1
    ((left == 0)) && return 0
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
}

strip_finalizers() {
  local name
  for name in $(k -n "$NS" get "$1" -o name 2>/dev/null); do
    k -n "$NS" patch "$name" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  done
}

# Teardown of one run, also on error/interrupt.
teardown() {
  local timeout=${1:-180}
  stop_watches
  cleanup_objects "$timeout"
  stop_manager
  cleanup_docker
  delete_rbac
  NS="" ID=""
}

# The cluster-scoped half of the run manager's RBAC (the rest goes with the namespace), by the
# label shipped_rbac_kubeconfig put on it.
delete_rbac() {
  [[ -n $ID ]] || return 0
  k delete clusterrole,clusterrolebinding -l "$LABEL_KEY=$ID" --ignore-not-found --wait=false >/dev/null 2>&1 || true
}

on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $ID ]]; then
    say "cleaning up run $ID after exit code $rc"
    [[ -n $MANAGER_LOG ]] && say "manager log kept: $MANAGER_LOG"
    teardown 60 || true
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'say "interrupted"; exit 130' INT TERM

# ---- manifests ------------------------------------------------------------------------------

BOOTSTRAP_DATA='#cloud-config
write_files:
- path: /etc/capd-bench/hello.txt
  permissions: "0644"
  content: |
    written by the capd-rs bench
runcmd:
- [sh, -c, "mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete"]
'

cluster_yaml() {
  cat <<EOF
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: $CLUSTER
  namespace: $NS
  labels:
    cluster.x-k8s.io/watch-filter: "$ID"
spec:
  clusterNetwork:
    pods: {cidrBlocks: ["192.168.0.0/16"]}
    services: {cidrBlocks: ["10.128.0.0/12"]}
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: DockerCluster
    name: $CLUSTER
EOF
}

docker_cluster_yaml() {
  cat <<EOF
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerCluster
metadata:
  name: $CLUSTER
  namespace: $NS
  labels:
    cluster.x-k8s.io/watch-filter: "$ID"
    cluster.x-k8s.io/cluster-name: $CLUSTER
  ownerReferences:
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Cluster
    name: $CLUSTER
    uid: $1
spec: {}
EOF
}

secret_yaml() {
  cat <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: $CLUSTER-bootstrap
  namespace: $NS
  labels:
    cluster.x-k8s.io/cluster-name: $CLUSTER
type: cluster.x-k8s.io/secret
stringData:
  format: cloud-config
  value: |
$(sed 's/^/    /' <<<"$BOOTSTRAP_DATA")
EOF
}

machine_name() { if (($1 == 0)); then echo "$CLUSTER-cp-0"; else echo "$CLUSTER-w-$1"; fi; }
machine_labels() {
  printf '    cluster.x-k8s.io/watch-filter: "%s"\n    cluster.x-k8s.io/cluster-name: %s\n' "$ID" "$CLUSTER"
  (($1 == 0)) && printf '    cluster.x-k8s.io/control-plane: ""\n'
  return 0
}

machines_yaml() {
  local i name
  for ((i = 0; i < N; i++)); do
    name=$(machine_name "$i")
    cat <<EOF
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: $name
  namespace: $NS
  labels:
$(machine_labels "$i")
spec:
  clusterName: $CLUSTER
  version: v1.35.0
  bootstrap:
    dataSecretName: $CLUSTER-bootstrap
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: DockerMachine
    name: $name
EOF
  done
}

# docker_machines_yaml <file with "name uid" lines of the Machines>
docker_machines_yaml() {
  local i name uid
  for ((i = 0; i < N; i++)); do
    name=$(machine_name "$i")
    uid=$(awk -v n="$name" '$1 == n { print $2 }' "$1")
    [[ -n $uid ]] || fail "Machine $name has no UID"
    cat <<EOF
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerMachine
metadata:
  name: $name
  namespace: $NS
  labels:
$(machine_labels "$i")
  ownerReferences:
  - apiVersion: cluster.x-k8s.io/v1beta2
    kind: Machine
    name: $name
    uid: $uid
spec:
  customImage: $BENCH_IMAGE
EOF
  done
}

# ---- one run ---------------------------------------------------------------------------------

ROWS=() DETAILS=()

run_one() {
  N=$1
  local timeout=${BENCH_TIMEOUT:-$((100 + 10 * N))}
  ID="bench$((($$ * 100 + RANDOM % 100) % 100000))n$N"
  NS="$ID"
  CLUSTER="$ID"
  PORT=$(free_tcp_port)
  MANAGER_LOG="$LOG_DIR/manager-$ID.log"
  local network="capd-rs-bench-$ID" work="$LOG_DIR/$ID"
  mkdir -p "$work"
  say "=== N=$N: run id $ID, namespace $NS, network $network, timeout ${timeout}s, load $(cut -d' ' -f1-3 /proc/loadavg)"
  cleanup_docker # nothing should carry a fresh id; be sure

  # setsid: a ^C in the terminal reaches this script only; the manager must live on to honour
  # the finalizers while the trap deletes the objects. (Not a group leader here, so setsid execs
  # in place and $! is the manager's own pid.)
  # The manager runs as the shipped ServiceAccount, with exactly the permissions of config/rbac.
  k create namespace "$NS" >/dev/null || fail "cannot create namespace $NS"
  shipped_rbac_kubeconfig "$KUBECONFIG_PATH" "$work" "$NS" "$ID" "$LABEL_KEY=$ID" || fail "cannot set up the shipped RBAC for the manager"
  setsid "$MANAGER_BIN" \
    --kubeconfig="$work/kubeconfig" \
    --watch-filter="$ID" \
    --container-label="$LABEL_KEY=$ID" \
    --docker-network="$network" \
    --health-addr="127.0.0.1:$PORT" \
    --lb-image="$LB_IMAGE" \
    "${EXTRA_ARGS[@]}" \
    >"$MANAGER_LOG" 2>&1 </dev/null &
  MANAGER_PID=$!
  say "manager pid $MANAGER_PID, metrics 127.0.0.1:$PORT, log $MANAGER_LOG"
  local deadline=$((SECONDS + 60))
  until curl -sf --max-time 2 "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; do
    kill -0 "$MANAGER_PID" 2>/dev/null || fail "manager exited at startup; see $MANAGER_LOG"
    ((SECONDS < deadline)) || fail "manager not ready on 127.0.0.1:$PORT/readyz after 60s; see $MANAGER_LOG"
    sleep 0.3
  done

  # Cluster + DockerCluster.
  cluster_yaml | k apply -f - >/dev/null || fail "cannot create Cluster $CLUSTER"
  local cluster_uid
  cluster_uid=$(k -n "$NS" get clusters.cluster.x-k8s.io "$CLUSTER" -o jsonpath='{.metadata.uid}')
  [[ -n $cluster_uid ]] || fail "Cluster $CLUSTER has no UID"
  local t_dc
  t_dc=$(now)
  docker_cluster_yaml "$cluster_uid" | k apply -f - >/dev/null || fail "cannot create DockerCluster $CLUSTER"
  say "waiting for DockerCluster $CLUSTER provisioned (load balancer)"
  k -n "$NS" wait dockerclusters "$CLUSTER" --for=jsonpath='{.status.initialization.provisioned}'=true \
    --timeout=180s >/dev/null || fail "DockerCluster $CLUSTER not provisioned after 180s; see $MANAGER_LOG"
  local dc_secs
  dc_secs=$(elapsed "$t_dc" "$(now)")
  say "DockerCluster provisioned in ${dc_secs}s; marking Cluster infrastructureProvisioned"
  k -n "$NS" patch clusters.cluster.x-k8s.io "$CLUSTER" --subresource=status --type=merge \
    -p '{"status":{"initialization":{"infrastructureProvisioned":true}}}' >/dev/null ||
    fail "cannot patch Cluster status"
  secret_yaml | k apply -f - >/dev/null || fail "cannot create the bootstrap Secret"

  # Machines first (owner UIDs), then the DockerMachines in one apply.
  machines_yaml >"$work/machines.yaml"
  say "applying $N Machines"
  k apply -f "$work/machines.yaml" >/dev/null || fail "cannot apply Machines ($work/machines.yaml)"
  k -n "$NS" get machines.cluster.x-k8s.io -l "cluster.x-k8s.io/watch-filter=$ID" \
    -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.uid}{"\n"}{end}' >"$work/machine-uids"
  docker_machines_yaml "$work/machine-uids" >"$work/dockermachines.yaml"
  local m_before
  m_before=$(metrics "$PORT") || fail "cannot read metrics"

  # Count the watch events of the related objects during the machine phase (they drive the
  # DockerMachine reconciles through the controller's watches).
  local r
  for r in "${WATCHED[@]}"; do
    "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" -n "$NS" get "$r" --watch-only -o name >"$work/watch-$r" 2>/dev/null &
    WATCH_PIDS+=($!)
  done
  sleep 1

  say "applying $N DockerMachines; waiting up to ${timeout}s for all provisioned"
  local t0 t_first="" t_half="" t_applied="" t_all="" done_count=0 last_report=$SECONDS
  t0=$(now)
  # In the background, so that provisioning is observed while kubectl is still creating objects.
  (
    rc=0
    k apply -f "$work/dockermachines.yaml" >"$work/apply.out" 2>&1 || rc=$?
    now >"$work/apply.end"
    echo "$rc" >"$work/apply.rc"
  ) &
  APPLY_PID=$!
  deadline=$((SECONDS + timeout))
  while :; do
    if [[ -z $t_applied && -s $work/apply.rc ]]; then
      [[ $(<"$work/apply.rc") == 0 ]] || fail "kubectl apply of the DockerMachines failed: $(<"$work/apply.out")"
      t_applied=$(elapsed "$t0" "$(<"$work/apply.end")")
      say "  kubectl apply of $N DockerMachines returned after ${t_applied}s"
      wait "$APPLY_PID" 2>/dev/null || true
      APPLY_PID=""
    fi
    done_count=$(k -n "$NS" get dockermachines \
      -o jsonpath='{range .items[*]}{.status.initialization.provisioned}{"\n"}{end}' 2>/dev/null | grep -c '^true$' || true)
    if [[ -z $t_first ]] && ((done_count >= 1)); then t_first=$(elapsed "$t0" "$(now)"); fi
    if [[ -z $t_half ]] && ((done_count * 2 >= N)); then t_half=$(elapsed "$t0" "$(now)"); fi
    if [[ -z $t_all ]] && ((done_count >= N)); then t_all=$(elapsed "$t0" "$(now)"); fi
    [[ -n $t_all && -n $t_applied ]] && break
    kill -0 "$MANAGER_PID" 2>/dev/null || fail "manager died while provisioning; see $MANAGER_LOG"
    if ((SECONDS >= deadline)); then
      k -n "$NS" get dockermachines -o custom-columns='NAME:.metadata.name,PROVISIONED:.status.initialization.provisioned,REASONS:.status.conditions[*].reason' >&2 || true
      fail "timed out after ${timeout}s: $done_count/$N DockerMachines provisioned (N=$N); see $MANAGER_LOG"
    fi
    if ((SECONDS - last_report >= 10)); then
      say "  $done_count/$N provisioned after $(elapsed "$t0" "$(now)")s; $(docker ps -q --filter "label=$LABEL_KEY=$ID" | wc -l) containers running; load $(cut -d' ' -f1 /proc/loadavg)"
      last_report=$SECONDS
    fi
    sleep 0.5
  done
  local secs=$t_all
  # Measurements at "all provisioned".
  local m_after rss cpu calls calls_before
  m_after=$(metrics "$PORT") || fail "cannot read metrics"
  rss=$(proc_rss_mib "$MANAGER_PID")
  cpu=$(proc_cpu_s "$MANAGER_PID")
  calls=$(docker_calls_total "$m_after")
  calls_before=$(docker_calls_total "$m_before")
  stop_watches
  local events=""
  for r in "${WATCHED[@]}"; do events+="${events:+, }${r%%.*}=$(wc -l <"$work/watch-$r")"; done
  say "N=$N: all $N provisioned in ${secs}s (kubectl apply ${t_applied}s; first ${t_first}s, half ${t_half}s); peak RSS ${rss} MiB, CPU ${cpu}s, Docker calls $calls"
  ROWS+=("| $N | $secs | $rss | $cpu | $calls |")

  # A few seconds of steady state: reconciles, Docker calls and watch events while nothing changes.
  for r in "${WATCHED[@]}"; do
    "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" -n "$NS" get "$r" --watch-only -o name >"$work/idle-watch-$r" 2>/dev/null &
    WATCH_PIDS+=($!)
  done
  sleep "$IDLE"
  stop_watches
  local idle_events=""
  for r in "${WATCHED[@]}"; do idle_events+="${idle_events:+, }${r%%.*}=$(wc -l <"$work/idle-watch-$r")"; done
  local m_idle
  m_idle=$(metrics "$PORT") || m_idle=$m_after
  local idle_rec idle_calls
  idle_rec=$(($(reconciles "$m_idle" | awk '{ s += $2 } END { print s + 0 }') - $(reconciles "$m_after" | awk '{ s += $2 } END { print s + 0 }')))
  idle_calls=$(($(docker_calls_total "$m_idle") - calls))

  # Deletion.
  local t_del del_secs
  t_del=$(now)
  cleanup_objects "$timeout"
  del_secs=$(elapsed "$t_del" "$(now)")
  local m_end cpu_end rss_end
  m_end=$(metrics "$PORT" || true)
  rss_end=$(proc_rss_mib "$MANAGER_PID")
  cpu_end=$(proc_cpu_s "$MANAGER_PID")
  stop_manager
  local left
  left=$(docker ps -aq --filter "label=$LABEL_KEY=$ID" | wc -l)
  ((left == 0)) || say "WARNING: $left container(s) labelled $LABEL_KEY=$ID left after deletion (the provider should have removed them)"
  cleanup_docker

  local d
  d="### N=$N (run $ID)"$'\n\n'
  d+="- DockerCluster provisioned in ${dc_secs}s; all $N DockerMachines provisioned ${secs}s after the apply started (kubectl apply itself ${t_applied}s; first provisioned ${t_first}s, half ${t_half}s)"$'\n'
  d+="- Docker calls: $calls at provisioned ($((calls - calls_before)) for the machines = $(awk -v c=$((calls - calls_before)) -v n="$N" 'BEGIN { printf "%.1f", c / n }') per machine); $idle_calls in ${IDLE}s idle afterwards; $(docker_calls_total "$m_end") by the end (after deletion)"$'\n'
  d+="- Kubernetes API requests in the machine phase, per verb: $(join -a2 -e0 -o 0,1.2,2.2 <(kube_requests "$m_before") <(kube_requests "$m_after") | awk -v n="$N" '{ d = $3 - $2; printf "%s%s=%d (%.1f/machine)", sep, $1, d, d / n; sep=", " }'); in ${IDLE}s idle: $(join -a2 -e0 -o 0,1.2,2.2 <(kube_requests "$m_after") <(kube_requests "$m_idle") | awk '{ printf "%s%s=%d", sep, $1, $3 - $2; sep=", " }')"$'\n'
  d+="- Reconciles at provisioned: $(reconciles "$m_after" | awk '{ printf "%s%s=%s", sep, $1, $2; sep=", " }'); machine phase only: $(join_delta "$m_before" "$m_after" "$N"); $idle_rec in ${IDLE}s idle"$'\n'
  local errs
  errs=$(reconcile_errors "$m_end")
  d+="- Watch events in the machine phase (apply to all provisioned): $events"$'\n'
  d+="- Watch events in the ${IDLE}s idle period: $idle_events"$'\n'
  d+="- Reconcile errors by the end: ${errs:-none}"$'\n'
  d+="- Deletion (DockerMachines, DockerCluster, namespace) took ${del_secs}s; at the end: peak RSS ${rss_end} MiB, CPU ${cpu_end}s"$'\n'
  d+="- Docker calls per operation (at provisioned / at the end):"$'\n'
  d+=$(join -a1 -a2 -e0 -o 0,1.2,2.2 <(docker_calls "$m_after") <(docker_calls "$m_end") | awk '{ printf "  - %s: %s / %s\n", $1, $2, $3 }')$'\n'
  DETAILS+=("$d")
  printf '%s\n' "$d" >&2
  ((${BENCH_KEEP_LOGS:-0})) || rm -rf "$work" "$MANAGER_LOG"
  MANAGER_LOG=""
  delete_rbac
  ID="" NS=""
}

# join_delta <metrics before> <metrics after> <N>: reconciles per controller in between, per machine.
join_delta() {
  join -a2 -e0 -o 0,1.2,2.2 <(reconciles "$1") <(reconciles "$2") |
    awk -v n="$3" '{ d = $3 - $2; printf "%s%s=%d (%.1f/machine)", sep, $1, d, d / n; sep=", " }'
}

# ---- main -----------------------------------------------------------------------------------

say "bench for N = ${NS_LIST[*]}; host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p "$LOG_DIR" "$(dirname "$BENCH_OUT")"
say "bringing the local plane up"
"$HACK_DIR/plane.sh" up >&2 || fail "hack/plane.sh up failed"
docker image inspect "$BENCH_IMAGE" >/dev/null 2>&1 || fail "image $BENCH_IMAGE missing; run hack/images.sh"
docker image inspect "$LB_IMAGE" >/dev/null 2>&1 || fail "image $LB_IMAGE missing; run hack/images.sh"
say "building the manager (release)"
(cd "$REPO_ROOT" && cargo build --release --bin manager >&2) || fail "cargo build failed"
[[ -x $MANAGER_BIN ]] || fail "$MANAGER_BIN not built"
# The CAPI core manager (hack/capi.sh) reacts to every Machine/Cluster change and so adds watch
# events (and load); say whether it ran.
CAPI_RUNNING=$("$HACK_DIR/capi.sh" status 2>/dev/null | grep -c 'readyz ok' || true)
say "CAPI managers running: $CAPI_RUNNING/3"

for n in "${NS_LIST[@]}"; do
  run_one "$n"
done

TABLE="| N | seconds to provisioned | peak RSS MiB | CPU s | Docker calls |"$'\n'
TABLE+="|---:|---:|---:|---:|---:|"$'\n'
for r in "${ROWS[@]}"; do TABLE+="$r"$'\n'; done

{
  printf '%s\n' "$TABLE"
  printf 'CAPI managers (hack/capi.sh) running: %s/3. ' "$CAPI_RUNNING"
  printf 'Host: %s cores, %s; load average at the end %s. Whole run %ss. Measured when all DockerMachines were provisioned (RSS = VmHWM, CPU = utime+stime of the manager since its start, Docker calls = sum of capd_docker_api_calls since its start, cluster LB included).\n\n' \
    "$(nproc)" "$(date -Is)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$((SECONDS - RUN_START))"
  printf '%s\n' "${DETAILS[@]}"
} >"$BENCH_OUT"
printf '%s' "$TABLE"
say "done in $((SECONDS - RUN_START))s; table and details in $BENCH_OUT"
