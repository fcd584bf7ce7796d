package api

import (
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold/transport"
)

// apiMetrics count what the API answers; the node's registry takes them,
// so /metrics serves them with the node's (docs/metrics.md).
type apiMetrics struct {
	forwards *prometheus.CounterVec
	refusals *prometheus.CounterVec
}

func newAPIMetrics(reg prometheus.Registerer) *apiMetrics {
	m := &apiMetrics{
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_api_forwards_total",
			Help: "Calls this node sent to the leader because only the leader could answer them, by kind (write or read).",
		}, []string{"kind"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_api_refusals_total",
			Help: "Calls this node answered with an error, by reason (NOT_LEADER, UNAUTHENTICATED, RATE_LIMITED, STALE_TOKEN, ...).",
		}, []string{"reason"}),
	}
	m.forwards = register(reg, m.forwards)
	m.refusals = register(reg, m.refusals)
	return m
}

// register registers c, or returns the collector already registered under
// its name (a node serves one API server; a test may build two).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(C); ok {
				return old
			}
		}
	}
	return c
}

// refused counts an error answer by its reason.
func (m *apiMetrics) refused(err error) {
	reason := "INTERNAL"
	if d := transport.DetailOf(err); d != nil && d.GetReason() != "" {
		reason = d.GetReason()
	} else if code := connect.CodeOf(err); code != connect.CodeUnknown {
		reason = code.String()
	}
	m.refusals.WithLabelValues(reason).Inc()
}

// metrics serves the node's and the process's metrics in the Prometheus
// text format (or OpenMetrics, when asked).
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(s.node.Gatherer(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}
