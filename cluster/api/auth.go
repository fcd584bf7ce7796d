package api

import (
	"context"
	"crypto/subtle"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
	"github.com/leasehold/leasehold/ui"
)

// Who may call what is decided in one place, authenticate, an HTTP
// middleware that runs before any handler and before any body is read.

// Role is what a credential may do.
type Role string

const (
	RoleAdmin     Role = "admin"     // everything
	RoleSubmitter Role = "submitter" // jobs, events, reads
	RoleWorker    Role = "worker"    // worker calls, fence checks, events, reads
)

// Grant is what a credential may do: its role, and for a worker the
// worker ids it may act as, for a submitter the submitter it acts as.
type Grant struct {
	Role Role
	// Workers (role worker): the worker ids this credential may act as,
	// each exact or a prefix ending in '*' ("*" alone: any worker).
	Workers []string
	// Submitter (role submitter): the submitter whose jobs it submits and
	// cancels ("*": any).
	Submitter string
}

// Token is one bearer token, the name it is audited under, and its grant.
type Token struct {
	Name   string
	Secret string
	Grant
}

// CertRole grants to client certificates whose identity name
// (transport.CertIdentity's Name, or the subject's common name for a
// certificate that names no leasehold identity) is Name.
type CertRole struct {
	Name string
	Grant
}

// Credentials are who may call the API. SetCredentials replaces them whole
// (SIGHUP). With none configured the API is open: every caller is admin.
type Credentials struct {
	Tokens []Token
	Certs  []CertRole
	// RequireClientCerts: the API's TLS requires a verified client
	// certificate. With it and no Certs, every verified certificate is
	// admin (the CA is the policy); otherwise a certificate must be listed.
	RequireClientCerts bool
}

// Enabled reports whether calls must be authenticated.
func (c Credentials) Enabled() bool {
	return len(c.Tokens) > 0 || len(c.Certs) > 0 || c.RequireClientCerts
}

// Identity is who a request acts as.
type Identity struct {
	Kind string // "token", "cert", or "open" when authentication is off
	Name string // the token's name or the certificate's identity name
	Grant
	Source string // the original caller's address
	// Via is the member that forwarded the request, if one did.
	Via string
}

// openGrant is what every caller may do when authentication is off.
var openGrant = Grant{Role: RoleAdmin}

// mayActAsWorker reports whether the identity may make calls in worker
// id's name.
func (id Identity) mayActAsWorker(worker string) bool {
	if id.Role == RoleAdmin {
		return true
	}
	if id.Role != RoleWorker {
		return false
	}
	for _, p := range id.Workers {
		if prefix, glob := strings.CutSuffix(p, "*"); glob && strings.HasPrefix(worker, prefix) || p == worker {
			return true
		}
	}
	return false
}

// mayActAsSubmitter reports whether the identity may submit or cancel in
// submitter's name.
func (id Identity) mayActAsSubmitter(submitter string) bool {
	switch id.Role {
	case RoleAdmin:
		return true
	case RoleSubmitter:
		return id.Submitter == "*" || id.Submitter == submitter
	}
	return false
}

// Actor names the identity in audit records.
func (id Identity) actor() cluster.Actor {
	name := id.Kind + ":" + id.Name
	if id.Via != "" {
		name += " via " + id.Via
	}
	return cluster.Actor{Name: name, Source: id.Source}
}

var (
	errUnauthenticated = fmt.Errorf("missing, unknown or unverified credentials")
	errForbidden       = fmt.Errorf("the credential's role may not call this")
	errPeerOnly        = fmt.Errorf("the peer port takes only requests forwarded by members")
	errRateLimited     = fmt.Errorf("the credential's request rate is exceeded")
	errNotYours        = fmt.Errorf("%w: the credential may not act as", errForbidden)
)

// Which services (and single procedures) each role may call. Admin may call
// everything, including the plain endpoints.
var roleAccess = map[Role][]string{
	RoleSubmitter: {
		"leasehold.v1.JobService", "leasehold.v1.EventService", "leasehold.v1.ScheduleService",
		"/leasehold.v1.WorkerService/ListWorkers", "/leasehold.v1.WorkerService/GetWorker", "/leasehold.v1.ClusterService/Status", "/leasehold.v1.ClusterService/Members",
	},
	RoleWorker: {
		"leasehold.v1.WorkerService", "leasehold.v1.EventService",
		"/leasehold.v1.JobService/GetJob", "/leasehold.v1.JobService/CheckFence", "/leasehold.v1.JobService/GetLease",
		"/leasehold.v1.ClusterService/Status", "/leasehold.v1.ClusterService/Members",
	},
}

