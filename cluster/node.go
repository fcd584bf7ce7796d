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
	store raftStore // raft-wal or raft-boltdb (Config.LogStore)
	logs  *logStore
	disk  *diskState
	trans *raft.NetworkTransport
	guard *transport.RaftGuard // wraps trans; raft sees only the guard
	mux   *transport.Mux
	rpc   *transport.RPCServer
	peers *transport.RPCClient
	check *leaderCheck
	gate  *acquireGate
	// metrics are the node's measurements (metrics.go).
	metrics *nodeMetrics
	// grants counts each queue's grants of the last minute (grantrate.go).
	grants *grantRates
	// parked counts the acquires waiting for a job (worker.go).
	parked atomic.Int64
	book   peerBook
	// audits waits to be proposed (or sent to the leader): see audit.go.
	audits auditor
	// refusals bounds the audit records of refused peer requests.
	refusals *RefusalLimiter
	// snapshots is the state machine as Raft sees it; it remembers the
	// last snapshot it persisted, for Metrics.
	snapshots *raftFSM
	// expiryLooked counts the worker checks the expiry ticks looked at: it
	// grows with the workers whose check came due, not with every worker
	// on every tick (expiry.go).
	expiryLooked atomic.Uint64
	// hint is Leader's last answer (status.go): every API response names
	// the leader.
	hint atomic.Pointer[leaderHint]

	notifyCh chan bool
	// scheduleWake makes the leader's schedule loop look again (schedule.go).
	scheduleWake chan struct{}

	mu     sync.Mutex
	leader *leaderState // non-nil while this node is the established leader
	// heardLevels is what each voter said of its level when this node,
	// leading, last asked; levelsRecorded when a request last had it ask
	// and record (levels.go).
	heardLevels    map[string]heardLevel
	levelsRecorded time.Time
	// levelMu orders recording the voters' levels with adding a voter.
	levelMu sync.Mutex
	// memberMu orders changes of the voter set with writes of node-table
	// records: RemoveNode holds it while it removes a voter and its
	// record, and every record is written under it, for a node that is a
	// voter at that moment. So no record outlives its node's removal, and
	// no refresh takes a removed node back. Taken after levelMu.
	memberMu sync.Mutex
	// refreshRefused: this node's last request to refresh its entry was
	// refused, for it is not a member (membership.go).
	refreshRefused atomic.Bool
	// lastTable is the newest expiry table this node built, kept after it
	// stops leading; only the broken chaos_noverify build reads it.
	lastTable *expiryTable

	// born is when this node's Raft started (deadleader.go): its silence
	// is counted from there until it first hears a leader, so a node that
	// spent long restoring a snapshot is not at once silent.
	born time.Time
	// stoodAt is when the dead-leader check last started an election
	// (nanoseconds after born; 0: never), reported while it is decided.
	stoodAt atomic.Int64

	// life ends when the node stops; every background loop watches it.
	// Its cause is why a node stopped on its own (halt).
	life    context.Context
	endLife context.CancelCauseFunc
	// netDown is closed once the node's network is closed on the way down
	// (see stableStore); stopped once the node has stopped.
	netDown chan struct{}
	stopped chan struct{}
	// running is set once New has started everything stop stops.
	running      atomic.Bool
	shutdownOnce sync.Once
	wg           sync.WaitGroup
}

// leaderState exists from establishLeadership to revokeLeadership. Its
// table is swapped whole when a restore restarts every clock.
type leaderState struct {
	term  uint64
	table atomic.Pointer[expiryTable]
	// done is closed when the term's office ends (revokeLeadership):
	// heartbeat streams of the term end with it.
	done chan struct{}
	// quotaAlarm is the leader loop's; quotaRefused is set by any submit
	// refused for the quota since the last tick (quota.go).
	quotaAlarm   bool
	quotaRefused atomic.Bool
	// adopted is when the expiry loop last adopted the state's lease
	// holders (expire.go).
	adopted time.Time
	// cutOffSince is when the expiry loop started holding expiries
	// because every worker fell silent at once (expire.go); zero when not.
	cutOffSince time.Time
	// progress holds the term's progress notes (progress.go).
	progress progressTable
}

