package fsm

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// CheckInvariants verifies the whole state and every derived index against
// each other:
//
//   - tokens: per job strictly increasing, none above the counter, none
//     granted twice in the cluster;
//   - at most one live lease per job, and a job is acquired or running
//     exactly when its newest lease is live;
//   - capacity: no worker holds more live leases than its capacity;
//   - references: live leases name registered workers; every index (ids,
//     tokens, ready queues, submitters, finish order, request ids, counts)
//     agrees with the jobs; events are consecutive and ordered in time;
//   - clocks: no time (of a job, lease, worker, node, schedule or event) is
//     negative or after the state's time (a schedule's LastSlot neither, nor
//     before its creation), and no raft index (of a job or event) is
//     after the state's index, so nothing in the state claims a moment the
//     state has not reached.
//
// It is O(state) and meant for tests (which call it after every step) and
// for restore, which refuses a snapshot that fails it.
func (f *FSM) CheckInvariants() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.check()
}

func (s *state) check() error {
	var errs []error
	fail := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	if n := s.countBytes(); n != s.bytes {
		fail("size %d bytes, recounted %d", s.bytes, n)
	}
	if c := s.countEventVersions(); c != s.eventVersions {
		fail("events counted by snapshot version %v, recounted %v", s.eventVersions, c)
	}
	if len(s.touched) != 0 {
		fail("%d jobs touched outside an apply", len(s.touched))
	}
	var counts [JobDead + 1]int
	var jobs, leases, live, queuedWithSubmitter, terminal, delayed, timed int
	perRequest := map[requestKey]int{}     // kept leases of each acquire
	heapWant := map[*jobHeap]int{}         // queued jobs each heap must hold
	queueWant := map[string]*queueCounts{} // recounted per queue; since: its ready jobs
	inDelayed := make(map[delayedItem]bool, len(s.delayed.items))
	for i, it := range s.delayed.items {
		inDelayed[it] = true
		if i > 0 && it.before(s.delayed.items[(i-1)/2]) {
			fail("delayed heap: entry %d before its parent", i)
		}
	}
	liveTimeouts := 0
	for i, it := range s.timeouts.items {
		if i > 0 && it.before(s.timeouts.items[(i-1)/2]) {
			fail("timeout heap: entry %d before its parent", i)
		}
		if j, l, ok := s.timing(it); ok {
			liveTimeouts++
			if it.at != l.GrantedAt+j.Timeout() {
				fail("timeout heap: lease %d due at %d, its deadline is %d", l.Token, it.at, l.GrantedAt+j.Timeout())
			}
		}
	}
	var withTimeout, timing int
	ids := make([]idEntry, 0, s.jobIDs.len())
	prevSeq := uint64(0)
	inTime := func(t int64) bool { return t >= 0 && t <= s.lastTime }
	if s.lastTime < 0 {
		fail("state time %d is negative", s.lastTime)
	}

	for i, sh := range s.shards {
		if i > 0 && sh.num <= s.shards[i-1].num {
			fail("shard %d after shard %d", sh.num, s.shards[i-1].num)
		}
		n := 0
		for k, j := range sh.jobs {
			if j == nil {
				continue
			}
			n++
			if want := sh.num<<shardBits | uint64(k); j.Seq != want {
				fail("job %s: seq %d stored in slot of seq %d", j.ID, j.Seq, want)
			}
		}
		if n != sh.n || n == 0 {
			fail("shard %d: count %d, holds %d", sh.num, sh.n, n)
		}
	}

	eachJob(s.shards, func(j *Job) bool {
		if j.Seq <= prevSeq || j.Seq > s.jobSeq {
			fail("job %s: seq %d out of order (previous %d, counter %d)", j.ID, j.Seq, prevSeq, s.jobSeq)
		}
		prevSeq = j.Seq
		jobs++
		ids = append(ids, s.jobIDs.entry(j.ID, j.Seq))
		if _, ok := jobStateNames[j.State]; !ok {
			fail("job %s: state %d", j.ID, j.State)
			return true
		}
		counts[j.State]++
		qw := queueWant[j.Queue]
		if qw == nil {
			qw = &queueCounts{}
			queueWant[j.Queue] = qw
		}
		qw.total++
		qw.jobs[j.State]++
		if _, ok := j.CurrentLease(); ok {
			qw.leases++
		}
		if j.State == JobQueued && s.delayedJob(j) {
			qw.scheduled++
		} else if j.State == JobQueued {
			qw.since = append(qw.since, readyItem{at: readySince(j), seq: j.Seq})
		}
		if !inTime(j.SubmittedAt) || !inTime(j.UpdatedAt) || !inTime(j.FinishedAt()) ||
			j.CreateIndex > j.ModifyIndex || j.ModifyIndex > s.lastIndex {
			fail("job %s: times %d/%d/%d, indexes %d/%d: beyond the state's time %d or index %d",
				j.ID, j.SubmittedAt, j.UpdatedAt, j.FinishedAt(), j.CreateIndex, j.ModifyIndex, s.lastTime, s.lastIndex)
		}
		if j.Attempts > j.MaxAttempts || j.Losses > j.MaxWorkerLosses && j.OnWorkerLost == LostRequeue {
			fail("job %s: attempts %d/%d, losses %d/%d", j.ID, j.Attempts, j.MaxAttempts, j.Losses, j.MaxWorkerLosses)
		}
		var prevTok uint64
		ls := j.Leases()
		for i := range ls {
			l := &ls[i]
			leases++
			if l.Token <= prevTok {
				fail("job %s: token %d after %d (I1)", j.ID, l.Token, prevTok)
			}
			prevTok = l.Token
			if !inTime(l.GrantedAt) || !inTime(l.StartedAt) || !inTime(l.EndedAt) {
				fail("lease %d: times %d/%d/%d beyond the state's time %d", l.Token, l.GrantedAt, l.StartedAt, l.EndedAt, s.lastTime)
			}
			if l.Token > s.lastToken {
				fail("job %s: token %d above the counter %d", j.ID, l.Token, s.lastToken)
			}
			if seq, _ := s.tokens.find(l.Token); seq != j.Seq {
				fail("token %d: index says job seq %d, held by %s (seq %d): granted twice?", l.Token, seq, j.ID, j.Seq)
			}
			if _, ok := leaseStateNames[l.State]; !ok {
				fail("lease %d: state %d", l.Token, l.State)
			}
			if _, ok := revokeNames[l.Revoke]; !ok {
				fail("lease %d: revoke %d", l.Token, l.Revoke)
			}
			if (l.Revoke == RevokeTimeout || l.Outcome == OutcomeTimedOut) && j.TimeoutMs == 0 {
				fail("lease %d: timed out, its job %s has no timeout", l.Token, j.ID)
			}
			if l.State == LeaseActive && i != len(ls)-1 {
				fail("job %s: lease %d is live but not the newest (I2)", j.ID, l.Token)
			}
			if l.State == LeaseReported {
				_, okOutcome := outcomeNames[l.Outcome]
				_, okAnswer := jobStateNames[l.Answer]
				if !okOutcome || !okAnswer || l.ReportID() == "" {
					fail("lease %d: reported without outcome, answer or report id", l.Token)
				}
			}
			key := requestKey{l.WorkerID, l.RequestID}
			if got, ok := s.requests[key]; !ok || !got.holds(l.Token) {
				fail("lease %d: missing from the request index", l.Token)
			}
			perRequest[key]++
		}
		cur, isLive := j.CurrentLease()
		if isLive != j.State.Leased() {
			fail("job %s: state %s but live lease %t (I2)", j.ID, j.State, isLive)
		}
		if isLive {
			live++
			if _, ok := s.workers[cur.WorkerID]; !ok {
				fail("job %s: live lease %d held by unknown worker %s", j.ID, cur.Token, cur.WorkerID)
			}
			if seq, _ := s.workerLeases[cur.WorkerID].seq(cur.Token); seq != j.Seq {
				fail("job %s: live lease %d missing from worker %s's index", j.ID, cur.Token, cur.WorkerID)
			}
		}
		if j.State.Terminal() != (j.FinishSeq() != 0) || j.FinishSeq() > s.finishSeq {
			fail("job %s: state %s with finish seq %d (counter %d)", j.ID, j.State, j.FinishSeq(), s.finishSeq)
		}
		if j.State.Terminal() && j.State != JobDead {
			terminal++
		}
		if j.timed() {
			timed++
		}
		if j.TimeoutMs > 0 {
			withTimeout++
			if isLive && cur.Revoke == RevokeNone {
				timing++
			}
		}
		if (&SubmitJob{TimeoutMs: j.TimeoutMs}).checkTimeout() != nil {
			fail("job %s: timeout %d ms", j.ID, j.TimeoutMs)
		}
		if j.NotBefore < 0 || j.Retry.validate() != nil {
			fail("job %s: not before %d, retry policy %+v", j.ID, j.NotBefore, j.Retry)
		}
		switch {
		case j.State == JobQueued && s.delayedJob(j):
			delayed++
			if !inDelayed[delayedItem{at: j.NotBefore, seq: j.Seq}] {
				fail("job %s: queued until %d but not in the delayed heap", j.ID, j.NotBefore)
			}
		case j.State == JobQueued:
			if h := s.ready[j.Queue][j.Kind]; h == nil {
				fail("job %s: queued but its ready queue %s/%s is missing", j.ID, j.Queue, j.Kind)
			} else {
				heapWant[h]++
			}
		}
		if j.State == JobQueued {
			if j.Submitter != "" {
				queuedWithSubmitter++
				if h := s.submitted[j.Submitter]; h == nil {
					fail("job %s: queued but submitter %s has no heap", j.ID, j.Submitter)
				} else {
					heapWant[h]++
				}
			}
		}
		return true
	})

	// Every job's id must lead to it: find's answer for each, worked out in
	// the table's order (ids.go).
	s.jobIDs.verify(ids, s, func(seq, found uint64) {
		fail("job %s: id index says seq %d, job has %d", s.idOf(seq), found, seq)
	})
	if s.jobIDs.len() != jobs {
		fail("id index has %d entries for %d jobs", s.jobIDs.len(), jobs)
	}
	if counts != s.counts {
		fail("state counts %v, recomputed %v", s.counts, counts)
	}
	if s.tokens.len() != leases {
		fail("token index has %d entries for %d kept leases (a token granted twice?)", s.tokens.len(), leases)
	}
	dead := 0
	for i, e := range s.tokens.pairs {
		if i > 0 && e.token <= s.tokens.pairs[i-1].token {
			fail("token index: %d after %d", e.token, s.tokens.pairs[i-1].token)
		}
		if e.seq == 0 {
			dead++
		}
	}
	if dead != s.tokens.dead {
		fail("token index: %d pairs of leases not kept, counted %d", dead, s.tokens.dead)
	}
	for key, rt := range s.requests {
		switch {
		case int(rt.span) >= MaxAcquireBatch || rt.first == 0:
			fail("request %q of worker %q: tokens %d and %d after: more than one acquire grants",
				key.request, key.worker, rt.first, rt.span)
		case int(rt.kept) != perRequest[key]:
			fail("request %q of worker %q: %d leases kept, its entry counts %d", key.request, key.worker,
				perRequest[key], rt.kept)
		}
	}
	if len(perRequest) != len(s.requests) {
		fail("request index has %d acquires, the kept leases %d", len(s.requests), len(perRequest))
	}

	workerLive := 0
	for w, set := range s.workerLeases {
		workerLive += len(set)
		wk, ok := s.workers[w]
		if !ok {
			fail("worker index names unknown worker %s", w)
			continue
		}
		if len(set) > int(wk.Capacity) {
			fail("worker %s holds %d leases, capacity %d", w, len(set), wk.Capacity)
		}
		if len(set) == 0 {
			fail("worker %s has an empty lease set", w)
		}
	}
	if workerLive != live {
		fail("worker index has %d live leases, jobs have %d", workerLive, live)
	}
	if len(s.nodes) > MaxNodes {
		fail("%d nodes, bound %d", len(s.nodes), MaxNodes)
	}
	for id, n := range s.nodes {
		if n.ID != id || !inTime(n.UpdatedAt) {
			fail("node %s stored under %s, updated at %d", n.ID, id, n.UpdatedAt)
		}
	}
	for id, w := range s.workers {
		if w.ID != id || w.Capacity == 0 || !inTime(w.RegisteredAt) || !inTime(w.UpdatedAt) {
			fail("worker %s: id %q capacity %d times %d/%d", id, w.ID, w.Capacity, w.RegisteredAt, w.UpdatedAt)
		}
	}
	// A schedule is created at its command's time, changed at later ones,
	// and settled from its creation through a slot no later than the
	// command that fired it, or through the time a restore settled it
	// (which that restore made the state's). Its counters count commands.
	if len(s.schedules) > MaxSchedules {
		fail("%d schedules, bound %d", len(s.schedules), MaxSchedules)
	}
	for name, sc := range s.schedules {
		if sc.Name != name || !inTime(sc.CreatedAt) || !inTime(sc.UpdatedAt) || sc.UpdatedAt < sc.CreatedAt ||
			sc.LastSlot < sc.CreatedAt || sc.LastSlot > s.lastTime || sc.Fired >= MaxIndex || sc.Skipped >= MaxIndex {
			fail("schedule %s stored under %s: created %d, updated %d, settled through %d, %d fired, %d skipped (state time %d)",
				sc.Name, name, sc.CreatedAt, sc.UpdatedAt, sc.LastSlot, sc.Fired, sc.Skipped, s.lastTime)
		}
	}

	// A heap holds each of its queued jobs at least once (a job that left
	// and came back may be listed twice), no queued job of another heap,
	// and counts them in live. A heap without queued jobs is dropped.
	// in says whether a job is one the heap holds: queued, and for a ready
	// heap due as well.
	//
	// The jobs held are told apart by sorting their seqs, not by a map: a
	// restore checks a million of them, and a map of that size costs
	// several times the sort (BenchmarkRestore1M).
	var heldSeqs []uint64
	checkHeap := func(name string, h *jobHeap, in func(j *Job) bool, belongs func(j *Job, it heapItem) bool) int {
		heldSeqs = heldSeqs[:0]
		for _, it := range h.items {
			if j := s.job(it.seq); j != nil && in(j) {
				if !belongs(j, it) {
					fail("%s lists job %s, which belongs elsewhere", name, j.ID)
				}
				heldSeqs = append(heldSeqs, it.seq)
			}
		}
		slices.Sort(heldSeqs)
		distinct := len(slices.Compact(heldSeqs))
		if distinct != h.live || h.live != heapWant[h] || h.live == 0 {
			fail("%s: live %d, holds %d queued jobs, %d belong to it", name, h.live, distinct, heapWant[h])
		}
		return h.live
	}
	readyLive, submitterLive := 0, 0
	for q, kinds := range s.ready {
		for k, h := range kinds {
			readyLive += checkHeap("ready queue "+q+"/"+k, h, func(j *Job) bool { return j.State == JobQueued && !s.delayedJob(j) }, func(j *Job, it heapItem) bool {
				return j.Queue == q && j.Kind == k && it.prio == j.Priority
			})
		}
	}
	for sub, h := range s.submitted {
		submitterLive += checkHeap("submitter "+sub, h, func(j *Job) bool { return j.State == JobQueued }, func(j *Job, it heapItem) bool {
			return j.Submitter == sub && it.prio == 0
		})
	}
	s.checkSpares(fail)
	if readyLive+delayed != counts[JobQueued] || submitterLive != queuedWithSubmitter {
		fail("ready queues hold %d and the delayed heap %d of %d queued jobs, submitter heaps %d of %d",
			readyLive, delayed, counts[JobQueued], submitterLive, queuedWithSubmitter)
	}
	if s.timed != timed {
		fail("%d jobs counted as timed, %d are", s.timed, timed)
	}
	if s.withTimeout != withTimeout {
		fail("%d jobs counted with a timeout, %d have one", s.withTimeout, withTimeout)
	}
	if s.timeouts.live != timing || liveTimeouts != timing {
		fail("timeout heap: live %d, holds %d, %d leases can time out", s.timeouts.live, liveTimeouts, timing)
	}
	if s.delayed.live != delayed {
		fail("delayed heap: live %d, %d queued jobs wait in it", s.delayed.live, delayed)
	}

	s.checkQueues(queueWant, fail)

	if len(s.finished) != terminal || s.dead.live != counts[JobDead] {
		fail("finish order lists %d jobs, %d are terminal and not dead; dead index %d, %d dead",
			len(s.finished), terminal, s.dead.live, counts[JobDead])
	}
	// Compaction takes a prefix of the finish order by time, a purge by
	// age one of the dead index: finish times must not decrease along them.
	var prevFin uint64
	var prevAt int64
	for _, seq := range s.finished {
		j := s.job(seq)
		if j == nil || !j.State.Terminal() || j.State == JobDead ||
			j.FinishSeq() <= prevFin || j.FinishedAt() < prevAt || j.FinishedAt() > s.lastTime {
			fail("finish order: seq %d is not a job of it in finish order and time", seq)
			break
		}
		prevFin, prevAt = j.FinishSeq(), j.FinishedAt()
	}
	s.checkDead(counts[JobDead], fail)

	if s.events.len() > MaxEvents {
		fail("%d events kept, bound %d", s.events.len(), MaxEvents)
	}
	for i := range s.events.len() {
		ev := s.events.at(i)
		if _, ok := eventTypeNames[ev.Type]; !ok {
			fail("event %d: type %d", ev.Seq, ev.Type)
		}
		if prev := s.events.at(max(i-1, 0)); i > 0 && (ev.Seq != prev.Seq+1 || ev.Time < prev.Time || ev.Index < prev.Index) {
			fail("event %d follows %d: seqs must be consecutive, times and indexes ordered", ev.Seq, prev.Seq)
		}
	}
	if n := s.events.len(); n > 0 && (s.events.at(0).Time < 0 || s.events.at(n-1).Index > s.lastIndex) {
		fail("events from time %d to index %d: beyond the state's index %d", s.events.at(0).Time, s.events.at(n-1).Index, s.lastIndex)
	}
	if n := s.events.len(); n > 0 && (s.events.at(n-1).Seq != s.eventSeq || s.events.at(n-1).Time > s.lastTime) {
		fail("newest event %d at %d, counter %d, state time %d", s.events.at(n-1).Seq, s.events.at(n-1).Time, s.eventSeq, s.lastTime)
	}
	return errors.Join(errs...)
}

