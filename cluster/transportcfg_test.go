package cluster

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// countingLayer is a loopback stream layer that counts its dials.
type countingLayer struct {
	net.Listener
	dials atomic.Int32
}

func (l *countingLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	l.dials.Add(1)
	return net.DialTimeout("tcp", string(addr), timeout)
}

// Raft's transport never pipelines appends (see raftTransportConfig: its
// pipeline can deadlock a follower's replication): raft asks for a
// pipeline and is told there is none, without a connection being made, so
// it replicates one batch at a time.
func TestRaftTransportDoesNotPipeline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	layer := &countingLayer{Listener: ln}
	trans := raft.NewNetworkTransportWithConfig(raftTransportConfig(layer, hclog.NewNullLogger()))
	defer trans.Close()
	p, err := trans.AppendEntriesPipeline("peer", raft.ServerAddress(ln.Addr().String()))
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		if p != nil {
			p.Close()
		}
		t.Fatalf("asked for a pipeline: %v, want ErrPipelineReplicationNotSupported", err)
	}
	if n := layer.dials.Load(); n != 0 {
		t.Fatalf("%d connections dialled for a pipeline", n)
	}
}
