package api

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
	"github.com/leasehold/leasehold/ui"
)

// Options configure a Server.
type Options struct {
	Node *cluster.Node
	// Credentials turn on authentication; none: every caller is admin.
	Credentials Credentials
	// Cluster is the cluster name client certificates' identities must
	// carry to be known by their leasehold name (transport.CertIdentity).
	// Default: transport.DefaultClusterName.
	Cluster string
	// Insecure: the node runs without peer TLS or API authentication
	// because its operator said so; /readyz and Status say it.
	Insecure bool
	// Limits bound requests, connections and rates; the zero value means
	// DefaultLimits.
	Limits Limits
	// Pprof serves Go's profiles at /debug/pprof/, to admins only.
	Pprof bool
	// HeapDump serves a dump of the node's heap at /debug/heapdump, to
	// admins only, and with authentication off only to callers on the
	// node's own host: the dump holds every secret the process does.
	HeapDump bool
	// HostNames are the names (beyond IP addresses and localhost) a
	// request may call this node by while the API has no authentication:
	// its advertised API host, say (see guardHost).
	HostNames []string
	Logger    hclog.Logger
}

// Server is a node's API: the Connect services of transport/proto (which
// also speak gRPC and gRPC-Web), /v1/snapshot, /livez, /readyz and
// /metrics, all on one HTTP handler behind one authentication layer.
type Server struct {
	node     *cluster.Node
	stats    *apiMetrics
	log      hclog.Logger
	creds    atomic.Pointer[credentials]
	cluster  string
	insecure bool
	pprof    bool
	heapDump bool            // Options.HeapDump
	names    map[string]bool // Options.HostNames, lower case
	refusals *cluster.RefusalLimiter
	limits   Limits
	rates    *rates
	bodies   bodyBytes
	watch    *bodyWatch             // HTTP/2 bodies' deadlines; nil when not timed
	conns    *transport.ConnLimiter // set by Serve
	errw     *connect.ErrorWriter
	client   *http.Client // to other members, over the peer port
	// timingsPB is the node's timings as every heartbeat and registration
	// answer carries them; shared, never changed.
	timingsPB *pb.Timings
	// hint is the last leader hint's header value, shared by the responses
	// that carry it (never changed once stored).
	hint atomic.Pointer[[]string]

	mu    sync.Mutex
	peers map[string]*peerClients // by leader Raft address
}

// NewServer returns the API of a node.
func NewServer(o Options) *Server {
	limits := o.Limits
	if limits == (Limits{}) {
		limits = DefaultLimits()
	}
	s := &Server{node: o.Node, log: o.Logger, cluster: o.Cluster, insecure: o.Insecure, pprof: o.Pprof, heapDump: o.HeapDump, refusals: cluster.NewRefusalLimiter(),
		limits: limits, rates: newRates(limits), watch: newBodyWatch(limits.BodyTimeout), errw: connect.NewErrorWriter(), peers: map[string]*peerClients{}, names: map[string]bool{}}
	for _, n := range o.HostNames {
		s.names[strings.ToLower(n)] = true
	}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	if s.cluster == "" {
		s.cluster = transport.DefaultClusterName
	}
	s.log = s.log.Named("api")
	s.timingsPB = timingsToProto(s.node.Timings())
	s.creds.Store(newCredentials(o.Credentials))
	s.stats = newAPIMetrics(s.node.Registerer())
	// HTTP/2 over the peer port's API connections (TLS, when on, is the
	// peer port's): every forwarded call shares one connection per leader.
	tr := &http.Transport{
		DialContext:     func(ctx context.Context, _, addr string) (net.Conn, error) { return s.node.DialPeerAPI(ctx, addr) },
		Protocols:       new(http.Protocols),
		IdleConnTimeout: 90 * time.Second,
	}
	tr.Protocols.SetUnencryptedHTTP2(true)
	s.client = &http.Client{Transport: forwarder{s: s, next: tr}}
	return s
}

// SetCredentials replaces who may call the API (for SIGHUP); calls in
// flight keep what they were admitted with.
func (s *Server) SetCredentials(c Credentials) { s.creds.Store(newCredentials(c)) }

// compressMinBytes is the smallest answer worth compressing for a client
// that accepts it: job lists and event pages, not single calls.
const compressMinBytes = 16 << 10

