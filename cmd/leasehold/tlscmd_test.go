package main

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testbin"
	"github.com/leasehold/leasehold/transport"
)

// cliRun is what one in-process run of the CLI did.
type cliRun struct {
	code           int
	stdout, stderr string
}

// runCLI runs the CLI in-process as main does, up to the exit status.
func runCLI(t *testing.T, args ...string) cliRun {
	t.Helper()
	app := newApp()
	var stdout, stderr bytes.Buffer
	app.Writer, app.ErrWriter = &stdout, &stderr
	r := cliRun{}
	if err := app.Run(interspersed(app, append([]string{"leasehold"}, args...))); err != nil {
		stderr.WriteString("leasehold: " + oneLine(err) + "\n")
		r.code = exitCode(err)
	}
	r.stdout, r.stderr = stdout.String(), stderr.String()
	return r
}

func mustRun(t *testing.T, args ...string) cliRun {
	t.Helper()
	r := runCLI(t, args...)
	if r.code != 0 {
		t.Fatalf("leasehold %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != want {
		t.Errorf("%s: mode %v, want %v", path, got, want)
	}
}

// dirNames lists dir, to see that nothing (not even a temporary file) was
// left behind.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestTLSCreate_CAServerClient(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, "tls", "ca", "create", "--dir", dir)
	server := mustRun(t, "tls", "cert", "create", "--server", "--node", "n1", "--ip", "10.0.0.1", "--dir", dir)
	mustRun(t, "tls", "cert", "create", "--client", "--name", "ops", "--dir", dir)

	p := func(name string) string { return filepath.Join(dir, name) }
	want := []string{"leasehold-ca-key.pem", "leasehold-ca.pem", "leasehold-client-ops-key.pem", "leasehold-client-ops.pem",
		"leasehold-server-n1-key.pem", "leasehold-server-n1.pem"}
	if got := dirNames(t, dir); !slices.Equal(got, want) {
		t.Fatalf("files %q, want %q", got, want)
	}
	if want := "wrote " + p("leasehold-server-n1.pem") + "\nwrote " + p("leasehold-server-n1-key.pem") + "\n"; server.stdout != want {
		t.Errorf("output %q, want %q", server.stdout, want)
	}
	for _, name := range want {
		if strings.HasSuffix(name, "-key.pem") {
			checkMode(t, p(name), 0o600)
		} else {
			checkMode(t, p(name), 0o644)
		}
	}

	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, p("leasehold-ca.pem")))
	for _, tc := range []struct {
		file  string
		id    transport.CertIdentity
		usage x509.ExtKeyUsage
	}{
		{"leasehold-server-n1.pem", transport.ServerIdentity(transport.DefaultClusterName, "n1"), x509.ExtKeyUsageServerAuth},
		{"leasehold-client-ops.pem", transport.ClientIdentity(transport.DefaultClusterName, "ops"), x509.ExtKeyUsageClientAuth},
	} {
		cert := readCert(t, p(tc.file))
		if id, err := transport.IdentityOf(cert); err != nil || id != tc.id {
			t.Errorf("%s: identity %v, %v; want %v", tc.file, id, err, tc.id)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
			t.Errorf("%s does not verify against the CA: %v", tc.file, err)
		}
	}

	cert := readCert(t, p("leasehold-server-n1.pem"))
	for _, ip := range []string{"10.0.0.1", "127.0.0.1"} {
		if !slices.ContainsFunc(cert.IPAddresses, net.ParseIP(ip).Equal) {
			t.Errorf("server certificate IPs %v lack %s", cert.IPAddresses, ip)
		}
	}
	if !slices.Contains(cert.DNSNames, "localhost") {
		t.Errorf("server certificate DNS names %v lack localhost", cert.DNSNames)
	}
	if _, err := readCert(t, p("leasehold-ca.pem")).Verify(x509.VerifyOptions{Roots: roots}); err != nil {
		t.Fatal(err)
	}

	// The files are what the server loads for its peer port.
	mat, err := transport.LoadTLS(transport.TLSFiles{CertFile: p("leasehold-server-n1.pem"),
		KeyFile: p("leasehold-server-n1-key.pem"), CAFile: p("leasehold-ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := mat.PeerConfigs(transport.DefaultClusterName); err != nil {
		t.Fatal(err)
	}
}

// --cluster names the files and the identities; --ca and --ca-key find a
// CA outside --dir.
func TestTLSCreate_ClusterAndCAFiles(t *testing.T) {
	caDir, dir := t.TempDir(), t.TempDir()
	mustRun(t, "tls", "ca", "create", "--cluster", "prod", "--days", "30", "--dir", caDir)
	ca := readCert(t, filepath.Join(caDir, "prod-ca.pem"))
	if days := ca.NotAfter.Sub(ca.NotBefore).Hours() / 24; days < 30 || days > 31 {
		t.Errorf("CA valid for %.2f days, want 30", days)
	}
	r := mustRun(t, "tls", "cert", "create", "--server", "--node", "n2", "--cluster", "prod", "--dir", dir,
		"--ca", filepath.Join(caDir, "prod-ca.pem"), "--ca-key", filepath.Join(caDir, "prod-ca-key.pem"))
	// The 365 days asked for end with the CA's 30.
	if !strings.Contains(r.stderr, "ends with its CA") {
		t.Errorf("no note that the certificate ends with the CA: %q", r.stderr)
	}
	cert := readCert(t, filepath.Join(dir, "prod-server-n2.pem"))
	if id, err := transport.IdentityOf(cert); err != nil || id != transport.ServerIdentity("prod", "n2") {
		t.Fatalf("identity %v, %v", id, err)
	}
	// Without --ca the CA is looked for in --dir, and its absence says how
	// to make one.
	r = runCLI(t, "tls", "cert", "create", "--client", "--name", "ops", "--cluster", "prod", "--dir", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "prod-ca.pem") || !strings.Contains(r.stderr, "tls ca create") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}

func TestTLSCreate_RefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	caFile, caKey := filepath.Join(dir, "leasehold-ca.pem"), filepath.Join(dir, "leasehold-ca-key.pem")
	mustRun(t, "tls", "ca", "create", "--dir", dir)
	oldCert, _ := os.ReadFile(caFile)
	oldKey, _ := os.ReadFile(caKey)

	r := runCLI(t, "tls", "ca", "create", "--dir", dir)
	if r.code != 1 || r.stderr != "leasehold: "+caFile+" already exists (--force overwrites it)\n" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if cert, _ := os.ReadFile(caFile); !bytes.Equal(cert, oldCert) {
		t.Fatal("the refused run changed the CA certificate")
	}
	if key, _ := os.ReadFile(caKey); !bytes.Equal(key, oldKey) {
		t.Fatal("the refused run changed the CA key")
	}

	// One file of the pair is enough to refuse the pair, and nothing is
	// written.
	serverKey := filepath.Join(dir, "leasehold-server-n1-key.pem")
	if err := os.WriteFile(serverKey, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "tls", "cert", "create", "--server", "--node", "n1", "--dir", dir)
	if r.code != 1 || !strings.Contains(r.stderr, serverKey) {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "leasehold-server-n1.pem")); !os.IsNotExist(err) {
		t.Fatalf("the certificate was written beside a refused key: %v", err)
	}

	mustRun(t, "tls", "ca", "create", "--dir", dir, "--force")
	if key, _ := os.ReadFile(caKey); bytes.Equal(key, oldKey) {
		t.Fatal("--force kept the old CA key")
	}
	checkMode(t, caKey, 0o600)
	want := []string{"leasehold-ca-key.pem", "leasehold-ca.pem", "leasehold-server-n1-key.pem"}
	if got := dirNames(t, dir); !slices.Equal(got, want) {
		t.Fatalf("files %q, want %q", got, want)
	}
}

