#!/usr/bin/env bash
# Helpers for the scripts that build local images (images.sh, node-image.sh): a Debian rootfs by
# debootstrap, cached as a tarball keyed by its recipe, loaded into Docker as an image with our
# own config (no registry is reachable, and Engine 20.10's `docker import --change` rejects
# STOPSIGNAL). Source it; do not run it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

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

# recipe_key <packages> <customize-fn> [extra]: what shapes a rootfs, hashed. Only the function's
# own text is hashed, not the functions it calls: a recipe keeps its logic inside its function.
recipe_key() {
  { echo "$SUITE $1${3:+ $3}"; declare -f "$2"; } | sha256sum | cut -c1-12
}

# build_rootfs <name> <packages> <customize-fn> [recipe extra]: a debootstrap minbase rootfs with
# the packages, customized by the function (given the rootfs directory), as a tarball cached in
# $IMG_CACHE and keyed by everything that shapes it. Sets ROOTFS_TARBALL.
build_rootfs() {
  local name=$1 pkgs=$2 customize=$3 extra=${4:-}
  local key
  key=$(recipe_key "$pkgs" "$customize" "$extra")
  ROOTFS_TARBALL="$IMG_CACHE/$name-$key.tar"
  if [[ -s $ROOTFS_TARBALL ]]; then log "using cached rootfs $ROOTFS_TARBALL"; return; fi

  local mirror root="$IMG_CACHE/rootfs-$name.tmp"
  mirror=$(debian_mirror)
  remove_rootfs "$root"
  log "debootstrap $SUITE (minbase + $pkgs) from $mirror for $name (cold: ~1-3 min)"
  local t0=$SECONDS
  debootstrap --variant=minbase --include="$pkgs" --cache-dir="$IMG_CACHE/debs" \
    "$SUITE" "$root" "$mirror" > "$IMG_CACHE/debootstrap-$name.log" 2>&1 ||
    { tail -20 "$IMG_CACHE/debootstrap-$name.log" >&2; remove_rootfs "$root"; die "debootstrap failed for $name"; }
  "$customize" "$root" || { remove_rootfs "$root"; die "customizing the rootfs of $name failed"; }
  # Package lists and man pages are dead weight in an image that never runs apt.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/man/* \
    "$root"/usr/share/doc/* "$root"/usr/share/locale/*
  tar --numeric-owner -C "$root" -cf "$ROOTFS_TARBALL.partial" . || die "cannot tar the rootfs of $name"
  mv "$ROOTFS_TARBALL.partial" "$ROOTFS_TARBALL"
  remove_rootfs "$root"
  # Older tarballs of this rootfs (other recipe hashes) are obsolete.
  find "$IMG_CACHE" -maxdepth 1 -name "$name-*.tar" ! -name "$(basename "$ROOTFS_TARBALL")" -delete
  log "rootfs $name cached in $ROOTFS_TARBALL ($((SECONDS - t0))s)"
}

# image_current <tag> [recipe key]: the image is present, carries IMAGE_LABEL and (given a key)
# was built from that recipe. One loaded before that label existed carries the plane's run label
# instead, and one from another recipe is stale: either is loaded again (from its cached rootfs,
# in seconds, when only the tag's image is stale).
image_current() {
  local labels
  labels=$(docker image inspect -f '{{json .Config.Labels}}' "$1" 2>/dev/null) || return 1
  [[ $labels == *"\"${IMAGE_LABEL%%=*}\":\"${IMAGE_LABEL#*=}\""* ]] || return 1
  [[ -z ${2:-} || $labels == *"\"$IMAGE_RECIPE_LABEL\":\"$2\""* ]]
}

# The label a built image carries its recipe key in.
IMAGE_RECIPE_LABEL=capd-rs.image/recipe

# build_image <tag> <packages> <customize-fn> <image config JSON (Entrypoint/Cmd/StopSignal...)>:
# a one-layer image from build_rootfs, unless the tag's image is current with this recipe.
build_image() {
  local tag=$1 pkgs=$2 customize=$3 config=$4 key
  key=$(recipe_key "$pkgs" "$customize")
  if image_current "$tag" "$key"; then log "image $tag present"; return 0; fi
  build_rootfs "${tag//[\/:]/_}" "$pkgs" "$customize"
  RECIPE=$key load_archive "$tag" "$config" "$ROOTFS_TARBALL"
  log "loaded $tag"
}

# load_archive <tag> <config JSON> <layer tarball>...: `docker load` of a docker-archive with these
# layers, bottom first (hard-linked, not copied). The image config is the given JSON (Entrypoint,
# Cmd, StopSignal, Env, ...) plus IMAGE_LABEL (never the plane's label, which containers would
# inherit); each layer's sha256 is its diff_id.
load_archive() {
  local tag=$1 config=$2 stage="$IMG_CACHE/archive.tmp" i=0 layer
  shift 2
  rm -rf "$stage"; mkdir -p "$stage"
  for layer in "$@"; do
    ln "$layer" "$stage/layer$i.tar" 2>/dev/null || cp "$layer" "$stage/layer$i.tar"
    i=$((i + 1))
  done
  TAG=$tag LABEL=$IMAGE_LABEL RECIPE=${RECIPE:-} RECIPE_LABEL=$IMAGE_RECIPE_LABEL CONFIG=$config STAGE=$stage NEWEST=$(ls -t "$@" | head -1) python3 - <<'PY' ||
import datetime, hashlib, json, os
stage = os.environ["STAGE"]
layers = sorted((f for f in os.listdir(stage) if f.startswith("layer")), key=lambda f: int(f[5:-4]))
def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()
# "created" = when the newest layer was built, so `docker images` shows a meaningful age.
created = datetime.datetime.fromtimestamp(os.path.getmtime(os.environ["NEWEST"]), datetime.timezone.utc)
created = created.strftime("%Y-%m-%dT%H:%M:%SZ")
cfg = json.loads(os.environ["CONFIG"])
key, _, val = os.environ["LABEL"].partition("=")
cfg.setdefault("Labels", {})[key] = val
if os.environ.get("RECIPE"):
    cfg["Labels"][os.environ["RECIPE_LABEL"]] = os.environ["RECIPE"]
cfg.setdefault("Env", ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
image = {
    "architecture": "amd64", "os": "linux", "created": created, "config": cfg,
    "rootfs": {"type": "layers", "diff_ids": [sha256(os.path.join(stage, l)) for l in layers]},
    "history": [{"created": created, "created_by": "capd-rs hack/"} for _ in layers],
}
raw = json.dumps(image, sort_keys=True).encode()
name = hashlib.sha256(raw).hexdigest() + ".json"
open(os.path.join(stage, name), "wb").write(raw)
manifest = [{"Config": name, "RepoTags": [os.environ["TAG"]], "Layers": layers}]
open(os.path.join(stage, "manifest.json"), "w").write(json.dumps(manifest))
PY
    die "cannot write the image archive for $tag"
  tar -C "$stage" -c . | docker load >/dev/null || die "docker load failed for $tag"
  rm -rf "$stage"
}

