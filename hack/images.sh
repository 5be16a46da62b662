#!/usr/bin/env bash
# Builds the local images the provider and its tests need, if absent. No container registry is
# reachable, so each image is a Debian bookworm rootfs made by debootstrap, loaded into Docker as a
# one-layer image. (`docker import --change` would do, but Engine 20.10 rejects STOPSIGNAL there, so
# we hand `docker load` a minimal docker-archive: the rootfs tarball plus an image config JSON.)
#   hack/images.sh [haproxy|node|all]   (default: all)
#   HAPROXY_IMAGE  kindest/haproxy:v20230606-42a2262b  (upstream CAPD's default name, so manifests
#                  and our manager defaults work unchanged)
#   NODE_IMAGE     capd-rs/node:light  (no systemd/kubelet: runs cloud-init-style shell commands only)
# Rootfs tarballs are cached in $CACHE_DIR/images/ (keyed by a hash of their recipe), so a rebuild
# after `docker rmi` is an import of a few seconds; the .deb files are cached there too.
source "$(dirname "$0")/lib.sh"

HAPROXY_IMAGE=${HAPROXY_IMAGE:-kindest/haproxy:v20230606-42a2262b}
NODE_IMAGE=${NODE_IMAGE:-capd-rs/node:light}
SUITE=bookworm
IMG_CACHE="$CACHE_DIR/images"
mkdir -p "$IMG_CACHE/debs"

