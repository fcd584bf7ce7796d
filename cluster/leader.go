package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/time/rate"

	"github.com/leasehold/leasehold/fsm"
)

// monitorLeadership turns Raft's leadership notifications into a leader
// loop that runs while, and only while, this node is the leader. It reads
// Config.NotifyCh (LeaderCh may drop transitions) and never blocks on the
// leader's work, so Raft is never held up sending a notification.
func (n *Node) monitorLeadership() {
	var running *leaderRun
	for {
		select {
		case isLeader := <-n.notifyCh:
			switch {
			case isLeader && running == nil:
				running = n.startLeaderLoop()
			case !isLeader && running != nil:
				running.stop()
				running = nil
			}
		case <-n.shutdownCh:
			if running != nil {
				running.stop()
			}
			return
		}
	}
}

// leaderRun is one term's leader loop.
type leaderRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (n *Node) startLeaderLoop() *leaderRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &leaderRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		n.leaderLoop(ctx)
	}()
	return r
}

// stop ends the loop and waits for its revocation to finish.
func (r *leaderRun) stop() {
	r.cancel()
	<-r.done
}

// leaderLoop takes office (barrier, then establishLeadership), runs the
// expiry timers and compaction until leadership ends, then revokes.
func (n *Node) leaderLoop(ctx context.Context) {
	log := n.logger.Named("leader")
	// The barrier applies every entry of earlier terms, so the expiry table
	// is built from the complete state.
	for {
		err := n.raft.Barrier(n.cfg.ApplyTimeout).Error()
		if err == nil {
			break
		}
		log.Warn("barrier_failed", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.cfg.HeartbeatTimeout):
		}
	}
	n.establishLeadership(ctx)
	defer n.revokeLeadership()

	interval := min(n.cfg.Renew/2, n.cfg.Grace/4)
	limiter := rate.NewLimiter(rate.Limit(n.cfg.ExpiryRate), n.cfg.ExpiryBurst)
	compact := time.NewTicker(n.cfg.CompactInterval)
	defer compact.Stop()
	for {
		timer := n.clock.NewTimer(interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-compact.C:
			timer.Stop()
			n.compact(ctx)
		case <-timer.C():
			// The table is read afresh: a restore replaces it.
			if ls, err := n.established(); err == nil {
				n.expiryTick(ctx, ls.table, limiter)
			}
		}
	}
}

// establishLeadership builds the expiry table with every live lease's clock
// started afresh now, and records the takeover. From here the node serves
// heartbeats and acquires.
func (n *Node) establishLeadership(ctx context.Context) {
	term := n.raft.CurrentTerm()
	workers, leases := n.restartClocks(term)
	n.logger.Named("leader").Info("leadership_established", "term", term, "workers", workers, "leases", leases)
	n.recordEvent(ctx, fsm.EventLeaderChanged, "", fmt.Sprintf("%s leads term %d", n.id, term))
	n.recordEvent(ctx, fsm.EventAbsenceRule, "",
		fmt.Sprintf("takeover: clocks of %d leases of %d workers restarted at term %d", leases, workers, term))
	n.publishSelf(ctx)
}

// restartClocks installs a fresh expiry table in which every worker with a
// live lease was heard just now.
func (n *Node) restartClocks(term uint64) (workers, leases int) {
	now := n.clock.Now()
	live := n.fsm.LiveLeases()
	ids := make([]string, 0, len(live))
	for w, refs := range live {
		ids = append(ids, w)
		leases += len(refs)
	}
	table := newExpiryTable(n.cfg.Grace, n.cfg.Toleration, now, ids)
	n.mu.Lock()
	n.leader = &leaderState{term: term, table: table}
	n.mu.Unlock()
	return len(ids), leases
}

// revokeLeadership drops the expiry table at once: no timer of this node
// can fire after it returns. It is idempotent.
func (n *Node) revokeLeadership() {
	n.mu.Lock()
	was := n.leader
	n.leader = nil
	n.mu.Unlock()
	if was != nil {
		n.logger.Named("leader").Info("leadership_revoked", "term", was.term)
	}
}

// established returns the leader state if this node is the leader and has
// taken office.
func (n *Node) established() (*leaderState, error) {
	if n.raft.State() != raft.Leader {
		return nil, n.notLeader()
	}
	n.mu.Lock()
	ls := n.leader
	n.mu.Unlock()
	if ls == nil {
		return nil, ErrNotReady
	}
	return ls, nil
}