// Plain endpoints: who may call them. Paths not listed are Connect
// procedures (roleAccess) or unknown (admin only, then 404).
var (
	openPaths   = map[string]bool{"/livez": true, "/readyz": true}
	anyRolePath = map[string]bool{"/metrics": true}
)

// isUIPath is the status page's files (package ui): static, with no data,
// so open like /livez.
func isUIPath(path string) bool { return path == "/ui" || strings.HasPrefix(path, ui.Prefix) }

func allowed(role Role, path string) bool {
	if role == RoleAdmin || anyRolePath[path] {
		return true
	}
	svc := procedureService(path)
	for _, a := range roleAccess[role] {
		if a == svc || a == path {
			return true
		}
	}
	return false
}

// adminOnly: a path no role but admin may call; refusals there are audited.
func adminOnly(path string) bool {
	return !allowed(RoleSubmitter, path) && !allowed(RoleWorker, path)
}

// Headers between members: a follower forwarding over the peer port vouches
// for the caller it authenticated, so the caller's secret never leaves the
// node it was sent to.
const (
	headerForwardedIdentity = "Leasehold-Forwarded-Identity" // kind:name
	headerForwardedSource   = "Leasehold-Forwarded-Source"
)

type requestKey struct{}

// request is what authenticate learned, for the handlers.
type request struct {
	id   Identity
	path string // the procedure called
	// forwarded: the request came from another member; it is not
	// forwarded again.
	forwarded bool
	// authorization is the caller's Authorization header, forwarded only
	// when the peer port is not authenticated (insecure mode).
	authorization string
	// body is the request's body: a heartbeat stream closes it to wake its
	// reader when the stream ends (a stream's body never ends by itself).
	body io.Closer
	// creds are the credentials id was resolved with, and reidentify
	// resolves the caller again with the current ones: a heartbeat stream
	// outlives a reload, and each beat acts with what the node allows now.
	creds      *credentials
	reidentify func() (request, error)
	// answers bounds how long a stream's next answers may take to write
	// (a client that never reads must not hold the stream forever).
	answers *http.ResponseController
	// batch holds a stream's flushes while a batch of answers is written,
	// so the batch leaves in one flush (answerWriter).
	batch *answerWriter
}

func requestOf(ctx context.Context) request {
	if r, ok := ctx.Value(requestKey{}).(*request); ok {
		return *r
	}
	return request{}
}

// requestContext is ctx carrying a call's request record (requestOf). It
// is one allocation where context.WithValue took two, its context and the
// record copied into an interface, on every call.
type requestContext struct {
	context.Context
	req request
}

func withRequest(ctx context.Context, req request) context.Context {
	return &requestContext{Context: ctx, req: req}
}

func (c *requestContext) Value(key any) any {
	if _, ok := key.(requestKey); ok {
		return &c.req
	}
	return c.Context.Value(key)
}

// identityOf returns who the request in ctx acts as.
func identityOf(ctx context.Context) Identity { return requestOf(ctx).id }

// authenticate wraps the API: it decides who the caller is and whether the
// role may call the path, before the handler runs and before anything of
// the body is read. A refusal is answered in the caller's protocol
// (Connect, gRPC, gRPC-Web, or JSON for plain endpoints).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPaths[r.URL.Path] || isUIPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		req, err := s.identify(r)
		if err == nil && !allowed(req.id.Role, r.URL.Path) {
			err = errForbidden
		}
		if err != nil {
			s.refused(r, req.id, err)
			s.writeRefusal(w, r, toWire(err))
			return
		}
		// Forwarded requests were counted by the member that took them.
		if !req.forwarded {
			if ok, wait := s.rates.take(req.id, time.Now()); !ok {
				s.writeRefusal(w, r, rateLimited(wait))
				return
			}
		}
		listed, err := s.limitBody(w, r)
		if err != nil {
			s.writeRefusal(w, r, toWire(err))
			return
		}
		if listed != nil {
			// Unlisted before the handler's writer is retired, so the
			// watch never cuts a stream whose handler has returned.
			defer s.watch.remove(listed)
		}
		req.path, req.body = r.URL.Path, r.Body
		if bodyStreams[r.URL.Path] {
			req.answers = http.NewResponseController(w)
			if f, ok := w.(http.Flusher); ok {
				req.batch = &answerWriter{ResponseWriter: w, flusher: f}
				w = req.batch
			}
			req.reidentify = s.reidentifier(r, req.path, req.body, req.answers, req.batch)
		}
		next.ServeHTTP(w, r.WithContext(withRequest(r.Context(), req)))
	})
}

