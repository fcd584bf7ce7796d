package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/fsm"
)

// Apply proposes a command as the established leader and returns the state
// machine's result, or its refusal (an fsm sentinel), or a cluster error:
// *NotLeaderError, ErrNotReady, ErrLeadershipLost or ErrTimeout (the last
// two: the outcome is unknown; commands are idempotent, retry them), or a
// *DiskFullError from a node (this one, leader or not) whose disk is full.
//
// Commands a worker sends (register, start, report, release) that the
// state machine accepts count as hearing from it, as of their arrival.
// Acquire and heartbeats have their own entry points.
func (n *Node) Apply(ctx context.Context, cmd fsm.Command) (any, error) {
	ls, err := n.admit(cmd)
	if err != nil {
		return nil, err
	}
	at := n.clock.Now()
	res, err := n.raftApply(ctx, cmd)
	n.afterApply(ls, cmd, at, res, err)
	return res, err
}

// admit runs Apply's checks of a command from outside: nothing it refuses
// reaches the log.
func (n *Node) admit(cmd fsm.Command) (*leaderState, error) {
	switch cmd.(type) {
	case *fsm.Acquire, *fsm.Expire, *fsm.RemoveIdle, *fsm.FireSchedule:
		// Grants go through Acquire (reachability, long poll), expiries,
		// idle removals and schedule slots through the leader's own
		// timers, never from outside.
		return nil, fmt.Errorf("%w: %T is not accepted here", fsm.ErrInvalidArgument, cmd)
	}
	if err := n.disk.err(); err != nil {
		return nil, err
	}
	ls, err := n.established()
	if err != nil {
		return nil, err
	}
	if c, ok := cmd.(*fsm.SubmitJob); ok {
		if err := n.checkSubmit(ls, c); err != nil {
			return nil, err
		}
	}
	if c, ok := cmd.(*fsm.RetryJob); ok {
		if err := n.checkRetry(c); err != nil {
			return nil, err
		}
	}
	if c, ok := cmd.(*fsm.PutSchedule); ok && !c.PauseOnly {
		if err := n.checkScheduleRoom(c); err != nil {
			return nil, err
		}
	}
	if reg, ok := cmd.(*fsm.RegisterWorker); ok {
		if err := n.checkWorkerRoom(reg.WorkerID); err != nil {
			return nil, err
		}
	}
	if tok := tokenOf(cmd); tok != 0 {
		// A token above every grant is made up: refused before it reaches
		// the log (the state machine refuses it alike, unrecorded). The
		// established leader has applied every grant a worker can know of.
		if err := n.fsm.CheckGranted(tok); err != nil {
			return nil, err
		}
	}
	return ls, nil
}

// afterApply notes what an admitted command, which arrived at at, did.
func (n *Node) afterApply(ls *leaderState, cmd fsm.Command, at time.Time, res any, err error) {
	switch cmd.(type) {
	case *fsm.PutSchedule, *fsm.DeleteSchedule:
		n.wakeSchedules() // its next slot may be the earliest now
	}
	if r, ok := res.(fsm.ReportResult); ok && err == nil {
		n.metrics.reported(r)
	}
	if w := workerOf(cmd); w != "" && err == nil {
		// Only a command the state machine took: a stale report
		// refused, or one sent by anyone in the worker's name about a
		// lease it no longer holds, says nothing about the worker.
		ls.table.Load().heard(w, at)
	}
}

func workerOf(cmd fsm.Command) string {
	switch c := cmd.(type) {
	case *fsm.RegisterWorker:
		// A restarted worker counts its self-stop from its registration:
		// the leader must count its silence from there too.
		return c.WorkerID
	case *fsm.Start:
		return c.WorkerID
	case *fsm.Report:
		return c.WorkerID
	case *fsm.Release:
		return c.WorkerID
	}
	return ""
}

// checkWorkerRoom refuses to register a new worker while MaxWorkers are
// registered; a registered one may always register again. Registrations
// in flight together may pass it by their number: the state machine's own
// bound (fsm.MaxWorkers) is exact.
func (n *Node) checkWorkerRoom(worker string) error {
	if n.registered(worker) {
		return nil
	}
	if count := n.fsm.WorkerCount(); count >= n.cfg.MaxWorkers {
		return fmt.Errorf("%w: %d workers registered and max_workers is %d; workers silent for %s are removed",
			fsm.ErrTooLarge, count, n.cfg.MaxWorkers, n.cfg.WorkerGCThreshold)
	}
	return nil
}

// tokenOf is the token a worker's lease action names, or 0.
func tokenOf(cmd fsm.Command) uint64 {
	switch c := cmd.(type) {
	case *fsm.Start:
		return c.Token
	case *fsm.Report:
		return c.Token
	case *fsm.Release:
		return c.Token
	}
	return 0
}

