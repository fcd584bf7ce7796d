package api

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/transport"
)

// Which services (and single procedures) each role may call. Admin may call
// everything, including the plain snapshot endpoints.
var roleAccess = map[Role][]string{
	RoleSubmitter: {
		"leasehold.v1.JobService", "leasehold.v1.EventService",
		"/leasehold.v1.WorkerService/ListWorkers", "/leasehold.v1.ClusterService/Status", "/leasehold.v1.ClusterService/Members",
	},
	RoleWorker: {
		"leasehold.v1.WorkerService", "leasehold.v1.EventService",
		"/leasehold.v1.JobService/GetJob", "/leasehold.v1.JobService/CheckFence", "/leasehold.v1.JobService/GetLease",
		"/leasehold.v1.ClusterService/Status", "/leasehold.v1.ClusterService/Members",
	},
}

func allowed(role Role, procedure string) bool {
	if role == RoleAdmin {
		return true
	}
	svc := procedureService(procedure)
	for _, a := range roleAccess[role] {
		if a == svc || a == procedure {
			return true
		}
	}
	return false
}

// roleOf authenticates a request's bearer token. Tokens are compared in
// constant time and never logged.
func (s *Server) roleOf(h http.Header) (Role, bool) {
	v := h.Get(transport.HeaderAuthorization)
	token, ok := strings.CutPrefix(v, "Bearer ")
	if !ok || token == "" {
		return "", false
	}
	var found Role
	for t, role := range s.tokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			found = role
		}
	}
	return found, found != ""
}

func (s *Server) check(h http.Header, procedure string) error {
	if len(s.tokens) == 0 {
		return nil
	}
	role, ok := s.roleOf(h)
	if !ok {
		return toWire(errUnauthenticated)
	}
	if !allowed(role, procedure) {
		return toWire(errForbidden)
	}
	return nil
}

func (s *Server) authInterceptor() connect.Interceptor { return authInterceptor{s} }

type authInterceptor struct{ s *Server }

func (a authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := a.s.check(req.Header(), req.Spec().Procedure); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (a authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := a.s.check(conn.RequestHeader(), conn.Spec().Procedure); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// allowHTTP guards the plain endpoints that change or dump the whole state:
// admin only.
func (s *Server) allowHTTP(w http.ResponseWriter, r *http.Request) bool {
	if err := s.check(r.Header, "/leasehold.v1.Admin/Snapshot"); err != nil {
		writeError(w, err)
		return false
	}
	return true
}
