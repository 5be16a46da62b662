#!/usr/bin/env bash
# Runs the Cluster API v$CAPI_VERSION core, kubeadm bootstrap (CABPK) and kubeadm control-plane
# (KCP) managers as local processes against the plane of hack/plane.sh, and registers their
# admission and conversion webhooks with the plane's apiserver (reference/harness.md §4.5).
#   hack/capi.sh up       build (cached) + start the managers, wait for them, register webhooks
#   hack/capi.sh down     delete the webhook registrations, then stop the managers
#   hack/capi.sh restart  stop and start the managers only (their caches start afresh; the
#                         webhook registrations stay)
#   hack/capi.sh status
# Feature gates: CAPI defaults plus ClusterTopology=true (ClusterClass flavors);
# override with CAPI_FEATURE_GATES. Logs and pid files: $PLANE_DIR/capi/.
# Ports (127.0.0.1): webhooks 9443 core, 9444 CABPK, 9445 KCP; health 9440-9442
# (CAPI_WEBHOOK_PORT / CAPI_HEALTH_PORT move the ranges). The webhook servers listen on all
# interfaces: the CAPI mains have no flag for the webhook host.
source "$(dirname "$0")/lib.sh"

CAPI_DIR="$PLANE_DIR/capi"
CAPI_FEATURE_GATES=${CAPI_FEATURE_GATES:-ClusterTopology=true}
# Marks the webhook configurations we register, so `down` deletes exactly those.
WEBHOOK_LABEL="capd-rs.plane/component=capi-webhooks"
APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"

# Webhook ports base..base+2 and health ports base..base+2 (override to run a second plane).
CAPI_WEBHOOK_PORT=${CAPI_WEBHOOK_PORT:-9443}
CAPI_HEALTH_PORT=${CAPI_HEALTH_PORT:-9440}
# name | binary | webhook port | health port | manifests dir inside the cluster-api module
# (core's moved from the module root to core/ in v1.14: capi_core_dir)
MANAGERS=(
  "capi  capi-manager  $CAPI_WEBHOOK_PORT       $CAPI_HEALTH_PORT       $(capi_core_dir)"
  "cabpk cabpk-manager $((CAPI_WEBHOOK_PORT+1)) $((CAPI_HEALTH_PORT+1)) bootstrap/kubeadm"
  "kcp   kcp-manager   $((CAPI_WEBHOOK_PORT+2)) $((CAPI_HEALTH_PORT+2)) controlplane/kubeadm"
)

plane_ready() {
  [[ -s $KUBECONFIG_PATH ]] && curl -sf --max-time 3 --cacert "$PKI_DIR/ca.crt" "$APISERVER_URL/readyz" >/dev/null
}
manager_ready() { curl -sf --max-time 2 "http://127.0.0.1:$1/readyz" >/dev/null; }

start_managers() {
  local m name bin wport hport pid
  for m in "${MANAGERS[@]}"; do
    read -r name bin wport hport _ <<<"$m"
    if pid=$(proc_pid "$CAPI_DIR/$name.pid"); then log "$name manager running (pid $pid)"; continue; fi
    if ! port_free "$wport" || ! port_free "$hport"; then
      die "port $wport or $hport is taken by a process this script did not start"
    fi
    log "starting $name manager (webhooks 127.0.0.1:$wport, health 127.0.0.1:$hport)"
    # Out of cluster, with the system:masters kubeconfig (no RBAC needed). --leader-elect=false:
    # the mains give no way to set a lease namespace out of cluster. --diagnostics-address=0: the
    # metrics endpoint would need TokenReview plumbing and is not used. The webhook server needs
    # tls.crt/tls.key in its cert dir even before anything is registered.
    start_proc "$CAPI_DIR/$name.pid" "$CAPI_DIR/$name.log" "$CAPI_BIN_DIR/$bin" \
      --kubeconfig="$KUBECONFIG_PATH" \
      --leader-elect=false \
      --webhook-port="$wport" --webhook-cert-dir="$PKI_DIR/webhook" \
      --health-addr="127.0.0.1:$hport" \
      --diagnostics-address=0 \
      --feature-gates="$CAPI_FEATURE_GATES"
  done
  for m in "${MANAGERS[@]}"; do
    read -r name bin wport hport _ <<<"$m"
    # /readyz includes the webhook server's "started" check.
    wait_for 180 "$name manager /readyz on 127.0.0.1:$hport (see $CAPI_DIR/$name.log)" manager_ready "$hport"
    proc_pid "$CAPI_DIR/$name.pid" >/dev/null || die "$name manager exited; see $CAPI_DIR/$name.log"
  done
}

