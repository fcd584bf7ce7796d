package api

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/transport"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// Role is what a bearer token may do.
type Role string

const (
	RoleAdmin     Role = "admin"     // everything
	RoleSubmitter Role = "submitter" // jobs, events, reads
	RoleWorker    Role = "worker"    // worker calls, fence checks, events, reads
)

// Options configure a Server.
type Options struct {
	Node *cluster.Node
	// Tokens enables bearer-token authentication: token -> role. Empty:
	// no authentication.
	Tokens map[string]Role
	// Forward is the HTTP client used to forward requests to the leader;
	// nil: a default client (plain HTTP, or ForwardTLS).
	Forward    *http.Client
	ForwardTLS *tls.Config
	Logger     hclog.Logger
}

// Server is a node's API: the Connect services of transport/proto (which
// also speak gRPC and gRPC-Web), /v1/snapshot, /livez and /readyz, all on
// one HTTP handler.
type Server struct {
	node   *cluster.Node
	log    hclog.Logger
	tokens map[string]Role
	client *http.Client
	scheme string

	mu    sync.Mutex
	peers map[string]*peerClients // by leader API address
}

// NewServer returns the API of a node.
func NewServer(o Options) *Server {
	s := &Server{node: o.Node, log: o.Logger, tokens: o.Tokens, client: o.Forward, scheme: "http", peers: map[string]*peerClients{}}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	s.log = s.log.Named("api")
	if o.ForwardTLS != nil {
		s.scheme = "https"
	}
	if s.client == nil {
		// HTTP/2 (h2c without TLS): every forwarded call shares one
		// connection to the leader.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = o.ForwardTLS
		tr.Protocols = new(http.Protocols)
		if o.ForwardTLS == nil {
			tr.Protocols.SetUnencryptedHTTP2(true)
		} else {
			tr.Protocols.SetHTTP2(true)
		}
		s.client = &http.Client{Transport: tr}
	}
	return s
}

// Handler serves every endpoint of the API.
func (s *Server) Handler() http.Handler {
	opts := connect.WithInterceptors(s.authInterceptor(), s.leaderHint())
	mux := http.NewServeMux()
	mux.Handle(leaseholdv1connect.NewJobServiceHandler(jobService{s}, opts))
	mux.Handle(leaseholdv1connect.NewWorkerServiceHandler(workerService{s}, opts))
	mux.Handle(leaseholdv1connect.NewEventServiceHandler(eventService{s}, opts))
	mux.Handle(leaseholdv1connect.NewClusterServiceHandler(clusterService{s}, opts))
	mux.HandleFunc("GET /v1/snapshot", s.saveSnapshot)
	mux.HandleFunc("PUT /v1/snapshot", s.restoreSnapshot)
	mux.HandleFunc("GET /livez", s.livez)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /metrics", s.metrics)
	return mux
}

// peerClients are Connect clients of one other node's API.
type peerClients struct {
	jobs    leaseholdv1connect.JobServiceClient
	workers leaseholdv1connect.WorkerServiceClient
	events  leaseholdv1connect.EventServiceClient
	cluster leaseholdv1connect.ClusterServiceClient
	base    string
}

func (s *Server) peer(addr string) *peerClients {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peers[addr]
	if p == nil {
		base := s.scheme + "://" + addr
		p = &peerClients{
			jobs:    leaseholdv1connect.NewJobServiceClient(s.client, base),
			workers: leaseholdv1connect.NewWorkerServiceClient(s.client, base),
			events:  leaseholdv1connect.NewEventServiceClient(s.client, base),
			cluster: leaseholdv1connect.NewClusterServiceClient(s.client, base),
			base:    base,
		}
		s.peers[addr] = p
	}
	return p
}

// leaderFor returns the leader's clients when err says this node is not the
// leader, the leader's API address is known, and the request has not been
// forwarded already: a request takes at most one hop.
func (s *Server) leaderFor(h http.Header, err error) *peerClients {
	var nl *cluster.NotLeaderError
	if !errors.As(err, &nl) || nl.LeaderAPI == "" || h.Get(transport.HeaderForwarded) != "" {
		return nil
	}
	return s.peer(nl.LeaderAPI)
}

// forward sends a request on to the leader, marked as forwarded, with the
// caller's credentials.
func forward[Req, Res any](ctx context.Context, req *connect.Request[Req],
	call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) (*connect.Response[Res], error) {
	out := connect.NewRequest(req.Msg)
	out.Header().Set(transport.HeaderForwarded, "1")
	if a := req.Header().Get(transport.HeaderAuthorization); a != "" {
		out.Header().Set(transport.HeaderAuthorization, a)
	}
	return call(ctx, out)
}

// leaderHint sets the leader's API address on every response, so clients
// move to the leader after one call.
func (s *Server) leaderHint() connect.Interceptor { return hintInterceptor{s} }

type hintInterceptor struct{ s *Server }

func (h hintInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if _, api := h.s.node.Leader(); api != "" {
			var cerr *connect.Error
			switch {
			case err == nil && res != nil:
				res.Header().Set(transport.HeaderLeader, api)
			case errors.As(err, &cerr):
				cerr.Meta().Set(transport.HeaderLeader, api)
			}
		}
		return res, err
	}
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

// HTTPServer serves the API on a listener.
type HTTPServer struct {
	srv    *http.Server
	cancel context.CancelFunc
	done   chan error
}

// Serve starts serving h on ln: TLS when tlsConf is set, otherwise HTTP/1.1
// and HTTP/2 without TLS (h2c), so gRPC clients work too.
func Serve(ln net.Listener, h http.Handler, tlsConf *tls.Config) *HTTPServer {
	base, cancel := context.WithCancel(context.Background())
	srv := &http.Server{Handler: h, TLSConfig: tlsConf, BaseContext: func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	if tlsConf == nil {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP2(true)
	}
	srv.Protocols = &protocols
	hs := &HTTPServer{srv: srv, cancel: cancel, done: make(chan error, 1)}
	go func() {
		var err error
		if tlsConf != nil {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		hs.done <- err
	}()
	return hs
}

// Shutdown stops accepting and ends every request in flight: long polls
// and event streams return at once, answered SHUTTING_DOWN so clients retry
// another node, then it waits, bounded by ctx, for handlers to finish.
func (h *HTTPServer) Shutdown(ctx context.Context) error {
	h.cancel()
	err := h.srv.Shutdown(ctx)
	if err != nil {
		h.srv.Close()
	}
	if serr := <-h.done; err == nil {
		err = serr
	}
	return err
}

// procedureService returns "leasehold.v1.JobService" from a procedure name.
func procedureService(procedure string) string {
	p := strings.TrimPrefix(procedure, "/")
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return p
}
