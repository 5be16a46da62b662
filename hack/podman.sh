#!/usr/bin/env bash
# Podman's Docker-compatible API on a socket of ours, to run capd-rs and its tests against Podman
# (rootful). Debian bookworm's podman 4.3 (API 1.41), installed with apt when missing.
#   hack/podman.sh up          install podman if needed, start `podman system service` on
#                              $PODMAN_SOCKET (idempotent; restarts ours when its config changed)
#   hack/podman.sh env         print the export:  eval "$(hack/podman.sh env)"  (DOCKER_HOST)
#   hack/podman.sh load IMG..  copy images from the Docker Engine (docker save | podman load),
#                              under the same names (there is no registry here)
#   hack/podman.sh status      show the service and what it holds
#   hack/podman.sh down        remove Podman's containers and networks labelled capd-rs.test/run
#                              (PODMAN_DOWN_LABEL narrows), then stop the service we started
# Podman's state is its own: storage in /var/lib/containers (overlay), run state in
# /run/containers and /run/libpod, configuration in $CACHE_DIR/podman (passed to every podman
# this script runs through CONTAINERS_CONF/CONTAINERS_STORAGE_CONF; nothing under /etc changes).
# Containers are children of conmon, not of the service: they outlive a `down` unless labelled.
source "$(dirname "$0")/lib.sh"

PODMAN_SOCKET=${PODMAN_SOCKET:-/run/capd-rs/podman.sock}
PODMAN_DIR="$CACHE_DIR/podman"
PODMAN_PID="$CACHE_DIR/podman.pid"
PODMAN_LOG="$CACHE_DIR/podman.log"
PODMAN_DOWN_LABEL=${PODMAN_DOWN_LABEL:-capd-rs.test/run}
export CONTAINERS_CONF="$PODMAN_DIR/containers.conf"
export CONTAINERS_STORAGE_CONF="$PODMAN_DIR/storage.conf"


api() { curl -fsS --max-time 10 --unix-socket "$PODMAN_SOCKET" "http://podman$1"; }
answers() { [[ $(api /_ping 2>/dev/null) == OK ]]; }

# Prints the pid of the service this script started, if it is alive and is ours (its command line
# names our socket), so a recycled pid is never taken for it.
our_pid() {
  local pid cmd
  [[ -f $PODMAN_PID ]] && pid=$(<"$PODMAN_PID") && [[ $pid =~ ^[0-9]+$ ]] || return 1
  cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmd == *"system service"*"$PODMAN_SOCKET"* ]] || return 1
  echo "$pid"
}

install_podman() {
  command -v podman >/dev/null 2>&1 && return 0
  [[ $EUID -eq 0 ]] || die "need root to apt-get install podman"
  # podman pulls in conmon, containernetworking-plugins (its CNI backend on bookworm) and
  # golang-github-containers-{common,image}; it uses the host's runc, which stays as it is.
  log "installing Debian's podman (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # No package starts a service while it installs (podman ships podman.socket/podman.service).
  local policy_rc=false status=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d
    policy_rc=true
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman >/dev/null || status=$?
  ! $policy_rc || rm -f /usr/sbin/policy-rc.d
  ((status == 0)) || die "apt-get install podman failed"
}

# The OCI runtime podman runs, on a host whose bounding set is incomplete (CAP_SYS_RESOURCE on our
# CI VMs): the runc shim of hack/lib.sh. Besides the capabilities, it lowers the rlimits Podman's
# Docker API gives every container (RLIMIT_NOFILE and RLIMIT_NPROC of 1048576; containers.conf's
# default_ulimits is not read by the compat API) to those of the conmon podman starts (its
# RLIMIT_NPROC is lowered to kernel.pid_max): without CAP_SYS_RESOURCE runc cannot raise a hard
# limit ("error setting rlimits for ready process: error setting rlimit type 7: operation not
# permitted"). Docker sets no rlimits by default, so the containers get what Docker's would have.
# Writes podman's configuration; prints "changed" when it differs from what was there.
write_config() {
  mkdir -p "$PODMAN_DIR"
  local engine runtime_lines=""
  if bounding_set_incomplete; then
    install_shim >&2
    runtime_lines=$'runtime = "capd-runc"\n[engine.runtimes]\ncapd-runc = ["'"$SHIM_BIN"'"]'
  fi
  # cgroupfs and file events: there is no systemd (nor journald) on the CI machine. CNI: the
  # network backend of bookworm's podman (netavark is not packaged there).
  # pids_limit 0: no limit, as Docker (Podman's default, 2048, is too few for a Kubernetes node).
  # (Podman 4.3's Docker API ignores HostConfig.CgroupnsMode, and on a cgroup v1 host every
  # container gets the host's cgroup namespace whatever containers.conf says.)
  engine=$(printf '%s\n' "# Written by hack/podman.sh." "[containers]" \
    'pids_limit = 0' "[network]" 'network_backend = "cni"' \
    "[engine]" 'cgroup_manager = "cgroupfs"' 'events_logger = "file"' "$runtime_lines")
  # overlay works on the CI machine's ext4. podman passes the driver to every container's exit
  # command (`podman container cleanup --storage-driver overlay`), which fails with "database
  # storage graph driver \"\" does not match our storage graph driver \"overlay\"" when podman's
  # database was created by a podman that had none configured (e.g. a bare `podman version`
  # before this script, with no /etc/containers/storage.conf): containers then stay "stopped",
  # a state Podman 4.3's Docker API reports as is and bollard cannot read. up checks for it.
  local storage
  storage=$(printf '%s\n' "# Written by hack/podman.sh." "[storage]" 'driver = "overlay"' \
    'runroot = "/run/containers/storage"' 'graphroot = "/var/lib/containers/storage"')
  local changed=false
  [[ -f $CONTAINERS_CONF && $(<"$CONTAINERS_CONF") == "$engine" ]] || { printf '%s\n' "$engine" > "$CONTAINERS_CONF"; changed=true; }
  [[ -f $CONTAINERS_STORAGE_CONF && $(<"$CONTAINERS_STORAGE_CONF") == "$storage" ]] || { printf '%s\n' "$storage" > "$CONTAINERS_STORAGE_CONF"; changed=true; }
  ! $changed || echo changed
}