// checkQueues checks the per-queue counts against the recount from the jobs,
// each queue's ready order (a heap whose top is live, holding every ready
// job at its readySince), and the settings table.
func (s *state) checkQueues(want map[string]*queueCounts, fail func(string, ...any)) {
	if len(s.queues) != len(want) {
		fail("%d queues counted, %d hold jobs", len(s.queues), len(want))
	}
	for q, w := range want {
		qc := s.queues[q]
		if qc == nil {
			fail("queue %s holds jobs but is not counted", q)
			continue
		}
		if qc.jobs != w.jobs || qc.total != w.total || qc.scheduled != w.scheduled || qc.leases != w.leases {
			fail("queue %s: jobs %v total %d scheduled %d leases %d, recounted %v %d %d %d",
				q, qc.jobs, qc.total, qc.scheduled, qc.leases, w.jobs, w.total, w.scheduled, w.leases)
		}
		for i, it := range qc.since {
			if i > 0 && it.before(qc.since[(i-1)/2]) {
				fail("queue %s: ready order entry %d before its parent", q, i)
			}
		}
		// Every ready job is in the ready order (which may also hold stale
		// entries): both sorted by seq, then time, and walked together. A
		// map of the order's entries would cost several times the sort at
		// a million jobs. Seq first, not the queue's own order (time first),
		// because w.since comes in seq order: its sort then costs nothing
		// (BenchmarkRestore1M: the check 0.8-1.1 s, against 1.1-1.2 s
		// sorting both by readyItem.compare).
		held := slices.Clone(qc.since)
		bySeq := func(a, b readyItem) int {
			if c := cmp.Compare(a.seq, b.seq); c != 0 {
				return c
			}
			return cmp.Compare(a.at, b.at)
		}
		slices.SortFunc(held, bySeq)
		slices.SortFunc(w.since, bySeq) // in seq order already: a sort's check
		k := 0
		for _, it := range w.since {
			for k < len(held) && bySeq(held[k], it) < 0 {
				k++
			}
			if k == len(held) || held[k] != it {
				fail("queue %s: ready job seq %d (since %d) missing from its ready order", q, it.seq, it.at)
			}
		}
		if len(w.since) > 0 && (len(qc.since) == 0 || !s.readyEntry(qc.since[0])) {
			fail("queue %s: %d ready jobs but the top of its ready order is stale", q, len(w.since))
		}
	}
	if len(s.queueSettings) > MaxQueueSettings {
		fail("%d queues with settings, bound %d", len(s.queueSettings), MaxQueueSettings)
	}
	for q, qs := range s.queueSettings {
		if qs.Queue != q || checkName("queue", q) != nil || qs.MaxRunning > MaxQueueLimit || !qs.Paused && qs.MaxRunning == 0 {
			fail("queue settings %+v stored under %q", qs, q)
		}
	}
}

