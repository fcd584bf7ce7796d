package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
)

// Rolling upgrades. An entry a node cannot decode stops that node (rightly:
// skipping it would fork its state), so the leader proposes an entry only
// when every voter can apply it.
//
// A node's level is the newest codec version its build applies
// (fsm.Level). Each node says its level and build version when asked
// (peer.info); the leader asks every voter at takeover and every
// levelInterval, and records in the replicated node table (SetNode with
// Level) what it heard, once every voter is at a level that can apply that
// record. The cluster's level is the lowest of the voters' levels: what
// each said when last asked, or before that what the table records (a
// voter of a build from before levels says nothing: fsm.BaseLevel). A command
// whose entry needs a higher codec is refused with ErrUpgradeRequired,
// naming the nodes to upgrade, except a worker's registration, which is
// written without the worker's version instead.
//
// A node joins only when its level is at least the highest level the table
// records (entries of that codec may be in the log). Going back to an older
// build after the cluster reached a level is not supported: the leader
// logs it and refuses what that node could not apply.

// levelInterval is how often the leader asks the voters for their levels;
// recordRetry how often at most a request the levels refuse has it ask.
const (
	levelInterval = 10 * time.Second
	recordRetry   = time.Second
)

// ErrUpgradeRequired: the command needs a codec some voter's build cannot
// apply. The error is an *UpgradeError naming the nodes.
var ErrUpgradeRequired = errors.New("upgrade required")

// UpgradeError is ErrUpgradeRequired for one command.
type UpgradeError struct {
	Need  uint8    // the codec version the command's entry needs
	Level uint8    // the cluster's level
	Nodes []string // the voters below Need, each "id (level L, version V)"
}

func (e *UpgradeError) Error() string {
	return fmt.Sprintf("%s: this request needs every voter at level %d, the cluster is at level %d; upgrade %s",
		ErrUpgradeRequired, e.Need, e.Level, strings.Join(e.Nodes, ", "))
}

func (e *UpgradeError) Unwrap() error { return ErrUpgradeRequired }

// level is the level this node says it is at: its build's.
func (n *Node) level() uint8 {
	if n.cfg.sayLevel != 0 {
		return n.cfg.sayLevel
	}
	return fsm.Level
}

// ClusterLevel is the level every voter is recorded at: the newest codec
// the leader may propose without refusing (UPGRADE_REQUIRED). The API asks
// it before it adds what an older voter could not apply on its own
// initiative, such as a default retry policy.
func (n *Node) ClusterLevel() uint8 { return n.clusterLevel() }

// Wall is the clock the leader stamps on commands: what a job's run-at
// time and a lease's grant time are read against.
func (n *Node) Wall() time.Time { return n.clock.Wall() }

// heardLevel is what a voter said of itself when the leader last asked.
type heardLevel struct {
	level   uint8 // fsm.BaseLevel when it did not say
	version string
}

// voterLevels is each voter's level, and the cluster's level (the lowest).
// A voter's level is what the table records (a voter not recorded counts
// as fsm.BaseLevel), or lower if that is what it said when the leader last
// asked (an older build again). The table is the single source: an entry
// of codec N is proposed only when the table records N or more for every
// voter, so a joiner checked against the table (joinFloor) can apply
// every entry in the log.
func (n *Node) voterLevels() (levels map[string]heardLevel, cluster uint8) {
	return n.voterLevelsBut("")
}

// voterLevelsBut is voterLevels leaving out one voter (a joiner).
func (n *Node) voterLevelsBut(skip string) (levels map[string]heardLevel, cluster uint8) {
	levels = map[string]heardLevel{}
	cluster = n.eachVoterLevel(skip, func(id string, l heardLevel) { levels[id] = l })
	return levels, cluster
}

// clusterLevel is voterLevels' cluster level alone. Every proposal's level
// check and every submit ask it, so it builds no map, copies no list and
// reads Raft's configuration without a future: it allocates nothing
// (BenchmarkClusterLevel, TestClusterLevelAllocatesNothing).
func (n *Node) clusterLevel() uint8 { return n.eachVoterLevel("", nil) }

