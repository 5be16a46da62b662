//go:build e2e

package upstreame2e

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	clusterctlcluster "sigs.k8s.io/cluster-api/cmd/clusterctl/client/cluster"
	"sigs.k8s.io/cluster-api/test/e2e"
	"sigs.k8s.io/cluster-api/test/framework"
)

// The specs, each under a Ginkgo label hack/upstream-e2e.sh filters on (-ginkgo.label-filter).
// Flavors are capd-rs' own templates (templates/ of this repository, laid out by
// hack/kind-providers.sh repo): the default one (DockerCluster, DockerMachineTemplate, KCP and a
// MachineDeployment), `development` (ClusterClass quick-start on the Dev* kinds), plus the suite's
// `machine-pool` and `self-hosted` flavors, which hack/upstream-e2e.sh composes from the default one.
// Their CNI is applied by the KCP (postKubeadmCommands), so no ClusterResourceSet is involved.

var _ = Describe("When following the Cluster API quick-start", Label("quick-start"), func() {
	e2e.QuickStartSpec(ctx, func() e2e.QuickStartSpecInput {
		return e2e.QuickStartSpecInput{
			E2EConfig:               e2eConfig,
			ClusterctlConfigPath:    clusterctlConfigPath,
			BootstrapClusterProxy:   bootstrapClusterProxy,
			ArtifactFolder:          artifactFolder,
			SkipCleanup:             skipCleanup,
			PostMachinesProvisioned: upstreamQuickStartChecks(false),
		}
	})
})

var _ = Describe("When following the Cluster API quick-start with ClusterClass", Label("quick-start-clusterclass"), func() {
	e2e.QuickStartSpec(ctx, func() e2e.QuickStartSpecInput {
		return e2e.QuickStartSpecInput{
			E2EConfig:               e2eConfig,
			ClusterctlConfigPath:    clusterctlConfigPath,
			BootstrapClusterProxy:   bootstrapClusterProxy,
			ArtifactFolder:          artifactFolder,
			SkipCleanup:             skipCleanup,
			Flavor:                  ptr.To("development"),
			PostMachinesProvisioned: upstreamQuickStartChecks(true),
		}
	})
})

var _ = Describe("When testing MachineDeployment scale out/in", Label("md-scale"), func() {
	e2e.MachineDeploymentScaleSpec(ctx, func() e2e.MachineDeploymentScaleSpecInput {
		return e2e.MachineDeploymentScaleSpecInput{
			E2EConfig:             e2eConfig,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
		}
	})
})

// Upstream v1.14 has no spec of its own for scaling a KubeadmControlPlane out and in (its HA specs
// are upgrades between two Kubernetes versions; we have one node image): the quick-start spec with
// the framework's ScaleAndWaitControlPlane, 1 -> 3 -> 1, once the cluster is up.
var _ = Describe("When scaling a KubeadmControlPlane out and in", Label("kcp-scale"), func() {
	e2e.QuickStartSpec(ctx, func() e2e.QuickStartSpecInput {
		return e2e.QuickStartSpecInput{
			E2EConfig:             e2eConfig,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
			WorkerMachineCount:    ptr.To[int64](0),
			PostMachinesProvisioned: func(proxy framework.ClusterProxy, namespace, clusterName string) {
				cluster := framework.GetClusterByName(ctx, framework.GetClusterByNameInput{
					Getter: proxy.GetClient(), Namespace: namespace, Name: clusterName,
				})
				for _, replicas := range []int32{3, 1} {
					kcp := framework.GetKubeadmControlPlaneByCluster(ctx, framework.GetKubeadmControlPlaneByClusterInput{
						Lister: proxy.GetClient(), ClusterName: clusterName, Namespace: namespace,
					})
					Expect(kcp).ToNot(BeNil())
					By(fmt.Sprintf("Scaling the KubeadmControlPlane to %d", replicas))
					framework.ScaleAndWaitControlPlane(ctx, framework.ScaleAndWaitControlPlaneInput{
						ClusterProxy:        proxy,
						Cluster:             cluster,
						ControlPlane:        kcp,
						Replicas:            replicas,
						WaitForControlPlane: e2eConfig.GetIntervals("kcp-scale", "wait-control-plane"),
					})
				}
			},
		}
	})
})

var _ = Describe("When testing MachinePools", Label("machine-pool"), func() {
	e2e.MachinePoolSpec(ctx, func() e2e.MachinePoolInput {
		return e2e.MachinePoolInput{
			E2EConfig:             e2eConfig,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
		}
	})
})

