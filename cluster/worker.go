package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport/rules"
)

// Verdict is the heartbeat's answer for one lease.
type Verdict uint8

const (
	// VerdictKeep: the lease is live; keep going.
	VerdictKeep Verdict = 1
	// VerdictStop: the lease is live but revoked (see LeaseStatus.Revoke):
	// stop the job and report.
	VerdictStop Verdict = 2
	// VerdictLost: the token is not a live lease of this worker (expired,
	// ended, another worker's, unknown) or its expiry is under way: stop now.
	VerdictLost Verdict = 3
)

func (v Verdict) String() string {
	switch v {
	case VerdictKeep:
		return "keep"
	case VerdictStop:
		return "stop"
	case VerdictLost:
		return "lost"
	}
	return "unknown"
}

// LeaseStatus is the heartbeat's answer for one lease the worker named.
type LeaseStatus struct {
	JobID   string
	Token   uint64
	Verdict Verdict
	Revoke  fsm.Revoke // with VerdictStop: cancel or kill
}

// HeartbeatResult answers one heartbeat.
type HeartbeatResult struct {
	// Leases answers each lease the worker named, in its order.
	Leases []LeaseStatus
	// Unnamed lists live leases of the worker that it did not name (the
	// reply to its acquire was lost, or it restarted): it should take them
	// up or release them.
	Unnamed []fsm.HeldLease
	// Term is the leader's term that answered, whose memory holds the
	// beat's progress notes.
	Term uint64
}

// Heartbeat renews every lease of a worker, in the leader's memory only,
// and answers each lease it holds. The renewal is recorded on arrival (it
// only ever delays an expiry), but the reply, the acknowledgement the
// worker's self-stop counts from, is sent only after a quorum has confirmed
// this node's leadership since the heartbeat arrived: a deposed leader
// cannot acknowledge anything. It is one beat of Heartbeats, which a
// heartbeat stream uses for many.
//
// A worker the state does not know (never registered, deregistered, or
// removed as idle) gets fsm.ErrUnknownWorker and is not timed: made-up ids
// must cost neither an entry in the table nor an event when they fall
// silent. The client registers again when told so.
func (n *Node) Heartbeat(ctx context.Context, workerID string, held []fsm.LeaseRef, notes ...ProgressNote) (HeartbeatResult, error) {
	if err := fsm.ValidateHeld(workerID, held); err != nil {
		return HeartbeatResult{}, err
	}
	h, err := n.Heartbeats()
	if err != nil {
		return HeartbeatResult{}, err
	}
	a, err := h.Arrive(workerID, held, notes...)
	if err != nil {
		return HeartbeatResult{}, err
	}
	if err := h.Confirm(ctx); err != nil {
		return HeartbeatResult{}, err
	}
	var res HeartbeatResult
	h.Answer(&res, workerID, held, a)
	return res, nil
}

// Acquire grants leases to a worker, waiting up to wait for a job to be
// queued (a long poll, not a busy one). The request counts as hearing from
// the worker when it arrives; while it waits, a worker that falls silent
// past grace becomes unreachable and the wait ends without a grant. A
// retried request id gets the first answer. A worker the state does not
// know gets fsm.ErrUnknownWorker, untimed, like a heartbeat; so does a
// parked poll whose worker is deregistered meanwhile.
func (n *Node) Acquire(ctx context.Context, req fsm.Acquire, wait time.Duration) (fsm.AcquireResult, error) {
	if err := req.Validate(); err != nil {
		return fsm.AcquireResult{}, err
	}
	if err := n.disk.err(); err != nil {
		return fsm.AcquireResult{}, err
	}
	ls, err := n.established()
	if err != nil {
		return fsm.AcquireResult{}, err
	}
	if _, err := n.fsm.Worker(req.WorkerID); err != nil {
		return fsm.AcquireResult{}, err
	}
	arrived := n.clock.Now()
	ls.table.Load().heard(req.WorkerID, arrived)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	key := gateKey(&req)
	for {
		if cur, err := n.established(); err != nil || cur != ls {
			return fsm.AcquireResult{}, n.notLeader()
		}
		if _, err := n.fsm.Worker(req.WorkerID); err != nil {
			return fsm.AcquireResult{}, err
		}
		if res, ok := n.fsm.AcquireReplay(req.WorkerID, req.RequestID); ok {
			return res, nil
		}
		if !ls.table.Load().reachable(req.WorkerID, arrived, n.clock.Now()) {
			return fsm.AcquireResult{}, ErrUnreachable
		}
		changed, gateChanged := n.fsm.Changed(), n.gate.changed()
		// The command will carry the leader's time: jobs due by then count.
		now := n.clock.Wall().UnixNano()
		ready := n.fsm.ReadyAt(req.Queues, req.Kinds, now)
		if n.canGrant(&req, ready) && n.gate.enter(key, ready) {
			v, err := n.raftApply(ctx, &req)
			n.gate.leave(key)
			if err != nil {
				return fsm.AcquireResult{}, err
			}
			if res := v.(fsm.AcquireResult); len(res.Grants) > 0 || res.Replayed {
				n.noteGrants(ls, req.WorkerID, arrived, res)
				return res, nil
			}
			continue
		}
		// A job that comes due changes nothing in the state: wake for it.
		var due <-chan time.Time
		var dueTimer *time.Timer
		if at, ok := n.fsm.NextDueAfter(now); ok {
			// At most a second: the timer runs on the monotonic clock and
			// the due time is a wall time, which may step forward.
			dueTimer = time.NewTimer(min(time.Duration(at-now), dueRecheck))
			due = dueTimer.C
		}
		var err error
		timedOut := false
		n.parked.Add(1)
		select {
		case <-changed:
		case <-gateChanged:
		case <-due:
		case <-timer.C:
			timedOut = true
		case <-ctx.Done():
			err = ctx.Err()
		case <-n.life.Done():
			err = ErrShutdown
		}
		n.parked.Add(-1)
		if dueTimer != nil {
			dueTimer.Stop()
		}
		if timedOut || err != nil {
			return fsm.AcquireResult{}, err
		}
	}
}

