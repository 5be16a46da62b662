//go:build e2e

package upstreame2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/kubetest"
	"sigs.k8s.io/cluster-api/test/infrastructure/container"
)

// kubetestDualStack is upstream's check of its dual-stack quick-starts: the workload cluster passes
// the conformance suite's [Feature:IPv6DualStack] tests (kubetest.Run in a conformance container).
// The conformance image must be in the local engine already: kubetest.Run would pull it from its
// registry, and no registry is ever called here, so without it the spec fails before any pull.
func kubetestDualStack(proxy framework.ClusterProxy, namespace, clusterName string) {
	dir := os.Getenv("CAPD_E2E_KUBETEST_CONFIG")
	Expect(dir).ToNot(BeEmpty(), "CAPD_E2E_KUBETEST_CONFIG names upstream's test/e2e/data/kubetest")
	version := e2eConfig.MustGetVariable("KUBERNETES_VERSION")
	image := "registry.k8s.io/conformance:" + strings.ReplaceAll(version, "+", "_")
	engine, err := container.NewDockerClient()
	Expect(err).ToNot(HaveOccurred())
	present, err := engine.ImageExistsLocally(ctx, image)
	Expect(err).ToNot(HaveOccurred())
	if !present {
		Fail(fmt.Sprintf("the cluster came up; upstream's kubetest needs %s, which is not in the local engine and is never pulled here (no registry)", image))
	}
	By("Running kubetest dualstack tests")
	Expect(kubetest.Run(ctx, kubetest.RunInput{
		ClusterProxy:       proxy.GetWorkloadCluster(ctx, namespace, clusterName),
		ArtifactsDirectory: artifactFolder,
		ConfigFilePath:     filepath.Join(dir, "dualstack.yaml"),
		ClusterName:        clusterName,
		ConformanceImage:   image,
	})).To(Succeed())
}
