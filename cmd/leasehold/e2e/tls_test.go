package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testbin"
)

// pki makes a CA, a server certificate for node id and a client
// certificate, with the CLI's own `leasehold tls` commands, in dir.
type pki struct {
	dir                  string
	ca                   string
	serverCert, serverKy string
	clientCert, clientKy string
}

func newPKI(t *testing.T, dir, node string) pki {
	t.Helper()
	mustCLI(t, baseEnv(), "tls", "ca", "create", "--dir", dir)
	mustCLI(t, baseEnv(), "tls", "cert", "create", "--server", "--node", node, "--dir", dir)
	mustCLI(t, baseEnv(), "tls", "cert", "create", "--client", "--name", "cli", "--dir", dir)
	p := func(name string) string { return filepath.Join(dir, "leasehold-"+name) }
	return pki{dir: dir, ca: p("ca.pem"), serverCert: p("server-" + node + ".pem"), serverKy: p("server-" + node + "-key.pem"),
		clientCert: p("client-cli.pem"), clientKy: p("client-cli-key.pem")}
}

// toml configures both ports with the node's certificate; the API requires
// client certificates.
func (p pki) toml() string {
	return raftTimingsTOML + fmt.Sprintf("[tls.peer]\ncert_file = %q\nkey_file = %q\nca_file = %q\n\n"+
		"[tls.api]\ncert_file = %q\nkey_file = %q\nca_file = %q\nverify_clients = true\n",
		p.serverCert, p.serverKy, p.ca, p.serverCert, p.serverKy, p.ca)
}

// A node that requires client certificates answers the CLI only when it
// presents one signed by the cluster's CA, and --cert-file without
// --key-file is refused before anything is sent.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := newPKI(t, dir, "tls1")
	cfg := filepath.Join(dir, "leasehold.toml")
	if err := os.WriteFile(cfg, []byte(p.toml()), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, api := testbin.StartServer(t, "server", 5*time.Second, "--config", cfg, "--data-dir", t.TempDir(),
		"--node-id", "tls1", "--bootstrap-expect", "1")
	defer srv.Stop(5 * time.Second)

	base := []string{"cluster", "status", "-o", "json", "--endpoints", api, "--timeout", "3s", "--ca-file", p.ca}
	withCert := append(append([]string(nil), base...), "--cert-file", p.clientCert, "--key-file", p.clientKy)
	waitFor(t, 30*time.Second, "a TLS node to answer a client with a certificate", func() error {
		r := runCLI(t, baseEnv(), withCert...)
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
	if r := runCLI(t, baseEnv(), withCert...); r.code != 0 {
		t.Errorf("the node stopped answering a client with a certificate: %s", r.stderr)
	}
	r := runCLI(t, baseEnv(), append(base, "--cert-file", p.clientCert)...)
	if r.code == 0 || !strings.Contains(r.stderr, "--key-file") {
		t.Errorf("--cert-file alone: exit %d, stderr %q", r.code, r.stderr)
	}
}

// A node that binds a non-loopback address without peer mutual TLS and API
// authentication refuses to start with one line naming what is missing;
// --insecure starts it anyway, and /readyz says so.
func TestRefusesExposedWithoutSecurity(t *testing.T) {
	t.Parallel()
	// Raft on every interface, on a port the node picks (0): the exposure
	// under test. A single node never dials the address it advertises.
	args := func(extra ...string) []string {
		return append([]string{"server", "--data-dir", t.TempDir(), "--node-id", "open1", "--raft-bind", "0.0.0.0:0",
			"--raft-advertise", "127.0.0.1:1", "--bootstrap-expect", "1"}, extra...)
	}
	// Refused before anything is bound.
	r := runCLI(t, baseEnv(), args("--api-bind", "127.0.0.1:1")...)
	if r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 ||
		!strings.Contains(r.stderr, "raft_bind 0.0.0.0:0 is not loopback") || !strings.Contains(r.stderr, "[tls.peer]") ||
		!strings.Contains(r.stderr, "--insecure") {
		t.Fatalf("exposed without security: exit %d, stderr %q", r.code, r.stderr)
	}

	// The API on a port bound for it, passed as descriptor 3.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	api := ln.Addr().String()
	f, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	srv := testbin.StartFiles(t, "server", 5*time.Second, nil, []*os.File{f},
		append([]string{testbin.Leasehold(t)}, args("--insecure", "--api-fd", "3")...)...)
	f.Close()
	defer srv.Stop(5 * time.Second)
	waitFor(t, 30*time.Second, "the insecure node to say so", func() error {
		resp, err := http.Get("http://" + api + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return err
		}
		if body["insecure"] != true || body["ready"] != true {
			return fmt.Errorf("readyz %v", body)
		}
		return nil
	})
	if !strings.Contains(srv.Stderr(), "insecure") {
		t.Error("no warning at start")
	}
}

// SIGHUP reloads the certificates: the node serves the new one, keeps
// running, and a bad file keeps the old one.
func TestSIGHUPReloadsCertificates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := newPKI(t, dir, "hup1")
	cfg := filepath.Join(dir, "leasehold.toml")
	if err := os.WriteFile(cfg, []byte(p.toml()), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, api := testbin.StartServer(t, "server", 5*time.Second, "--config", cfg, "--data-dir", t.TempDir(),
		"--node-id", "hup1", "--bootstrap-expect", "1")
	defer srv.Stop(5 * time.Second)

	served := func() (*big.Int, error) {
		pair, err := tls.LoadX509KeyPair(p.clientCert, p.clientKy)
		if err != nil {
			return nil, err
		}
		conn, err := tls.Dial("tcp", api, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
	}
	var first *big.Int
	waitFor(t, 30*time.Second, "the API to serve its certificate", func() (err error) {
		first, err = served()
		return err
	})
	if want := serialOf(t, p.serverCert); first.Cmp(want) != 0 {
		t.Fatalf("served serial %v, the file's is %v", first, want)
	}

	mustCLI(t, baseEnv(), "tls", "cert", "create", "--server", "--node", "hup1", "--dir", dir, "--force")
	want := serialOf(t, p.serverCert)
	if err := srv.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the new certificate to be served", func() error {
		got, err := served()
		if err != nil {
			return err
		}
		if got.Cmp(want) != 0 {
			return fmt.Errorf("serial %v, want %v", got, want)
		}
		return nil
	})

	if err := os.WriteFile(p.serverKy, []byte("broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv.Signal(syscall.SIGHUP)
	waitFor(t, 30*time.Second, "the failed reload to be logged", func() error {
		if !strings.Contains(srv.Stderr(), "reload_failed") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if got, err := served(); err != nil || got.Cmp(want) != 0 {
		t.Fatalf("after a bad reload: serial %v, %v; want %v", got, err, want)
	}
	if srv.Exited() {
		t.Fatal("SIGHUP stopped the server")
	}
}

func serialOf(t *testing.T, path string) *big.Int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}
