//go:build e2e

// Package upstreame2e runs upstream Cluster API's own e2e specs (the exported spec functions of
// sigs.k8s.io/cluster-api/test/e2e) against capd-rs. This file is the suite: it loads config.yaml,
// lays out a clusterctl repository with the framework's helper, and runs clusterctl init through the
// framework. The specs are in specs_test.go.
//
// The management cluster is one of two (hack/upstream-e2e.sh E2E_KIND):
//   - by default an existing kind cluster (-e2e.kubeconfig) that hack/upstream-e2e.sh creates
//     (hack/kind.sh) and loads the provider images into (hack/kind-providers.sh load). Then nothing
//     here talks to the Docker Engine, and the ClusterProxy has no log collector (the framework
//     skips machine logs and keeps the resource dumps);
//   - with -e2e.create-bootstrap-cluster, the kind cluster upstream's own suite makes through the
//     framework's bootstrap package, with the framework's Docker log collector (bootstrap_test.go).
package upstreame2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/cluster-api/test/e2e"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/bootstrap"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
	"sigs.k8s.io/cluster-api/test/framework/ginkgoextensions"
	infrav1 "sigs.k8s.io/cluster-api/test/infrastructure/docker/api/v1beta2"
)

var (
	configPath     string
	kubeconfigPath string
	artifactFolder string
	skipCleanup    bool
	createCluster  bool

	ctx                   = ctrl.SetupSignalHandler()
	watchesCtx, cancelAll = context.WithCancel(ctx)

	e2eConfig             *clusterctl.E2EConfig
	clusterctlConfigPath  string
	bootstrapClusterProxy framework.ClusterProxy
	// The kind cluster the framework made (-e2e.create-bootstrap-cluster; the first process only).
	bootstrapClusterProvider bootstrap.ClusterProvider
)

func init() {
	flag.StringVar(&configPath, "e2e.config", "", "the e2e config (hack/upstream-e2e/config.yaml); ${CAPD_E2E_*} in it are expanded from the environment")
	flag.StringVar(&kubeconfigPath, "e2e.kubeconfig", "", "kubeconfig of the existing management cluster (hack/kind.sh)")
	flag.StringVar(&artifactFolder, "e2e.artifacts-folder", "", "where the logs, dumps and the clusterctl repository go")
	flag.BoolVar(&skipCleanup, "e2e.skip-resource-cleanup", false, "keep the workload clusters and namespaces, and a kind cluster the framework made (debugging)")
	flag.BoolVar(&createCluster, "e2e.create-bootstrap-cluster", false,
		"instead of -e2e.kubeconfig's cluster, create the kind management cluster through the framework as upstream's suite does, "+
			"with the config's images loaded and the framework's Docker log collector; deleted at the end unless -e2e.skip-resource-cleanup")
}

func TestE2E(t *testing.T) {
	g := NewWithT(t)
	ctrl.SetLogger(klog.Background())
	g.Expect(artifactFolder).ToNot(BeEmpty(), "-e2e.artifacts-folder is required")
	g.Expect(os.MkdirAll(artifactFolder, 0o755)).To(Succeed())
	RegisterFailHandler(Fail)
	w, err := ginkgoextensions.EnableFileLogging(filepath.Join(artifactFolder, "ginkgo-log.txt"))
	g.Expect(err).ToNot(HaveOccurred())
	defer w.Close()
	RunSpecs(t, "capd-rs-upstream-e2e")
}

// The management cluster is prepared once, by the first Ginkgo process (the repository and
// clusterctl init); with `ginkgo --procs N` (hack/upstream-e2e.sh E2E_PROCS) every process then
// loads the same config and repository and runs its share of the specs against it.
var _ = SynchronizedBeforeSuite(func() []byte {
	if !createCluster {
		Expect(kubeconfigPath).To(BeAnExistingFile(), "-e2e.kubeconfig must name the management cluster's kubeconfig")
	}

	By("Loading the e2e config " + configPath)
	expanded := expandConfig(configPath)
	config := clusterctl.LoadE2EConfig(ctx, clusterctl.LoadE2EConfigInput{ConfigPath: expanded})
	Expect(config).ToNot(BeNil())

	if createCluster {
		By("Creating the kind management cluster " + config.ManagementClusterName + " through the framework")
		bootstrapClusterProvider = createBootstrapCluster(config)
		kubeconfigPath = bootstrapClusterProvider.GetKubeconfigPath()
	}

	By("Creating the clusterctl local repository with the framework")
	repo := filepath.Join(artifactFolder, "repository")
	repoInput := clusterctl.CreateRepositoryInput{E2EConfig: config, RepositoryFolder: repo}
	// As upstream's suite does: the CNI manifest named by the CNI variable goes into the flavors'
	// ClusterResourceSet ConfigMap, in place of ${CNI_RESOURCES}.
	cni := config.MustGetVariable(e2e.CNIPath)
	Expect(cni).To(BeAnExistingFile(), "the CNI variable names the CNI manifest")
	repoInput.RegisterClusterResourceSetConfigMapTransformation(cni, e2e.CNIResources)
	clusterctlConfig := clusterctl.CreateRepository(ctx, repoInput)
	addCertManager(clusterctlConfig)

	By("Running clusterctl init through the framework on the management cluster of " + kubeconfigPath)
	proxy := framework.NewClusterProxy("bootstrap", kubeconfigPath, initScheme(), proxyOptions()...)
	Expect(proxy).ToNot(BeNil())
	clusterctl.InitManagementClusterAndWatchControllerLogs(watchesCtx, clusterctl.InitManagementClusterAndWatchControllerLogsInput{
		ClusterProxy:            proxy,
		ClusterctlConfigPath:    clusterctlConfig,
		InfrastructureProviders: config.InfrastructureProviders(),
		// Upstream's test runtime extension (config.yaml's test-extension), as upstream's suite
		// installs it; the specs that use it create their own ExtensionConfig.
		RuntimeExtensionProviders: config.RuntimeExtensionProviders(),
		LogFolder:                 filepath.Join(artifactFolder, "clusters", proxy.GetName()),
		DisableMetricsCollection:  true,
	}, config.GetIntervals(proxy.GetName(), "wait-controllers")...)
	// The management cluster's kubeconfig goes along: with -e2e.create-bootstrap-cluster only the
	// first process knows where the framework wrote it.
	return []byte(expanded + "\n" + clusterctlConfig + "\n" + kubeconfigPath)
}, func(shared []byte) {
	paths := strings.SplitN(string(shared), "\n", 3)
	Expect(paths).To(HaveLen(3), "the first process passes the config, the clusterctl config and the kubeconfig")
	e2eConfig = clusterctl.LoadE2EConfig(ctx, clusterctl.LoadE2EConfigInput{ConfigPath: paths[0]})
	Expect(e2eConfig).ToNot(BeNil())
	clusterctlConfigPath = paths[1]
	kubeconfigPath = paths[2]
	bootstrapClusterProxy = framework.NewClusterProxy("bootstrap", kubeconfigPath, initScheme(), proxyOptions()...)
	Expect(bootstrapClusterProxy).ToNot(BeNil())
})

