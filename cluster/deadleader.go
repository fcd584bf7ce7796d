package cluster

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/transport"
)

// A dead leader is replaced as soon as a quorum of the voters agrees it is
// silent, rather than when the later of two followers' randomized timers
// fires.
//
// hashicorp/raft's follower checks its leader at a random point in
// [heartbeat_timeout, 2 × heartbeat_timeout) and starts a new such interval
// when it heard from it less than heartbeat_timeout before; a candidate
// first asks for pre-votes, which a voter refuses while it still names a
// leader. So after a leader dies the first follower to notice is refused,
// and the election waits for the second follower's own timer: 300 to
// about 900 ms after the leader's last message at the default 300 ms
// (docs/performance-history.md, "What a failover waits for").
//
// The watch below runs on every node. A follower that has heard no leader
// for deadLeaderAfter (1.5 × heartbeat_timeout by default) asks the other
// voters (peer.info) how long they have gone without one. When a quorum,
// itself included, has been silent that long, the one of them whose log is
// the most up to date (then the smallest id) starts an election at once:
// it sends itself the TimeoutNow that Raft's leadership transfer uses,
// whose candidate skips pre-vote and whose vote requests a voter grants
// even while it still names a leader (its log permitting, which the choice
// of candidate ensures for every silent voter).
//
// Why this is safe: an election never breaks Raft's safety (one vote per
// term, only to a log at least as up to date); what pre-vote protects is
// liveness, against a voter cut off from a live leader disrupting the
// cluster. The quorum's agreement keeps that protection: a voter that
// still hears the leader says so, and a lone follower cut off from it
// finds no quorum of silence. A leader that is alive but silent to a
// quorum for that long would lose its leadership to Raft's own timers
// anyway (and gives it up itself after leader_lease_timeout).

// leaderView is what this node's Raft knows of its leader and its log.
type leaderView struct {
	id        string
	silentFor time.Duration // since it last heard a leader; 0 while it hears one or leads
	follower  bool
	term      uint64 // its current term
	lastTerm  uint64
	lastIndex uint64
	answered  bool // for another voter: it answered
	// standing: it started an election through this check lately. Its
	// state and term show that only once its Raft has taken the
	// TimeoutNow it sent itself (the term later still), so a voter that
	// asked meanwhile would see a candidate still in the old term, leave
	// it out of the choice, and stand too.
	standing bool
}

func (n *Node) leaderView() leaderView {
	v := leaderView{id: n.id, answered: true, term: n.raft.CurrentTerm()}
	switch n.raft.State() {
	case raft.Leader:
		// silentFor 0
	case raft.Follower:
		v.follower = true
		fallthrough
	default:
		last := n.raft.LastContact()
		if !last.After(n.born) {
			last = n.born // none heard since this process started
		}
		v.silentFor = time.Since(last)
	}
	st := n.raft.Stats()
	term, _ := strconv.ParseUint(st["last_log_term"], 10, 64)
	index, _ := strconv.ParseUint(st["last_log_index"], 10, 64)
	sterm, _ := strconv.ParseUint(st["last_snapshot_term"], 10, 64)
	sindex, _ := strconv.ParseUint(st["last_snapshot_index"], 10, 64)
	if sindex > index {
		term, index = sterm, sindex
	}
	v.lastTerm, v.lastIndex = term, index
	// Read last: Raft turns candidate before its term moves, so an answer
	// whose state or term shows this node's stand must also say it stood
	// (stoodAt is set before the TimeoutNow is sent).
	v.standing = n.standing()
	return v
}

