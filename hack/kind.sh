#!/usr/bin/env bash
# A kind management cluster made from this project's node image (kindest/node:v$K8S_VERSION,
# built by hack/node-image.sh; kind's own image build needs cgroup v2). The kind CLI is built
# from the Go module proxy. The node gets the host's Docker socket (for capd-rs running as a
# Pod, as upstream's docs set it up) and a kubelet told to run on a cgroup v1 host. The cluster
# lives on the `kind` network, where capd-rs puts workload containers by default (--docker-network),
# so the management cluster reaches their load balancers. `up` creates that network with a label
# when it is missing, and `down` removes it only if it carries that label and nothing uses it.
# KIND_IPV6=1 makes a new cluster dual-stack, as kind's own `kind` network and upstream's IPv6 CI
# are: the network gets an IPv6 subnet too (a ULA /64 derived from its name, like kind's; Docker
# 20.10 needs one named) and the cluster `ipFamily: dual`, so that the management cluster's pods
# reach an IPv6 workload cluster's load balancer. Opt-in: IPv4-only stays what the other specs
# were measured on.
#   hack/kind.sh up       create the cluster (kept if it exists); kubeconfig: $KIND_DIR/kubeconfig
#   hack/kind.sh down     delete the cluster and its network
#   hack/kind.sh network  only create the network (labelled, as `up` does), for a kind cluster made
#                         by someone else on it: hack/upstream-e2e.sh E2E_KIND=framework
#   hack/kind.sh status
source "$(dirname "$0")/lib.sh"

KIND_CLUSTER=${KIND_CLUSTER:-capd-rs-mgmt}
KIND_DIR="$CACHE_DIR/kind/$KIND_CLUSTER"
KIND_KUBECONFIG="$KIND_DIR/kubeconfig"
KIND="$BIN_DIR/kind-v$KIND_VERSION/kind"
NODE_IMAGE=${NODE_IMAGE:-kindest/node:v$K8S_VERSION}
# The network of kind's nodes (kind's default name; the tests use one of their own).
export KIND_EXPERIMENTAL_DOCKER_NETWORK=${KIND_EXPERIMENTAL_DOCKER_NETWORK:-kind}
NETWORK_LABEL="capd-rs.kind/network=$KIND_EXPERIMENTAL_DOCKER_NETWORK"
KIND_IPV6=${KIND_IPV6:-0}

# grep without -q: -q exits at the first match, and kind, still writing the next name, dies of
# SIGPIPE, which pipefail turns into "no such cluster" when others are listed after ours.
exists() { "$KIND" get clusters 2>/dev/null | grep -x "$KIND_CLUSTER" >/dev/null; }

# The API server runs OwnerReferencesPermissionEnforcement, as on the kind clusters upstream's e2e
# framework makes: an ownerReference with blockOwnerDeletion is refused unless its writer may
# update the owner's finalizers, an RBAC gap nothing else shows (a DevMachinePool's instances).
config() {
  cat <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  apiServerAddress: 127.0.0.1
$([[ $KIND_IPV6 == 1 ]] && echo "  ipFamily: dual")
nodes:
- role: control-plane
  extraMounts:
  - hostPath: /var/run/docker.sock
    containerPath: /var/run/docker.sock
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
- |
  kind: ClusterConfiguration
  apiServer:
    extraArgs:
      enable-admission-plugins: OwnerReferencesPermissionEnforcement
EOF
}

# ula_subnet <name>: fc00:HHHH:HHHH:HHHH::/64 from the name's SHA-1 (outside the host's fd00::/64).
ula_subnet() {
  local h
  h=$(printf %s "$1" | sha1sum | cut -c1-12)
  echo "fc00:${h:0:4}:${h:4:4}:${h:8:4}::/64"
}

create_network() {
  local net=$KIND_EXPERIMENTAL_DOCKER_NETWORK v6=()
  [[ $KIND_IPV6 == 1 ]] && v6=(--ipv6 --subnet "$(ula_subnet "$net")")
  if ! docker network inspect "$net" >/dev/null 2>&1; then
    docker network create --label "$NETWORK_LABEL" "${v6[@]}" "$net" >/dev/null
  elif [[ $KIND_IPV6 == 1 && $(docker network inspect -f '{{.EnableIPv6}}' "$net") != true ]]; then
    die "network $net exists without IPv6 (KIND_IPV6=1): hack/kind.sh down first"
  fi
}

up() {
  "$HACK_DIR/build-binaries.sh" kind
  docker image inspect "$NODE_IMAGE" >/dev/null 2>&1 || die "no image $NODE_IMAGE: run hack/node-image.sh"
  mkdir -p "$KIND_DIR"
  if exists; then
    log "kind cluster $KIND_CLUSTER exists"
  else
    create_network
    config > "$KIND_DIR/config.yaml"
    local start=$SECONDS
    "$KIND" create cluster --name "$KIND_CLUSTER" --image "$NODE_IMAGE" --config "$KIND_DIR/config.yaml" \
      --kubeconfig "$KIND_KUBECONFIG" --wait 180s
    log "kind cluster $KIND_CLUSTER up in $((SECONDS - start))s"
  fi
  # kind rewrites the file on create only: keep it current for a cluster that already existed.
  "$KIND" get kubeconfig --name "$KIND_CLUSTER" > "$KIND_KUBECONFIG"
  log "kubeconfig: $KIND_KUBECONFIG"
}

down() {
  if [[ -x $KIND ]] && exists; then
    "$KIND" delete cluster --name "$KIND_CLUSTER" --kubeconfig "$KIND_KUBECONFIG"
  fi
  # Our network only (by label), and only once no container uses it.
  local id
  id=$(docker network ls -q --filter "label=$NETWORK_LABEL" --filter "name=^$KIND_EXPERIMENTAL_DOCKER_NETWORK\$")
  if [[ -n $id && -z $(docker network inspect -f '{{range .Containers}}{{.Name}} {{end}}' "$id") ]]; then
    docker network rm "$id" >/dev/null
  fi
  rm -rf "$KIND_DIR"
}

status() {
  if [[ -x $KIND ]] && exists; then
    echo "  kind/$KIND_CLUSTER    up (kubeconfig $KIND_KUBECONFIG)"
  else
    echo "  kind/$KIND_CLUSTER    down"
  fi
}

case ${1:-} in
  up) up ;;
  network) create_network ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|network|status" >&2; exit 2 ;;
esac
