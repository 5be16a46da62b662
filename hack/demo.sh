#!/usr/bin/env bash
# Quick start: bring up the local management plane (Docker Engine, kube-apiserver, Cluster API
# core), run the capd-rs manager on it, create a sample cluster from templates/ and show what it
# created: the load balancer and its endpoint, the node containers and the conditions.
#   hack/demo.sh          # up (idempotent): a real workload cluster, 1 control plane + 1 worker
#                         # from templates/cluster-template.yaml, Nodes Ready and a Pod running
#   DEMO_FLAVOR=light hack/demo.sh   # the light flavor: 1 + 2 light nodes, no Kubernetes inside
#   hack/demo.sh down     # delete the sample cluster and stop the manager (the plane stays up)
# It composes with hack/test.sh in either order: its manager watches only its own namespace, so
# it never touches the tests' objects (nor they its), and `down` brings back whatever it needs
# (the CAPI managers, its own manager) before deleting, whatever ran in between.
# DEMO_NAME (default demo) names one instance: its cluster, namespace capd-rs-<name>, state dir,
# container label and network; hack/test.sh runs its own (suite-demo) beside a user's.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

NAME=${DEMO_NAME:-demo}
CLUSTER=$NAME
FLAVOR=${DEMO_FLAVOR:-real}
[[ $FLAVOR == real || $FLAVOR == light ]] || die "DEMO_FLAVOR: real or light, not $FLAVOR"
NAMESPACE=capd-rs-$NAME
DEMO_DIR="$PLANE_DIR/$NAME"
DEMO_LABEL="capd-rs.test/run=$NAME"
HEALTH_ADDR=${DEMO_HEALTH_ADDR:-127.0.0.1:9450}
DIAGNOSTICS_ADDR=${DEMO_DIAGNOSTICS_ADDR:-127.0.0.1:8443}
KUBECTL="$BIN_DIR/k8s-v$K8S_VERSION/kubectl"
CLUSTERCTL="$BIN_DIR/capi-v$CAPI_VERSION/clusterctl"
export KUBECONFIG="$KUBECONFIG_PATH"
mkdir -p "$DEMO_DIR"

# The pid file outlives the process (a machine restart): a pid is the demo's manager only if its
# command line is this instance's. The namespace tells the instance (one per DEMO_NAME), whatever
# addresses the environment gives this call: `down` without the addresses `up` had must still
# find, and stop, the manager `up` started.
manager_pid() {
  local pid
  pid=$(proc_pid "$DEMO_DIR/manager.pid") || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "--namespace=$NAMESPACE " || return 1
  echo "$pid"
}

# The demo's manager, watching the demo's namespace only (idempotent).
start_manager() {
  log "building the manager"
  cargo build --locked --bin manager
  if ! manager_pid >/dev/null; then
    log "starting the manager (log: $DEMO_DIR/manager.log)"
    start_proc "$DEMO_DIR/manager.pid" "$DEMO_DIR/manager.log" \
      "$TARGET_DIR/debug/manager" --kubeconfig="$KUBECONFIG" --health-addr="$HEALTH_ADDR" \
      --diagnostics-address="$DIAGNOSTICS_ADDR" \
      --namespace="$NAMESPACE" \
      --docker-network="capd-rs-$NAME" \
      --container-label="$DEMO_LABEL"
  fi
  wait_for 60 "manager ready on $HEALTH_ADDR" curl -sf "http://$HEALTH_ADDR/readyz"
}

ensure_namespace() {
  "$KUBECTL" create namespace "$NAMESPACE" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
}

down() {
  if "$KUBECTL" get cluster "$CLUSTER" -n "$NAMESPACE" >/dev/null 2>&1; then
    # Deleting needs CAPI's managers and ours: something may have stopped them since `up`.
    hack/capi.sh up
    # A namespace removed with its finalizers forced leaves its objects behind, unwritable
    # ("namespace not found") and so undeletable by any controller: give them a namespace back.
    ensure_namespace
    start_manager
    log "deleting cluster $CLUSTER (machines, load balancer, containers)"
    "$KUBECTL" delete cluster "$CLUSTER" -n "$NAMESPACE" --timeout=180s
  fi
  if manager_pid >/dev/null; then
    stop_proc "$DEMO_DIR/manager.pid" "the manager" 30
  fi
  rm -f "$DEMO_DIR/manager.pid"
  docker network ls -q --filter "label=$DEMO_LABEL" | xargs -r docker network rm >/dev/null
  log "demo removed; stop the plane with: hack/capi.sh down && hack/plane.sh down"
}

if [[ "${1:-up}" == down ]]; then down; exit 0; fi

hack/docker-engine.sh
hack/images.sh
[[ $FLAVOR == light ]] || hack/node-image.sh
hack/plane.sh up
hack/capi.sh up

ensure_namespace
# A fresh log for a fresh manager: tests/demo.rs reads what this one reconciled.
manager_pid >/dev/null || : >"$DEMO_DIR/manager.log"
start_manager

