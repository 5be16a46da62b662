//go:build e2e

package upstreame2e

// The management cluster made by upstream's framework, as upstream's own suite makes it for its CI
// (hack/upstream-e2e.sh E2E_KIND=framework passes -e2e.create-bootstrap-cluster): a kind cluster
// from the framework's bootstrap package with the e2e config's images loaded from the local Docker
// Engine, and the framework's Docker log collector on the management cluster's proxy, so that every
// Machine's node logs (journal, kubelet, containerd, pod logs) land in the artifacts. Everything the
// framework does is called through its exported functions, with upstream's inputs; what this
// offline, cgroup v1 host needs on top is here, each with its reason:
//   - requireLocalImages: both the kind library (node image) and the framework's image loader pull
//     what the local engine lacks, and nothing may be pulled here;
//   - familiarName: the loader would not find capd-rs' image under its docker.io/ name;
//   - allowKubeletOnCgroupV1: kubelet 1.35 refuses a cgroup v1 host unless told otherwise, the
//     framework's kind config takes no kubeadm patch to tell it, and a hierarchy the node's
//     systemd may mount late lacks the kubelet's cgroups.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/test/e2e"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/bootstrap"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
	"sigs.k8s.io/cluster-api/test/infrastructure/container"
	kindmapping "sigs.k8s.io/cluster-api/test/infrastructure/kind"
)

// createBootstrapCluster creates the kind management cluster named by the config's
// managementClusterName with the inputs upstream's suite gives the framework (the management
// Kubernetes version, the Docker socket mounted for a docker infrastructure provider, the config's
// images, its IP family, kind's logs under artifacts/kind on failure). The kind network is the one
// KIND_EXPERIMENTAL_DOCKER_NETWORK names, which the kind library reads from the environment
// (hack/upstream-e2e.sh creates it, as hack/kind.sh does). The returned provider's Dispose deletes
// the cluster.
func createBootstrapCluster(config *clusterctl.E2EConfig) bootstrap.ClusterProvider {
	docker, err := container.NewDockerClient()
	Expect(err).ToNot(HaveOccurred(), "the framework's Docker client")
	version := config.MustGetVariable(e2e.KubernetesVersionManagement)
	v, err := semver.ParseTolerant(version)
	Expect(err).ToNot(HaveOccurred(), "%s=%q", e2e.KubernetesVersionManagement, version)
	// The node image the framework will ask kind for: its own mapping of the version (for v1.35.4,
	// a tag without digest, kindest/node:v1.35.4, which hack/node-image.sh builds).
	nodeImage := kindmapping.GetMapping(v, "").Image
	// The config's images under the names the engine lists them by (familiarName says why).
	load := make([]clusterctl.ContainerImage, len(config.Images))
	images := []string{nodeImage}
	for i, image := range config.Images {
		load[i] = image
		load[i].Name = familiarName(image.Name)
		images = append(images, load[i].Name)
	}
	requireLocalImages(docker, images)

	node := config.ManagementClusterName + "-control-plane" // kind's name for a one-node cluster's node
	stop := allowKubeletOnCgroupV1(docker, node)
	defer stop()
	t0 := time.Now()
	provider := bootstrap.CreateKindBootstrapClusterAndLoadImages(ctx, bootstrap.CreateKindBootstrapClusterAndLoadImagesInput{
		Name:               config.ManagementClusterName,
		KubernetesVersion:  version,
		RequiresDockerSock: config.HasDockerProvider(),
		Images:             load,
		IPFamily:           config.MustGetVariable(e2e.IPFamily),
		LogFolder:          filepath.Join(artifactFolder, "kind"),
	})
	Expect(provider).ToNot(BeNil(), "the framework's kind cluster")
	fmt.Fprintf(GinkgoWriter, "kind cluster %s (node image %s) created and %d images loaded by the framework in %s; kubeconfig %s\n",
		config.ManagementClusterName, nodeImage, len(config.Images), time.Since(t0).Round(time.Second), provider.GetKubeconfigPath())
	return provider
}

// familiarName is an image name as the engine's `reference` filter matches it: without the
// docker.io/ (and docker.io/library/) prefix, which the engine's image store leaves out. The
// framework's loader asks the engine whether an image is there with that filter, and pulls it when
// the answer is no; Docker 26.1 lists nothing for reference=docker.io/capd-rs/manager:e2e while
// capd-rs/manager:e2e is there, so config.yaml's docker.io/ name (the one our components use)
// would be pulled. The same image is saved either way, and the node's containerd stores it under
// its docker.io/ name, the one the kubelet looks for.
func familiarName(name string) string {
	for _, prefix := range []string{"docker.io/library/", "docker.io/"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			return rest
		}
	}
	return name
}

// requireLocalImages fails, naming them, when images are missing from the local engine, before
// the framework or kind would try to pull them from a registry (this host is offline, and a pull
// would be traffic to the outside). Checked with the framework's own lookup, the one its image
// loader uses to decide whether to pull.
func requireLocalImages(docker container.Runtime, images []string) {
	var missing []string
	for _, image := range images {
		ok, err := docker.ImageExistsLocally(ctx, image)
		Expect(err).ToNot(HaveOccurred(), "looking up %s on the local engine", image)
		if !ok {
			missing = append(missing, image)
		}
	}
	Expect(missing).To(BeEmpty(), "images the framework would pull (build them: hack/node-image.sh, hack/kind-providers.sh build)")
}

