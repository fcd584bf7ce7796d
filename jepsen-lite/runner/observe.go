package runner

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/jepsen-lite/workload"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// eventLog reads the cluster's replicated event log from its first event
// and records every event as it comes.
type eventLog struct {
	rec    *history.Recorder
	client *client.Client

	mu       sync.Mutex
	last     uint64
	gap      bool  // a seq was skipped, or the log was truncated
	stopping bool  // stop was called: the watch's end is expected
	err      error // why Watch ended, if it did on its own
	changed  chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}
}

func startEventLog(ctx context.Context, rec *history.Recorder, c *client.Client) *eventLog {
	ctx, cancel := context.WithCancel(ctx)
	l := &eventLog{rec: rec, client: c, changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		err := c.Watch(ctx, 0, l.record)
		l.mu.Lock()
		if !l.stopping {
			// Ended before stop asked: an error, or the run itself was
			// cancelled. Either way the log was not read whole.
			if err == nil {
				err = errors.New("runner: event watch ended")
			}
			l.err = err
			l.gap = true
		}
		l.mu.Unlock()
	}()
	return l
}

func (l *eventLog) record(evs []*leaseholdv1.Event) error {
	node := l.client.Leader()
	now := history.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range evs {
		if ev.GetSeq() <= l.last {
			continue
		}
		if ev.GetSeq() != l.last+1 {
			l.gap = true
		}
		l.last = ev.GetSeq()
		l.rec.Append(history.Entry{Kind: history.KindClusterEvent, Ns: now, Process: "events", Event: history.ClusterEventOf(ev, node)})
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return nil
}

// catchUp waits until every event up to seq was read, up to bound.
func (l *eventLog) catchUp(ctx context.Context, seq uint64, bound time.Duration) error {
	t := time.NewTimer(bound)
	defer t.Stop()
	for {
		l.mu.Lock()
		last, changed, err := l.last, l.changed, l.err
		l.mu.Unlock()
		if last >= seq {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-changed:
		case <-l.done:
			l.mu.Lock()
			last, err = l.last, l.err
			l.mu.Unlock()
			if last >= seq {
				return nil
			}
			return fmt.Errorf("runner: event watch ended at seq %d of %d: %v", last, seq, err)
		case <-t.C:
			return fmt.Errorf("runner: events read to seq %d of %d within %v", last, seq, bound)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stop ends the reading and says whether the log was read whole, to
// which seq.
func (l *eventLog) stop() (complete bool, last uint64) {
	l.mu.Lock()
	l.stopping = true
	l.mu.Unlock()
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.gap, l.last
}

// finalStates waits until every node has applied the same index, then
// reads each node's jobs and state hash from that node alone, and checks
// that no node applied anything meanwhile; it records one final_state per
// node. It returns the leader's last event seq.
func (c *cluster) finalStates(ctx context.Context, rec *history.Recorder, bound time.Duration) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var lastErr error
	for {
		finals, lastSeq, err := c.readFinals(ctx)
		if err == nil {
			for i := range finals {
				rec.Append(history.Entry{Kind: history.KindFinalState, Process: "runner", Final: &finals[i]})
			}
			return lastSeq, nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("runner: final states: %w", lastErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var errMoving = errors.New("nodes applied entries while they were read")

func (c *cluster) readFinals(ctx context.Context) ([]history.FinalState, uint64, error) {
	before := c.statuses(ctx, 2*time.Second, false)
	var idx, lastSeq uint64
	for i, st := range before {
		if st == nil {
			return nil, 0, fmt.Errorf("%s does not answer", c.nodes[i].name)
		}
		if i > 0 && st.GetAppliedIndex() != idx {
			return nil, 0, fmt.Errorf("applied indexes differ: %s at %d, %s at %d", c.nodes[0].name, idx, c.nodes[i].name, st.GetAppliedIndex())
		}
		idx = st.GetAppliedIndex()
		lastSeq = max(lastSeq, st.GetLastEventSeq())
	}
	out := make([]history.FinalState, len(c.nodes))
	for i := range c.nodes {
		jobs, err := c.listJobs(ctx, i)
		if err != nil {
			return nil, 0, err
		}
		st, err := c.statusOf(ctx, i, true)
		if err != nil {
			return nil, 0, err
		}
		if st.GetAppliedIndex() != idx {
			return nil, 0, errMoving
		}
		members, err := c.membersOf(ctx, i)
		if err != nil {
			return nil, 0, err
		}
		events, err := c.eventLogOf(ctx, i)
		if err != nil {
			return nil, 0, err
		}
		out[i] = history.FinalState{Node: c.nodes[i].name, StateHash: hex.EncodeToString(st.GetStateHash()),
			AppliedIndex: idx, LastToken: st.GetLastToken(), Complete: true, Jobs: jobs, Term: st.GetTerm(), Members: members,
			Events: events}
	}
	for i := range out {
		out[i].CutEventSeq = lastSeq
	}
	for i, st := range c.statuses(ctx, 2*time.Second, false) {
		if st == nil || st.GetAppliedIndex() != idx {
			return nil, 0, fmt.Errorf("%s: %w", c.nodes[i].name, errMoving)
		}
	}
	return out, lastSeq, nil
}

// listJobs lists every job node i keeps, from its own state.
func (c *cluster) listJobs(ctx context.Context, i int) ([]history.JobSummary, error) {
	out := []history.JobSummary{}
	var page uint64
	for {
		resp, err := c.jobs[i].ListJobs(ctx, connect.NewRequest(&leaseholdv1.ListJobsRequest{
			PageToken: page, PageSize: 1000, Consistency: leaseholdv1.Consistency_CONSISTENCY_STALE}))
		if err != nil {
			return nil, fmt.Errorf("%s: list jobs: %w", c.nodes[i].name, err)
		}
		for _, j := range resp.Msg.GetJobs() {
			out = append(out, history.JobSummaryOf(j))
		}
		if page = resp.Msg.GetNextPageToken(); page == 0 {
			return out, nil
		}
	}
}

// eventLogOf sums up the event log node i holds, read from its first
// retained event (stale reads from that node alone).
func (c *cluster) eventLogOf(ctx context.Context, i int) (*history.EventLog, error) {
	out := &history.EventLog{ByType: map[string]int{}}
	var after uint64
	for first := true; ; first = false {
		resp, err := c.events[i].ListEvents(ctx, connect.NewRequest(&leaseholdv1.ListEventsRequest{
			AfterSeq: after, Limit: 1000, Consistency: leaseholdv1.Consistency_CONSISTENCY_STALE}))
		if err != nil {
			return nil, fmt.Errorf("%s: list events: %w", c.nodes[i].name, err)
		}
		m := resp.Msg
		if first {
			out.Truncated = m.GetTruncated()
		}
		for _, ev := range m.GetEvents() {
			if out.FirstSeq == 0 {
				out.FirstSeq = ev.GetSeq()
			}
			out.LastSeq = ev.GetSeq()
			out.Count++
			out.ByType[ev.GetType()]++
			if ev.GetType() == history.EventStaleReport {
				out.StaleReports = append(out.StaleReports, ev.GetSeq())
			}
		}
		if len(m.GetEvents()) == 0 || out.LastSeq >= m.GetLastSeq() {
			return out, nil
		}
		after = out.LastSeq
	}
}

// membersOf is node i's own view of the membership.
func (c *cluster) membersOf(ctx context.Context, i int) ([]history.Member, error) {
	resp, err := c.status[i].Members(ctx, connect.NewRequest(&leaseholdv1.MembersRequest{}))
	if err != nil {
		return nil, fmt.Errorf("%s: members: %w", c.nodes[i].name, err)
	}
	out := []history.Member{}
	for _, m := range resp.Msg.GetMembers() {
		out = append(out, history.Member{ID: m.GetId(), RaftAddr: m.GetRaftAddr(), APIAddr: m.GetApiAddr(), Voter: m.GetVoter()})
	}
	slices.SortFunc(out, func(a, b history.Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// unfinished counts the jobs not yet terminal (but the run's schedule's,
// which no worker takes), read linearizably (not recorded).
func (c *cluster) unfinished(ctx context.Context) (int, error) {
	// One list of every job, in submission order, not one list per
	// unfinished state: a job that moves between states while those lists
	// are read can be in none of them (running when the scheduled list is
	// read, scheduled for its retry by the time the running one is, as a
	// timed-out job is once its worker reports the kill). Here each job is
	// read once, and a job read as finished stays finished.
	n := 0
	var page uint64
	for {
		resp, err := c.client.Jobs(ctx, &leaseholdv1.ListJobsRequest{PageToken: page, PageSize: 1000})
		if err != nil {
			return 0, err
		}
		for _, j := range resp.GetJobs() {
			// The run's schedule's jobs wait for no worker.
			if j.GetSpec().GetQueue() != workload.QueueSchedule && unfinishedState(j.GetState()) {
				n++
			}
		}
		if page = resp.GetNextPageToken(); page == 0 {
			return n, nil
		}
	}
}

// unfinishedState reports whether a job in state s has yet to finish.
func unfinishedState(s leaseholdv1.JobState) bool {
	switch s {
	case leaseholdv1.JobState_JOB_STATE_SCHEDULED, leaseholdv1.JobState_JOB_STATE_QUEUED,
		leaseholdv1.JobState_JOB_STATE_ACQUIRED, leaseholdv1.JobState_JOB_STATE_RUNNING:
		return true
	}
	return false
}
