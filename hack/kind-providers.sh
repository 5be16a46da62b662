#!/usr/bin/env bash
# The providers of a real `clusterctl init --infrastructure docker` on the kind management cluster
# of hack/kind.sh: every image built locally (no registry is reachable) and loaded with
# `kind load docker-image`, and a local clusterctl repository that names them.
#   hack/kind-providers.sh build    build the images (binaries cached by version in $BIN_DIR,
#                                   images by tag in Docker; the capd-rs image is rebuilt by
#                                   hack/build-image.sh unless CAPD_IMAGE_REBUILD=false)
#   hack/kind-providers.sh load     load them into the kind cluster (`kind load docker-image`)
#   hack/kind-providers.sh repo     lay out the clusterctl repository (hack/release.sh) plus
#                                   cert-manager; prints the path of its clusterctl.yaml
#   hack/kind-providers.sh init     load + repo, then `clusterctl init --infrastructure docker`
#                                   (the images must be built; clusterctl variables such as
#                                   CAPD_DOCKER_NETWORK come from the environment)
# For `clusterctl upgrade`: with CAPD_NEXT_VERSION=vX.Y.Z the repository also holds that version of
# capd-rs, whose components run $CAPD_IMAGE-next (the same build under a second tag, loaded too), and
# CAPD_INIT_VERSION=vA.B.C makes `init` install that version instead of the newest.
# Images (the names the components reference, so no image override is needed):
#   registry.k8s.io/cluster-api/{cluster-api,kubeadm-bootstrap,kubeadm-control-plane}-controller:v$CAPI_VERSION
#   quay.io/jetstack/cert-manager-{controller,cainjector,webhook}:v$CERT_MANAGER_VERSION
#   $CAPD_IMAGE (default docker.io/capd-rs/manager:kind; hack/build-image.sh, FROM scratch)
#   gcr.io/k8s-staging-cluster-api/test-extension:main   upstream's test runtime extension (the
#     image its test/extension/config/default names; hack/upstream-e2e.sh installs it)
# Each is FROM scratch: the static binary, the host's CA bundle, a non-root user (the capd-rs
# manager runs as root for the Docker socket, as its Deployment says). cert-manager is v1.11.5, not
# clusterctl's default v1.21.1 (see build_cert_manager in hack/build-binaries.sh); clusterctl.yaml's
# `cert-manager:` entry points clusterctl at hack/kind/cert-manager.yaml + the module's CRDs.
# Waiting and asserting is the caller's (tests/kind_management.rs); clusterctl init itself waits
# for the provider Deployments (--wait-providers).
source "$(dirname "$0")/lib.sh"

KIND_CLUSTER=${KIND_CLUSTER:-capd-rs-mgmt}
KIND_DIR="$CACHE_DIR/kind/$KIND_CLUSTER"
KIND_KUBECONFIG="$KIND_DIR/kubeconfig"
KIND="$BIN_DIR/kind-v$KIND_VERSION/kind"
CLUSTERCTL="$CAPI_BIN_DIR/clusterctl"
CM_BIN_DIR="$BIN_DIR/cert-manager-v$CERT_MANAGER_VERSION"
CAPD_IMAGE=${CAPD_IMAGE:-docker.io/capd-rs/manager:kind}
CAPD_NEXT_VERSION=${CAPD_NEXT_VERSION:-}
CAPD_NEXT_IMAGE=$CAPD_IMAGE-next
REPO_DIR="$KIND_DIR/clusterctl-repo"
# The clusterctl variable of our components naming the network of workload containers: the kind
# cluster's own (hack/kind.sh's KIND_EXPERIMENTAL_DOCKER_NETWORK), so they reach each other.
export CAPD_DOCKER_NETWORK=${CAPD_DOCKER_NETWORK:-${KIND_EXPERIMENTAL_DOCKER_NETWORK:-kind}}
# Label of the images built here; its value is the hash of what made the image.
IMAGE_LABEL="capd-rs.kind/image=<recipe hash>"
# Upstream's test runtime extension: the exact image its kustomization (test/extension/config/default,
# manager_image_patch.yaml) references, so the rendered manifest is used as it is.
TEST_EXTENSION_IMAGE=gcr.io/k8s-staging-cluster-api/test-extension:main

# scratch_image <image> <binary> <uid>: FROM scratch with the binary at /manager. Rebuilt only
# when the binary, the CA bundle or this recipe changed (a hash of them is the image's label).
scratch_image() {
  local image=$1 bin=$2 uid=$3 ctx key
  key=$( { sha256sum "$bin" /etc/ssl/certs/ca-certificates.crt; echo "$uid"; declare -f scratch_image; } | sha256sum | cut -c1-16)
  if [[ $(docker image inspect -f "{{index .Config.Labels \"${IMAGE_LABEL%%=*}\"}}" "$image" 2>/dev/null) == "$key" ]]; then
    log "image $image up to date"; return
  fi
  local old
  old=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
  ctx=$(mktemp -d)
  cp "$bin" "$ctx/manager"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
  cat > "$ctx/Dockerfile" <<EOF
FROM scratch
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY manager /manager
LABEL ${IMAGE_LABEL%%=*}=$key
USER $uid
ENTRYPOINT ["/manager"]
EOF
  # The legacy builder (no registry, no buildx) warns that it is deprecated: show its output
  # only when the build fails.
  local out
  out=$(docker build -q -t "$image" "$ctx" 2>&1) || { rm -rf "$ctx"; printf '%s\n' "$out" >&2; die "docker build of $image failed"; }
  rm -rf "$ctx"
  # The image it replaces, if it was ours and nothing else names it.
  if [[ -n $old && $old != $(docker image inspect -f '{{.Id}}' "$image") ]]; then
    docker rmi "$old" >/dev/null 2>&1 || true
  fi
  log "built $image ($(docker image inspect -f '{{.Size}}' "$image") bytes)"
}

