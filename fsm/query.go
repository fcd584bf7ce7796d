package fsm

import (
	"fmt"
	"slices"
	"strings"
)

// Queries read the state between applies. Every result is a copy.

// Job returns a job by id.
func (f *FSM) Job(id string) (Job, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if j := f.st.jobByID(id); j != nil {
		return j.export(), nil
	}
	return Job{}, fmt.Errorf("%w: job %s", ErrNotFound, id)
}

// HasJob reports whether a job of this id is kept: Job without the copy,
// or the error a missing job costs (a submit's quota check asks it of every
// new id).
func (f *FSM) HasJob(id string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.jobByID(id) != nil
}

// Lease returns a lease by token, live or ended, as long as its job is kept.
func (f *FSM) Lease(token uint64) (HeldLease, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if seq, ok := f.st.tokens.find(token); ok {
		j := f.st.job(seq)
		if l := findLease(j, token); l != nil {
			return HeldLease{Lease: *l, JobID: j.ID}, nil
		}
	}
	return HeldLease{}, fmt.Errorf("%w: lease %d", ErrNotFound, token)
}

// Worker returns a registered worker.
func (f *FSM) Worker(id string) (Worker, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if w, ok := f.st.workers[id]; ok {
		return w, nil
	}
	return Worker{}, fmt.Errorf("%w: worker %s", ErrUnknownWorker, id)
}

// WorkerCount returns the number of registered workers.
func (f *FSM) WorkerCount() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.st.workers)
}

// Workers returns every registered worker, by id.
func (f *FSM) Workers() []Worker {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Worker, 0, len(f.st.workers))
	for _, w := range f.st.workers {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b Worker) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Nodes returns the known cluster nodes, by id.
func (f *FSM) Nodes() []Node {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Node, 0, len(f.st.nodes))
	for _, n := range f.st.nodes {
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Node returns one known node.
func (f *FSM) Node(id string) (Node, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if n := f.st.nodes[id]; n != nil {
		return *n, true
	}
	return Node{}, false
}

// WorkerLeases returns the live leases of one worker, by token. The leader's
// heartbeat answers from it: a live lease keeps going or, revoked, stops; a
// token the worker holds that is not listed is lost.
func (f *FSM) WorkerLeases(workerID string) []HeldLease {
	f.mu.RLock()
	defer f.mu.RUnlock()
	set := f.st.workerLeases[workerID]
	out := make([]HeldLease, 0, len(set))
	for _, e := range set {
		j := f.st.job(e.seq)
		out = append(out, HeldLease{Lease: *j.lastLease(), JobID: j.ID})
	}
	return out
}

// AppendWorkerLeases appends the live leases of one worker to dst, in no
// particular order: WorkerLeases for the leader's heartbeat path, which
// answers many heartbeats a second and reuses its buffer.
func (f *FSM) AppendWorkerLeases(dst []HeldLease, workerID string) []HeldLease {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, e := range f.st.workerLeases[workerID] {
		j := f.st.job(e.seq)
		dst = append(dst, HeldLease{Lease: *j.lastLease(), JobID: j.ID})
	}
	return dst
}

// LeaseHolders returns the workers that hold a live lease, sorted.
func (f *FSM) LeaseHolders() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]string, 0, len(f.st.workerLeases))
	for w := range f.st.workerLeases {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// LiveLeases returns every live lease grouped by worker. A new leader arms
// its expiry timers from it.
func (f *FSM) LiveLeases() map[string][]LeaseRef {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string][]LeaseRef, len(f.st.workerLeases))
	for w, set := range f.st.workerLeases {
		refs := make([]LeaseRef, 0, len(set))
		for _, e := range set {
			refs = append(refs, LeaseRef{JobID: f.st.job(e.seq).ID, Token: e.token})
		}
		out[w] = refs
	}
	return out
}

// JobFilter selects jobs; zero fields match everything.
type JobFilter struct {
	Queue     string
	Kind      string
	Submitter string
	WorkerID  string // jobs whose live lease this worker holds
	State     JobState
	// DueBy, if set, keeps the jobs that may be granted at that time (their
	// NotBefore is no later); ScheduledAfter, if set, those that may not
	// (their NotBefore is later). With State JobQueued they split the queue
	// into ready and scheduled jobs as of the caller's clock.
	DueBy          int64
	ScheduledAfter int64
	AfterSeq       uint64 // pagination cursor: the NextSeq of the previous page
	Limit          int    // page size; 0 or more than MaxPageSize means MaxPageSize
}

