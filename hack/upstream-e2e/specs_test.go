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
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// Self-hosted, upstream's three forms: the workload cluster becomes the management cluster
// (clusterctl init on it, clusterctl move of the cluster's own objects onto it), capd-rs running
// there upgrades it from KUBERNETES_VERSION_UPGRADE_FROM to _TO, and everything moves back. Its
// nodes need the provider images (the spec preloads config.yaml's images) and the host's Docker
// socket, which upstream's flavors mount and config.yaml allows (CAPD_EXTRA_MOUNT_ALLOW_DOCKER_SOCKET).
var _ = Describe("When testing Cluster API working on self-hosted clusters using ClusterClass", Label("self-hosted"), func() {
	e2e.SelfHostedSpec(ctx, func() e2e.SelfHostedSpecInput {
		return e2e.SelfHostedSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                   "topology",
			ControlPlaneMachineCount: ptr.To[int64](1),
			WorkerMachineCount:       ptr.To[int64](1),
		}
	})
})

var _ = Describe("When testing Cluster API working on self-hosted clusters using ClusterClass with a HA control plane", Label("self-hosted-ha"), func() {
	e2e.SelfHostedSpec(ctx, func() e2e.SelfHostedSpecInput {
		return e2e.SelfHostedSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                   "topology",
			ControlPlaneMachineCount: ptr.To[int64](3),
			WorkerMachineCount:       ptr.To[int64](1),
		}
	})
})

var _ = Describe("When testing Cluster API working on single-node self-hosted clusters using ClusterClass", Label("self-hosted-single-node"), func() {
	e2e.SelfHostedSpec(ctx, func() e2e.SelfHostedSpecInput {
		return e2e.SelfHostedSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                   "topology-no-workers",
			ControlPlaneMachineCount: ptr.To[int64](1),
			WorkerMachineCount:       ptr.To[int64](0),
		}
	})
})

// Cluster upgrades from KUBERNETES_VERSION_UPGRADE_FROM to _TO (two node images, config.yaml),
// without the conformance run (its image cannot be built offline), as upstream runs them.

var _ = Describe("When upgrading a workload cluster using ClusterClass", Label("cluster-upgrade"), func() {
	e2e.ClusterUpgradeConformanceSpec(ctx, func() e2e.ClusterUpgradeConformanceSpecInput {
		return e2e.ClusterUpgradeConformanceSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                   ptr.To("topology"),
			ControlPlaneMachineCount: ptr.To[int64](1),
			WorkerMachineCount:       ptr.To[int64](2),
			SkipConformanceTests:     true,
		}
	})
})

var _ = Describe("When upgrading a workload cluster using ClusterClass with a HA control plane", Label("cluster-upgrade-ha"), func() {
	e2e.ClusterUpgradeConformanceSpec(ctx, func() e2e.ClusterUpgradeConformanceSpecInput {
		return e2e.ClusterUpgradeConformanceSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                             ptr.To("kcp-pre-drain"),
			ControlPlaneMachineCount:           ptr.To[int64](3),
			WorkerMachineCount:                 ptr.To[int64](1),
			SkipConformanceTests:               true,
			PreWaitForControlPlaneToBeUpgraded: releaseKCPPreDrainHookWhenStable(3),
		}
	})
})

var _ = Describe("When upgrading a workload cluster using ClusterClass with a HA control plane using scale-in rollout", Label("cluster-upgrade-ha-scale-in"), func() {
	e2e.ClusterUpgradeConformanceSpec(ctx, func() e2e.ClusterUpgradeConformanceSpecInput {
		return e2e.ClusterUpgradeConformanceSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                   ptr.To("kcp-scale-in"),
			ControlPlaneMachineCount: ptr.To[int64](3),
			WorkerMachineCount:       ptr.To[int64](1),
			SkipConformanceTests:     true,
		}
	})
})

