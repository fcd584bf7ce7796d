package transport

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// pkiFiles writes a pair to dir and returns its files with the CA's.
func pkiFiles(t *testing.T, dir, name string, ca *CA, p PEMPair) TLSFiles {
	t.Helper()
	f := TLSFiles{CertFile: filepath.Join(dir, name+".pem"), KeyFile: filepath.Join(dir, name+"-key.pem"), CAFile: filepath.Join(dir, "ca.pem")}
	for path, b := range map[string][]byte{f.CertFile: p.Cert, f.KeyFile: p.Key, f.CAFile: ca.PEM().Cert} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func issuePair(t *testing.T, ca *CA, id CertIdentity) PEMPair {
	t.Helper()
	p, err := ca.Issue(CertRequest{Identity: id, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// peerMux starts a Mux with the peer-port configuration for cluster from
// the files of one identity.
func peerMux(t *testing.T, files TLSFiles, cluster string) (*Mux, *TLSMaterial) {
	t.Helper()
	mat, err := LoadTLS(files)
	if err != nil {
		t.Fatal(err)
	}
	server, client, err := mat.PeerConfigs(cluster)
	if err != nil {
		t.Fatal(err)
	}
	return newTestMux(t, MuxConfig{ServerTLS: server, ClientTLS: client}), mat
}

// whoAmI serves a method answering with the caller as the server saw it.
func whoAmI(t *testing.T, m *Mux) {
	t.Helper()
	s := newTestRPCServer(t, m)
	s.Handle("whoami", func(ctx context.Context, _ json.RawMessage) (any, error) {
		p, ok := PeerFromContext(ctx)
		if !ok {
			return nil, errors.New("no peer in context")
		}
		return map[string]any{"authenticated": p.Authenticated, "node": p.NodeID(), "addr": p.Addr}, nil
	})
}

func TestIdentityURIRoundTrip(t *testing.T) {
	for _, id := range []CertIdentity{
		ServerIdentity("prod", "node-1"),
		ClientIdentity("prod", "ci runner/7"),
		ServerIdentity(DefaultClusterName, "a%b?c#d"),
	} {
		got, err := ParseIdentityURI(id.URI())
		if err != nil || got != id {
			t.Fatalf("round trip of %+v = %+v, %v", id, got, err)
		}
		reparsed, err := url.Parse(id.String())
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ParseIdentityURI(reparsed); err != nil || got != id {
			t.Fatalf("%s parsed back as %+v, %v", id, got, err)
		}
	}
	for _, bad := range []string{
		"https://prod/server/n1", "leasehold:///server/n1", "leasehold://prod/admin/n1",
		"leasehold://prod/server/", "leasehold://prod/server/a/b", "leasehold://prod/server/n1?x=1",
		"leasehold://u@prod/server/n1",
	} {
		u, err := url.Parse(bad)
		if err != nil {
			t.Fatal(err)
		}
		if id, err := ParseIdentityURI(u); err == nil {
			t.Errorf("%s parsed as %+v, want an error", bad, id)
		}
	}
}

// A cluster name CheckClusterName accepts survives a certificate: issued,
// parsed back by x509, and read as the same identity. One it refuses would
// make a certificate x509 cannot parse, so NewCA and Issue refuse it too.
func TestCheckClusterName(t *testing.T) {
	ca, err := NewCA("prod", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{DefaultClusterName, "prod", "Prod-EU_1", "eu.prod", "a.b-c.d_e", "7"} {
		if err := CheckClusterName(name); err != nil {
			t.Fatalf("%q refused: %v", name, err)
		}
		id := ServerIdentity(name, "n 1/ü")
		p, err := ca.Issue(CertRequest{Identity: id, Validity: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(p.Cert)
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatalf("cluster %q: %v", name, err)
		}
		if got, err := IdentityOf(cert); err != nil || got != id {
			t.Fatalf("cluster %q: identity %+v, %v", name, got, err)
		}
	}
	for _, name := range []string{"", "my cluster", "a:b", "a:1", "ü", "a@b", "a?b", "a#b", "a%b", "a/b", `a\b`, ".a", "a.", "a..b", "[::1]", "a\nb"} {
		if err := CheckClusterName(name); err == nil {
			t.Errorf("%q accepted", name)
		}
		if _, err := NewCA(name, time.Hour); err == nil {
			t.Errorf("NewCA(%q) made a CA", name)
		}
		if _, err := ca.Issue(CertRequest{Identity: ClientIdentity(name, "ops"), Validity: time.Hour}); err == nil {
			t.Errorf("issued a certificate for cluster %q", name)
		}
	}
}

// The peer port takes only servers of its own cluster, and each call knows
// which node made it.
func TestPeerTLS_OnlyServersOfTheCluster(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("prod", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	server, _ := peerMux(t, pkiFiles(t, dir, "n1", ca, issuePair(t, ca, ServerIdentity("prod", "n1"))), "prod")
	whoAmI(t, server)
	addr := server.Addr().String()

	member, _ := peerMux(t, pkiFiles(t, dir, "n2", ca, issuePair(t, ca, ServerIdentity("prod", "n2"))), "prod")
	var got map[string]any
	if err := member.RPCClient().Call(context.Background(), addr, "whoami", nil, &got); err != nil {
		t.Fatalf("member call: %v", err)
	}
	if got["authenticated"] != true || got["node"] != "n2" {
		t.Fatalf("member seen as %v, want authenticated n2", got)
	}

	// Outsiders: a client certificate of the same CA (valid for the API),
	// a server of another cluster from the same CA, and plain TCP.
	outsiders := map[string]*Mux{
		"client certificate":  newClientMux(t, ca, ClientIdentity("prod", "worker-7")),
		"other cluster":       newClientMux(t, ca, ServerIdentity("staging", "n1")),
		"plain tcp":           newTestMux(t, MuxConfig{}),
		"no leasehold name":   newForeignMux(t, ca),
		"valid but anonymous": newTestMux(t, MuxConfig{ClientTLS: &tls.Config{InsecureSkipVerify: true}}),
	}
	for name, m := range outsiders {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			err := m.RPCClient().Call(ctx, addr, "whoami", nil, nil)
			var remote *RPCError
			if err == nil || errors.As(err, &remote) {
				t.Fatalf("Call = %v, want refused before any handler ran", err)
			}
			if ctx.Err() != nil {
				t.Fatal("ran into the hang guard instead of being refused")
			}
			tr, _ := newRaftTransport(t, m)
			var out raft.TimeoutNowResponse
			if err := tr.TimeoutNow("n1", raft.ServerAddress(addr), &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{ID: []byte("x"), Addr: []byte("x")}}, &out); err == nil {
				t.Fatal("TimeoutNow from an outsider was delivered")
			}
		})
	}
}

// The client side checks the server too: dialing a node id reaches that
// node or nobody.
func TestPeerTLS_DialChecksNodeID(t *testing.T) {
	dir := t.TempDir()
	ca, _ := NewCA("prod", time.Hour)
	server, _ := peerMux(t, pkiFiles(t, dir, "n1", ca, issuePair(t, ca, ServerIdentity("prod", "n1"))), "prod")
	whoAmI(t, server)
	member, _ := peerMux(t, pkiFiles(t, dir, "n2", ca, issuePair(t, ca, ServerIdentity("prod", "n2"))), "prod")
	addr := server.Addr().String()
	if err := member.RPCClient().CallNode(context.Background(), addr, "n1", "whoami", nil, nil); err != nil {
		t.Fatalf("call to n1 as n1: %v", err)
	}
	err := member.RPCClient().CallNode(context.Background(), addr, "n3", "whoami", nil, nil)
	if !errors.Is(err, ErrWrongPeer) {
		t.Fatalf("call to n1 as n3 = %v, want ErrWrongPeer", err)
	}
	if _, err := member.DialAPI(context.Background(), addr, "n3"); !errors.Is(err, ErrWrongPeer) {
		t.Fatalf("DialAPI to n1 as n3 = %v, want ErrWrongPeer", err)
	}
}

// Without peer TLS nobody is authenticated, and handlers can tell.
func TestPeer_PlainIsUnauthenticated(t *testing.T) {
	server := newTestMux(t, MuxConfig{})
	whoAmI(t, server)
	client := newTestMux(t, MuxConfig{})
	var got map[string]any
	if err := client.RPCClient().Call(context.Background(), server.Addr().String(), "whoami", nil, &got); err != nil {
		t.Fatal(err)
	}
	if got["authenticated"] != false || got["node"] != "" || got["addr"] == "" {
		t.Fatalf("plain caller seen as %v", got)
	}
}

// A reload serves the new certificate on new connections, and a broken
// file keeps the old one.
func TestTLSMaterial_Reload(t *testing.T) {
	dir := t.TempDir()
	ca, _ := NewCA("prod", time.Hour)
	files := pkiFiles(t, dir, "n1", ca, issuePair(t, ca, ServerIdentity("prod", "n1")))
	server, mat := peerMux(t, files, "prod")
	whoAmI(t, server)
	member, _ := peerMux(t, pkiFiles(t, dir, "n2", ca, issuePair(t, ca, ServerIdentity("prod", "n2"))), "prod")

	served := func() *x509.Certificate {
		conn, err := member.DialRPC(context.Background(), server.Addr().String(), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.(*tls.Conn).ConnectionState().PeerCertificates[0]
	}
	first := served()
	if first.SerialNumber.Cmp(mat.Leaf().SerialNumber) != 0 {
		t.Fatal("served certificate is not the loaded one")
	}

	next := issuePair(t, ca, ServerIdentity("prod", "n1"))
	os.WriteFile(files.CertFile, next.Cert, 0o600)
	os.WriteFile(files.KeyFile, next.Key, 0o600)
	if err := mat.Reload(); err != nil {
		t.Fatal(err)
	}
	second := served()
	b, _ := pem.Decode(next.Cert)
	want, _ := x509.ParseCertificate(b.Bytes)
	if second.SerialNumber.Cmp(want.SerialNumber) != 0 || second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatalf("after reload the serial is %v, want %v", second.SerialNumber, want.SerialNumber)
	}

	os.WriteFile(files.KeyFile, []byte("not a key"), 0o600)
	if err := mat.Reload(); err == nil {
		t.Fatal("Reload of a broken key succeeded")
	}
	if third := served(); third.SerialNumber.Cmp(second.SerialNumber) != 0 {
		t.Fatal("a failed reload changed the certificate in use")
	}
}

func TestCA_LoadAndIssue(t *testing.T) {
	ca, err := NewCA("prod", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadCA(ca.PEM())
	if err != nil {
		t.Fatal(err)
	}
	p, err := again.Issue(CertRequest{Identity: ClientIdentity("prod", "ops"), Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(p.Cert)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	id, err := IdentityOf(cert)
	if err != nil || id != ClientIdentity("prod", "ops") {
		t.Fatalf("identity = %+v, %v", id, err)
	}
	if cert.NotAfter.After(ca.Certificate().NotAfter) {
		t.Fatal("a certificate outlives its CA")
	}
	if _, err := (&CA{}).Issue(CertRequest{}); err == nil {
		t.Fatal("issued a certificate with no identity")
	}
	other, _ := NewCA("prod", time.Hour)
	if _, err := LoadCA(PEMPair{Cert: ca.PEM().Cert, Key: other.PEM().Key}); err == nil {
		t.Fatal("loaded a CA with another CA's key")
	}
}

// newClientMux dials with a certificate for id from ca (trusting ca).
func newClientMux(t *testing.T, ca *CA, id CertIdentity) *Mux {
	t.Helper()
	p := issuePair(t, ca, id)
	cert, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	return newTestMux(t, MuxConfig{ClientTLS: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, InsecureSkipVerify: true}})
}

// newForeignMux dials with a certificate of ca that names no leasehold
// identity.
func newForeignMux(t *testing.T, ca *CA) *Mux {
	t.Helper()
	p := issuePair(t, ca, ServerIdentity("prod", "n9"))
	cert, _ := tls.X509KeyPair(p.Cert, p.Key)
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	leaf.URIs = nil
	// Re-sign without the URI: issue through the CA's key directly.
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca.cert, leaf.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert.Certificate = [][]byte{der}
	cert.Leaf = nil
	return newTestMux(t, MuxConfig{ClientTLS: &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true}})
}
