#!/usr/bin/env bash
# Builds the kind-style node image kindest/node:v$K8S_VERSION offline, from the registries this
# project reaches: the tag the provider's kind mapping picks for a Machine of that version, so
# templates need no customImage. Cached: nothing is rebuilt while the image carries the label of
# the current recipe (versions, these scripts, hack/node-image/, podnet's package and its
# dependencies, the build helper of hack/lib.sh).
#   hack/node-image.sh            # build if missing or stale, then check it
#   hack/node-image.sh check      # only check the present image
#   hack/node-image.sh recipe     # only print the recipe key (no root or Docker needed)
#   K8S_VERSION=1.35.3 hack/node-image.sh   # another Kubernetes version (upgrade tests)
#
# The image:
# - Debian bookworm with systemd 252 (newer systemd refuses cgroup v1 hosts), containerd 1.6 and
#   runc 1.1 (Debian's), the CNI plugins (Debian's, linked into /opt/cni/bin), iptables, conntrack,
#   iproute2 and mount tools;
# - kubelet, kubeadm, kubectl and crictl built from the Go module proxy (hack/build-binaries.sh);
#   crictl set up for the node's containerd, as in kind's image;
# - every image `kubeadm init/join` pulls, preloaded and pinned in containerd under the exact names
#   `kubeadm config images list` prints, built here from binaries built from the Go module proxy
#   (kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, etcd, coredns, pause), so
#   kubeadm pulls nothing (image GC is off in the kubelet: image-gc-high-threshold=100); plus capd-rs/podnet, the pod network, shipped as kind does its CNI in
#   /kind/manifests/default-cni.yaml;
# - kind's conventions: hack/node-image/entrypoint before /sbin/init, /kind/version, systemd units
#   for containerd and kubelet, STOPSIGNAL SIGRTMIN+3.
source "$(dirname "$0")/lib-image.sh"

NODE_IMAGE=${NODE_IMAGE:-kindest/node:v$K8S_VERSION}
PODNET_IMAGE=capd-rs/podnet:v$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO_ROOT/Cargo.toml" | head -1)
RECIPE_LABEL=capd-rs.node-image/recipe
FILES="$HACK_DIR/node-image"
PODNET_DIR="$HACK_DIR/podnet"
WORK="$CACHE_DIR/node-image-v$K8S_VERSION"
K8S_BIN="$BIN_DIR/k8s-v$K8S_VERSION"