// releaseKCPPreDrainHookWhenStable is the gate upstream's HA upgrade puts in front of each control
// plane Machine's drain: the kcp-pre-drain flavor marks every control-plane Machine with a pre-drain
// hook, and the test lifts it from the one Machine being deleted only while the workload cluster is
// stable (every Node Ready, one Ready kube-proxy Pod per Node). It returns once all `want`
// control-plane Machines run the topology's version with a healthy Node.
func releaseKCPPreDrainHookWhenStable(want int64) func(framework.ClusterProxy, string, string) {
	const hook = "pre-drain.delete.hook.machine.cluster.x-k8s.io/kcp-ready-check"
	return func(mgmt framework.ClusterProxy, namespace, name string) {
		cluster := &clusterv1.Cluster{}
		Expect(mgmt.GetClient().Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, cluster)).To(Succeed())
		workload := mgmt.GetWorkloadCluster(ctx, namespace, name).GetClient()
		Eventually(func() (int64, error) {
			if err := workloadStable(workload); err != nil {
				return 0, err
			}
			machines := framework.GetControlPlaneMachinesByCluster(ctx, framework.GetControlPlaneMachinesByClusterInput{
				Lister: mgmt.GetClient(), ClusterName: name, Namespace: namespace,
			})
			var deleting []clusterv1.Machine
			var upgraded int64
			for _, m := range machines {
				if !m.DeletionTimestamp.IsZero() {
					deleting = append(deleting, m)
				}
				if m.Spec.Version == cluster.Spec.Topology.Version && conditions.IsTrue(&m, clusterv1.MachineNodeHealthyCondition) {
					upgraded++
				}
			}
			switch {
			case len(deleting) > 1:
				return 0, fmt.Errorf("%d control-plane Machines deleting at once; KCP rolls out one at a time", len(deleting))
			case len(deleting) == 1:
				m := &deleting[0]
				if m.Annotations[hook] != "true" {
					return 0, fmt.Errorf("Machine %s is deleting without the pre-drain hook %s", m.Name, hook)
				}
				helper, err := patch.NewHelper(m, mgmt.GetClient())
				if err != nil {
					return 0, err
				}
				delete(m.Annotations, hook)
				if err := helper.Patch(ctx, m); err != nil {
					return 0, err
				}
				return 0, fmt.Errorf("released the pre-drain hook of Machine %s", m.Name)
			case int64(len(machines)) > upgraded:
				return 0, fmt.Errorf("%d of %d control-plane Machines upgraded and healthy", upgraded, len(machines))
			}
			return upgraded, nil
		}, e2eConfig.GetIntervals("k8s-upgrade-and-conformance", "wait-machine-upgrade")...).Should(Equal(want))
	}
}

// workloadStable: every Node Ready and exactly one Ready kube-proxy Pod per Node.
func workloadStable(workload client.Client) error {
	nodes := &corev1.NodeList{}
	if err := workload.List(ctx, nodes); err != nil {
		return err
	}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				return fmt.Errorf("Node %s is not Ready: %s", n.Name, c.Message)
			}
		}
	}
	proxies := &corev1.PodList{}
	if err := workload.List(ctx, proxies, client.InNamespace(metav1.NamespaceSystem), client.MatchingLabels{"k8s-app": "kube-proxy"}); err != nil {
		return err
	}
	if len(proxies.Items) != len(nodes.Items) {
		return fmt.Errorf("%d kube-proxy Pods for %d Nodes", len(proxies.Items), len(nodes.Items))
	}
	for _, p := range proxies.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
				return fmt.Errorf("kube-proxy Pod %s is not Ready", p.Name)
			}
		}
	}
	return nil
}

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
			E2EConfig: adoptionConfig(), ClusterctlConfigPath: clusterctlConfigPath,
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

// IPv6: upstream's three [IPv6] quick-starts, on a dual-stack kind cluster and network
// (hack/upstream-e2e.sh turns on hack/kind.sh's KIND_IPV6 for these labels). The dual-stack ones
// run, once the machines are up, upstream's kubetest dual-stack conformance subset with upstream's
// config file (test/e2e/data/kubetest/dualstack.yaml of the test module, whose folder
// hack/upstream-e2e.sh passes as CAPD_E2E_KUBETEST_CONFIG; kubetestDualStack, dualstack_test.go).

