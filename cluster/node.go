package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
	"github.com/leasehold/leasehold/transport/rules"
)

// Node is one leasehold server: a Raft member replicating the lease state
// machine, and, while it is the leader, the keeper of the expiry table.
type Node struct {
	cfg       Config
	id        string
	advertise string
	logger    hclog.Logger
	clock     Clock

	fsm   *fsm.FSM
	raft  *raft.Raft
	store *raftboltdb.BoltStore
	logs  *countingLogStore
	trans *raft.NetworkTransport
	guard *transport.RaftGuard // wraps trans; raft sees only the guard
	mux   *transport.Mux
	rpc   *transport.RPCServer
	peers *transport.RPCClient
	check *leaderCheck
	gate  *acquireGate
	book  peerBook
	// audits waits to be proposed (or sent to the leader): see audit.go.
	audits auditor

	notifyCh chan bool

	mu     sync.Mutex
	leader *leaderState // non-nil while this node is the established leader
	// lastTable is the newest expiry table this node built, kept after it
	// stops leading; only the broken chaos_noverify build reads it.
	lastTable *expiryTable

	// life ends when the node stops; every background loop watches it.
	life         context.Context
	endLife      context.CancelFunc
	shutdownOnce sync.Once
	wg           sync.WaitGroup
}

// leaderState exists from establishLeadership to revokeLeadership. Its
// table is swapped whole when a restore restarts every clock.
type leaderState struct {
	term  uint64
	table atomic.Pointer[expiryTable]
	// quotaAlarm is the leader loop's; quotaRefused is set by any submit
	// refused for the quota since the last tick (quota.go).
	quotaAlarm   bool
	quotaRefused atomic.Bool
}

// New opens the node's stores, starts Raft and the node's background loops,
// and returns. A node with data rejoins its cluster from disk; a node
// without data joins or bootstraps from Config.Join (see membership.go).
func New(cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:      cfg,
		logger:   cfg.Logger,
		clock:    cfg.Clock,
		fsm:      fsm.New(),
		gate:     newAcquireGate(),
		notifyCh: make(chan bool, 16),
	}
	n.life, n.endLife = context.WithCancel(context.Background())
	n.audits.queue = make(chan fsm.Audit, auditQueueLen)
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()

	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if n.id, err = loadNodeID(cfg.DataDir, cfg.NodeID); err != nil {
		return nil, err
	}
	n.logger = cfg.Logger.With("node", n.id)

	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.RaftBind); err != nil {
			return nil, fmt.Errorf("raft port: %w", err)
		}
	}
	n.advertise = cfg.RaftAdvertise
	if n.advertise == "" {
		n.advertise = ln.Addr().String()
	}
	if err := checkDialable(n.advertise); err != nil || isUnspecified(n.advertise) {
		ln.Close()
		return nil, &ConfigError{Field: "raft_advertise", Value: n.advertise, Reason: "set an address peers can dial"}
	}
	dial := cfg.Dial
	if dial == nil {
		dial = sourceDialer(ln.Addr())
	}
	n.mux, err = transport.NewMux(transport.MuxConfig{
		Listener: ln, Advertise: n.advertise, ServerTLS: cfg.RaftTLS, ClientTLS: cfg.RaftClientTLS,
		Dial: dial, Logger: n.logger.Named("mux"),
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	closers = append(closers, n.mux.Close)
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.mux.Serve() }()

	n.peers = n.mux.RPCClient()

	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: n.mux.RaftLayer(), MaxPool: 3, Timeout: 10 * time.Second,
		Logger: n.logger.Named("raft-net"),
	})
	closers = append(closers, n.trans.Close)
	// Raft adds to terms without checking for overflow: the guard refuses
	// RPCs whose terms and indexes no real cluster reaches.
	if n.guard, err = transport.GuardRaft(n.trans, n.logger.Named("raft-guard")); err != nil {
		return nil, err
	}
	closers = append(closers, n.guard.Close)

	// fsync on every append: NoSync is never set.
	n.store, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.DataDir, "raft.db")})
	if err != nil {
		return nil, fmt.Errorf("raft log: %w", err)
	}
	closers = append(closers, n.store.Close)
	n.logs = &countingLogStore{LogStore: n.store}
	logs, err := raft.NewLogCache(512, n.logs)
	if err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, cfg.SnapshotRetain, n.logger.Named("snapshot"))
	if err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	hasState, err := raft.HasExistingState(logs, n.store, snaps)
	if err != nil {
		return nil, err
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.id)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.NotifyCh = n.notifyCh
	rc.Logger = n.logger.Named("raft")
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, &ConfigError{Field: "raft", Value: err, Reason: "refused by raft"}
	}
	n.raft, err = raft.NewRaft(rc, &raftFSM{f: n.fsm}, logs, n.store, snaps, n.guard)
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	n.check = newLeaderCheck(n.raft)

	// Peers' RPCs need Raft; connections that arrived before now waited in
	// the mux's RPC listener.
	n.rpc = transport.NewRPCServer(n.logger.Named("rpc"))
	n.registerRPC()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.rpc.Serve(n.mux.RPCListener()) }()

	n.wg.Add(3)
	go func() { defer n.wg.Done(); n.monitorLeadership() }()
	go func() { defer n.wg.Done(); n.membershipLoop(!hasState) }()
	go func() { defer n.wg.Done(); n.auditLoop() }()
	n.logger.Info("node_started", "raft_addr", n.advertise, "api_addr", cfg.APIAddr, "has_state", hasState)
	return n, nil
}