// eachVoterLevel gives fn (when not nil) each voter's level but skip's,
// and returns the lowest.
func (n *Node) eachVoterLevel(skip string, fn func(id string, l heardLevel)) uint8 {
	n.mu.Lock()
	heard := n.heardLevels // replaced, never changed in place
	n.mu.Unlock()
	cluster := uint8(fsm.Level)
	for _, s := range n.raft.LatestConfiguration().Servers {
		id := string(s.ID)
		if s.Suffrage != raft.Voter || id == skip {
			continue
		}
		l := heardLevel{level: fsm.BaseLevel}
		if rec, ok := n.fsm.Node(id); ok && rec.Level != 0 {
			l = heardLevel{level: rec.Level, version: rec.Version}
		}
		if id == n.id && n.level() < l.level {
			l = heardLevel{level: n.level(), version: n.cfg.Version}
		} else if h, ok := heard[id]; ok && h.level < l.level {
			l = h
		}
		if fn != nil {
			fn(id, l)
		}
		cluster = min(cluster, l.level)
	}
	return cluster
}

// checkLevel refuses a command whose entry some voter cannot apply, or
// returns the command to propose (a registration without its version).
// Before it refuses, the leader asks the voters and records their levels
// (at most once per recordRetry): the table may not record them yet (a
// new cluster, a new voter).
func (n *Node) checkLevel(ctx context.Context, cmd fsm.Command) (fsm.Command, error) {
	err := n.requireLevel(ctx, fsm.CodecOf(cmd))
	if err == nil {
		return cmd, nil // before errors.As, whose target would escape on every proposal
	}
	var upgrade *UpgradeError
	if r, ok := cmd.(*fsm.RegisterWorker); ok && errors.As(err, &upgrade) {
		plain := *r
		plain.Version = "" // the version is shown, never relied on
		if fsm.CodecOf(&plain) <= upgrade.Level {
			return &plain, nil
		}
	}
	return nil, err
}

// requireLevel returns nil when every voter applies entries of codec need
// (and reads snapshots of that version), else an *UpgradeError naming the
// voters that hold it back.
func (n *Node) requireLevel(ctx context.Context, need uint8) error {
	if need <= fsm.BaseLevel || need <= n.clusterLevel() {
		return nil // the path of every proposal: no map of the levels
	}
	levels, cluster := n.voterLevels()
	if need > cluster && n.raft.State() == raft.Leader {
		n.mu.Lock()
		due := time.Since(n.levelsRecorded) >= recordRetry
		if due {
			n.levelsRecorded = time.Now()
		}
		n.mu.Unlock()
		if due {
			n.recordLevels(ctx)
			levels, cluster = n.voterLevels()
		}
	}
	if need <= cluster {
		return nil
	}
	// Name the voters that hold it back: those that said a lower level (or
	// said nothing); a voter heard at a high enough level and not yet
	// recorded is named only when nobody else is.
	n.mu.Lock()
	heard := n.heardLevels
	n.mu.Unlock()
	err := &UpgradeError{Need: need, Level: cluster}
	var unrecorded []string
	for _, id := range slices.Sorted(maps.Keys(levels)) {
		l := levels[id]
		if l.level >= need {
			continue
		}
		if h, ok := heard[id]; ok && h.level >= need || id == n.id && n.level() >= need {
			unrecorded = append(unrecorded, id+" (level not recorded yet)")
			continue
		}
		v := l.version
		if h, ok := heard[id]; ok && h.version != "" {
			v = h.version
		}
		if v == "" {
			v = "unknown"
		}
		err.Nodes = append(err.Nodes, fmt.Sprintf("%s (level %d, version %s)", id, l.level, v))
	}
	if len(err.Nodes) == 0 {
		err.Nodes = unrecorded
	}
	return err
}

// joinFloor is the lowest level a joining node may have: the highest the
// table records, as entries of that codec may be in the log.
func (n *Node) joinFloor() uint8 {
	floor := uint8(fsm.BaseLevel)
	for _, rec := range n.fsm.Nodes() {
		floor = max(floor, rec.Level)
	}
	return floor
}