# The Debian mirror apt already uses (the only package source this machine can reach).
debian_mirror() {
  local uri
  # deb822 files: the first URIs: line of a stanza whose Suites: include bookworm itself.
  uri=$(awk -v s="$SUITE" '
    /^URIs:/ {u=$2} /^Suites:/ {for (i=2;i<=NF;i++) if ($i==s) {print u; exit}}
    /^$/ {u=""}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  if [[ -z $uri ]]; then
    # one-line format: deb [opts] URI bookworm main
    uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      sed -E 's/\[[^]]*\]//' | awk -v s="$SUITE" '$1=="deb" && $3==s {print $2; exit}' || true)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

# Unmounts anything debootstrap may have left mounted below a rootfs, then removes it.
remove_rootfs() {
  local dir=$1 m
  [[ -d $dir ]] || return 0
  awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m" || true; done
  rm -rf --one-file-system "$dir"
}

# --- image recipes: each writes its extra files into the rootfs given as $1 ----------------------

HAPROXY_PACKAGES=haproxy
# A placeholder config so haproxy starts (and holds :6443) before any control-plane backend exists;
# the provider rewrites this file and signals haproxy to reload it. No `user`/`group` directives:
# haproxy stays root in the container, as in the upstream image. No `maxconn 100000` (upstream's
# value): haproxy would need ~200k FDs, and with its default strict-limits it refuses to start
# where dockerd's nofile limit is lower (20000 on our CI hosts); unset, it sizes from the ulimit.
customize_haproxy() {
  local root=$1
  mkdir -p "$root/usr/local/etc/haproxy"
  cat > "$root/usr/local/etc/haproxy/haproxy.cfg" <<'EOF'
# placeholder written by capd-rs hack/images.sh; the provider replaces it
global
  log stdout format raw local0 info

defaults
  log global
  mode tcp
  option dontlognull
  timeout connect 5s
  timeout client 30m
  timeout server 30m
  timeout tunnel 30m

frontend stats
  mode http
  bind *:8404
  stats enable
  stats uri /stats
  stats refresh 10s
  timeout client 30s

frontend control-plane
  bind *:6443
  default_backend kube-apiservers

backend kube-apiservers
  option httpchk GET /healthz
EOF
}

NODE_PACKAGES=bash,coreutils,procps,iproute2,ca-certificates
# PID 1 idles but exits at once on SIGTERM (a plain `sleep infinity` as PID 1 ignores it, and
# `docker stop` would wait 10 s for the SIGKILL).
NODE_CONFIG='{"Cmd":["/bin/sh","-c","trap '"'"'exit 0'"'"' TERM INT; while :; do sleep 3600 & wait $!; done"],"StopSignal":"SIGTERM"}'
customize_node() {
  local root=$1
  # Mark the image so a test (or a human) can tell the light node from a real kind node.
  mkdir -p "$root/kind"
  echo "capd-rs light node (no kubelet)" > "$root/kind/capd-rs-light"
}

# --- generic build: debootstrap -> customize -> cached tarball -> docker load --------------------

# build_image <tag> <packages> <customize-fn> <image config JSON (Entrypoint/Cmd/StopSignal...)>
build_image() {
  local tag=$1 pkgs=$2 customize=$3 config=$4
  if docker image inspect "$tag" >/dev/null 2>&1; then log "image $tag present"; return 0; fi

  # Key the cached tarball on everything that shapes the rootfs.
  local key
  key=$( { echo "$SUITE $pkgs"; declare -f "$customize"; } | sha256sum | cut -c1-12)
  local name=${tag//[\/:]/_}
  local tarball="$IMG_CACHE/$name-$key.tar"

  if [[ ! -s $tarball ]]; then
    local mirror root="$IMG_CACHE/rootfs-$name.tmp"
    mirror=$(debian_mirror)
    remove_rootfs "$root"
    log "debootstrap $SUITE (minbase + $pkgs) from $mirror for $tag (cold: ~1-3 min)"
    local t0=$SECONDS
    debootstrap --variant=minbase --include="$pkgs" --cache-dir="$IMG_CACHE/debs" \
      "$SUITE" "$root" "$mirror" > "$IMG_CACHE/debootstrap-$name.log" 2>&1 ||
      { tail -20 "$IMG_CACHE/debootstrap-$name.log" >&2; remove_rootfs "$root"; die "debootstrap failed for $tag"; }
    "$customize" "$root"
    # Package lists and man pages are dead weight in an image that never runs apt.
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/man/* \
      "$root"/usr/share/doc/* "$root"/usr/share/locale/*
    tar --numeric-owner -C "$root" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    remove_rootfs "$root"
    # Older tarballs of this image (other recipe hashes) are obsolete.
    find "$IMG_CACHE" -maxdepth 1 -name "$name-*.tar" ! -name "$(basename "$tarball")" -delete
    log "rootfs for $tag cached in $tarball ($((SECONDS - t0))s)"
  else
    log "using cached rootfs $tarball"
  fi

  load_archive "$tag" "$tarball" "$config"
  log "loaded $tag"
}

# load_archive <tag> <rootfs tarball> <config JSON>: `docker load` of a one-layer docker-archive.
# The layer is the tarball itself (hard-linked, not copied); its sha256 is the layer's diff_id.
load_archive() {
  local tag=$1 tarball=$2 config=$3 stage="$IMG_CACHE/archive.tmp"
  rm -rf "$stage"; mkdir -p "$stage"
  ln "$tarball" "$stage/layer.tar" 2>/dev/null || cp "$tarball" "$stage/layer.tar"
  TAG=$tag LABEL=$PLANE_LABEL CONFIG=$config DIFF_ID=$(sha256sum "$tarball" | cut -d' ' -f1) \
    STAGE=$stage TARBALL=$tarball python3 - <<'PY'
import datetime, hashlib, json, os
# "created" = when the rootfs was built, so `docker images` shows a meaningful age.
created = datetime.datetime.fromtimestamp(os.path.getmtime(os.environ["TARBALL"]), datetime.timezone.utc)
created = created.strftime("%Y-%m-%dT%H:%M:%SZ")
cfg = json.loads(os.environ["CONFIG"])
key, _, val = os.environ["LABEL"].partition("=")
cfg.setdefault("Labels", {})[key] = val
cfg.setdefault("Env", ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
image = {
    "architecture": "amd64", "os": "linux", "created": created, "config": cfg,
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + os.environ["DIFF_ID"]]},
    "history": [{"created": created, "created_by": "capd-rs hack/images.sh"}],
}
raw = json.dumps(image, sort_keys=True).encode()
name = hashlib.sha256(raw).hexdigest() + ".json"
stage = os.environ["STAGE"]
open(os.path.join(stage, name), "wb").write(raw)
manifest = [{"Config": name, "RepoTags": [os.environ["TAG"]], "Layers": ["layer.tar"]}]
open(os.path.join(stage, "manifest.json"), "w").write(json.dumps(manifest))
PY
  tar -C "$stage" -c . | docker load >/dev/null
  rm -rf "$stage"
}

# Smoke-tests a freshly imported image: haproxy must accept TCP on :6443 with the placeholder config.
check_haproxy() {
  local name=capd-rs-haproxy-check ip
  docker rm -f "$name" >/dev/null 2>&1 || true
  docker run --rm --entrypoint haproxy "$HAPROXY_IMAGE" -c -f /usr/local/etc/haproxy/haproxy.cfg >/dev/null ||
    die "haproxy rejects the placeholder config in $HAPROXY_IMAGE"
  docker run -d --rm --name "$name" --label "$PLANE_LABEL" "$HAPROXY_IMAGE" >/dev/null
  ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$name")
  if ! (wait_for 20 "haproxy on $ip:6443" bash -c "exec 3<>/dev/tcp/$ip/6443"); then
    docker logs "$name" >&2 || true; docker rm -f "$name" >/dev/null 2>&1 || true
    die "$HAPROXY_IMAGE does not answer on :6443"
  fi
  docker rm -f "$name" >/dev/null
  log "$HAPROXY_IMAGE answers on :6443"
}

check_node() {
  local out
  out=$(docker run --rm --label "$PLANE_LABEL" "$NODE_IMAGE" \
    sh -c 'mkdir -p /etc/x && echo ok > /etc/x/f && chmod 0600 /etc/x/f && chown root:root /etc/x/f && bash -c "cat /etc/x/f"') || true
  [[ $out == ok ]] || die "$NODE_IMAGE cannot run basic commands"
  log "$NODE_IMAGE runs shell commands"
}

build_haproxy() {
  docker image inspect "$HAPROXY_IMAGE" >/dev/null 2>&1 && { log "image $HAPROXY_IMAGE present"; return; }
  # As upstream's kindest/haproxy: master-worker mode (reload on SIGHUP/SIGUSR2), soft stop on USR1.
  build_image "$HAPROXY_IMAGE" "$HAPROXY_PACKAGES" customize_haproxy \
    '{"Entrypoint":["haproxy","-W","-db","-f","/usr/local/etc/haproxy/haproxy.cfg"],"StopSignal":"SIGUSR1"}'
  check_haproxy
}

build_node() {
  docker image inspect "$NODE_IMAGE" >/dev/null 2>&1 && { log "image $NODE_IMAGE present"; return; }
  build_image "$NODE_IMAGE" "$NODE_PACKAGES" customize_node "$NODE_CONFIG"
  check_node
}

[[ $EUID -eq 0 ]] || die "debootstrap and docker need root"
docker info >/dev/null 2>&1 || die "docker does not answer; run hack/docker-engine.sh first"
command -v debootstrap >/dev/null || die "debootstrap missing; run hack/docker-engine.sh first"

targets=("$@"); [[ ${#targets[@]} -gt 0 ]] || targets=(all)
for t in "${targets[@]}"; do
  case $t in
    haproxy) build_haproxy ;;
    node) build_node ;;
    all) build_haproxy; build_node ;;
    *) die "unknown image $t (haproxy|node|all)" ;;
  esac
done
