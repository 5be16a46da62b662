//go:build e2e

package upstreame2e

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/kubetest"
)

// kubetestDualStack is upstream's check of its dual-stack quick-starts: the workload cluster passes
// the conformance suite's [Feature:IPv6DualStack] tests (kubetest.Run in a conformance container).
func kubetestDualStack(proxy framework.ClusterProxy, namespace, clusterName string) {
	dir := os.Getenv("CAPD_E2E_KUBETEST_CONFIG")
	Expect(dir).ToNot(BeEmpty(), "CAPD_E2E_KUBETEST_CONFIG names upstream's test/e2e/data/kubetest")
	By("Running kubetest dualstack tests")
	Expect(kubetest.Run(ctx, kubetest.RunInput{
		ClusterProxy:       proxy.GetWorkloadCluster(ctx, namespace, clusterName),
		ArtifactsDirectory: artifactFolder,
		ConfigFilePath:     filepath.Join(dir, "dualstack.yaml"),
		ClusterName:        clusterName,
	})).To(Succeed())
}
