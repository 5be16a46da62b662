// Command protobuf-fixtures writes the protobuf request bodies that the in-memory API server's
// decoder (src/inmemory/protobuf.rs) is tested against.
//
// Each body is captured from client-go itself: a typed clientset configured for protobuf, as
// controller-runtime configures its clients for built-in kinds, sends one request per fixture to
// a local capture server, which stores the body verbatim. So the fixtures hold exactly what CAPI,
// KCP and CABPK put on the wire (magic prefix, envelope, field numbers, the zero values that Go
// always writes), not what we think they put there. The capture server answers every request
// with the JSON document "{}", which client-go decodes by the response's Content-Type: the run
// failing would mean a JSON answer to a protobuf request is refused.
//
// Run from this folder:
//
//	GOFLAGS=-mod=mod go run . ../../src/inmemory/testdata/protobuf
//
// The values are fixed (no clock, no random), so a rerun writes the same bytes.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// captured is one request the capture server saw.
type captured struct {
	method, path, contentType string
	body                      []byte
}

type recorder struct {
	mu   sync.Mutex
	last *captured
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.last = &captured{req.Method, req.URL.Path, req.Header.Get("Content-Type"), body}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("{}"))
}

func (r *recorder) take() *captured {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.last
	r.last = nil
	return c
}

func ptr[T any](v T) *T { return &v }

// The instant every timestamp of the fixtures is set to: 2026-01-02T03:04:05Z.
var stamp = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func configMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:              "kubeadm-config",
			Namespace:         "kube-system",
			UID:               "0a1b2c3d-0000-4000-8000-000000000001",
			ResourceVersion:   "42",
			Generation:        3,
			CreationTimestamp: stamp,
			Labels:            map[string]string{"app.kubernetes.io/managed-by": "kubeadm", "empty": ""},
			Annotations:       map[string]string{"note": "written by KCP"},
			Finalizers:        []string{"example.com/keep"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         "v1",
				Kind:               "Namespace",
				Name:               "kube-system",
				UID:                "0a1b2c3d-0000-4000-8000-000000000002",
				Controller:         ptr(true),
				BlockOwnerDeletion: ptr(false),
			}},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager:    "kubeadm",
				Operation:  metav1.ManagedFieldsOperationUpdate,
				APIVersion: "v1",
				Time:       &stamp,
				FieldsType: "FieldsV1",
				FieldsV1:   &metav1.FieldsV1{Raw: []byte(`{"f:data":{".":{},"f:ClusterConfiguration":{}}}`)},
			}},
		},
		Data: map[string]string{
			"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.35.0\n",
			"empty":                "",
		},
		BinaryData: map[string][]byte{"blob": {0x00, 0x01, 0xfe, 0xff}},
		Immutable:  ptr(false),
	}
}

func secret() *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "bootstrap-token-abcdef",
			Namespace: "kube-system",
		},
		Type: corev1.SecretTypeBootstrapToken,
		Data: map[string][]byte{
			"token-id":                       []byte("abcdef"),
			"token-secret":                   []byte("0123456789abcdef"),
			"expiration":                     []byte("2026-01-02T03:19:05Z"),
			"usage-bootstrap-authentication": []byte("true"),
			"usage-bootstrap-signing":        []byte("true"),
			"auth-extra-groups":              []byte("system:bootstrappers:kubeadm:default-node-token"),
		},
		StringData: map[string]string{"description": "token for worker-1"},
		Immutable:  ptr(true),
	}
}

func clusterRoleBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:cluster-admins"},
		RoleRef: rbacv1.RoleRef{
			APIGroup: rbacv1.GroupName,
			Kind:     "ClusterRole",
			Name:     "cluster-admin",
		},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "kubeadm:cluster-admins"},
			{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: "kube-system"},
		},
	}
}