// checkDead checks the dead indexes: each in finish order and time, its
// live entries the dead jobs (of its queue) with their finish seqs, its
// tombstones not at the front and not outnumbering the live entries by
// more than the slack tidy allows.
func (s *state) checkDead(dead int, fail func(string, ...any)) {
	check := func(name, queue string, d *deadIndex) int {
		var prevFin uint64
		var prevAt int64
		live := 0
		for _, e := range d.items {
			if e.fseq <= prevFin {
				fail("%s: finish seq %d after %d", name, e.fseq, prevFin)
				break
			}
			prevFin = e.fseq
			if e.seq == 0 {
				continue
			}
			live++
			j := s.job(e.seq)
			if j == nil || j.State != JobDead || j.FinishSeq() != e.fseq || queue != "" && j.Queue != queue ||
				j.FinishedAt() < prevAt || j.FinishedAt() > s.lastTime {
				fail("%s: seq %d is not a dead job of it in finish order and time", name, e.seq)
				break
			}
			prevAt = j.FinishedAt()
		}
		if live != d.live || len(d.items) > 0 && d.items[0].seq == 0 || len(d.items)-live > max(64, live) {
			fail("%s: %d entries, %d live (counted %d)", name, len(d.items), live, d.live)
		}
		return live
	}
	check("dead index", "", &s.dead)
	n := 0
	for q, d := range s.deadBy {
		if d.live == 0 {
			fail("dead index of queue %s is empty", q)
		}
		n += check("dead index of queue "+q, q, d)
	}
	if n != dead {
		fail("the queues' dead indexes list %d jobs, %d are dead", n, dead)
	}
}