// levelLoop asks the voters for their levels and records them, at takeover
// and every levelInterval, until leadership ends.
func (n *Node) levelLoop(ctx context.Context) {
	every := levelInterval
	if n.cfg.levelEvery > 0 {
		every = n.cfg.levelEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n.recordLevels(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// recordLevels asks every voter for its level and records the changes,
// when every voter can apply the records. It holds levelMu, which AddNode
// holds from its check of a joiner's level to the joiner's record: a
// voter added meanwhile would not have been asked.
func (n *Node) recordLevels(ctx context.Context) {
	n.levelMu.Lock()
	defer n.levelMu.Unlock()
	log := n.logger.Named("levels")
	heard, addrs := n.askLevels(ctx)
	if ctx.Err() != nil {
		return
	}
	// A record is an entry of codec 4: only when every voter was heard at
	// level 4 or more.
	for _, s := range n.voters() {
		if h, ok := heard[string(s.ID)]; !ok || h.level < fsm.CodecOf(&fsm.SetNode{Level: fsm.Level}) {
			if ok {
				log.Debug("levels_not_recorded", "node_id", s.ID, "level", h.level, "version", h.version)
			}
			return
		}
	}
	for id, h := range heard {
		rec, ok := n.fsm.Node(id)
		if ok && rec.Level == h.level && rec.Version == h.version {
			continue
		}
		if ok && rec.Level > h.level {
			log.Error("node_downgraded", "node_id", id, "recorded_level", rec.Level, "level", h.level, "version", h.version)
			continue // the table never goes down; checkLevel uses what was heard
		}
		a := addrs[id]
		if ok {
			a.RaftAddr, a.APIAddr = rec.RaftAddr, rec.APIAddr // addresses change only by a join
		}
		cmd := &fsm.SetNode{NodeID: id, RaftAddr: a.RaftAddr, APIAddr: a.APIAddr, Level: h.level, Version: h.version}
		if err := cmd.Validate(); err != nil {
			log.Warn("level_not_recorded", "node_id", id, "error", err)
			continue
		}
		written, err := n.setVoterRecord(ctx, cmd, true) // not for a voter removed while it was asked
		if err != nil {
			log.Warn("level_not_recorded", "node_id", id, "error", err)
			return
		}
		if written {
			log.Info("level_recorded", "node_id", id, "level", h.level, "version", h.version)
		}
	}
}

// askLevels asks every voter for its level (this node answers for itself)
// and keeps what it heard for checkLevel. It returns what each voter said
// and its addresses.
func (n *Node) askLevels(ctx context.Context) (map[string]heardLevel, map[string]transport.NodeAddr) {
	term := n.raft.CurrentTerm()
	heard := map[string]heardLevel{}
	addrs := map[string]transport.NodeAddr{}
	for _, s := range n.voters() {
		id, addr := string(s.ID), string(s.Address)
		if id == n.id {
			heard[id] = heardLevel{level: n.level(), version: n.cfg.Version}
			addrs[id] = n.self()
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, n.claimTimeout())
		var info transport.PeerInfo
		err := n.peers.CallNode(cctx, addr, id, transport.MethodPeerInfo, transport.PeerInfoRequest{From: n.self()}, &info)
		cancel()
		if err != nil {
			continue // not heard: what the table records stands
		}
		h := heardLevel{level: fsm.BaseLevel, version: info.Version}
		if info.Level >= fsm.BaseLevel && info.Level <= 255 {
			h.level = uint8(info.Level)
		}
		heard[id] = h
		addrs[id] = info.Node
	}
	// Kept only when complete and of this term as leader: a partial asking
	// (ctx ended) or one that outlived the term proves nothing.
	n.mu.Lock()
	if ctx.Err() == nil && n.leader != nil && n.leader.term == term {
		n.heardLevels = heard
	}
	n.mu.Unlock()
	return heard, addrs
}
