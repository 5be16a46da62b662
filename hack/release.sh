#!/usr/bin/env bash
# Renders the clusterctl artifacts and lays out a local clusterctl repository (no network).
#   hack/release.sh [--repo DIR] [--version vX.Y.Z] [--image REF] [--no-capi]
#     --repo DIR      repository root (default $CACHE_DIR/clusterctl-repo, i.e. ~/.cache/capd-rs/clusterctl-repo)
#     --version V     provider version (default: v + the version in Cargo.toml)
#     --image REF     manager image in the components (default docker.io/capd-rs/manager:dev;
#                     must be canonical, i.e. with a registry host, for clusterctl)
#     --no-capi       do not add the Cluster API core/kubeadm providers
# Result:
#   DIR/infrastructure-docker/V/{infrastructure-components.yaml,metadata.yaml,cluster-template*.yaml,clusterclass-*.yaml}
#   DIR/cluster-api/vCAPI/{core-components.yaml,metadata.yaml}                 \  rendered from the CAPI
#   DIR/bootstrap-kubeadm/vCAPI/{bootstrap-components.yaml,metadata.yaml}       }  Go module (v$CAPI_VERSION)
#   DIR/control-plane-kubeadm/vCAPI/{control-plane-components.yaml,metadata.yaml} / unless --no-capi
#   DIR/clusterctl.yaml   providers: entries with file:// URLs for all of the above
# Use it with `clusterctl <command> --config DIR/clusterctl.yaml`, e.g.
#   clusterctl generate cluster c1 --infrastructure docker --kubernetes-version v1.35.0 --config DIR/clusterctl.yaml
# infrastructure-components.yaml is `kubectl kustomize config/default`, clusterctl variables
# (`${VAR:=default}`) left in place. kubectl: $KUBECTL, else the one hack/build-binaries.sh
# builds ($BIN_DIR/k8s-v$K8S_VERSION/kubectl), else kubectl or kustomize on PATH.
source "$(dirname "$0")/lib.sh"

REPO_DIR="$CACHE_DIR/clusterctl-repo"
VERSION=""
WITH_CAPI=true
DEFAULT_IMAGE=docker.io/capd-rs/manager:dev
IMAGE=$DEFAULT_IMAGE
while (($#)); do
  case "$1" in
    --repo) REPO_DIR=${2:?--repo needs a directory}; shift 2 ;;
    --repo=*) REPO_DIR=${1#*=}; shift ;;
    --version) VERSION=${2:?--version needs a value}; shift 2 ;;
    --version=*) VERSION=${1#*=}; shift ;;
    --image) IMAGE=${2:?--image needs a reference}; shift 2 ;;
    --image=*) IMAGE=${1#*=}; shift ;;
    --no-capi) WITH_CAPI=false; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
mkdir -p "$REPO_DIR"
REPO_DIR=$(cd "$REPO_DIR" && pwd)   # clusterctl needs absolute file:// paths

# kustomize <dir>: prints the rendered kustomization.
kustomize_build() {
  if [[ -n "${KUBECTL:-}" ]]; then "$KUBECTL" kustomize "$1"
  elif [[ -x "$BIN_DIR/k8s-v$K8S_VERSION/kubectl" ]]; then "$BIN_DIR/k8s-v$K8S_VERSION/kubectl" kustomize "$1"
  elif command -v kubectl >/dev/null; then kubectl kustomize "$1"
  elif command -v kustomize >/dev/null; then kustomize build "$1"
  else die "no kubectl or kustomize: run hack/build-binaries.sh kube, or set KUBECTL"
  fi
}

# --- provider version and metadata.yaml ------------------------------------------------
VERSION=${VERSION:-$CAPD_VERSION}
[[ "$VERSION" =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)([-+].*)?$ ]] || die "version '$VERSION' is not vMAJOR.MINOR.PATCH"
MAJOR=${BASH_REMATCH[1]} MINOR=${BASH_REMATCH[2]}
# clusterctl refuses a version whose major.minor has no releaseSeries entry.
series=$(awk '/major:/{gsub(/[^0-9]/,"",$NF); ma=$NF} /minor:/{gsub(/[^0-9]/,"",$NF); print ma"."$NF}' "$REPO_ROOT/metadata.yaml")
grep -qx "$MAJOR.$MINOR" <<<"$series" || die "metadata.yaml has no releaseSeries entry for $MAJOR.$MINOR (has: $(echo $series))"

# --- infrastructure-docker -------------------------------------------------------------
for k in "${CRD_PLURALS[@]}"; do
  f="$REPO_ROOT/config/crd/bases/infrastructure.cluster.x-k8s.io_$k.yaml"
  [[ -s "$f" ]] || die "missing $f: generate the CRDs first (cargo run --bin crdgen config/crd/bases)"
done

