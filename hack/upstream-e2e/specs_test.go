//go:build e2e

package upstreame2e

import (
	"context"
	"fmt"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlcluster "sigs.k8s.io/cluster-api/cmd/clusterctl/client/cluster"
	"sigs.k8s.io/cluster-api/test/e2e"
	"sigs.k8s.io/cluster-api/test/framework"
)

// The specs, each under a Ginkgo label hack/upstream-e2e.sh filters on (-ginkgo.label-filter).
// Flavors are upstream's own (test/e2e/data/infrastructure-docker/main, rendered unchanged by
// hack/upstream-e2e.sh): the default one (DevCluster, DevMachineTemplate, KCP, a MachineDeployment
// and a ClusterResourceSet applying the CNI), `topology` (ClusterClass quick-start), `machine-pool`.
// Each spec passes upstream's own input for it (test/e2e/*_test.go of the same module).

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
			Flavor:                  ptr.To("topology"),
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
// the served API version, resourceVersions stable), as upstream passes them for its flavors.
func upstreamQuickStartChecks(classy bool) func(framework.ClusterProxy, string, string) {
	return func(proxy framework.ClusterProxy, namespace, clusterName string) {
		filter := clusterctlcluster.FilterClusterObjectsWithNameFilter(clusterName)
		coreFinalizers := framework.CoreFinalizersAssertionWithLegacyClusters
		if classy {
			coreFinalizers = framework.CoreFinalizersAssertionWithClassyClusters
		}
		refs := []map[string]func(types.NamespacedName, []metav1.OwnerReference) error{
			framework.CoreOwnerReferenceAssertion,
			framework.ExpOwnerReferenceAssertions,
			framework.DevInfraOwnerReferenceAssertions(classy),
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
			framework.DevInfraFinalizersAssertion,
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

// Self-hosted: the workload cluster becomes the management cluster (clusterctl init on it, then
// clusterctl move of the cluster's own objects onto it, and back at the end). Its nodes need the
// provider images (the spec passes them as DOCKER_PRELOAD_IMAGES, from config.yaml's images) and
// the host's Docker socket for capd-rs running there: upstream's default flavor mounts it, and
// config.yaml sets CAPD_EXTRA_MOUNT_ALLOW_DOCKER_SOCKET. No Kubernetes upgrade (one node image
// version here).
var _ = Describe("When testing Cluster API working on self-hosted clusters", Label("self-hosted"), func() {
	e2e.SelfHostedSpec(ctx, func() e2e.SelfHostedSpecInput {
		return e2e.SelfHostedSpecInput{
			E2EConfig:                e2eConfig,
			ClusterctlConfigPath:     clusterctlConfigPath,
			BootstrapClusterProxy:    bootstrapClusterProxy,
			ArtifactFolder:           artifactFolder,
			SkipCleanup:              skipCleanup,
			SkipUpgrade:              true,
			ControlPlaneMachineCount: ptr.To[int64](1),
			WorkerMachineCount:       ptr.To[int64](1),
		}
	})
})

// The other upstream specs that run on one Kubernetes version without the runtime extension, each
// with the input upstream gives it (test/e2e/*_test.go of the same module), on upstream's flavors.

var _ = Describe("When following the Cluster API quick-start with Ignition", Label("quick-start-ignition"), func() {
	e2e.QuickStartSpec(ctx, func() e2e.QuickStartSpecInput {
		return e2e.QuickStartSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor: ptr.To("ignition"),
		}
	})
})

var _ = Describe("When following the Cluster API quick-start with ClusterClass without any worker definitions", Label("quick-start-no-workers"), func() {
	e2e.QuickStartSpec(ctx, func() e2e.QuickStartSpecInput {
		return e2e.QuickStartSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor: ptr.To("topology-kcp-only"), WorkerMachineCount: ptr.To[int64](0),
		}
	})
})

var _ = Describe("When testing KCP remediation", Label("kcp-remediation"), func() {
	e2e.KCPRemediationSpec(ctx, func() e2e.KCPRemediationSpecInput {
		return e2e.KCPRemediationSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
		}
	})
})

var _ = Describe("When testing MachineDeployment remediation", Label("md-remediation"), func() {
	e2e.MachineDeploymentRemediationSpec(ctx, func() e2e.MachineDeploymentRemediationSpecInput {
		return e2e.MachineDeploymentRemediationSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
		}
	})
})

var _ = Describe("When testing KCP adoption", Label("kcp-adoption"), func() {
	e2e.KCPAdoptionSpec(ctx, func() e2e.KCPAdoptionSpecInput {
		return e2e.KCPAdoptionSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
		}
	})
})