// reidentifier returns a stream's reidentify: the caller resolved again with
// the node's current credentials. It is made apart from authenticate so
// that no closure there captures the request record, which would move it
// to the heap on every call, streaming or not (208 bytes a call).
func (s *Server) reidentifier(r *http.Request, path string, body io.Closer, answers *http.ResponseController, batch *answerWriter) func() (request, error) {
	var again func() (request, error)
	again = func() (request, error) {
		req, err := s.identify(r)
		if err == nil && !allowed(req.id.Role, path) {
			err = errForbidden
		}
		req.path, req.body, req.answers, req.batch, req.reidentify = path, body, answers, batch, again
		return req, err
	}
	return again
}

// identify authenticates r. On the public port: a bearer token, else a
// verified client certificate. On the peer port: a forwarded request whose
// sender, an authenticated member, vouches for the caller; without peer
// TLS the caller's own credentials, forwarded, are checked like any.
func (s *Server) identify(r *http.Request) (request, error) {
	creds := s.creds.Load()
	source := r.RemoteAddr
	peer, viaPeer := transport.PeerFromContext(r.Context())
	req := request{id: Identity{Source: source}, creds: creds}
	if viaPeer {
		if r.Header.Get(transport.HeaderForwarded) == "" {
			return req, errPeerOnly
		}
		req.forwarded = true
		if src := r.Header.Get(headerForwardedSource); src != "" {
			req.id.Source = src
		}
		if peer.Authenticated {
			req.id.Via = peer.NodeID()
			if !creds.Enabled() {
				req.id.Kind, req.id.Name, req.id.Grant = "open", "anonymous", openGrant
				return req, nil
			}
			kind, name, ok := strings.Cut(r.Header.Get(headerForwardedIdentity), ":")
			if !ok {
				return req, errUnauthenticated
			}
			g, ok := creds.grantOf(kind, name)
			if !ok {
				return req, errUnauthenticated
			}
			req.id.Kind, req.id.Name, req.id.Grant = kind, name, g
			return req, nil
		}
	}
	if !creds.Enabled() {
		req.id.Kind, req.id.Name, req.id.Grant = "open", "anonymous", openGrant
		return req, nil
	}
	if auth := r.Header.Get(transport.HeaderAuthorization); auth != "" {
		secret, ok := strings.CutPrefix(auth, "Bearer ")
		t, found := creds.token(secret)
		if !ok || !found {
			return req, errUnauthenticated
		}
		req.id.Kind, req.id.Name, req.id.Grant = "token", t.Name, t.Grant
		req.authorization = auth
		return req, nil
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		// The handshake verified the chain (TLSMaterial.APIServerConfig).
		name := s.certName(r.TLS.PeerCertificates[0])
		g, ok := creds.grantOf("cert", name)
		if !ok {
			return req, errUnauthenticated
		}
		req.id.Kind, req.id.Name, req.id.Grant = "cert", name, g
		return req, nil
	}
	return req, errUnauthenticated
}

// credentials is Credentials prepared for lookups.
type credentials struct {
	Credentials
	certs map[string]Grant
}

func newCredentials(c Credentials) *credentials {
	out := &credentials{Credentials: c, certs: map[string]Grant{}}
	for _, cr := range c.Certs {
		out.certs[cr.Name] = cr.Grant
	}
	return out
}

// token finds the token with this secret, comparing every one in constant
// time.
func (c *credentials) token(secret string) (Token, bool) {
	var found Token
	ok := false
	for _, t := range c.Tokens {
		if subtle.ConstantTimeCompare([]byte(t.Secret), []byte(secret)) == 1 {
			found, ok = t, true
		}
	}
	return found, ok && secret != ""
}

// grantOf resolves an identity by name: the grant this node's own
// configuration gives it.
func (c *credentials) grantOf(kind, name string) (Grant, bool) {
	switch kind {
	case "token":
		for _, t := range c.Tokens {
			if t.Name == name {
				return t.Grant, true
			}
		}
	case "cert":
		if g, ok := c.certs[name]; ok {
			return g, true
		}
		if len(c.certs) == 0 && c.RequireClientCerts && name != "" {
			return Grant{Role: RoleAdmin}, true
		}
	}
	return Grant{}, false
}

