#!/usr/bin/env bash
# Packaging checks: the clusterctl artifacts, the manifests and the image, against the local
# plane (hack/plane.sh). Every check runs; the script exits non-zero if any failed.
#   hack/test-packaging.sh [--skip-image] [--skip-build] [--skip-plane]
#     --skip-image  do not build and run the manager image
#     --skip-build  build the image from the binary already staged (hack/build-image.sh --skip-build)
#     --skip-plane  only the offline checks (no API server)
# Checks:
#   render       hack/release.sh lays out a local clusterctl repository from config/default
#   components   one Namespace (capd-system, PSA privileged); every object labelled
#                cluster.x-k8s.io/provider=infrastructure-docker; namespaced objects in it; only
#                the expected kinds (no admission webhooks); every CRD carries the
#                cluster.x-k8s.io/v1beta2 label naming served versions; the Deployment's
#                container is `manager` running /manager with the Docker socket mounted; each
#                CRD's conversion webhook is the Service of the components, on the manager's
#                webhook port, with its CA injected from the Certificate whose Secret the
#                manager mounts
#   variables    every ${VAR} of the components and every variable `clusterctl generate cluster
#                --list-variables` prints (each flavor) is documented in docs/variables.md,
#                and every documented variable is used
#   clusterctl   `clusterctl generate provider` (what `clusterctl init` fetches and processes)
#                resolves our provider, and the CAPI ones, from the local repository only;
#                --target-namespace moves the conversion Service reference, the CA injection and
#                the certificate's DNS names with it
#   crds         the plane has the CAPI CRDs and ours (ours are created from config/crd/bases if
#                absent: the API server must accept them, CEL cost limits included)
#   dry-run      `kubectl apply --dry-run=server` of the processed components (but the
#                cert-manager objects: the plane has no cert-manager); each flavor
#                rendered by `clusterctl generate cluster` dry-run applied too, with and
#                without DOCKER_NODE_IMAGE
#   topology     the development flavor's ClusterClass (renamed for the run) is created and
#                reconciled by CAPI, then its Cluster and the development-mp flavor's pass the
#                topology webhook against it, and a Cluster with a wrongly typed variable is
#                rejected (needs hack/capi.sh)
#   image        hack/build-image.sh; the image runs like the pod (the Deployment's args, the
#                Docker socket, root without capabilities, read-only root filesystem), with
#                --network host and a token of the ServiceAccount of config/rbac; /healthz and
#                /readyz answer 200, the leader-election Lease appears, no 403 in the log;
#                then it reconciles a DockerCluster of its own to Ready (a load balancer on
#                its own network) and deletes it with its container (check_reconcile)
# Created on the plane, and removed at the end: the renamed ClusterClass and its templates
# (topology check, labelled); for the image check, config/rbac under names
# prefixed capd-rs-packaging-<pid>- (labelled capd-rs.test/run=packaging; the manager runs with
# that ServiceAccount's token), the manager's Lease, one Cluster and DockerCluster named
# capd-rs-packaging-<pid>; our CRDs, if they were absent (labelled).
# The dry-runs use the `default` namespace: the plane has no namespace controller, so a
# namespace deleted there would never go away.
# Tools: kubectl ($KUBECTL, else hack/build-binaries.sh's), clusterctl ($CLUSTERCTL, else
# hack/build-binaries.sh capi's), docker, curl. Plane: $PLANE_KUBECONFIG (default: hack/plane.sh's).
source "$(dirname "$0")/lib.sh"

SKIP_IMAGE=false
SKIP_PLANE=false
BUILD_ARGS=()
for arg in "$@"; do
  case "$arg" in
    --skip-image) SKIP_IMAGE=true ;;
    --skip-plane) SKIP_PLANE=true; SKIP_IMAGE=true ;;
    --skip-build) BUILD_ARGS=(--skip-build) ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) die "unknown argument $arg (see --help)" ;;
  esac
done

TEST_LABEL_KEY=capd-rs.test/run
TEST_LABEL_VALUE=packaging
TEST_NS=default
RUN_ID=capd-rs-packaging-$$
LEASE=$RUN_ID
IMAGE=${CAPD_IMAGE_UNDER_TEST:-capd-rs/manager:dev}
CONTAINER=$RUN_ID
KUBERNETES_TEST_VERSION=v1.35.0
VARIABLES_DOC=${VARIABLES_DOC:-$REPO_ROOT/docs/variables.md}
[[ -f "$VARIABLES_DOC" ]] || VARIABLES_DOC=$REPO_ROOT/README.md
WORK=$(mktemp -d "${TMPDIR:-/tmp}/capd-rs-packaging.XXXXXX")

# --- tools -------------------------------------------------------------------------------
KUBECTL=${KUBECTL:-}
if [[ -z "$KUBECTL" ]]; then
  if [[ -x "$BIN_DIR/k8s-v$K8S_VERSION/kubectl" ]]; then KUBECTL=$BIN_DIR/k8s-v$K8S_VERSION/kubectl
  else KUBECTL=$(command -v kubectl || true)
  fi
fi
CLUSTERCTL=${CLUSTERCTL:-}
if [[ -z "$CLUSTERCTL" ]]; then
  if [[ -x "$BIN_DIR/capi-v$CAPI_VERSION/clusterctl" ]]; then CLUSTERCTL=$BIN_DIR/capi-v$CAPI_VERSION/clusterctl
  else CLUSTERCTL=$(command -v clusterctl || true)
  fi
fi
PLANE_KUBECONFIG=${PLANE_KUBECONFIG:-$KUBECONFIG_PATH}
export KUBECONFIG=$PLANE_KUBECONFIG
# clusterctl keeps state under $HOME/.cluster-api (or XDG); keep it out of the user's.
export XDG_CONFIG_HOME=$WORK/xdg