func TestTLSCreate_UsageErrors(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, "tls", "ca", "create", "--dir", dir)
	for _, args := range [][]string{
		{"cert", "create", "--server", "--client", "--node", "n1", "--name", "ops"},
		{"cert", "create", "--node", "n1"},
		{"cert", "create", "--server"},
		{"cert", "create", "--client"},
		{"cert", "create", "--server", "--node", "n1", "--name", "ops"},
		{"cert", "create", "--client", "--name", "ops", "--ip", "10.0.0.1"},
		{"cert", "create", "--server", "--node", "../n1"},
		{"cert", "create", "--server", "--node", `n\1`},
		{"cert", "create", "--server", "--node", ".n1"},
		{"cert", "create", "--server", "--node", ""},
		{"cert", "create", "--client", "--name", "a/b"},
		{"cert", "create", "--server", "--node", "n1", "--ip", "10.0.0"},
		{"cert", "create", "--server", "--node", "n1", "--days", "0"},
		{"cert", "create", "--server", "--node", "n1", "--days", "x"},
		{"cert", "create", "--server", "--node", "n1", "--no-such-flag"},
		{"cert", "create", "--server", "--node", "n1", "-o", "yaml"},
		{"ca", "create", "--cluster", "my cluster"},
		{"ca", "create", "--cluster", ".prod"},
		{"ca", "create", "--dir", filepath.Join(dir, "missing")},
	} {
		args = append([]string{"tls"}, args...)
		if !slices.Contains(args, "--dir") {
			args = append(args, "--dir", dir)
		}
		r := runCLI(t, args...)
		if r.code != 2 || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "leasehold: usage: ") {
			t.Errorf("leasehold %q: exit %d, stderr %q; want 2 and one usage line", args, r.code, r.stderr)
		}
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{"leasehold-ca-key.pem", "leasehold-ca.pem"}) {
		t.Fatalf("usage errors wrote files: %q", got)
	}
}

