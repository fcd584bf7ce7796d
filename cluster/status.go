package cluster

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Member is one voter as the operator sees it.
type Member struct {
	ID       string
	RaftAddr string
	APIAddr  string // empty until the node table knows it
	Voter    bool
	Leader   bool
	// Level and Version are what the node table records of the node's
	// build (levels.go); 0 and "" until the leader records them.
	Level   uint8
	Version string
}

// Members lists the Raft configuration with each member's API address.
func (n *Node) Members() ([]Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, n.raftError(err)
	}
	_, leader := n.raft.LeaderWithID()
	var out []Member
	for _, s := range f.Configuration().Servers {
		m := Member{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter, Leader: s.ID == leader}
		if node, ok := n.fsm.Node(m.ID); ok {
			m.APIAddr, m.Level, m.Version = node.APIAddr, node.Level, node.Version
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// Status is one node's view of the cluster.
type Status struct {
	ID           string
	RaftAddr     string
	APIAddr      string
	State        string // leader, follower, candidate, shutdown
	Term         uint64
	LeaderID     string
	LeaderAPI    string
	CommitIndex  uint64
	AppliedIndex uint64
	LastIndex    uint64
	// Ready: a leader that has taken office, or a follower that knows a
	// leader, with room on its disk. A node that is not ready should not
	// be sent traffic; NotReady says why.
	Ready    bool
	NotReady string
	// WorkersTimed counts, on the leader, the workers whose leases and
	// reachability it times: holders of live leases and workers heard this
	// term (registered workers it has not heard since it took office are
	// timed only for their removal as idle, and not counted).
	WorkersTimed int
	// PeerTLS: the peer port runs mutual TLS.
	PeerTLS bool
}

// Status reports this node's view.
func (n *Node) Status() Status {
	_, leaderID := n.raft.LeaderWithID()
	st := Status{
		ID: n.id, RaftAddr: n.advertise, APIAddr: n.cfg.APIAddr, State: n.raft.State().String(),
		Term: n.raft.CurrentTerm(), LeaderID: string(leaderID), CommitIndex: n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(), LastIndex: n.raft.LastIndex(), PeerTLS: n.mux.PeerTLS(),
	}
	if node, ok := n.fsm.Node(st.LeaderID); ok {
		st.LeaderAPI = node.APIAddr
	}
	ls, err := n.established()
	switch {
	case err == nil:
		st.Ready, st.WorkersTimed = true, ls.table.Load().size()
	case n.raft.State() == raft.Follower && st.LeaderID != "":
		st.Ready = true
	case errors.Is(err, ErrNotReady):
		st.NotReady = "leader taking office"
	default:
		st.NotReady = "no leader known"
	}
	if err := n.disk.err(); err != nil {
		st.Ready, st.NotReady = false, err.Error()
	}
	if err := n.Err(); err != nil {
		st.Ready, st.NotReady = false, "stopped: "+err.Error()
	}
	return st
}

// Leader returns the leader's id and API address as this node knows them
// (empty when there is no leader or its address is not yet in the table).
// It is the hint on every API response, so it answers from its last
// answer while Raft names the same leader and that answer is younger than
// hintTTL: a leader's change shows at once; a change of the leader's API
// address or of the voters under the same leader, rare and made by an
// operator, within hintTTL. The full answer reads Raft's configuration
// (which allocates) and takes the state machine's read lock, which waits
// for an apply in progress.
func (n *Node) Leader() (id, api string) {
	if _, lid := n.raft.LeaderWithID(); lid != "" {
		if h := n.hint.Load(); h.answers(string(lid), time.Now()) {
			return h.id, h.api
		}
	}
	id, _, err := n.leaderPeer()
	if err != nil {
		return "", ""
	}
	if node, ok := n.fsm.Node(id); ok {
		api = node.APIAddr
	}
	if api != "" {
		n.hint.Store(&leaderHint{id: id, api: api, at: time.Now()})
	}
	return id, api
}

// hintTTL bounds how long Leader answers from its last answer.
const hintTTL = time.Second

// leaderHint is an answer of Leader and when it was made (by the real
// clock: it decides nothing of any lease).
type leaderHint struct {
	id, api string
	at      time.Time
}

// answers says whether h, if any, is still Leader's answer at now when
// Raft names leader lid.
func (h *leaderHint) answers(lid string, now time.Time) bool {
	return h != nil && h.id == lid && now.Sub(h.at) < hintTTL
}

// Timings returns the executor timings this node runs with.
func (n *Node) Timings() (renew, grace, toleration time.Duration) {
	return n.cfg.Renew, n.cfg.Grace, n.cfg.Toleration
}

// StateQuota is the replicated state's quota in bytes (0: none).
func (n *Node) StateQuota() int64 { return n.cfg.StateQuotaBytes }
