package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

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
		case <-n.life.Done():
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
	ctx, cancel := context.WithCancel(n.life)
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
		// Through waitRaft: a barrier Raft never answers (one queued
		// when it shuts down) must not hold the node's stop.
		err := n.waitRaft(ctx, n.raft.Barrier(n.cfg.ApplyTimeout))
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

	// Compaction runs beside the timers, so a long compaction never delays
	// an expiry or looks like the leader's absence.
	compacted := make(chan struct{})
	go func() {
		defer close(compacted)
		n.compactLoop(ctx)
	}()
	defer func() { <-compacted }()
	// The voters' levels are asked beside the timers too: a voter slow to
	// answer never delays an expiry.
	leveled := make(chan struct{})
	go func() {
		defer close(leveled)
		n.levelLoop(ctx)
	}()
	defer func() { <-leveled }()
	// Schedules fire beside the timers too: a slow proposal never delays
	// an expiry.
	scheduled := make(chan struct{})
	go func() {
		defer close(scheduled)
		n.scheduleLoop(ctx)
	}()
	defer func() { <-scheduled }()

	interval := min(n.cfg.Renew/2, n.cfg.Grace/4)
	var lastFull time.Time // when the quota was last checked and the schedules woken
	for {
		timer := n.clock.NewTimer(n.passWait(interval))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
			// The state is read afresh: a restore replaces the table.
			if ls, err := n.established(); err == nil {
				n.expiryTick(ctx, ls)
				n.timeoutTick(ctx, ls)
				// A pass woken early by a worker's check (most find the
				// worker heard since) leaves the quota and the schedules,
				// which have no deadline of their own here, to the
				// interval's pace.
				if now := n.clock.Now(); now.Sub(lastFull) >= interval {
					lastFull = now
					n.quotaTick(ctx, ls)
					n.wakeSchedules()
				}
			}
		}
	}
}

// expiryResolution is the shortest wait between two passes of the timer
// loop that a worker's check asks for: the most a silence crossing a
// threshold waits for its pass beyond the check's own time. A table whose
// checks come up every few hundred microseconds (a hundred thousand
// workers) costs a pass per resolution, not one per check; such an early
// pass runs the expiry and timeout work only (leaderLoop).
const expiryResolution = 10 * time.Millisecond

// passWait is how long the timer loop waits before its next pass: the
// interval, or less when a lease's timeout (timeouts.go) or a worker's
// next check in the expiry table (the moment its silence may cross grace
// or toleration) comes first. Passes only at the interval made every
// expiry wait for the next one: up to the interval late (half a renew),
// however promptly the rest went.
func (n *Node) passWait(interval time.Duration) time.Duration {
	wait := n.timeoutWait(interval)
	if ls, err := n.established(); err == nil {
		if at, ok := ls.table.Load().nextCheck(); ok {
			wait = min(wait, max(at.Sub(n.clock.Now()), expiryResolution))
		}
	}
	return wait
}

// establishLeadership builds the expiry table with every live lease's clock
// started afresh now, and records the takeover. From here the node serves
// heartbeats and acquires.
func (n *Node) establishLeadership(ctx context.Context) {
	term := n.raft.CurrentTerm()
	// Rates counted in an earlier term (this node led before) are not
	// this term's: a new leader starts from zero, before it grants.
	n.grants.reset()
	n.mu.Lock()
	n.leader = &leaderState{term: term, done: make(chan struct{})}
	n.mu.Unlock()
	workers, leases := n.restartClocks(n.leader)
	n.logger.Named("leader").Info("leadership_established", "term", term, "workers", workers, "leases", leases)
	n.recordEvents(ctx,
		fsm.RecordEvent{Event: fsm.EventLeaderChanged, Detail: fmt.Sprintf("%s leads term %d", n.id, term)},
		fsm.RecordEvent{Event: fsm.EventAbsenceRule,
			Detail: fmt.Sprintf("takeover: clocks of %d leases of %d workers restarted at term %d", leases, workers, term)})
	n.publishSelf(ctx)
	if !keepTokenCounter {
		// The broken chaos_tokenreuse build: the counter restarts from
		// this node's last applied grant minus one.
		if last := n.fsm.Stats().LastToken; last > 0 {
			if _, err := n.raftApply(ctx, &fsm.RaiseTokenFloor{Floor: last - 1}); err != nil {
				n.logger.Named("leader").Warn("token_counter_not_restarted", "error", err)
			}
		}
	}
}

// restartClocks gives the leader state a fresh expiry table in which every
// registered worker was heard just now (those without a live lease timed
// only for removal), if ls is still this node's leader state (a restore
// racing a step-down must not resurrect it).
func (n *Node) restartClocks(ls *leaderState) (workers, leases int) {
	now := n.clock.Now()
	live := n.fsm.LiveLeases()
	ids := make([]string, 0, len(live))
	for w, refs := range live {
		ids = append(ids, w)
		leases += len(refs)
	}
	var idle []string
	for _, w := range n.fsm.Workers() {
		if _, ok := live[w.ID]; !ok {
			idle = append(idle, w.ID)
		}
	}
	table := newExpiryTable(n.expiryTimings(), now, ids, idle)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.leader == ls {
		ls.table.Store(table)
		n.lastTable = table
	}
	return len(ids), leases
}

// revokeLeadership drops the expiry table at once: no timer of this node
// can fire after it returns. It is idempotent.
func (n *Node) revokeLeadership() {
	n.mu.Lock()
	was := n.leader
	n.leader = nil
	n.heardLevels = nil // the next term asks afresh
	n.mu.Unlock()
	n.grants.reset() // a follower grants nothing and shows 0
	if was != nil {
		close(was.done)
		n.logger.Named("leader").Info("leadership_revoked", "term", was.term)
	}
}

