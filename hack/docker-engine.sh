#!/usr/bin/env bash
# Ensures a Docker Engine answers on /var/run/docker.sock, plus the host tools the other hack/
# scripts use (debootstrap, openssl, python3-yaml, curl).
#   hack/docker-engine.sh
#   DOCKER_ENGINE=bookworm hack/docker-engine.sh
# Which engine (DOCKER_ENGINE):
#   current   (default) Debian trixie's Docker Engine 26.1 (API 1.45) with its containerd 1.7,
#             unpacked into a prefix of ours ($CACHE_DIR/engine/, one per version) so no host
#             package is upgraded; it runs on the host's runc (bookworm's 1.1: trixie's needs a
#             newer glibc) behind our runc shim where the host needs it.
#   bookworm  Debian bookworm's docker.io, Engine 20.10 (API 1.41), installed with apt.
# A fresh CI machine has no running daemon (and no systemd to start it), so we run dockerd
# ourselves in the background. An engine that is already running and was not started by us is
# used as is and never restarted; ours is restarted once when it is not the engine asked for.
#   hack/docker-engine.sh restart [SECONDS]   stop the dockerd this script started and start it
#                                   again, SECONDS later (fault tests: every container stops)
source "$(dirname "$0")/lib.sh"

DOCKER_ENGINE=${DOCKER_ENGINE:-current}
case $DOCKER_ENGINE in
  current | bookworm) ;;
  *) die "DOCKER_ENGINE must be 'current' or 'bookworm', not '$DOCKER_ENGINE'" ;;
esac
# The current engine's packages, from Debian trixie (the candidates when first installed; the
# prefix is kept by version, and a cached one is used without asking the archive again).
TRIXIE_PACKAGES=(docker.io docker-cli containerd tini)
ENGINE_DIR="$CACHE_DIR/engine"

DOCKERD_LOG="$CACHE_DIR/dockerd.log"
DOCKERD_PID="$CACHE_DIR/dockerd.pid"

# Debian packages we need, keyed by the command (or file) that proves each is installed.
declare -A NEED=(
  [debootstrap]=debootstrap
  [openssl]=openssl
  [curl]=curl
  [/usr/lib/python3/dist-packages/yaml/__init__.py]=python3-yaml
)

missing=()
for probe in "${!NEED[@]}"; do
  if [[ $probe == /* ]]; then [[ -e $probe ]] || missing+=("${NEED[$probe]}")
  else command -v "$probe" >/dev/null 2>&1 || missing+=("${NEED[$probe]}"); fi
done
if [[ $DOCKER_ENGINE == bookworm ]]; then
  [[ -x /usr/sbin/dockerd ]] || missing+=(docker.io)
else
  # What trixie's docker.io depends on that the host provides: runc and iptables.
  command -v runc >/dev/null 2>&1 || missing+=(runc)
  command -v iptables >/dev/null 2>&1 || missing+=(iptables)
fi

if ((${#missing[@]})); then
  [[ $EUID -eq 0 ]] || die "need root to apt-get install ${missing[*]}"
  log "installing Debian packages: ${missing[*]}"
  # One `apt-get update` per run, and only when something is actually missing.
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # No package starts a service while it installs (Debian's policy-rc.d): docker.io's would start
  # a dockerd of its own beside the one this script runs, possibly the other engine.
  policy_rc=false
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d
    policy_rc=true
  fi
  status=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || status=$?
  ! $policy_rc || rm -f /usr/sbin/policy-rc.d
  ((status == 0)) || die "apt-get install ${missing[*]} failed"
fi

# --- the current engine: trixie's packages, unpacked into a prefix ------------------------------
# prints the prefix of the newest cached engine, if any
cached_engine() {
  local stamp
  stamp=$(ls -1d "$ENGINE_DIR"/trixie-*/.complete 2>/dev/null | sort -V | tail -1) || true
  [[ -n $stamp ]] && dirname "$stamp"
}