var _ = SynchronizedAfterSuite(func() {
	// Every process's proxy but the first's, which the last step still uses.
	if bootstrapClusterProxy != nil && GinkgoParallelProcess() != 1 {
		bootstrapClusterProxy.Dispose(ctx)
	}
}, func() {
	// On the first process, once every process is done. The providers' log streams are its own.
	if bootstrapClusterProvider != nil && bootstrapClusterProxy != nil {
		By("Collecting the management cluster's node logs")
		collectBootstrapNodeLogs(bootstrapClusterProxy)
	}
	cancelAll()
	if bootstrapClusterProxy != nil {
		bootstrapClusterProxy.Dispose(ctx)
	}
	// A kind cluster made by hack/kind.sh is hack/upstream-e2e.sh's to delete; the framework's is
	// deleted here, as upstream's suite does, unless the run keeps its resources.
	if bootstrapClusterProvider != nil {
		if skipCleanup {
			fmt.Fprintf(GinkgoWriter, "keeping the kind management cluster (-e2e.skip-resource-cleanup); kubeconfig %s\n", kubeconfigPath)
		} else {
			By("Deleting the kind management cluster the framework made")
			bootstrapClusterProvider.Dispose(ctx)
		}
	}
})

// proxyOptions: the framework's Docker log collector on the management cluster of
// -e2e.create-bootstrap-cluster, so that the specs' dumps include each Machine's node logs (the
// collector execs into the Machine's container, named as capd-rs names it). The default path has
// none, as before.
func proxyOptions() []framework.Option {
	if !createCluster {
		return nil
	}
	return []framework.Option{framework.WithMachineLogCollector(framework.DockerLogCollector{})}
}

func initScheme() *runtime.Scheme {
	sc := runtime.NewScheme()
	framework.TryAddDefaultSchemes(sc)
	Expect(infrav1.AddToScheme(sc)).To(Succeed())
	return sc
}

// expandConfig writes a copy of the config with ${CAPD_E2E_*} replaced by the environment's
// values (paths of the repository hack/kind-providers.sh renders, our version) into the artifacts
// folder, and returns its path (the config names no relative paths).
func expandConfig(path string) string {
	data, err := os.ReadFile(path) //nolint:gosec // the suite's own config
	Expect(err).ToNot(HaveOccurred())
	var missing []string
	out := regexp.MustCompile(`\$\{(CAPD_E2E_[A-Z0-9_]+)\}`).ReplaceAllStringFunc(string(data), func(m string) string {
		name := m[2 : len(m)-1]
		v, ok := os.LookupEnv(name)
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	Expect(missing).To(BeEmpty(), "environment variables the config uses")
	expanded := filepath.Join(artifactFolder, "e2e-config.yaml")
	Expect(os.WriteFile(expanded, []byte(out), 0o600)).To(Succeed())
	return expanded
}

// addCertManager points clusterctl at the locally built cert-manager (its manifest is laid out by
// hack/kind-providers.sh repo): the framework's clusterctl config has only providers and variables,
// and clusterctl's default cert-manager comes from GitHub, which is not reachable here.
func addCertManager(clusterctlConfig string) {
	url, version := os.Getenv("CAPD_E2E_CERT_MANAGER_URL"), os.Getenv("CAPD_E2E_CERT_MANAGER_VERSION")
	if url == "" {
		return
	}
	f, err := os.OpenFile(clusterctlConfig, os.O_APPEND|os.O_WRONLY, 0)
	Expect(err).ToNot(HaveOccurred())
	defer f.Close()
	_, err = fmt.Fprintf(f, "cert-manager:\n  url: %q\n  version: %q\n", url, version)
	Expect(err).ToNot(HaveOccurred())
}
