package fsm

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestModel drives the FSM with long seeded random command sequences and
// checks every answer against refModel, a deliberately naive re-implementation
// of SPEC section 3 and of the rules this package documents: plain slices,
// linear scans, no heaps, no indexes, no copy-on-write.
//
// After every command it compares the error (by sentinel), the whole result,
// the events the command emitted and the invariants; every 50 commands it
// compares every job, the listings, counters, workers, live leases, ready
// counts, fences, leases by token and the event log. Along the way it
// round-trips the state through a snapshot and continues on the restored
// copy, running the original alongside for a while (their answers and hashes
// must stay equal: derived indexes rebuilt on restore must behave like the
// ones built by applying), and streams snapshots and runs queries
// concurrently with applies (copy-on-write and the locking contract; run it
// with -race).
//
// Each seed picks one of modelProfiles (mixed, hot, bulk, churn). Reproduce
// or soak (the package path comes before the flags):
//
//	go test ./fsm -run 'TestModel$' -model.seed=7 -model.steps=20000
//	LEASEHOLD_MODEL_SEED=7 LEASEHOLD_MODEL_STEPS=20000 go test ./fsm -run 'TestModel$'
//	go test ./fsm -run 'TestModel$' -model.seeds=200    # seeds 1..200
//	go test ./fsm -run 'TestModel$' -v                  # what each seed exercised
//
// Not modelled on purpose: event Detail strings (except the ones the leader
// records), ErrTokensExhausted (unreachable: floors are bounded), MaxWorkers,
// MaxEvents and the other size bounds, the Changed channel beyond "closed iff
// the command emitted events".

var (
	modelSeedFlag  = flag.Uint64("model.seed", 0, "TestModel: run only this seed (env LEASEHOLD_MODEL_SEED)")
	modelSeedsFlag = flag.Int("model.seeds", 0, "TestModel: run seeds 1..N (env LEASEHOLD_MODEL_SEEDS; default 8)")
	modelStepsFlag = flag.Int("model.steps", 0, "TestModel: commands per seed (env LEASEHOLD_MODEL_STEPS; default 3000)")
)

func modelEnvInt(t *testing.T, name string) int64 {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

func modelConfig(t *testing.T) (seeds []uint64, steps int) {
	steps = 3000
	nseeds := 8
	if testing.Short() {
		steps, nseeds = 600, 4
	}
	if n := modelEnvInt(t, "LEASEHOLD_MODEL_STEPS"); n > 0 {
		steps = int(n)
	}
	if *modelStepsFlag > 0 {
		steps = *modelStepsFlag
	}
	if n := modelEnvInt(t, "LEASEHOLD_MODEL_SEEDS"); n > 0 {
		nseeds = int(n)
	}
	if *modelSeedsFlag > 0 {
		nseeds = *modelSeedsFlag
	}
	seed := uint64(modelEnvInt(t, "LEASEHOLD_MODEL_SEED"))
	if *modelSeedFlag != 0 {
		seed = *modelSeedFlag
	}
	if seed != 0 {
		return []uint64{seed}, steps
	}
	for s := 1; s <= nseeds; s++ {
		seeds = append(seeds, uint64(s))
	}
	return seeds, steps
}

func TestModel(t *testing.T) {
	seeds, steps := modelConfig(t)
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			r := newModelRun(t, seed, steps)
			defer r.waitPending()
			r.run()
		})
	}
}

// ---------------------------------------------------------------------------
// The reference model.

// refModel is the whole state, kept as simply as possible. It reuses the
// package's plain data types (Job, Lease, Worker, Event) as records but none
// of its logic.
type refModel struct {
	index     uint64
	now       int64 // never decreases
	lastToken uint64
	jobSeq    uint64
	finishSeq uint64
	eventSeq  uint64
	jobs      []*Job             // kept jobs, in submission order
	workers   map[string]*Worker // looked up by id only; listed via workerIDs
	events    []Event            // kept events, oldest first; Detail only for recorded ones
	emitted   []Event            // events of the command being applied
	trimmed   int                // leases dropped from a job's history
	// reports counts each kept job's first reports, one per execution
	// that reached one: what Job.Executions must say.
	reports map[*Job]uint32
	// retried holds when each kept job was last retried from dead: it
	// became ready then, whenever its last lease ended (readySince)
	retried map[*Job]int64
	// schedules by name: settled through LastSlot, fired by FireSchedule
	schedules map[string]*Schedule
	nodes     map[string]Node          // the node table: its lowest level is the cluster's
	queues    map[string]QueueSettings // queues with settings other than the defaults
}

func newRefModel() *refModel {
	return &refModel{workers: map[string]*Worker{}, reports: map[*Job]uint32{}, retried: map[*Job]int64{}, nodes: map[string]Node{}, queues: map[string]QueueSettings{},
		schedules: map[string]*Schedule{}}
}

// isTerminal says whether a job has finished for good and is compacted
// with retention: every terminal state but dead, which waits for a retry
// or a purge.
func isTerminal(s JobState) bool {
	return s == JobReported || s == JobCancelled || s == JobLost || s == JobFailed
}

// level is the lowest level the node table records, 0 while none is: from
// 6 a job out of attempts or lost too often ends dead.
func (m *refModel) level() uint8 {
	lv := uint8(0)
	for _, n := range m.nodes {
		if n.Level != 0 && (lv == 0 || n.Level < lv) {
			lv = n.Level
		}
	}
	return lv
}

// die ends a job dead with reason, after its lease's events.
func (m *refModel) die(j *Job, l *Lease, reason string) {
	j.setReason(reason)
	m.finish(j, JobDead)
	m.emit(Event{Type: EventJobDead, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID, Ref: l.Ref()})
}

func (m *refModel) job(id string) *Job {
	for _, j := range m.jobs {
		if j.ID == id {
			return j
		}
	}
	return nil
}

// live returns the job's live lease: the newest one, if active.
func (m *refModel) live(j *Job) *Lease {
	if n := len(j.Leases()); n > 0 && j.Leases()[n-1].State == LeaseActive {
		return &j.Leases()[n-1]
	}
	return nil
}

func (m *refModel) leaseOf(j *Job, tok uint64) *Lease {
	for i := range j.Leases() {
		if j.Leases()[i].Token == tok {
			return &j.Leases()[i]
		}
	}
	return nil
}

// heldBy returns the jobs whose live lease the worker holds, by token.
func (m *refModel) heldBy(worker string) []*Job {
	var out []*Job
	for _, j := range m.jobs {
		if l := m.live(j); l != nil && l.WorkerID == worker {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *Job) int { return cmp.Compare(m.live(a).Token, m.live(b).Token) })
	return out
}

