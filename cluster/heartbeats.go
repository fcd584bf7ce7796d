package cluster

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/fsm"
)

// Heartbeats answers heartbeats within one term of this node's leadership:
// a unary Heartbeat takes one for its single beat, a heartbeat stream one
// for its whole life. Each beat is recorded when it arrives (Arrive: a
// renewal only ever delays an expiry), and answered (Answer) only after
// Confirm: a quorum confirmed this node's office after the beat arrived,
// and the term that recorded it still holds office. One Confirm serves
// every beat that arrived before it was called, so a stream confirms its
// beats in batches, as the batched check (verify.go) does across callers.
//
// Arrive may run while Confirm or Answer runs (a stream's reader records
// the next beat while its answerer waits for the check); Confirm and Answer
// reuse buffers and belong to one goroutine.
type Heartbeats struct {
	n  *Node
	ls *leaderState // nil in the unchecked build
	// table is the unchecked build's (chaos_noverify): the last one this
	// node had, leader or not.
	table *expiryTable
	done  <-chan struct{}

	answer chan error      // Confirm's, reused while it is not abandoned
	live   []fsm.HeldLease // Answer's
	named  []uint64        // Answer's
}

// Heartbeats returns the heartbeats of this node's current term, or the
// error a heartbeat gets here: a *NotLeaderError naming the leader,
// ErrNotReady while a new leader takes office.
func (n *Node) Heartbeats() (*Heartbeats, error) {
	if !quorumBeforeAck {
		n.mu.Lock()
		table := n.lastTable
		n.mu.Unlock()
		if table == nil {
			return nil, n.notLeader()
		}
		return &Heartbeats{n: n, table: table}, nil
	}
	ls, err := n.established()
	if err != nil {
		return nil, err
	}
	return &Heartbeats{n: n, ls: ls, done: ls.done}, nil
}

// Done is closed when the term ends: leadership lost, or the node
// stopping. A stream ends then, answering NOT_LEADER.
func (h *Heartbeats) Done() <-chan struct{} { return h.done }

// term is the term whose office answers the beats (the unchecked build's:
// the node's current one).
func (h *Heartbeats) term() uint64 {
	if h.ls != nil {
		return h.ls.term
	}
	return h.n.raft.CurrentTerm()
}

// NotLeader is the error of a beat that reaches a term that has ended:
// the leader as this node now knows it.
func (h *Heartbeats) NotLeader() error { return h.n.notLeader() }

// Arrival is a recorded beat waiting for its answer.
type Arrival struct {
	// expiring holds the tokens whose expiry was decided when the beat
	// arrived: they are answered lost.
	expiring map[uint64]bool
	// at is when it arrived on Go's own clock, for the ack latency: a
	// metric, not a deadline, so it is not read on the node's clock (on
	// Linux a system call each: a second one per beat).
	at time.Time
	// notes are the beat's progress notes, recorded by Answer for the
	// leases it finds live; wall is when the beat arrived, on the wall
	// clock (shown with the note).
	notes map[uint64]string
	wall  time.Time
}

// Arrive validates a beat and records the worker as heard now. A worker the
// state does not know gets fsm.ErrUnknownWorker and is not timed; a beat
// arriving after the term ended gets the NOT_LEADER answer. The beat's
// progress notes, if any, wait for Answer: only a lease it finds current
// gets its note recorded.
func (h *Heartbeats) Arrive(workerID string, held []fsm.LeaseRef, notes ...ProgressNote) (Arrival, error) {
	if err := fsm.ValidateHeld(workerID, held); err != nil {
		return Arrival{}, err
	}
	if err := validateNotes(held, notes); err != nil {
		return Arrival{}, err
	}
	table := h.table
	if h.ls != nil {
		cur, err := h.n.established()
		if err != nil {
			return Arrival{}, err
		}
		if cur != h.ls {
			return Arrival{}, h.n.notLeader()
		}
		table = h.ls.table.Load()
	}
	if _, err := h.n.fsm.Worker(workerID); err != nil {
		return Arrival{}, err
	}
	now := h.n.clock.Now()
	a := Arrival{expiring: table.heard(workerID, now), at: time.Now()}
	if len(notes) > 0 {
		a.notes, a.wall = make(map[uint64]string, len(notes)), h.n.clock.Wall()
		for _, n := range notes {
			a.notes[n.Token] = n.Note
		}
	}
	return a, nil
}