var _ = Describe("When following the Cluster API quick-start with IPv6", Label("quick-start-ipv6"), func() {
	e2e.QuickStartSpec(ctx, func() e2e.QuickStartSpecInput {
		return e2e.QuickStartSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor: ptr.To("ipv6"),
		}
	})
})

var _ = Describe("When following the Cluster API quick-start with dualstack and ipv4 primary", Label("quick-start-dualstack-ipv4-primary"), func() {
	e2e.QuickStartSpec(ctx, func() e2e.QuickStartSpecInput {
		return e2e.QuickStartSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                  ptr.To("topology-dualstack-ipv4-primary"),
			PostMachinesProvisioned: kubetestDualStack,
		}
	})
})

var _ = Describe("When following the Cluster API quick-start with dualstack and ipv6 primary", Label("quick-start-dualstack-ipv6-primary"), func() {
	e2e.QuickStartSpec(ctx, func() e2e.QuickStartSpecInput {
		return e2e.QuickStartSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                  ptr.To("topology-dualstack-ipv6-primary"),
			PostMachinesProvisioned: kubetestDualStack,
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
			PostMachinesProvisioned:   resourceVersionsStable("quick-start"),
		}
	})
})

// KCP infrastructure adoption: a ClusterClass cluster whose control plane's infrastructure
// machines are replaced by ones of another template and adopted, with the runtime extension
// serving the ClusterClass's patches, as upstream passes it.
var _ = Describe("When testing KCP infra adoption", Label("kcp-infra-adoption"), func() {
	e2e.KCPInfraAdoptionSpec(ctx, func() e2e.KCPInfraAdoptionSpecInput {
		return e2e.KCPInfraAdoptionSpecInput{
			E2EConfig: adoptionConfig(), ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                    ptr.To("upgrades-runtimesdk"),
			ExtensionServiceNamespace: "test-extension-system",
			ExtensionServiceName:      "test-extension-webhook-service",
		}
	})
})

// ClusterClass changes on upstream's in-memory flavor: the ClusterClass's templates are changed
// (the control plane's and the MachineDeployment's bootstrap and infrastructure templates, the
// last through the in-memory VM's startupDuration), and the cluster must roll out to them; the
// patches come from the test runtime extension. The modified fields are upstream's.
var _ = Describe("When testing ClusterClass changes", Label("clusterclass-changes"), func() {
	e2e.ClusterClassChangesSpec(ctx, func() e2e.ClusterClassChangesSpecInput {
		return e2e.ClusterClassChangesSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                    "in-memory-topology",
			ExtensionServiceNamespace: "test-extension-system",
			ExtensionServiceName:      "test-extension-webhook-service",
			ModifyControlPlaneFields: map[string]interface{}{
				"spec.kubeadmConfigSpec.verbosity": int64(4),
			},
			ModifyMachineDeploymentBootstrapConfigTemplateFields: map[string]interface{}{
				"spec.template.spec.verbosity": int64(4),
			},
			ModifyMachineDeploymentInfrastructureMachineTemplateFields: map[string]interface{}{
				"spec.template.spec.backend.inMemory.vm.provisioning.startupDuration": "15s",
			},
		}
	})
})

