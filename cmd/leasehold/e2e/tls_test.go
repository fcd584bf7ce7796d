package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A node that requires client certificates answers the CLI only when it
// presents one signed by the cluster's CA, and --cert-file without
// --key-file is refused before anything is sent.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caKey := newCA(t, dir)
	node := issue(t, dir, "node", ca, caKey)
	cli := issue(t, dir, "cli", ca, caKey)
	cfg := filepath.Join(dir, "leasehold.toml")
	toml := raftTimingsTOML + fmt.Sprintf("[tls]\ncert_file = %q\nkey_file = %q\nca_file = %q\nverify_clients = true\n",
		node[0], node[1], filepath.Join(dir, "ca.pem"))
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	api := freeAddr(t)
	p := startProc(t, "server", 5*time.Second, baseEnv(), "server", "--config", cfg, "--data-dir", t.TempDir(),
		"--node-id", "tls1", "--raft-bind", freeAddr(t), "--api-bind", api, "--bootstrap-expect", "1")
	defer p.stop(5 * time.Second)

	base := []string{"cluster", "status", "-o", "json", "--endpoints", api, "--timeout", "3s", "--ca-file", filepath.Join(dir, "ca.pem")}
	waitFor(t, 30*time.Second, "a TLS node to answer a client with a certificate", func() error {
		r := runCLI(t, baseEnv(), append(base, "--cert-file", cli[0], "--key-file", cli[1])...)
		if r.code != 0 {
			return fmt.Errorf("exit %d: %s", r.code, r.stderr)
		}
		var st statusJSON
		decodeJSON(t, "status", r.stdout, &st)
		if st.NodeID != "tls1" {
			return fmt.Errorf("status of %q", st.NodeID)
		}
		return nil
	})
	// Refused: the server's alert may arrive as "certificate required"
	// or, with TLS 1.3, as a connection cut after the client's side of the
	// handshake; either way the node is up (it answers with a certificate
	// just before and just after).
	if r := runCLI(t, baseEnv(), base...); r.code == 0 {
		t.Errorf("a client without a certificate was answered: %s", r.stdout)
	}
	if r := runCLI(t, baseEnv(), append(base, "--cert-file", cli[0], "--key-file", cli[1])...); r.code != 0 {
		t.Errorf("the node stopped answering a client with a certificate: %s", r.stderr)
	}
	r := runCLI(t, baseEnv(), append(base, "--cert-file", cli[0])...)
	if r.code == 0 || !strings.Contains(r.stderr, "--key-file") {
		t.Errorf("--cert-file alone: exit %d, stderr %q", r.code, r.stderr)
	}
}

func newCA(t *testing.T, dir string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leasehold test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", der)
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

// issue writes a certificate for 127.0.0.1, good for servers and clients,
// and returns its cert and key paths.
func issue(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) [2]string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	out := [2]string{filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")}
	writePEM(t, out[0], "CERTIFICATE", der)
	writePEM(t, out[1], "EC PRIVATE KEY", kb)
	return out
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
