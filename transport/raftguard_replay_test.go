package transport

import (
	"errors"
	"io"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// raftNode is one raft server of a test cluster, its transport guarded.
type raftNode struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	raft  *raft.Raft
	guard *RaftGuard
}

// startRaft runs a raft server with in-memory stores over m, its
// NetworkTransport wrapped in a RaftGuard, bootstrapped with servers.
// Cleanup shuts it down, which closes the guard.
func startRaft(t *testing.T, id string, m *Mux, servers []raft.Server) *raftNode {
	t.Helper()
	g, err := GuardRaft(newNetTransport(t, m, id), testLogger(t.Name()+"/"+id))
	if err != nil {
		t.Fatal(err)
	}
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(id)
	conf.HeartbeatTimeout = 200 * time.Millisecond
	conf.ElectionTimeout = 200 * time.Millisecond
	conf.LeaderLeaseTimeout = 100 * time.Millisecond
	conf.CommitTimeout = 10 * time.Millisecond
	conf.Logger = testLogger(t.Name() + "/" + id + "/raft")
	store := raft.NewInmemStore()
	r, err := raft.NewRaft(conf, nopFSM{}, store, store, raft.NewInmemSnapshotStore(), g)
	if err != nil {
		g.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Shutdown().Error(); err != nil {
			t.Errorf("raft %s shutdown: %v", id, err)
		}
	})
	// A member already running may reach this node between NewRaft and the
	// bootstrap: its vote request gives the node a term, and the bootstrap
	// is refused as not new. The node then needs none: the configuration
	// naming it comes in that member's log.
	switch err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); {
	case err == nil:
	case errors.Is(err, raft.ErrCantBootstrap) && r.CurrentTerm() > 0:
		t.Logf("%s: reached by a member (term %d) before its bootstrap; it takes that member's configuration", id, r.CurrentTerm())
	default:
		t.Fatalf("bootstrap %s: %v", id, err)
	}
	return &raftNode{id: raft.ServerID(id), addr: g.LocalAddr(), raft: r, guard: g}
}

func voter(id string, m *Mux) raft.Server {
	return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(m.Addr().String())}
}

// applyOnce waits for a leader among nodes that commits data, then for
// every node to have applied it.
func applyOnce(t *testing.T, nodes []*raftNode, data string) {
	t.Helper()
	var index uint64
	waitFor(t, "a leader that commits "+data, func() bool {
		for _, n := range nodes {
			if n.raft.State() != raft.Leader {
				continue
			}
			f := n.raft.Apply([]byte(data), 5*time.Second)
			if f.Error() != nil {
				return false // lost leadership; look again
			}
			index = f.Index()
			return true
		}
		return false
	})
	waitFor(t, "every node to apply "+data, func() bool {
		for _, n := range nodes {
			if n.raft.AppliedIndex() < index {
				return false
			}
		}
		return true
	})
}

// smallTerms checks every node's term is at least its term in before (no
// wrap) and nowhere near the bound.
func smallTerms(t *testing.T, nodes []*raftNode, before map[raft.ServerID]uint64, when string) {
	t.Helper()
	for _, n := range nodes {
		if term := n.raft.CurrentTerm(); term < before[n.id] || term >= 1000 {
			t.Errorf("%s: node %s is at term %d, was %d", when, n.id, term, before[n.id])
		}
	}
}

