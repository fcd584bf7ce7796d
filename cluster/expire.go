package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/fsm"
)

// One pass of the leader's timers: announce reachability, then expire what
// is due, in as many commands as it takes (each at most fsm.MaxExpireBatch
// leases), so 10,000 leases due together end within one tick and a few
// commits.
//
// The guard against mass expiry. When every worker this leader times (at
// least cutOffWorkers of them) is silent past grace at once, the likeliest
// cause is not that they all died together but that this leader is cut off
// from them: its link to the workers failed (an interface, a firewall, an
// API port swamped) while Raft's still works, so it keeps leading. Without
// the guard it would expire every lease in the cluster and queue every job
// again at once, and the workers, healthy, would come back to find every
// job lost. So it holds every expiry (and says so, once, as an
// application of the absence rule) until it hears from any worker, and
// then charges nobody for the silence it held: every deadline moves by it,
// as for the leader's own absence. A worker that is really gone expires a
// toleration later. Workers stop their own jobs on time regardless (their
// self-stop counts from the acknowledgements they stopped getting), so the
// guard never lets a job run twice; it only spares the cluster a storm of
// re-queued jobs when the fault was the leader's.
const cutOffWorkers = 3

// expiryTick is one pass of the timer loop.
func (n *Node) expiryTick(ctx context.Context, ls *leaderState) {
	log := n.logger.Named("expiry")
	table := ls.table.Load()
	now := n.clock.Now()
	// The gap is measured from the end of the previous tick's work: a tick
	// slowed by its own proposals is not the leader being away.
	defer func() { table.ticked(n.clock.Now()) }()
	// A live lease whose holder the table does not time would never
	// expire; adopt any such holder as heard now (the safe direction). It
	// reads every holder, so it runs every grace/2, not every tick: a lease
	// adopted that late still expires a toleration after it. The progress
	// notes of ended leases go at the same pace.
	if now.Sub(ls.adopted) >= n.cfg.Grace/2 {
		table.adopt(n.fsm.LeaseHolders(), now)
		n.sweepProgress(ls)
		ls.adopted = now
	}
	res := table.tick(now)
	n.expiryLooked.Add(uint64(res.looked))
	var events []fsm.RecordEvent
	if res.gap > 0 {
		log.Warn("absence_rule_applied", "gap", res.gap)
		events = append(events, fsm.RecordEvent{Event: fsm.EventAbsenceRule,
			Detail: fmt.Sprintf("leader absent %s: every deadline shifted by it", res.gap.Round(time.Millisecond))})
	}
	held, guard := n.cutOffGuard(ls, table, now)
	if guard != nil {
		events = append(events, *guard)
	}
	if !held {
		events = append(events, n.reachabilityEvents(res)...)
	}
	n.recordEvents(ctx, events...)
	if held {
		return
	}
	n.proposeExpiries(ctx, ls, table, n.collectDue(table, res.overdue, now))
	n.removeIdle(ctx, ls, table, res.idle, now)
}

// reachabilityEvents announces the workers newly silent past grace or heard
// again. Only registered workers are announced: the table may time a worker
// the state no longer knows (deregistered while it was heard), and an event
// about it would be one nobody earned.
func (n *Node) reachabilityEvents(res tickResult) []fsm.RecordEvent {
	log := n.logger.Named("expiry")
	var events []fsm.RecordEvent
	for _, w := range res.unreachable {
		if n.registered(w) {
			log.Info("worker_unreachable", "worker_id", w)
			events = append(events, fsm.RecordEvent{Event: fsm.EventWorkerUnreachable, WorkerID: w,
				Detail: fmt.Sprintf("silent past grace %s", n.cfg.Grace)})
		}
	}
	for _, w := range res.reachable {
		if n.registered(w) {
			log.Info("worker_reachable", "worker_id", w)
			events = append(events, fsm.RecordEvent{Event: fsm.EventWorkerReachable, WorkerID: w, Detail: "heard again"})
		}
	}
	return events
}