func (m *refModel) workerIDs() []string {
	ids := make([]string, 0, len(m.workers))
	for id := range m.workers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (m *refModel) emit(ev Event) {
	m.eventSeq++
	ev.Seq, ev.Index, ev.Time = m.eventSeq, m.index, m.now
	if len(m.events) >= MaxEvents {
		m.events = slices.Delete(m.events, 0, 1)
	}
	m.events = append(m.events, ev)
	m.emitted = append(m.emitted, ev)
}

func (m *refModel) touch(j *Job) { j.UpdatedAt, j.ModifyIndex = m.now, m.index }

func (m *refModel) finish(j *Job, to JobState) {
	j.State = to
	m.finishSeq++
	j.setEnd(m.now, m.finishSeq, j.Reason())
}

func copyJob(j *Job) Job {
	c := *j
	c.SetLeases(slices.Clone(j.Leases()))
	return c
}

// apply applies one command that passed validation, stamped at leader time
// at and logged at index, and returns what the FSM must answer.
func (m *refModel) apply(index uint64, at int64, cmd Command) (any, error) {
	m.index = index
	m.now = max(m.now, at) // the FSM's clock never runs backwards
	m.emitted = m.emitted[:0]
	switch c := cmd.(type) {
	case *RegisterWorker:
		return m.register(c)
	case *DeregisterWorker:
		return m.deregister(c)
	case *SubmitJob:
		return m.submit(c)
	case *Acquire:
		return m.acquire(c)
	case *Start:
		return m.start(c)
	case *Report:
		return m.report(c)
	case *Release:
		return m.releaseCmd(c)
	case *Cancel:
		return m.cancel(c)
	case *CancelSubmitter:
		return m.cancelSubmitter(c)
	case *Expire:
		return m.expire(c)
	case *Compact:
		return m.compact(c)
	case *RaiseTokenFloor:
		if c.Floor > m.lastToken {
			m.emit(Event{Type: EventTokenFloorRaised})
			m.lastToken = c.Floor
		}
		return FloorResult{Next: m.lastToken + 1}, nil
	case *RecordEvent:
		m.emit(Event{Type: c.Event, WorkerID: c.WorkerID, Detail: c.Detail})
		return m.events[len(m.events)-1], nil
	case *RemoveIdle:
		return m.removeIdle(c)
	case *SetNode:
		return m.setNode(c)
	case *RetryJob:
		return m.retry(c)
	case *PurgeJobs:
		return m.purge(c)
	case *PutSchedule:
		return m.putSchedule(c)
	case *DeleteSchedule:
		if m.schedules[c.Name] == nil {
			return nil, ErrNotFound
		}
		delete(m.schedules, c.Name)
		m.emit(Event{Type: EventScheduleDeleted})
		return nil, nil
	case *FireSchedule:
		return m.fireSchedule(c)
	case *SetQueue:
		return m.setQueue(c)
	case *TimeOut:
		return m.timeOut(c)
	}
	panic(fmt.Sprintf("model: unknown command %T", cmd))
}

// putSchedule: a pause or resume changes Paused (a resume settles every
// slot until now); a create settles every slot until now; the same
// definition again changes nothing; another one is a conflict unless
// replaced, and a replace keeps the counts and settles until now.
func (m *refModel) putSchedule(c *PutSchedule) (any, error) {
	old := m.schedules[c.Name]
	if c.PauseOnly {
		if old == nil {
			return nil, ErrNotFound
		}
		if old.Paused != c.Paused {
			old.Paused, old.UpdatedAt = c.Paused, m.now
			if !c.Paused {
				old.LastSlot = max(old.LastSlot, m.now)
			}
			m.emit(Event{Type: EventSchedulePaused})
			return PutScheduleResult{Schedule: *old, Changed: true}, nil
		}
		return PutScheduleResult{Schedule: *old}, nil
	}
	sc := &Schedule{Name: c.Name, Cron: c.Cron, Zone: c.Zone, Template: c.Template, Missed: c.Missed, Paused: c.Paused,
		LastSlot: m.now, CreatedAt: m.now, UpdatedAt: m.now}
	if old != nil {
		if old.Cron == sc.Cron && old.Zone == sc.Zone && old.Missed == sc.Missed && old.Paused == sc.Paused &&
			specKey(old.Template) == specKey(sc.Template) && fmt.Sprint(old.Template.Retry) == fmt.Sprint(sc.Template.Retry) {
			return PutScheduleResult{Schedule: *old}, nil
		}
		if !c.Replace {
			return nil, ErrConflict
		}
		sc.LastSlot = max(old.LastSlot, m.now)
		sc.CreatedAt, sc.Fired, sc.Skipped, sc.LastJob = old.CreatedAt, old.Fired, old.Skipped, old.LastJob
	}
	m.schedules[c.Name] = sc
	m.emit(Event{Type: EventScheduleCreated})
	return PutScheduleResult{Schedule: *sc, Created: old == nil, Changed: true}, nil
}

// fireSchedule: a slot at or before LastSlot, or of a paused schedule,
// changes nothing; a slot after the leader's time is refused; otherwise
// LastSlot moves to it and, unless skipped, the slot's job is submitted
// as any job is (a refused submit still settles the slot).
func (m *refModel) fireSchedule(c *FireSchedule) (any, error) {
	sc := m.schedules[c.Name]
	switch {
	case sc == nil:
		return nil, ErrNotFound
	case c.Slot <= sc.LastSlot:
		return FireResult{Reason: ReasonAlreadyFired}, nil
	case sc.Paused:
		return FireResult{Reason: ReasonPaused}, nil
	case c.Slot > m.now:
		return nil, ErrInvalidArgument
	}
	sc.LastSlot = c.Slot
	skipped := uint64(c.Skipped)
	res := FireResult{Reason: c.Reason}
	if !c.Skip {
		spec := sc.Template
		spec.ID = fmt.Sprintf("%s@%s", c.Name, time.Unix(0, c.Slot).UTC().Format(time.RFC3339))
		if _, err := m.submit(&SubmitJob{Spec: spec}); err != nil {
			res.Reason = "the slot's job was refused"
			skipped++
		} else {
			res = FireResult{Fired: true, JobID: spec.ID}
			sc.Fired++
			sc.LastJob = spec.ID
		}
	}
	sc.Skipped += skipped
	if res.Fired {
		m.emit(Event{Type: EventScheduleFired, JobID: res.JobID})
	} else {
		m.emit(Event{Type: EventScheduleSkipped})
	}
	return res, nil
}

func (m *refModel) setNode(c *SetNode) (any, error) {
	old, ok := m.nodes[c.NodeID]
	n := Node{ID: c.NodeID, RaftAddr: c.RaftAddr, APIAddr: c.APIAddr, Level: c.Level, Version: c.Version, UpdatedAt: m.now}
	if c.Level == 0 && ok {
		n.Level, n.Version = old.Level, old.Version
	}
	if ok && old.RaftAddr == n.RaftAddr && old.APIAddr == n.APIAddr && old.Level == n.Level && old.Version == n.Version {
		return old, nil
	}
	m.nodes[n.ID] = n
	m.emit(Event{Type: EventNodeSet})
	return n, nil
}

// readySince is when a queued job became ready: the latest of its submit,
// its last lease's end, its retry from dead and its NotBefore.
func (m *refModel) readySince(j *Job) int64 {
	since := max(j.SubmittedAt, j.NotBefore)
	if ls := j.Leases(); len(ls) > 0 {
		since = max(since, ls[len(ls)-1].EndedAt)
	}
	if at, ok := m.retried[j]; ok {
		since = max(since, at)
	}
	return since
}

// retry queues a dead job again with a fresh attempt budget.
func (m *refModel) retry(c *RetryJob) (any, error) {
	j := m.job(c.JobID)
	switch {
	case j == nil:
		return nil, ErrNotFound
	case j.State != JobDead:
		return nil, ErrNotDead
	}
	j.Attempts, j.Losses, j.NotBefore = 0, 0, 0
	j.setEnd(0, 0, "")
	j.State = JobQueued
	m.reports[j] = 0 // a fresh budget: the next execution is attempt 1 again
	m.retried[j] = m.now
	m.touch(j)
	m.emit(Event{Type: EventJobRetried, JobID: j.ID})
	return copyJob(j), nil
}

// purge removes dead jobs: the listed ones, or the oldest deaths of a
// queue (or all) older than the age, up to the limit.
func (m *refModel) purge(c *PurgeJobs) (any, error) {
	var res PurgeResult
	var gone []*Job
	if len(c.JobIDs) > 0 {
		for _, id := range c.JobIDs {
			j := m.job(id)
			if j == nil || j.State != JobDead || slices.Contains(gone, j) {
				res.Skipped = append(res.Skipped, id)
				continue
			}
			gone = append(gone, j)
		}
	} else {
		for _, j := range m.jobs {
			if j.State == JobDead && (c.Queue == "" || j.Queue == c.Queue) && (c.OlderThan == 0 || j.FinishedAt() < m.now-c.OlderThan) {
				gone = append(gone, j)
			}
		}
		slices.SortFunc(gone, func(a, b *Job) int { return cmp.Compare(a.FinishSeq(), b.FinishSeq()) })
		if len(gone) > int(c.Limit) {
			gone, res.More = gone[:c.Limit], true
		}
	}
	for _, j := range gone {
		res.Purged = append(res.Purged, j.ID)
		delete(m.reports, j)
		delete(m.retried, j)
	}
	m.jobs = slices.DeleteFunc(m.jobs, func(j *Job) bool { return slices.Contains(gone, j) })
	if len(gone) > 0 {
		m.emit(Event{Type: EventJobsPurged})
	}
	return res, nil
}

func (m *refModel) setQueue(c *SetQueue) (any, error) {
	old := m.queues[c.Queue]
	cur := QueueSettings{Queue: c.Queue, Paused: old.Paused, MaxRunning: old.MaxRunning}
	if c.SetPaused {
		cur.Paused = c.Paused
	}
	if c.SetMaxRunning {
		cur.MaxRunning = c.MaxRunning
	}
	if cur.Paused != old.Paused {
		if cur.Paused {
			m.emit(Event{Type: EventQueuePaused, Detail: c.Queue})
		} else {
			m.emit(Event{Type: EventQueueResumed, Detail: c.Queue})
		}
	}
	if cur.MaxRunning != old.MaxRunning {
		m.emit(Event{Type: EventQueueLimited, Detail: limitDetailModel(c.Queue, cur.MaxRunning)})
	}
	if cur.Paused || cur.MaxRunning > 0 {
		m.queues[c.Queue] = cur
	} else {
		delete(m.queues, c.Queue)
	}
	return cur, nil
}

func limitDetailModel(q string, n uint32) string {
	if n == 0 {
		return q + ": no limit"
	}
	return fmt.Sprintf("%s: max running %d", q, n)
}

// room is how many more grants queue q takes: -1 for no bound.
func (m *refModel) room(q string) int {
	qs, ok := m.queues[q]
	if !ok {
		return -1
	}
	if qs.Paused {
		return 0
	}
	if qs.MaxRunning == 0 {
		return -1
	}
	live := 0
	for _, j := range m.jobs {
		if j.Queue == q && m.live(j) != nil {
			live++
		}
	}
	return max(int(qs.MaxRunning)-live, 0)
}

func (m *refModel) register(c *RegisterWorker) (any, error) {
	old := m.workers[c.WorkerID]
	if old != nil && int(c.Capacity) < len(m.heldBy(c.WorkerID)) {
		return nil, ErrConflict
	}
	w := &Worker{ID: c.WorkerID, Capacity: c.Capacity, RegisteredAt: m.now, UpdatedAt: m.now, Version: c.Version}
	if old != nil {
		w.RegisteredAt = old.RegisteredAt
	}
	m.workers[c.WorkerID] = w
	// A new capacity or version is announced; the same registration again
	// is not.
	if old == nil || old.Capacity != c.Capacity || old.Version != c.Version {
		m.emit(Event{Type: EventWorkerRegistered, WorkerID: c.WorkerID})
	}
	return *w, nil
}

func (m *refModel) deregister(c *DeregisterWorker) (any, error) {
	if m.workers[c.WorkerID] == nil {
		return nil, ErrUnknownWorker
	}
	var res DeregisterResult
	for _, j := range m.heldBy(c.WorkerID) {
		ref := LeaseRef{JobID: j.ID, Token: m.live(j).Token}
		if c.Lost {
			// As a lost worker's: exactly what an expiry does.
			m.expire(&Expire{Leases: []LeaseRef{ref}})
		} else {
			m.release(j)
		}
		res.Released = append(res.Released, ref)
	}
	delete(m.workers, c.WorkerID)
	m.emit(Event{Type: EventWorkerDeregistered, WorkerID: c.WorkerID})
	return res, nil
}

// removeIdle removes each listed worker that is registered and holds no
// live lease; the others are kept, their leases untouched.
func (m *refModel) removeIdle(c *RemoveIdle) (any, error) {
	var res RemoveIdleResult
	for _, id := range c.WorkerIDs {
		if m.workers[id] == nil || len(m.heldBy(id)) > 0 {
			res.Kept = append(res.Kept, id)
			continue
		}
		delete(m.workers, id)
		m.emit(Event{Type: EventWorkerDeregistered, WorkerID: id})
		res.Removed = append(res.Removed, id)
	}
	return res, nil
}

// specKey renders a spec for equality; nil and empty payloads are equal.
func specKey(s JobSpec) string {
	if len(s.Payload) == 0 {
		s.Payload = nil
	}
	s.Retry = nil // how to run it, not what it is: a resubmit with another policy is the same job
	return fmt.Sprintf("%+v", s)
}

// modelRetryDelay is the model's reading of RetryPolicy: the delay after
// the n-th failure, Initial grown by Multiplier per mille per failure
// (truncated at each step), capped at Max, less Jitter percent times a
// fraction (0 to 10000) hashed from the job id and n with FNV-1a.
func modelRetryDelay(p *RetryPolicy, id string, n uint32) int64 {
	d := p.Initial
	for i := uint32(1); i < n && d < p.Max; i++ {
		if d > (1<<62)/int64(p.Multiplier) {
			d = p.Max
			break
		}
		d = d * int64(p.Multiplier) / 1000
	}
	d = min(d, p.Max)
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)})
	u := int64(h.Sum64() % 10001)
	return d - d/1_000_000*int64(p.Jitter)*u
}

func (m *refModel) submit(c *SubmitJob) (any, error) {
	if old := m.job(c.Spec.ID); old != nil {
		if specKey(old.JobSpec) == specKey(c.Spec) {
			return SubmitResult{Job: copyJob(old)}, nil
		}
		m.emit(Event{Type: EventSubmitConflict, JobID: c.Spec.ID})
		return nil, ErrConflict
	}
	m.jobSeq++
	j := &Job{
		JobSpec: c.Spec, Seq: m.jobSeq, State: JobQueued,
		SubmittedAt: m.now, UpdatedAt: m.now, CreateIndex: m.index, ModifyIndex: m.index,
		NotBefore: c.RunAt, TimeoutMs: c.TimeoutMs,
	}
	j.Payload = slices.Clone(c.Spec.Payload)
	m.jobs = append(m.jobs, j)
	m.emit(Event{Type: EventJobSubmitted, JobID: j.ID})
	if c.RunAt > m.now {
		m.emit(Event{Type: EventJobScheduled, JobID: j.ID})
	}
	return SubmitResult{Job: copyJob(j), Created: true}, nil
}

func (m *refModel) acquire(c *Acquire) (any, error) {
	w := m.workers[c.WorkerID]
	if w == nil {
		return nil, ErrUnknownWorker
	}
	// A request id already served (and whose leases are still kept) replays.
	type kept struct {
		j *Job
		l Lease
	}
	var served []kept
	for _, j := range m.jobs {
		for _, l := range j.Leases() {
			if l.WorkerID == c.WorkerID && l.RequestID == c.RequestID {
				served = append(served, kept{j, l})
			}
		}
	}
	if len(served) > 0 {
		slices.SortFunc(served, func(a, b kept) int { return cmp.Compare(a.l.Token, b.l.Token) })
		res := AcquireResult{Replayed: true}
		for _, k := range served {
			res.Grants = append(res.Grants, Grant{Job: copyJob(k.j), Lease: k.l})
		}
		return res, nil
	}
	held := uint32(len(m.heldBy(c.WorkerID)))
	if held >= w.Capacity {
		return AcquireResult{}, nil
	}
	n := min(c.Max, w.Capacity-held)
	var res AcquireResult
	for range n {
		var best *Job
		for _, j := range m.jobs {
			if j.State != JobQueued || j.NotBefore > m.now || !slices.Contains(c.Queues, j.Queue) || m.room(j.Queue) == 0 {
				continue
			}
			if len(c.Kinds) > 0 && !slices.Contains(c.Kinds, j.Kind) {
				continue
			}
			if best == nil || j.Priority > best.Priority || j.Priority == best.Priority && j.Seq < best.Seq {
				best = j
			}
		}
		if best == nil {
			break
		}
		since := m.readySince(best)
		m.lastToken++
		l := Lease{
			Token: m.lastToken, WorkerID: c.WorkerID, RequestID: c.RequestID,
			State: LeaseActive, GrantedAt: m.now,
		}
		best.State = JobAcquired
		if c.Start {
			best.State, l.StartedAt = JobRunning, m.now
		}
		ls := best.Leases()
		if len(ls) >= MaxLeaseHistory {
			ls = slices.Delete(ls, 0, 1)
			m.trimmed++
		}
		best.SetLeases(append(ls, l))
		m.touch(best)
		m.emit(Event{Type: EventLeaseAcquired, JobID: best.ID, Token: l.Token, WorkerID: c.WorkerID})
		if c.Start {
			m.emit(Event{Type: EventLeaseStarted, JobID: best.ID, Token: l.Token, WorkerID: c.WorkerID})
		}
		res.Grants = append(res.Grants, Grant{Job: copyJob(best), Lease: l, ReadySince: since})
	}
	return res, nil
}