func TestTLSCreate_JSON(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"tls", "ca", "create", "--dir", dir, "-o", "json"},
		{"-o", "json", "tls", "cert", "create", "--client", "--name", "ops", "--dir", dir},
	} {
		r := mustRun(t, args...)
		var v struct {
			Files    []string `json:"files"`
			Identity string   `json:"identity"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("%q: %v\n%s", args, err, r.stdout)
		}
		if len(v.Files) != 2 || !strings.HasSuffix(v.Files[1], "-key.pem") {
			t.Errorf("%q: files %q", args, v.Files)
		}
	}
}

func TestTLSCreate_HelpShowsDefaults(t *testing.T) {
	for args, want := range map[string][]string{
		"tls ca create --help":   {"(default: 1825)", `(default: "leasehold")`, `(default: ".")`},
		"tls cert create --help": {"(default: 365)", "127.0.0.1 is always added", "localhost is always added", "(default: <dir>/<cluster>-ca.pem)"},
	} {
		r := mustRun(t, strings.Fields(args)...)
		for _, w := range want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%s lacks %q:\n%s", args, w, r.stdout)
			}
		}
		// Only --output of the global flags: an API flag would be accepted
		// and ignored.
		if strings.Contains(r.stdout, "--ca-file") || strings.Contains(r.stdout, "--endpoints") {
			t.Errorf("%s offers the API flags:\n%s", args, r.stdout)
		}
	}
}

// The binary exits 2 on a usage error (main's own path, not runCLI's copy).
func TestTLSCreate_UsageExitStatus(t *testing.T) {
	r := testbin.Run(t, 30*time.Second, nil, testbin.Leasehold(t), "tls", "cert", "create", "--server", "--client", "--dir", t.TempDir())
	if r.Code != 2 || r.Stderr != "leasehold: usage: give one of --server and --client\n" {
		t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
	}
}