// allowKubeletOnCgroupV1 lets the kind node's kubelet run on a cgroup v1 host. Two things, done
// through the framework's Docker client by an exec into the node, polled until the node container
// accepts one; systemd restarts a failed kubelet every second and kubeadm init waits 4 minutes for
// it, so it is enough that they land within seconds. Nothing to do on a cgroup v2 host (there an
// exec before systemd is up would even disturb the node's cgroups, which kind waits to avoid).
//   - Kubelet 1.35 refuses cgroup v1 unless failCgroupV1 is false. hack/kind.sh says so in a
//     kubeadm config patch, but the framework builds its kind config itself, with no option for
//     one. Our node image's kubelet unit (hack/node-image/10-kubeadm.conf) reads KUBELET_EXTRA_ARGS
//     from /etc/default/kubelet at every start: the flag goes there.
//   - The kubelet (cgroupRoot /kubelet, systemd driver) refuses to start unless kubelet.slice
//     exists in every hierarchy it checks, hugetlb among them when mounted. The image's entrypoint
//     creates it in the hierarchies Docker mounted, before systemd starts. This host mounts no
//     hugetlb hierarchy, and a node's systemd, in its own cgroup namespace, cannot create one; but
//     while some container of the host's cgroup namespace (Podman's, on this cgroup v1 host) has
//     mounted it, the node's systemd mounts that shared hierarchy too, without kubelet.slice, and
//     the kubelet never starts (seen 2026-11-27 on the second of two framework-made nodes, and
//     reproduced with a container mounting hugetlb beside a bare node; hack/kind.sh's nodes are
//     exposed the same way). Once systemd is up, the script gives every mounted hierarchy that
//     lacks them the entrypoint's two cgroups.
//
// The returned function stops the polling and waits for it.
func allowKubeletOnCgroupV1(docker container.Runtime, node string) (stop func()) {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return func() {}
	}
	// systemd does not expand variables in an EnvironmentFile: a KUBELET_EXTRA_ARGS line already
	// there (our image ships none) gets the flag inside it, otherwise the line is added. Then, once
	// systemd answers (its cgroup mounts are done by then; 60 s at most), the missing cgroups: a
	// non-zero exit makes the poll run the whole script again.
	const script = `f=/etc/default/kubelet
if ! grep -qs -- --fail-cgroupv1 "$f"; then
  if grep -qs '^KUBELET_EXTRA_ARGS=' "$f"; then
    sed -i 's/^KUBELET_EXTRA_ARGS="\{0,1\}/&--fail-cgroupv1=false /' "$f"
  else
    echo 'KUBELET_EXTRA_ARGS=--fail-cgroupv1=false' >> "$f"
  fi
fi
i=0
until state=$(systemctl is-system-running 2>/dev/null); [ -n "$state" ] && [ "$state" != offline ]; do
  i=$((i+1)); [ $i -lt 300 ] || exit 1; sleep 0.2
done
added=
for d in $(awk '$3 == "cgroup" {print $2}' /proc/mounts); do
  case $d in /sys/fs/cgroup/*/*) continue ;; esac # the entrypoint's own bind mounts
  for sub in kubelet kubelet.slice; do
    [ -d "$d/$sub" ] && continue
    mkdir "$d/$sub" || exit 1
    added="$added $d/$sub"
  done
done
echo "cgroups added:${added:- none}"`
	pollCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		t0 := time.Now()
		for {
			// Both buffers: with one, the client copies Docker's multiplexed stream as it is.
			var out, errOut bytes.Buffer
			err := docker.ExecContainer(pollCtx, node, &container.ExecContainerInput{OutputBuffer: &out, ErrorBuffer: &errOut}, "sh", "-c", script)
			if err == nil {
				fmt.Fprintf(GinkgoWriter, "kind node %s: kubelet told to run on cgroup v1 (/etc/default/kubelet), %s; %s after the cluster's creation began\n",
					node, strings.TrimSpace(out.String()), time.Since(t0).Round(time.Second))
				return
			}
			select {
			case <-pollCtx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// collectBootstrapNodeLogs writes the management cluster's node logs with the same log collector
// (artifacts/clusters/bootstrap/machines/<node>/), as upstream's suite does before deleting its
// kind cluster: a kind node is a container named as the node, which the collector finds when
// handed a Machine of that name in a Cluster of that name. Best effort, as all log collection.
func collectBootstrapNodeLogs(proxy framework.ClusterProxy) {
	collector := proxy.GetLogCollector()
	if collector == nil {
		return
	}
	nodes, err := proxy.GetClientSet().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(GinkgoWriter, "listing the management cluster's nodes: %v\n", err)
		return
	}
	for _, n := range nodes.Items {
		machine := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name},
			Spec:       clusterv1.MachineSpec{ClusterName: n.Name},
		}
		out := filepath.Join(artifactFolder, "clusters", proxy.GetName(), "machines", n.Name)
		if err := collector.CollectMachineLog(ctx, proxy.GetClient(), machine, out); err != nil {
			fmt.Fprintf(GinkgoWriter, "collecting the logs of node %s: %v\n", n.Name, err)
		}
	}
}