// MaxPageSize bounds one page of a list.
const MaxPageSize = 1000

// maxScan bounds the jobs one Jobs call examines, so a selective filter over
// millions of jobs holds the read lock (and the applies queued behind it)
// for milliseconds, not for a full scan. A variable so tests can lower it.
var maxScan = 1 << 16

// Jobs lists jobs in submission order. next is the cursor for the following
// page, zero when there is none. A page can be short, even empty, while
// next is not zero: the scan stopped at its bound before the page filled.
func (f *FSM) Jobs(flt JobFilter) (jobs []Job, next uint64) {
	limit := flt.Limit
	if limit <= 0 || limit > MaxPageSize {
		limit = MaxPageSize
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.st
	if flt.WorkerID != "" {
		// A worker's jobs are its live leases: at most MaxCapacity.
		set := s.workerLeases[flt.WorkerID]
		seqs := make([]uint64, 0, len(set))
		for _, e := range set {
			if e.seq > flt.AfterSeq {
				seqs = append(seqs, e.seq)
			}
		}
		slices.Sort(seqs)
		for _, seq := range seqs {
			if j := s.job(seq); flt.match(j) {
				if len(jobs) == limit {
					return jobs, jobs[len(jobs)-1].Seq
				}
				jobs = append(jobs, j.export())
			}
		}
		return jobs, 0
	}
	scanned := 0
	first, _ := s.shardIndex((flt.AfterSeq + 1) >> shardBits)
	eachJob(s.shards[first:], func(j *Job) bool {
		if j.Seq <= flt.AfterSeq {
			return true
		}
		if scanned++; scanned > maxScan {
			next = j.Seq - 1
			return false
		}
		if !flt.match(j) {
			return true
		}
		if len(jobs) == limit {
			next = jobs[len(jobs)-1].Seq
			return false
		}
		jobs = append(jobs, j.export())
		return true
	})
	return jobs, next
}

func (flt *JobFilter) match(j *Job) bool {
	if flt.Queue != "" && j.Queue != flt.Queue || flt.Kind != "" && j.Kind != flt.Kind ||
		flt.Submitter != "" && j.Submitter != flt.Submitter || flt.State != 0 && j.State != flt.State ||
		flt.DueBy != 0 && j.NotBefore > flt.DueBy || flt.ScheduledAfter != 0 && j.NotBefore <= flt.ScheduledAfter {
		return false
	}
	if flt.WorkerID != "" {
		l, ok := j.CurrentLease()
		return ok && l.WorkerID == flt.WorkerID
	}
	return true
}

// EventsPage is a run of events.
type EventsPage struct {
	Events []Event
	// LastSeq is the newest event's seq in the state: wait for more than it.
	LastSeq uint64
	// Truncated is true when events after the asked seq were compacted away
	// before they could be read.
	Truncated bool
}

// Events returns up to limit events with Seq > after, oldest first.
func (f *FSM) Events(after uint64, limit int) EventsPage {
	if limit <= 0 || limit > MaxPageSize {
		limit = MaxPageSize
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.st
	page := EventsPage{LastSeq: s.eventSeq}
	if after >= s.eventSeq {
		return page
	}
	// The kept events are seqs first..eventSeq; after < eventSeq here.
	first := s.eventSeq - uint64(s.events.len()) + 1
	start := 0
	if after >= first {
		start = int(after - first + 1)
	} else if after+1 < first {
		page.Truncated = true
	}
	if start < s.events.len() {
		page.Events = s.events.copyRange(start, min(start+limit, s.events.len()))
	}
	return page
}

// FenceResult answers whether a token is the current lease of its job.
type FenceResult struct {
	Current      bool     // the token is the job's live lease
	CurrentToken uint64   // the job's live lease, zero if none
	State        JobState // zero if the job is unknown
}

// CheckGranted returns the error Start, Report and Release get for a token
// above every token this state has granted (or set as a floor), or nil. The
// leader asks it before proposing, so a made-up token never reaches the
// log; the state machine applies the same rule.
func (f *FSM) CheckGranted(token uint64) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.checkGranted(token)
}

// Fence answers whether token is the live lease of jobID. Asked of a state
// read linearizably (the cluster's part), it lets a downstream store refuse
// any writer whose token is not Current.
func (f *FSM) Fence(jobID string, token uint64) FenceResult {
	f.mu.RLock()
	defer f.mu.RUnlock()
	j := f.st.jobByID(jobID)
	if j == nil {
		return FenceResult{}
	}
	res := FenceResult{State: j.State}
	if l, ok := j.CurrentLease(); ok {
		res.CurrentToken = l.Token
		res.Current = l.Token == token
	}
	return res
}

// AcquireReplay returns the answer an acquire with this worker and request
// id already got, so a retried long-poll is answered without a proposal.
func (f *FSM) AcquireReplay(worker, requestID string) (AcquireResult, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.replayAcquire(worker, requestID)
}

// Ready counts the jobs an acquire with these queues and kinds could take
// now, so a long-poll proposes an acquire only when one could succeed.
func (f *FSM) Ready(queues, kinds []string) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.readyCount(queues, kinds)
}