// upstreamQuickStartChecks are the checks upstream's own quick-start runs once the machines are
// provisioned (owner references and finalizers re-created when removed, owner references moved to
// the served API version, resourceVersions stable), with the assertions for the Docker* kinds of
// our default flavor derived from upstream's Dev* ones (same owners, same finalizers).
func upstreamQuickStartChecks(classy bool) func(framework.ClusterProxy, string, string) {
	return func(proxy framework.ClusterProxy, namespace, clusterName string) {
		filter := clusterctlcluster.FilterClusterObjectsWithNameFilter(clusterName)
		infraRefs := framework.DevInfraOwnerReferenceAssertions(classy)
		infraFinalizers := framework.DevInfraFinalizersAssertion
		coreFinalizers := framework.CoreFinalizersAssertionWithClassyClusters
		if !classy {
			infraRefs = asDockerKinds(infraRefs)
			infraFinalizers = asDockerKinds(infraFinalizers)
			coreFinalizers = framework.CoreFinalizersAssertionWithLegacyClusters
		}
		refs := []map[string]func(types.NamespacedName, []metav1.OwnerReference) error{
			framework.CoreOwnerReferenceAssertion,
			framework.ExpOwnerReferenceAssertions,
			infraRefs,
			framework.KubeadmBootstrapOwnerReferenceAssertions,
			framework.KubeadmControlPlaneOwnerReferenceAssertions(classy),
			framework.KubernetesReferenceAssertions,
		}
		By("Checking that owner references are resilient")
		framework.ValidateOwnerReferencesResilience(ctx, proxy, namespace, clusterName, filter, refs...)
		By("Checking that owner references are updated to the correct API version")
		framework.ValidateOwnerReferencesOnUpdate(ctx, proxy, namespace, clusterName, filter, refs...)
		By("Checking that finalizers are resilient")
		framework.ValidateFinalizersResilience(ctx, proxy, namespace, clusterName, filter,
			coreFinalizers,
			framework.KubeadmControlPlaneFinalizersAssertion,
			framework.ExpFinalizersAssertion,
			infraFinalizers,
		)
		By("Checking that resourceVersions are stable")
		framework.ValidateResourceVersionStable(ctx, framework.ValidateResourceVersionStableInput{
			ClusterProxy:             proxy,
			Namespace:                namespace,
			OwnerGraphFilterFunction: filter,
			WaitToBecomeStable:       e2eConfig.GetIntervals("quick-start", "wait-resource-versions-become-stable"),
			WaitToRemainStable:       e2eConfig.GetIntervals("quick-start", "wait-resource-versions-remain-stable"),
		})
	}
}

// asDockerKinds re-keys upstream's assertions for DevCluster, DevMachine, ... to DockerCluster,
// DockerMachine, ...: the Docker* kinds have the same owners and finalizers as their Dev* successors.
func asDockerKinds[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out["Docker"+strings.TrimPrefix(k, "Dev")] = v
	}
	return out
}

// Self-hosted: the workload cluster becomes the management cluster (clusterctl init on it, then
// clusterctl move of the cluster's own objects onto it, and back at the end). Its nodes need the
// provider images (the spec passes them as DOCKER_PRELOAD_IMAGES, from config.yaml's images) and
// the host's Docker socket for capd-rs running there: the suite's `self-hosted` flavor is the
// default one with both (hack/upstream-e2e.sh composes it), and config.yaml sets
// CAPD_EXTRA_MOUNT_ALLOW_DOCKER_SOCKET. No Kubernetes upgrade (one node image version here).
var _ = Describe("When testing Cluster API working on self-hosted clusters", Label("self-hosted"), func() {
	e2e.SelfHostedSpec(ctx, func() e2e.SelfHostedSpecInput {
		return e2e.SelfHostedSpecInput{
			E2EConfig:                e2eConfig,
			ClusterctlConfigPath:     clusterctlConfigPath,
			BootstrapClusterProxy:    bootstrapClusterProxy,
			ArtifactFolder:           artifactFolder,
			SkipCleanup:              skipCleanup,
			Flavor:                   "self-hosted",
			SkipUpgrade:              true,
			ControlPlaneMachineCount: ptr.To[int64](1),
			WorkerMachineCount:       ptr.To[int64](1),
		}
	})
})