# Everything that shapes the image; a change rebuilds it:
# - podnet's package (hack/podnet: manifest and sources, each file by its path in there) and its
#   normal dependencies as name and version (cargo tree -p capd-podnet), so a dependency of the
#   manager alone or a test-only one changes nothing here, nor does where the repository is
#   cloned (cargo tree prints local paths);
# - of hack/lib.sh, the versions above and the part that builds podnet: static_build, as
#   bash prints it (comments dropped), and the packages it selects. Not the whole file: its other
#   helpers (the plane, processes, RBAC) shape nothing in the image, and it changes often.
recipe() {
  {
    echo "$K8S_VERSION $ETCD_VERSION $COREDNS_VERSION $CRICTL_VERSION $PODNET_IMAGE"
    cat "$0" "$HACK_DIR/lib-image.sh" "$FILES"/*
    (cd "$PODNET_DIR" && find Cargo.toml src -type f | LC_ALL=C sort | xargs sha256sum)
    declare -f static_build
    echo "${IMAGE_PACKAGES[*]}"
    (cd "$REPO_ROOT" && cargo tree --quiet --locked -p capd-podnet -e normal --prefix none --target x86_64-unknown-linux-gnu) \
      | sed 's/ (.*$//' | sort -u
  } | sha256sum | cut -c1-12
}
if [[ ${1:-} == recipe ]]; then recipe; exit; fi

# --- the node's operating system (cached rootfs tarball; a debootstrap costs ~3 min) -------------

# curl and jq as in kindest/node: upstream's KCP remediation flavor runs a script that uses them.
NODE_PACKAGES=systemd,systemd-sysv,containerd,runc,containernetworking-plugins,iptables,nftables,conntrack,iproute2,ethtool,socat,kmod,mount,util-linux,procps,ca-certificates,libseccomp2,bash,curl,jq
customize_node_os() {
  local root=$1 p
  # As kind: no units that make no sense in a container (udev, getty, timers, anything enabled by
  # package scripts); containerd and kubelet are enabled explicitly.
  rm -f "$root"/lib/systemd/system/multi-user.target.wants/* "$root"/etc/systemd/system/*.wants/* \
    "$root"/lib/systemd/system/local-fs.target.wants/* "$root"/lib/systemd/system/sockets.target.wants/*udev* \
    "$root"/lib/systemd/system/sockets.target.wants/*initctl* "$root"/lib/systemd/system/basic.target.wants/* \
    "$root"/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service
  # The host's kernel ring buffer is not ours to read.
  echo "ReadKMsg=no" >> "$root/etc/systemd/journald.conf"
  mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
  ln -sf /lib/systemd/system/containerd.service "$root/etc/systemd/system/multi-user.target.wants/containerd.service"
  # kind's layout: the CNI plugins in /opt/cni/bin (Debian installs them in /usr/lib/cni).
  mkdir -p "$root/opt/cni/bin"
  for p in "$root"/usr/lib/cni/*; do ln -sf "/usr/lib/cni/${p##*/}" "$root/opt/cni/bin/${p##*/}"; done
}

# Base of the kube-proxy and podnet images: iptables (nft backend, as in the node), conntrack, ip.
NET_PACKAGES=iptables,nftables,conntrack,iproute2,kmod
customize_net() { :; }

# --- component images ----------------------------------------------------------------------------

# A base layer for the static Go binaries: /tmp, CA certificates and a passwd naming the users
# the upstream (distroless) images have.
static_base_layer() {
  local dir="$WORK/static-base"
  [[ -s $WORK/static-base.tar ]] && return
  rm -rf "$dir"; mkdir -p "$dir/tmp" "$dir/etc/ssl/certs"
  chmod 1777 "$dir/tmp"
  cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/" || die "no /etc/ssl/certs/ca-certificates.crt (install ca-certificates)"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$dir/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' > "$dir/etc/group"
  tar --numeric-owner --owner=0 --group=0 -C "$dir" -cf "$WORK/static-base.tar" . || die "cannot tar the static base layer"
  rm -rf "$dir"
}

# binary_layer <out.tar> <dest path in image> <file>: one file, root-owned, as a layer.
binary_layer() {
  local out=$1 dest=$2 file=$3 dir="$WORK/layer.tmp"
  rm -rf "$dir"; mkdir -p "$dir/$(dirname "$dest")"
  cp "$file" "$dir/$dest"
  tar --numeric-owner --owner=0 --group=0 -C "$dir" -cf "$out" . || die "cannot tar $file"
  rm -rf "$dir"
}

# component <image> <binary> <base layer> [config JSON]: loads the image into the host engine and
# saves it for the node's containerd.
component() {
  local image=$1 binary=$2 base=$3 config=${4:-} name=${2##*/}
  [[ -x $binary ]] || die "missing binary $binary"
  binary_layer "$WORK/layer-$name.tar" "/usr/local/bin/$name" "$binary"
  [[ -n $config ]] || config='{"Env":["PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}'
  load_archive "$image" "$config" "$base" "$WORK/layer-$name.tar"
  docker save -o "$WORK/images/$name.tar" "$image" || die "docker save $image failed"
}

# pause, from the kubernetes module's own source, static (it runs in an otherwise empty image).
build_pause() {
  local out="$BIN_DIR/pause-$PAUSE_VERSION/pause" src
  [[ -x $out ]] && return
  src="$(cd /tmp && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/build/pause/linux/pause.c"
  [[ -f $src ]] || die "pause.c not found in k8s.io/kubernetes@v$K8S_VERSION"
  command -v gcc >/dev/null || die "gcc is needed to build pause"
  mkdir -p "${out%/*}"
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION" -o "$out" "$src" || die "cannot build pause"
  strip "$out"
}

# The images kubeadm pulls, by the names `kubeadm config images list` prints.
kubeadm_image() {
  local want=$1 img
  img=$(grep -E "^registry\.k8s\.io/(.*/)?$want:" "$WORK/kubeadm-images.txt" | head -1)
  [[ -n $img ]] || die "kubeadm v$K8S_VERSION lists no $want image"
  echo "$img"
}

build_components() {
  rm -rf "$WORK/images"; mkdir -p "$WORK/images"
  "$K8S_BIN/kubeadm" config images list --kubernetes-version "v$K8S_VERSION" > "$WORK/kubeadm-images.txt" ||
    die "kubeadm config images list failed"
  local etcd coredns pause
  etcd=$(kubeadm_image etcd); coredns=$(kubeadm_image coredns); pause=$(kubeadm_image pause)
  # The plane builds etcd and CoreDNS at kubeadm's versions (hack/lib.sh); refuse a silent mismatch.
  [[ ${etcd##*:} == "$ETCD_VERSION-0" ]] || die "kubeadm wants $etcd but ETCD_VERSION is $ETCD_VERSION"
  [[ ${coredns##*:} == "v$COREDNS_VERSION" ]] || die "kubeadm wants $coredns but COREDNS_VERSION is $COREDNS_VERSION"
  PAUSE_VERSION=${pause##*:}
  build_pause

  static_base_layer
  local b
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    component "$(kubeadm_image "$b")" "$K8S_BIN/$b" "$WORK/static-base.tar"
  done
  component "$etcd" "$BIN_DIR/etcd-v$ETCD_VERSION/etcd" "$WORK/static-base.tar"
  component "$coredns" "$BIN_DIR/coredns-v$COREDNS_VERSION/coredns" "$WORK/static-base.tar" \
    '{"Entrypoint":["/usr/local/bin/coredns"],"ExposedPorts":{"53/tcp":{},"53/udp":{}}}'
  component "$pause" "$BIN_DIR/pause-$PAUSE_VERSION/pause" "$WORK/static-base.tar" \
    '{"Entrypoint":["/usr/local/bin/pause"],"User":"65535:65535"}'
  build_rootfs net-base "$NET_PACKAGES" customize_net
  component "$(kubeadm_image kube-proxy)" "$K8S_BIN/kube-proxy" "$ROOTFS_TARBALL"
  component "$PODNET_IMAGE" "$PODNET_BIN" "$ROOTFS_TARBALL" \
    '{"Entrypoint":["/usr/local/bin/podnet"]}'
  # Loaded on the host too (tests and `preLoadImages` use them); ours carry the plane label.
}

# --- the node layer: Kubernetes binaries and our files -------------------------------------------

node_layer() {
  local dir="$WORK/node-layer" key=$1
  rm -rf "$dir"
  mkdir -p "$dir/usr/bin" "$dir/usr/local/bin" "$dir/etc/containerd" "$dir/kind/manifests" \
    "$dir/etc/systemd/system/kubelet.service.d" "$dir/etc/systemd/system/multi-user.target.wants" \
    "$dir/etc/cni/net.d" "$dir/etc/kubernetes/manifests" "$dir/var/lib/kubelet"
  cp "$K8S_BIN/kubelet" "$K8S_BIN/kubeadm" "$K8S_BIN/kubectl" "$dir/usr/bin/"
  install -m 0755 "$BIN_DIR/crictl-v$CRICTL_VERSION/crictl" "$dir/usr/local/bin/crictl"
  cp "$FILES/crictl.yaml" "$dir/etc/crictl.yaml"
  install -m 0755 "$FILES/entrypoint" "$dir/usr/local/bin/entrypoint"
  sed -e "s/@PAUSE_VERSION@/$PAUSE_VERSION/" -e "s/@K8S_VERSION@/$K8S_VERSION/" \
    "$FILES/containerd-config.toml" > "$dir/etc/containerd/config.toml"
  cp "$FILES/kubelet.service" "$dir/etc/systemd/system/kubelet.service"
  cp "$FILES/10-kubeadm.conf" "$dir/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"
  ln -s /etc/systemd/system/kubelet.service "$dir/etc/systemd/system/multi-user.target.wants/kubelet.service"
  sed "s|@PODNET_IMAGE@|$PODNET_IMAGE|g" "$FILES/podnet.yaml" > "$dir/kind/manifests/default-cni.yaml"
  echo "v$K8S_VERSION" > "$dir/kind/version"
  echo "$key" > "$dir/kind/capd-rs-recipe"
  tar --numeric-owner --owner=0 --group=0 -C "$dir" -cf "$WORK/node-layer.tar" . || die "cannot tar the node layer"
  rm -rf "$dir"
}

# --- preloading: containerd runs once in a build container and imports every image ---------------

preload_layer() {
  local build_image="capd-rs/node-build:$1" c="capd-rs-node-build-$$"
  load_archive "$build_image" '{"Entrypoint":["/bin/sleep","infinity"]}' "$NODE_OS_TARBALL" "$WORK/node-layer.tar"
  docker rm -f "$c" >/dev/null 2>&1 || true
  # shellcheck disable=SC2064  # expand now: the names are fixed
  trap "docker rm -f $c >/dev/null 2>&1 || true; docker rmi $build_image >/dev/null 2>&1 || true" EXIT
  docker run -d --name "$c" --label "$PLANE_LABEL" --privileged --tmpfs /run --tmpfs /tmp \
    "$build_image" >/dev/null || die "cannot start the preload container (privileged: is the runc shim registered? see hack/docker-engine.sh)"
  docker cp "$WORK/images" "$c:/kind/images" || die "cannot copy images into the preload container"
  docker exec -d "$c" sh -c 'containerd >/tmp/containerd.log 2>&1'
  wait_for 60 "containerd in the preload container" docker exec "$c" ctr version
  local tar
  for tar in "$WORK"/images/*.tar; do
    docker exec "$c" ctr -n k8s.io images import --no-unpack \
      "/kind/images/${tar##*/}" >/dev/null || die "ctr import of ${tar##*/} failed"
  done
  local have img
  have=$(docker exec "$c" ctr -n k8s.io images ls -q)
  for img in $(cat "$WORK/kubeadm-images.txt") "docker.io/$PODNET_IMAGE"; do
    grep -qxF "$img" <<<"$have" || die "image $img missing from the node's containerd after import"
  done
  docker exec "$c" sh -c 'pkill -TERM containerd; while pgrep -x containerd >/dev/null; do sleep 0.2; done; rm -rf /kind/images' ||
    die "cannot stop containerd in the preload container"
  docker exec "$c" tar --numeric-owner -C / -cf - var/lib/containerd > "$WORK/containerd-layer.tar" ||
    die "cannot export containerd's store"
  docker rm -f "$c" >/dev/null; docker rmi "$build_image" >/dev/null
  trap - EXIT
}

# --- checks --------------------------------------------------------------------------------------

# Boots the image as the provider runs a node and checks systemd, containerd and the preloaded
# images: the cheap proof that the image can become a Kubernetes node on this host.
check_image() {
  local c="capd-rs-node-check-$$" state
  docker rm -f "$c" >/dev/null 2>&1 || true
  # shellcheck disable=SC2064
  trap "docker rm -f -v $c >/dev/null 2>&1 || true" EXIT
  docker run -d --name "$c" --label "$PLANE_LABEL" --privileged --cgroupns=private --tmpfs /tmp --tmpfs /run \
    -v /var --security-opt seccomp=unconfined --security-opt apparmor=unconfined -t "$NODE_IMAGE" >/dev/null ||
    die "cannot run $NODE_IMAGE privileged (is the runc shim registered? see hack/docker-engine.sh)"
  local deadline=$((SECONDS + 60))
  until state=$(docker exec "$c" systemctl is-system-running 2>/dev/null); [[ $state == running || $state == degraded ]]; do
    (( SECONDS < deadline )) || { docker logs "$c" 2>&1 | tail -20 >&2; die "systemd in $NODE_IMAGE did not finish booting in 60s (state: ${state:-none})"; }
    sleep 0.5
  done
  [[ $state == running ]] || { docker exec "$c" systemctl --failed >&2; die "systemd in $NODE_IMAGE booted degraded"; }
  wait_for 30 "containerd in $NODE_IMAGE" docker exec "$c" ctr -n k8s.io version
  local have img
  have=$(docker exec "$c" ctr -n k8s.io images ls -q)
  for img in $(cat "$WORK/kubeadm-images.txt") "docker.io/$PODNET_IMAGE"; do
    grep -qxF "$img" <<<"$have" || die "$NODE_IMAGE lacks the preloaded image $img"
  done
  docker exec "$c" kubeadm version -o short | grep -qxF "v$K8S_VERSION" || die "kubeadm in $NODE_IMAGE is not v$K8S_VERSION"
  # The CRI answers crictl (upstream CAPD and log collectors use it).
  docker exec "$c" crictl ps >/dev/null || die "crictl ps fails in $NODE_IMAGE"
  docker rm -f -v "$c" >/dev/null
  trap - EXIT
  log "$NODE_IMAGE boots (systemd running, containerd with $(wc -l <<<"$have") preloaded images)"
}

# --- main ----------------------------------------------------------------------------------------

[[ $EUID -eq 0 ]] || die "debootstrap and docker need root"
docker info >/dev/null 2>&1 || die "docker does not answer; run hack/docker-engine.sh first"
mkdir -p "$WORK"

key=$(recipe)
if [[ ${1:-} == check ]]; then check_image; exit; fi
if [[ $(docker image inspect -f "{{index .Config.Labels \"$RECIPE_LABEL\"}}" "$NODE_IMAGE" 2>/dev/null) == "$key" ]]; then
  log "image $NODE_IMAGE present (recipe $key)"
  [[ -s $WORK/kubeadm-images.txt ]] || "$K8S_BIN/kubeadm" config images list --kubernetes-version "v$K8S_VERSION" > "$WORK/kubeadm-images.txt"
  exit 0
fi

t0=$SECONDS
log "building $NODE_IMAGE (recipe $key)"
"$HACK_DIR/build-binaries.sh" node etcd coredns crictl
# Static, through the manager's build helper: both share one set of compiled release dependencies.
PODNET_BIN="$(static_build release podnet)/podnet"
build_components
build_rootfs node-os "$NODE_PACKAGES" customize_node_os
NODE_OS_TARBALL=$ROOTFS_TARBALL
node_layer "$key"
preload_layer "$key"
load_archive "$NODE_IMAGE" "$(printf '{"Entrypoint":["/usr/local/bin/entrypoint","/sbin/init"],"StopSignal":"SIGRTMIN+3","Env":["container=docker","PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Labels":{"%s":"%s"}}' "$RECIPE_LABEL" "$key")" \
  "$NODE_OS_TARBALL" "$WORK/node-layer.tar" "$WORK/containerd-layer.tar"
rm -f "$WORK"/layer-*.tar "$WORK/containerd-layer.tar" "$WORK/node-layer.tar"
log "built $NODE_IMAGE in $((SECONDS - t0))s ($(docker image inspect -f '{{.Size}}' "$NODE_IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
check_image