// Handler serves every endpoint of the API.
func (s *Server) Handler() http.Handler {
	opts := connect.WithHandlerOptions(connect.WithInterceptors(s.leaderHint()), strictDecoding(),
		connect.WithCompression("gzip", s.newDecompressor, func() connect.Compressor { return gzip.NewWriter(nil) }),
		// Answers are mostly a few hundred bytes: compressing them costs
		// more CPU than it saves (a fifth of the leader's under load).
		connect.WithCompressMinBytes(compressMinBytes))
	mux := http.NewServeMux()
	calls := newRouter(mux)
	calls.handle(leaseholdv1connect.NewJobServiceHandler(jobService{s}, opts))
	calls.handle(leaseholdv1connect.NewWorkerServiceHandler(workerService{s}, opts))
	calls.handle(s.heartbeatStreamHandler(opts)) // the whole path wins
	calls.handle(leaseholdv1connect.NewEventServiceHandler(eventService{s}, opts))
	calls.handle(leaseholdv1connect.NewClusterServiceHandler(clusterService{s}, opts))
	calls.handle(leaseholdv1connect.NewQueueServiceHandler(queueService{s}, opts))
	calls.handle(leaseholdv1connect.NewScheduleServiceHandler(scheduleService{s}, opts))
	mux.HandleFunc("GET /v1/snapshot", s.saveSnapshot)
	mux.HandleFunc("PUT /v1/snapshot", s.restoreSnapshot)
	mux.HandleFunc("GET /livez", s.livez)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /metrics", s.metrics)
	// The status page: its files are open (they hold no data); the calls
	// it makes need the same credentials as any other.
	mux.Handle(ui.Prefix, ui.Handler())
	mux.Handle("GET /ui", http.RedirectHandler(ui.Prefix, http.StatusMovedPermanently))
	if s.pprof {
		// Admin only: no role but admin may call a path authenticate
		// does not know.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if s.heapDump {
		mux.HandleFunc("/debug/heapdump", s.serveHeapDump) // admin only, as the profiles
	}
	// authenticate unlists a body from the watch when the handler below it
	// returns, before net/http retires the stream: nothing above it may
	// return earlier (bodywatch.go). Serve runs the watch; a handler served
	// otherwise does not cut slow HTTP/2 bodies.
	return grownStack(s.guardHost(s.authenticate(calls)))
}

// router finds a call's handler by a map lookup of its path, or of the
// path's service ("/leasehold.v1.JobService/"), and leaves every other
// path to the mux, where each service is registered too. The mux's own
// lookup of a path under a pattern that ends in "/" allocated three times
// on every call: it walks its tree twice (the second time to see whether
// the path with a slash added would match exactly), and its walk
// allocates at each segment that no literal matches.
type router struct {
	paths    map[string]http.Handler // whole paths
	services map[string]http.Handler // "/leasehold.v1.JobService/"
	mux      *http.ServeMux
}

func newRouter(mux *http.ServeMux) *router {
	return &router{paths: map[string]http.Handler{}, services: map[string]http.Handler{}, mux: mux}
}

// handle registers a Connect service (its pattern ends in "/") or one
// procedure of it (a whole path). Any other pattern under a service's
// prefix must be registered here too: the router would hide it in the
// mux.
func (rt *router) handle(pattern string, h http.Handler) {
	rt.mux.Handle(pattern, h)
	if strings.HasSuffix(pattern, "/") {
		rt.services[pattern] = h
	} else {
		rt.paths[pattern] = h
	}
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if r.URL.RawPath != "" || strings.Contains(path, "//") || strings.Contains(path, "/.") {
		// An escaped slash, or a path the mux cleans (it redirects to
		// the clean path): the mux decides, as it always did.
		rt.mux.ServeHTTP(w, r)
		return
	}
	if h, ok := rt.paths[path]; ok {
		h.ServeHTTP(w, r)
		return
	}
	if len(path) > 1 && path[0] == '/' {
		if i := strings.IndexByte(path[1:], '/'); i >= 0 {
			if h, ok := rt.services[path[:i+2]]; ok {
				h.ServeHTTP(w, r)
				return
			}
		}
	}
	rt.mux.ServeHTTP(w, r)
}

// peerClients are Connect clients of one other node's API, reached over
// the peer port.
type peerClients struct {
	jobs    leaseholdv1connect.JobServiceClient
	workers leaseholdv1connect.WorkerServiceClient
	events  leaseholdv1connect.EventServiceClient
	cluster leaseholdv1connect.ClusterServiceClient
	queues  leaseholdv1connect.QueueServiceClient
	base    string
	// schedules is the schedule service's client.
	schedules leaseholdv1connect.ScheduleServiceClient
}

func (s *Server) peer(raftAddr string) *peerClients {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peers[raftAddr]
	if p == nil {
		base := "http://" + raftAddr
		p = &peerClients{
			jobs:    leaseholdv1connect.NewJobServiceClient(s.client, base),
			workers: leaseholdv1connect.NewWorkerServiceClient(s.client, base),
			events:  leaseholdv1connect.NewEventServiceClient(s.client, base),
			cluster: leaseholdv1connect.NewClusterServiceClient(s.client, base),
			queues:  leaseholdv1connect.NewQueueServiceClient(s.client, base),
			base:    base,
		}
		p.schedules = leaseholdv1connect.NewScheduleServiceClient(s.client, base)
		s.peers[raftAddr] = p
	}
	return p
}

// leaderFor returns the leader's clients when err says this node is not the
// leader, the leader is a voter, the request was not forwarded already (a
// request takes at most one hop), and the caller's identity can travel
// with it. Otherwise the handler answers err, which names the leader, and
// the client goes there itself.
func (s *Server) leaderFor(ctx context.Context, err error) *peerClients {
	if err == nil {
		return nil // before nl, which errors.As makes escape: a call that worked allocates nothing here
	}
	var nl *cluster.NotLeaderError
	if !errors.As(err, &nl) || nl.LeaderRaft == "" {
		return nil
	}
	req := requestOf(ctx)
	if req.forwarded || !s.forwardHeaders(ctx, http.Header{}) {
		return nil
	}
	return s.peer(nl.LeaderRaft)
}

