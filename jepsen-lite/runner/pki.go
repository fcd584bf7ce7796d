package runner

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/jepsen-lite/netem"
	"github.com/leasehold/leasehold/transport"
)

// ClusterName is the cluster name a secure run's certificates carry.
const ClusterName = "jepsen"

// Roles of a secure run's tokens, the API's; the flood's token is a
// worker's, scoped to made-up ids.
const (
	roleAdmin     = "admin"
	roleSubmitter = "submitter"
	roleWorker    = "worker"
	roleFlood     = "flood"
)

// tokenRoles are the tokens a secure run makes.
var tokenRoles = []string{roleAdmin, roleSubmitter, roleWorker, roleFlood}

// certValidity is long enough for any run, soak included.
const certValidity = 7 * 24 * time.Hour

// secrets are a secure run's CA, certificates and tokens, made fresh under
// the run's pki directory. Keys and tokens are files of mode 0600, and the
// tokens go nowhere else: not on a command line, not in a log, not in the
// report.
type secrets struct {
	dir    string
	caFile string
	// nodes are the server certificates, by node index from 0.
	nodes []certFiles
	// outsider is an API client certificate of the same CA: good on the
	// API port, refused on the peer port.
	outsider certFiles
	tokens   map[string]string // by role
	// clientTLS trusts the CA, for HTTPS to the nodes' API.
	clientTLS *tls.Config
}

type certFiles struct{ cert, key string }

// tokenFile is where a role's token is kept, for the worker processes.
func (s *secrets) tokenFile(role string) string { return filepath.Join(s.dir, "token-"+role) }

// makeSecrets writes a CA, a server certificate per node naming the node
// and every address it is dialed or bound at, a client certificate for the
// outsider, and a token per role, into dir.
func makeSecrets(dir string, n netem.Network, nodes int) (*secrets, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := transport.NewCA(ClusterName, certValidity)
	if err != nil {
		return nil, err
	}
	s := &secrets{dir: dir, caFile: filepath.Join(dir, "ca.pem"), tokens: map[string]string{}}
	if err := writeFile(s.caFile, ca.PEM().Cert, 0o644); err != nil {
		return nil, err
	}
	issue := func(name string, req transport.CertRequest) (certFiles, error) {
		req.Validity = certValidity
		pair, err := ca.Issue(req)
		if err != nil {
			return certFiles{}, err
		}
		f := certFiles{cert: filepath.Join(dir, name+".pem"), key: filepath.Join(dir, name+"-key.pem")}
		return f, errors.Join(writeFile(f.cert, pair.Cert, 0o644), writeFile(f.key, pair.Key, 0o600))
	}
	for i := 1; i <= nodes; i++ {
		id := netem.NodeName(i)
		var ips []net.IP
		for _, a := range []string{n.RaftBind(i), n.RaftAddr(i), n.APIBind(i), n.APIAddr(i)} {
			host, _, err := net.SplitHostPort(a)
			if err != nil {
				return nil, err
			}
			if ip := net.ParseIP(host); ip != nil && !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		}
		f, err := issue(id, transport.CertRequest{Identity: transport.ServerIdentity(ClusterName, id), IPs: ips})
		if err != nil {
			return nil, err
		}
		s.nodes = append(s.nodes, f)
	}
	if s.outsider, err = issue("outsider", transport.CertRequest{Identity: transport.ClientIdentity(ClusterName, "outsider")}); err != nil {
		return nil, err
	}
	for _, role := range tokenRoles {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		s.tokens[role] = hex.EncodeToString(b)
		if err := writeFile(s.tokenFile(role), []byte(s.tokens[role]+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	s.clientTLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return s, nil
}

// nodeTOML is the part of node i's configuration (from 0) that secures
// it: the cluster's name, mutual TLS on the peer port, TLS on the API, and
// the tokens. It holds secrets: its file must be 0600.
func (s *secrets) nodeTOML(i int) string {
	var b strings.Builder
	f := s.nodes[i]
	for _, section := range []string{"tls.peer", "tls.api"} {
		fmt.Fprintf(&b, "\n[%s]\ncert_file = %q\nkey_file = %q\nca_file = %q\n", section, f.cert, f.key, s.caFile)
	}
	names := map[string]string{roleAdmin: "runner-admin", roleSubmitter: "runner", roleWorker: "workers", roleFlood: "flood"}
	// The scopes are wide on purpose: the stale writer and the reporter act
	// in the real workers' names, and the submitter submits for two
	// executors (exec-a, exec-b). The flood's names only its ghosts.
	scopes := map[string]string{roleSubmitter: "submitter = \"*\"\n", roleWorker: "workers = [\"*\"]\n",
		roleFlood: fmt.Sprintf("workers = [%q]\n", history.FloodGhostPrefix+"*")}
	apiRole := map[string]string{roleAdmin: roleAdmin, roleSubmitter: roleSubmitter, roleWorker: roleWorker, roleFlood: roleWorker}
	for _, role := range tokenRoles {
		fmt.Fprintf(&b, "\n[[auth.tokens]]\nname = %q\ntoken = %q\nrole = %q\n%s", names[role], s.tokens[role], apiRole[role], scopes[role])
	}
	return b.String()
}

// outsiderTLS presents the outsider's client certificate and trusts any
// server: the node decides whether to talk.
func (s *secrets) outsiderTLS() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(s.outsider.cert, s.outsider.key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, nil
}

// writeFile writes data to a new file of mode perm, whatever the umask.
func writeFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