provider_images() {
  echo "registry.k8s.io/cluster-api/cluster-api-controller:v$CAPI_VERSION $CAPI_BIN_DIR/capi-manager 65532"
  echo "registry.k8s.io/cluster-api/kubeadm-bootstrap-controller:v$CAPI_VERSION $CAPI_BIN_DIR/cabpk-manager 65532"
  echo "registry.k8s.io/cluster-api/kubeadm-control-plane-controller:v$CAPI_VERSION $CAPI_BIN_DIR/kcp-manager 65532"
  echo "quay.io/jetstack/cert-manager-controller:v$CERT_MANAGER_VERSION $CM_BIN_DIR/controller 1000"
  echo "quay.io/jetstack/cert-manager-cainjector:v$CERT_MANAGER_VERSION $CM_BIN_DIR/cainjector 1000"
  echo "quay.io/jetstack/cert-manager-webhook:v$CERT_MANAGER_VERSION $CM_BIN_DIR/webhook 1000"
  echo "$TEST_EXTENSION_IMAGE $BIN_DIR/test-extension-v$CAPI_VERSION/manager 65532"
}

build() {
  "$HACK_DIR/build-binaries.sh" capi cert-manager kind test-extension
  local image bin uid
  while read -r image bin uid; do scratch_image "$image" "$bin" "$uid"; done < <(provider_images)
  if [[ ${CAPD_IMAGE_REBUILD:-true} == true ]] || ! docker image inspect "$CAPD_IMAGE" >/dev/null 2>&1; then
    "$HACK_DIR/build-image.sh" "$CAPD_IMAGE"
  fi
}

load() {
  local image
  [[ -x $KIND ]] || die "no kind CLI: run hack/kind-providers.sh build"
  "$KIND" get clusters 2>/dev/null | grep -x "$KIND_CLUSTER" >/dev/null || die "no kind cluster $KIND_CLUSTER: run hack/kind.sh up"
  local all=("$CAPD_IMAGE") t0=$SECONDS
  if [[ -n $CAPD_NEXT_VERSION ]]; then
    docker tag "$CAPD_IMAGE" "$CAPD_NEXT_IMAGE"
    all+=("$CAPD_NEXT_IMAGE")
  fi
  while read -r image _; do all+=("$image"); done < <(provider_images)
  "$KIND" load docker-image --name "$KIND_CLUSTER" "${all[@]}"
  log "loaded ${#all[@]} images into $KIND_CLUSTER in $((SECONDS - t0))s"
}

repo() {
  "$HACK_DIR/release.sh" --repo "$REPO_DIR" --image "$CAPD_IMAGE" >/dev/null
  # Last, so that clusterctl.yaml's docker entry names it (clusterctl lists every version
  # directory of the repository either way).
  if [[ -n $CAPD_NEXT_VERSION ]]; then
    "$HACK_DIR/release.sh" --repo "$REPO_DIR" --image "$CAPD_NEXT_IMAGE" --version "$CAPD_NEXT_VERSION" >/dev/null
  fi
  local cm_dir out="$REPO_DIR/cert-manager/v$CERT_MANAGER_VERSION" f
  cm_dir=$("$HACK_DIR/build-binaries.sh" cert-manager-module-dir)
  [[ -d $cm_dir/deploy/crds ]] || die "no deploy/crds in the cert-manager module ($cm_dir)"
  mkdir -p "$out"
  {
    sed "s/__VERSION__/v$CERT_MANAGER_VERSION/g" "$HACK_DIR/kind/cert-manager.yaml"
    # The CRDs as the module ships them for its Helm chart: drop the templated label lines.
    for f in "$cm_dir"/deploy/crds/crd-*.yaml; do echo '---'; grep -v '{{' "$f"; done
  } > "$out/cert-manager.yaml"
  # release.sh's config says cert-manager is not provided: here it is.
  # shellcheck disable=SC2016  # the backquotes are text in the file, not a command
  sed -i '/^# cert-manager is not provided/,/^# `clusterctl init`/d' "$REPO_DIR/clusterctl.yaml"
  cat >> "$REPO_DIR/clusterctl.yaml" <<EOF
# cert-manager v$CERT_MANAGER_VERSION built locally (hack/kind-providers.sh); clusterctl installs it
# when no working cert-manager is found.
cert-manager:
  url: file://$out/cert-manager.yaml
  version: v$CERT_MANAGER_VERSION
EOF
  echo "$REPO_DIR/clusterctl.yaml"
}

init() {
  load
  local cfg t0=$SECONDS
  cfg=$(repo)
  "$CLUSTERCTL" init --kubeconfig "$KIND_KUBECONFIG" --config "$cfg" \
    --core "cluster-api:v$CAPI_VERSION" --bootstrap "kubeadm:v$CAPI_VERSION" \
    --control-plane "kubeadm:v$CAPI_VERSION" --infrastructure "docker${CAPD_INIT_VERSION:+:$CAPD_INIT_VERSION}" \
    --wait-providers
  log "clusterctl init done in $((SECONDS - t0))s"
}

case ${1:-} in
  build) build ;;
  load) load ;;
  repo) repo ;;
  init) init ;;
  *) echo "usage: $0 build|load|repo|init" >&2; exit 2 ;;
esac