// electNow says whether self should start an election now, from what the
// voters said (self's own view among them; a voter that did not answer
// has answered false): a quorum of the voters has heard no leader for at
// least after, none is in a later term than self nor standing (an
// election is under way: another voter stood), and self is a silent
// follower whose log is the most up to date of every voter that answered,
// the smallest id among such followers. Every silent voter then grants self its vote (its log
// permitting, which the choice ensures, and unless it stood meanwhile).
func electNow(self string, views []leaderView, voters int, after time.Duration) bool {
	if voters < 2 {
		return false // a single voter elects itself
	}
	var me leaderView
	for _, v := range views {
		if v.id == self {
			me = v
		}
	}
	var silent []leaderView
	for _, v := range views {
		if v.answered && (v.term > me.term || v.standing && v.id != self) {
			return false
		}
		if v.answered && v.silentFor >= after {
			silent = append(silent, v)
		}
	}
	if len(silent) < voters/2+1 {
		return false
	}
	// The most up-to-date log of every voter that answered, silent or
	// not, so that two voters deciding on slightly different answers (one
	// just past the bound, the other not yet) still pick the same one.
	var bestTerm, bestIndex uint64
	for _, v := range views {
		if v.answered && (v.lastTerm > bestTerm || v.lastTerm == bestTerm && v.lastIndex > bestIndex) {
			bestTerm, bestIndex = v.lastTerm, v.lastIndex
		}
	}
	chosen := ""
	for _, v := range silent {
		if v.follower && v.lastTerm == bestTerm && v.lastIndex == bestIndex && (chosen == "" || v.id < chosen) {
			chosen = v.id
		}
	}
	return chosen == self
}

// deadLeaderAfter is how long a follower waits without hearing a leader
// before it asks the other voters; 0: never.
func (c Config) deadLeaderAfter() time.Duration {
	switch {
	case c.DeadLeaderAfter < 0:
		return 0
	case c.DeadLeaderAfter > 0:
		return c.DeadLeaderAfter
	}
	return c.HeartbeatTimeout * 3 / 2
}