// cutOffGuard says whether this tick holds its expiries, and the event
// that records the guard starting or ending (see the top of this file).
func (n *Node) cutOffGuard(ls *leaderState, table *expiryTable, now time.Time) (held bool, event *fsm.RecordEvent) {
	log := n.logger.Named("expiry")
	timed, silent := table.silentPastGrace()
	cutOff := timed >= cutOffWorkers && silent == timed
	switch {
	case cutOff && ls.cutOffSince.IsZero():
		ls.cutOffSince = now
		log.Warn("expiries_held", "workers", timed, "reason", "every worker silent past grace: this leader may be cut off from them")
		return true, &fsm.RecordEvent{Event: fsm.EventAbsenceRule, Detail: fmt.Sprintf(
			"all %d workers silent past grace %s at once: this leader may be cut off from them; expiries held until one is heard", timed, n.cfg.Grace)}
	case cutOff:
		return true, nil
	case !ls.cutOffSince.IsZero():
		gap := now.Sub(ls.cutOffSince)
		ls.cutOffSince = time.Time{}
		table.shift(gap, now)
		log.Warn("expiries_resumed", "held", gap)
		return false, &fsm.RecordEvent{Event: fsm.EventAbsenceRule, Detail: fmt.Sprintf(
			"a worker heard again after every one was silent: expiries held %s; every deadline shifted by it", gap.Round(time.Millisecond))}
	}
	return false, nil
}

// collectDue decides the expiries due now: those decided earlier whose
// command did not commit, and the live leases of workers silent past
// toleration (re-checked under the table's lock, after which a heartbeat
// answers them lost). It returns the tokens by worker.
func (n *Node) collectDue(table *expiryTable, overdue []string, now time.Time) map[string][]uint64 {
	// A decided expiry is finished whatever happens after the decision:
	// its worker was told "lost" and dropped the job, so the lease must
	// end even if the worker speaks again.
	due := map[string][]uint64{}
	for w, toks := range table.decided() {
		live := liveTokens(n.fsm.WorkerLeases(w))
		for _, tok := range toks {
			if live[tok] {
				due[w] = append(due[w], tok)
			} else {
				table.expired(w, []uint64{tok})
			}
		}
	}
	for _, w := range overdue {
		leases := n.fsm.WorkerLeases(w)
		if len(leases) == 0 {
			if !n.registered(w) {
				table.forget(w, now)
			}
			continue
		}
		toks := make([]uint64, 0, len(leases))
		for _, l := range leases {
			if !slices.Contains(due[w], l.Token) {
				toks = append(toks, l.Token)
			}
		}
		if len(toks) == 0 {
			continue
		}
		if late, ok := table.markExpiring(w, toks, now); ok {
			due[w] = append(due[w], toks...)
			for range toks {
				n.metrics.expiryLateness.Observe(late.Seconds())
			}
		}
	}
	return due
}

// proposeExpiries ends the due leases, in commands of at most
// fsm.MaxExpireBatch leases, after confirming with a quorum that this node
// still leads (a deposed leader expires nothing). A command that fails
// stops the pass; the next tick proposes what is left.
func (n *Node) proposeExpiries(ctx context.Context, ls *leaderState, table *expiryTable, due map[string][]uint64) {
	if len(due) == 0 {
		return
	}
	log := n.logger.Named("expiry")
	if err := n.check.confirm(ctx); err != nil {
		log.Warn("expiry_deferred_not_confirmed", "error", err)
		return
	}
	if cur, err := n.established(); err != nil || cur != ls {
		return
	}
	workers := make([]string, 0, len(due))
	for w := range due {
		workers = append(workers, w)
	}
	slices.Sort(workers)
	reason := fmt.Sprintf("worker silent past toleration %s", n.cfg.Toleration)
	cmd := &fsm.Expire{Reason: reason}
	var in []string // the workers cmd ends leases of
	flush := func() bool {
		if len(cmd.Leases) == 0 {
			return true
		}
		if _, err := n.raftApply(ctx, cmd); err != nil {
			log.Warn("expiry_failed_will_retry", "leases", len(cmd.Leases), "error", err)
			return false
		}
		for _, w := range in {
			table.expired(w, due[w])
			log.Info("leases_expired", "worker_id", w, "leases", len(due[w]))
		}
		cmd, in = &fsm.Expire{Reason: reason}, nil
		return true
	}
	for _, w := range workers {
		jobOf := map[uint64]string{}
		for _, l := range n.fsm.WorkerLeases(w) {
			jobOf[l.Token] = l.JobID
		}
		// A worker's leases go in one command (a worker holds at most
		// fsm.MaxCapacity, no more than a command takes).
		if len(cmd.Leases)+len(due[w]) > fsm.MaxExpireBatch && !flush() {
			return
		}
		for _, tok := range due[w] {
			if job, ok := jobOf[tok]; ok {
				cmd.Leases = append(cmd.Leases, fsm.LeaseRef{JobID: job, Token: tok})
			}
		}
		in = append(in, w)
	}
	flush()
}
