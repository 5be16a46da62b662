// Command inmemory-interop drives capd-rs's in-memory fake API server with the clients KCP
// v1.14 uses: its port-forward dialer (WebSocket first, SPDY/3.1 on fallback), its etcd client
// (clientv3 over grpc-go, TLS with the etcd CA and no host name check) and its API server
// certificate-expiry probe. It is run by hand against a listener started by the ignored Rust
// test `inmemory::portforward::tests::serve_for_go` (see README.md), never by CI.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy"
)

func main() {
	dir := flag.String("dir", "/tmp/inmemory-interop", "folder the Rust harness wrote kubeconfig, etcd-ca.crt and etcd-ca.key to")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Println("FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("PASS")
}

func check(ok bool, format string, args ...any) error {
	if !ok {
		return fmt.Errorf(format, args...)
	}
	fmt.Printf("ok: "+format+"\n", args...)
	return nil
}

func run(dir string) error {
	ctx := context.Background()
	restConfig, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		return err
	}
	restConfig.Timeout = 30 * time.Second
	tlsConfig, err := etcdTLS(dir)
	if err != nil {
		return err
	}
	client := func(node string) (*etcd.Client, error) {
		return etcd.NewClient(ctx, etcd.ClientConfiguration{
			Endpoint:    "etcd-" + node,
			Proxy:       proxy.Proxy{Kind: "pods", Namespace: "kube-system", KubeConfig: restConfig, Port: 2379},
			TLSConfig:   tlsConfig,
			DialTimeout: 10 * time.Second,
			CallTimeout: 15 * time.Second,
		})
	}

	a, err := client("cp-a")
	if err != nil {
		return fmt.Errorf("etcd client for cp-a: %w", err)
	}
	members, err := a.Members(ctx)
	if err != nil {
		return err
	}
	ids := map[string]uint64{}
	for _, m := range members {
		ids[m.Name] = m.ID
	}
	if err := check(len(members) == 3, "MemberList through port-forward: %d members %v", len(members), ids); err != nil {
		return err
	}
	if err := check(a.LeaderID == ids["cp-a"], "Status: leader is cp-a (%d)", a.LeaderID); err != nil {
		return err
	}
	alarms, err := a.Alarms(ctx)
	if err != nil {
		return err
	}
	if err := check(len(alarms) == 0, "Alarm GET: no alarms"); err != nil {
		return err
	}
	if err := a.MoveLeader(ctx, ids["cp-b"]); err != nil {
		return err
	}
	_ = a.Close()
	c, err := client("cp-c")
	if err != nil {
		return err
	}
	if err := check(c.LeaderID == ids["cp-b"], "MoveLeader: cp-c now reports leader cp-b (%d)", c.LeaderID); err != nil {
		return err
	}
	if err := c.RemoveMember(ctx, ids["cp-a"]); err != nil {
		return err
	}
	members, err = c.Members(ctx)
	if err != nil {
		return err
	}
	_ = c.Close()
	if err := check(len(members) == 2, "MemberRemove: %d members left", len(members)); err != nil {
		return err
	}
	_, err = client("cp-a")
	if err := check(err != nil, "the removed member answers no more: %v", err); err != nil {
		return err
	}
	_, err = client("cp-z")
	if err := check(err != nil, "a pod that does not exist: %v", err); err != nil {
		return err
	}

	// KCP's API server certificate-expiry probe: port-forward to the kube-apiserver pod, TLS
	// handshake without verification, the NotAfter of the certificate with CN kube-apiserver.
	dialer, err := proxy.NewDialer(proxy.Proxy{Kind: "pods", Namespace: "kube-system", KubeConfig: restConfig, Port: 6443})
	if err != nil {
		return err
	}
	raw, err := dialer.DialContextWithAddr(ctx, "kube-apiserver-cp-a")
	if err != nil {
		return err
	}
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // as KCP's probe
	if err := conn.HandshakeContext(ctx); err != nil {
		return err
	}
	var notAfter time.Time
	for _, cert := range conn.ConnectionState().PeerCertificates {
		if cert.Subject.CommonName == "kube-apiserver" {
			notAfter = cert.NotAfter
		}
	}
	_ = conn.Close()
	return check(notAfter.After(time.Now().Add(300*24*time.Hour)), "API server certificate through port-forward: CN kube-apiserver, NotAfter %s", notAfter.Format(time.RFC3339))
}

// etcdTLS is the TLS configuration KCP builds for etcd (in its own words in
// controlplane/kubeadm/pkg/cluster.go): a client certificate signed by the etcd CA, the
// server's chain checked against the etcd CA, no host name check.
func etcdTLS(dir string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(filepath.Join(dir, "etcd-ca.crt"))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "etcd-ca.key"))
	if err != nil {
		return nil, err
	}
	caBlock, _ := pem.Decode(caPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if caBlock == nil || keyBlock == nil {
		return nil, errors.New("etcd CA files are not PEM")
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		return nil, err
	}
	caKey, err := parseKey(keyBlock)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "cluster-api.x-k8s.io"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return &tls.Config{
		Certificates:       []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // replaced by VerifyConnection, as KCP does
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		},
	}, nil
}

func parseKey(b *pem.Block) (any, error) {
	switch b.Type {
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(b.Bytes)
	default:
		return x509.ParsePKCS8PrivateKey(b.Bytes)
	}
}