// ID is the node's id.
func (n *Node) ID() string { return n.id }

// RaftAddr is the address peers reach this node's Raft port on.
func (n *Node) RaftAddr() string { return n.advertise }

// FSM returns the local state machine for reads. Reads straight from it are
// stale reads; see ReadBarrier for linearizable ones.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// Shutdown stops the node. A leader first hands leadership to another voter
// (bounded by ctx), so a planned restart costs no election timeout.
func (n *Node) Shutdown(ctx context.Context) error {
	if n.raft.State() == raft.Leader && len(n.voters()) > 1 {
		done := make(chan error, 1)
		go func() { done <- n.raft.LeadershipTransfer().Error() }()
		select {
		case err := <-done:
			if err != nil {
				n.logger.Warn("leadership_transfer_failed", "error", err)
			}
		case <-ctx.Done():
			n.logger.Warn("leadership_transfer_timed_out")
		}
	}
	return n.stop()
}

// Kill stops the node without handing leadership over, as a crash would
// (the process survives: tests restart the node from its data dir).
func (n *Node) Kill() error { return n.stop() }

func (n *Node) stop() error {
	var errs []error
	n.shutdownOnce.Do(func() {
		n.endLife()
		errs = append(errs, n.raft.Shutdown().Error())
		errs = append(errs, n.guard.Close(), n.rpc.Close(), n.mux.Close())
		n.wg.Wait()
		errs = append(errs, n.store.Close())
		n.logger.Info("node_stopped")
	})
	return errors.Join(errs...)
}

func (n *Node) voters() []raft.Server {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []raft.Server
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, s)
		}
	}
	return out
}

// loadNodeID returns the id stored in the data dir, storing want (or a new
// random id) on first start. A data dir belongs to one node: a different
// configured id is an error.
func loadNodeID(dir, want string) (string, error) {
	path := filepath.Join(dir, "node-id")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		have := strings.TrimSpace(string(b))
		if want != "" && want != have {
			return "", &ConfigError{Field: "node_id", Value: want, Reason: fmt.Sprintf("data dir %s belongs to node %s", dir, have)}
		}
		return have, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("node id: %w", err)
	}
	if want == "" {
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		want = "node-" + hex.EncodeToString(r[:])
	}
	var fe *rules.FieldError
	if errors.As(rules.CheckID("node_id", want), &fe) {
		return "", &ConfigError{Field: "node_id", Value: want, Reason: fe.Reason}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(want+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	return want, os.Rename(tmp, path)
}

func isUnspecified(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// sourceDialer dials peers from the address the Raft port is bound to, when
// it is a specific one: on a host with several addresses, peers (and their
// firewalls) see connections come from the address they know the node by.
func sourceDialer(bound net.Addr) transport.Dialer {
	tcp, ok := bound.(*net.TCPAddr)
	if !ok || tcp.IP == nil || tcp.IP.IsUnspecified() {
		return nil
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: tcp.IP}}
	return d.DialContext
}