if [[ $FLAVOR == light ]]; then
  template=templates/cluster-template-light.yaml machines=3
  log "creating cluster $CLUSTER from $template"
  KUBERNETES_VERSION=v$K8S_VERSION WORKER_MACHINE_COUNT=2 \
    "$CLUSTERCTL" generate cluster "$CLUSTER" --from "$template" \
    --target-namespace "$NAMESPACE" | "$KUBECTL" apply -f -
else
  template=templates/cluster-template.yaml machines=2
  log "creating cluster $CLUSTER from $template (Kubernetes v$K8S_VERSION)"
  "$CLUSTERCTL" generate cluster "$CLUSTER" --from "$template" \
    --kubernetes-version "v$K8S_VERSION" --control-plane-machine-count 1 --worker-machine-count 1 \
    --target-namespace "$NAMESPACE" | "$KUBECTL" apply -f -
fi

log "waiting for the load balancer and $machines machines"
"$KUBECTL" wait dockercluster "$CLUSTER" -n "$NAMESPACE" --for=jsonpath='{.status.initialization.provisioned}'=true --timeout=180s
provisioned() {
  local n
  n=$("$KUBECTL" get dockermachines -n "$NAMESPACE" -l "cluster.x-k8s.io/cluster-name=$CLUSTER" \
    -o jsonpath='{range .items[*]}{.status.initialization.provisioned}{"\n"}{end}' | grep -c true || true)
  [[ "$n" -ge $machines ]]
}
wait_for 600 "$machines provisioned DockerMachines" provisioned

if [[ $FLAVOR == real ]]; then
  # The workload cluster, through the kubeconfig KCP wrote (a file only the owner reads).
  WL_KUBECONFIG="$DEMO_DIR/$CLUSTER.kubeconfig"
  (umask 077; "$KUBECTL" get secret "$CLUSTER-kubeconfig" -n "$NAMESPACE" -o jsonpath='{.data.value}' \
    | base64 -d >"$WL_KUBECONFIG")
  wl() { "$KUBECTL" --kubeconfig "$WL_KUBECONFIG" "$@"; }
  ready_nodes() { [[ $(wl get nodes --no-headers 2>/dev/null | awk '$2 == "Ready"' | wc -l) -ge 2 ]]; }
  wait_for 600 "2 Ready Nodes in the workload cluster" ready_nodes
  # A Pod of an image every node already has (kubeadm's pause), so nothing is pulled.
  cp=$(docker ps --filter "label=io.x-k8s.kind.cluster=$CLUSTER" \
    --filter label=io.x-k8s.kind.role=control-plane --format '{{.Names}}' | head -1)
  pause=$(docker exec "$cp" kubeadm config images list --kubernetes-version "v$K8S_VERSION" 2>/dev/null | grep /pause:)
  [[ -n $pause ]] || die "cannot tell the pause image of $cp"
  wl run hello --image="$pause" --restart=Never >/dev/null 2>&1 || true
  wait_for 300 "Pod hello running" bash -c "[[ \$('$KUBECTL' --kubeconfig '$WL_KUBECONFIG' get pod hello -o jsonpath='{.status.phase}') == Running ]]"
fi

echo
echo "== Load balancer"
host=$("$KUBECTL" get dockercluster "$CLUSTER" -n "$NAMESPACE" -o jsonpath='{.spec.controlPlaneEndpoint.host}:{.spec.controlPlaneEndpoint.port}')
echo "controlPlaneEndpoint: $host"
echo "published API port:   $(docker port "$CLUSTER-lb" 6443/tcp | head -1)"
echo "HAProxy stats:        http://$(docker port "$CLUSTER-lb" 8404/tcp | head -1)/stats"
echo
echo "== Containers"
docker ps --filter "label=io.x-k8s.kind.cluster=$CLUSTER" \
  --format 'table {{.Names}}\t{{.Label "io.x-k8s.kind.role"}}\t{{.Status}}\t{{.Image}}'
echo
echo "== Objects"
"$KUBECTL" get cluster,dockercluster,machines,dockermachines -n "$NAMESPACE" -l "cluster.x-k8s.io/cluster-name=$CLUSTER" -o wide 2>/dev/null \
  || "$KUBECTL" get dockercluster,dockermachines -n "$NAMESPACE"
echo
echo "== Conditions"
for obj in $("$KUBECTL" get dockercluster,dockermachines -n "$NAMESPACE" -l "cluster.x-k8s.io/cluster-name=$CLUSTER" -o name); do
  "$KUBECTL" get "$obj" -n "$NAMESPACE" \
    -o jsonpath='{.kind}/{.metadata.name}:{range .status.conditions[*]}{"\n  "}{.type}={.status} ({.reason}){end}{"\n"}'
done
echo
if [[ $FLAVOR == real ]]; then
  echo "== The workload cluster (kubectl --kubeconfig $WL_KUBECONFIG)"
  wl get nodes -o wide
  wl get pods -A
  echo
  echo "Use it:         kubectl --kubeconfig $WL_KUBECONFIG get nodes"
else
  echo "Inside a node:  docker exec $CLUSTER-control-plane-0 cat /etc/capd-rs/hello.txt"
fi
echo "Clean up:       hack/demo.sh down"