# --- check runner --------------------------------------------------------------------------
PASSED=()
FAILED=()
# fail <message>: ends the current check (checks run in a subshell).
fail() { printf '\033[1;31mFAIL:\033[0m %s\n' "$*" >&2; exit 1; }
# run_check <name> <function>: runs the function in a `set -e` subshell and records the result.
run_check() {
  local name=$1; shift
  log "check: $name"
  set +e
  ( set -e; "$@" )
  local rc=$?
  set -e
  if ((rc == 0)); then PASSED+=("$name"); else FAILED+=("$name"); printf '\033[1;31m    check "%s" failed\033[0m\n' "$name" >&2; fi
  return 0
}
skip() { log "skip: $1 ($2)"; FAILED+=("$1 (not run: $2)"); }

CREATED_CRDS=false
cleanup() {
  set +e
  if docker inspect "$CONTAINER" >/dev/null 2>&1; then
    docker rm -f "$CONTAINER" >/dev/null 2>&1
    "$KUBECTL" delete lease -n "$TEST_NS" "$LEASE" --ignore-not-found >/dev/null 2>&1
  fi
  # (|| true: the ERR trap of lib.sh fires on any failing command, set -e or not.)
  if [[ -f "$WORK/created-cluster" ]]; then
    "$KUBECTL" patch -n "$TEST_NS" "dockercluster/$RUN_ID" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
    "$KUBECTL" delete -n "$TEST_NS" "dockercluster/$RUN_ID" "cluster/$RUN_ID" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  docker ps -aq --filter "label=$TEST_LABEL_KEY=$RUN_ID" | xargs -r docker rm -f >/dev/null 2>&1 || true
  docker network rm "$RUN_ID" >/dev/null 2>&1 || true
  if [[ -f "$WORK/created-topology" ]]; then
    "$KUBECTL" delete -f "$WORK/topology-class.yaml" --ignore-not-found --wait=false >/dev/null 2>&1
  fi
  if [[ -f "$WORK/created-rbac" ]]; then
    "$KUBECTL" delete -f "$WORK/rbac.yaml" --ignore-not-found >/dev/null 2>&1
  fi
  if $CREATED_CRDS; then
    # only the CRDs this run created (and labelled)
    xargs -r "$KUBECTL" delete crd --wait=false < "$WORK/created-crds" >/dev/null 2>&1
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# objects <file> <go-template>: runs the template on each object of a multi-document YAML
# file, offline (`annotate --local` removes an annotation nobody has and prints the objects).
# Templates guard optional fields with `with`, as each object has different ones.
objects() { "$KUBECTL" annotate --local -f "$1" capd-rs.test/unused- -o go-template="$2"; }
# Label value of the current object: {{template}} snippets below are spelled out.
LBL_PROVIDER='{{with .metadata.labels}}{{with index . "cluster.x-k8s.io/provider"}}{{.}}{{end}}{{end}}'
NS='{{with .metadata.namespace}}{{.}}{{end}}'

# documented_vars <section-word>: the `VAR` names of the tables under the "### " heading that
# contains <section-word> in $VARIABLES_DOC.
documented_vars() {
  awk -v want="$1" '
    /^#/ { insec = (tolower($0) ~ /^###/ && tolower($0) ~ tolower(want)) ; if ($0 ~ /^##? /) insec = 0; next }
    insec && /^\| *`[A-Z][A-Z0-9_]*`/ { match($0, /`[A-Z][A-Z0-9_]*`/); print substr($0, RSTART + 1, RLENGTH - 2) }
  ' "$VARIABLES_DOC" | sort -u
}

# compare_sets <what> <used-file> <documented-file>
compare_sets() {
  local what=$1 used=$2 documented=$3 missing extra
  missing=$(comm -23 "$used" "$documented")
  extra=$(comm -13 "$used" "$documented")
  [[ -z "$missing" ]] || fail "$what variables not documented in $VARIABLES_DOC: $(echo $missing)"
  [[ -z "$extra" ]] || fail "$what variables documented in $VARIABLES_DOC but not used: $(echo $extra)"
  echo "    $what variables: $(echo $(cat "$used"))"
}

# --- checks --------------------------------------------------------------------------------
REPO_DIR=$WORK/repo
VERSION=$CAPD_VERSION
CONFIG=$REPO_DIR/clusterctl.yaml
COMP=$REPO_DIR/infrastructure-docker/$VERSION/infrastructure-components.yaml

check_render() {
  [[ -n "$KUBECTL" ]] || fail "no kubectl (hack/build-binaries.sh kube builds one)"
  KUBECTL=$KUBECTL "$REPO_ROOT/hack/release.sh" --repo "$REPO_DIR" >/dev/null
  local f
  for f in infrastructure-components.yaml metadata.yaml cluster-template.yaml \
           cluster-template-development.yaml clusterclass-quick-start.yaml; do
    [[ -s "$REPO_DIR/infrastructure-docker/$VERSION/$f" ]] || fail "release.sh did not produce infrastructure-docker/$VERSION/$f"
  done
  grep -q "url: file://$COMP" "$CONFIG" || fail "clusterctl.yaml does not point at $COMP"
  # The components with every variable at its default (what clusterctl renders with no
  # variables set), for checks that must not depend on clusterctl.
  sed -E 's/\$\{[A-Za-z_][A-Za-z0-9_]*:=([^}]*)\}/\1/g' "$COMP" > "$WORK/components-defaults.yaml"
  ! grep -n '\${' "$WORK/components-defaults.yaml" || fail "components use variables without a \${VAR:=default}"
}

check_components() {
  local list ns_count bad
  list=$(objects "$COMP" "{{.kind}}|{{.metadata.name}}|$NS|$LBL_PROVIDER{{\"\\n\"}}")
  echo "$list" | sed 's/^/    /'
  # exactly one Namespace, the provider's
  ns_count=$(grep -c '^Namespace|' <<<"$list" || true)
  ((ns_count == 1)) || fail "components must hold exactly one Namespace, found $ns_count"
  grep -q '^Namespace|capd-system|' <<<"$list" || fail "the Namespace is not capd-system"
  [[ $(objects "$COMP" '{{.kind}}={{with .metadata.labels}}{{with index . "pod-security.kubernetes.io/enforce"}}{{.}}{{end}}{{end}}{{"\n"}}' | grep '^Namespace=') == "Namespace=privileged" ]] \
    || fail "Namespace capd-system lacks pod-security.kubernetes.io/enforce=privileged (the Docker socket is a hostPath)"
  # every object carries the provider label
  bad=$(awk -F'|' '$4 != "infrastructure-docker" {print $1"/"$2}' <<<"$list")
  [[ -z "$bad" ]] || fail "objects without cluster.x-k8s.io/provider=infrastructure-docker: $(echo $bad)"
  # only the expected kinds; namespaced ones in capd-system, cluster-scoped ones without namespace
  bad=$(awk -F'|' '
    $1 ~ /^(Namespace|CustomResourceDefinition|ClusterRole|ClusterRoleBinding|ValidatingAdmissionPolicy|ValidatingAdmissionPolicyBinding)$/ { if ($3 != "") print $1"/"$2" has a namespace"; next }
    $1 ~ /^(ServiceAccount|Role|RoleBinding|Deployment|Service|Certificate|Issuer)$/ { if ($3 != "capd-system") print $1"/"$2" is not in capd-system"; next }
    { print "unexpected kind " $1"/"$2 }' <<<"$list")
  [[ -z "$bad" ]] || fail "$(echo $bad)"
  # every CRD, each labelled with the v1beta2 contract and serving what the label names
  local crd want crds
  crds=$(objects "$COMP" '{{.kind}}|{{.metadata.name}}|{{with .metadata.labels}}{{with index . "cluster.x-k8s.io/v1beta2"}}{{.}}{{end}}{{end}}|{{with .spec}}{{range .versions}}{{.name}}:{{.served}}:{{.storage}},{{end}}{{end}}{{"\n"}}' | grep '^CustomResourceDefinition|' || true)
  for want in "${CRD_PLURALS[@]}"; do
    crd=$(grep "^CustomResourceDefinition|$want.infrastructure.cluster.x-k8s.io|" <<<"$crds") \
      || fail "CRD $want.infrastructure.cluster.x-k8s.io missing"
    local label versions v
    label=$(cut -d'|' -f3 <<<"$crd"); versions=$(cut -d'|' -f4 <<<"$crd")
    [[ -n "$label" ]] || fail "CRD $want lacks label cluster.x-k8s.io/v1beta2"
    for v in ${label//_/ }; do
      grep -q "\(^\|,\)$v:true:" <<<"$versions" || fail "CRD $want: version $v named by cluster.x-k8s.io/v1beta2 is not served ($versions)"
    done
    [[ $(tr ',' '\n' <<<"$versions" | grep -c ':true$') -eq 1 ]] || fail "CRD $want must have exactly one storage version ($versions)"
  done
  # the Deployment
  local dep
  dep=$(objects "$COMP" '{{.kind}}|{{with .spec}}{{with .template}}{{range .spec.containers}}{{.name}}>{{with .command}}{{index . 0}}{{end}}>{{.image}};{{end}}|{{range .spec.volumes}}{{with .hostPath}}{{.path}}{{end}};{{end}}|{{range .spec.containers}}{{range .args}}{{.}} {{end}}{{end}}{{end}}{{end}}{{"\n"}}' | grep '^Deployment|' || true)
  [[ $(wc -l <<<"$dep") -eq 1 ]] || fail "expected one Deployment"
  grep -q '|manager>/manager>' <<<"$dep" || fail "the Deployment has no container named manager running /manager: $dep"
  grep -q '/var/run/docker.sock;' <<<"$dep" || fail "the Deployment does not mount /var/run/docker.sock"
  grep -q -- '--leader-elect' <<<"$dep" || fail "the manager is not started with --leader-elect"
  # conversion: every CRD calls the one Service, which reaches the manager's webhook port, with
  # the CA of the Certificate whose Secret the manager mounts
  local hooks
  hooks=$(objects "$COMP" '{{.kind}}|{{with .spec.conversion}}{{.strategy}}|{{with .webhook.clientConfig.service}}{{.namespace}}/{{.name}}{{.path}}{{end}}{{end}}|{{with .metadata.annotations}}{{index . "cert-manager.io/inject-ca-from"}}{{end}}{{"\n"}}' | grep '^CustomResourceDefinition|' | sort -u)
  [[ $(wc -l <<<"$hooks") -eq 1 && $hooks == "CustomResourceDefinition|Webhook|capd-system/capd-webhook-service/convert|capd-system/capd-serving-cert" ]] \
    || fail "the CRDs must all convert through capd-system/capd-webhook-service/convert with the CA of capd-serving-cert: $hooks"
  local wiring
  wiring=$(objects "$COMP" '{{.kind}}|{{.metadata.name}}|{{if eq .kind "Service"}}{{range .spec.ports}}{{.port}}>{{.targetPort}}{{end}}{{end}}{{if eq .kind "Certificate"}}{{.spec.secretName}}{{end}}{{if eq .kind "Deployment"}}{{range .spec.template.spec.containers}}{{range .ports}}{{.name}}={{.containerPort}};{{end}}{{end}}{{range .spec.template.spec.volumes}}{{with .secret}}{{.secretName}};{{end}}{{end}}{{end}}{{"\n"}}' | grep -E '^(Service|Certificate|Deployment)\|')
  grep -qx 'Service|capd-webhook-service|443>webhook-server' <<<"$wiring" || fail "no Service capd-webhook-service 443 -> webhook-server: $wiring"
  grep -qx 'Certificate|capd-serving-cert|capd-webhook-service-cert' <<<"$wiring" || fail "no Certificate capd-serving-cert writing capd-webhook-service-cert: $wiring"
  grep -q '^Deployment|.*webhook-server=9443;.*capd-webhook-service-cert;' <<<"$wiring" \
    || fail "the Deployment must expose webhook-server 9443 and mount capd-webhook-service-cert: $wiring"
  grep -q -- '--webhook-cert-dir=' <<<"$dep" || fail "the manager is not told where the webhook certificate is"
  # the bindings name the ServiceAccount the Deployment uses
  local sa subjects
  sa=$(objects "$COMP" '{{.kind}}|{{with .spec}}{{with .template}}{{.spec.serviceAccountName}}{{end}}{{end}}{{"\n"}}' | sed -n 's/^Deployment|//p' || true)
  subjects=$(objects "$COMP" '{{.kind}}|{{range .subjects}}{{.name}}@{{.namespace}};{{end}}{{"\n"}}' | grep -E '^(Cluster)?RoleBinding\|' || true)
  [[ $(grep -c "|$sa@capd-system;" <<<"$subjects") -eq 2 ]] || fail "RoleBinding and ClusterRoleBinding must bind ServiceAccount $sa: $subjects"
}

check_component_variables() {
  grep -o '\${[A-Za-z_][A-Za-z0-9_]*' "$COMP" | cut -c3- | sort -u > "$WORK/comp-used"
  documented_vars component > "$WORK/comp-doc"
  [[ -s "$WORK/comp-doc" ]] || fail "no '### ... components' variable table in $VARIABLES_DOC"
  compare_sets components "$WORK/comp-used" "$WORK/comp-doc"
}

check_clusterctl_provider() {
  [[ -n "$CLUSTERCTL" ]] || fail "no clusterctl (hack/build-binaries.sh capi builds one)"
  local out=$WORK/components-processed.yaml
  env -u CAPD_IMAGE "$CLUSTERCTL" generate provider --config "$CONFIG" --infrastructure "docker:$VERSION" \
    --target-namespace "$TEST_NS" --write-to "$out" || fail "clusterctl generate provider --infrastructure docker:$VERSION failed"
  ! grep -n '\${' "$out" || fail "unsubstituted variables left by clusterctl"
  grep -q 'image: docker.io/capd-rs/manager:dev' "$out" || fail "the default image docker.io/capd-rs/manager:dev is not in the processed components"
  local nsl
  nsl=$(objects "$out" "{{.kind}}|{{.metadata.name}}|$NS{{\"\\n\"}}")
  grep -q "^Namespace|$TEST_NS|" <<<"$nsl" || fail "--target-namespace did not rename the Namespace"
  ! awk -F'|' -v ns="$TEST_NS" '$1 ~ /^(ServiceAccount|Role|RoleBinding|Deployment)$/ && $3 != ns' <<<"$nsl" | grep . \
    || fail "--target-namespace left objects in another namespace"
  local moved
  moved=$(objects "$out" '{{with .spec.conversion}}{{with .webhook.clientConfig.service}}{{.namespace}}{{"\n"}}{{end}}{{end}}{{with .metadata.annotations}}{{with index . "cert-manager.io/inject-ca-from"}}{{.}}{{"\n"}}{{end}}{{end}}{{with .spec.dnsNames}}{{range .}}{{.}}{{"\n"}}{{end}}{{end}}' | sort -u)
  ! grep -q capd-system <<<"$moved" || fail "--target-namespace left capd-system in the conversion wiring: $(echo $moved)"
  grep -q "^$TEST_NS/capd-serving-cert$" <<<"$moved" && grep -q "^capd-webhook-service\.$TEST_NS\.svc$" <<<"$moved" \
    || fail "--target-namespace did not move the CA injection and the certificate's DNS names: $(echo $moved)"
  "$CLUSTERCTL" generate provider --config "$CONFIG" --infrastructure "docker:$VERSION" --describe | sed 's/^/    /'
  # What `clusterctl init` would fetch for the other default providers, if provided locally.
  if grep -q 'type: CoreProvider' "$CONFIG"; then
    local p
    for p in "--core cluster-api" "--bootstrap kubeadm" "--control-plane kubeadm"; do
      # shellcheck disable=SC2086
      "$CLUSTERCTL" generate provider --config "$CONFIG" $p --write-to "$WORK/p.yaml" \
        || fail "clusterctl generate provider $p cannot resolve it from the local repository"
    done
    echo "    core, kubeadm bootstrap and kubeadm control-plane resolve from the local repository"
  fi
}

check_template_variables() {
  [[ -n "$CLUSTERCTL" ]] || fail "no clusterctl (hack/build-binaries.sh capi builds one)"
  local flavor args
  : > "$WORK/tpl-used"
  while IFS= read -r flavor; do
    args=(generate cluster pkg-vars --config "$CONFIG" --infrastructure "docker:$VERSION" --list-variables --target-namespace "$TEST_NS")
    [[ -z "$flavor" ]] || args+=(--flavor "$flavor")
    # no kubeconfig: the listing must not depend on a management cluster
    KUBECONFIG=$WORK/none "$CLUSTERCTL" "${args[@]}" > "$WORK/list" 2>&1 || { cat "$WORK/list"; fail "--list-variables failed for flavor '${flavor:-default}'"; }
    sed -n 's/^ *- \([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' "$WORK/list" | tee -a "$WORK/tpl-used" > "$WORK/list-$flavor"
    echo "    flavor ${flavor:-default}: $(echo $(cat "$WORK/list-$flavor"))"
    # each flavor on its own must be fully documented
    documented_vars template > "$WORK/tpl-doc"
    local missing
    missing=$(sort -u "$WORK/list-$flavor" | comm -23 - "$WORK/tpl-doc")
    [[ -z "$missing" ]] || fail "flavor ${flavor:-default} uses undocumented variables: $(echo $missing)"
  done < <(flavors)
  sort -u -o "$WORK/tpl-used" "$WORK/tpl-used"
  [[ -s "$WORK/tpl-doc" ]] || fail "no '### ... templates' variable table in $VARIABLES_DOC"
  compare_sets templates "$WORK/tpl-used" "$WORK/tpl-doc"
  # the ClusterClass file must stay free of clusterctl variables
  ! grep -n '\${' "$REPO_ROOT"/templates/clusterclass-*.yaml || fail "clusterclass files must not use clusterctl variables"
}

plane_up() { "$KUBECTL" --request-timeout=5s get --raw /readyz >/dev/null 2>&1; }

check_dry_run_components() {
  [[ -s "$WORK/components-processed.yaml" ]] || fail "no processed components (the clusterctl check failed)"
  # Without the cert-manager objects: the plane has no cert-manager (its CRDs are unknown there).
  # The CRDs go apart: the plane has them already, converting through a URL where ours name a
  # service. Only a whole-object replace checks them as written; an apply would merge them into
  # the plane's copies (and keep a URL another field manager owns beside the service reference).
  "$KUBECTL" annotate --local -f "$WORK/components-processed.yaml" capd-rs.test/unused- -o json \
    | python3 -c '
import json, sys
text, dec, at, keep = sys.stdin.read(), json.JSONDecoder(), 0, []
while text[at:].strip():
    obj, end = dec.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
    at = end
    keep += [o for o in obj.get("items", [obj]) if not o["apiVersion"].startswith("cert-manager.io/")]
for name, pick in (("crds", True), ("rest", False)):
    items = [o for o in keep if (o["kind"] == "CustomResourceDefinition") == pick]
    json.dump({"apiVersion": "v1", "kind": "List", "items": items}, open(sys.argv[1] + name + ".json", "w"))' \
    "$WORK/components-dry-run-"
  # (plane.sh up installs every CRD of config/crd, so a missing one fails the replace.)
  "$KUBECTL" replace --dry-run=server -o name -f "$WORK/components-dry-run-crds.json" \
    | sed 's/^/    /' || fail "kubectl replace --dry-run=server rejected the components' CRDs"
  # Server-side: as clusterctl applies them, and with no last-applied annotation.
  "$KUBECTL" apply --server-side --force-conflicts --dry-run=server \
    -f "$WORK/components-dry-run-rest.json" | sed 's/^/    /' \
    || fail "kubectl apply --dry-run=server rejected the components"
}

ensure_crds() {
  local missing=()
  local c
  for c in clusters.cluster.x-k8s.io machinedeployments.cluster.x-k8s.io clusterclasses.cluster.x-k8s.io \
           kubeadmcontrolplanes.controlplane.cluster.x-k8s.io kubeadmcontrolplanetemplates.controlplane.cluster.x-k8s.io \
           kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io; do
    "$KUBECTL" get crd "$c" >/dev/null 2>&1 || missing+=("$c")
  done
  ((${#missing[@]} == 0)) || fail "the plane lacks the Cluster API CRDs ${missing[*]} (hack/plane.sh installs them)"
  local plural
  for plural in "${CRD_PLURALS[@]}"; do
    "$KUBECTL" get crd "$plural.infrastructure.cluster.x-k8s.io" >/dev/null 2>&1 && continue
    log "installing CRD $plural.infrastructure.cluster.x-k8s.io (labelled $TEST_LABEL_KEY=$TEST_LABEL_VALUE; removed afterwards)"
    local f="$REPO_ROOT/config/crd/bases/infrastructure.cluster.x-k8s.io_$plural.yaml"
    "$KUBECTL" create -f "$f" >/dev/null || fail "the API server rejected $f"
    echo "$plural.infrastructure.cluster.x-k8s.io" >> "$WORK/created-crds"
    "$KUBECTL" label crd "$plural.infrastructure.cluster.x-k8s.io" "$TEST_LABEL_KEY=$TEST_LABEL_VALUE" >/dev/null
    "$KUBECTL" wait --for condition=Established "crd/$plural.infrastructure.cluster.x-k8s.io" --timeout=60s >/dev/null
  done
}

# dry_run_flavor <flavor> <DOCKER_NODE_IMAGE or empty>
dry_run_flavor() {
  local flavor=$1 node_image=$2 out args tpl name=${1:-default}
  tpl=$REPO_ROOT/templates/cluster-template${flavor:+-$flavor}.yaml
  out=$WORK/cluster-$name${node_image:+-custom}.yaml
  args=(generate cluster pkg-test --config "$CONFIG" --infrastructure "docker:$VERSION" --target-namespace "$TEST_NS"
        --kubernetes-version "$KUBERNETES_TEST_VERSION" --control-plane-machine-count 3 --worker-machine-count 2)
  [[ -z "$flavor" ]] || args+=(--flavor "$flavor")
  if [[ -n "$node_image" ]]; then
    DOCKER_NODE_IMAGE=$node_image "$CLUSTERCTL" "${args[@]}" > "$out" || fail "clusterctl generate cluster (flavor $name) failed"
  else
    env -u DOCKER_NODE_IMAGE -u POD_CIDR -u SERVICE_CIDR -u SERVICE_DOMAIN "$CLUSTERCTL" "${args[@]}" > "$out" \
      || fail "clusterctl generate cluster (flavor $name) failed"
  fi
  ! grep -n '\${' "$out" || fail "unsubstituted variables in flavor $name"
  "$KUBECTL" apply --dry-run=server -f "$out" -o go-template='{{range .items}}{{.kind}}/{{.metadata.name}} customImage={{with .spec}}{{if .customImage}}{{.customImage}}{{end}}{{with .template}}{{with .spec}}{{with .customImage}}{{.}}{{end}}{{end}}{{end}}{{end}}{{"\n"}}{{end}}' > "$WORK/dry" 2>&1 \
    || { cat "$WORK/dry"; fail "kubectl apply --dry-run=server rejected flavor $name${node_image:+ with DOCKER_NODE_IMAGE}"; }
  sed 's/^/    /; s/ customImage=$//' "$WORK/dry"
  # DOCKER_NODE_IMAGE: a ClusterClass flavor passes it as the customImage variable; the others
  # put it, or the template's default for it (absent when that is null or ""), on every
  # DockerMachine(Template).
  if grep -q '^kind: ClusterClass' "$out"; then
    [[ -z "$node_image" ]] || grep -q "value: $node_image\$" "$out" || fail "DOCKER_NODE_IMAGE not passed as the customImage variable"
    return 0
  fi
  local expect=$node_image machines
  if [[ -z "$expect" ]]; then
    expect=$(grep -o '\${DOCKER_NODE_IMAGE:=[^}]*}' "$tpl" | head -n1 | sed 's/^\${DOCKER_NODE_IMAGE:=//; s/}$//; s/^"//; s/"$//' || true)
    [[ "$expect" != null ]] || expect=""
  fi
  machines=$(grep -E '^DockerMachine(Template)?/' "$WORK/dry" || true)
  [[ -n "$machines" ]] || fail "flavor $name has no DockerMachine or DockerMachineTemplate"
  ! grep -v " customImage=$expect\$" <<<"$machines" \
    || fail "flavor $name: customImage should be '${expect:-<absent>}' on every DockerMachine(Template)"
}

# The flavors: "" for cluster-template.yaml, <f> for cluster-template-<f>.yaml.
flavors() {
  local f
  for f in "$REPO_ROOT"/templates/cluster-template*.yaml; do
    f=${f##*/cluster-template}; f=${f%.yaml}; echo "${f#-}"
  done
}

check_dry_run_templates() {
  [[ -n "$CLUSTERCTL" ]] || fail "no clusterctl (hack/build-binaries.sh capi builds one)"
  local flavor
  while IFS= read -r flavor; do
    dry_run_flavor "$flavor" ""
    dry_run_flavor "$flavor" "example.test/node:v1.35.0"
  done < <(flavors)
}

# check_topology: the development flavor's Cluster validated against its ClusterClass for
# real. The ClusterClass and its templates are created (renamed for this run, labelled) so
# that CAPI's ClusterClass controller reconciles them; then the Cluster is dry-run applied and
# the topology webhook checks it against the class (variables included). Needs the CAPI
# managers (hack/capi.sh) running on the plane.
check_topology() {
  [[ -s "$WORK/cluster-development.yaml" ]] || fail "no rendered development flavor (dry-run-templates failed)"
  local hooks
  hooks=$("$KUBECTL" get validatingwebhookconfigurations -o name 2>/dev/null || true)
  [[ -n "$hooks" ]] || fail "no Cluster API webhooks on the plane (start the managers with hack/capi.sh up)"
  local class=$RUN_ID-qs
  sed "s/quick-start/$class/g" "$WORK/cluster-development.yaml" > "$WORK/topology.yaml"
  # Split the stream: the Cluster (dry-run only) and everything else (created).
  awk -v cl="$WORK/topology-cluster.yaml" -v rest="$WORK/topology-class.yaml" '
    function flush() { if (doc != "") { f = (doc ~ /(^|\n)kind: Cluster\n/) ? cl : rest; printf "---\n%s", doc > f }; doc = "" }
    /^---/ { flush(); next } { doc = doc $0 "\n" } END { flush() }' "$WORK/topology.yaml"
  grep -q '^kind: ClusterClass' "$WORK/topology-class.yaml" || fail "no ClusterClass in the development flavor"
  grep -q '^kind: Cluster$' "$WORK/topology-cluster.yaml" || fail "no Cluster in the development flavor"
  echo true > "$WORK/created-topology"
  "$KUBECTL" create -f "$WORK/topology-class.yaml" >/dev/null || fail "the API server rejected the ClusterClass or its templates"
  "$KUBECTL" label -f "$WORK/topology-class.yaml" "$TEST_LABEL_KEY=$TEST_LABEL_VALUE" >/dev/null
  "$KUBECTL" wait -n "$TEST_NS" --for=jsonpath='{.status.observedGeneration}'=1 "clusterclass/$class" --timeout=90s >/dev/null \
    || fail "ClusterClass $class was not reconciled within 90s (are the CAPI managers running?)"
  local conds
  conds=$("$KUBECTL" get -n "$TEST_NS" "clusterclass/$class" \
    -o go-template='{{range .status.conditions}}{{.type}}={{.status}} {{.reason}} {{.message}}{{"\n"}}{{end}}')
  sed 's/^/    ClusterClass /' <<<"$conds"
  grep -q '^VariablesReady=True ' <<<"$conds" || fail "ClusterClass $class: VariablesReady is not True"
  local out flavor
  # The development-mp flavor's Cluster (workers in a MachinePool) against the same class.
  [[ -s "$WORK/cluster-development-mp.yaml" ]] || fail "no rendered development-mp flavor (dry-run-templates failed)"
  sed "s/quick-start/$class/g" "$WORK/cluster-development-mp.yaml" | awk '
    /^---/ { if (doc ~ /(^|\n)kind: Cluster\n/) printf "---\n%s", doc; doc = ""; next } { doc = doc $0 "\n" }
    END { if (doc ~ /(^|\n)kind: Cluster\n/) printf "---\n%s", doc }' > "$WORK/topology-cluster-mp.yaml"
  grep -q 'machinePools:' "$WORK/topology-cluster-mp.yaml" || fail "no MachinePool in the development-mp flavor's Cluster"
  for flavor in development development-mp; do
    local f=$WORK/topology-cluster.yaml
    [[ $flavor == development ]] || f=$WORK/topology-cluster-mp.yaml
    out=$("$KUBECTL" apply --dry-run=server -f "$f" 2>&1) || { echo "$out"; fail "the Cluster of the $flavor flavor does not validate against its ClusterClass"; }
    echo "$out" | sed 's/^/    /'
    ! grep -q 'not been fully validated' <<<"$out" || fail "the topology webhook did not validate the $flavor Cluster against the ClusterClass"
  done
  # And it does reject what the class forbids: a customImage that is not a string.
  sed 's/^\(  *\)value: ""$/\1value: 42/' "$WORK/topology-cluster.yaml" > "$WORK/topology-bad.yaml"
  grep -q 'value: 42' "$WORK/topology-bad.yaml" || fail "could not build the negative case"
  if out=$("$KUBECTL" apply --dry-run=server -f "$WORK/topology-bad.yaml" 2>&1); then
    fail "a Cluster with customImage: 42 was accepted; the class variables are not enforced"
  fi
  echo "    rejected as expected: $(grep -m1 -o 'spec.topology.variables.*' <<<"$out" | cut -c1-140)"
}

# free_port [PREFERRED [FIRST-FALLBACK]]: PREFERRED if free, else the first free of 61 above.
free_port() {
  local p preferred=${1:-9440} base=${2:-19440}
  for p in "$preferred" $(seq "$base" $((base + 60))); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  return 1
}

check_image() {
  command -v docker >/dev/null && docker info >/dev/null 2>&1 || fail "the Docker Engine is not reachable (hack/docker-engine.sh)"
  "$REPO_ROOT/hack/build-image.sh" "${BUILD_ARGS[@]}" "$IMAGE" || fail "hack/build-image.sh failed"
  local entry user
  entry=$(docker image inspect -f '{{json .Config.Entrypoint}}' "$IMAGE")
  user=$(docker image inspect -f '{{.Config.User}}' "$IMAGE")
  [[ "$entry" == '["/manager"]' ]] || fail "image entrypoint is $entry, want [\"/manager\"]"
  [[ -z "$user" || "$user" == 0 || "$user" == root ]] || fail "image runs as $user; it must run as root for the Docker socket"

  # The Deployment's args, with the clusterctl defaults, exactly as the pod would get them.
  local args=() a port
  while IFS= read -r a; do args+=("$a"); done < <(
    objects "$WORK/components-defaults.yaml" '{{.kind}}|{{with .spec}}{{with .template}}{{range .spec.containers}}{{if eq .name "manager"}}{{range .args}}{{.}}{{"\n"}}{{end}}{{end}}{{end}}{{end}}{{end}}{{"\n"}}' \
      | sed 's/^[A-Za-z]*|//' | grep '^--')
  ((${#args[@]} > 0)) || fail "could not read the manager args from the components"
  # And its literal environment variables (those with a value, not a fieldRef).
  local envs=() e
  while IFS= read -r e; do envs+=(-e "$e"); done < <(
    objects "$WORK/components-defaults.yaml" '{{.kind}}|{{with .spec}}{{with .template}}{{range .spec.containers}}{{if eq .name "manager"}}{{range .env}}{{if .value}}{{.name}}={{.value}}{{"\n"}}{{end}}{{end}}{{end}}{{end}}{{end}}{{end}}{{"\n"}}' \
      | sed 's/^[A-Za-z]*|//' | grep '=')
  port=$(free_port) || fail "no free port for --health-addr"
  if [[ "$port" != 9440 ]]; then
    log "port 9440 is busy on this host: the container listens on port $port instead"
    local i
    for i in "${!args[@]}"; do
      if [[ "${args[$i]}" == --health-addr=* ]]; then args[$i]="${args[$i]%:*}:$port"; fi
    done
  fi
  # /metrics (HTTPS on the diagnostics address, :8443 in the pod): a free port on this host.
  local dport
  dport=$(free_port 8443 18443) || fail "no free port for --diagnostics-address"
  args+=("--diagnostics-address=127.0.0.1:$dport")
  # Keep this manager away from everyone else's objects on the shared plane: it watches only
  # objects carrying a watch-filter label nobody else sets, and takes its own Lease (in
  # POD_NAMESPACE, as in the pod).
  # It does reconcile one DockerCluster of its own (check_reconcile), on its own network, its
  # containers labelled for the cleanup.
  for i in "${!args[@]}"; do
    if [[ "${args[$i]}" == --docker-network=* ]]; then args[$i]="--docker-network=$RUN_ID"; fi
  done
  args+=("--namespace=$TEST_NS" "--watch-filter=$RUN_ID" "--leader-elect-lease-name=$LEASE"
    "--container-label=$TEST_LABEL_KEY=$RUN_ID")
  echo "    args: ${args[*]}"
  echo "    env: ${envs[*]}"

  # The manager authenticates as the ServiceAccount of config/rbac, bound to exactly the
  # roles of config/rbac: a missing permission shows up as a 403 here.
  echo true > "$WORK/created-rbac"
  shipped_rbac_kubeconfig "$PLANE_KUBECONFIG" "$WORK" "$TEST_NS" "$RUN_ID" "$TEST_LABEL_KEY=$TEST_LABEL_VALUE" \
    || fail "could not create the test RBAC objects and a token for their ServiceAccount"

  # Same confinement as the Deployment's securityContext: root, no capabilities, read-only root.
  docker run -d --name "$CONTAINER" --label "$TEST_LABEL_KEY=$TEST_LABEL_VALUE" \
    --network host --user 0 --cap-drop ALL --security-opt no-new-privileges --read-only --tmpfs /tmp \
    -v /var/run/docker.sock:/var/run/docker.sock -v "$WORK/kubeconfig:/etc/capd-rs/kubeconfig:ro" \
    "${envs[@]}" -e KUBECONFIG=/etc/capd-rs/kubeconfig -e POD_NAMESPACE="$TEST_NS" -e POD_NAME="$CONTAINER" -e DOCKER_HOST= \
    "$IMAGE" "${args[@]}" >/dev/null || fail "docker run failed"
  local path code deadline
  for path in /healthz /readyz; do
    code="" deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)); do
      code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port$path" || true)
      [[ "$code" == 200 ]] && break
      if [[ $(docker inspect -f '{{.State.Running}}' "$CONTAINER" 2>/dev/null) != true ]]; then
        docker logs --tail 30 "$CONTAINER" 2>&1 | cut -c1-300 | sed 's/^/    | /'
        fail "the manager container exited ($(docker inspect -f 'exit code {{.State.ExitCode}}' "$CONTAINER" 2>/dev/null))"
      fi
      sleep 1
    done
    if [[ "$code" != 200 ]]; then
      docker logs --tail 30 "$CONTAINER" 2>&1 | cut -c1-300 | sed 's/^/    | /'
      if grep -Eiq 'forbidden|\b403\b' <<<"$(docker logs "$CONTAINER" 2>&1)"; then
        fail "$path answered '$code' after 60s and the log shows permission errors: config/rbac lacks a permission the manager uses"
      fi
      fail "$path answered '$code' after 60s, want 200 (the Deployment's probes use it)"
    fi
    echo "    $path 200"
  done
  # Without a bearer token the metrics endpoint refuses (the authorised scrape: tests/diagnostics.rs).
  code=$(curl -sk -o /dev/null -w '%{http_code}' "https://127.0.0.1:$dport/metrics" || true)
  [[ "$code" == 401 ]] || fail "/metrics without a token answered '$code', want 401"
  echo "    /metrics without a token 401"
  sleep 5   # let the controllers start their watches
  docker logs "$CONTAINER" > "$WORK/manager.log" 2>&1
  if grep -Eiq 'forbidden|\b403\b' "$WORK/manager.log"; then
    grep -Ei 'forbidden|\b403\b' "$WORK/manager.log" | head -10 | cut -c1-300 | sed 's/^/    | /'
    fail "the manager hit permission errors with the RBAC of config/rbac"
  fi
  "$KUBECTL" get lease -n "$TEST_NS" "$LEASE" >/dev/null 2>&1 \
    || fail "no Lease $TEST_NS/$LEASE: leader election did not work with the RBAC of config/rbac"
  echo "    leader-election Lease $TEST_NS/$LEASE held; no permission errors in the log"
  check_reconcile
  docker logs "$CONTAINER" > "$WORK/manager.log" 2>&1
  if grep -Eiq 'forbidden|\b403\b' "$WORK/manager.log"; then
    grep -Ei 'forbidden|\b403\b' "$WORK/manager.log" | head -10 | cut -c1-300 | sed 's/^/    | /'
    fail "the manager hit permission errors with the RBAC of config/rbac while reconciling"
  fi
  tail -n 5 "$WORK/manager.log" | sed 's/^/    | /'
}

# The image's manager, under the shipped RBAC, reconciles a DockerCluster: load balancer,
# finalizer and Ready; deleting it removes the container and the finalizer.
check_reconcile() {
  local name=$RUN_ID uid
  "$KUBECTL" apply -f - >/dev/null <<EOF || fail "could not create the Cluster"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: $name, namespace: $TEST_NS, labels: {cluster.x-k8s.io/watch-filter: $RUN_ID}}
spec:
  clusterNetwork: {pods: {cidrBlocks: [192.168.0.0/16]}, services: {cidrBlocks: [10.128.0.0/12]}}
  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: DockerCluster, name: $name}
EOF
  echo true > "$WORK/created-cluster"
  uid=$("$KUBECTL" get cluster -n "$TEST_NS" "$name" -o jsonpath='{.metadata.uid}')
  "$KUBECTL" apply -f - >/dev/null <<EOF || fail "could not create the DockerCluster"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerCluster
metadata:
  name: $name
  namespace: $TEST_NS
  labels: {cluster.x-k8s.io/watch-filter: $RUN_ID, cluster.x-k8s.io/cluster-name: $name}
  ownerReferences: [{apiVersion: cluster.x-k8s.io/v1beta2, kind: Cluster, name: $name, uid: $uid}]
spec: {}
EOF
  "$KUBECTL" wait -n "$TEST_NS" "dockercluster/$name" --for=condition=Ready --timeout=90s >/dev/null \
    || fail "the DockerCluster did not become Ready under the shipped RBAC"
  docker inspect -f '{{.State.Running}}' "$name-lb" 2>/dev/null | grep -q true \
    || fail "no running load-balancer container $name-lb"
  "$KUBECTL" delete -n "$TEST_NS" "dockercluster/$name" --timeout=60s >/dev/null \
    || fail "the DockerCluster was not deleted (finalizer left?)"
  ! docker inspect "$name-lb" >/dev/null 2>&1 || fail "the load balancer outlived its DockerCluster"
  "$KUBECTL" delete -n "$TEST_NS" "cluster/$name" --wait=false >/dev/null
  echo "    DockerCluster $TEST_NS/$name: Ready with its load balancer, then deleted with it"
}

# --- run -----------------------------------------------------------------------------------
run_check render check_render
if [[ -s "$COMP" ]]; then
  run_check components check_components
  run_check component-variables check_component_variables
  run_check clusterctl-provider check_clusterctl_provider
  run_check template-variables check_template_variables
else
  for c in components component-variables clusterctl-provider template-variables; do skip "$c" "render failed"; done
fi

if $SKIP_PLANE; then
  log "skipping the checks that need the plane (--skip-plane)"
elif [[ -z "$KUBECTL" ]] || ! plane_up; then
  for c in dry-run-components dry-run-templates image; do skip "$c" "the plane is not up at $PLANE_KUBECONFIG (hack/plane.sh)"; done
else
  run_check dry-run-components check_dry_run_components
  run_check crds ensure_crds
  [[ -f "$WORK/created-crds" ]] && CREATED_CRDS=true
  if [[ " ${FAILED[*]} " != *" crds "* ]]; then
    run_check dry-run-templates check_dry_run_templates
    run_check topology check_topology
  else
    skip dry-run-templates "CRDs missing"
    skip topology "CRDs missing"
  fi
  if $SKIP_IMAGE; then
    log "skipping the image check (--skip-image)"
  elif [[ -s "$WORK/components-defaults.yaml" ]]; then
    run_check image check_image
  else
    skip image "components not rendered"
  fi
fi

echo
for c in "${PASSED[@]}"; do printf '\033[1;32mPASS\033[0m %s\n' "$c"; done
for c in "${FAILED[@]}"; do printf '\033[1;31mFAIL\033[0m %s\n' "$c"; done
((${#FAILED[@]} == 0)) || die "${#FAILED[@]} packaging check(s) failed"
log "all packaging checks passed"
