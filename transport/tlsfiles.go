package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// TLSFiles names the PEM files of one TLS setup: this end's certificate and
// key, and the CA that must have signed the other end's.
type TLSFiles struct {
	CertFile string
	KeyFile  string
	CAFile   string
}

// TLSMaterial is a certificate, its key and a CA pool read from TLSFiles,
// replaced whole by Reload. The tls.Configs it makes read the current
// material on every handshake, so a reload reaches new connections without
// a restart; connections already open keep what they were made with.
type TLSMaterial struct {
	files TLSFiles
	cur   atomic.Pointer[tlsLoaded]
}

type tlsLoaded struct {
	cert tls.Certificate
	leaf *x509.Certificate
	pool *x509.CertPool // nil without CAFile
}

// LoadTLS reads files. CertFile and KeyFile are required; CAFile is optional
// for configurations that never verify the other end.
func LoadTLS(files TLSFiles) (*TLSMaterial, error) {
	m := &TLSMaterial{files: files}
	l, err := files.load()
	if err != nil {
		return nil, err
	}
	m.cur.Store(l)
	return m, nil
}

// Reload reads the files again. On any error the material in use stays as
// it was and the error says which file failed.
func (m *TLSMaterial) Reload() error {
	l, err := m.files.load()
	if err != nil {
		return err
	}
	m.cur.Store(l)
	return nil
}

// Files returns the files the material is read from.
func (m *TLSMaterial) Files() TLSFiles { return m.files }

// Leaf is the certificate in use.
func (m *TLSMaterial) Leaf() *x509.Certificate { return m.cur.Load().leaf }

// HasCA reports whether a CA is configured.
func (m *TLSMaterial) HasCA() bool { return m.cur.Load().pool != nil }

func (f TLSFiles) load() (*tlsLoaded, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("tls: cert_file and key_file are both required")
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %s / %s: %w", f.CertFile, f.KeyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("tls: %s: %w", f.CertFile, err)
	}
	cert.Leaf = leaf
	l := &tlsLoaded{cert: cert, leaf: leaf}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		l.pool = x509.NewCertPool()
		if !l.pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: %s holds no PEM certificate", f.CAFile)
		}
	}
	return l, nil
}

func (m *TLSMaterial) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := m.cur.Load().cert
	return &c, nil
}

func (m *TLSMaterial) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c := m.cur.Load().cert
	return &c, nil
}

// verifyChain checks that the other end's chain leads to the current CA,
// for the given use, and returns the other end's certificate.
func (m *TLSMaterial) verifyChain(cs tls.ConnectionState, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(cs.PeerCertificates) == 0 {
		return nil, errors.New("no certificate presented")
	}
	pool := m.cur.Load().pool
	if pool == nil {
		return nil, errors.New("no CA configured to verify certificates")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, err
	}
	return leaf, nil
}

// PeerConfigs returns the TLS configurations of the peer port: both ends
// present a certificate from the CA, and it must name a server of cluster
// (see CertIdentity). A client certificate from the same CA is refused at
// the handshake. The material needs a CA.
func (m *TLSMaterial) PeerConfigs(cluster string) (server, client *tls.Config, err error) {
	if !m.HasCA() {
		return nil, nil, errors.New("tls: the peer port needs ca_file: every connection is verified")
	}
	verify := func(usage x509.ExtKeyUsage) func(tls.ConnectionState) error {
		return func(cs tls.ConnectionState) error {
			leaf, err := m.verifyChain(cs, usage)
			if err != nil {
				return fmt.Errorf("peer certificate refused: %w", err)
			}
			id, err := IdentityOf(leaf)
			if err != nil {
				return fmt.Errorf("peer certificate refused: %w", err)
			}
			if id.Role != RoleServer || id.Cluster != cluster {
				return fmt.Errorf("peer certificate refused: %s is not a server of cluster %q", id, cluster)
			}
			return nil
		}
	}
	server = &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: m.getCertificate,
		// Verified below against the current CA, so a reload applies.
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: verify(x509.ExtKeyUsageClientAuth),
	}
	client = &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: m.getClientCertificate,
		// Peers are checked by identity, not host name: the chain and the
		// server identity are verified in VerifyConnection.
		InsecureSkipVerify: true,
		VerifyConnection:   verify(x509.ExtKeyUsageServerAuth),
	}
	return server, client, nil
}

// ClientCertPolicy says what the API asks of client certificates.
type ClientCertPolicy int

const (
	ClientCertNone     ClientCertPolicy = iota // none asked for
	ClientCertOptional                         // verified if presented
	ClientCertRequired                         // a verified one is required
)

// APIServerConfig returns the API's TLS configuration: the server
// certificate, and client certificates verified against the CA as policy
// says.
func (m *TLSMaterial) APIServerConfig(policy ClientCertPolicy) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: m.getCertificate}
	if policy == ClientCertNone {
		return cfg, nil
	}
	if !m.HasCA() {
		return nil, errors.New("tls: verifying client certificates needs ca_file")
	}
	cfg.ClientAuth = tls.RequestClientCert
	if policy == ClientCertRequired {
		cfg.ClientAuth = tls.RequireAnyClientCert
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return nil // ClientAuth has already refused it if one is required
		}
		if _, err := m.verifyChain(cs, x509.ExtKeyUsageClientAuth); err != nil {
			return fmt.Errorf("client certificate refused: %w", err)
		}
		return nil
	}
	return cfg, nil
}