// forwarder sets the forwarding headers (Server.forwardHeaders) on every
// request to another member, from the caller's request in the context.
type forwarder struct {
	s    *Server
	next http.RoundTripper
}

func (f forwarder) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	f.s.forwardHeaders(r.Context(), r.Header)
	return f.next.RoundTrip(r)
}

// leaderHint sets the leader's API address on every response, so clients
// move to the leader after one call.
func (s *Server) leaderHint() connect.Interceptor { return hintInterceptor{s} }

type hintInterceptor struct{ s *Server }

func (h hintInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if err != nil {
			h.s.stats.refused(err)
		}
		if _, api := h.s.node.Leader(); api != "" {
			switch {
			case err == nil && res != nil:
				res.Header()[transport.HeaderLeader] = h.s.hintValue(api)
			case err != nil:
				// cerr here, not above: errors.As makes it escape, and a
				// call that worked should not pay for it.
				var cerr *connect.Error
				if errors.As(err, &cerr) {
					cerr.Meta().Set(transport.HeaderLeader, api)
				}
			}
		}
		return res, err
	}
}

// hintValue is the header value naming api, the same slice for every
// response while the leader's address stays (a response only reads it),
// so a hint costs no allocation.
func (s *Server) hintValue(api string) []string {
	if v := s.hint.Load(); v != nil && (*v)[0] == api {
		return *v
	}
	v := []string{api}
	s.hint.Store(&v)
	return v
}

func (h hintInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (h hintInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if _, api := h.s.node.Leader(); api != "" {
			conn.ResponseHeader().Set(transport.HeaderLeader, api)
		}
		return next(ctx, conn)
	}
}

// MaxSnapshotBytes bounds a restore's body: it is written to the data dir,
// beside the Raft log, before it is checked.
const MaxSnapshotBytes = 16 << 30

// HTTPServer serves the API on the public port and on the node's peer
// port (requests other members forward).
type HTTPServer struct {
	public, peer *http.Server
	cancel       context.CancelFunc
	done         chan error
	watch        *bodyWatch
	unwatch      sync.Once // this Serve's start of the watch, undone once
}

// Serve starts serving s on ln, TLS when tlsConf is set, otherwise HTTP/1.1
// and HTTP/2 without TLS (h2c) so gRPC clients work too; and on the node's
// peer port, where requests arrive over the peer port's own TLS.
func Serve(s *Server, ln net.Listener, tlsConf *tls.Config) *HTTPServer {
	h := s.Handler()
	base, cancel := context.WithCancel(context.Background())
	newServer := func(plainH2 bool) *http.Server {
		srv := &http.Server{Handler: h, BaseContext: func(net.Listener) context.Context { return base },
			ReadHeaderTimeout: s.limits.HeaderTimeout, IdleTimeout: s.limits.IdleTimeout,
			// Set by the server as each request arrives, at no cost to an
			// HTTP/2 call (limitBody lifts it where it does not apply).
			WriteTimeout: s.limits.WriteTimeout}
		var protocols http.Protocols
		protocols.SetHTTP1(true)
		if plainH2 {
			protocols.SetUnencryptedHTTP2(true)
		} else {
			protocols.SetHTTP2(true)
		}
		srv.Protocols = &protocols
		return srv
	}
	hs := &HTTPServer{public: newServer(tlsConf == nil), peer: newServer(true), cancel: cancel, done: make(chan error, 2), watch: s.watch}
	if hs.watch != nil {
		hs.watch.start()
	}
	hs.public.TLSConfig = tlsConf
	hs.peer.ConnContext = transport.ContextWithPeer
	s.conns = transport.LimitListener(ln, s.limits.MaxConns, s.limits.MaxConnsPerHost)
	ln = s.conns
	if tlsConf == nil {
		ln = bufferedListener{ln}
	}
	go func() {
		var err error
		if tlsConf != nil {
			err = hs.public.ServeTLS(ln, "", "")
		} else {
			err = hs.public.Serve(ln)
		}
		hs.done <- err
	}()
	go func() { hs.done <- hs.peer.Serve(s.node.PeerAPIListener()) }()
	return hs
}

// Shutdown stops accepting and ends every request in flight: long polls
// and event streams return at once, answered SHUTTING_DOWN so clients retry
// another node, then it waits, bounded by ctx, for handlers to finish.
func (h *HTTPServer) Shutdown(ctx context.Context) error {
	h.cancel()
	var errs []error
	for _, srv := range []*http.Server{h.public, h.peer} {
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
			errs = append(errs, err)
		}
	}
	for range 2 {
		if err := <-h.done; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if h.watch != nil {
		h.unwatch.Do(h.watch.close)
	}
	return errors.Join(errs...)
}

// procedureService returns "leasehold.v1.JobService" from a procedure name.
func procedureService(procedure string) string {
	p := strings.TrimPrefix(procedure, "/")
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return p
}