// Confirm returns nil once a quorum has confirmed this node's leadership
// since the call began and the term is still the one every beat arrived
// in: each beat that arrived before the call may then be answered.
func (h *Heartbeats) Confirm(ctx context.Context) error {
	if h.ls == nil {
		return nil // the unchecked build
	}
	if h.answer == nil {
		h.answer = make(chan error, 1)
	}
	err := h.n.check.confirmOn(ctx, h.answer)
	if ctx.Err() != nil {
		// The check will still answer into the channel: never reuse it.
		h.answer = nil
	}
	if errors.Is(err, raft.ErrLeadershipLost) {
		// Not "outcome unknown", as for a write: the beat is known to be
		// unacknowledged, and its renewal died with the term's table.
		return h.n.notLeader()
	}
	if err != nil {
		return h.n.raftError(err)
	}
	// Leadership may have changed hands (and back) during the check: the
	// renewals went into this term's table, so only this term may answer.
	if cur, err := h.n.established(); err != nil || cur != h.ls {
		return h.n.notLeader()
	}
	return nil
}

// Answer fills res with the answer to a confirmed beat from the state,
// reusing res's slices: each lease the worker named, in its order (keep,
// stop when revoked, lost when not live or its expiry is decided), and the
// live leases it did not name, by token. The beat's progress notes are
// recorded for the leases answered keep or stop: live, held by this worker,
// under the token named, as of a state read after the quorum check.
func (h *Heartbeats) Answer(res *HeartbeatResult, workerID string, held []fsm.LeaseRef, a Arrival) {
	defer func() { h.n.metrics.heartbeatAck.Observe(time.Since(a.at).Seconds()) }()
	byToken := func(a, b fsm.HeldLease) int { return cmp.Compare(a.Token, b.Token) }
	h.live = h.n.fsm.AppendWorkerLeases(h.live[:0], workerID)
	slices.SortFunc(h.live, byToken)
	h.named = h.named[:0]
	for _, l := range held {
		h.named = append(h.named, l.Token)
	}
	slices.Sort(h.named)

	clear(res.Leases) // the last beat's job ids: not kept past their beat
	res.Leases, res.Unnamed = res.Leases[:0], res.Unnamed[:0]
	res.Term = h.term()
	for _, l := range held {
		st := LeaseStatus{JobID: l.JobID, Token: l.Token, Verdict: VerdictLost}
		i, ok := slices.BinarySearchFunc(h.live, l.Token, func(l fsm.HeldLease, tok uint64) int { return cmp.Compare(l.Token, tok) })
		if ok && h.live[i].JobID == l.JobID && !a.expiring[l.Token] {
			st.Verdict, st.Revoke = VerdictKeep, h.live[i].Revoke
			if st.Revoke != fsm.RevokeNone {
				st.Verdict = VerdictStop
			}
			if st.Revoke == fsm.RevokeTimeout {
				st.Revoke = fsm.RevokeKill // a timeout stops the job as a kill does
			}
			if note, ok := a.notes[l.Token]; ok && h.ls != nil {
				// Keyed by the state's copy of the id, which the table
				// shares rather than holding the request's.
				h.ls.progress.hear(h.live[i].JobID, l.Token, note, a.wall)
			}
		}
		res.Leases = append(res.Leases, st)
	}
	for _, l := range h.live {
		if _, named := slices.BinarySearch(h.named, l.Token); !named && !a.expiring[l.Token] {
			res.Unnamed = append(res.Unnamed, l)
		}
	}
}