// noteGrants counts an acquire's grants, and hears from its worker as of
// the acquire's arrival: its leases are timed from its last hearing, even
// if the table forgot the worker while a poll was parked.
func (n *Node) noteGrants(ls *leaderState, worker string, arrived time.Time, res fsm.AcquireResult) {
	n.metrics.granted(res)
	if !res.Replayed {
		at := n.clock.Now()
		for _, g := range res.Grants {
			n.grants.record(g.Job.Queue, 1, at)
		}
	}
	ls.table.Load().heard(worker, arrived)
}

// ReportNext applies a report and then an acquire for the same worker,
// waiting up to wait: a worker's report of one job and its request for the
// next in one call. Both are checked before either is proposed, so an
// invalid acquire applies nothing (its fields named next.FIELD).
//
// When the reported lease is live, its expiry not decided, and the acquire
// would grant (jobs ready, room once the lease ends), the acquire is
// proposed right behind the report, without waiting for it: the log
// applies them in that order, so the report frees the slot the acquire
// fills, and the call costs about one commit instead of two. Otherwise (or when that acquire grants
// nothing) the acquire runs after the report, as Acquire does, long poll
// included. A refused report is returned as the error; an acquire proposed
// with it is still applied (the lease ended under the report, by expiry
// or a revoke), and its grants are the worker's, which its next heartbeat
// lists among the leases it did not name. When the report applied but the
// acquire failed (leadership lost, say), the acquire's error is returned:
// sent again with the same report id and request id, both answer as the
// first time.
func (n *Node) ReportNext(ctx context.Context, rep *fsm.Report, next fsm.Acquire, wait time.Duration) (fsm.ReportResult, fsm.AcquireResult, error) {
	if err := rep.Validate(); err != nil {
		return fsm.ReportResult{}, fsm.AcquireResult{}, err
	}
	if next.WorkerID != rep.WorkerID {
		return fsm.ReportResult{}, fsm.AcquireResult{}, rules.Invalid("next.worker_id", "%q is not the report's worker %q",
			next.WorkerID, rep.WorkerID)
	}
	if err := next.Validate(); err != nil {
		return fsm.ReportResult{}, fsm.AcquireResult{}, fsm.InField("next", err)
	}
	ls, err := n.admit(rep)
	if err != nil {
		return fsm.ReportResult{}, fsm.AcquireResult{}, err
	}
	at := n.clock.Now()
	cmd, err := n.checkLevel(ctx, rep)
	if err != nil {
		return fsm.ReportResult{}, fsm.AcquireResult{}, err
	}
	rp, err := n.raftPropose(ctx, cmd)
	if err != nil {
		return fsm.ReportResult{}, fsm.AcquireResult{}, err
	}
	ap, key := n.proposeBehind(ctx, ls, rep, &next)
	v, err := rp.wait(ctx)
	n.afterApply(ls, rep, at, v, err)
	var behind fsm.AcquireResult
	var aerr error
	if ap != nil {
		var av any
		av, aerr = ap.wait(ctx)
		n.gate.leave(key)
		if aerr == nil {
			behind, _ = av.(fsm.AcquireResult)
			if len(behind.Grants) > 0 || behind.Replayed {
				n.noteGrants(ls, next.WorkerID, at, behind)
			}
		}
	}
	r, ok := v.(fsm.ReportResult)
	switch {
	case err == nil && !ok:
		err = fmt.Errorf("report answered %T", v)
	case err == nil && aerr != nil:
		err = aerr
	}
	if err != nil {
		n.metrics.reportNext.WithLabelValues("none").Inc()
		return fsm.ReportResult{}, fsm.AcquireResult{}, err
	}
	if len(behind.Grants) > 0 || behind.Replayed {
		n.metrics.reportNext.WithLabelValues("behind").Inc()
		return r, behind, nil
	}
	res, err := n.Acquire(ctx, next, wait)
	if err != nil {
		n.metrics.reportNext.WithLabelValues("none").Inc()
		return r, fsm.AcquireResult{}, err
	}
	n.metrics.reportNext.WithLabelValues("after").Inc()
	return r, res, nil
}

