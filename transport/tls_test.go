package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(t),
		Subject:               pkix.Name{CommonName: "leasehold test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a node certificate for 127.0.0.1, good for both ends of a
// connection, as a node is both server and client.
func (ca *testCA) issue(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func randomSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// tlsMux starts a Mux whose server side requires a client certificate from
// ca and whose client side presents cert and trusts ca.
func tlsMux(t *testing.T, ca *testCA, cert tls.Certificate) *Mux {
	t.Helper()
	return newTestMux(t, MuxConfig{
		ServerTLS: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientCAs:    ca.pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS12,
		},
		ClientTLS: &tls.Config{
			Certificates: []tls.Certificate{cert},
			RootCAs:      ca.pool,
			MinVersion:   tls.VersionTLS12,
		},
	})
}

// With mutual TLS both protocols work between two nodes of the same CA; the
// client verifies the server against the dialed IP (ServerName derived from
// the address).
func TestMux_MutualTLS(t *testing.T) {
	ca := newTestCA(t)
	a := tlsMux(t, ca, ca.issue(t, "node-a"))
	b := tlsMux(t, ca, ca.issue(t, "node-b"))
	newTestRPCServer(t, b)
	trA, _ := newRaftTransport(t, a)
	_, receivedB := newRaftTransport(t, b)

	addrB := b.Addr().String()
	callEcho(t, a.RPCClient(), addrB)
	if err := appendEntry(trA, raft.ServerAddress(addrB), receivedB, "over tls"); err != nil {
		t.Fatalf("AppendEntries over TLS: %v", err)
	}
	if err := requestVote(trA, raft.ServerAddress(addrB)); err != nil {
		t.Fatalf("RequestVote over TLS: %v", err)
	}
	callEcho(t, a.RPCClient(), addrB)
}

// A TLS port refuses clients that cannot prove membership: plain TCP, TLS
// without a certificate, and a certificate from another CA. Each attempt
// fails with a local error (the server never answers), and the port keeps
// serving the members.
func TestMux_TLSRefusesOutsiders(t *testing.T) {
	ca := newTestCA(t)
	server := tlsMux(t, ca, ca.issue(t, "server"))
	newTestRPCServer(t, server)
	_, receivedServer := newRaftTransport(t, server)
	addr := server.Addr().String()

	other := newTestCA(t)
	outsiders := map[string]*Mux{
		"plain tcp": newTestMux(t, MuxConfig{}),
		"no client cert": newTestMux(t, MuxConfig{
			ClientTLS: &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12},
		}),
		"untrusted client cert": newTestMux(t, MuxConfig{
			ClientTLS: &tls.Config{Certificates: []tls.Certificate{other.issue(t, "intruder")}, RootCAs: ca.pool, MinVersion: tls.VersionTLS12},
		}),
	}
	for name, m := range outsiders {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			err := m.RPCClient().Call(ctx, addr, "echo", echoMsg{Text: "let me in"}, nil)
			var remote *RPCError
			if err == nil || errors.As(err, &remote) {
				t.Fatalf("Call = %v, want a local failure", err)
			}
			if ctx.Err() != nil {
				t.Fatal("Call ran into the hang guard instead of being refused")
			}

			tr, _ := newRaftTransport(t, m)
			if err := appendEntry(tr, raft.ServerAddress(addr), receivedServer, "intrusion"); err == nil {
				t.Fatal("AppendEntries from an outsider succeeded")
			}
		})
	}

	member := tlsMux(t, ca, ca.issue(t, "member"))
	callEcho(t, member.RPCClient(), addr)
}

// A client refuses a server whose certificate is not from its CA.
func TestMux_TLSClientVerifiesServer(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	impostor := tlsMux(t, other, other.issue(t, "impostor"))
	newTestRPCServer(t, impostor)
	client := tlsMux(t, ca, ca.issue(t, "client"))

	err := client.RPCClient().Call(context.Background(), impostor.Addr().String(), "echo", nil, nil)
	var unknownAuthority x509.UnknownAuthorityError
	if !errors.As(err, &unknownAuthority) {
		t.Fatalf("Call to impostor = %v, want x509.UnknownAuthorityError", err)
	}
}
