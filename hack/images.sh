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
source "$(dirname "$0")/lib-image.sh"

HAPROXY_IMAGE=${HAPROXY_IMAGE:-kindest/haproxy:v20230606-42a2262b}
NODE_IMAGE=${NODE_IMAGE:-capd-rs/node:light}

# --- image recipes: each writes its extra files into the rootfs given as $1 ----------------------

HAPROXY_PACKAGES=haproxy,procps
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
  # Then, as kind's own image: distroless. Only haproxy and what upstream CAPD runs in the LB
  # (mkdir and cp to write haproxy.cfg; kill), with their libraries, /etc/passwd and /etc/group;
  # no shell, no cat. A provider that needs more fails here as with the image from the registry.
  local min="$root.min" f p dir target n d
  rm -rf "$min"; mkdir -p "$min"
  for d in bin sbin lib lib32 lib64 libx32; do [[ -L $root/$d ]] && cp -a "$root/$d" "$min/$d"; done
  for f in /usr/sbin/haproxy /usr/bin/cp /usr/bin/mkdir /usr/bin/kill \
    $(for f in /usr/sbin/haproxy /usr/bin/cp /usr/bin/mkdir /usr/bin/kill; do
        chroot "$root" ldd "$f" | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i}'
      done | sort -u) \
    /etc/passwd /etc/group /usr/local/etc/haproxy/haproxy.cfg; do
    # The file and every symlink on its way (merged /usr: /lib64/ld-linux... goes through two).
    p=$f n=0
    while ((n++ < 16)); do
      dir=$(chroot "$root" readlink -f "$(dirname "$p")") || return 1
      p="${dir%/}/$(basename "$p")"
      (cd "$root" && cp -a --parents ".$p" "$min/") || return 1
      [[ -L $root$p ]] || break
      target=$(readlink "$root$p")
      [[ $target == /* ]] && p=$target || p="$dir/$target"
    done
  done
  mkdir -p "$min/tmp" && chmod 1777 "$min/tmp"
  find "$root" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system {} +
  cp -a "$min/." "$root/" && rm -rf "$min"
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

# Smoke-tests a freshly imported image: haproxy must accept TCP on :6443 with the placeholder config.
check_haproxy() {
  local name=capd-rs-haproxy-check ip
  docker rm -f "$name" >/dev/null 2>&1 || true
  docker run --rm --entrypoint haproxy "$HAPROXY_IMAGE" -c -f /usr/local/etc/haproxy/haproxy.cfg >/dev/null ||
    die "haproxy rejects the placeholder config in $HAPROXY_IMAGE"
  ! docker run --rm --entrypoint /bin/sh "$HAPROXY_IMAGE" -c true >/dev/null 2>&1 ||
    die "$HAPROXY_IMAGE has a shell; kind's haproxy image has none"
  docker run --rm --entrypoint mkdir "$HAPROXY_IMAGE" -p /tmp/x >/dev/null ||
    die "$HAPROXY_IMAGE lacks mkdir, which upstream CAPD runs in it"
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
  image_current "$HAPROXY_IMAGE" "$(recipe_key "$HAPROXY_PACKAGES" customize_haproxy)" &&
    { log "image $HAPROXY_IMAGE present"; return; }
  # As upstream's kindest/haproxy: master-worker mode (reload on SIGHUP/SIGUSR2), soft stop on USR1.
  build_image "$HAPROXY_IMAGE" "$HAPROXY_PACKAGES" customize_haproxy \
    '{"Entrypoint":["haproxy","-W","-db","-f","/usr/local/etc/haproxy/haproxy.cfg"],"StopSignal":"SIGUSR1"}'
  check_haproxy
}

build_node() {
  image_current "$NODE_IMAGE" "$(recipe_key "$NODE_PACKAGES" customize_node)" &&
    { log "image $NODE_IMAGE present"; return; }
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
