package outsider

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/transport"
)

// endpoint is one way the outsider reaches the nodes: the product's own
// Mux (plain, or TLS with a client certificate) dialing from the
// outsider's address, its RPC client for joins, and a raft.NetworkTransport
// over it for Raft messages. It also serves its listener, as a node's peer
// port would.
type endpoint struct {
	via  string
	mux  *transport.Mux
	rpc  *transport.RPCServer
	raft *raft.NetworkTransport

	done chan struct{} // closed by close: stop refusing Raft messages
	wg   sync.WaitGroup
}

func (o *Outsider) newEndpoint(via, listen string, clientTLS *tls.Config) (*endpoint, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("outsider: %w", err)
	}
	dialer := &net.Dialer{Timeout: o.cfg.CallTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(o.cfg.IP)}}
	mux, err := transport.NewMux(transport.MuxConfig{Listener: ln, ClientTLS: clientTLS, Dial: dialer.DialContext})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("outsider: %w", err)
	}
	ep := &endpoint{via: via, mux: mux, rpc: transport.NewRPCServer(nil), done: make(chan struct{})}
	ep.raft = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: mux.RaftLayer(), MaxPool: 1,
		Timeout: o.cfg.CallTimeout, Logger: o.log.Named("raft")})
	ep.wg.Go(func() { mux.Serve() })
	ep.wg.Go(func() { ep.rpc.Serve(mux.RPCListener()) })
	// Nothing should ever send the outsider a Raft message (only a member
	// whose address it took would): refuse any, rather than hang them.
	ep.wg.Go(func() {
		for {
			select {
			case rpc := <-ep.raft.Consumer():
				rpc.Respond(nil, errors.New("outsider: not a member"))
			case <-ep.done:
				return
			}
		}
	})
	return ep, nil
}

func (ep *endpoint) close() error {
	close(ep.done)
	err := errors.Join(ep.raft.Close(), ep.rpc.Close(), ep.mux.Close())
	wait := make(chan struct{})
	go func() { ep.wg.Wait(); close(wait) }()
	select {
	case <-wait:
	case <-time.After(10 * time.Second):
		err = errors.Join(err, errors.New("outsider: endpoint goroutines did not stop"))
	}
	return err
}