func node() *corev1.Node {
	config := &corev1.NodeConfigSource{ConfigMap: &corev1.ConfigMapNodeConfigSource{
		Namespace:        "kube-system",
		Name:             "kubelet-config",
		UID:              "0a1b2c3d-0000-4000-8000-000000000004",
		ResourceVersion:  "7",
		KubeletConfigKey: "kubelet",
	}}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:              "worker-1",
			UID:               "0a1b2c3d-0000-4000-8000-000000000003",
			ResourceVersion:   "17",
			CreationTimestamp: stamp,
			Labels:            map[string]string{"node-role.kubernetes.io/worker": ""},
			Annotations:       map[string]string{"cluster.x-k8s.io/machine": "worker-1"},
		},
		Spec: corev1.NodeSpec{
			PodCIDR:       "10.244.1.0/24",
			PodCIDRs:      []string{"10.244.1.0/24", "fd00:10:244:1::/64"},
			ProviderID:    "in-memory://worker-1",
			Unschedulable: true,
			Taints: []corev1.Taint{
				{Key: "node.cluster.x-k8s.io/uninitialized", Effect: corev1.TaintEffectNoSchedule},
				{Key: "node.kubernetes.io/unschedulable", Value: "yes", Effect: corev1.TaintEffectNoExecute, TimeAdded: &stamp},
			},
			ConfigSource:       config,
			DoNotUseExternalID: "legacy-id",
		},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("2"),
				corev1.ResourceMemory: resource.MustParse("8Gi"),
			},
			Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{
				Type:               corev1.NodeReady,
				Status:             corev1.ConditionTrue,
				LastHeartbeatTime:  stamp,
				LastTransitionTime: stamp,
				Reason:             "KubeletReady",
				Message:            "kubelet is posting ready status",
			}},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "10.0.0.5"},
				{Type: corev1.NodeHostName, Address: "worker-1"},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID:               "machine-id",
				SystemUUID:              "system-uuid",
				BootID:                  "boot-id",
				KernelVersion:           "6.8.0",
				OSImage:                 "Debian GNU/Linux 12",
				ContainerRuntimeVersion: "containerd://2.1.0",
				KubeletVersion:          "v1.35.0",
				KubeProxyVersion:        "v1.35.0",
				OperatingSystem:         "linux",
				Architecture:            "amd64",
				Swap:                    &corev1.NodeSwapStatus{Capacity: ptr(int64(1 << 30))},
			},
			Images: []corev1.ContainerImage{{
				Names:     []string{"registry.k8s.io/pause:3.10", "registry.k8s.io/pause@sha256:00"},
				SizeBytes: 320368,
			}},
			VolumesInUse:    []corev1.UniqueVolumeName{"kubernetes.io/csi/disk-1"},
			VolumesAttached: []corev1.AttachedVolume{{Name: "kubernetes.io/csi/disk-1", DevicePath: "/dev/sdb"}},
			Config: &corev1.NodeConfigStatus{
				Assigned:      config,
				Active:        config,
				LastKnownGood: config,
				Error:         "none",
			},
			RuntimeHandlers: []corev1.NodeRuntimeHandler{{
				Name: "runc",
				Features: &corev1.NodeRuntimeHandlerFeatures{
					RecursiveReadOnlyMounts: ptr(true),
					UserNamespaces:          ptr(false),
				},
			}},
			Features:         &corev1.NodeFeatures{SupplementalGroupsPolicy: ptr(true)},
			DeclaredFeatures: []string{"InPlacePodVerticalScaling"},
		},
	}
}

func serviceAccount() *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "not-decoded", Namespace: "default"}}
}