// refused audits a refused call to an admin-only path.
func (s *Server) refused(r *http.Request, id Identity, err error) {
	if !adminOnly(r.URL.Path) {
		return
	}
	host, _, _ := net.SplitHostPort(id.Source)
	who := id.Kind + ":" + id.Name
	if id.Kind == "" {
		who = "unauthenticated"
	}
	if !s.refusals.Allow(host+"|"+who+"|"+r.URL.Path, time.Now()) {
		return
	}
	actor := id.actor()
	if id.Kind == "" {
		actor.Name = who
	}
	s.node.AuditAsync(cluster.AuditOf(actor, "auth.refused", r.Method+" "+r.URL.Path+": "+err.Error()))
}

// writeRefusal answers a refused request in its own protocol.
func (s *Server) writeRefusal(w http.ResponseWriter, r *http.Request, err error) {
	s.stats.refused(err)
	if s.errw.IsSupported(r) {
		s.errw.Write(w, r, err)
		return
	}
	writeError(w, err)
}

// forwardHeaders sets what the leader needs to know who the caller is: the
// identity this node vouches for when the peer port is authenticated, the
// caller's own credentials otherwise. ok is false when neither can be sent
// (a certificate identity over an unauthenticated peer port): the caller
// must then go to the leader itself.
func (s *Server) forwardHeaders(ctx context.Context, h http.Header) (ok bool) {
	req := requestOf(ctx)
	h.Set(transport.HeaderForwarded, "1")
	h.Del(transport.HeaderAuthorization)
	h.Del(headerForwardedIdentity)
	h.Set(headerForwardedSource, req.id.Source)
	switch {
	case s.node.PeerTLS():
		if req.id.Kind != "open" {
			h.Set(headerForwardedIdentity, req.id.Kind+":"+req.id.Name)
		}
		return true
	case req.authorization != "":
		h.Set(transport.HeaderAuthorization, req.authorization)
		return true
	default:
		return req.id.Kind == "open"
	}
}

// certName is the name a client certificate is known by: its leasehold
// identity's name when it names one of this cluster, its common name
// otherwise.
func (s *Server) certName(cert *x509.Certificate) string {
	if id, err := transport.IdentityOf(cert); err == nil && id.Cluster == s.cluster {
		return id.Name
	}
	return cert.Subject.CommonName
}

// auditRecord is the audit record of an action by id.
func auditRecord(id Identity, action, detail string) fsm.Audit {
	return cluster.AuditOf(id.actor(), action, detail)
}

// actAsWorker refuses, and audits, a call in the name of a worker the
// caller's credential does not name.
func (s *Server) actAsWorker(ctx context.Context, worker string) error {
	id := identityOf(ctx)
	if id.mayActAsWorker(worker) {
		return nil
	}
	return s.denied(ctx, fmt.Errorf("%w worker %q", errNotYours, worker))
}

// actAsSubmitter refuses, and audits, a submit or cancel in the name of a
// submitter the caller's credential is not.
func (s *Server) actAsSubmitter(ctx context.Context, submitter string) error {
	id := identityOf(ctx)
	if id.mayActAsSubmitter(submitter) {
		return nil
	}
	return s.denied(ctx, fmt.Errorf("%w submitter %q", errNotYours, submitter))
}

// actAsEverySubmitter refuses, and audits, a call that reaches the jobs
// of every submitter (a purge by queue or age) from a credential scoped
// to one submitter: only an admin or a submitter credential for "*".
func (s *Server) actAsEverySubmitter(ctx context.Context, what string) error {
	if identityOf(ctx).mayActAsSubmitter("*") {
		return nil
	}
	return s.denied(ctx, fmt.Errorf("%w every submitter (%s)", errNotYours, what))
}

// denied audits a refusal to act in another's name (at the refusals' rate:
// one per source host, identity, call and target a window) and returns
// err.
func (s *Server) denied(ctx context.Context, err error) error {
	req := requestOf(ctx)
	host, _, _ := net.SplitHostPort(req.id.Source)
	what := req.path + ": " + err.Error()
	if s.refusals.Allow(host+"|"+req.id.Kind+":"+req.id.Name+"|"+what, time.Now()) {
		s.node.AuditAsync(cluster.AuditOf(req.id.actor(), "auth.denied", what))
	}
	return err
}
