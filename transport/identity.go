package transport

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Certificates name who holds them with one URI SAN:
//
//	leasehold://<cluster>/server/<node-id>   a server (node) of the cluster
//	leasehold://<cluster>/client/<name>      an API client (worker, executor, operator)
//
// The peer port accepts only the first kind, for its own cluster; the node id
// in it is the only id that connection may speak for. Both parts are
// path-escaped, so any node id or name fits.
const (
	identityScheme = "leasehold"
	RoleServer     = "server"
	RoleClient     = "client"
	// DefaultClusterName is the cluster name certificates carry when the
	// operator does not choose one.
	DefaultClusterName = "leasehold"
)

// CheckClusterName reports whether name can be a cluster's name. The
// cluster is the host of the identity URI, and x509 parses that host as a
// domain name: a name outside the rule (a space, a colon, a non-ASCII
// letter) makes certificates nobody can parse. The rule: labels of ASCII
// letters, digits, '-' and '_', joined by single dots.
func CheckClusterName(name string) error {
	if name == "" {
		return errors.New("the cluster name is empty")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" {
			return fmt.Errorf("cluster name %q: an empty label (a leading, trailing or doubled dot)", name)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return fmt.Errorf("cluster name %q: %q is not allowed (letters, digits, '-', '_' and dots between)", name, r)
			}
		}
	}
	return nil
}

// CertIdentity is who a certificate says its holder is.
type CertIdentity struct {
	Cluster string
	Role    string // RoleServer or RoleClient
	Name    string // the node id for a server, the client's name otherwise
}

// URI is the identity as a URI SAN.
func (id CertIdentity) URI() *url.URL {
	return &url.URL{Scheme: identityScheme, Host: id.Cluster,
		Path:    "/" + id.Role + "/" + id.Name,
		RawPath: "/" + id.Role + "/" + url.PathEscape(id.Name)}
}

func (id CertIdentity) String() string { return id.URI().String() }

// ServerIdentity is the identity of node id in cluster.
func ServerIdentity(cluster, id string) CertIdentity {
	return CertIdentity{Cluster: cluster, Role: RoleServer, Name: id}
}

// ClientIdentity is the identity of an API client called name in cluster.
func ClientIdentity(cluster, name string) CertIdentity {
	return CertIdentity{Cluster: cluster, Role: RoleClient, Name: name}
}

// ParseIdentityURI reads a leasehold identity URI. Anything else, or one
// with extra parts, is refused.
func ParseIdentityURI(u *url.URL) (CertIdentity, error) {
	if u == nil || u.Scheme != identityScheme || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return CertIdentity{}, fmt.Errorf("%v is not a leasehold identity URI", u)
	}
	rest, ok := strings.CutPrefix(u.EscapedPath(), "/")
	if !ok {
		return CertIdentity{}, fmt.Errorf("%v has no role", u)
	}
	role, escName, ok := strings.Cut(rest, "/")
	if !ok || (role != RoleServer && role != RoleClient) || escName == "" || strings.Contains(escName, "/") {
		return CertIdentity{}, fmt.Errorf("%v: want leasehold://<cluster>/server|client/<name>", u)
	}
	name, err := url.PathUnescape(escName)
	if err != nil {
		return CertIdentity{}, fmt.Errorf("%v: %w", u, err)
	}
	return CertIdentity{Cluster: u.Host, Role: role, Name: name}, nil
}

// IdentityOf returns the one leasehold identity a certificate names. A
// certificate naming none, or more than one, has no identity: it cannot
// speak for anybody.
func IdentityOf(cert *x509.Certificate) (CertIdentity, error) {
	var found []CertIdentity
	for _, u := range cert.URIs {
		if u.Scheme != identityScheme {
			continue
		}
		id, err := ParseIdentityURI(u)
		if err != nil {
			return CertIdentity{}, err
		}
		found = append(found, id)
	}
	switch len(found) {
	case 0:
		return CertIdentity{}, fmt.Errorf("certificate %q names no leasehold identity (a URI SAN leasehold://<cluster>/<role>/<name>)", cert.Subject.CommonName)
	case 1:
		return found[0], nil
	default:
		return CertIdentity{}, fmt.Errorf("certificate %q names %d leasehold identities; it must name one", cert.Subject.CommonName, len(found))
	}
}
