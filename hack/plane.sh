#!/usr/bin/env bash
# The real local management plane for tests, demos and benchmarks: Docker Engine + local images,
# etcd, kube-apiserver and a minimal kube-controller-manager (garbage collector + namespace
# controller) as local processes on 127.0.0.1, and the Cluster API CRDs.
#   hack/plane.sh up       start (idempotent; quick when already up)
#   hack/plane.sh down     stop everything it started, delete the etcd data and the Docker
#                          containers/networks labelled capd-rs.test/run (PLANE_DOWN_LABEL narrows)
#   hack/plane.sh status   show each component
#   hack/plane.sh env      print shell exports:  eval "$(hack/plane.sh env)"
#   hack/plane.sh restart-apiserver [TERM|KILL]   signal kube-apiserver (or etcd:
#   hack/plane.sh restart-etcd [TERM|KILL]        restart-etcd), start a new one once it has
#                          exited, return when the API server is ready (fault tests)
#   hack/plane.sh audit-log  print the API server's audit log path, restarting an API server
#                          started without one (the bench counts its managers' requests there)
# State lives in $PLANE_DIR (default ~/.cache/capd-rs/plane): pki/, etcd data, pid files, logs,
# kubeconfig. The CAPI managers are started separately by hack/capi.sh.
# PLANE_PROFILING=true: the API server serves /debug/pprof (to the admin kubeconfig), from its
# next start (`restart-apiserver` applies it to a running plane). Off by default, as envtest.
source "$(dirname "$0")/lib.sh"

ETCD_DATA="$PLANE_DIR/etcd-data"
ETCD_PID="$PLANE_DIR/etcd.pid"
ETCD_LOG="$PLANE_DIR/etcd.log"
APISERVER_PID="$PLANE_DIR/kube-apiserver.pid"
APISERVER_LOG="$PLANE_DIR/kube-apiserver.log"
KCM_PID="$PLANE_DIR/kube-controller-manager.pid"
KCM_LOG="$PLANE_DIR/kube-controller-manager.log"
AUDIT_POLICY="$PLANE_DIR/audit-policy.yaml"
AUDIT_LOG="$PLANE_DIR/audit.log"
CRD_STAMP="$PLANE_DIR/crds.sha256"
APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"

# ---- certificates ---------------------------------------------------------------------------

