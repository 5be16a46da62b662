#!/usr/bin/env bash
# Quick start: bring up the local management plane (Docker Engine, kube-apiserver, Cluster API
# core), run the capd-rs manager on it, create a sample cluster from templates/ and show what it
# created: the load balancer and its endpoint, the node containers and the conditions.
#   hack/demo.sh          # up (idempotent)
#   hack/demo.sh down     # delete the sample cluster and stop the manager (the plane stays up)
# It composes with hack/test.sh in either order: its manager watches only its own namespace, so
# it never touches the tests' objects (nor they its), and `down` brings back whatever it needs
# (the CAPI managers, its own manager) before deleting, whatever ran in between.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

CLUSTER=${DEMO_CLUSTER:-demo}
NAMESPACE=${DEMO_NAMESPACE:-capd-rs-demo}
DEMO_DIR="$PLANE_DIR/demo"
DEMO_LABEL="capd-rs.test/run=demo"
HEALTH_ADDR=127.0.0.1:9450
KUBECTL="$BIN_DIR/k8s-v$K8S_VERSION/kubectl"
CLUSTERCTL="$BIN_DIR/capi-v$CAPI_VERSION/clusterctl"
export KUBECONFIG="$KUBECONFIG_PATH"
mkdir -p "$DEMO_DIR"

manager_running() { [[ -f "$DEMO_DIR/manager.pid" ]] && kill -0 "$(cat "$DEMO_DIR/manager.pid")" 2>/dev/null; }

# The demo's manager, watching the demo's namespace only (idempotent).
start_manager() {
  log "building the manager"
  cargo build --locked --bin manager
  if ! manager_running; then
    log "starting the manager (log: $DEMO_DIR/manager.log)"
    nohup "$TARGET_DIR/debug/manager" --kubeconfig="$KUBECONFIG" --health-addr="$HEALTH_ADDR" \
      --diagnostics-address=127.0.0.1:8443 \
      --namespace="$NAMESPACE" \
      --docker-network=capd-rs-demo \
      --container-label="$DEMO_LABEL" >>"$DEMO_DIR/manager.log" 2>&1 &
    echo $! >"$DEMO_DIR/manager.pid"
  fi
  wait_for 60 "manager ready on $HEALTH_ADDR" curl -sf "http://$HEALTH_ADDR/readyz"
}

down() {
  if "$KUBECTL" get cluster "$CLUSTER" -n "$NAMESPACE" >/dev/null 2>&1; then
    # Deleting needs CAPI's managers and ours: something may have stopped them since `up`.
    hack/capi.sh up
    start_manager
    log "deleting cluster $CLUSTER (machines, load balancer, containers)"
    "$KUBECTL" delete cluster "$CLUSTER" -n "$NAMESPACE" --timeout=180s
  fi
  if manager_running; then
    log "stopping the manager"
    kill -TERM "$(cat "$DEMO_DIR/manager.pid")"
    wait_for 30 "manager exit" bash -c "! kill -0 $(cat "$DEMO_DIR/manager.pid") 2>/dev/null"
  fi
  rm -f "$DEMO_DIR/manager.pid"
  docker network ls -q --filter "label=$DEMO_LABEL" | xargs -r docker network rm >/dev/null
  log "demo removed; stop the plane with: hack/capi.sh down && hack/plane.sh down"
}

if [[ "${1:-up}" == down ]]; then down; exit 0; fi

hack/docker-engine.sh
hack/images.sh
hack/plane.sh up
hack/capi.sh up

"$KUBECTL" create namespace "$NAMESPACE" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
# A fresh log for a fresh manager: tests/demo.rs reads what this one reconciled.
manager_running || : >"$DEMO_DIR/manager.log"
start_manager

log "creating cluster $CLUSTER from templates/cluster-template-light.yaml"
KUBERNETES_VERSION=v$K8S_VERSION WORKER_MACHINE_COUNT=2 \
  "$CLUSTERCTL" generate cluster "$CLUSTER" --from templates/cluster-template-light.yaml \
  --target-namespace "$NAMESPACE" | "$KUBECTL" apply -f -

log "waiting for the load balancer and 3 machines"
"$KUBECTL" wait dockercluster "$CLUSTER" -n "$NAMESPACE" --for=jsonpath='{.status.initialization.provisioned}'=true --timeout=180s
provisioned() {
  local n
  n=$("$KUBECTL" get dockermachines -n "$NAMESPACE" -l "cluster.x-k8s.io/cluster-name=$CLUSTER" \
    -o jsonpath='{range .items[*]}{.status.initialization.provisioned}{"\n"}{end}' | grep -c true || true)
  [[ "$n" -ge 3 ]]
}
wait_for 300 "3 provisioned DockerMachines" provisioned

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
echo "Inside a node:  docker exec $CLUSTER-control-plane-0 cat /etc/capd-rs/hello.txt"
echo "Clean up:       hack/demo.sh down"