// liveFor finds the live lease (job, token) for an action by worker; a token
// that is not live is stale and recorded with ev, one above every grant (or
// floor) was never granted and is refused unrecorded.
func (m *refModel) liveFor(worker, jobID string, tok uint64, ev Event) (*Job, *Lease, error) {
	if tok > m.lastToken {
		return nil, nil, ErrInvalidArgument
	}
	j := m.job(jobID)
	var l *Lease
	if j != nil {
		l = m.live(j)
	}
	if l == nil || l.Token != tok {
		ev.JobID, ev.Token, ev.WorkerID = jobID, tok, worker
		m.emit(ev)
		return nil, nil, ErrStaleToken
	}
	if l.WorkerID != worker {
		return nil, nil, ErrNotOwner
	}
	return j, l, nil
}

func (m *refModel) start(c *Start) (any, error) {
	j, l, err := m.liveFor(c.WorkerID, c.JobID, c.Token, Event{Type: EventStaleAction})
	if err != nil {
		return nil, err
	}
	if j.State == JobRunning {
		return HeldLease{Lease: *l, JobID: j.ID}, nil
	}
	l.StartedAt = m.now
	j.State = JobRunning
	m.touch(j)
	m.emit(Event{Type: EventLeaseStarted, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID})
	return HeldLease{Lease: *l, JobID: j.ID}, nil
}

func answerOf(j *Job, l *Lease) ReportResult {
	return ReportResult{JobID: j.ID, Token: l.Token, Outcome: l.Outcome, State: l.Answer, Requeued: l.Answer == JobQueued,
		Queue: j.Queue, Ran: l.EndedAt - l.GrantedAt}
}

func (m *refModel) report(c *Report) (any, error) {
	if c.Token > m.lastToken {
		return nil, ErrInvalidArgument // never granted: not a late report
	}
	if j := m.job(c.JobID); j != nil {
		if l := m.leaseOf(j, c.Token); l != nil && l.State == LeaseReported {
			switch {
			case l.WorkerID != c.WorkerID:
				return nil, ErrNotOwner
			case l.ReportID() == c.ReportID:
				return answerOf(j, l), nil
			}
			m.emit(Event{Type: EventReportConflict, JobID: j.ID, Token: l.Token, WorkerID: c.WorkerID, Ref: c.Ref})
			return nil, ErrConflict
		}
	}
	j, l, err := m.liveFor(c.WorkerID, c.JobID, c.Token, Event{Type: EventStaleReport, Ref: c.Ref})
	if err != nil {
		return nil, err
	}
	l.State, l.EndedAt = LeaseReported, m.now
	l.Outcome, l.Retryable = c.Outcome, c.Retryable
	l.setReport(c.ReportID, c.Ref, c.Message)
	m.reports[j]++
	if l.Revoke == RevokeTimeout {
		// Whatever the worker says, the attempt timed out.
		l.Outcome, l.Retryable = OutcomeTimedOut, false
		j.Attempts++
		m.emit(Event{Type: EventLeaseReported, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID, Ref: c.Ref})
		m.retryTimedOut(j, l)
		l.Answer = j.State
		m.touch(j)
		return answerOf(j, l), nil
	}
	requeue := false
	if c.Outcome == OutcomeFailed {
		j.Attempts++
		requeue = c.Retryable && j.Attempts < j.MaxAttempts && l.Revoke == RevokeNone
	}
	var delay int64
	if requeue {
		if c.RetryAfter > 0 {
			delay = c.RetryAfter
		} else if j.Retry != nil {
			delay = modelRetryDelay(j.Retry, j.ID, j.Attempts)
		}
		if delay > 0 {
			j.NotBefore = m.now + delay
		}
		j.State = JobQueued
	}
	m.touch(j)
	m.emit(Event{Type: EventLeaseReported, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID, Ref: c.Ref})
	switch {
	case requeue:
	case c.Outcome == OutcomeFailed && c.Retryable && l.Revoke == RevokeNone && m.level() >= 6:
		// Out of attempts: dead from level 6, with the last error.
		reason := fmt.Sprintf("out of attempts (%d of %d)", j.Attempts, j.MaxAttempts)
		if c.Message != "" {
			reason += ": " + c.Message
		}
		m.die(j, l, reason)
	default:
		m.finish(j, JobReported)
	}
	l.Answer = j.State
	switch {
	case requeue && delay > 0:
		m.emit(Event{Type: EventRetryScheduled, JobID: j.ID, Token: l.Token})
	case requeue:
		m.emit(Event{Type: EventJobRequeued, JobID: j.ID, Token: l.Token})
	}
	return answerOf(j, l), nil
}

func revokeWord(r Revoke) string {
	if r == RevokeKill {
		return "kill"
	}
	return "cancel"
}

// timeOut revokes each listed lease that is live, unrevoked and past its
// job's timeout by the command's time.
func (m *refModel) timeOut(c *TimeOut) (any, error) {
	var res TimeOutResult
	for _, ref := range c.Leases {
		j, l := m.liveRef(ref)
		if l == nil || l.Revoke != RevokeNone || j.TimeoutMs == 0 ||
			m.now < l.GrantedAt+int64(j.TimeoutMs)*int64(time.Millisecond) {
			res.Ignored = append(res.Ignored, ref)
			continue
		}
		l.Revoke = RevokeTimeout
		m.touch(j)
		m.emit(Event{Type: EventLeaseTimedOut, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID})
		res.TimedOut = append(res.TimedOut, ref)
	}
	return res, nil
}

// endTimedOut counts the execution of a timed-out lease that ended
// without a report: an attempt (and an execution), never a loss.
func (m *refModel) endTimedOut(j *Job, l *Lease) {
	l.Outcome = OutcomeTimedOut
	j.Attempts++
	m.reports[j]++
}

// retryTimedOut: after a timed-out attempt the retry policy decides.
func (m *refModel) retryTimedOut(j *Job, l *Lease) {
	if j.Attempts >= j.MaxAttempts {
		reason := fmt.Sprintf("timed out; out of attempts (%d of %d)", j.Attempts, j.MaxAttempts)
		if m.level() >= 6 {
			m.die(j, l, reason)
			return
		}
		j.setReason(reason)
		m.finish(j, JobReported)
		return
	}
	j.State = JobQueued
	if j.Retry != nil {
		j.NotBefore = m.now + modelRetryDelay(j.Retry, j.ID, j.Attempts)
		m.emit(Event{Type: EventRetryScheduled, JobID: j.ID, Token: l.Token})
	} else {
		m.emit(Event{Type: EventJobRequeued, JobID: j.ID, Token: l.Token})
	}
}

// release ends the job's live lease without an attempt, unless it timed out.
func (m *refModel) release(j *Job) {
	l := m.live(j)
	l.State, l.EndedAt = LeaseReleased, m.now
	m.emit(Event{Type: EventLeaseReleased, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID})
	if l.Revoke == RevokeTimeout {
		m.endTimedOut(j, l)
		m.retryTimedOut(j, l)
	} else if l.Revoke != RevokeNone {
		j.setReason(revokeWord(l.Revoke) + "; lease released")
		m.finish(j, JobCancelled)
		m.emit(Event{Type: EventJobCancelled, JobID: j.ID, Token: l.Token})
	} else {
		j.State = JobQueued
	}
	m.touch(j)
}

func (m *refModel) releaseCmd(c *Release) (any, error) {
	j, _, err := m.liveFor(c.WorkerID, c.JobID, c.Token, Event{Type: EventStaleAction})
	if err != nil {
		return nil, err
	}
	if c.Lost {
		// Settled as lost by its worker: exactly what an expiry does.
		m.expire(&Expire{Leases: []LeaseRef{{JobID: c.JobID, Token: c.Token}}})
	} else {
		m.release(j)
	}
	return copyJob(j), nil
}

func (m *refModel) cancelQueued(j *Job, reason string) {
	j.setReason(ReasonCancelled)
	if reason != "" {
		j.setReason(j.Reason() + ": " + reason)
	}
	m.finish(j, JobCancelled)
	m.touch(j)
	m.emit(Event{Type: EventJobCancelled, JobID: j.ID})
}

func (m *refModel) cancel(c *Cancel) (any, error) {
	j := m.job(c.JobID)
	switch {
	case j == nil:
		return nil, ErrNotFound
	case j.State == JobCancelled:
		return CancelResult{Job: copyJob(j)}, nil
	case isTerminal(j.State) || j.State == JobDead:
		return nil, ErrFinished
	case j.State == JobQueued:
		m.cancelQueued(j, c.Reason)
		return CancelResult{Job: copyJob(j)}, nil
	}
	want := RevokeCancel
	l := m.live(j)
	if c.Kill || l.Revoke == RevokeTimeout {
		want = RevokeKill
	}
	if l.Revoke < want || l.Revoke == RevokeTimeout { // a cancel never downgrades a kill; it takes over a timeout
		l.Revoke = want
		m.touch(j)
		m.emit(Event{Type: EventLeaseRevoked, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID})
	}
	return CancelResult{Job: copyJob(j), Revoked: true}, nil
}

func (m *refModel) cancelSubmitter(c *CancelSubmitter) (any, error) {
	var res CancelSubmitterResult
	for _, j := range m.jobs { // submission order: oldest first
		if j.Submitter != c.Submitter || j.State != JobQueued {
			continue
		}
		if len(res.Cancelled) == int(c.Limit) {
			res.Remaining++
			continue
		}
		m.cancelQueued(j, c.Reason)
		res.Cancelled = append(res.Cancelled, j.ID)
	}
	return res, nil
}

// liveRef returns the lease ref names if it is its job's live lease.
func (m *refModel) liveRef(ref LeaseRef) (*Job, *Lease) {
	j := m.job(ref.JobID)
	if j == nil {
		return nil, nil
	}
	if l := m.live(j); l != nil && l.Token == ref.Token {
		return j, l
	}
	return j, nil
}

func (m *refModel) expire(c *Expire) (any, error) {
	var res ExpireResult
	for _, ref := range c.Leases {
		j, l := m.liveRef(ref)
		if l == nil {
			res.Ignored = append(res.Ignored, ref)
			continue
		}
		l.State, l.EndedAt = LeaseExpired, m.now
		timedOut := l.Revoke == RevokeTimeout
		if timedOut {
			m.endTimedOut(j, l) // a timeout is an attempt, even if the worker is then lost
		} else {
			j.Losses++ // a lost worker is never an attempt
		}
		m.touch(j)
		m.emit(Event{Type: EventLeaseExpired, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID})
		switch {
		case timedOut && j.OnWorkerLost == LostRequeue:
			m.retryTimedOut(j, l)
		case l.Revoke != RevokeNone && !timedOut:
			j.setReason(revokeWord(l.Revoke) + "; lease expired")
			m.finish(j, JobCancelled)
			m.emit(Event{Type: EventJobCancelled, JobID: j.ID, Token: l.Token})
		case j.OnWorkerLost == LostFail:
			j.setReason(ReasonWorkerLost)
			m.finish(j, JobLost)
			m.emit(Event{Type: EventJobLost, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID})
		case j.Losses >= j.MaxWorkerLosses && m.level() >= 6:
			m.die(j, l, fmt.Sprintf("%s (%d)", ReasonPoison, j.Losses))
		case j.Losses >= j.MaxWorkerLosses:
			j.setReason(ReasonPoison)
			m.finish(j, JobFailed)
			m.emit(Event{Type: EventJobFailed, JobID: j.ID, Token: l.Token})
		default:
			j.State = JobQueued
			m.emit(Event{Type: EventJobRequeued, JobID: j.ID, Token: l.Token})
		}
		res.Expired = append(res.Expired, ref)
	}
	return res, nil
}