// established returns the leader state if this node is the leader, has
// taken office, and is still in the term it took office in.
func (n *Node) established() (*leaderState, error) {
	if n.raft.State() != raft.Leader {
		return nil, n.notLeader()
	}
	n.mu.Lock()
	ls := n.leader
	n.mu.Unlock()
	if ls == nil || ls.table.Load() == nil || ls.term != n.raft.CurrentTerm() {
		return nil, ErrNotReady
	}
	return ls, nil
}

// removeIdle deregisters registered workers silent past WorkerGCThreshold
// that hold no lease (a holder's leases expire first, at toleration; the
// state machine keeps any worker that holds one by the time the removal
// commits). Each removal is one event, written once: a removed worker is
// no longer registered, so no later tick names it again. A removal that
// fails to commit is decided afresh on the next tick.
func (n *Node) removeIdle(ctx context.Context, ls *leaderState, table *expiryTable, idle []string, now time.Time) {
	var ids []string
	for _, w := range idle {
		if len(ids) == fsm.MaxRemoveBatch {
			break
		}
		if n.registered(w) && len(n.fsm.WorkerLeases(w)) == 0 && table.stillIdle(w, now) {
			ids = append(ids, w)
		}
	}
	if len(ids) == 0 {
		return
	}
	log := n.logger.Named("expiry")
	if err := n.check.confirm(ctx); err != nil {
		log.Warn("idle_removal_deferred_not_confirmed", "error", err)
		return
	}
	if cur, err := n.established(); err != nil || cur != ls {
		return
	}
	v, err := n.raftApply(ctx, &fsm.RemoveIdle{WorkerIDs: ids,
		Reason: fmt.Sprintf("silent past %s holding nothing: removed by the leader", n.cfg.WorkerGCThreshold)})
	if err != nil {
		log.Warn("idle_removal_failed_will_retry", "workers", len(ids), "error", err)
		return
	}
	res := v.(fsm.RemoveIdleResult)
	table.removed(res.Removed)
	log.Info("idle_workers_removed", "workers", len(res.Removed), "kept", len(res.Kept))
}

// expiryTimings are the silences this node's table acts on.
func (n *Node) expiryTimings() expiryTimings {
	return expiryTimings{grace: n.cfg.Grace, toleration: n.cfg.Toleration, removeAfter: n.cfg.WorkerGCThreshold}
}

func (n *Node) registered(worker string) bool {
	_, err := n.fsm.Worker(worker)
	return err == nil
}

func liveTokens(leases []fsm.HeldLease) map[uint64]bool {
	out := make(map[uint64]bool, len(leases))
	for _, l := range leases {
		out[l.Token] = true
	}
	return out
}

// compactLoop compacts every CompactInterval while this term lasts.
func (n *Node) compactLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.CompactInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.compact(ctx)
		}
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
			break
		}
	}
	n.purgeDead(ctx)
}

// purgeDead removes dead jobs past DeadRetention, in bounded commands, once
// the cluster can apply them (level 6). The age is the state's own: the
// command carries how old, the state machine its own time. It proposes
// only when a dead job is past the retention by the state's time, so a
// dead job younger than it costs no entry per pass; and, like every
// proposal the leader makes on its own, only after a quorum confirms it
// still leads.
func (n *Node) purgeDead(ctx context.Context) {
	if n.cfg.DeadRetention <= 0 {
		return
	}
	if _, err := n.established(); err != nil {
		return
	}
	retention := n.cfg.DeadRetention.Nanoseconds()
	oldest, ok := n.fsm.OldestDead()
	if !ok || n.fsm.Stats().LastTime < oldest+retention {
		return // none dead, or the longest dead is young yet (later deaths are younger)
	}
	if err := n.check.confirm(ctx); err != nil {
		n.logger.Named("leader").Warn("dead_purge_skipped_not_confirmed", "error", err)
		return
	}
	for ctx.Err() == nil {
		cmd := &fsm.PurgeJobs{OlderThan: retention, Limit: fsm.MaxPurgeBatch,
			Reason: fmt.Sprintf("dead longer than the retention (%s)", n.cfg.DeadRetention)}
		if n.ClusterLevel() < fsm.CodecOf(cmd) {
			return // no dead job before every voter is at that level anyway
		}
		v, err := n.raftApply(ctx, cmd)
		if err != nil {
			n.logger.Named("leader").Warn("dead_purge_failed", "error", err)
			return
		}
		if !v.(fsm.PurgeResult).More {
			return
		}
	}
}

// recordEvents records leader observations in one entry; failure is
// logged, not fatal (they are informational: no rule depends on them).
func (n *Node) recordEvents(ctx context.Context, events ...fsm.RecordEvent) {
	if len(events) == 0 {
		return
	}
	// A leader that cannot reach a quorum proposes nothing at all, not even
	// observations: its log stays as the cluster left it.
	if err := n.check.confirm(ctx); err != nil {
		n.logger.Named("leader").Warn("record_events_skipped_not_confirmed", "events", len(events), "error", err)
		return
	}
	for len(events) > 0 {
		batch := events[:min(len(events), fsm.MaxRecordBatch)]
		events = events[len(batch):]
		if _, err := n.raftApply(ctx, &fsm.RecordEvents{Events: batch}); err != nil {
			n.logger.Named("leader").Warn("record_events_failed", "events", len(batch), "error", err)
			return
		}
	}
}