// raftApply stamps the leader's wall time on a command, validates and
// encodes it (nothing invalid reaches the log), and waits for it to apply.
func (n *Node) raftApply(ctx context.Context, cmd fsm.Command) (any, error) {
	cmd, err := n.checkLevel(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return n.raftApplyUnchecked(ctx, cmd)
}

// raftApplyUnchecked is raftApply without the level check: for the leader's
// record of the voters' levels, proposed only when every voter said it
// applies it (levels.go).
func (n *Node) raftApplyUnchecked(ctx context.Context, cmd fsm.Command) (any, error) {
	p, err := n.raftPropose(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if c, ok := cmd.(*fsm.SubmitJob); ok && !commitBeforeAck {
		// The broken chaos_earlyack build: answered before any quorum
		// has the entry, as the state machine would answer a new job.
		return fsm.SubmitResult{Job: fsm.Job{JobSpec: c.Spec, State: fsm.JobQueued}, Created: true}, nil
	}
	return p.wait(ctx)
}

// proposal is a command handed to Raft, not yet waited for.
type proposal struct {
	n     *Node
	cmd   fsm.Command
	f     raft.ApplyFuture
	start time.Time
}

// raftPropose stamps, encodes and hands a command to Raft without
// waiting: proposals made one after another are applied in that order.
func (n *Node) raftPropose(ctx context.Context, cmd fsm.Command) (*proposal, error) {
	data, err := fsm.Encode(n.clock.Wall().UnixNano(), cmd)
	if err != nil {
		return nil, err
	}
	timeout := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("%w: %w", ErrTimeout, context.DeadlineExceeded)
	}
	if n.life.Err() != nil {
		return nil, ErrShutdown // no waiter left behind by a stopping node
	}
	start := time.Now()
	return &proposal{n: n, cmd: cmd, f: n.raft.Apply(data, timeout), start: start}, nil
}

// wait waits for the proposal to apply and returns the state machine's
// answer.
func (p *proposal) wait(ctx context.Context) (any, error) {
	if err := p.n.waitRaft(ctx, p.f); err != nil {
		return nil, err
	}
	p.n.metrics.apply.WithLabelValues(p.cmd.Type().String()).Observe(time.Since(p.start).Seconds())
	res := p.f.Response()
	if r, refused := res.(applyResult); refused {
		return r.value, r.err
	}
	return res, nil
}

// waitRaft waits for a Raft future (an entry's, a configuration
// change's), but not past ctx nor past the node's life. The future cannot
// be cancelled; Raft resolves every future by commit, leadership loss or
// shutdown, but one: a future still in its queue when it shuts down is
// never answered. Its caller, which may hold memberMu, returns.
//
// Raft's futures (our copy, third_party/raft) wait on those two themselves
// (ErrorUntil), so nothing is left waiting on a future no one will
// answer, and a proposal costs no goroutine.
func (n *Node) waitRaft(ctx context.Context, f raft.Future) error {
	err, resolved := futureError(f, ctx.Done(), n.life.Done())
	switch {
	case !resolved && n.life.Err() != nil:
		return ErrShutdown
	case !resolved:
		return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	case err != nil:
		return n.raftError(err)
	}
	return nil
}

// futureError is f's error once it resolves, or false as soon as stop or
// alsoStop (either may be nil) is closed first. A future without
// ErrorUntil (one Raft answers at once with an error) is waited on by a
// goroutine of its own.
func futureError(f raft.Future, stop, alsoStop <-chan struct{}) (error, bool) {
	if u, ok := f.(untilFuture); ok {
		return u.ErrorUntil(stop, alsoStop)
	}
	var err error
	done := make(chan struct{})
	go func() {
		err = f.Error()
		close(done)
	}()
	select {
	case <-done:
		return err, true
	case <-stop:
	case <-alsoStop:
	}
	return nil, false
}

// untilFuture is a Raft future that can stop waiting (third_party/raft's
// deferError).
type untilFuture interface {
	ErrorUntil(stop, alsoStop <-chan struct{}) (error, bool)
}

// raftError maps Raft's errors to the cluster's.
func (n *Node) raftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return n.notLeader()
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Refused before it was appended: nothing happened; retry.
		return fmt.Errorf("%w: %v", ErrNotReady, err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("%w: %v", ErrLeadershipLost, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	}
	// Raft's log cache passes a store's error on as text: a failed
	// append on a full disk is known by the disk state it left.
	if derr := n.disk.err(); derr != nil {
		return derr
	}
	return err
}

// notLeader names the leader as this node knows it: its id and Raft
// address from the Raft configuration, its API address from the replicated
// node table.
func (n *Node) notLeader() error {
	e := &NotLeaderError{}
	id, addr, err := n.leaderPeer()
	if err != nil {
		return e
	}
	e.LeaderID, e.LeaderRaft = id, addr
	if node, ok := n.fsm.Node(id); ok {
		e.LeaderAPI = node.APIAddr
	}
	return e
}

// ReadBarrier makes the next read of FSM() linearizable: this node is the
// leader (confirmed by a quorum after the call began) and has applied
// everything committed before it. Concurrent barriers share one quorum
// check.
func (n *Node) ReadBarrier(ctx context.Context) error {
	if _, err := n.established(); err != nil {
		return err
	}
	commit := n.raft.CommitIndex()
	if err := n.check.confirm(ctx); err != nil {
		return n.raftError(err)
	}
	// Applying lags committing by a little on the leader; wait it out.
	for wait := 50 * time.Microsecond; n.raft.AppliedIndex() < commit; wait = min(2*wait, 5*time.Millisecond) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
		case <-n.life.Done():
			return ErrShutdown
		case <-time.After(wait):
		}
	}
	return nil
}

// State returns the state machine for reading: after a ReadBarrier by
// default, as it is on this node when stale is set.
func (n *Node) State(ctx context.Context, stale bool) (*fsm.FSM, error) {
	if !stale && linearizableReads {
		if err := n.ReadBarrier(ctx); err != nil {
			return nil, err
		}
	}
	return n.fsm, nil
}