// expiryTick is one pass of the leader's timers: the absence rule,
// reachability announcements, and expiry of the overdue, rate-limited.
func (n *Node) expiryTick(ctx context.Context, table *expiryTable, limiter *rate.Limiter) {
	log := n.logger.Named("expiry")
	now := n.clock.Now()
	res := table.tick(now)
	if res.gap > 0 {
		log.Warn("absence_rule_applied", "gap", res.gap)
		n.recordEvent(ctx, fsm.EventAbsenceRule, "", fmt.Sprintf("leader absent %s: every deadline shifted by it", res.gap.Round(time.Millisecond)))
	}
	for _, w := range res.unreachable {
		log.Info("worker_unreachable", "worker_id", w)
		n.recordEvent(ctx, fsm.EventWorkerUnreachable, w, fmt.Sprintf("silent past grace %s", n.cfg.Grace))
	}
	for _, w := range res.reachable {
		log.Info("worker_reachable", "worker_id", w)
		n.recordEvent(ctx, fsm.EventWorkerReachable, w, "heard again")
	}

	type due struct {
		worker string
		refs   []fsm.LeaseRef
	}
	var batch []due
	count := 0
	for _, w := range res.overdue {
		leases := n.fsm.WorkerLeases(w)
		if len(leases) == 0 {
			table.forget(w, now)
			continue
		}
		var refs []fsm.LeaseRef
		var toks []uint64
		for _, l := range leases {
			if count+len(refs) == fsm.MaxExpireBatch || !limiter.AllowN(now, 1) {
				break
			}
			refs = append(refs, fsm.LeaseRef{JobID: l.JobID, Token: l.Token})
			toks = append(toks, l.Token)
		}
		if len(refs) == 0 || !table.markExpiring(w, toks, now) {
			continue
		}
		batch = append(batch, due{w, refs})
		count += len(refs)
		if count == fsm.MaxExpireBatch {
			break
		}
	}
	if len(batch) == 0 {
		return
	}
	// A deposed leader must not expire anything: confirm with a quorum first.
	if err := n.check.confirm(ctx); err != nil {
		log.Warn("expiry_skipped_not_leader", "error", err)
		return
	}
	cmd := &fsm.Expire{Reason: fmt.Sprintf("worker silent past toleration %s", n.cfg.Toleration)}
	for _, d := range batch {
		cmd.Leases = append(cmd.Leases, d.refs...)
	}
	if _, err := n.raftApply(ctx, cmd); err != nil {
		log.Warn("expiry_failed", "leases", len(cmd.Leases), "error", err)
		return
	}
	for _, d := range batch {
		toks := make([]uint64, len(d.refs))
		for i, r := range d.refs {
			toks[i] = r.Token
		}
		table.expired(d.worker, toks)
		log.Info("leases_expired", "worker_id", d.worker, "leases", len(d.refs))
	}
}

// compact removes finished jobs and events past retention, in bounded
// commands. Cutoffs come from the state's own clock (its last stamped
// time), not this node's, so a skewed leader cannot compact early.
func (n *Node) compact(ctx context.Context) {
	for ctx.Err() == nil {
		last := n.fsm.Stats().LastTime
		cmd := &fsm.Compact{
			JobsBefore:   last - n.cfg.Retention.Nanoseconds(),
			EventsBefore: last - n.cfg.EventRetention.Nanoseconds(),
			Limit:        fsm.MaxCompactBatch,
		}
		v, err := n.raftApply(ctx, cmd)
		if err != nil {
			n.logger.Named("leader").Warn("compaction_failed", "error", err)
			return
		}
		if !v.(fsm.CompactResult).More {
			return
		}
	}
}

// recordEvent records a leader observation; failure is logged, not fatal
// (the observation is informational, the rules do not depend on it).
func (n *Node) recordEvent(ctx context.Context, typ fsm.EventType, worker, detail string) {
	if _, err := n.raftApply(ctx, &fsm.RecordEvent{Event: typ, WorkerID: worker, Detail: detail}); err != nil {
		n.logger.Named("leader").Warn("record_event_failed", "event", typ.String(), "error", err)
	}
}