// readyCount counts the jobs in the ready heaps of these queues and kinds
// that a grant may take: none of a paused queue, at most its room of a
// limited one (queues.go).
func (s *state) readyCount(queues, kinds []string) int {
	n := 0
	for _, q := range queues {
		n += s.capReady(q, s.readyIn(q, kinds))
	}
	return n
}

// readyIn counts the jobs in the ready heaps of one queue and these kinds.
func (s *state) readyIn(q string, kinds []string) int {
	n := 0
	byKind := s.ready[q]
	if len(kinds) == 0 {
		for _, h := range byKind {
			n += h.live
		}
		return n
	}
	for _, k := range kinds {
		if h := byKind[k]; h != nil {
			n += h.live
		}
	}
	return n
}

// ReadyAt counts the queued jobs of these queues (and kinds, if any) an
// acquire proposed at leader time now could take: Ready, and the delayed
// jobs due by now that its apply promotes first (delayed.go).
func (f *FSM) ReadyAt(queues, kinds []string, now int64) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.readyAt(queues, kinds, now)
}

// NextDueAfter returns the earliest NotBefore after now among the jobs in
// the delayed heap (perhaps of one that no longer waits: it only wakes a
// poll early), or false when there is none: when the leader's parked
// acquires should look again.
func (f *FSM) NextDueAfter(now int64) (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.nextDueAfter(now)
}

// TimedOut lists up to limit live, unrevoked leases whose deadline
// (GrantedAt + their job's timeout) is at or before now: what the leader
// proposes in a TimeOut.
func (f *FSM) TimedOut(now int64, limit int) []LeaseRef {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.timedOut(now, limit)
}

// NextTimeoutAfter returns the earliest lease deadline after now (perhaps
// of a lease that no longer runs: it only wakes the leader early), or
// false when no lease has one.
func (f *FSM) NextTimeoutAfter(now int64) (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.nextTimeoutAfter(now)
}

// Stats are counters of the whole state.
type Stats struct {
	LastIndex  uint64
	LastTime   int64
	LastToken  uint64 // the next grant gets LastToken+1
	Jobs       map[JobState]int
	Workers    int
	LiveLeases int
	// Scheduled counts the queued jobs that were not yet due at LastTime
	// (part of Jobs[JobQueued]).
	Scheduled    int
	Events       int
	LastEventSeq uint64
	// Bytes estimates the memory every replica spends on the state
	// (size.go): the figure the leader's quota bounds.
	Bytes int64
}

// Stats returns the state's counters.
func (f *FSM) Stats() Stats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.st
	st := Stats{
		LastIndex: s.lastIndex, LastTime: s.lastTime, LastToken: s.lastToken,
		Jobs: map[JobState]int{}, Workers: len(s.workers), Events: s.events.len(), LastEventSeq: s.eventSeq,
		Scheduled: s.delayed.live,
		Bytes:     s.sizeBytes(),
	}
	for state, n := range s.counts {
		if n > 0 {
			st.Jobs[JobState(state)] = n
		}
	}
	for _, set := range s.workerLeases {
		st.LiveLeases += len(set)
	}
	return st
}

// QueuedBy returns how many jobs of submitter are queued.
func (f *FSM) QueuedBy(submitter string) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if h := f.st.submitted[submitter]; h != nil {
		return h.live
	}
	return 0
}

// Bytes returns the state's size (Stats.Bytes), without the rest of Stats.
func (f *FSM) Bytes() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.sizeBytes()
}