// checkSpares checks the spare heaps and table of kinds (spare.go): empty,
// within their bounds, and none of them in use by an index.
func (s *state) checkSpares(fail func(string, ...any)) {
	sp := &s.spare
	if len(sp.emptied) != 0 || sp.emptiedKinds != nil {
		fail("spares: %d heaps and %t table of kinds emptied by an apply not yet recycled", len(sp.emptied), sp.emptiedKinds != nil)
	}
	if len(sp.heaps) > spareHeaps {
		fail("spares: %d heaps, at most %d", len(sp.heaps), spareHeaps)
	}
	inUse := map[*jobHeap]bool{}
	for _, kinds := range s.ready {
		for _, h := range kinds {
			inUse[h] = true
		}
	}
	for _, h := range s.submitted {
		inUse[h] = true
	}
	for i, h := range sp.heaps {
		if h.live != 0 || len(h.items) != 0 || cap(h.items) > spareHeapItems || inUse[h] || slices.Index(sp.heaps, h) != i {
			fail("spare heap %d: live %d, %d entries (room %d), in use %t", i, h.live, len(h.items), cap(h.items), inUse[h])
		}
	}
	if len(sp.kinds) != 0 {
		fail("spare table of kinds holds %d", len(sp.kinds))
	}
	for q := range sp.wide {
		if _, ok := s.ready[q]; !ok {
			fail("spares: queue %s noted wide without ready heaps", q)
		}
	}
	for q, kinds := range s.ready {
		if _, wide := sp.wide[q]; len(kinds) > spareKindsMost && !wide {
			fail("spares: queue %s has %d kinds but is not noted wide", q, len(kinds))
		}
	}
}