# Prints the webhook configurations (renamed per manager, service refs turned into URLs on
# 127.0.0.1 with the plane CA as caBundle) and, for every CRD a manager serves in more than one
# version, a partial CRD that sets its conversion webhook. Applied server-side under our own field
# manager, so hack/plane.sh re-applying the CRD bases never clobbers the conversion stanza.
# With `reset`, the CRD part sets the conversion strategy back to None instead.
webhook_stream() {
  local mode=$1 mod py
  mod=$("$HACK_DIR/build-binaries.sh" capi-module-dir 2>/dev/null) || true
  [[ -n $mod && -d $mod ]] || die "could not locate sigs.k8s.io/cluster-api@v$CAPI_VERSION"
  py=$(python_yaml)
  "$py" - "$mode" "$mod" "$(base64 -w0 "$PKI_DIR/ca.crt")" "$WEBHOOK_LABEL" "${MANAGERS[@]}" <<'PY'
import glob, os, sys, yaml
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
mode, mod, ca, label, managers = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
lkey, _, lval = label.partition("=")
out = []
for m in managers:
    name, _bin, wport, _hport, sub = m.split()
    base = f"https://127.0.0.1:{wport}"
    if mode == "register":
        for cfg in yaml.load_all(open(os.path.join(mod, sub, "config/webhook/manifests.yaml")), Loader=Loader):
            if not cfg:
                continue
            # All three manifests name their configurations alike: suffix them per manager.
            cfg["metadata"] = {"name": f"{cfg['metadata']['name']}-{name}", "labels": {lkey: lval}}
            for wh in cfg.get("webhooks", []):
                path = wh["clientConfig"]["service"].get("path", "/")
                wh["clientConfig"] = {"url": base + path, "caBundle": ca}
            out.append(cfg)
    for f in sorted(glob.glob(os.path.join(mod, sub, "config/crd/bases/*.yaml"))):
        crd = yaml.load(open(f), Loader=Loader)
        if len(crd["spec"]["versions"]) < 2:
            continue
        if mode == "register":
            conv = {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                    "clientConfig": {"url": base + "/convert", "caBundle": ca}}}
        else:
            conv = {"strategy": "None"}
        out.append({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": crd["metadata"]["name"]}, "spec": {"conversion": conv}})
yaml.safe_dump_all(out, sys.stdout, sort_keys=False)
PY
}

register_webhooks() {
  log "registering CAPI admission and conversion webhooks (https://127.0.0.1:$CAPI_WEBHOOK_PORT-$((CAPI_WEBHOOK_PORT+2)))"
  webhook_stream register | kubectl_plane apply --server-side --force-conflicts \
    --field-manager=capd-rs-capi -f - >/dev/null
}

# The apiserver really calling the webhooks: a server-side dry-run create of a minimal Cluster
# goes through the (failurePolicy: Fail) mutating and validating webhooks, so it only succeeds
# when they answer (retried: the apiserver picks up new configurations within a second or so).
webhooks_answer() {
  kubectl_plane create --dry-run=server -o name -f - <<EOF
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: capd-rs-webhook-probe, namespace: default}
spec:
  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: DockerCluster, name: capd-rs-webhook-probe}
EOF
}

up() {
  local t0=$SECONDS
  plane_ready || die "the plane is not up; run hack/plane.sh up first"
  "$HACK_DIR/build-binaries.sh" capi
  [[ -s $PKI_DIR/webhook/tls.crt ]] || die "missing $PKI_DIR/webhook/tls.crt; run hack/plane.sh up"
  mkdir -p "$CAPI_DIR"
  start_managers
  register_webhooks
  wait_for 30 "the apiserver to call the CAPI webhooks (dry-run Cluster create)" webhooks_answer
  log "CAPI managers up in $((SECONDS - t0))s"
  status
}

down() {
  # failurePolicy is Fail: registrations must go while the managers still answer, or every
  # CAPI write (finalizer removal included) is refused from then on.
  if plane_ready; then
    local regs
    # (captured, not piped into `grep -q`: with pipefail an early grep exit fails the pipeline)
    regs=$(kubectl_plane get mutatingwebhookconfigurations,validatingwebhookconfigurations \
      -l "$WEBHOOK_LABEL" -o name 2>/dev/null || true)
    if [[ -n $regs ]]; then
      log "deleting CAPI webhook registrations"
      kubectl_plane delete mutatingwebhookconfigurations,validatingwebhookconfigurations \
        -l "$WEBHOOK_LABEL" --wait=true >/dev/null
      # Back to strategy None: v1beta2 (storage) reads never needed the webhook anyway.
      webhook_stream reset | kubectl_plane apply --server-side --force-conflicts \
        --field-manager=capd-rs-capi -f - >/dev/null 2>&1 || true
    fi
  fi
  local m name rest
  stop_managers
}

stop_managers() {
  local m name rest
  # In parallel: each manager takes a few seconds to drain its controllers.
  for m in "${MANAGERS[@]}"; do
    read -r name rest <<<"$m"
    stop_proc "$CAPI_DIR/$name.pid" "$name manager" 20 &
  done
  wait
}

status() {
  local m name bin wport hport pid n
  for m in "${MANAGERS[@]}"; do
    read -r name bin wport hport _ <<<"$m"
    if pid=$(proc_pid "$CAPI_DIR/$name.pid"); then
      printf '  %-16s %s\n' "capi/$name" "pid $pid, webhooks :$wport, /readyz $(manager_ready "$hport" && echo ok || echo FAILING)"
    else
      printf '  %-16s %s\n' "capi/$name" "down"
    fi
  done
  if plane_ready; then
    n=$(kubectl_plane get mutatingwebhookconfigurations,validatingwebhookconfigurations \
      -l "$WEBHOOK_LABEL" -o name 2>/dev/null | wc -l)
    printf '  %-16s %s\n' capi/webhooks "$n configurations registered"
  fi
}

# One up/down at a time; the managers do not inherit the lock (start_proc closes fd 9).
lock() { mkdir -p "$CAPI_DIR"; exec 9>"$CAPI_DIR/.capi.lock"; flock 9; }

case ${1:-} in
  up) lock; up ;;
  down) lock; down ;;
  restart) lock; stop_managers; start_managers ;;
  status) status ;;
  *) echo "usage: $0 up|down|restart|status" >&2; exit 2 ;;
esac