# mkcert <name> <subject> <extensions>: a leaf signed by the plane CA (RSA: the Rust TLS stacks
# and Go both take it; SANs are mandatory, Go ignores the CN).
mkcert() {
  local name=$1 subj=$2 ext=$3
  openssl req -new -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subj" 2>/dev/null
  printf '%b' "$ext" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
    -out "$name.crt" -extfile "$name.ext" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

# Generated once and reused across up/down, so kubeconfigs and webhook caBundles stay valid.
# Regenerated only if a file is missing or a cert expires within a day.
ensure_pki() {
  local f fresh=1
  for f in ca apiserver admin webhook; do
    [[ -s $PKI_DIR/$f.crt && -s $PKI_DIR/$f.key ]] &&
      openssl x509 -checkend 86400 -noout -in "$PKI_DIR/$f.crt" >/dev/null 2>&1 || fresh=0
  done
  [[ -s $PKI_DIR/sa.key && -s $PKI_DIR/sa.pub ]] || fresh=0
  ((fresh)) && return 0
  log "generating certificates in $PKI_DIR"
  rm -rf "$PKI_DIR"; mkdir -p "$PKI_DIR"
  (
    cd "$PKI_DIR"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=capd-rs-plane-ca" 2>/dev/null
    local serve="extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    mkcert apiserver "/CN=kube-apiserver" \
      "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1\n$serve"
    # O=system:masters bypasses RBAC: the tests and the CAPI managers need no RBAC objects.
    mkcert admin "/O=system:masters/CN=capd-rs-admin" \
      "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    # Serving cert for webhooks of processes on this host (CAPI managers, our manager).
    mkcert webhook "/CN=capd-rs-webhooks" "subjectAltName=IP:127.0.0.1,DNS:localhost\n$serve"
    mkdir -p webhook && cp webhook.crt webhook/tls.crt && cp webhook.key webhook/tls.key
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 0644 ./*.crt sa.pub webhook/tls.crt
  )
  # Old kubeconfig embeds the old CA.
  rm -f "$KUBECONFIG_PATH"
}

write_kubeconfig() {
  local tmp="$KUBECONFIG_PATH.tmp"
  cat > "$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: capd-rs-plane
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(base64 -w0 "$PKI_DIR/ca.crt")
users:
- name: capd-rs-admin
  user:
    client-certificate-data: $(base64 -w0 "$PKI_DIR/admin.crt")
    client-key-data: $(base64 -w0 "$PKI_DIR/admin.key")
contexts:
- name: capd-rs-plane
  context: {cluster: capd-rs-plane, user: capd-rs-admin}
current-context: capd-rs-plane
EOF
  chmod 0600 "$tmp"
  mv "$tmp" "$KUBECONFIG_PATH"
}

# ---- processes ------------------------------------------------------------------------------

etcd_healthy() { [[ $(curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health") == *'"health":"true"'* ]]; }
apiserver_ready() { curl -sf --max-time 3 --cacert "$PKI_DIR/ca.crt" "$APISERVER_URL/readyz" >/dev/null; }

start_etcd() {
  if ready_or_gone "$ETCD_PID" 30 "etcd health on 127.0.0.1:$ETCD_PORT (see $ETCD_LOG)" etcd_healthy; then
    return
  fi
  port_free "$ETCD_PORT" || die "port $ETCD_PORT is taken by a process this script did not start"
  port_free "$ETCD_PEER_PORT" || die "port $ETCD_PEER_PORT is taken by a process this script did not start"
  log "starting etcd v$ETCD_VERSION on 127.0.0.1:$ETCD_PORT"
  mkdir -p "$ETCD_DATA"; chmod 0700 "$ETCD_DATA"
  # --unsafe-no-fsync: test data only, and fsync latency dominates apiserver writes otherwise.
  start_proc "$ETCD_PID" "$ETCD_LOG" "$ETCD_BIN_DIR/etcd" \
    --name=plane --data-dir="$ETCD_DATA" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="plane=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync=true --log-level=warn
  wait_for 60 "etcd health on 127.0.0.1:$ETCD_PORT (see $ETCD_LOG)" etcd_healthy
}

start_apiserver() {
  if ready_or_gone "$APISERVER_PID" 180 "kube-apiserver /readyz (see $APISERVER_LOG)" apiserver_ready; then
    return
  fi
  port_free "$APISERVER_PORT" || die "port $APISERVER_PORT is taken by a process this script did not start"
  # A real local IP avoids the "kubernetes" Service endpoint reconciler complaining about
  # a loopback address; the docker0 bridge is there once Docker runs with its default bridge.
  # Optional: without it the API server advertises its default (never an early exit).
  local adv
  adv=$(ip -4 -o addr show dev docker0 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}') || adv=""
  log "starting kube-apiserver v$K8S_VERSION on 127.0.0.1:$APISERVER_PORT${adv:+ (advertising $adv)}"
  mkdir -p "$PLANE_DIR/apiserver"
  # An event per request of the bench's managers (each a ServiceAccount of namespace
  # capd-rs-bench), once it is answered, and nothing for anyone else: the tests pay nothing.
  cat >"$AUDIT_POLICY" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts:capd-rs-bench"]
- level: None
EOF
  # Flags as envtest's, with our certs: client-cert auth (admin = O=system:masters), RBAC, and
  # no ServiceAccount admission (no controller would ever create the default SA). Plus
  # OwnerReferencesPermissionEnforcement, as upstream's e2e kind clusters run: setting
  # blockOwnerDeletion needs the right to update the owner's finalizers, which the test managers'
  # shipped role must grant.
  start_proc "$APISERVER_PID" "$APISERVER_LOG" "$K8S_BIN_DIR/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --secure-port="$APISERVER_PORT" ${adv:+--advertise-address="$adv"} \
    --tls-cert-file="$PKI_DIR/apiserver.crt" --tls-private-key-file="$PKI_DIR/apiserver.key" \
    --cert-dir="$PLANE_DIR/apiserver" \
    --client-ca-file="$PKI_DIR/ca.crt" \
    --service-account-issuer="$APISERVER_URL" \
    --service-account-key-file="$PKI_DIR/sa.pub" --service-account-signing-key-file="$PKI_DIR/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --authorization-mode=RBAC \
    --disable-admission-plugins=ServiceAccount \
    --enable-admission-plugins=OwnerReferencesPermissionEnforcement \
    --allow-privileged=true \
    --audit-policy-file="$AUDIT_POLICY" --audit-log-path="$AUDIT_LOG" --audit-log-format=json \
    --audit-log-maxsize=500 --audit-log-maxbackup=1 \
    --profiling="${PLANE_PROFILING:-false}"
  wait_for 180 "kube-apiserver /readyz (see $APISERVER_LOG)" apiserver_ready
}

kcm_healthy() { curl -skf --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz" >/dev/null; }

# Only the garbage collector and the namespace controller: without them ownerReference cascades
# never happen and deleted namespaces stay Terminating forever (envtest's known gaps). Nothing
# else (no scheduler, no node or workload controllers) is needed by a CAPI management cluster.
start_kcm() {
  if ready_or_gone "$KCM_PID" 60 "kube-controller-manager /healthz (see $KCM_LOG)" kcm_healthy; then
    return
  fi
  port_free "$KCM_PORT" || die "port $KCM_PORT is taken by a process this script did not start"
  log "starting kube-controller-manager (garbage collector, namespace controller)"
  mkdir -p "$PLANE_DIR/kcm"
  start_proc "$KCM_PID" "$KCM_LOG" "$K8S_BIN_DIR/kube-controller-manager" \
    --kubeconfig="$KUBECONFIG_PATH" \
    --authentication-kubeconfig="$KUBECONFIG_PATH" --authorization-kubeconfig="$KUBECONFIG_PATH" \
    --leader-elect=false \
    --controllers=garbage-collector-controller,namespace-controller \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --cert-dir="$PLANE_DIR/kcm" \
    --use-service-account-credentials=false \
    --authentication-skip-lookup=true
  wait_for 60 "kube-controller-manager /healthz (see $KCM_LOG)" kcm_healthy
}

# ---- CRDs -----------------------------------------------------------------------------------

# Prints, as one YAML stream, every CRD the plane installs: CAPI core, CABPK and KCP from the
# sigs.k8s.io/cluster-api module (the CABPK/KCP bases lack the contract labels that CAPI's release
# kustomization adds, and without them the core manager cannot resolve their refs), then ours,
# converted by a manager on this host (`--webhook-cert-dir $PKI_DIR/webhook --webhook-port
# $CAPD_WEBHOOK_PORT`): what config/crd's cert-manager patches do in a real install.
crd_stream() {
  local mod=$1 py
  py=$(python_yaml)
  "$py" - "$mod" "$REPO_ROOT/config/crd/bases" "https://127.0.0.1:$CAPD_WEBHOOK_PORT/convert" \
    "$(base64 -w0 "$PKI_DIR/ca.crt")" <<'PY'
import glob, os, sys, yaml
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster on these big files
Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
mod, ours = sys.argv[1], sys.argv[2]
labelled = {"cluster.x-k8s.io/v1beta1": "v1beta1", "cluster.x-k8s.io/v1beta2": "v1beta2"}
# CAPI core's CRDs: under core/ since v1.14, at the module root before (see capi_core_dir).
core = "core" if os.path.isdir(os.path.join(mod, "core/config")) else "."
sources = [(os.path.join(core, "config/crd/bases"), False), ("bootstrap/kubeadm/config/crd/bases", True),
           ("controlplane/kubeadm/config/crd/bases", True)]
docs = []
for sub, add_labels in sources:
    files = sorted(glob.glob(os.path.join(mod, sub, "*.yaml")))
    if not files:
        sys.exit(f"no CRDs under {mod}/{sub}")
    for f in files:
        for d in yaml.load_all(open(f), Loader=Loader):
            if not d or d.get("kind") != "CustomResourceDefinition":
                continue
            if add_labels:
                d.setdefault("metadata", {}).setdefault("labels", {}).update(labelled)
            docs.append(d)
convert_url, ca_bundle = sys.argv[3], sys.argv[4]
for f in sorted(glob.glob(os.path.join(ours, "*.yaml")) + glob.glob(os.path.join(ours, "*.yml"))):
    for d in yaml.load_all(open(f), Loader=Loader):
        if d and d.get("kind") == "CustomResourceDefinition":
            d["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": convert_url, "caBundle": ca_bundle}}}
            docs.append(d)
yaml.dump_all(docs, sys.stdout, Dumper=Dumper, sort_keys=False)
PY
}

install_crds() {
  local mod stream sum
  mod=$("$HACK_DIR/build-binaries.sh" capi-module-dir 2>/dev/null) || true
  [[ -n $mod && -d $mod ]] || die "could not download sigs.k8s.io/cluster-api@v$CAPI_VERSION from the Go module proxy"
  # Skip the work when no input changed since the last successful apply (keeps `up` quick:
  # parsing the big CAPI CRDs alone takes seconds). Inputs: the (immutable) module version, our
  # CRD files and this function's recipe.
  sum=$( { echo "$mod $CAPD_WEBHOOK_PORT"; declare -f crd_stream install_crds; cat "$PKI_DIR/ca.crt" \
    "$REPO_ROOT"/config/crd/bases/*.y*ml \
    "$REPO_ROOT"/config/admission/*.y*ml 2>/dev/null || true; } | sha256sum | cut -c1-64)
  # The stamp also records each CRD's resourceVersion after the apply: a tool that changed a
  # CRD behind the plane's back (or an emptied etcd) fails the match and gets a fresh apply.
  if [[ -f $CRD_STAMP && $(<"$CRD_STAMP") == "$sum $(crd_versions)" ]]; then
    log "CRDs up to date"
    return
  fi
  stream=$(crd_stream "$mod")
  log "installing CRDs (CAPI v$CAPI_VERSION core, CABPK, KCP$(compgen -G "$REPO_ROOT/config/crd/bases/*.y*ml" >/dev/null && echo ', capd-rs'))"
  # Server-side: the CAPI CRDs exceed the client-side last-applied annotation size limit.
  local applied
  applied=$(printf '%s\n' "$stream" | kubectl_plane apply --server-side --force-conflicts \
    --field-manager=capd-rs-plane -o name -f -)
  # shellcheck disable=SC2086  # one name per word
  kubectl_plane wait --for=condition=Established --timeout=60s $applied >/dev/null
  # Our admission policies (rules that need the request, e.g. the topology dry-run exception).
  if [[ -f $REPO_ROOT/config/admission/kustomization.yaml ]]; then
    log "installing admission policies (config/admission)"
    kubectl_plane kustomize "$REPO_ROOT/config/admission" | kubectl_plane apply --server-side \
      --force-conflicts --field-manager=capd-rs-plane -f - >/dev/null
  fi
  echo "$sum $(crd_versions)" > "$CRD_STAMP"
}

# crd_versions: every CRD's name=resourceVersion, on one line (empty when the plane has none).
crd_versions() {
  kubectl_plane get crd -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.resourceVersion} {end}' \
    2>/dev/null || true
}

# ---- commands -------------------------------------------------------------------------------

status() {
  local pid rc=0
  if docker info >/dev/null 2>&1; then
    printf '  %-16s %s\n' docker "up ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
  else printf '  %-16s %s\n' docker down; rc=1; fi
  local img
  for img in "kindest/haproxy:v20230606-42a2262b" "capd-rs/node:light"; do
    if docker image inspect "$img" >/dev/null 2>&1; then printf '  %-16s %s\n' image "$img"
    else printf '  %-16s %s\n' image "$img MISSING"; rc=1; fi
  done
  if pid=$(proc_pid "$ETCD_PID"); then
    printf '  %-16s %s\n' etcd "pid $pid, 127.0.0.1:$ETCD_PORT, $(etcd_healthy && echo healthy || echo UNHEALTHY)"
  else printf '  %-16s %s\n' etcd down; rc=1; fi
  if pid=$(proc_pid "$APISERVER_PID"); then
    printf '  %-16s %s\n' kube-apiserver "pid $pid, $APISERVER_URL, /readyz $(apiserver_ready && echo ok || echo FAILING)"
  else printf '  %-16s %s\n' kube-apiserver down; rc=1; fi
  if pid=$(proc_pid "$KCM_PID"); then
    printf '  %-16s %s\n' kube-ctrl-mgr "pid $pid, gc+namespace, /healthz $(kcm_healthy && echo ok || echo FAILING)"
  else printf '  %-16s %s\n' kube-ctrl-mgr down; rc=1; fi
  if [[ -f $KUBECONFIG_PATH ]] && apiserver_ready; then
    local n
    n=$(kubectl_plane get crd -o name 2>/dev/null | grep -c 'x-k8s.io$' || true)
    printf '  %-16s %s\n' crds "$n cluster-api related CRDs"
    printf '  %-16s %s\n' kubeconfig "$KUBECONFIG_PATH"
  fi
  if [[ -x $HACK_DIR/capi.sh ]]; then "$HACK_DIR/capi.sh" status || true; fi
  local n_ctr
  n_ctr=$({ docker ps -aq --filter "label=$PLANE_LABEL_KEY" 2>/dev/null || true; } | wc -l)
  printf '  %-16s %s\n' containers "$n_ctr labelled $PLANE_LABEL_KEY"
  return $rc
}

up() {
  local t0=$SECONDS
  "$HACK_DIR/docker-engine.sh"
  "$HACK_DIR/images.sh"
  "$HACK_DIR/build-binaries.sh" etcd kube kcm
  command -v openssl >/dev/null || die "openssl missing (hack/docker-engine.sh installs it)"
  mkdir -p "$PLANE_DIR"
  ensure_pki
  start_etcd
  start_apiserver
  write_kubeconfig
  start_kcm
  install_crds
  log "plane up in $((SECONDS - t0))s"
  status || true
  echo "  use it: eval \"\$($HACK_DIR/plane.sh env)\"" >&2
}

down() {
  # CAPI webhooks must go before the apiserver does (and the managers before their CRDs' owner).
  if [[ -x $HACK_DIR/capi.sh ]]; then "$HACK_DIR/capi.sh" down || true; fi
  stop_proc "$KCM_PID" kube-controller-manager 20
  stop_proc "$APISERVER_PID" kube-apiserver 30
  stop_proc "$ETCD_PID" etcd 20
  rm -rf "$ETCD_DATA" "$CRD_STAMP" "$PLANE_DIR/apiserver" "$PLANE_DIR/kcm"
  # Every Docker object a test or these scripts made carries the label key (any value: tests
  # use their own run ids); containers made from our images do not inherit it (IMAGE_LABEL), so
  # a kind cluster's or an e2e run's nodes stay. PLANE_DOWN_LABEL narrows it, e.g. to "$PLANE_LABEL".
  local sel=${PLANE_DOWN_LABEL:-$PLANE_LABEL_KEY}
  if docker info >/dev/null 2>&1; then
    local ids
    ids=$(docker ps -aq --filter "label=$sel")
    if [[ -n $ids ]]; then
      log "removing $(wc -w <<<"$ids") Docker containers labelled $sel"
      # shellcheck disable=SC2086
      docker rm -f -v $ids >/dev/null
    fi
    ids=$(docker network ls -q --filter "label=$sel")
    if [[ -n $ids ]]; then
      log "removing $(wc -w <<<"$ids") Docker networks labelled $sel"
      local id
      for id in $ids; do
        # Engine 20.10 can keep a network "with active endpoints" after all its containers are
        # gone (moby/moby#42119); only a daemon restart clears it. Warn, do not fail.
        docker network rm "$id" >/dev/null 2>&1 || log "warning: Docker network $id could not be removed (stale endpoints; it goes with the next dockerd restart)"
      done
    fi
  fi
  log "plane down (certificates kept in $PKI_DIR; images and binaries kept in $CACHE_DIR)"
}

# restart <etcd|apiserver> [TERM|KILL]: signal the running process and start a new one as soon
# as it has exited (a SIGTERM'd kube-apiserver drains its watches first); returns once the API
# server is ready again. For fault tests.
restart() {
  local what=$1 sig=${2:-TERM} pidfile ports start pid
  case $what in
    etcd) pidfile=$ETCD_PID ports="$ETCD_PORT $ETCD_PEER_PORT" start=start_etcd ;;
    apiserver) pidfile=$APISERVER_PID ports=$APISERVER_PORT start=start_apiserver ;;
    *) die "restart: unknown component '$what' (etcd or apiserver)" ;;
  esac
  pid=$(proc_pid "$pidfile") || die "$what is not running"
  log "restarting $what: SIG$sig to pid $pid"
  kill -"$sig" "$pid"
  # Until then it would be taken for the new one, or hold the new one's ports (and etcd's data
  # dir). A gracefully stopped API server drains its watches for about a minute.
  # shellcheck disable=SC2086 # the ports are separate words
  wait_for 180 "$what (pid $pid) to exit and free port(s) $ports" released "$pid" $ports
  "$start"
  wait_for 180 "kube-apiserver /readyz (see $APISERVER_LOG)" apiserver_ready
}

# The audit log's path, once the running API server writes it (one started by an older version of
# this script does not: it is restarted).
audit_log() {
  local pid
  pid=$(proc_pid "$APISERVER_PID") || die "kube-apiserver is not running (hack/plane.sh up)"
  if ! tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qx -- "--audit-log-path=$AUDIT_LOG"; then
    log "kube-apiserver (pid $pid) writes no audit log; restarting it with one"
    restart apiserver TERM >&2
  fi
  echo "$AUDIT_LOG"
}

env_cmd() {
  local path="$K8S_BIN_DIR:$ETCD_BIN_DIR"
  [[ -d $CAPI_BIN_DIR ]] && path="$path:$CAPI_BIN_DIR"
  echo "export KUBECONFIG=$KUBECONFIG_PATH"
  echo "export PATH=$path:\$PATH"
}

# One up/down at a time (tests may call `up` concurrently); the daemons do not inherit the lock.
lock() { mkdir -p "$PLANE_DIR"; exec 9>"$PLANE_DIR/.plane.lock"; flock 9; }

case ${1:-} in
  up) lock; up ;;
  restart-apiserver) lock; restart apiserver "${2:-TERM}" ;;
  restart-etcd) lock; restart etcd "${2:-TERM}" ;;
  audit-log) lock; audit_log ;;
  down) lock; down ;;
  status) status ;;
  env) env_cmd ;;
  *) echo "usage: $0 up|down|status|env|restart-apiserver [TERM|KILL]|restart-etcd [TERM|KILL]|audit-log" >&2; exit 2 ;;
esac
