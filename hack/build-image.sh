#!/usr/bin/env bash
# Builds the manager image offline: a static `manager` binary built on this host, staged at
# .tiltbuild/bin/manager, then `docker build --target prebuilt` (FROM scratch; no registry).
#   hack/build-image.sh [--skip-build|--binary-only] [--profile P] [--from-source] [IMAGE]
#                                                            (default IMAGE: capd-rs/manager:dev)
#     --skip-build   reuse the binary already staged in .tiltbuild/bin/manager
#     --binary-only  build and stage the binary, do not build the image (Tilt builds it)
#     --profile P    the cargo profile (default release; Tilt's loop uses `tilt`, see Cargo.toml)
#     --from-source  build inside Docker instead (`--target release`; needs the Rust image and crates.io)
# Static linking: static_build in hack/lib.sh (musl when installed, else glibc with
# crt-static; CAPD_RS_RUST_TARGET=<triple> forces one).
source "$(dirname "$0")/lib.sh"

IMAGE=capd-rs/manager:dev
SKIP_BUILD=false
FROM_SOURCE=false
BINARY_ONLY=false
PROFILE=release
while (($#)); do
  arg=$1; shift
  case "$arg" in
    --profile) [[ $# -gt 0 ]] || die "--profile needs a value"; PROFILE=$1; shift ;;
    --skip-build) SKIP_BUILD=true ;;
    --from-source) FROM_SOURCE=true ;;
    --binary-only) BINARY_ONLY=true ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) die "unknown flag $arg" ;;
    *) IMAGE=$arg ;;
  esac
done

need_docker() {
  command -v docker >/dev/null || die "docker CLI not found (hack/docker-engine.sh installs and starts the engine)"
  docker info >/dev/null 2>&1 || die "the Docker Engine is not reachable (start it with hack/docker-engine.sh)"
}

if $FROM_SOURCE; then
  need_docker
  log "building $IMAGE from source (docker build --target release)"
  docker build --target release -t "$IMAGE" "$REPO_ROOT"
  exit 0
fi

STAGED="$REPO_ROOT/.tiltbuild/bin/manager"

# is_static <file>: true when the ELF file has no program interpreter (no dynamic loader).
is_static() {
  local out
  if command -v readelf >/dev/null; then
    out=$(readelf -l "$1" 2>/dev/null) || return 1
    ! grep -q 'Requesting program interpreter' <<<"$out"
  else
    out=$(file -b "$1")
    grep -Eq 'statically linked|static-pie linked' <<<"$out"
  fi
}

# Staging and the image build hold a lock per checkout: hack/test.sh builds the binary in the
# background (--binary-only) while its steps run, and a second staging must not replace the file
# a `docker build` of the first is reading.
stage_and_build() {
  if ! $SKIP_BUILD; then
    command -v cargo >/dev/null || die "cargo not found"
    BIN="$(static_build "$PROFILE" manager)/manager"
    [[ -x "$BIN" ]] || die "cargo did not produce $BIN"
    is_static "$BIN" || die "$BIN is dynamically linked; it cannot run in a FROM scratch image"
    mkdir -p "$(dirname "$STAGED")"
    install -m 0755 "$BIN" "$STAGED"
  fi

  [[ -x "$STAGED" ]] || die "no staged binary at $STAGED (run without --skip-build)"
  is_static "$STAGED" || die "$STAGED is dynamically linked; it cannot run in a FROM scratch image"
  if $BINARY_ONLY; then log "staged $STAGED"; return; fi

  need_docker

  log "building image $IMAGE (docker build --target prebuilt; offline)"
  docker build --target prebuilt -t "$IMAGE" "$REPO_ROOT"
  log "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"
}
locked "manager-image-$(printf %s "$REPO_ROOT" | sha256sum | cut -c1-12)" stage_and_build
