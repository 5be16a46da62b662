#!/usr/bin/env bash
# Ensures a Docker Engine answers on /var/run/docker.sock, plus the host tools the other hack/
# scripts use (debootstrap, openssl, python3-yaml, curl).
#   hack/docker-engine.sh
# A fresh CI machine has Debian's docker.io available from apt but no running daemon (and no
# systemd to start it), so we install it if needed and run dockerd ourselves in the background.
# An engine that is already running (started by anyone) is used as is and never restarted.
source "$(dirname "$0")/lib.sh"

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
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)

if ((${#missing[@]})); then
  [[ $EUID -eq 0 ]] || die "need root to apt-get install ${missing[*]}"
  log "installing Debian packages: ${missing[*]}"
  # One `apt-get update` per run, and only when something is actually missing.
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then
  log "docker engine answers ($(docker version -f '{{.Server.Version}} API {{.Server.APIVersion}}' 2>/dev/null))"
  exit 0
fi

[[ $EUID -eq 0 ]] || die "docker does not answer and starting dockerd needs root"

# A dockerd we started earlier may still be booting: wait for it instead of starting a second one.
if [[ -f $DOCKERD_PID ]] && kill -0 "$(cat "$DOCKERD_PID")" 2>/dev/null; then
  log "dockerd (pid $(cat "$DOCKERD_PID")) is starting; waiting for /var/run/docker.sock"
else
  # A daemon not started by us but alive (e.g. stuck) would fight over /var/run/docker.pid.
  if pgrep -x dockerd >/dev/null; then
    die "a dockerd process is running but 'docker info' fails; see its log (not starting a second one)"
  fi
  log "starting dockerd in the background (log: $DOCKERD_LOG)"
  # setsid: the daemon must outlive this script and not receive its terminal's signals.
  setsid dockerd >>"$DOCKERD_LOG" 2>&1 < /dev/null &
  echo $! > "$DOCKERD_PID"
fi

wait_for 60 "dockerd to answer on /var/run/docker.sock (see $DOCKERD_LOG)" docker info
log "docker engine answers ($(docker version -f '{{.Server.Version}} API {{.Server.APIVersion}}'))"