var _ = Describe("When testing ClusterClass rollouts", Label("clusterclass-rollout"), func() {
	e2e.ClusterClassRolloutSpec(ctx, func() e2e.ClusterClassRolloutSpecInput {
		return e2e.ClusterClassRolloutSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                    "in-memory-topology",
			ExtensionServiceNamespace: "test-extension-system",
			ExtensionServiceName:      "test-extension-webhook-service",
			// The spec compares each object's metadata with its template's; what the in-memory
			// backend and the test extension add on their own is not part of that comparison.
			FilterMetadataBeforeValidation: func(object client.Object) clusterv1.ObjectMeta {
				labels, annotations := object.GetLabels(), object.GetAnnotations()
				for _, a := range []string{
					"inmemorycluster.infrastructure.cluster.x-k8s.io/listener",
					"machine.inmemory.infrastructure.cluster.x-k8s.io/bootstrapped",
					"top-level-annotation-1",
				} {
					delete(annotations, a)
				}
				delete(labels, "top-level-label-1")
				return clusterv1.ObjectMeta{Labels: labels, Annotations: annotations}
			},
		}
	})
})

// Upstream's scale spec with its own (small) defaults: 10 clusters of 1 control plane and one
// MachineDeployment of 3, 5 at a time, beside 4 more ClusterClasses, upgraded from
// KUBERNETES_VERSION_UPGRADE_FROM. The bench (xtask bench) takes the in-memory backend further.
var _ = Describe("When testing the machinery for scale testing using in-memory backend", Label("scale"), func() {
	e2e.ScaleSpec(ctx, func() e2e.ScaleSpecInput {
		return e2e.ScaleSpecInput{
			E2EConfig: inMemoryUpgradeConfig(), ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                            ptr.To("in-memory-scale"),
			DumpResources:                     true,
			ClusterCount:                      ptr.To[int64](10),
			Concurrency:                       ptr.To[int64](5),
			ControlPlaneMachineCount:          ptr.To[int64](1),
			MachineDeploymentCount:            ptr.To[int64](1),
			WorkerPerMachineDeploymentCount:   ptr.To[int64](3),
			AdditionalClusterClassCount:       ptr.To[int64](4),
			ClusterClassName:                  "in-memory",
			DeployClusterInSeparateNamespaces: ptr.To(false),
			UseCrossNamespaceClusterClass:     ptr.To(false),
			ExtensionServiceNamespace:         "test-extension-system",
			ExtensionServiceName:              "test-extension-webhook-service",
		}
	})
})

// inMemoryUpgradeConfig is the suite's config with an upgrade target that the test extension's
// upgrade plan can end on. Its GenerateUpgradePlan answer is built from upstream's table of kind
// node images, which knows v1.35.0 but not config.yaml's v1.35.4 (a version forced by the node
// images this host can build): the plan would end on v1.35.0 and CAPI refuses it. In-memory
// machines need no node image, so they upgrade to the table's version of that minor instead.
// An environment value still wins, as for every variable of the framework.
func inMemoryUpgradeConfig() *clusterctl.E2EConfig {
	cfg := e2eConfig.DeepCopy()
	cfg.Variables["KUBERNETES_VERSION_UPGRADE_TO"] = "v1.35.0"
	return cfg
}

var _ = Describe("When in-place updating a workload cluster using ClusterClass", Label("in-place-update"), func() {
	e2e.ClusterInPlaceUpdateSpec(ctx, func() e2e.ClusterInPlaceUpdateSpecInput {
		return e2e.ClusterInPlaceUpdateSpecInput{
			E2EConfig: e2eConfig, ClusterctlConfigPath: clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
			Flavor:                    ptr.To("in-memory-topology"),
			ExtensionServiceNamespace: "test-extension-system",
			ExtensionServiceName:      "test-extension-webhook-service",
			// As upstream: KCP rolls out by scale-in (no surge), and the MachineDeployment may take
			// one Machine down at a time, so a change can be applied in place without new Machines.
			ClusterctlVariables: map[string]string{
				"KUBEADM_CONTROL_PLANE_MAX_SURGE": "0",
				"MD_MAX_SURGE":                    "1",
				"MD_MAX_UNAVAILABLE":              "1",
			},
		}
	})
})