// watchLeader runs the check every tenth of heartbeat_timeout until the
// node stops. While the voters do not agree, it asks again at growing
// intervals, up to heartbeat_timeout: a follower cut off from a live leader
// asks a few times a second, not every tick.
func (n *Node) watchLeader() {
	after := n.cfg.deadLeaderAfter()
	if after <= 0 {
		return
	}
	every := max(n.cfg.HeartbeatTimeout/10, 5*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var quiet time.Time // no check before this
	misses := 0
	for {
		select {
		case <-n.life.Done():
			return
		case <-tick.C:
		}
		if n.raft.State() != raft.Follower || n.heardWithin(after) {
			misses = 0
			continue
		}
		// A node that stood does not ask again while it is standing: if
		// the election it started fails, Raft's own timers take over.
		if time.Now().Before(quiet) || n.standing() {
			continue
		}
		switch n.checkDeadLeader(after) {
		case checkStarted:
			misses = 0
		case checkNotAgreed, checkFailed:
			quiet = time.Now().Add(min(every<<misses, n.cfg.HeartbeatTimeout))
			misses = min(misses+1, 16)
		}
	}
}

// heardWithin says whether this node heard from a leader within d, or
// started less than d ago.
func (n *Node) heardWithin(d time.Duration) bool {
	last := n.raft.LastContact()
	return last.After(n.born) && time.Since(last) < d || time.Since(n.born) < d
}

type checkOutcome int

const (
	checkSkipped   checkOutcome = iota // not a silent follower voter after all
	checkNotAgreed                     // no quorum of silence, or another voter stands
	checkStarted                       // this node stood
	checkFailed                        // it could not
)

// checkDeadLeader asks the other voters and starts an election if a quorum
// agrees the leader is silent and this node is the one to stand.
func (n *Node) checkDeadLeader(after time.Duration) checkOutcome {
	voters := n.voters()
	self := n.leaderView()
	if !n.isVoter(n.id) || !self.follower || self.silentFor < after {
		return checkSkipped
	}
	// Every other voter is asked at once. The answers stop being awaited
	// once a quorum is silent: a leader whose host hangs rather than
	// refuses would otherwise hold every check for the call's timeout,
	// and a voter that answers later is counted as not answered.
	views := make([]leaderView, len(voters))
	ctx, cancel := context.WithTimeout(n.life, n.cfg.HeartbeatTimeout)
	defer cancel()
	type answer struct {
		i int
		v leaderView
	}
	answers := make(chan answer, len(voters))
	var wg sync.WaitGroup
	asked, silent := 0, 1 // self is silent
	for i, s := range voters {
		id, addr := string(s.ID), string(s.Address)
		if id == n.id {
			views[i] = self
			continue
		}
		asked++
		wg.Go(func() {
			var info transport.PeerInfo
			if err := n.peers.CallNode(ctx, addr, id, transport.MethodPeerInfo, transport.PeerInfoRequest{From: n.self()}, &info); err != nil {
				answers <- answer{i, leaderView{id: id}} // not answered: counted as hearing the leader
				return
			}
			// A peer's silence is bounded to a day: a value no clock
			// reaches cannot overflow the duration.
			silentMs := min(max(info.LeaderSilentMs, 0), int64(24*time.Hour/time.Millisecond))
			answers <- answer{i, leaderView{id: id, answered: true, silentFor: time.Duration(silentMs) * time.Millisecond,
				follower: info.Follower, term: info.Term, lastTerm: info.LastLogTerm, lastIndex: info.LastLogIndex, standing: info.Standing}}
		})
	}
	for got := 0; got < asked && silent < len(voters)/2+1 && ctx.Err() == nil; got++ {
		a := <-answers
		views[a.i] = a.v
		if a.v.answered && a.v.silentFor >= after {
			silent++
		}
	}
	cancel() // the calls still out end at once
	wg.Wait()
	if !electNow(n.id, views, len(voters), after) {
		n.metrics.deadLeader.WithLabelValues("not_agreed").Inc()
		return checkNotAgreed
	}
	if n.raft.State() != raft.Follower || n.heardWithin(after) || n.life.Err() != nil {
		return checkSkipped // heard from a leader, or stood, meanwhile
	}
	// Said before the stand, so that any answer showing this node's
	// Raft past the TimeoutNow also says it stood.
	stood := n.markStood()
	n.logger.Info("leader_silent", "silent_for", self.silentFor.Round(time.Millisecond).String(),
		"last_leader", n.lastLeaderID(), "outcome", "a quorum of voters agrees: starting an election")
	var resp raft.TimeoutNowResponse
	if err := n.trans.TimeoutNow(raft.ServerID(n.id), raft.ServerAddress(n.advertise), &raft.TimeoutNowRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(n.id), Addr: []byte(n.advertise)},
	}, &resp); err != nil {
		n.stoodAt.CompareAndSwap(stood, 0) // it did not stand after all
		n.logger.Warn("leader_silent", "outcome", "could not start an election", "error", err)
		n.metrics.deadLeader.WithLabelValues("failed").Inc()
		return checkFailed
	}
	n.metrics.deadLeader.WithLabelValues("started").Inc()
	return checkStarted
}

// standing says this node stood through the check, and the election it
// started is not decided yet: it stood less than deadLeaderAfter plus two
// election timeouts ago, it does not lead, and its Raft has heard from no
// leader since (nor granted a vote in a later election: Raft notes both as
// contact). A stand that is decided says nothing of the next failure: a
// voter that lost an election it stood in, and then saw the winner die,
// must not hold back the next stand (theirs or its own) for the rest of
// the window.
func (n *Node) standing() bool {
	at := n.stoodAt.Load()
	if at == 0 || time.Since(n.born)-time.Duration(at) >= n.cfg.deadLeaderAfter()+2*n.cfg.ElectionTimeout {
		return false
	}
	return n.raft.State() != raft.Leader && !n.raft.LastContact().After(n.born.Add(time.Duration(at)))
}

// markStood records a stand now and returns what it stored: the time
// since Raft started (a monotonic reading, which a step of the wall clock
// does not move), at least 1 (0 is "never").
func (n *Node) markStood() int64 {
	at := max(int64(time.Since(n.born)), 1)
	n.stoodAt.Store(at)
	return at
}

func (n *Node) lastLeaderID() string {
	_, id := n.raft.LeaderWithID()
	return string(id)
}
