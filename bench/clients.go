package bench

import (
	"net/http"
	"sync/atomic"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/transport"
)

// fleet is the clients the callers share. With target leader every client
// knows every endpoint and follows the leader; with target any there is one
// client per endpoint that never leaves it, and calls rotate over them.
type fleet struct {
	clients    []*client.Client
	transports []*http.Transport // ours, not the clients': closed by close
	next       atomic.Uint64
	wire       *wireCounter
}

// newFleet makes conns clients for target leader, or conns per endpoint for
// target any. Each client has its own HTTP/2 connection per node.
func newFleet(cfg *Config) (*fleet, error) {
	f := &fleet{wire: &wireCounter{}}
	groups := [][]string{cfg.Endpoints}
	if cfg.Target == TargetAny {
		groups = nil
		for _, ep := range cfg.Endpoints {
			groups = append(groups, []string{ep})
		}
	}
	for range cfg.Conns {
		for _, eps := range groups {
			tr := client.NewTransport(cfg.TLS)
			if cfg.Workload == "scale" {
				// Thousands of heartbeats in flight share the Conns
				// connections: past a connection's stream limit a call
				// waits for a stream instead of the transport dialing
				// another connection, then another.
				tr.HTTP2 = &http.HTTP2Config{StrictMaxConcurrentRequests: true}
			}
			f.transports = append(f.transports, tr)
			hc := &http.Client{Transport: &wireTransport{
				next:      tr,
				count:     f.wire,
				stripHint: cfg.Target == TargetAny,
			}}
			cl, err := client.New(client.Config{Endpoints: eps, Token: cfg.Token, TLS: cfg.TLS, HTTPClient: hc, CallTimeout: cfg.CallTimeout})
			if err != nil {
				f.close()
				return nil, err
			}
			f.clients = append(f.clients, cl)
		}
	}
	return f, nil
}

// pick returns the next client in rotation.
func (f *fleet) pick() *client.Client {
	return f.clients[(f.next.Add(1)-1)%uint64(len(f.clients))]
}

// first is the client for calls that are not load: setup, status, watch.
func (f *fleet) first() *client.Client { return f.clients[0] }

func (f *fleet) close() {
	for _, c := range f.clients {
		c.Close()
	}
	for _, t := range f.transports {
		t.CloseIdleConnections()
	}
}

// wireCounter counts HTTP attempts and the failed ones (transport errors
// and non-200 answers): the retries the client makes by itself, which the
// per-operation error count cannot see.
type wireCounter struct {
	requests atomic.Int64
	failures atomic.Int64
}

type wireTransport struct {
	next      *http.Transport
	count     *wireCounter
	stripHint bool
}

func (t *wireTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.count.requests.Add(1)
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		t.count.failures.Add(1)
		return resp, err
	}
	if resp.StatusCode != http.StatusOK {
		t.count.failures.Add(1)
	}
	if t.stripHint {
		// Target any: the leader hint would move the client to the leader
		// after its first call; without it, calls stay on their node, which
		// forwards writes to the leader.
		resp.Header.Del(transport.HeaderLeader)
	}
	return resp, nil
}
