# Image of the capd-rs controller manager: one static binary at /manager, nothing else.
# It runs as root (no USER) because it talks to the host's Docker Engine through the
# root-owned /var/run/docker.sock.
#
# Targets
#   prebuilt  FROM scratch + a binary built on the host. Needs no registry and no network:
#             hack/build-image.sh builds the binary (static, x86_64-unknown-linux-musl or
#             glibc with crt-static) and stages it at .tiltbuild/bin/manager, then runs
#             `docker build --target prebuilt`.
#   tilt      prebuilt + a static busybox (from $BUSYBOX_IMAGE) and hack/tilt/{start,restart}.sh,
#             so that Tilt can live-update the binary in a running Pod (tilt.d/capd-rs.tiltfile).
#             Development only: the released image stays one binary.
#   release   (default, last) builds the binary from source in a Rust image, then copies it
#             into an empty image. Needs the Rust image and crates.io.
#
# The prebuilt stage comes first on purpose: the classic (non-BuildKit) builder runs every
# stage up to the requested target, so `--target prebuilt` must not depend on the Rust image.
# With BuildKit, `docker build .` builds only what `release` needs; with the classic builder a
# plain `docker build .` also runs `prebuilt` and `tilt`, and so needs .tiltbuild/bin/manager
# present and the busybox image.

ARG RUST_IMAGE=rust:1.95-bookworm
ARG BUSYBOX_IMAGE=busybox:1.37.0-musl

# ---- prebuilt: host-built static binary -------------------------------------------------
FROM scratch AS prebuilt
COPY .tiltbuild/bin/manager /manager
# An empty, writable /tmp (WORKDIR creates it; scratch has no shell to mkdir).
WORKDIR /tmp
WORKDIR /
ENTRYPOINT ["/manager"]

# ---- tilt: prebuilt + what Tilt's live update needs --------------------------------------
# Tilt copies a rebuilt binary in with `tar` through `kubectl exec` and then runs restart.sh;
# CAPI's tilt-prepare starts the container as `sh /start.sh /manager ...`. busybox gives sh, tar
# and kill (the musl image's busybox is static).
FROM ${BUSYBOX_IMAGE} AS busybox
FROM prebuilt AS tilt
COPY --from=busybox /bin/busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY hack/tilt/start.sh hack/tilt/restart.sh /
ENTRYPOINT ["/bin/sh", "/start.sh", "/manager"]

# ---- builder: static musl build from source ---------------------------------------------
FROM ${RUST_IMAGE} AS builder
# ring (rustls) compiles C: musl-gcc comes from musl-tools.
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
ENV CC_x86_64_unknown_linux_musl=musl-gcc \
    CARGO_TERM_COLOR=never
WORKDIR /src
# Dependencies first, so a source change does not refetch and rebuild every crate.
COPY Cargo.toml Cargo.lock ./
# The workspace names the runc shim and podnet (hack/), xtask and its figures (xtask/figures, a
# dev-dependency too): their manifests, and a stand-in for each target, must be there to load it.
COPY hack/runc-shim/Cargo.toml hack/runc-shim/Cargo.toml
COPY hack/podnet/Cargo.toml hack/podnet/Cargo.toml
COPY xtask/Cargo.toml xtask/Cargo.toml
COPY xtask/figures/Cargo.toml xtask/figures/Cargo.toml
RUN mkdir -p src/bin hack/runc-shim/src hack/podnet/src xtask/src xtask/figures/src \
 && echo 'fn main() {}' > src/main.rs \
 && echo 'fn main() {}' > src/bin/crdgen.rs \
 && echo 'fn main() {}' > hack/runc-shim/src/main.rs \
 && echo 'fn main() {}' > hack/podnet/src/main.rs \
 && echo 'fn main() {}' > xtask/src/main.rs \
 && touch src/lib.rs xtask/src/lib.rs xtask/figures/src/lib.rs \
 && cargo build --release --locked --target x86_64-unknown-linux-musl --bin manager \
 && rm -rf src
COPY src ./src
# cargo compares mtimes: make sure the real sources are newer than the dummy build.
RUN find src -type f -exec touch {} + \
 && cargo build --release --locked --target x86_64-unknown-linux-musl --bin manager \
 && cp target/x86_64-unknown-linux-musl/release/manager /manager

# ---- release: the image that ships ------------------------------------------------------
FROM scratch AS release
COPY --from=builder /manager /manager
WORKDIR /tmp
WORKDIR /
ENTRYPOINT ["/manager"]