# Downloads trixie's packages with an apt of our own (its own lists, status and cache: the
# host's apt state is untouched) and unpacks them with dpkg-deb; no maintainer script runs.
install_current_engine() {
  [[ $EUID -eq 0 ]] || die "need root to install the Docker Engine"
  local work="$ENGINE_DIR/apt" version prefix deb
  rm -rf "$work" && mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/debs" "$work/parts"
  : > "$work/status"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" > "$work/sources.list"
  local apt=(-o "Dir::State=$work" -o "Dir::State::Lists=$work/lists" -o "Dir::State::status=$work/status"
    -o "Dir::Cache=$work" -o "Dir::Cache::archives=$work/archives" -o "Dir::Etc::SourceList=$work/sources.list"
    -o "Dir::Etc::SourceParts=$work/parts" -o "Dir::Etc::PreferencesParts=$work/parts"
    -o "APT::Sandbox::User=root")
  log "fetching Debian trixie's package lists (for ${TRIXIE_PACKAGES[*]})"
  apt-get "${apt[@]}" update -qq || die "apt-get update of trixie failed"
  version=$(apt-cache "${apt[@]}" policy docker.io | awk '/Candidate:/ {print $2}')
  [[ -n $version && $version != "(none)" ]] || die "trixie offers no docker.io"
  prefix="$ENGINE_DIR/trixie-$version"
  log "downloading ${TRIXIE_PACKAGES[*]} (docker.io $version)"
  (cd "$work/debs" && apt-get "${apt[@]}" download "${TRIXIE_PACKAGES[@]}" -qq) || die "downloading the engine failed"
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in "$work/debs"/*.deb; do dpkg-deb -x "$deb" "$prefix" || die "cannot unpack $deb"; done
  "$prefix/usr/sbin/dockerd" --version >/dev/null || die "the unpacked dockerd does not run on this host"
  touch "$prefix/.complete"
  rm -rf "$work"
}

if [[ $DOCKER_ENGINE == current ]]; then
  ENGINE_PREFIX=$(cached_engine) || true
  if [[ -z $ENGINE_PREFIX ]]; then
    install_current_engine
    ENGINE_PREFIX=$(cached_engine) || die "the engine was installed but no prefix is complete"
  fi
  DOCKERD="$ENGINE_PREFIX/usr/sbin/dockerd"
  # dockerd finds containerd, its shim, docker-init and docker-proxy on its PATH.
  DOCKERD_PATH="$ENGINE_PREFIX/usr/bin:$ENGINE_PREFIX/usr/sbin:$PATH"
  # The scripts and tests call `docker`; a host without any CLI gets this engine's.
  if ! command -v docker >/dev/null 2>&1; then
    ln -sf "$ENGINE_PREFIX/usr/bin/docker" /usr/local/bin/docker
    log "linked /usr/local/bin/docker to the engine's CLI"
  fi
else
  DOCKERD=/usr/sbin/dockerd
  DOCKERD_PATH=$PATH
fi

# --- privileged containers: the runc shim (hack/lib.sh builds it) -------------------------------
# Registered as dockerd's default runtime where the host's bounding set is incomplete, it makes
# upstream's --privileged node containers, kind and upstream CAPD work here unchanged.
SHIM_RUNTIME=capd-runc

# Networks from 172.20.0.0/14 in /21s: Docker's default pools continue into 192.168.0.0/16
# after 172.31 (its allocator moves on after each network, so a long-lived engine gets there),
# and a node network inside the workload clusters' pod CIDR (192.168.0.0/16) breaks them. A /21
# holds 2,046 containers (128 such networks): the bench's 500 machines on one network do not
# fit in a /24 ("no available IPv4 addresses"); Docker's default pools give a kind network a /16.
POOL_ARG=--default-address-pool=base=172.20.0.0/14,size=21
DOCKERD_ARGS=("$POOL_ARG")
if bounding_set_incomplete; then
  install_shim
  DOCKERD_ARGS+=(--add-runtime "$SHIM_RUNTIME=$SHIM_BIN" --default-runtime "$SHIM_RUNTIME")
fi

our_dockerd_pid() {
  local pid
  [[ -f $DOCKERD_PID ]] && pid=$(<"$DOCKERD_PID") && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# stop_ours <why>: SIGTERM the dockerd we started and wait for it to exit.
stop_ours() {
  local pid deadline
  pid=$(our_dockerd_pid) || die "no dockerd started by this script is running"
  log "stopping our dockerd (pid $pid): $1"
  kill -TERM "$pid"
  deadline=$((SECONDS + 60))
  while kill -0 "$pid" 2>/dev/null; do
    (( SECONDS < deadline )) || die "dockerd (pid $pid) did not exit in 60s"
    sleep 0.2
  done
}

# kind-style nodes each run systemd, containerd and a kubelet, which hold inotify instances, and
# every container of the host counts against root's limit: a few clusters spend the default
# (128), and containerd's CRI plugin in the next node fails to load ("too many open files"), as
# kind's known issues describe. Raise the limits (never lower them).
raise_sysctl() {
  local key=$1 want=$2 have
  have=$(sysctl -n "$key" 2>/dev/null) || return 0
  ((have >= want)) && return 0
  if [[ $EUID -eq 0 ]] && sysctl -qw "$key=$want" 2>/dev/null; then
    log "raised $key from $have to $want"
  else
    log "WARNING: $key is $have; node containers may fail to start containerd's CRI (sysctl -w $key=$want)"
  fi
}
raise_sysctl fs.inotify.max_user_instances 8192
raise_sysctl fs.inotify.max_user_watches 524288

if [[ ${1:-} == restart ]]; then
  stop_ours "restart requested"
  sleep "${2:-0}"
fi

if docker info >/dev/null 2>&1; then
  runtime=$(docker info -f '{{.DefaultRuntime}}' 2>/dev/null || true)
  pool_missing=false other_engine=false
  if pid=$(our_dockerd_pid); then
    tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$POOL_ARG" || pool_missing=true
    [[ $(readlink -f "/proc/$pid/exe") == "$(readlink -f "$DOCKERD")" ]] || other_engine=true
  fi
  if $pool_missing || $other_engine || { bounding_set_incomplete && [[ $runtime != "$SHIM_RUNTIME" ]]; }; then
    if our_dockerd_pid >/dev/null; then
      # Ours, started with other arguments: restart it once with these.
      stop_ours "restarting as the $DOCKER_ENGINE engine with ${DOCKERD_ARGS[*]}"
    else
      log "WARNING: the Docker Engine was not started by us and its default runtime is '$runtime'," \
        "not the runc shim: --privileged node containers will fail on this host" \
        "(start dockerd with ${DOCKERD_ARGS[*]}, or run the manager with --node-privilege all-capabilities)"
      exit 0
    fi
  else
    log "docker engine answers ($(docker version -f '{{.Server.Version}} API {{.Server.APIVersion}}' 2>/dev/null), default runtime $runtime)"
    exit 0
  fi
fi

[[ $EUID -eq 0 ]] || die "docker does not answer and starting dockerd needs root"

# A dockerd we started earlier may still be booting: wait for it instead of starting a second one.
if our_dockerd_pid >/dev/null; then
  log "dockerd (pid $(cat "$DOCKERD_PID")) is starting; waiting for /var/run/docker.sock"
else
  # A daemon not started by us but alive (e.g. stuck) would fight over /var/run/docker.pid.
  if pgrep -x dockerd >/dev/null; then
    die "a dockerd process is running but 'docker info' fails; see its log (not starting a second one)"
  fi
  log "starting the $DOCKER_ENGINE engine's dockerd in the background (log: $DOCKERD_LOG)"
  # setsid: the daemon must outlive this script and not receive its terminal's signals.
  # 9>&-: fd 9 is the flock of a calling `plane.sh up`; a dockerd holding it would block every
  # later up and down.
  PATH=$DOCKERD_PATH setsid "$DOCKERD" "${DOCKERD_ARGS[@]}" >>"$DOCKERD_LOG" 2>&1 < /dev/null 9>&- &
  echo $! > "$DOCKERD_PID"
fi

wait_for 60 "dockerd to answer on /var/run/docker.sock (see $DOCKERD_LOG)" docker info
log "docker engine answers ($(docker version -f '{{.Server.Version}} API {{.Server.APIVersion}}'), default runtime $(docker info -f '{{.DefaultRuntime}}'))"