// Upstream's two upgrades with RuntimeSDK on its in-memory flavor: every lifecycle hook of the
// test extension blocks until the spec lets it go (BeforeClusterCreate, BeforeClusterUpgrade,
// Before/AfterControlPlaneUpgrade, Before/AfterWorkersUpgrade, AfterClusterUpgrade,
// BeforeClusterDelete), a MachineSet scaled mid-upgrade must be held by the kubeadm version-skew
// preflight check, kube-proxy's image must follow the control plane in the workload cluster
// (KCP patches the fake's DaemonSet), and both Nodes must end Ready at the new version. Then
// nothing may keep changing (upstream's PostUpgrade). The second runs with its ClusterClass in
// another namespace. The upgrade target is one the extension's upgrade plan knows
// (inMemoryUpgradeConfig).
var _ = Describe("When upgrading a workload cluster using ClusterClass with RuntimeSDK", Label("cluster-upgrade-runtimesdk"), func() {
	e2e.ClusterUpgradeWithRuntimeSDKSpec(ctx, func() e2e.ClusterUpgradeWithRuntimeSDKSpecInput {
		return runtimeSDKUpgradeInput("", false)
	})
})

var _ = Describe("When upgrading a workload cluster using ClusterClass in a different NS with RuntimeSDK", Label("cluster-upgrade-runtimesdk-cross-ns"), func() {
	e2e.ClusterUpgradeWithRuntimeSDKSpec(ctx, func() e2e.ClusterUpgradeWithRuntimeSDKSpecInput {
		return runtimeSDKUpgradeInput("k8s-upgrade-with-runtimesdk-cross-ns", true)
	})
})

// runtimeSDKUpgradeInput is upstream's input for the two in-memory RuntimeSDK upgrades; an empty
// extensionConfigName keeps the spec's default.
func runtimeSDKUpgradeInput(extensionConfigName string, classInSeparateNamespace bool) e2e.ClusterUpgradeWithRuntimeSDKSpecInput {
	return e2e.ClusterUpgradeWithRuntimeSDKSpecInput{
		E2EConfig: inMemoryUpgradeConfig(), ClusterctlConfigPath: clusterctlConfigPath,
		BootstrapClusterProxy: bootstrapClusterProxy, ArtifactFolder: artifactFolder, SkipCleanup: skipCleanup,
		PostUpgrade:                           resourceVersionsStable("k8s-upgrade-with-runtimesdk"),
		Flavor:                                ptr.To("in-memory-topology"),
		DeployClusterClassInSeparateNamespace: classInSeparateNamespace,
		ExtensionServiceNamespace:             "test-extension-system",
		ExtensionServiceName:                  "test-extension-webhook-service",
		ExtensionConfigName:                   extensionConfigName,
	}
}

// adoptionConfig is the suite's config with the workload clusters at KUBERNETES_VERSION_ADOPTION
// (config.yaml says why). An environment value of KUBERNETES_VERSION still wins, as for every
// variable of the framework.
func adoptionConfig() *clusterctl.E2EConfig {
	cfg := e2eConfig.DeepCopy()
	cfg.Variables["KUBERNETES_VERSION"] = e2eConfig.MustGetVariable("KUBERNETES_VERSION_ADOPTION")
	return cfg
}

// resourceVersionsStable is upstream's check that nothing keeps changing once a spec's cluster
// has settled: the resourceVersions of the cluster's objects stop moving, within the intervals
// the config gives `spec`.
func resourceVersionsStable(spec string) func(framework.ClusterProxy, string, string) {
	return func(proxy framework.ClusterProxy, namespace, clusterName string) {
		By("Checking that resourceVersions are stable")
		framework.ValidateResourceVersionStable(ctx, framework.ValidateResourceVersionStableInput{
			ClusterProxy:             proxy,
			Namespace:                namespace,
			OwnerGraphFilterFunction: clusterctlcluster.FilterClusterObjectsWithNameFilter(clusterName),
			WaitToBecomeStable:       e2eConfig.GetIntervals(spec, "wait-resource-versions-become-stable"),
			WaitToRemainStable:       e2eConfig.GetIntervals(spec, "wait-resource-versions-remain-stable"),
		})
	}
}
