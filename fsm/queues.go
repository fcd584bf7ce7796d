package fsm

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Queues. A queue exists while it holds a job; its settings (paused, a
// limit on its live leases) are a small replicated table set by SetQueue,
// kept for a queue with or without jobs. Acquire skips a paused queue and a
// queue whose live leases reach its limit; the readiness counts the
// leader's parked acquires wait on (Ready, ReadyAt) apply the same rule, so
// a parked acquire is woken by the apply that frees a slot (a resume, a
// raised limit, a lease ending), which records an event as every such
// change does.
//
// The per-queue counts (jobs by state, scheduled jobs, live leases) and the
// order in which ready jobs became ready are derived indexes, kept step by
// step on every state change and lease change and rebuilt on restore: a
// grant checks the limit in O(1) and listing queues never scans the jobs.

// SetQueue changes a queue's settings. Only the settings it names change:
// pausing a queue keeps its limit. Only codec version 6 carries it.
type SetQueue struct {
	Queue         string
	SetPaused     bool // Paused is the new value
	Paused        bool
	SetMaxRunning bool // MaxRunning is the new value
	MaxRunning    uint32
}

// Bounds on queue settings.
const (
	// MaxQueueSettings bounds the queues with settings other than the
	// defaults (not paused, no limit); a queue set back to the defaults
	// leaves the table.
	MaxQueueSettings = 1024
	// MaxQueueLimit bounds a queue's max running.
	MaxQueueLimit = 1_000_000
)

// QueueSettings are one queue's replicated settings.
type QueueSettings struct {
	Queue  string
	Paused bool
	// MaxRunning bounds the queue's live leases; 0: no limit.
	MaxRunning uint32
}

func (*SetQueue) Type() CommandType { return CmdSetQueue }

func (c *SetQueue) Validate() error {
	if err := checkName("queue", c.Queue); err != nil {
		return err
	}
	if !c.SetPaused && !c.SetMaxRunning {
		return invalid("queue", "change at least one setting (paused or max running)")
	}
	if c.Paused && !c.SetPaused {
		return invalid("paused", "given without set_paused")
	}
	if c.MaxRunning != 0 && !c.SetMaxRunning {
		return invalid("max_running", "given without set_max_running")
	}
	return checkRange("max_running", uint64(c.MaxRunning), 0, MaxQueueLimit)
}

// SetQueue's flags byte.
const (
	queueSetPaused = 1 << iota
	queuePaused
	queueSetMax
)

func (c *SetQueue) encode(e *encoder) {
	var flags uint8
	if c.SetPaused {
		flags |= queueSetPaused
	}
	if c.Paused {
		flags |= queuePaused
	}
	if c.SetMaxRunning {
		flags |= queueSetMax
	}
	e.str(c.Queue)
	e.byte1(flags)
	e.uvarint(uint64(c.MaxRunning))
}

func (c *SetQueue) decode(d *decoder) {
	c.Queue = d.str(MaxNameLen)
	flags := d.byte1()
	if flags&^(queueSetPaused|queuePaused|queueSetMax) != 0 {
		d.fail("set queue: flags %#x", flags)
	}
	c.SetPaused, c.Paused, c.SetMaxRunning = flags&queueSetPaused != 0, flags&queuePaused != 0, flags&queueSetMax != 0
	c.MaxRunning = d.u32()
}

func (c *SetQueue) codecVersion() byte { return codecV6 }

func init() { registerCommand(func() Command { return new(SetQueue) }) }

// applySetQueue changes what the command names. A change records an event
// per setting changed; a command that changes nothing records nothing.
func applySetQueue(s *state, cmd Command) (any, error) {
	c := cmd.(*SetQueue)
	old, had := s.queueSettings[c.Queue]
	cur := old
	cur.Queue = c.Queue
	if c.SetPaused {
		cur.Paused = c.Paused
	}
	if c.SetMaxRunning {
		cur.MaxRunning = c.MaxRunning
	}
	if cur.Paused == old.Paused && cur.MaxRunning == old.MaxRunning {
		return cur, nil
	}
	if !had && len(s.queueSettings) >= MaxQueueSettings {
		return nil, fmt.Errorf("%w: %d queues have settings; set some back to the defaults (resume, no limit) first",
			ErrTooLarge, len(s.queueSettings))
	}
	cur.Queue = s.intern(c.Queue)
	if !cur.Paused && cur.MaxRunning == 0 {
		delete(s.queueSettings, c.Queue)
	} else {
		s.queueSettings[cur.Queue] = cur
	}
	if cur.Paused != old.Paused {
		ev := EventQueueResumed
		if cur.Paused {
			ev = EventQueuePaused
		}
		s.emit(Event{Type: ev, Detail: cur.Queue})
	}
	if cur.MaxRunning != old.MaxRunning {
		s.emit(Event{Type: EventQueueLimited, Detail: limitDetail(cur.Queue, cur.MaxRunning)})
	}
	return cur, nil
}

func limitDetail(queue string, max uint32) string {
	if max == 0 {
		return queue + ": no limit"
	}
	return fmt.Sprintf("%s: max running %d", queue, max)
}

// --- the per-queue counts ---

// queueCounts is what the state keeps per queue that holds a job. The entry
// goes when the queue's last job is compacted.
type queueCounts struct {
	jobs      [queueStates]int // the queue's jobs per state, as state.counts
	total     int              // the queue's jobs
	scheduled int              // its queued jobs waiting in the delayed heap
	leases    int              // live leases on its jobs: what its limit bounds
	// since orders the queue's ready jobs by when they became ready
	// (readySince, then seq): a heap whose top is the oldest ready job.
	// Removal is lazy, as in jobHeap; readyLeft keeps the top live.
	since []readyItem
}

// queueStates is room for every job state (numbers are small and append
// only); the line after it fails to compile if state.counts outgrows it.
const queueStates = 16

var _ [queueStates - len(state{}.counts)]struct{}

type readyItem struct {
	at  int64 // readySince of the job
	seq uint64
}

func (a readyItem) before(b readyItem) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (a readyItem) compare(b readyItem) int {
	if c := cmp.Compare(a.at, b.at); c != 0 {
		return c
	}
	return cmpU64(a.seq, b.seq)
}

// readySince is when a ready job became ready, as queue lists show it (and
// as the leader's queue wait metric reads it from Grant.ReadySince): when
// it entered the queue, or its NotBefore when it waited for it there. A job
// enters the queue by a command that sets its UpdatedAt (a submit, the end
// of its lease, a retry of a dead job), and nothing changes UpdatedAt or
// NotBefore while it stays queued, so both are replicated and fixed while
// the job is ready. (Not the end of its last lease: a dead job retried
// became ready at the retry, not when it died.)
func readySince(j *Job) int64 {
	return max(j.UpdatedAt, j.NotBefore)
}

// queueOf returns the queue's counts, creating them.
func (s *state) queueOf(q string) *queueCounts {
	qc := s.queues[q]
	if qc == nil {
		qc = &queueCounts{}
		s.queues[q] = qc
	}
	return qc
}

// jobEntered counts a job new to the state (insertJob, restore).
func (s *state) jobEntered(j *Job) {
	qc := s.queueOf(j.Queue)
	qc.total++
	qc.jobs[j.State]++
}

// jobRemoved uncounts a job leaving the state, dropping an empty queue.
func (s *state) jobRemoved(j *Job) {
	qc := s.queues[j.Queue]
	qc.total--
	qc.jobs[j.State]--
	if qc.total == 0 {
		delete(s.queues, j.Queue)
	}
}

// readyEntered records that a job of the queue became ready.
func (qc *queueCounts) readyEntered(j *Job) {
	qc.since = append(qc.since, readyItem{at: readySince(j), seq: j.Seq})
	siftUp(qc.since, len(qc.since)-1)
}

// readyLeft records that a ready job of the queue left it (its state
// already says so): stale entries at the top are dropped, so the top is
// always the oldest ready job, and the rest once they outnumber the live
// ones (the queue's ready jobs), as in jobHeap.
func (s *state) readyLeft(qc *queueCounts) {
	h := qc.since
	for len(h) > 0 && !s.readyEntry(h[0]) {
		n := len(h) - 1
		h[0] = h[n]
		h = h[:n]
		siftDown(h, 0)
	}
	live := qc.jobs[JobQueued] - qc.scheduled
	if stale := len(h) - live; stale > 64 && stale > live {
		h = slices.DeleteFunc(h, func(it readyItem) bool { return !s.readyEntry(it) })
		slices.SortFunc(h, readyItem.compare) // a sorted slice is a valid heap
	}
	// A queue drained by grants keeps its jobs (leased) but not the room
	// its ready order needed: that would cost every live lease 16 bytes.
	if c := cap(h); c > 64 && len(h) < c/4 {
		h = slices.Clone(h)
	}
	qc.since = h
}

// readyEntry says whether an entry names a ready job.
func (s *state) readyEntry(it readyItem) bool {
	j := s.job(it.seq)
	return j != nil && j.State == JobQueued && !s.delayedJob(j) && readySince(j) == it.at
}

// oldestReady returns when the queue's oldest ready job became ready: the
// top entry, which readyLeft keeps live.
func (s *state) oldestReady(qc *queueCounts) (int64, bool) {
	if len(qc.since) > 0 && s.readyEntry(qc.since[0]) {
		return qc.since[0].at, true
	}
	return 0, false
}

// queueRoom returns how many more leases a grant may take from the queue:
// bounded is false when nothing bounds it, room is 0 while it is paused or
// its live leases reach its limit.
func (s *state) queueRoom(q string) (room int, bounded bool) {
	qs, ok := s.queueSettings[q]
	switch {
	case !ok:
		return 0, false
	case qs.Paused:
		return 0, true
	case qs.MaxRunning == 0:
		return 0, false
	}
	live := 0
	if qc := s.queues[q]; qc != nil {
		live = qc.leases
	}
	return max(int(qs.MaxRunning)-live, 0), true
}

// queueOpen says whether a grant may take a job from the queue now.
func (s *state) queueOpen(q string) bool {
	if len(s.queueSettings) == 0 {
		return true
	}
	room, bounded := s.queueRoom(q)
	return !bounded || room > 0
}

// capReady bounds a count of ready jobs of the queue by its room.
func (s *state) capReady(q string, n int) int {
	if len(s.queueSettings) == 0 {
		return n
	}
	if room, bounded := s.queueRoom(q); bounded {
		return min(n, room)
	}
	return n
}

// --- queries ---

// QueueInfo is one queue as listed: its depth by state, its settings, and
// its oldest ready job.
type QueueInfo struct {
	Name string
	// Jobs counts the queue's kept jobs by state; JobQueued includes the
	// scheduled ones.
	Jobs      map[JobState]int
	Ready     int // queued and due at the time asked
	Scheduled int // queued, not due at the time asked
	Running   int // live leases (acquired or running jobs): what MaxRunning bounds
	// OldestReady is when the queue's oldest ready job became ready (its
	// submit time, the end of its previous lease, or its due time), leader
	// time in unix nanoseconds; 0 when none is ready.
	OldestReady int64
	Paused      bool
	MaxRunning  uint32
}

// MaxQueuePage bounds one page of Queues.
const MaxQueuePage = 1000

// Queues lists the queues that hold a job or have settings, by name, after
// the name after, at most limit (0 or more than MaxQueuePage: MaxQueuePage).
// now splits queued jobs into ready and scheduled as of the caller's clock,
// as the job list does. more says whether queues follow the page.
func (f *FSM) Queues(after string, limit int, now int64) (out []QueueInfo, more bool) {
	if limit <= 0 || limit > MaxQueuePage {
		limit = MaxQueuePage
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.st
	// The first limit names after the cursor, without sorting every queue:
	// a page costs O(queues × log(limit)) and limit names of memory.
	names := make([]string, 0, min(limit, len(s.queues)+len(s.queueSettings)))
	keep := func(q string) {
		if q <= after || len(names) == limit && q >= names[limit-1] {
			if q > after {
				more = true
			}
			return
		}
		i, _ := slices.BinarySearch(names, q)
		if len(names) == limit {
			names, more = names[:limit-1], true
		}
		names = slices.Insert(names, i, q)
	}
	for q := range s.queues {
		keep(q)
	}
	for q := range s.queueSettings {
		if _, ok := s.queues[q]; !ok {
			keep(q)
		}
	}
	due := s.dueByQueue(now)
	for _, q := range names {
		qi := QueueInfo{Name: q, Jobs: map[JobState]int{}}
		if qs, ok := s.queueSettings[q]; ok {
			qi.Paused, qi.MaxRunning = qs.Paused, qs.MaxRunning
		}
		if qc := s.queues[q]; qc != nil {
			for st, n := range qc.jobs {
				if n > 0 {
					qi.Jobs[JobState(st)] = n
				}
			}
			qi.Running = qc.leases
			qi.Scheduled = qc.scheduled - due[q].n
			qi.Ready = qc.jobs[JobQueued] - qi.Scheduled
			if at, ok := s.oldestReady(qc); ok {
				qi.OldestReady = at
			}
			// A job due by now but not yet promoted became ready at its
			// NotBefore, perhaps before every job already ready.
			if d := due[q]; d.n > 0 && (qi.OldestReady == 0 || d.first < qi.OldestReady) {
				qi.OldestReady = d.first
			}
		}
		out = append(out, qi)
	}
	return out, more
}

type dueCount struct {
	n     int
	first int64
}

// dueByQueue counts, per queue, the jobs of the delayed heap due by now
// (which the next apply promotes), and the earliest due time.
func (s *state) dueByQueue(now int64) map[string]dueCount {
	out := map[string]dueCount{}
	s.eachDue(now, func(j *Job, at int64) {
		d := out[j.Queue]
		if d.n == 0 || at < d.first {
			d.first = at
		}
		d.n++
		out[j.Queue] = d
	})
	return out
}

// QueueSettingsOf returns every queue's settings that are not the defaults,
// by name.
func (f *FSM) QueueSettingsOf() []QueueSettings {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]QueueSettings, 0, len(f.st.queueSettings))
	for _, qs := range f.st.queueSettings {
		out = append(out, qs)
	}
	slices.SortFunc(out, func(a, b QueueSettings) int { return strings.Compare(a.Queue, b.Queue) })
	return out
}

// --- snapshot records ---

func encodeQueueSettings(e *encoder, qs *QueueSettings) {
	e.str(qs.Queue)
	e.bool(qs.Paused)
	e.uvarint(uint64(qs.MaxRunning))
}

func decodeQueueSettings(d *decoder, qs *QueueSettings) {
	qs.Queue = d.str(MaxNameLen)
	qs.Paused = d.bool()
	qs.MaxRunning = d.u32()
	if d.err == nil {
		if checkName("queue", qs.Queue) != nil || qs.MaxRunning > MaxQueueLimit || !qs.Paused && qs.MaxRunning == 0 {
			d.fail("queue %q: bad name, limit above %d, or default settings stored", qs.Queue, MaxQueueLimit)
		}
	}
}
