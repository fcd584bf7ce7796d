package clustertest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/transport"
)

// TLSCluster is the cluster name test certificates carry.
const TLSCluster = "test"

// PKI is a test cluster's certificate authority.
type PKI struct {
	t   testing.TB
	CA  *transport.CA
	dir string

	mu    sync.Mutex
	nodes map[int]*transport.TLSMaterial
}

// NewPKI makes a CA for one test cluster.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	ca, err := transport.NewCA(TLSCluster, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{t: t, CA: ca, dir: t.TempDir(), nodes: map[int]*transport.TLSMaterial{}}
	if err := os.WriteFile(filepath.Join(p.dir, "ca.pem"), ca.PEM().Cert, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Files issues a certificate for id and writes it with the CA's
// certificate; name keeps the files apart.
func (p *PKI) Files(name string, id transport.CertIdentity) transport.TLSFiles {
	p.t.Helper()
	pair, err := p.CA.Issue(transport.CertRequest{Identity: id, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: time.Hour})
	if err != nil {
		p.t.Fatal(err)
	}
	f := transport.TLSFiles{CertFile: filepath.Join(p.dir, name+".pem"), KeyFile: filepath.Join(p.dir, name+"-key.pem"),
		CAFile: filepath.Join(p.dir, "ca.pem")}
	for path, b := range map[string][]byte{f.CertFile: pair.Cert, f.KeyFile: pair.Key} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			p.t.Fatal(err)
		}
	}
	return f
}

// Material loads a new certificate for id.
func (p *PKI) Material(name string, id transport.CertIdentity) *transport.TLSMaterial {
	p.t.Helper()
	m, err := transport.LoadTLS(p.Files(name, id))
	if err != nil {
		p.t.Fatal(err)
	}
	return m
}

// PeerTLS runs every node's peer port with mutual TLS: a server
// certificate naming the node's id, the same one across restarts.
func (p *PKI) PeerTLS() Option {
	return func(i int, c *cluster.Config) {
		p.mu.Lock()
		defer p.mu.Unlock()
		m := p.nodes[i]
		if m == nil {
			var err error
			m, err = transport.LoadTLS(p.Files(fmt.Sprintf("node-%d", i), transport.ServerIdentity(TLSCluster, fmt.Sprintf("node-%d", i))))
			if err != nil {
				p.t.Fatal(err)
			}
			p.nodes[i] = m
		}
		server, client, err := m.PeerConfigs(TLSCluster)
		if err != nil {
			p.t.Fatal(err)
		}
		c.RaftTLS, c.RaftClientTLS = server, client
	}
}