INFRA="$REPO_DIR/infrastructure-docker/$VERSION"
rm -rf "$INFRA"
mkdir -p "$INFRA"
log "rendering $INFRA/infrastructure-components.yaml from config/default"
kustomize_build "$REPO_ROOT/config/default" > "$INFRA/infrastructure-components.yaml"
grep -q '^kind: Deployment' "$INFRA/infrastructure-components.yaml" || die "rendered components have no Deployment"
[[ $(grep -c "image: $DEFAULT_IMAGE\$" "$INFRA/infrastructure-components.yaml") -eq 1 ]] \
  || die "expected exactly one 'image: $DEFAULT_IMAGE' in the rendered components"
if [[ "$IMAGE" != "$DEFAULT_IMAGE" ]]; then
  [[ "$IMAGE" =~ ^[a-z0-9.-]+(:[0-9]+)?/[^[:space:]]+$ && ( "${IMAGE%%/*}" == *[.:]* || "${IMAGE%%/*}" == localhost ) ]] \
    || die "--image $IMAGE: use a canonical reference with a registry host (e.g. docker.io/org/name:tag)"
  sed -i "s#image: $DEFAULT_IMAGE\$#image: $IMAGE#" "$INFRA/infrastructure-components.yaml"
fi
cp "$REPO_ROOT/metadata.yaml" "$INFRA/metadata.yaml"
shopt -s nullglob
templates=("$REPO_ROOT"/templates/cluster-template*.yaml "$REPO_ROOT"/templates/clusterclass-*.yaml)
shopt -u nullglob
((${#templates[@]})) || die "no templates in $REPO_ROOT/templates"
cp "${templates[@]}" "$INFRA/"

# --- Cluster API core, kubeadm bootstrap and kubeadm control plane (optional) ----------
# The release manifests of CAPI are `kustomize build <component>/config/default` with the
# registry.k8s.io images; render them the same way from the Go module cache, so that
# clusterctl resolves every provider from this directory and never reaches GitHub.
CAPI_ENTRIES=""
if $WITH_CAPI; then
  capi_dir="" core=$(capi_core_dir)  # core provider: at the module root before v1.14, core/ since
  if command -v go >/dev/null; then
    capi_dir=$(cd "$CACHE_DIR" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/cluster-api@v$CAPI_VERSION" 2>/dev/null \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  fi
  if [[ -z "$capi_dir" || ! -d "$capi_dir/$core/config/default" ]]; then
    log "WARNING: Cluster API v$CAPI_VERSION module not available (go mod download); core providers not added"
  else
    # name type label file kustomize-dir image
    while read -r name type label file dir image; do
      out="$REPO_DIR/$label/v$CAPI_VERSION"
      rm -rf "$out"; mkdir -p "$out"
      log "rendering $out/$file from sigs.k8s.io/cluster-api@v$CAPI_VERSION/$dir"
      kustomize_build "$capi_dir/$dir" \
        | sed -e "s#image: gcr.io/k8s-staging-cluster-api/$image:main#image: registry.k8s.io/cluster-api/$image:v$CAPI_VERSION#" \
              -e 's#imagePullPolicy: Always#imagePullPolicy: IfNotPresent#' > "$out/$file"
      grep -q "registry.k8s.io/cluster-api/$image:v$CAPI_VERSION" "$out/$file" || die "could not set the $image image in $out/$file"
      cp "$capi_dir/metadata.yaml" "$out/metadata.yaml"
      CAPI_ENTRIES+="- name: $name
  type: $type
  url: file://$out/$file
"
    done <<EOF_CAPI
cluster-api CoreProvider cluster-api core-components.yaml $core/config/default cluster-api-controller
kubeadm BootstrapProvider bootstrap-kubeadm bootstrap-components.yaml bootstrap/kubeadm/config/default kubeadm-bootstrap-controller
kubeadm ControlPlaneProvider control-plane-kubeadm control-plane-components.yaml controlplane/kubeadm/config/default kubeadm-control-plane-controller
EOF_CAPI
  fi
fi

# --- clusterctl.yaml -------------------------------------------------------------------
cat > "$REPO_DIR/clusterctl.yaml" <<EOF_CFG
# Generated by hack/release.sh: a local, offline clusterctl repository.
#   clusterctl <command> --config $REPO_DIR/clusterctl.yaml
# Entries here override clusterctl's built-in providers of the same name and type.
# cert-manager is not provided: Cluster API core needs it, so install it before
# \`clusterctl init\` (clusterctl then detects it and skips installing it).
providers:
- name: docker
  type: InfrastructureProvider
  url: file://$INFRA/infrastructure-components.yaml
${CAPI_ENTRIES}CLUSTERCTL_DISABLE_VERSIONCHECK: "true"
EOF_CFG

log "clusterctl repository ready: $REPO_DIR (config: $REPO_DIR/clusterctl.yaml)"
echo "$REPO_DIR/clusterctl.yaml"