// New opens the node's stores, starts Raft and the node's background loops,
// and returns. A node with data rejoins its cluster from disk; a node
// without data joins or bootstraps from Config.Join (see membership.go). A
// data dir whose log or stable store is missing, empty or damaged while the
// rest shows the node had a past is refused with a *StorageError (see
// openStorage), before Raft or the network starts.
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
		grants:   newGrantRates(),
		notifyCh: make(chan bool, 16),
		netDown:  make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	n.life, n.endLife = context.WithCancelCause(context.Background())
	processGatherer() // before the stores open: raft-wal takes go-metrics' instance then
	n.metrics = newNodeMetrics(n)
	n.audits.queue = make(chan fsm.Audit, auditQueueLen)
	n.scheduleWake = make(chan struct{}, 1)
	n.refusals = NewRefusalLimiter()
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
			if cfg.Listener != nil && n.mux == nil {
				cfg.Listener.Close()
			}
		}
	}()

	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	start := time.Now()
	store, dir, err := openStorage(cfg.DataDir, cfg.LogStore, cfg.WALSegmentBytes)
	if err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	n.store = store
	closers = append(closers, n.store.Close)
	if n.id, err = loadNodeID(cfg.DataDir, cfg.NodeID, dir.hasState); err != nil {
		return nil, err
	}
	n.logger = cfg.Logger.With("node", n.id)
	n.logger.Info("storage_checked", "snapshots", len(dir.snapshots), "has_state", dir.hasState,
		"took", time.Since(start).Round(time.Millisecond))
	if dir.hasState && !dir.member {
		// A data dir from before raft.member existed.
		if err := markMember(cfg.DataDir, n.id); err != nil {
			n.logger.Warn("member_mark_not_written", "error", err)
		}
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, cfg.SnapshotRetain, n.logger.Named("snapshot"))
	if err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	n.disk = &diskState{nodeID: n.id, logger: n.logger.Named("disk")}
	var logs raft.LogStore = n.store
	var stable raft.StableStore = n.store
	if cfg.WrapStores != nil {
		logs, stable = cfg.WrapStores(logs, stable)
	}
	storePath := dir.file(raftDBFile)
	if cfg.LogStore == LogStoreWAL {
		storePath = dir.file(walDir)
	}
	n.logs = &logStore{LogStore: logs, path: storePath, disk: n.disk, corrupt: n.halt, took: n.metrics.logWrite}
	stableStore := &stableStore{StableStore: stable, disk: n.disk, netDown: n.netDown,
		member: func() error { return markMember(cfg.DataDir, n.id) }}
	stableStore.marked.Store(dir.hasState)
	cache, err := raft.NewLogCache(512, n.logs)
	if err != nil {
		return nil, err
	}

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

	n.trans = raft.NewNetworkTransportWithConfig(raftTransportConfig(n.mux.RaftLayer(), n.logger.Named("raft-net")))
	closers = append(closers, n.trans.Close)
	// Raft adds to terms without checking for overflow: the guard refuses
	// RPCs whose terms and indexes no real cluster reaches.
	if n.guard, err = transport.GuardRaft(n.trans, n.logger.Named("raft-guard")); err != nil {
		return nil, err
	}
	closers = append(closers, n.guard.Close)

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.id)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	// BatchApplyCh stays off. The leader already takes every proposal
	// waiting on the channel (up to MaxAppendEntries, 64) into one log
	// write; buffering the channel measured no faster
	// (docs/performance-history.md) and lets a proposal be queued after
	// Shutdown, where nothing ever answers it (Barrier and Apply pick at
	// random between a closed shutdown channel and room in the buffer): a
	// node's stop then waited forever on its leader loop's barrier.
	rc.NotifyCh = n.notifyCh
	rc.Logger = n.logger.Named("raft")
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, &ConfigError{Field: "raft", Value: err, Reason: "refused by raft"}
	}
	adapter := &raftFSM{f: n.fsm, halt: n.halt, log: n.logger.Named("snapshot")}
	n.snapshots = adapter
	adapter.starting.Store(true)
	n.raft, err = raft.NewRaft(rc, adapter, cache, stableStore, &snapshotStore{SnapshotStore: snaps, disk: n.disk}, n.guard)
	adapter.starting.Store(false)
	if rerr := adapter.restoreErr.Load(); rerr != nil {
		// Raft went on to an older snapshot than one it could not
		// restore (which the log may no longer cover), or gave up.
		if err == nil {
			n.raft.Shutdown().Error()
		}
		return nil, fmt.Errorf("refusing to start: %w", &StorageError{Path: filepath.Join(cfg.DataDir, snapshotsDir),
			Problem: fmt.Sprintf("a snapshot does not restore: %v", *rerr)})
	}
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	n.born = time.Now()
	n.check = newLeaderCheck(n.raft, n.life.Done())
	n.check.waited = n.metrics.leaderCheck

	// Peers' RPCs need Raft; connections that arrived before now waited in
	// the mux's RPC listener.
	n.rpc = transport.NewRPCServer(n.logger.Named("rpc"))
	n.registerRPC()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.rpc.Serve(n.mux.RPCListener()) }()

	n.wg.Add(4)
	go func() { defer n.wg.Done(); n.watchLeader() }()
	go func() { defer n.wg.Done(); n.monitorLeadership() }()
	go func() { defer n.wg.Done(); n.membershipLoop(!dir.hasState) }()
	go func() { defer n.wg.Done(); n.auditLoop() }()
	n.logger.Info("node_started", "raft_addr", n.advertise, "api_addr", cfg.APIAddr, "has_state", dir.hasState)
	n.running.Store(true)
	if n.life.Err() != nil {
		go n.stop() // halted while starting
	}
	return n, nil
}