stop_ours() {
  local pid deadline
  pid=$(our_pid) || { rm -f "$PODMAN_PID"; return 0; }
  log "stopping our podman service (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then log "podman did not stop in 30s; killing"; kill -KILL "$pid" || true; fi
  rm -f "$PODMAN_PID"
}

up() {
  [[ $EUID -eq 0 ]] || die "podman runs rootful here: run as root"
  install_podman
  local changed
  changed=$(write_config)
  if [[ -n $changed ]] && our_pid >/dev/null; then
    stop_ours
  fi
  # What every container's exit command runs (see write_config): it must accept the driver.
  if ! out=$(podman --storage-driver overlay container ls -q 2>&1 >/dev/null) ||
    [[ $out == *"database configuration mismatch"* ]]; then
    die "podman's database disagrees with the storage driver of $CONTAINERS_STORAGE_CONF: $out" \
      "(it was created by a podman run without that file; \`CONTAINERS_CONF=$CONTAINERS_CONF" \
      "CONTAINERS_STORAGE_CONF=$CONTAINERS_STORAGE_CONF podman system reset -f\` removes every" \
      "podman container and image and starts over)"
  fi
  if answers; then
    our_pid >/dev/null || log "WARNING: $PODMAN_SOCKET answers but the service was not started by this script; using it as is"
  else
    [[ -S $PODMAN_SOCKET ]] && ! our_pid >/dev/null && rm -f "$PODMAN_SOCKET"
    mkdir -p "$(dirname "$PODMAN_SOCKET")"
    log "starting podman system service on $PODMAN_SOCKET (log: $PODMAN_LOG)"
    if [[ -f $PODMAN_LOG ]] && (($(stat -c %s "$PODMAN_LOG") > 50 * 1024 * 1024)); then mv -f "$PODMAN_LOG" "$PODMAN_LOG.old"; fi
    printf '\n---- %s: podman system service\n' "$(date -Is)" >> "$PODMAN_LOG"
    # setsid: outlives this script; 9>&-: fd 9 is the hack scripts' flock.
    setsid podman --log-level=info system service --time=0 "unix://$PODMAN_SOCKET" \
      >> "$PODMAN_LOG" 2>&1 < /dev/null 9>&- &
    echo $! > "$PODMAN_PID"
    wait_for 60 "podman to answer on $PODMAN_SOCKET (see $PODMAN_LOG)" answers
  fi
  log "podman answers on $PODMAN_SOCKET ($(podman version -f '{{.Server.Version}}' 2>/dev/null)," \
    "runtime $(podman info -f '{{.Host.OCIRuntime.Name}}' 2>/dev/null), storage $(podman info -f '{{.Store.GraphDriverName}}' 2>/dev/null))"
  echo "  use it: eval \"\$($HACK_DIR/podman.sh env)\"" >&2
}

# load IMAGE...: docker save | podman load. Podman keeps the name as saved (docker.io/ prefixed
# for a short name, e.g. docker.io/kindest/node:v1.35.4), and its Docker API finds it by the short
# name. An image already present with the same ID is skipped.
load() {
  answers || die "podman does not answer on $PODMAN_SOCKET: run $0 up"
  local img want have
  for img in "$@"; do
    want=$(docker image inspect -f '{{.Id}}' "$img" 2>/dev/null) || die "the Docker Engine has no image $img"
    have=$(podman image inspect -f '{{.Id}}' "$img" 2>/dev/null || true)
    if [[ sha256:$have == "$want" || $have == "$want" ]]; then continue; fi
    log "copying $img from the Docker Engine into podman"
    docker save "$img" | podman load -q >/dev/null || die "podman load of $img failed"
  done
}

status() {
  if answers; then
    local who="not started by this script"
    pid=$(our_pid) && who="pid $pid"
    echo "podman: answers on $PODMAN_SOCKET ($who)"
    podman ps -a --format '{{.Names}} {{.Status}} {{.Image}}'
    podman network ls --format '{{.Name}} {{.Driver}}'
  else
    echo "podman: not answering on $PODMAN_SOCKET"
  fi
}

down() {
  if answers; then
    local ids
    ids=$(podman ps -aq --filter "label=$PODMAN_DOWN_LABEL")
    if [[ -n $ids ]]; then
      log "removing $(wc -w <<<"$ids") podman containers labelled $PODMAN_DOWN_LABEL"
      # shellcheck disable=SC2086
      podman rm -f -t 2 -v $ids >/dev/null
    fi
    ids=$(podman network ls -q --filter "label=$PODMAN_DOWN_LABEL")
    if [[ -n $ids ]]; then
      log "removing $(wc -w <<<"$ids") podman networks labelled $PODMAN_DOWN_LABEL"
      # shellcheck disable=SC2086
      podman network rm $ids >/dev/null || log "warning: podman networks $ids could not all be removed"
    fi
  fi
  stop_ours
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  env) echo "export DOCKER_HOST=unix://$PODMAN_SOCKET" ;;
  load) shift; load "$@" ;;
  *) echo "usage: $0 up|down|status|env|load IMAGE..." >&2; exit 2 ;;
esac