func run(out string) error {
	rec := &recorder{}
	server := httptest.NewServer(rec)
	defer server.Close()
	// What controller-runtime's apiutil.createRestConfig sets for a kind its protobuf scheme
	// recognises: ContentType protobuf; the clientset keeps its own negotiated serializer, the
	// same WithoutConversion codec factory controller-runtime builds.
	protobuf, err := kubernetes.NewForConfig(&rest.Config{
		Host:          server.URL,
		ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf},
	})
	if err != nil {
		return err
	}
	// The same requests from a JSON client: the body the server stores for the same object,
	// which the Rust tests compare the decoded protobuf with.
	json, err := kubernetes.NewForConfig(&rest.Config{
		Host:          server.URL,
		ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeJSON},
	})
	if err != nil {
		return err
	}
	ctx := context.Background()
	fixtures := []struct {
		name, method, path string
		send               func(client kubernetes.Interface) error
	}{
		{"configmap-update", http.MethodPut, "/api/v1/namespaces/kube-system/configmaps/kubeadm-config", func(client kubernetes.Interface) error {
			_, err := client.CoreV1().ConfigMaps("kube-system").Update(ctx, configMap(), metav1.UpdateOptions{})
			return err
		}},
		{"secret-create", http.MethodPost, "/api/v1/namespaces/kube-system/secrets", func(client kubernetes.Interface) error {
			_, err := client.CoreV1().Secrets("kube-system").Create(ctx, secret(), metav1.CreateOptions{})
			return err
		}},
		{"clusterrolebinding-create", http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", func(client kubernetes.Interface) error {
			_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, clusterRoleBinding(), metav1.CreateOptions{})
			return err
		}},
		{"node-update", http.MethodPut, "/api/v1/nodes/worker-1", func(client kubernetes.Interface) error {
			_, err := client.CoreV1().Nodes().Update(ctx, node(), metav1.UpdateOptions{})
			return err
		}},
		// A Node with nothing set: Go writes its struct-typed fields (status.daemonEndpoints,
		// status.nodeInfo, ...) anyway, in JSON and in protobuf alike.
		{"node-minimal", http.MethodPut, "/api/v1/nodes/worker-2", func(client kubernetes.Interface) error {
			_, err := client.CoreV1().Nodes().Update(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-2"}}, metav1.UpdateOptions{})
			return err
		}},
		{"delete-options", http.MethodDelete, "/api/v1/nodes/worker-1", func(client kubernetes.Interface) error {
			return client.CoreV1().Nodes().Delete(ctx, "worker-1", metav1.DeleteOptions{
				GracePeriodSeconds: ptr(int64(30)),
				Preconditions: &metav1.Preconditions{
					UID:             ptr(node().UID),
					ResourceVersion: ptr("17"),
				},
				PropagationPolicy: ptr(metav1.DeletePropagationForeground),
			})
		}},
		// controller-runtime's Delete without options still sends a DeleteOptions body.
		{"delete-empty", http.MethodDelete, "/api/v1/nodes/worker-1", func(client kubernetes.Interface) error {
			return client.CoreV1().Nodes().Delete(ctx, "worker-1", metav1.DeleteOptions{})
		}},
		{"delete-dryrun", http.MethodDelete, "/api/v1/nodes/worker-1", func(client kubernetes.Interface) error {
			return client.CoreV1().Nodes().Delete(ctx, "worker-1", metav1.DeleteOptions{
				DryRun: []string{metav1.DryRunAll},
			})
		}},
		// What CAPI's drain sends (core/reconcilers/machine/drain).
		{"eviction-create", http.MethodPost, "/api/v1/namespaces/default/pods/web-0/eviction", func(client kubernetes.Interface) error {
			return client.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{
				ObjectMeta:    metav1.ObjectMeta{Name: "web-0", Namespace: "default"},
				DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))},
			})
		}},
		// A kind the decoder does not know: the server answers 415.
		{"serviceaccount-create", http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", func(client kubernetes.Interface) error {
			_, err := client.CoreV1().ServiceAccounts("default").Create(ctx, serviceAccount(), metav1.CreateOptions{})
			return err
		}},
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, f := range fixtures {
		for _, enc := range []struct {
			client      kubernetes.Interface
			contentType string
			ext         string
		}{
			{protobuf, runtime.ContentTypeProtobuf, ".pb"},
			{json, runtime.ContentTypeJSON, ".json"},
		} {
			file := f.name + enc.ext
			if err := f.send(enc.client); err != nil {
				return fmt.Errorf("%s: client: %w", file, err)
			}
			c := rec.take()
			switch {
			case c == nil:
				return fmt.Errorf("%s: no request captured", file)
			case c.method != f.method || c.path != f.path:
				return fmt.Errorf("%s: captured %s %s, want %s %s", file, c.method, c.path, f.method, f.path)
			case c.contentType != enc.contentType:
				return fmt.Errorf("%s: Content-Type %q", file, c.contentType)
			}
			if err := os.WriteFile(filepath.Join(out, file), c.body, 0o644); err != nil {
				return err
			}
			fmt.Printf("%s: %s %s, %d bytes\n", file, c.method, c.path, len(c.body))
		}
	}
	return nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: protobuf-fixtures OUTPUT-DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