func (m *refModel) compact(c *Compact) (any, error) {
	var res CompactResult
	// Every terminal job finished before the cutoff, oldest finish first.
	var old []*Job
	for _, j := range m.jobs {
		if isTerminal(j.State) && j.FinishedAt() < c.JobsBefore {
			old = append(old, j)
		}
	}
	slices.SortFunc(old, func(a, b *Job) int { return cmp.Compare(a.FinishSeq(), b.FinishSeq()) })
	if len(old) > int(c.Limit) {
		old, res.More = old[:c.Limit], true
	}
	m.jobs = slices.DeleteFunc(m.jobs, func(j *Job) bool { return slices.Contains(old, j) })
	for _, j := range old {
		delete(m.reports, j)
		delete(m.retried, j)
	}
	res.Jobs = len(old)
	// Every event older than the cutoff.
	n := len(m.events)
	m.events = slices.DeleteFunc(m.events, func(ev Event) bool { return ev.Time < c.EventsBefore })
	res.Events = n - len(m.events)
	if res.Jobs > 0 {
		m.emit(Event{Type: EventJobsCompacted})
	}
	return res, nil
}

// ---------------------------------------------------------------------------
// Canonical forms: results are compared as strings, so a mismatch prints
// both sides in full.

func normJob(j Job) Job {
	if len(j.Payload) == 0 {
		j.Payload = nil
	}
	// A job holds its leases behind a pointer, which reflect.DeepEqual
	// would follow to the first lease only: same compares them apart
	// (leasesIn).
	j.SetLeases(nil)
	return j
}

// leasesIn lists the leases of the jobs in v, one of the values norm
// knows to hold jobs, each nil when empty.
func leasesIn(v any) [][]Lease {
	var jobs []Job
	switch x := v.(type) {
	default:
		if v != nil && holdsJob(reflect.TypeOf(v), map[reflect.Type]bool{}) {
			panic(fmt.Sprintf("leasesIn: %T holds a job: list its jobs here, and norm them", v))
		}
	case Job:
		jobs = []Job{x}
	case SubmitResult:
		jobs = []Job{x.Job}
	case AcquireResult:
		for _, g := range x.Grants {
			jobs = append(jobs, g.Job)
		}
	case CancelResult:
		jobs = []Job{x.Job}
	}
	out := make([][]Lease, len(jobs))
	for i, j := range jobs {
		if ls := j.Leases(); len(ls) > 0 {
			out[i] = ls
		}
	}
	return out
}

// normEvent blanks the Detail the model does not predict: everything but
// the leader's recorded facts.
func normEvent(ev Event) Event {
	if !recordable[ev.Type] {
		ev.Detail = ""
	}
	return ev
}

// norm returns v with the representation details the model does not
// predict made uniform: nil or empty slices, the copy-on-write generation,
// event details.
func norm(v any) any {
	switch x := v.(type) {
	case Job:
		v = normJob(x)
	case SubmitResult:
		x.Job = normJob(x.Job)
		v = x
	case AcquireResult:
		x.Grants = slices.Clone(x.Grants)
		for i := range x.Grants {
			x.Grants[i].Job = normJob(x.Grants[i].Job)
		}
		if len(x.Grants) == 0 {
			x.Grants = nil
		}
		v = x
	case CancelResult:
		x.Job = normJob(x.Job)
		v = x
	case CancelSubmitterResult:
		if len(x.Cancelled) == 0 {
			x.Cancelled = nil
		}
		v = x
	case DeregisterResult:
		if len(x.Released) == 0 {
			x.Released = nil
		}
		v = x
	case RemoveIdleResult:
		if len(x.Removed) == 0 {
			x.Removed = nil
		}
		if len(x.Kept) == 0 {
			x.Kept = nil
		}
		v = x
	case PurgeResult:
		if len(x.Purged) == 0 {
			x.Purged = nil
		}
		if len(x.Skipped) == 0 {
			x.Skipped = nil
		}
		v = x
	case ExpireResult:
		if len(x.Expired) == 0 {
			x.Expired = nil
		}
		if len(x.Ignored) == 0 {
			x.Ignored = nil
		}
		v = x
	case PutScheduleResult:
		if len(x.Schedule.Template.Payload) == 0 {
			x.Schedule.Template.Payload = nil
		}
		v = x
	case FireResult:
		// The model does not word the submit's refusal.
		if strings.HasPrefix(x.Reason, "the slot's job was refused") {
			x.Reason = "the slot's job was refused"
		}
		v = x
	case Event:
		v = normEvent(x)
	case []Event:
		var evs []Event
		for i := range x {
			evs = append(evs, normEvent(x[i]))
		}
		v = evs
	}
	return v
}

func canon(v any) string {
	if v == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%T%+v leases %v", v, norm(v), leasesIn(v))
}

