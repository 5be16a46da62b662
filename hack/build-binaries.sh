#!/usr/bin/env bash
# Builds kube-apiserver, kubectl (Kubernetes v$K8S_VERSION), etcd (v$ETCD_VERSION) and, with
# `capi`, the Cluster API v$CAPI_VERSION managers and clusterctl, with `capd-upstream` upstream
# CAPD's manager (the benchmark peer), all from the Go module proxy
# through throwaway wrapper modules. Binaries are cached in $BIN_DIR keyed by version.
#   hack/build-binaries.sh [kube|kcm|node|etcd|coredns|crictl|capi|kind|cert-manager|test-extension|all]
#   (default: kube etcd; test-extension = upstream's test runtime extension, for hack/upstream-e2e.sh)
# (kcm = kube-controller-manager; node = every Kubernetes binary a kind-style node image needs;
#  all three use one wrapper module)
source "$(dirname "$0")/lib.sh"

WORK="$CACHE_DIR/build"
mkdir -p "$WORK"

# Prepares the wrapper module for k8s.io/kubernetes v$K8S_VERSION in $WORK (shared by the kube and
# kcm targets) and sets K8S_LDFLAGS.
prepare_k8s_wrapper() {
  local dir=$1 stg="v0.${K8S_VERSION#1.}"
  mkdir -p "$dir"
  (
    cd "$dir"
    # Derive the staging module list from k8s.io/kubernetes' own go.mod (no hard-coded list).
    local mod
    mod=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    [[ -f "$mod" ]] || die "could not download k8s.io/kubernetes@v$K8S_VERSION"
    {
      echo 'module capd-rs.local/k8sbins'; echo
      grep -E '^(go|godebug) ' "$mod"
      echo; echo "require k8s.io/kubernetes v$K8S_VERSION"; echo; echo 'replace ('
      grep -E '=> \./staging/src/' "$mod" | awk -v v="$stg" '{printf "\t%s => %s %s\n", $1, $1, v}'
      echo ')'
    } > go.mod.new
    printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n\t_ "k8s.io/kubernetes/cmd/kubectl"\n\t_ "k8s.io/kubernetes/cmd/kubelet"\n\t_ "k8s.io/kubernetes/cmd/kubeadm"\n\t_ "k8s.io/kubernetes/cmd/kube-proxy"\n\t_ "k8s.io/kubernetes/cmd/kube-scheduler"\n)\n' > tools.go.new
    # Re-tidy only when the inputs changed (tidy re-resolves the whole graph: slow).
    if ! cmp -s go.mod.new go.mod.in || ! cmp -s tools.go.new tools.go || [[ ! -f go.sum ]]; then
      cp go.mod.new go.mod; mv go.mod.new go.mod.in; mv tools.go.new tools.go
      go mod tidy
    else
      rm -f go.mod.new tools.go.new
    fi
  )
  local minor=${K8S_VERSION#1.}; minor=${minor%%.*}
  local p
  K8S_LDFLAGS="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    K8S_LDFLAGS="$K8S_LDFLAGS -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    K8S_LDFLAGS="$K8S_LDFLAGS -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=1970-01-01T00:00:00Z"
  done
}

build_kube() {
  local out="$BIN_DIR/k8s-v$K8S_VERSION"
  if [[ -x "$out/kube-apiserver" && -x "$out/kubectl" ]]; then log "kube-apiserver/kubectl v$K8S_VERSION cached"; return; fi
  log "building kube-apiserver and kubectl v$K8S_VERSION from the Go module proxy (cold: ~15-25 min)"
  local dir="$WORK/k8s-$K8S_VERSION"
  mkdir -p "$out"
  prepare_k8s_wrapper "$dir"
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -tags selinux,notest -ldflags "$K8S_LDFLAGS" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl)
  log "built $out/kube-apiserver and $out/kubectl"
}

# kube-controller-manager, run by the plane with only the garbage-collector and namespace
# controllers (ownerReference cascades and namespace deletion, as in a real cluster).
build_kcm() {
  local out="$BIN_DIR/k8s-v$K8S_VERSION"
  if [[ -x "$out/kube-controller-manager" ]]; then log "kube-controller-manager v$K8S_VERSION cached"; return; fi
  log "building kube-controller-manager v$K8S_VERSION (cold: ~5-10 min after kube-apiserver)"
  local dir="$WORK/k8s-$K8S_VERSION"
  mkdir -p "$out"
  prepare_k8s_wrapper "$dir"
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -tags selinux,notest -ldflags "$K8S_LDFLAGS" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-controller-manager)
  log "built $out/kube-controller-manager"
}

