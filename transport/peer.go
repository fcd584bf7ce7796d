package transport

// Messages of the node-to-node RPC that forms and maintains a cluster. They
// travel as JSON over the Raft port's RPC protocol (rpc.go).

// RPC method names.
const (
	MethodPeerInfo = "peer.info" // PeerInfoRequest -> PeerInfo
	MethodPeerJoin = "peer.join" // PeerJoinRequest -> PeerJoinReply
)

// NodeAddr is a node's identity and addresses.
type NodeAddr struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	APIAddr  string `json:"api_addr"`
}

// PeerInfoRequest asks a node about itself; the caller says who it is.
type PeerInfoRequest struct {
	From NodeAddr `json:"from"`
}

// PeerInfo is what a node says about itself and its cluster.
type PeerInfo struct {
	Node NodeAddr `json:"node"`
	// InCluster: the node has a Raft configuration (it bootstrapped,
	// joined, or restarted with data).
	InCluster bool `json:"in_cluster"`
	// BootstrapExpect is the node's configured expectation; nodes bootstrap
	// together only when they agree on it.
	BootstrapExpect int `json:"bootstrap_expect"`
	// Members is the sorted set of Raft addresses the node would form a
	// cluster with: its join list and itself. Nodes bootstrap together only
	// when they all name the same set.
	Members        []string `json:"members"`
	LeaderID       string   `json:"leader_id,omitempty"`
	LeaderRaftAddr string   `json:"leader_raft_addr,omitempty"`
	// Level is the newest log codec version the node's build applies;
	// Version its build's version. A node of a build from before levels
	// says neither (its level is taken as 2).
	Level   int    `json:"level,omitempty"`
	Version string `json:"version,omitempty"`
	// What the node's Raft knows of its leader and its log, for a
	// follower that asks whether a quorum has lost the leader
	// (cluster/deadleader.go). LeaderSilentMs is how long since the node
	// last heard from a leader, 0 while it hears one or leads (and from
	// builds before it); Follower says it is a follower; LastLogTerm and
	// LastLogIndex are its last entry's (its snapshot's if newer); Term
	// its current term; Standing says it started an election through
	// that check lately, which its state and term may not show yet.
	LeaderSilentMs int64  `json:"leader_silent_ms,omitempty"`
	Term           uint64 `json:"term,omitempty"`
	Follower       bool   `json:"follower,omitempty"`
	LastLogTerm    uint64 `json:"last_log_term,omitempty"`
	LastLogIndex   uint64 `json:"last_log_index,omitempty"`
	Standing       bool   `json:"standing,omitempty"`
}

// PeerJoinRequest asks the leader to add a node as a voter (idempotent: a
// member asking again updates its addresses).
type PeerJoinRequest struct {
	Node NodeAddr `json:"node"`
	// Fresh: the node has no Raft state. A fresh node whose id is already a
	// voter lost its data, and with it its vote: it must be removed before
	// it can join again.
	Fresh bool `json:"fresh,omitempty"`
	// Refresh: the node only asks for its addresses in the node table to
	// be brought up to date. It is not a request to be added: a node that
	// is not a voter (an admin removed it) is refused with CodeNotMember
	// rather than taken back in.
	Refresh bool `json:"refresh,omitempty"`
}

// PeerJoinReply confirms the join.
type PeerJoinReply struct {
	LeaderID string `json:"leader_id"`
}

// RPC error codes of the peer methods.
const (
	CodeNotLeader = "not_leader" // details: leader_id, leader_raft_addr
	CodeNoLeader  = "no_leader"
	// CodeNotReady: the leader is still taking office; retry shortly.
	CodeNotReady = "not_ready"
	// CodeRejoinRefused: a node that lost its data asked to join under the
	// id of a voter; an operator must remove that voter first.
	CodeRejoinRefused = "rejoin_refused"
	// CodeNotMember: a node asked for its addresses to be brought up to
	// date (PeerJoinRequest.Refresh), but it is not a voter: it was removed.
	CodeNotMember = "not_member"
)

// MethodPeerAudit records an audit event: a node sends the admin actions and
// refusals it saw to the leader, which proposes them. PeerAuditRequest ->
// nothing.
const MethodPeerAudit = "peer.audit"

// PeerAuditRequest is one audit record (see fsm.Audit).
type PeerAuditRequest struct {
	Action string `json:"action"`
	Actor  string `json:"actor"`
	Source string `json:"source"`
	Detail string `json:"detail"`
}

// Codes of refusals on the peer port.
const (
	// CodeForbidden: the caller is not allowed to ask this (a node asking
	// for a change to another node's entry, an unauthenticated caller).
	CodeForbidden = "forbidden"
	// CodeIDInUse: another live node answers as this id.
	CodeIDInUse = "id_in_use"
	// CodeClaimRefused: the node at the claimed address does not confirm
	// the claim (another id, or other addresses).
	CodeClaimRefused = "claim_refused"
)
