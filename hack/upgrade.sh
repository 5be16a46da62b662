#!/usr/bin/env bash
# A Kubernetes upgrade of a workload cluster, end to end: builds a second node image at
# v$UPGRADE_FROM, creates a 1 + 1 cluster at that version, rolls KCP and then the
# MachineDeployment to v$K8S_VERSION and prints the timings (tests/e2e_upgrade.rs).
# Not part of .ci/run: the second image needs about 20 minutes of Go builds on a cold cache
# (cached by version afterwards).
#   hack/upgrade.sh
#   UPGRADE_FROM=1.34.4 UPGRADE_ETCD=3.6.5 UPGRADE_COREDNS=1.12.1 hack/upgrade.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

hack/docker-engine.sh
hack/images.sh
hack/node-image.sh
K8S_VERSION=$UPGRADE_FROM ETCD_VERSION=$UPGRADE_ETCD COREDNS_VERSION=$UPGRADE_COREDNS hack/node-image.sh
hack/plane.sh up
hack/capi.sh up
CAPD_RS_KUBECONFIG="$KUBECONFIG_PATH" UPGRADE_FROM="$UPGRADE_FROM" UPGRADE_TO="$K8S_VERSION" \
  cargo test --locked --test e2e_upgrade -- --ignored --nocapture