// holdsJob says whether a value of type t can hold a Job.
func holdsJob(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == reflect.TypeFor[Job]() {
		return true
	}
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return holdsJob(t.Elem(), seen)
	case reflect.Map:
		return holdsJob(t.Key(), seen) || holdsJob(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if holdsJob(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}

func same(a, b any) bool {
	la, lb := leasesIn(a), leasesIn(b) // first: it refuses types it does not know
	return reflect.DeepEqual(norm(a), norm(b)) && reflect.DeepEqual(la, lb)
}

var modelSentinels = []error{
	ErrInvalidArgument, ErrTooLarge, ErrNotFound, ErrConflict, ErrStaleToken, ErrNotOwner,
	ErrUnknownWorker, ErrFinished, ErrNotDead, ErrTokensExhausted, ErrUnknownCommand, ErrCorrupt,
}

// sentinel maps an error to the sentinel it wraps (or itself).
func sentinel(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range modelSentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

func describe(c Command) string {
	s := fmt.Sprintf("%T%+v", c, c)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// ---------------------------------------------------------------------------
// The generator: realistic mixes of commands, chosen from what the model
// knows (and some things it knows to be wrong).

type modelAction int

const (
	actRegister modelAction = iota
	actDeregister
	actSubmit
	actAcquire
	actStart
	actReport
	actRelease
	actCancel
	actCancelSubmitter
	actExpire
	actCompact
	actFloor
	actRecord
	actRemoveIdle
	actSetNode
	actRetry
	actPurge
	actSchedule // put, pause, resume or delete a schedule
	actFire
	actInvalid
	actSetQueue
	numActions
)

type modelProfile struct {
	name    string
	weights [numActions]int
	maxOpen int  // >0: at most this many unfinished jobs (the rest of submits are duplicates)
	oneSub  bool // most jobs from one submitter, in one queue (bulk cancels, long ready queues)
	sticky  bool // most jobs survive many losses and failures (long lease histories)
}

var modelProfiles = []modelProfile{
	{name: "mixed", weights: [numActions]int{4, 1, 18, 16, 6, 16, 5, 4, 2, 8, 3, 1, 1, 2, 1, 2, 1, 2, 3, 1, actSetQueue: 2}},
	// Few jobs leased over and over: lease history trimming, poison jobs,
	// retry limits, old tokens of the same job.
	{name: "hot", maxOpen: 3, sticky: true, weights: [numActions]int{3, 1, 8, 25, 5, 2, 30, 1, 0, 6, 2, 1, 1, 1, 1, 3, 1, 1, 1, 1, actSetQueue: 2}},
	// Many queued jobs: long ready queues, bulk cancels, stale heap entries,
	// shard boundaries and compaction of whole shards.
	{name: "bulk", oneSub: true, weights: [numActions]int{2, 1, 60, 10, 2, 8, 1, 2, 6, 5, 6, 1, 1, 1, 1, 2, 2, 2, 1, 1, actSetQueue: 2}},
	// Workers coming and going, expiries and revokes.
	{name: "churn", weights: [numActions]int{8, 4, 14, 16, 6, 12, 5, 8, 2, 16, 3, 2, 2, 4, 1, 2, 1, 2, 4, 1, actSetQueue: 2}},
}

var (
	modelWorkers    = []string{"w1", "w2", "w3", "w4", "w5", "w6"}
	modelQueues     = []string{"q1", "q2", "q3"}
	modelKinds      = []string{"k1", "k2"}
	modelSubmitters = []string{"", "s1", "s2", "s3"}
	modelRecordable = []EventType{EventWorkerUnreachable, EventWorkerReachable, EventAbsenceRule, EventLeaderChanged}
)

type modelGen struct {
	rng     *rand.Rand
	m       *refModel
	prof    modelProfile
	total   int
	leader  int64 // the leader's clock: may jump back (a new leader)
	nJob    int
	nReq    int
	nRep    int
	jobIDs  []string            // every job id ever submitted, first submission order
	seenIDs map[string]bool     // lookup only
	grants  []HeldLease         // grants seen, newest last (bounded)
	reports []Report            // reports accepted the first time (bounded)
	reqs    map[string][]string // worker -> its request ids (lookup only)
}

func newModelGen(seed uint64, m *refModel) *modelGen {
	g := &modelGen{
		rng: rand.New(rand.NewPCG(seed, 0x6c65617365686f6c)), m: m,
		prof:    modelProfiles[int(seed%uint64(len(modelProfiles)))],
		leader:  1_000_000_000,
		seenIDs: map[string]bool{},
		reqs:    map[string][]string{},
	}
	for _, w := range g.prof.weights {
		g.total += w
	}
	return g
}

func (g *modelGen) pct(p int) bool { return g.rng.IntN(100) < p }

func pick[T any](g *modelGen, xs []T) T { return xs[g.rng.IntN(len(xs))] }

// tick advances the leader's clock: mostly forward, sometimes not at all,
// sometimes backwards (a new leader whose clock is behind).
func (g *modelGen) tick() int64 {
	switch r := g.rng.IntN(100); {
	case r < 4:
		g.leader -= g.rng.Int64N(5e9)
	case r < 12:
	default:
		g.leader += 1 + g.rng.Int64N(2e9)
	}
	return g.leader
}

func (g *modelGen) text() string {
	switch r := g.rng.IntN(100); {
	case r < 40:
		return ""
	case r < 80:
		return "user"
	case r < 98:
		return "résumé\tdone\n"
	default:
		return strings.Repeat("x", MaxMessageLen)
	}
}

func (g *modelGen) worker() string { return pick(g, modelWorkers) }

func (g *modelGen) otherWorker(not string) string {
	for {
		if w := g.worker(); w != not {
			return w
		}
	}
}

type liveRef struct {
	job    string
	token  uint64
	worker string
}

func (g *modelGen) liveLeases() []liveRef {
	var out []liveRef
	for _, j := range g.m.jobs {
		if l := g.m.live(j); l != nil {
			out = append(out, liveRef{j.ID, l.Token, l.WorkerID})
		}
	}
	return out
}

// oldLease returns a granted lease (maybe still live, usually not).
func (g *modelGen) oldLease() (liveRef, bool) {
	if len(g.grants) == 0 {
		return liveRef{}, false
	}
	l := pick(g, g.grants)
	return liveRef{l.JobID, l.Token, l.WorkerID}, true
}

// madeUp returns a lease that was probably never granted to that job.
func (g *modelGen) madeUp() liveRef {
	job := "nojob"
	if len(g.m.jobs) > 0 && g.pct(70) {
		job = pick(g, g.m.jobs).ID
	}
	tok := g.m.lastToken + 1 + g.rng.Uint64N(100)
	if g.m.lastToken > 0 && g.pct(50) {
		tok = 1 + g.rng.Uint64N(g.m.lastToken)
	}
	return liveRef{job, tok, g.worker()}
}

// target picks a lease to act on: mostly a live one by its holder.
func (g *modelGen) target() liveRef {
	live := g.liveLeases()
	switch r := g.rng.IntN(100); {
	case r < 70 && len(live) > 0:
		return pick(g, live)
	case r < 80 && len(live) > 0:
		l := pick(g, live)
		l.worker = g.otherWorker(l.worker)
		return l
	case r < 93:
		if l, ok := g.oldLease(); ok {
			return l
		}
	}
	return g.madeUp()
}

func (g *modelGen) open() int {
	n := 0
	for _, j := range g.m.jobs {
		if !isTerminal(j.State) && j.State != JobDead {
			n++
		}
	}
	return n
}

func (g *modelGen) newSpec(id string) JobSpec {
	s := JobSpec{
		ID: id, Queue: pick(g, modelQueues), Kind: pick(g, modelKinds),
		Priority: int32(g.rng.IntN(4)) - 1, Submitter: pick(g, modelSubmitters),
		MaxAttempts: 1 + uint32(g.rng.IntN(3)), OnWorkerLost: LostPolicy(1 + g.rng.IntN(2)),
		MaxWorkerLosses: 1 + uint32(g.rng.IntN(3)),
	}
	if g.prof.oneSub {
		s.Submitter = pick(g, modelSubmitters[1:])
		if g.pct(85) {
			s.Queue, s.Submitter = "q1", "s1"
		}
	}
	if g.prof.sticky && g.pct(90) {
		s.OnWorkerLost, s.MaxWorkerLosses, s.MaxAttempts = LostRequeue, MaxAttempts, MaxAttempts
	}
	if g.pct(40) {
		// Delays of about the clock's steps (ticks average 1 s), so retries
		// come due while other jobs are granted.
		p := RetryPolicy{Initial: 1 + g.rng.Int64N(3e9), Multiplier: 1000 + uint32(g.rng.IntN(3001)), Jitter: uint32(g.rng.IntN(101))}
		p.Max = p.Initial + g.rng.Int64N(6e9)
		if g.pct(5) {
			p.Max, p.Multiplier = MaxRetryDelay, MaxRetryMultiplier // the largest: no overflow
		}
		s.Retry = &p
	}
	switch r := g.rng.IntN(100); {
	case r < 30:
	case r < 95:
		s.Payload = []byte("p-" + id)
	default:
		s.Payload = make([]byte, 1+g.rng.IntN(2048))
		for i := range s.Payload {
			s.Payload[i] = byte(g.rng.IntN(256))
		}
	}
	return s
}

func (g *modelGen) submit() Command {
	kept := g.m.jobs
	r := g.rng.IntN(100)
	if g.prof.oneSub {
		r = g.rng.IntN(400) // mostly new jobs
	}
	switch {
	case (r < 10 || g.prof.maxOpen > 0 && g.open() >= g.prof.maxOpen) && len(kept) > 0:
		// The same spec again; an empty payload may come back as nil or empty.
		s := pick(g, kept).JobSpec
		s.Payload = slices.Clone(s.Payload)
		if len(s.Payload) == 0 && g.pct(50) {
			s.Payload = []byte{}
		}
		c := &SubmitJob{Spec: s}
		if g.pct(30) {
			c.TimeoutMs = MaxTimeout // not part of what the job is
		}
		return c
	case r < 18 && len(kept) > 0:
		// The same id with another spec.
		s := pick(g, kept).JobSpec
		s.Payload = slices.Clone(s.Payload)
		switch g.rng.IntN(6) {
		case 0:
			s.Priority++
		case 1:
			s.Payload = append(s.Payload, 'x')
		case 2:
			s.Queue = s.Queue + "x"
		case 3:
			s.MaxAttempts = 1 + s.MaxAttempts%MaxAttempts
		case 4:
			s.OnWorkerLost = 3 - s.OnWorkerLost
		default:
			s.Submitter = s.Submitter + "z"
		}
		return &SubmitJob{Spec: s}
	case r < 22 && len(g.jobIDs) > 0:
		// An id that may have been compacted away: a new job if so.
		return &SubmitJob{Spec: g.newSpec(pick(g, g.jobIDs))}
	}
	g.nJob++
	id := fmt.Sprintf("j%d", g.nJob)
	if g.pct(2) {
		id += "-" + strings.Repeat("x", MaxIDLen-len(id)-1) // the longest id
	}
	c := &SubmitJob{Spec: g.newSpec(id)}
	if g.pct(30) {
		// Timeouts of a few of the clock's steps, so leases reach them.
		c.TimeoutMs = MinTimeout + uint32(g.rng.IntN(5000))
	}
	if g.pct(25) {
		// To run later, mostly within a few steps, sometimes in the past.
		c.RunAt = max(0, g.leader+g.rng.Int64N(8e9)-1e9)
	}
	return c
}

func (g *modelGen) acquire() Command {
	w := g.worker()
	if g.pct(90) {
		if ids := g.m.workerIDs(); len(ids) > 0 {
			w = pick(g, ids)
		}
	}
	c := &Acquire{WorkerID: w, Max: 1 + uint32(g.rng.IntN(4)), Start: g.pct(30)}
	other := g.otherWorker(w)
	switch r := g.rng.IntN(100); {
	case r < 20 && len(g.reqs[w]) > 0:
		c.RequestID = pick(g, g.reqs[w]) // a retry
	case r < 25 && len(g.reqs[other]) > 0:
		c.RequestID = pick(g, g.reqs[other]) // another worker's request id: a different key
	default:
		g.nReq++
		c.RequestID = fmt.Sprintf("r%d", g.nReq)
	}
	qs := slices.Clone(modelQueues)
	g.rng.Shuffle(len(qs), func(i, j int) { qs[i], qs[j] = qs[j], qs[i] })
	c.Queues = qs[:1+g.rng.IntN(len(qs))]
	if g.pct(5) {
		c.Queues = append(c.Queues, "q-none")
	}
	if g.pct(50) {
		ks := slices.Clone(modelKinds)
		g.rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
		c.Kinds = ks[:1+g.rng.IntN(len(ks))]
	}
	return c
}

func (g *modelGen) outcome() (Outcome, bool) {
	switch r := g.rng.IntN(100); {
	case r < 40:
		return OutcomeSucceeded, false
	case r < 70:
		return OutcomeFailed, true
	case r < 80:
		return OutcomeFailed, false
	case r < 90:
		return OutcomeCancelled, false
	}
	return OutcomeKilled, false
}

func (g *modelGen) report() Command {
	if len(g.reports) > 0 && g.pct(20) {
		c := pick(g, g.reports) // the same report again
		switch r := g.rng.IntN(100); {
		case r < 40:
			c.ReportID = c.ReportID + "-other" // another report on a reported lease
			c.Outcome, c.Retryable = g.outcome()
			if !c.Retryable {
				c.RetryAfter = 0
			}
		case r < 55:
			c.WorkerID = g.otherWorker(c.WorkerID)
		}
		return &c
	}
	t := g.target()
	g.nRep++
	c := &Report{WorkerID: t.worker, JobID: t.job, Token: t.token, ReportID: fmt.Sprintf("rep%d", g.nRep)}
	c.Outcome, c.Retryable = g.outcome()
	if c.Retryable && g.pct(20) {
		c.RetryAfter = 1 + g.rng.Int64N(4e9) // a snooze
	}
	if g.pct(50) {
		c.Ref = fmt.Sprintf("commit-%x", g.rng.Uint32())
	}
	if g.pct(20) {
		c.Message = g.text()
	}
	return c
}

func (g *modelGen) expire() Command {
	c := &Expire{Reason: g.text()}
	live := g.liveLeases()
	if len(live) > 0 && g.pct(40) {
		// Everything one silent worker holds, as the leader proposes it.
		w := pick(g, live).worker
		for _, l := range live {
			if l.worker == w {
				c.Leases = append(c.Leases, LeaseRef{l.job, l.token})
			}
		}
	}
	for n := g.rng.IntN(4); n >= 0 || len(c.Leases) == 0; n-- {
		var t liveRef
		switch r := g.rng.IntN(100); {
		case r < 50 && len(live) > 0:
			t = pick(g, live)
		case r < 60 && len(c.Leases) > 0:
			ref := pick(g, c.Leases) // listed twice
			t = liveRef{job: ref.JobID, token: ref.Token}
		default:
			t = g.target()
		}
		c.Leases = append(c.Leases, LeaseRef{t.job, t.token})
	}
	return c
}

// timeOut proposes a TimeOut: mostly the leases past their deadline by
// the leader's clock, as the leader does, sometimes leases not yet due, or
// stale or made-up ones.
func (g *modelGen) timeOut() Command {
	c := &TimeOut{}
	for _, j := range g.m.jobs {
		if l := g.m.live(j); l != nil && j.TimeoutMs > 0 && l.Revoke == RevokeNone &&
			l.GrantedAt+int64(j.TimeoutMs)*int64(time.Millisecond) <= g.leader && g.pct(80) {
			c.Leases = append(c.Leases, LeaseRef{j.ID, l.Token})
		}
	}
	for n := g.rng.IntN(3); n > 0 || len(c.Leases) == 0; n-- {
		t := g.target()
		c.Leases = append(c.Leases, LeaseRef{t.job, t.token})
	}
	return c
}

func (g *modelGen) compact() Command {
	c := &Compact{Limit: 1 + uint32(g.rng.IntN(4))}
	if g.pct(30) {
		c.Limit = MaxCompactBatch
	}
	var done []*Job
	for _, j := range g.m.jobs {
		if isTerminal(j.State) {
			done = append(done, j)
		}
	}
	switch r := g.rng.IntN(100); {
	case r < 40 && len(done) > 0:
		c.JobsBefore = pick(g, done).FinishedAt() + g.rng.Int64N(2) // exactly at a boundary, or just past it
	case r < 75:
		c.JobsBefore = g.m.now - g.rng.Int64N(30e9)
	case r < 85:
		c.JobsBefore = g.m.now + 1
	default:
		c.JobsBefore = 0
	}
	switch r := g.rng.IntN(100); {
	case r < 30 && len(g.m.events) > 0:
		c.EventsBefore = pick(g, g.m.events).Time + g.rng.Int64N(2)
	case r < 60:
		c.EventsBefore = g.m.now - g.rng.Int64N(60e9)
	default:
		c.EventsBefore = 0
	}
	return c
}

// setNode records a node's level, as the leader does: the cluster's level
// is the lowest recorded, so the dead-letter rule switches on and off.
func (g *modelGen) setNode() Command {
	id := pick(g, []string{"n1", "n2", "n3"})
	c := &SetNode{NodeID: id, RaftAddr: id + ":7001", APIAddr: id + ":7000"}
	switch r := g.rng.IntN(100); {
	case r < 65:
		c.Level, c.Version = 6, "v6"
	case r < 90:
		c.Level, c.Version = 5, "v5"
	}
	return c
}

// dead returns the ids of the dead jobs.
func (g *modelGen) dead() []string {
	var ids []string
	for _, j := range g.m.jobs {
		if j.State == JobDead {
			ids = append(ids, j.ID)
		}
	}
	return ids
}

func (g *modelGen) retry() Command {
	id := "nojob"
	switch dead := g.dead(); {
	case len(dead) > 0 && g.pct(80):
		id = pick(g, dead)
	case len(g.m.jobs) > 0 && g.pct(90):
		id = pick(g, g.m.jobs).ID // not dead: refused
	}
	return &RetryJob{JobID: id, Reason: g.text()}
}

func (g *modelGen) purge() Command {
	c := &PurgeJobs{Limit: 1 + uint32(g.rng.IntN(3)), Reason: g.text()}
	if g.pct(20) {
		c.Limit = MaxPurgeBatch
	}
	if g.pct(40) {
		dead := g.dead()
		for n := 1 + g.rng.IntN(3); n > 0; n-- {
			switch r := g.rng.IntN(100); {
			case r < 60 && len(dead) > 0:
				c.JobIDs = append(c.JobIDs, pick(g, dead))
			case r < 85 && len(g.m.jobs) > 0:
				c.JobIDs = append(c.JobIDs, pick(g, g.m.jobs).ID)
			default:
				c.JobIDs = append(c.JobIDs, "nojob")
			}
		}
		return c
	}
	if g.pct(50) {
		c.Queue = pick(g, modelQueues)
	}
	if g.pct(50) {
		c.OlderThan = g.rng.Int64N(20e9)
	}
	return c
}

func (g *modelGen) invalid() Command {
	switch g.rng.IntN(8) {
	case 6:
		return &PurgeJobs{JobIDs: []string{"j1"}, Queue: "q1", Limit: 1}
	case 7:
		return &RetryJob{JobID: ""}
	case 0:
		return &Acquire{WorkerID: "w1", RequestID: "bad", Queues: []string{"q1"}, Max: 0}
	case 1:
		if g.pct(50) {
			return &RegisterWorker{WorkerID: g.worker(), Capacity: 1, Version: "v 1"}
		}
		return &RegisterWorker{WorkerID: g.worker(), Capacity: 0}
	case 2:
		return &Report{WorkerID: "w1", JobID: "j1", Token: 1, ReportID: "bad", Outcome: OutcomeSucceeded, Retryable: true}
	case 3:
		return &Expire{}
	case 4:
		return &CancelSubmitter{Submitter: "s1", Limit: 0}
	}
	return &Start{WorkerID: "w1", JobID: "j1", Token: 0}
}

// next returns the next command, and whether it is invalid on purpose.
func (g *modelGen) next() (Command, bool) {
	n := g.rng.IntN(g.total)
	a := modelAction(0)
	for ; n >= g.prof.weights[a]; a++ {
		n -= g.prof.weights[a]
	}
	switch a {
	case actRegister:
		capacity := 1 + uint32(g.rng.IntN(4))
		// Workers say their version, or (older clients) nothing.
		version := []string{"", "v1.0.0", "v1.1.0"}[g.rng.IntN(3)]
		return &RegisterWorker{WorkerID: g.worker(), Capacity: capacity, Version: version}, false
	case actDeregister:
		w := g.worker()
		if ids := g.m.workerIDs(); len(ids) > 0 && g.pct(85) {
			w = pick(g, ids)
		}
		return &DeregisterWorker{WorkerID: w, Lost: g.pct(50)}, false
	case actSubmit:
		return g.submit(), false
	case actAcquire:
		return g.acquire(), false
	case actStart:
		t := g.target()
		return &Start{WorkerID: t.worker, JobID: t.job, Token: t.token}, false
	case actReport:
		return g.report(), false
	case actRelease:
		t := g.target()
		return &Release{WorkerID: t.worker, JobID: t.job, Token: t.token, Reason: g.text(), Lost: g.pct(30)}, false
	case actCancel:
		id := "nojob"
		if len(g.m.jobs) > 0 && g.pct(90) {
			id = pick(g, g.m.jobs).ID
			if live := g.liveLeases(); len(live) > 0 && g.pct(40) {
				id = pick(g, live).job
			}
		}
		return &Cancel{JobID: id, Kill: g.pct(35), Reason: g.text()}, false
	case actCancelSubmitter:
		limit := 1 + uint32(g.rng.IntN(4))
		if g.pct(25) {
			limit = MaxCancelBatch
		}
		return &CancelSubmitter{Submitter: pick(g, []string{"s1", "s2", "s3", "s9"}), Limit: limit, Reason: g.text()}, false
	case actExpire:
		if g.pct(35) {
			return g.timeOut(), false
		}
		return g.expire(), false
	case actCompact:
		return g.compact(), false
	case actFloor:
		floor := g.m.lastToken + g.rng.Uint64N(10)
		switch r := g.rng.IntN(100); {
		case r < 30:
			floor -= min(floor, g.rng.Uint64N(20))
		case r < 40:
			floor += 1 << 20
		case r < 45:
			floor = max(floor, MaxTokenFloor-1_000_000) // huge tokens from here on
		}
		return &RaiseTokenFloor{Floor: min(floor, MaxTokenFloor)}, false
	case actRecord:
		w := ""
		if g.pct(70) {
			w = g.worker()
		}
		return &RecordEvent{Event: pick(g, modelRecordable), WorkerID: w, Detail: g.text()}, false
	case actSetNode:
		return g.setNode(), false
	case actRetry:
		return g.retry(), false
	case actPurge:
		return g.purge(), false
	case actRemoveIdle:
		// As the leader proposes it: workers it has not heard from, some of
		// which may have acquired since, been removed already, or never
		// registered.
		c := &RemoveIdle{Reason: g.text()}
		for n := 1 + g.rng.IntN(3); n > 0; n-- {
			c.WorkerIDs = append(c.WorkerIDs, g.worker())
		}
		return c, false
	case actSchedule:
		return g.schedule(), false
	case actFire:
		// As a leader proposes it: a slot after LastSlot, or (a retry, a
		// replay, an old leader) one at or before it; now and then one
		// after the leader's time, or of no schedule.
		name := pick(g, modelSchedules)
		slot := g.m.now - g.rng.Int64N(5e9)
		if sc := g.m.schedules[name]; sc != nil && g.pct(70) {
			slot = sc.LastSlot + g.rng.Int64N(3e9) - 5e8
		}
		if g.pct(5) {
			slot = g.m.now + 1 + g.rng.Int64N(1e9)
		}
		c := &FireSchedule{Name: name, Slot: max(slot, 1), Skip: g.pct(25), Skipped: uint32(g.rng.IntN(3))}
		if c.Skip || c.Skipped > 0 {
			c.Reason = "missed"
		}
		return c, false
	case actSetQueue:
		// Pauses and resumes, limits of 1 to 3 and none, on the queues
		// acquires name (and one no job uses).
		c := &SetQueue{Queue: pick(g, append(slices.Clone(modelQueues), "q-none"))}
		if g.pct(50) {
			c.SetPaused, c.Paused = true, g.pct(40)
		}
		if !c.SetPaused || g.pct(30) {
			c.SetMaxRunning, c.MaxRunning = true, uint32(g.rng.IntN(4))
		}
		return c, false
	}
	return g.invalid(), true
}

var modelSchedules = []string{"sa", "sb", "sc"}

// schedule puts (creates, repeats or replaces), pauses, resumes or deletes
// a schedule.
func (g *modelGen) schedule() Command {
	name := pick(g, modelSchedules)
	switch r := g.rng.IntN(100); {
	case r < 20:
		return &PutSchedule{Name: name, PauseOnly: true, Paused: g.pct(50)}
	case r < 30:
		return &DeleteSchedule{Name: name}
	}
	tmpl := g.newSpec("")
	if g.pct(40) {
		// The same template each time: fired jobs of an old slot and a
		// repeated create are the same.
		tmpl = JobSpec{Queue: "q1", Kind: "k1", Payload: []byte(name), MaxAttempts: 2, OnWorkerLost: LostRequeue, MaxWorkerLosses: 2}
	}
	return &PutSchedule{Name: name, Cron: pick(g, []string{"* * * * *", "*/5 * * * * *"}), Zone: pick(g, []string{"", "UTC", "Europe/Paris"}),
		Missed: MissedPolicy(1 + g.rng.IntN(2)), Template: tmpl, Paused: g.pct(10), Replace: g.pct(50)}
}

// observe remembers what the generator may reuse: ids, grants, requests,
// accepted reports.
func (g *modelGen) observe(c Command, res any, err error) {
	const keep = 2000
	switch c := c.(type) {
	case *SubmitJob:
		if !g.seenIDs[c.Spec.ID] {
			g.seenIDs[c.Spec.ID] = true
			g.jobIDs = append(g.jobIDs, c.Spec.ID)
		}
	case *Acquire:
		if err != nil {
			return
		}
		if !slices.Contains(g.reqs[c.WorkerID], c.RequestID) {
			g.reqs[c.WorkerID] = append(g.reqs[c.WorkerID], c.RequestID)
		}
		if r := res.(AcquireResult); !r.Replayed {
			for _, gr := range r.Grants {
				g.grants = append(g.grants, HeldLease{Lease: gr.Lease, JobID: gr.Job.ID})
			}
			if len(g.grants) > keep {
				g.grants = slices.Delete(g.grants, 0, len(g.grants)-keep)
			}
		}
	case *Report:
		if err == nil && !slices.ContainsFunc(g.reports, func(r Report) bool { return r.Token == c.Token }) {
			g.reports = append(g.reports, *c)
			if len(g.reports) > keep {
				g.reports = slices.Delete(g.reports, 0, len(g.reports)-keep)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// The driver.

type pendingSnap struct {
	snap  *Snapshot // released once its write is over: later changes are in place again
	want  [32]byte
	until int
	done  chan snapBytes
	stop  chan struct{} // ends the concurrent reader
	read  chan error    // its verdict
}

type snapBytes struct {
	b   []byte
	err error
}

type modelRun struct {
	t      *testing.T
	seed   uint64
	steps  int
	step   int
	f      *FSM
	m      *refModel
	g      *modelGen
	sched  *rand.Rand // when to snapshot, independent of the command stream
	checks *rand.Rand // what the periodic checks sample
	index  uint64
	recent []string

	twin      *FSM // the FSM before a restore, run alongside the restored one
	twinLeft  int
	twinEvery int
	twins     int

	nextRoundTrip int
	nextCOW       int
	pending       *pendingSnap
	seen          map[string]int // what the run exercised, logged with -v
}

func newModelRun(t *testing.T, seed uint64, steps int) *modelRun {
	m := newRefModel()
	r := &modelRun{
		t: t, seed: seed, steps: steps, f: New(), m: m, g: newModelGen(seed, m),
		sched:  rand.New(rand.NewPCG(seed, 2)),
		checks: rand.New(rand.NewPCG(seed, 3)),
		seen:   map[string]int{},
	}
	r.nextRoundTrip = 100 + r.sched.IntN(150)
	r.nextCOW = 50 + r.sched.IntN(200)
	return r
}

func (r *modelRun) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("seed %d (profile %s) step %d: %s\nlast commands:\n  %s\nreproduce: go test ./fsm -run 'TestModel$' -model.seed=%d -model.steps=%d",
		r.seed, r.g.prof.name, r.step, fmt.Sprintf(format, args...), strings.Join(r.recent, "\n  "), r.seed, r.steps)
}

func (r *modelRun) run() {
	for r.step = 1; r.step <= r.steps; r.step++ {
		r.one()
		if r.step%50 == 0 {
			r.compareState()
		}
		if r.step == r.nextRoundTrip {
			r.roundTrip()
			r.compareState()
			r.nextRoundTrip = r.step + 150 + r.sched.IntN(100)
		}
		if r.pending == nil && r.step == r.nextCOW {
			r.startPending()
		}
		if r.pending != nil && r.step == r.pending.until {
			r.finishPending()
			r.nextCOW = r.step + 100 + r.sched.IntN(300)
		}
	}
	r.step--
	r.compareState()
	r.seen["leases trimmed from history"] = r.m.trimmed
	r.seen["jobs submitted (last seq)"] = int(r.m.jobSeq)
	r.seen["job shards kept"] = len(r.f.st.shards)
	keys := make([]string, 0, len(r.seen))
	for k := range r.seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %d\n", k, r.seen[k])
	}
	r.t.Logf("seed %d, profile %s, %d steps, exercised:\n%s", r.seed, r.g.prof.name, r.steps, b.String())
	if r.twins == 0 && r.steps >= 1000 {
		r.fail("no twin run happened: make the sequence longer")
	}
}

func (r *modelRun) one() {
	c, invalid := r.g.next()
	at := r.g.tick()
	r.recent = append(r.recent, fmt.Sprintf("step %d t=%d %s", r.step, at, describe(c)))
	if len(r.recent) > 12 {
		r.recent = r.recent[1:]
	}
	data, err := Encode(at, c)
	if invalid {
		if s := sentinel(err); s != ErrInvalidArgument && s != ErrTooLarge {
			r.fail("invalid command encoded: %v", err)
		}
		return
	}
	if err != nil {
		r.fail("encode: %v", err)
	}
	r.index++
	if r.sched.IntN(20) == 0 {
		r.index += 1 + uint64(r.sched.IntN(3)) // raft indexes may skip (configuration entries)
	}
	changed := r.f.Changed()
	before := r.m.eventSeq
	res, err := r.f.Apply(r.index, data)
	want, wantErr := r.m.apply(r.index, at, c)
	if got := sentinel(err); got != wantErr {
		r.fail("%s\n  error %v\n  want  %v (result %s)", describe(c), err, wantErr, canon(want))
	}
	if err == nil && !same(res, want) {
		r.fail("%s\n  got  %s\n  want %s", describe(c), canon(res), canon(want))
	}
	if ierr := r.f.CheckInvariants(); ierr != nil {
		r.fail("invariants after %s: %v", describe(c), ierr)
	}
	page := r.f.Events(before, MaxPageSize)
	if !same(page.Events, r.m.emitted) || page.LastSeq != r.m.eventSeq {
		r.fail("%s: events\n  got  %s (last %d)\n  want %s (last %d)", describe(c), canon(page.Events), page.LastSeq, canon(r.m.emitted), r.m.eventSeq)
	}
	select {
	case <-changed:
		if len(r.m.emitted) == 0 {
			r.fail("%s: Changed closed without an event", describe(c))
		}
	default:
		if len(r.m.emitted) > 0 {
			r.fail("%s: Changed not closed after %d events", describe(c), len(r.m.emitted))
		}
	}
	r.g.observe(c, want, wantErr)
	r.note(c, at, want, wantErr)
	if r.twin != nil {
		r.stepTwin(c, data, res, err)
	}
}

// note counts what a step exercised.
func (r *modelRun) note(c Command, at int64, res any, err error) {
	if at < r.m.now {
		r.seen["commands stamped with an earlier leader time"]++
	}
	if err != nil {
		r.seen[fmt.Sprintf("%T refused: %v", c, err)]++
	}
	for _, ev := range r.m.emitted {
		r.seen["event "+ev.Type.String()]++
		if ev.Type == EventStaleReport && r.m.job(ev.JobID) == nil && slices.Contains(r.g.jobIDs, ev.JobID) {
			r.seen["stale report on a compacted job"]++
		}
	}
	switch x := res.(type) {
	case AcquireResult:
		switch {
		case x.Replayed:
			r.seen["acquire replayed"]++
		case len(x.Grants) == 0:
			r.seen["acquire granted nothing"]++
		case len(x.Grants) > 1:
			r.seen["acquire granted several"]++
		}
	case ReportResult:
		if c.(*Report).Token == x.Token && r.m.eventSeq > 0 && len(r.m.emitted) == 0 {
			r.seen["report answered again"]++
		}
	case PurgeResult:
		r.seen["dead jobs purged"] += len(x.Purged)
		if x.More {
			r.seen["purge stopped at its limit"]++
		}
	case CompactResult:
		if x.More {
			r.seen["compact stopped at its limit"]++
		}
		r.seen["jobs compacted"] += x.Jobs
	case CancelSubmitterResult:
		if x.Remaining > 0 {
			r.seen["cancel submitter left some"]++
		}
	case CancelResult:
		if x.Revoked {
			r.seen["cancel revoked a lease"]++
		}
	case ExpireResult:
		if len(x.Expired) > 0 && len(x.Ignored) > 0 {
			r.seen["expire mixed current and stale"]++
		}
	case RemoveIdleResult:
		r.seen["idle workers removed"] += len(x.Removed)
		for _, id := range x.Kept {
			if len(r.m.heldBy(id)) > 0 {
				r.seen["idle removal kept a holder"]++
			}
		}
	}
}

// stepTwin applies the same entry to the FSM that was snapshotted; it must
// answer exactly like the restored one and keep the same hash.
func (r *modelRun) stepTwin(c Command, data []byte, res any, err error) {
	tres, terr := r.twin.Apply(r.index, data)
	if sentinel(terr) != sentinel(err) || !same(tres, res) {
		r.fail("%s: restored and original FSM disagree\n  restored %s %v\n  original %s %v", describe(c), canon(res), err, canon(tres), terr)
	}
	if ierr := r.twin.CheckInvariants(); ierr != nil {
		r.fail("original FSM invariants after %s: %v", describe(c), ierr)
	}
	r.twinLeft--
	if r.twinLeft%r.twinEvery == 0 || r.twinLeft == 0 {
		if r.twin.Hash() != r.f.Hash() {
			r.fail("%s: restored and original FSM hash differently", describe(c))
		}
	}
	if r.twinLeft == 0 {
		r.twin = nil
		r.twins++
	}
}

func (r *modelRun) roundTrip() {
	var buf bytes.Buffer
	snap := r.f.Snapshot()
	if _, err := snap.WriteTo(&buf); err != nil {
		r.fail("snapshot: %v", err)
	}
	snap.Release()
	g := New()
	if err := g.Restore(&buf); err != nil {
		r.fail("restore: %v", err)
	}
	if g.Hash() != r.f.Hash() {
		r.fail("restored state hashes differently")
	}
	if err := g.CheckInvariants(); err != nil {
		r.fail("restored invariants: %v", err)
	}
	if r.twin == nil {
		r.twin = r.f
		if r.twins == 0 {
			r.twinLeft, r.twinEvery = 100, 1 // the first time, compare hashes at every step
		} else {
			r.twinLeft, r.twinEvery = 40, 20
		}
	}
	r.f = g
}

// startPending takes a snapshot and streams it concurrently with the next
// applies: copy-on-write must keep it exactly the state it was taken at.
func (r *modelRun) startPending() {
	snap := r.f.Snapshot()
	p := &pendingSnap{
		snap: snap, want: r.f.Hash(), until: r.step + 10 + r.sched.IntN(40), done: make(chan snapBytes, 1),
		stop: make(chan struct{}), read: make(chan error, 1),
	}
	go func() {
		var buf bytes.Buffer
		_, err := snap.WriteTo(&buf)
		p.done <- snapBytes{buf.Bytes(), err}
	}()
	f := r.f
	go func() { p.read <- readConcurrently(f, p.stop) }()
	r.pending = p
}

// readConcurrently runs queries while the test goroutine applies: each one
// must see the state between two applies, never in the middle of one.
func readConcurrently(f *FSM, stop <-chan struct{}) error {
	for range 1000 {
		select {
		case <-stop:
			return nil
		default:
		}
		if err := f.CheckInvariants(); err != nil {
			return fmt.Errorf("invariants seen by a concurrent reader: %w", err)
		}
		jobs, _ := f.Jobs(JobFilter{Limit: 100})
		for k := 1; k < len(jobs); k++ {
			if jobs[k].Seq <= jobs[k-1].Seq {
				return fmt.Errorf("concurrent Jobs out of order: %d after %d", jobs[k].Seq, jobs[k-1].Seq)
			}
		}
		page := f.Events(0, 100)
		for k := 1; k < len(page.Events); k++ {
			if page.Events[k].Seq != page.Events[k-1].Seq+1 {
				return fmt.Errorf("concurrent Events not consecutive: %d after %d", page.Events[k].Seq, page.Events[k-1].Seq)
			}
		}
		for _, j := range jobs {
			if l, ok := j.CurrentLease(); ok {
				if fr := f.Fence(j.ID, l.Token); fr.State == 0 && fr.Current {
					return fmt.Errorf("concurrent Fence(%s): %+v", j.ID, fr)
				}
				_, _ = f.Lease(l.Token)
				_ = f.WorkerLeases(l.WorkerID)
			}
		}
		_ = f.Stats()
		_ = f.LiveLeases()
		_ = f.Ready(modelQueues, nil)
		_ = f.Workers()
		_, _ = f.Worker("w1")
		_ = f.LastIndex()
		_ = f.Changed()
		runtime.Gosched()
	}
	return nil
}

func (r *modelRun) finishPending() {
	p := r.pending
	r.pending = nil
	close(p.stop)
	if err := <-p.read; err != nil {
		r.fail("%v", err)
	}
	sb := <-p.done
	p.snap.Release()
	if sb.err != nil {
		r.fail("concurrent snapshot: %v", sb.err)
	}
	if sha256.Sum256(sb.b) != p.want {
		r.fail("a snapshot streamed while applying differs from the state it was taken at (copy-on-write)")
	}
	g := New()
	if err := g.Restore(bytes.NewReader(sb.b)); err != nil {
		r.fail("restore of the concurrent snapshot: %v", err)
	}
	if g.Hash() != p.want {
		r.fail("the concurrent snapshot restores to another hash")
	}
}

func (r *modelRun) waitPending() {
	if r.pending != nil {
		close(r.pending.stop)
		<-r.pending.read
		<-r.pending.done
		r.pending.snap.Release()
		r.pending = nil
	}
}

// compareState compares everything the queries show with the model.
func (r *modelRun) compareState() {
	m, f := r.m, r.f
	// Every kept job, field by field, and every job id that is gone.
	for _, mj := range m.jobs {
		got, err := f.Job(mj.ID)
		if err != nil {
			r.fail("Job(%s): %v", mj.ID, err)
		}
		if want := copyJob(mj); !same(got, want) {
			r.fail("job %s\n  got  %s\n  want %s", mj.ID, canon(got), canon(want))
		}
		if got.Executions() != m.reports[mj] {
			r.fail("job %s: %d executions, want %d (its reports)", mj.ID, got.Executions(), m.reports[mj])
		}
	}
	for _, id := range r.g.jobIDs {
		if m.job(id) == nil {
			if _, err := f.Job(id); !errors.Is(err, ErrNotFound) {
				r.fail("Job(%s) of a compacted job: %v", id, err)
			}
		}
	}
	// The listing, page by page.
	limit := 1 + r.checks.IntN(300)
	var listed []string
	for after := uint64(0); ; {
		jobs, next := f.Jobs(JobFilter{AfterSeq: after, Limit: limit})
		for _, j := range jobs {
			listed = append(listed, j.ID)
		}
		if next == 0 {
			break
		}
		after = next
	}
	var ids []string
	for _, j := range m.jobs {
		ids = append(ids, j.ID)
	}
	if !slices.Equal(listed, ids) {
		r.fail("Jobs lists %v\n  want %v", listed, ids)
	}
	// A filtered listing.
	flt := JobFilter{Queue: modelQueues[r.checks.IntN(len(modelQueues))], State: JobState(1 + r.checks.IntN(int(JobDead)))}
	jobs, _ := f.Jobs(flt)
	listed, ids = listed[:0], ids[:0]
	for _, j := range jobs {
		listed = append(listed, j.ID)
	}
	for _, j := range m.jobs {
		if j.Queue == flt.Queue && j.State == flt.State {
			ids = append(ids, j.ID)
		}
	}
	ids = ids[:min(len(ids), MaxPageSize)]
	if !slices.Equal(listed, ids) {
		r.fail("Jobs(%+v) lists %v, want %v", flt, listed, ids)
	}
	// The jobs one worker holds.
	flt = JobFilter{WorkerID: modelWorkers[r.checks.IntN(len(modelWorkers))]}
	jobs, _ = f.Jobs(flt)
	listed, ids = listed[:0], ids[:0]
	for _, j := range jobs {
		listed = append(listed, j.ID)
	}
	for _, j := range m.jobs {
		if l := m.live(j); l != nil && l.WorkerID == flt.WorkerID {
			ids = append(ids, j.ID)
		}
	}
	if !slices.Equal(listed, ids) {
		r.fail("Jobs(%+v) lists %v, want %v", flt, listed, ids)
	}

	// Counters.
	st := f.Stats()
	counts := map[JobState]int{}
	live := 0
	for _, j := range m.jobs {
		counts[j.State]++
		if m.live(j) != nil {
			live++
		}
	}
	if st.LastIndex != r.index || st.LastTime != m.now || st.LastToken != m.lastToken || st.Workers != len(m.workers) ||
		st.LiveLeases != live || st.Events != len(m.events) || st.LastEventSeq != m.eventSeq ||
		fmt.Sprint(st.Jobs) != fmt.Sprint(counts) {
		r.fail("stats %+v\n  want index %d time %d token %d workers %d live %d events %d/%d jobs %v",
			st, r.index, m.now, m.lastToken, len(m.workers), live, len(m.events), m.eventSeq, counts)
	}

	// Schedules.
	var scs []Schedule
	for _, name := range modelSchedules {
		if sc := m.schedules[name]; sc != nil {
			scs = append(scs, *sc)
		}
	}
	for i := range scs {
		if len(scs[i].Template.Payload) == 0 {
			scs[i].Template.Payload = nil
		}
	}
	gotScs := f.Schedules()
	for i := range gotScs {
		if len(gotScs[i].Template.Payload) == 0 {
			gotScs[i].Template.Payload = nil
		}
	}
	if !reflect.DeepEqual(gotScs, scs) && !(len(gotScs) == 0 && len(scs) == 0) {
		r.fail("schedules\n  got  %+v\n  want %+v", gotScs, scs)
	}

	// Workers and their leases.
	var ws []Worker
	for _, id := range m.workerIDs() {
		ws = append(ws, *m.workers[id])
	}
	if g, w := fmt.Sprintf("%+v", f.Workers()), fmt.Sprintf("%+v", ws); g != w {
		r.fail("workers\n  got  %s\n  want %s", g, w)
	}
	liveAll := f.LiveLeases()
	for _, w := range modelWorkers {
		var want []HeldLease
		var refs []LeaseRef
		for _, j := range m.heldBy(w) {
			want = append(want, HeldLease{Lease: *m.live(j), JobID: j.ID})
			refs = append(refs, LeaseRef{j.ID, m.live(j).Token})
		}
		if g, e := fmt.Sprintf("%+v", f.WorkerLeases(w)), fmt.Sprintf("%+v", want); g != e {
			r.fail("WorkerLeases(%s)\n  got  %s\n  want %s", w, g, e)
		}
		appended := f.AppendWorkerLeases(nil, w)
		slices.SortFunc(appended, func(a, b HeldLease) int { return cmp.Compare(a.Token, b.Token) })
		if g, e := fmt.Sprintf("%+v", appended), fmt.Sprintf("%+v", want); g != e {
			r.fail("AppendWorkerLeases(%s), sorted\n  got  %s\n  want %s", w, g, e)
		}
		if !slices.Equal(liveAll[w], refs) {
			r.fail("LiveLeases[%s] = %v, want %v", w, liveAll[w], refs)
		}
		if _, err := f.Worker(w); (err == nil) != (m.workers[w] != nil) {
			r.fail("Worker(%s): %v", w, err)
		}
	}
	if len(liveAll) != len(slices.DeleteFunc(slices.Clone(modelWorkers), func(w string) bool { return len(m.heldBy(w)) == 0 })) {
		r.fail("LiveLeases names %d workers", len(liveAll))
	}

	// Ready counts for a few selections.
	for range 4 {
		qs := slices.Clone(modelQueues)[:1+r.checks.IntN(len(modelQueues))]
		var ks []string
		if r.checks.IntN(2) == 0 {
			ks = []string{modelKinds[r.checks.IntN(len(modelKinds))]}
		}
		later := m.now + r.checks.Int64N(5e9) // what a parked acquire would take then
		n, nLater := 0, 0
		for _, q := range qs {
			qn, qLater := 0, 0
			for _, j := range m.jobs {
				if j.State == JobQueued && j.Queue == q && (ks == nil || slices.Contains(ks, j.Kind)) {
					if j.NotBefore <= m.now {
						qn++
					}
					if j.NotBefore <= later {
						qLater++
					}
				}
			}
			if room := m.room(q); room >= 0 { // a grant takes no more than the queue's room
				qn, qLater = min(qn, room), min(qLater, room)
			}
			n, nLater = n+qn, nLater+qLater
		}
		if got := f.Ready(qs, ks); got != n {
			r.fail("Ready(%v, %v) = %d, want %d", qs, ks, got, n)
		}
		if got := f.ReadyAt(qs, ks, later); got != nLater {
			r.fail("ReadyAt(%v, %v, now+%s) = %d, want %d", qs, ks, time.Duration(later-m.now), got, nLater)
		}
		// A parked acquire must never sleep past a job's time: the next due
		// time may be early (a stale entry) but never late.
		next, waits := int64(0), false
		for _, j := range m.jobs {
			if j.State == JobQueued && j.NotBefore > later && (!waits || j.NotBefore < next) {
				next, waits = j.NotBefore, true
			}
		}
		if got, ok := f.NextDueAfter(later); waits && (!ok || got > next || got <= later) {
			r.fail("NextDueAfter(now+%s) = %d %t, want a time in (then, %d]", time.Duration(later-m.now), got, ok, next)
		}
	}

	r.compareQueues()
	// The leases the leader would time out, now and a little later.
	for _, at := range []int64{m.now, m.now + r.checks.Int64N(5e9)} {
		var want []uint64
		for _, j := range m.jobs {
			if l := m.live(j); l != nil && j.TimeoutMs > 0 && l.Revoke == RevokeNone &&
				l.GrantedAt+int64(j.TimeoutMs)*int64(time.Millisecond) <= at {
				want = append(want, l.Token)
			}
		}
		var got []uint64
		for _, ref := range f.TimedOut(at, 1<<20) {
			got = append(got, ref.Token)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			r.fail("TimedOut(now+%s) = %v, want %v", time.Duration(at-m.now), got, want)
		}
		// The leader must never sleep past a deadline: the next one may be
		// early (a stale entry) but never late.
		next, waits := int64(0), false
		for _, j := range m.jobs {
			if l := m.live(j); l != nil && j.TimeoutMs > 0 && l.Revoke == RevokeNone {
				if d := l.GrantedAt + int64(j.TimeoutMs)*int64(time.Millisecond); d > at && (!waits || d < next) {
					next, waits = d, true
				}
			}
		}
		if got, ok := f.NextTimeoutAfter(at); waits && (!ok || got > next || got <= at) {
			r.fail("NextTimeoutAfter(now+%s) = %d %t, want a time in (then, %d]", time.Duration(at-m.now), got, ok, next)
		}
	}

	// Every kept lease by token, fences, and some tokens no longer kept.
	for _, j := range m.jobs {
		for _, l := range j.Leases() {
			got, err := f.Lease(l.Token)
			if err != nil || !got.Lease.Equal(l) || got.JobID != j.ID {
				r.fail("Lease(%d) = %+v %v\n  want %+v", l.Token, got, err, l)
			}
		}
		fr := f.Fence(j.ID, 0)
		want := FenceResult{State: j.State}
		if l := m.live(j); l != nil {
			want.CurrentToken = l.Token
			if fr2 := f.Fence(j.ID, l.Token); !fr2.Current {
				r.fail("Fence(%s, %d) not current", j.ID, l.Token)
			}
		}
		if fr != want {
			r.fail("Fence(%s) = %+v, want %+v", j.ID, fr, want)
		}
	}
	if fr := f.Fence("nojob", 1); fr != (FenceResult{}) {
		r.fail("Fence of an unknown job: %+v", fr)
	}
	for range 5 {
		if l, ok := r.g.oldLease(); ok {
			j := m.job(l.job)
			if j == nil || m.leaseOf(j, l.token) == nil {
				if _, err := f.Lease(l.token); !errors.Is(err, ErrNotFound) {
					r.fail("Lease(%d) of a forgotten lease: %v", l.token, err)
				}
			}
		}
	}

	// The event log.
	var evs []Event
	for after := uint64(0); ; {
		page := f.Events(after, MaxPageSize)
		evs = append(evs, page.Events...)
		if len(page.Events) == 0 {
			break
		}
		after = page.Events[len(page.Events)-1].Seq
	}
	page := f.Events(0, 1)
	truncated := m.eventSeq > 0
	if len(m.events) > 0 {
		truncated = m.events[0].Seq > 1
	}
	if page.Truncated != truncated || page.LastSeq != m.eventSeq {
		r.fail("Events(0): truncated %t last %d, want %t %d", page.Truncated, page.LastSeq, truncated, m.eventSeq)
	}
	if !same(evs, m.events) {
		r.fail("event log differs\n  got  %.3000s\n  want %.3000s", canon(evs), canon(m.events))
	}
}

// compareQueues compares the queue listing and settings with the model's
// recount.
func (r *modelRun) compareQueues() {
	m, f := r.m, r.f
	later := m.now + r.checks.Int64N(5e9)
	want := map[string]*QueueInfo{}
	info := func(q string) *QueueInfo {
		if want[q] == nil {
			want[q] = &QueueInfo{Name: q, Jobs: map[JobState]int{}}
		}
		return want[q]
	}
	for _, j := range m.jobs {
		qi := info(j.Queue)
		qi.Jobs[j.State]++
		if m.live(j) != nil {
			qi.Running++
		}
		if j.State == JobQueued && j.NotBefore > later {
			qi.Scheduled++
		} else if j.State == JobQueued {
			qi.Ready++
			since := m.readySince(j)
			if qi.OldestReady == 0 || since < qi.OldestReady {
				qi.OldestReady = since
			}
		}
	}
	var settings []QueueSettings
	for q, qs := range m.queues {
		qi := info(q)
		qi.Paused, qi.MaxRunning = qs.Paused, qs.MaxRunning
		settings = append(settings, qs)
	}
	slices.SortFunc(settings, func(a, b QueueSettings) int { return strings.Compare(a.Queue, b.Queue) })
	if got := f.QueueSettingsOf(); !slices.Equal(got, settings) {
		r.fail("queue settings %+v, want %+v", got, settings)
	}
	var got []QueueInfo
	for after := ""; ; {
		page, more := f.Queues(after, 1+r.checks.IntN(3), later)
		got = append(got, page...)
		if !more {
			break
		}
		after = page[len(page)-1].Name
	}
	if len(got) != len(want) {
		r.fail("Queues lists %d queues, want %d: %+v", len(got), len(want), got)
	}
	for _, qi := range got {
		w := want[qi.Name]
		if w == nil || fmt.Sprintf("%+v", qi) != fmt.Sprintf("%+v", *w) {
			r.fail("Queues(now+%s): %+v\n  want %+v", time.Duration(later-m.now), qi, w)
		}
	}
}

// same compares every lease of the jobs in a result, not the first only
// (where a job's leases pointer leads reflect.DeepEqual), and not their
// room.
func TestSameComparesEveryLease(t *testing.T) {
	jobWith := func(room int, tokens ...uint64) Job {
		ls := make([]Lease, 0, room)
		for _, tok := range tokens {
			ls = append(ls, Lease{Token: tok, State: LeaseExpired})
		}
		var j Job
		j.SetLeases(ls)
		return j
	}
	a, b, roomier := jobWith(2, 1, 2), jobWith(2, 1, 3), jobWith(8, 1, 2)
	for _, v := range []struct{ x, y any }{
		{a, b},
		{SubmitResult{Job: a}, SubmitResult{Job: b}},
		{CancelResult{Job: a}, CancelResult{Job: b}},
		{AcquireResult{Grants: []Grant{{Job: a}}}, AcquireResult{Grants: []Grant{{Job: b}}}},
	} {
		if same(v.x, v.y) {
			t.Errorf("%T: jobs whose second leases differ are the same", v.x)
		}
		if canon(v.x) == canon(v.y) {
			t.Errorf("%T: jobs whose second leases differ print alike", v.x)
		}
	}
	if !same(a, roomier) || !same(SubmitResult{Job: a}, SubmitResult{Job: roomier}) {
		t.Error("jobs with the same leases in more room differ")
	}
	defer func() {
		if recover() == nil {
			t.Error("a result holding a job that leasesIn does not know was compared")
		}
	}()
	same([]Job{a}, []Job{b})
}
