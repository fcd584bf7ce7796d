package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// PEMPair is a certificate and its private key, PEM encoded.
type PEMPair struct {
	Cert []byte
	Key  []byte
}

// CertRequest describes a certificate to issue (CA.Issue).
type CertRequest struct {
	// Identity is written as the certificate's URI SAN. Role server gets
	// both server and client authentication (a node dials its peers);
	// role client gets client authentication only.
	Identity CertIdentity
	// IPs and DNSNames are the addresses API clients dial a server by
	// (the peer port checks identities, not addresses).
	IPs      []net.IP
	DNSNames []string
	Validity time.Duration
}

// CA is a certificate authority that issues leasehold certificates.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  PEMPair
}

// NewCA makes a self-signed CA for cluster, valid for validity.
func NewCA(cluster string, validity time.Duration) (*CA, error) {
	if cluster == "" || validity <= 0 {
		return nil, errors.New("pki: a CA needs a cluster name and a positive validity")
	}
	if err := CheckClusterName(cluster); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "leasehold CA " + cluster, Organization: []string{"leasehold"}},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, pem: PEMPair{Cert: encodeCert(der), Key: keyPEM}}, nil
}

// LoadCA reads a CA from its PEM certificate and key.
func LoadCA(p PEMPair) (*CA, error) {
	cb, _ := pem.Decode(p.Cert)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("pki: the CA certificate is not a PEM CERTIFICATE")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("pki: the certificate is not a CA")
	}
	kb, _ := pem.Decode(p.Key)
	if kb == nil {
		return nil, errors.New("pki: the CA key is not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		if k, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
			return nil, fmt.Errorf("pki: CA key: %w", err)
		}
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("pki: the CA key is not an ECDSA key")
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("pki: the CA key does not match the CA certificate")
	}
	return &CA{cert: cert, key: key, pem: p}, nil
}

// PEM returns the CA's certificate and key.
func (ca *CA) PEM() PEMPair { return ca.pem }

// Certificate returns the CA's certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Issue makes a certificate and key for req, signed by ca.
func (ca *CA) Issue(req CertRequest) (PEMPair, error) {
	id := req.Identity
	if id.Cluster == "" || id.Name == "" || (id.Role != RoleServer && id.Role != RoleClient) {
		return PEMPair{}, errors.New("pki: a certificate needs a cluster, a role (server or client) and a name")
	}
	if req.Validity <= 0 {
		return PEMPair{}, errors.New("pki: validity must be positive")
	}
	if err := CheckClusterName(id.Cluster); err != nil {
		return PEMPair{}, fmt.Errorf("pki: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEMPair{}, err
	}
	serial, err := newSerial()
	if err != nil {
		return PEMPair{}, err
	}
	now := time.Now()
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if id.Role == RoleServer {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	notAfter := now.Add(req.Validity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: id.Name, OrganizationalUnit: []string{id.Role}, Organization: []string{id.Cluster}},
		NotBefore:      now.Add(-5 * time.Minute),
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    usage,
		URIs:           []*url.URL{id.URI()},
		IPAddresses:    req.IPs,
		DNSNames:       req.DNSNames,
		SubjectKeyId:   keyID(&key.PublicKey),
		AuthorityKeyId: ca.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return PEMPair{}, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return PEMPair{}, err
	}
	return PEMPair{Cert: encodeCert(der), Key: keyPEM}, nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func keyID(pub *ecdsa.PublicKey) []byte {
	b, _ := x509.MarshalPKIXPublicKey(pub)
	sum := sha256.Sum256(b)
	return sum[:20]
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