// Node drain: a VolumeAttachment per Node, held by a finalizer, so drain must also wait for volume
// detach (upstream's VerifyNodeVolumeDetach).
var _ = Describe("When testing Node drain", Label("node-drain"), func() {
	e2e.NodeDrainTimeoutSpec(ctx, func() e2e.NodeDrainTimeoutSpecInput {
		return e2e.NodeDrainTimeoutSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                 ptr.To("topology"),
			VerifyNodeVolumeDetach: true,
			CreateAdditionalResources: func(ctx context.Context, proxy framework.ClusterProxy, cluster *clusterv1.Cluster) {
				workload := proxy.GetWorkloadCluster(ctx, cluster.Namespace, cluster.Name).GetClient()
				nodes := &corev1.NodeList{}
				Expect(workload.List(ctx, nodes)).To(Succeed())
				for _, node := range nodes.Items {
					va := &storagev1.VolumeAttachment{
						ObjectMeta: metav1.ObjectMeta{Name: "va-" + node.Name, Finalizers: []string{"test.cluster.x-k8s.io/block"}},
						Spec: storagev1.VolumeAttachmentSpec{
							Attacher: "manual", NodeName: node.Name,
							Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("foo")},
						},
					}
					Expect(workload.Create(ctx, va)).To(Succeed())
					va.Status.Attached = true
					Expect(workload.Status().Update(ctx, va)).To(Succeed())
				}
			},
		}
	})
})

// Cluster deletion: the phases upstream checks (workers first, then the control plane, then the
// DevCluster), each blocked by a finalizer until the spec releases it.
var _ = Describe("When performing cluster deletion with ClusterClass", Label("cluster-deletion"), func() {
	ownedBy := func(refs []metav1.OwnerReference, kinds ...string) bool {
		for _, r := range refs {
			if slices.Contains(kinds, r.Kind) {
				return true
			}
		}
		return false
	}
	isMachine := func(ref corev1.ObjectReference, _ []metav1.OwnerReference) bool { return ref.Kind == "Machine" }
	e2e.ClusterDeletionSpec(ctx, func() e2e.ClusterDeletionSpecInput {
		return e2e.ClusterDeletionSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			ControlPlaneMachineCount: ptr.To[int64](3),
			Flavor:                   ptr.To("topology"),
			ClusterDeletionPhases: []e2e.ClusterDeletionPhase{
				{
					ObjectFilter: func(ref corev1.ObjectReference, owners []metav1.OwnerReference) bool {
						return ref.Kind == "MachineDeployment" || ref.Kind == "MachineSet" ||
							(ref.Kind == "Machine" && ownedBy(owners, "MachineDeployment", "MachineSet"))
					},
					BlockingObjectFilter: isMachine,
				},
				{
					ObjectFilter: func(ref corev1.ObjectReference, owners []metav1.OwnerReference) bool {
						return ref.Kind == "KubeadmControlPlane" || (ref.Kind == "Machine" && ownedBy(owners, "KubeadmControlPlane"))
					},
					BlockingObjectFilter: isMachine,
				},
				{
					ObjectFilter:         func(ref corev1.ObjectReference, _ []metav1.OwnerReference) bool { return ref.Kind == "DevCluster" },
					BlockingObjectFilter: func(ref corev1.ObjectReference, _ []metav1.OwnerReference) bool { return ref.Kind == "DevCluster" },
				},
			},
		}
	})
})

var _ = Describe("When testing KCP and MachineDeployment rolling upgrades and in-place taint propagation", Label("kcp-md-rollout"), func() {
	e2e.KCPAndMachineDeploymentRolloutSpec(ctx, func() e2e.KCPAndMachineDeploymentRolloutSpecInput {
		return e2e.KCPAndMachineDeploymentRolloutSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor: "kcp-md-taints",
		}
	})
})

// The quick-start on a ClusterClass whose patches and lifecycle hooks are served by upstream's test
// runtime extension (the suite installs it: config.yaml's test-extension) through the v1beta1 API of
// the Runtime SDK; the spec creates the ExtensionConfig pointing at the extension's Service, limited
// to its own namespace. As upstream passes it: only the resourceVersion stability check afterwards.
var _ = Describe("When following the Cluster API quick-start with v1beta1 ClusterClass", Label("quick-start-v1beta1-clusterclass"), func() {
	e2e.QuickStartSpec(ctx, func() e2e.QuickStartSpecInput {
		return e2e.QuickStartSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                    ptr.To("topology-runtimesdk-v1beta1"),
			ExtensionServiceNamespace: "test-extension-system",
			ExtensionServiceName:      "test-extension-webhook-service",
			PostMachinesProvisioned: func(proxy framework.ClusterProxy, namespace, clusterName string) {
				By("Checking that resourceVersions are stable")
				framework.ValidateResourceVersionStable(ctx, framework.ValidateResourceVersionStableInput{
					ClusterProxy:             proxy,
					Namespace:                namespace,
					OwnerGraphFilterFunction: clusterctlcluster.FilterClusterObjectsWithNameFilter(clusterName),
					WaitToBecomeStable:       e2eConfig.GetIntervals("quick-start", "wait-resource-versions-become-stable"),
					WaitToRemainStable:       e2eConfig.GetIntervals("quick-start", "wait-resource-versions-remain-stable"),
				})
			},
		}
	})
})