// The attack as it happened: a stranger sends every node an AppendEntries
// at term 2^64-1, shaped as a heartbeat (raft's transport hands it to the
// heartbeat handler) and as a full request. Unguarded, each node adopts the
// term and wraps to 0 at its next election; guarded, nothing changes and
// the cluster keeps committing.
func TestRaftGuard_ReplayTermWrapAttack(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	muxes := make([]*Mux, len(ids))
	servers := make([]raft.Server, len(ids))
	for i, id := range ids {
		muxes[i] = newTestMux(t, MuxConfig{})
		servers[i] = voter(id, muxes[i])
	}
	nodes := make([]*raftNode, len(ids))
	for i, id := range ids {
		nodes[i] = startRaft(t, id, muxes[i], servers)
	}
	applyOnce(t, nodes, "before the attack")
	before := map[raft.ServerID]uint64{}
	for _, n := range nodes {
		before[n.id] = n.raft.CurrentTerm()
	}

	attacker := newNetTransport(t, newTestMux(t, MuxConfig{}), "attacker")
	for _, n := range nodes {
		attacks := []*raft.AppendEntriesRequest{
			{RPCHeader: header(attacker), Term: math.MaxUint64},
			{RPCHeader: header(attacker), Term: math.MaxUint64, PrevLogEntry: 1, PrevLogTerm: 1, LeaderCommitIndex: 2,
				Entries: []*raft.Log{{Index: 2, Term: math.MaxUint64, Type: raft.LogCommand, Data: []byte("attack")}}},
		}
		for i, req := range attacks {
			var resp raft.AppendEntriesResponse
			err := attacker.AppendEntries(n.id, n.addr, req, &resp)
			if err == nil || !strings.Contains(err.Error(), "raft rpc refused") {
				t.Errorf("attack %d on %s: error %v, answer %+v; want a refusal", i, n.id, err, resp)
			}
		}
	}
	smallTerms(t, nodes, before, "right after the attack")
	for _, n := range nodes {
		if d := n.guard.Drops(); d != (RaftDrops{Heartbeat: 1, AppendEntries: 1}) {
			t.Errorf("node %s counted %+v, want one heartbeat and one AppendEntries", n.id, d)
		}
	}

	applyOnce(t, nodes, "after the attack")
	smallTerms(t, nodes, before, "after a commit")
}

// The other way in: a member that answers every vote and pre-vote request
// with term 2^64-1. Raft adopts a newer term from those answers. Node a
// starts alone with the liar, so its elections depend on the liar's
// answers; b joins later and the two must elect a leader and commit.
func TestRaftGuard_ReplayPoisonedVoteAnswers(t *testing.T) {
	muxA, muxB, muxLiar := newTestMux(t, MuxConfig{}), newTestMux(t, MuxConfig{}), newTestMux(t, MuxConfig{})
	servers := []raft.Server{voter("a", muxA), voter("b", muxB), voter("liar", muxLiar)}

	liar := newNetTransport(t, muxLiar, "liar")
	var preVotes atomic.Int32
	serveRaft(t, liar.Consumer(), func(rpc raft.RPC) {
		switch rpc.Command.(type) {
		case *raft.RequestPreVoteRequest:
			rpc.Respond(&raft.RequestPreVoteResponse{Term: math.MaxUint64}, nil)
			preVotes.Add(1)
		case *raft.RequestVoteRequest:
			rpc.Respond(&raft.RequestVoteResponse{Term: math.MaxUint64}, nil)
		case *raft.InstallSnapshotRequest:
			io.Copy(io.Discard, rpc.Reader)
			rpc.Respond(nil, errStubborn)
		default:
			rpc.Respond(nil, errStubborn)
		}
	})

	a := startRaft(t, "a", muxA, servers)
	before := map[raft.ServerID]uint64{a.id: a.raft.CurrentTerm()}
	// The liar answered a's first pre-vote before a sent its second.
	waitFor(t, "the liar to answer two pre-votes", func() bool { return preVotes.Load() >= 2 })
	smallTerms(t, []*raftNode{a}, before, "after the liar's answers")
	waitFor(t, "a to refuse the liar's answer", func() bool { return a.guard.Drops().RequestPreVoteResponse > 0 })

	b := startRaft(t, "b", muxB, servers)
	before[b.id] = b.raft.CurrentTerm()
	nodes := []*raftNode{a, b}
	applyOnce(t, nodes, "with the liar in the cluster")
	smallTerms(t, nodes, before, "after a commit")
}

var errStubborn = stubbornError{}

type stubbornError struct{}

func (stubbornError) Error() string { return "the liar does not replicate" }

// nopFSM applies nothing; the tests read raft's own indexes.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnapshot{}, nil }
func (nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type nopSnapshot struct{}

func (nopSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (nopSnapshot) Release()                             {}