# What a kind-style node needs besides kube-apiserver/kube-controller-manager/kubectl: kubelet and
# kubeadm on the node, kube-scheduler and kube-proxy as images. One `go build` for all of them
# shares the compilation of the common packages.
build_node() {
  local out="$BIN_DIR/k8s-v$K8S_VERSION" b missing=()
  for b in kube-apiserver kube-controller-manager kubectl kubelet kubeadm kube-proxy kube-scheduler; do
    [[ -x "$out/$b" ]] || missing+=("k8s.io/kubernetes/cmd/$b")
  done
  if ((${#missing[@]} == 0)); then log "Kubernetes v$K8S_VERSION node binaries cached"; return; fi
  log "building ${missing[*]##*/} v$K8S_VERSION from the Go module proxy (cold: ~15-25 min)"
  local dir="$WORK/k8s-$K8S_VERSION"
  mkdir -p "$out"
  prepare_k8s_wrapper "$dir"
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -tags selinux,notest -ldflags "$K8S_LDFLAGS" -o "$out/" "${missing[@]}")
  log "built ${missing[*]##*/} in $out"
}

# CoreDNS at the version kubeadm deploys, for the node image.
build_coredns() {
  local out="$BIN_DIR/coredns-v$COREDNS_VERSION"
  if [[ -x "$out/coredns" ]]; then log "coredns v$COREDNS_VERSION cached"; return; fi
  log "building coredns v$COREDNS_VERSION from the Go module proxy (cold: ~5-10 min)"
  local dir="$WORK/coredns-$COREDNS_VERSION"
  mkdir -p "$dir" "$out"
  (
    cd "$dir"
    printf 'module capd-rs.local/corednsbin\n\ngo 1.25.0\n\nrequire github.com/coredns/coredns v%s\n' "$COREDNS_VERSION" > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/coredns/coredns"\n' > tools.go
    go mod tidy
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/coredns" github.com/coredns/coredns
  )
  log "built $out/coredns"
}

# crictl from sigs.k8s.io/cri-tools. Its release pins Kubernetes modules at release candidates
# that the checksum database behind this proxy does not list, so the wrapper moves them to the
# node's own Kubernetes release; cri-tools itself is not in that database either (GONOSUMDB for
# that one module: its content is still pinned in go.sum by the proxy's hash).
build_crictl() {
  local out="$BIN_DIR/crictl-v$CRICTL_VERSION" stg="v0.${K8S_VERSION#1.}"
  if [[ -x "$out/crictl" ]]; then log "crictl v$CRICTL_VERSION cached"; return; fi
  log "building crictl v$CRICTL_VERSION from the Go module proxy"
  local dir="$WORK/crictl-$CRICTL_VERSION" m
  mkdir -p "$dir" "$out"
  (
    cd "$dir"
    {
      printf 'module capd-rs.local/crictlbin\n\ngo 1.25.0\n\nrequire sigs.k8s.io/cri-tools v%s\n\nreplace (\n' "$CRICTL_VERSION"
      for m in api apimachinery client-go cri-api cri-client component-base kubelet; do
        printf '\tk8s.io/%s => k8s.io/%s %s\n' "$m" "$m" "$stg"
      done
      printf ')\n'
    } > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/cri-tools/cmd/crictl"\n' > tools.go
    GONOSUMDB=sigs.k8s.io/cri-tools go mod tidy
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=v$CRICTL_VERSION" \
      -o "$out/crictl" sigs.k8s.io/cri-tools/cmd/crictl
  )
  log "built $out/crictl"
}

build_etcd() {
  local out="$BIN_DIR/etcd-v$ETCD_VERSION"
  if [[ -x "$out/etcd" ]]; then log "etcd v$ETCD_VERSION cached"; return; fi
  log "building etcd v$ETCD_VERSION from the Go module proxy (cold: ~3-5 min)"
  local dir="$WORK/etcd-$ETCD_VERSION"
  mkdir -p "$dir" "$out"
  (
    cd "$dir"
    printf 'module capd-rs.local/etcdbin\n\ngo 1.25.0\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
    go mod tidy
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
  )
  log "built $out/etcd"
}

build_capi() {
  local out="$BIN_DIR/capi-v$CAPI_VERSION"
  if [[ -x "$out/capi-manager" && -x "$out/cabpk-manager" && -x "$out/kcp-manager" && -x "$out/clusterctl" ]]; then
    log "CAPI v$CAPI_VERSION managers and clusterctl cached"; return
  fi
  log "building CAPI v$CAPI_VERSION core/kubeadm-bootstrap/kubeadm-control-plane managers and clusterctl (cold: ~10 min)"
  local dir="$WORK/capi-$CAPI_VERSION" core capi_mod
  core=$(capi_core_pkg)
  capi_mod=$(capi_module_dir)
  [[ -f $capi_mod/go.mod ]] || die "could not download sigs.k8s.io/cluster-api@v$CAPI_VERSION"
  mkdir -p "$dir" "$out"
  (
    cd "$dir"
    # CAPI's go.mod replaces its sibling modules with local folders (v1.14+: sigs.k8s.io/cluster-api/api
    # => ./api, required at a zero pseudo-version), which a dependant ignores: require the same
    # release of each instead. The go line is CAPI's own (v1.14 needs go 1.26).
    {
      printf 'module capd-rs.local/capibins\n\n'
      grep -E '^go ' "$capi_mod/go.mod"
      printf '\nrequire (\n\tsigs.k8s.io/cluster-api v%s\n' "$CAPI_VERSION"
      awk -v v="v$CAPI_VERSION" '$1 == "replace" { sub(/^replace[ \t]+/, "") }
        $2 == "=>" && $3 ~ /^\.\// { printf "\t%s %s\n", $1, v }' "$capi_mod/go.mod"
      printf ')\n'
    } > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "%s"\n\t_ "sigs.k8s.io/cluster-api/bootstrap/kubeadm"\n\t_ "sigs.k8s.io/cluster-api/controlplane/kubeadm"\n\t_ "sigs.k8s.io/cluster-api/cmd/clusterctl"\n)\n' "$core" > tools.go
    go mod tidy
    local ldf="-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=v$CAPI_VERSION -X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitMinor=${CAPI_VERSION#1.}"
    ldf="${ldf%.*}"  # gitMinor: keep the minor only
    # The managers as upstream's images build them (its Dockerfile): fieldsv1string makes
    # apimachinery v0.36+ intern managedFields (less memory; same API), a no-op before CAPI v1.14.
    # clusterctl as its release binary: without the tag.
    local mgr=(go build -trimpath -tags=fieldsv1string -ldflags "$ldf")
    CGO_ENABLED=0 "${mgr[@]}" -o "$out/capi-manager" "$core"
    CGO_ENABLED=0 "${mgr[@]}" -o "$out/cabpk-manager" sigs.k8s.io/cluster-api/bootstrap/kubeadm
    CGO_ENABLED=0 "${mgr[@]}" -o "$out/kcp-manager" sigs.k8s.io/cluster-api/controlplane/kubeadm
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldf" -o "$out/clusterctl" sigs.k8s.io/cluster-api/cmd/clusterctl
  )
  log "built CAPI binaries in $out"
}

# Upstream CAPD's manager (package infrastructure/docker of the test module), the peer of
# hack/bench.sh. The test module's go.mod replaces sigs.k8s.io/cluster-api with its parent folder,
# (and sigs.k8s.io/cluster-api/api with ../api), which a dependant ignores: the wrapper pins the
# same release of all three. `tidy -e`: the test-only imports of CAPI's packages (envtest) need
# modules the proxy does not have, and the build does not need them.
build_capd_upstream() {
  local out="$CAPD_UPSTREAM_BIN_DIR" v=$CAPD_UPSTREAM_VERSION
  if [[ -x "$out/manager" ]]; then log "upstream CAPD v$v manager cached"; return; fi
  log "building upstream CAPD v$v (sigs.k8s.io/cluster-api/test/infrastructure/docker; cold: ~5-10 min)"
  local dir="$WORK/capd-upstream-$v"
  mkdir -p "$dir" "$out"
  (
    cd "$dir"
    printf 'module capd-rs.local/capdupstream\n\ngo 1.26.0\n\nrequire (\n\tsigs.k8s.io/cluster-api v%s\n\tsigs.k8s.io/cluster-api/api v%s\n\tsigs.k8s.io/cluster-api/test v%s\n)\n' "$v" "$v" "$v" > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/cluster-api/test/infrastructure/docker"\n' > tools.go
    go mod tidy -e
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/manager" sigs.k8s.io/cluster-api/test/infrastructure/docker
  )
  log "built $out/manager"
}

# Upstream's test runtime extension (package main sigs.k8s.io/cluster-api/test/extension of the
# test module), the RuntimeExtensionProvider `test-extension` of upstream's e2e config, for the
# specs of hack/upstream-e2e.sh that call its hooks and patches. Built inside the suite's own
# module (hack/upstream-e2e), which already pins the test module and its siblings at
# v$CAPI_VERSION: the same dependency graph as the suite, so the Go build cache is shared. Static,
# as upstream's Dockerfile builds it (CGO_ENABLED=0).
build_test_extension() {
  local out="$BIN_DIR/test-extension-v$CAPI_VERSION"
  if [[ -x "$out/manager" ]]; then log "test extension v$CAPI_VERSION cached"; return; fi
  log "building upstream's test extension v$CAPI_VERSION (sigs.k8s.io/cluster-api/test/extension; cold: ~10 min, ~35 s after the suite)"
  mkdir -p "$out"
  local t0=$SECONDS
  (cd "$HACK_DIR/upstream-e2e" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/manager.tmp" sigs.k8s.io/cluster-api/test/extension)
  mv "$out/manager.tmp" "$out/manager"
  log "built $out/manager in $((SECONDS - t0))s"
}

# The kind CLI (sigs.k8s.io/kind, a plain main module: no wrapper needed). Only the CLI: kind's
# own node image build uses Debian trixie (systemd 257 refuses cgroup v1); hack/kind.sh gives it
# ours.
build_kind() {
  local out="$BIN_DIR/kind-v$KIND_VERSION"
  if [[ -x "$out/kind" ]]; then log "kind v$KIND_VERSION cached"; return; fi
  log "building kind v$KIND_VERSION (cold: ~1 min)"
  (cd /tmp && GOBIN="$out" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@v$KIND_VERSION")
  log "built $out/kind"
}

# cert-manager's controller, cainjector and webhook (the three Deployments CAPI needs), for the
# cert-manager of a kind management cluster (hack/kind-providers.sh). clusterctl v$CAPI_VERSION
# installs cert-manager v1.21.1 by default, but from v1.12 on cert-manager keeps its main packages
# in nested modules (github.com/cert-manager/cert-manager/cmd/controller, ...) that the Go module
# proxy does not serve (404; the root module v1.12.0+ has no cmd/ at all): v1.11.5 is the newest
# release whose root module still holds cmd/controller, cmd/cainjector and cmd/webhook. Its API
# (cert-manager.io/v1 Issuer, Certificate) is the one CAPI's manifests and clusterctl's readiness
# check use. The go.mod `replace` of miekg/dns is ignored by a dependant (the required version is
# used; cert-manager's ACME DNS solvers are not exercised here).
build_cert_manager() {
  local out="$BIN_DIR/cert-manager-v$CERT_MANAGER_VERSION" v=$CERT_MANAGER_VERSION
  if [[ -x "$out/controller" && -x "$out/cainjector" && -x "$out/webhook" ]]; then
    log "cert-manager v$v cached"; return
  fi
  log "building cert-manager v$v controller, cainjector and webhook (cold: ~5 min)"
  local dir="$WORK/cert-manager-$v" p
  mkdir -p "$dir" "$out"
  (
    cd "$dir"
    printf 'module capd-rs.local/certmanagerbins\n\ngo 1.19\n\nrequire github.com/cert-manager/cert-manager v%s\n' "$v" > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport (\n' > tools.go
    for p in controller cainjector webhook; do printf '\t_ "github.com/cert-manager/cert-manager/cmd/%s"\n' "$p" >> tools.go; done
    printf ')\n' >> tools.go
    go mod tidy
    local ldf="-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=v$v -X github.com/cert-manager/cert-manager/pkg/util.AppGitCommit=0000000000000000000000000000000000000000"
    for p in controller cainjector webhook; do
      CGO_ENABLED=0 go build -trimpath -ldflags "$ldf" -o "$out/$p" "github.com/cert-manager/cert-manager/cmd/$p"
    done
  )
  log "built cert-manager v$v in $out"
}

# Where upstream CAPD's CRDs live (config/crd/bases of the test module).
capd_upstream_crd_dir() {
  local dir
  dir=$(cd /tmp && go mod download -json "sigs.k8s.io/cluster-api/test@v$CAPD_UPSTREAM_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [[ -d $dir ]] || die "could not download sigs.k8s.io/cluster-api/test@v$CAPD_UPSTREAM_VERSION"
  echo "$dir/infrastructure/docker/config/crd/bases"
}

# Where the cert-manager module (its CRDs: deploy/crds) lives after `go mod download`.
cert_manager_module_dir() {
  (cd /tmp && go mod download -json "github.com/cert-manager/cert-manager@v$CERT_MANAGER_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
}

# Where the CAPI module's manifests live (CRDs, webhooks) after `go mod download`.
capi_module_dir() {
  (cd /tmp && go mod download -json "sigs.k8s.io/cluster-api@v$CAPI_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
}

# build <target>: one target under its build lock (hack/lib.sh, locked). The Kubernetes targets share
# one, as they build in one module folder.
build() {
  local lock=$1
  case $1 in kube|kcm|node) lock=k8s-v$K8S_VERSION ;; esac
  locked "$lock" "build_${1//-/_}"
}

targets=("$@"); [[ ${#targets[@]} -gt 0 ]] || targets=(kube etcd)
for t in "${targets[@]}"; do
  case $t in
    kube|kcm|etcd|capi|node|coredns|crictl|kind|cert-manager|capd-upstream|test-extension) build "$t" ;;
    all) build etcd; build kube; build kcm; build capi ;;
    cert-manager-module-dir) cert_manager_module_dir ;;
    capi-module-dir) capi_module_dir ;;
    capd-upstream-crd-dir) capd_upstream_crd_dir ;;
    *) die "unknown target $t" ;;
  esac
done