// ID is the node's id.
func (n *Node) ID() string { return n.id }

// RaftAddr is the address peers reach this node's Raft port on.
func (n *Node) RaftAddr() string { return n.advertise }

// FSM returns the local state machine for reads. Reads straight from it are
// stale reads; see ReadBarrier for linearizable ones.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// Done is closed when the node stops: by Shutdown or Kill, or on its own
// when it cannot go on safely (Err says why).
func (n *Node) Done() <-chan struct{} { return n.life.Done() }

// Err is why the node stopped on its own (a log entry it cannot apply or
// read), or nil.
func (n *Node) Err() error {
	if err := context.Cause(n.life); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// halt stops the node because it cannot go on safely: it logs why, makes
// it the node's Err, and stops in the background (it is called from inside
// Raft, which stopping waits for; before New has finished, New stops it).
func (n *Node) halt(err error) {
	if n.life.Err() != nil {
		return
	}
	n.logger.Error("node_halted", "error", err)
	n.endLife(err)
	if n.running.Load() {
		go n.stop()
	}
}

// Shutdown stops the node. A leader first hands leadership to another voter
// (bounded by ctx), so a planned restart costs no election timeout.
func (n *Node) Shutdown(ctx context.Context) error {
	if n.raft.State() == raft.Leader && len(n.voters()) > 1 {
		switch err := n.waitRaft(ctx, n.raft.LeadershipTransfer()); {
		case err != nil && ctx.Err() != nil:
			n.logger.Warn("leadership_transfer_timed_out")
		case err != nil:
			n.logger.Warn("leadership_transfer_failed", "error", err)
		}
	}
	return n.stop()
}

// Kill stops the node without handing leadership over, as a crash would
// (the process survives: tests restart the node from its data dir).
func (n *Node) Kill() error { return n.stop() }

// stop stops the node once; later calls wait until it has stopped.
func (n *Node) stop() error {
	var errs []error
	n.shutdownOnce.Do(func() {
		n.endLife(nil)
		// Raft stops taking part at once; the network is closed before
		// waiting for its goroutines to end, so nothing they still do
		// reaches a peer (see stableStore).
		shutdown := n.raft.Shutdown()
		errs = append(errs, n.guard.Close(), n.mux.Close())
		close(n.netDown)
		errs = append(errs, shutdown.Error(), n.rpc.Close())
		n.wg.Wait()
		errs = append(errs, n.store.Close())
		n.logger.Info("node_stopped")
		close(n.stopped)
	})
	<-n.stopped
	return errors.Join(errs...)
}

// voterAddr is the Raft address of the voter id, if id is one. Every
// response's leader hint asks it, so it copies no list.
func (n *Node) voterAddr(id raft.ServerID) (string, bool) {
	for _, s := range n.raft.LatestConfiguration().Servers {
		if s.ID == id && s.Suffrage == raft.Voter {
			return string(s.Address), true
		}
	}
	return "", false
}

func (n *Node) voters() []raft.Server {
	var out []raft.Server
	for _, s := range n.raft.LatestConfiguration().Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, s)
		}
	}
	return out
}

// loadNodeID returns the id stored in the data dir, storing want (or a new
// random id) on first start. A data dir belongs to one node: a different
// configured id is an error, and so is a lost node-id file beside Raft
// state when no id is configured (a new random id would not be the one the
// cluster knows).
func loadNodeID(dir, want string, hasState bool) (string, error) {
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
	if want == "" && hasState {
		return "", fmt.Errorf("refusing to start: %w", &StorageError{Path: path,
			Problem: "is missing, but raft.db holds this node's Raft state: set --node-id to the id the cluster knows it by"})
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

// raftTransportConfig is how Raft's RPCs travel to the other members: over
// the stream layer given, three idle connections kept per member, each
// RPC bounded by 10 s.
//
// Pipelined replication is off (MaxRPCsInFlight below 2). With it on,
// hashicorp/raft 1.7's pipeline can deadlock: when a follower answers an
// append with failure (a full disk, a storage error), the pipeline's
// reader stops, and the sender's next append waits forever on a channel
// no one reads, while the heartbeats to that follower go on. The follower
// then never receives another entry and never starts an election that
// would heal it; the leader's shutdown hangs on the stuck sender. Under
// -race on two cores our tests hit it several times in an hour. Without
// the pipeline, the leader sends each follower its next batch when the
// last is answered, carrying every entry written meanwhile;
// docs/performance.md has what that costs.
func raftTransportConfig(stream raft.StreamLayer, logger hclog.Logger) *raft.NetworkTransportConfig {
	return &raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, Timeout: 10 * time.Second, Logger: logger,
		MaxRPCsInFlight: 1,
	}
}