// proposeBehind proposes next right behind the report rep, when rep names
// a live lease of its worker whose expiry is not decided and next would
// grant once that lease ends; else nil. The gate key it entered is left by
// the caller.
func (n *Node) proposeBehind(ctx context.Context, ls *leaderState, rep *fsm.Report, next *fsm.Acquire) (*proposal, string) {
	w, err := n.fsm.Worker(next.WorkerID)
	if err != nil || ls.table.Load().expiringLease(rep.WorkerID, rep.Token) {
		return nil, ""
	}
	held := n.fsm.WorkerLeases(next.WorkerID)
	if !slices.ContainsFunc(held, func(l fsm.HeldLease) bool { return l.Token == rep.Token && l.JobID == rep.JobID }) ||
		len(held)-1 >= int(w.Capacity) {
		return nil, ""
	}
	ready := n.fsm.ReadyAt(next.Queues, next.Kinds, n.clock.Wall().UnixNano())
	key := gateKey(next)
	if ready == 0 || !n.gate.enter(key, ready) {
		return nil, ""
	}
	cmd, err := n.checkLevel(ctx, next)
	var p *proposal
	if err == nil {
		p, err = n.raftPropose(ctx, cmd)
	}
	if err != nil {
		n.gate.leave(key)
		return nil, ""
	}
	return p, key
}

// dueRecheck bounds a parked acquire's wait for the next due job, so a step
// of the leader's wall clock is noticed within it.
const dueRecheck = time.Second

// canGrant reports whether an acquire could grant anything now: the worker
// is registered with free capacity and ready jobs are queued for it.
func (n *Node) canGrant(req *fsm.Acquire, ready int) bool {
	w, err := n.fsm.Worker(req.WorkerID)
	if err != nil {
		return false
	}
	return len(n.fsm.WorkerLeases(req.WorkerID)) < int(w.Capacity) && ready > 0
}

// acquireGate keeps parked long-polls from stampeding: when one job is
// queued, a thousand waiting acquires must not each propose a command that
// grants nothing. A proposal for a set of queues enters only while the jobs
// ready for it outnumber the proposals for it in flight.
type acquireGate struct {
	mu       sync.Mutex
	inflight map[string]int
	notify   chan struct{} // closed when a proposal leaves
}

func newAcquireGate() *acquireGate {
	return &acquireGate{inflight: map[string]int{}, notify: make(chan struct{})}
}

func (g *acquireGate) changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.notify
}

func (g *acquireGate) enter(key string, ready int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inflight[key] >= ready {
		return false
	}
	g.inflight[key]++
	return true
}

func (g *acquireGate) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inflight[key]--; g.inflight[key] <= 0 {
		delete(g.inflight, key)
	}
	close(g.notify)
	g.notify = make(chan struct{})
}

// gateKey names the set of queues and kinds an acquire picks from.
func gateKey(req *fsm.Acquire) string {
	return sortedJoin(req.Queues) + "|" + sortedJoin(req.Kinds)
}

// sortedJoin joins the names in sorted order, copying them only when
// they are not sorted already (one queue, the usual acquire, costs nothing).
func sortedJoin(names []string) string {
	if !slices.IsSorted(names) {
		names = slices.Sorted(slices.Values(names))
	}
	return strings.Join(names, ",")
}
