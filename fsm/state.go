package fsm

import (
	"math"
	"slices"
	"unsafe"
)

// Jobs live in shards of shardSize consecutive sequence numbers. A shard is
// the unit of copy-on-write: taking a snapshot freezes the current shards
// (by bumping state.gen) and the first later change to a frozen shard copies
// that shard's pointer array, and the first change to a frozen job copies the
// job. The snapshot keeps reading the frozen versions while applies go on.
// Once every snapshot that froze a version is released, nothing reads it
// but the state, and changes are made in place again.
const (
	shardBits = 10
	shardSize = 1 << shardBits
	shardMask = shardSize - 1
)

type jobShard struct {
	num uint64 // shard number: seq >> shardBits
	gen uint64
	n   int // occupied slots
	// own has bit i set when jobs[i] is a version made in generation gen,
	// which no snapshot reads (a snapshot freezes only older generations):
	// a change may mutate it in place. The bits are cleared whenever the
	// shard moves to a newer generation.
	own  [shardSize / 64]uint64
	jobs [shardSize]*Job
}

// owns says whether slot i holds a version of the shard's generation.
func (sh *jobShard) owns(i uint64) bool { return sh.own[i>>6]&(1<<(i&63)) != 0 }

// claim marks slot i as holding a version of the shard's generation.
func (sh *jobShard) claim(i uint64) { sh.own[i>>6] |= 1 << (i & 63) }

// state is everything the state machine holds. Fields above the line are
// replicated (they are what a snapshot stores); the indexes below are
// derived from them and rebuilt on restore.
type state struct {
	gen uint64 // copy-on-write generation; a snapshot increments it
	// frozen holds the generation each unreleased snapshot froze, in the
	// order taken (so ascending): a version of generation g is read by a
	// snapshot while g <= the last of them.
	frozen []uint64

	lastIndex uint64 // raft index of the last applied command
	lastTime  int64  // leader time of the last applied command
	lastToken uint64 // highest token granted, or the floor; the next grant is lastToken+1
	jobSeq    uint64 // last job seq assigned
	finishSeq uint64 // last finish seq assigned
	eventSeq  uint64 // last event seq assigned
	// shards holds the non-empty shards by ascending number. Usually they are
	// consecutive; a long-lived job amid compacted ones leaves gaps, which
	// cost nothing.
	shards []*jobShard
	// workers holds its records by value, in the map's own tables (large
	// arrays), not as a 56-byte object each: those were made as workers
	// registered, amid the API's garbage of that size class, and each
	// kept its span in use (docs/performance-history.md, "What each
	// change bought").
	workers map[string]Worker
	nodes   map[string]*Node // values are replaced, never mutated
	events  eventLog         // oldest first, seqs consecutive
	// queueSettings holds the queues whose settings are not the defaults
	// (queues.go); values are replaced, never mutated.
	queueSettings map[string]QueueSettings
	// schedules by name (schedule.go); values are replaced, never mutated
	schedules map[string]*Schedule

	// --- derived indexes ---
	jobIDs       idIndex                        // job id -> seq (ids.go)
	tokens       tokenIndex                     // token of every kept lease -> job seq (ids.go)
	ready        map[string]map[string]*jobHeap // queue -> kind -> queued jobs
	queues       map[string]*queueCounts        // queue -> its counts, while it holds a job (queues.go)
	workerLeases map[string]leaseSet            // worker -> its live leases (leaseset.go)
	delayed      delayedHeap                    // queued jobs not yet due, by NotBefore (delayed.go)
	timeouts     timeoutHeap                    // live leases with a timeout, by deadline (timeouts.go)
	retries      map[RetryPolicy]*RetryPolicy   // one copy of each retry policy in use
	submitted    map[string]*jobHeap            // submitter -> its queued jobs, oldest first
	finished     []uint64                       // seqs of terminal jobs but dead ones in finish order: what Compact takes
	dead         deadIndex                      // dead jobs in finish order: what PurgeJobs takes (deadindex.go)
	deadBy       map[string]*deadIndex          // queue -> its dead jobs, while it has one
	requests     map[requestKey]requestTokens   // worker and request id -> the tokens it granted
	interned     map[string]string
	counts       [JobDead + 1]int // jobs per state
	timed        int              // jobs with a NotBefore or a retry policy: a snapshot of them is version 5
	withTimeout  int              // jobs with a timeout: a snapshot of them is version 6
	// eventVersions counts the kept events by the snapshot version their
	// type needs (EventType.snapVersion): a snapshot keeping one of them is
	// written in at least that version.
	eventVersions [snapVersion + 1]int
	bytes         int64            // jobs' and events' size (size.go)
	touched       map[uint64]int64 // during an apply: seq -> size before it changed
	spare         spares           // emptied heaps and tables of kinds, for reuse (spare.go)
}

func newState() *state {
	return &state{
		workers:       map[string]Worker{},
		nodes:         map[string]*Node{},
		schedules:     map[string]*Schedule{},
		jobIDs:        newIDIndex(),
		ready:         map[string]map[string]*jobHeap{},
		queues:        map[string]*queueCounts{},
		queueSettings: map[string]QueueSettings{},
		workerLeases:  map[string]leaseSet{},
		submitted:     map[string]*jobHeap{},
		deadBy:        map[string]*deadIndex{},
		retries:       map[RetryPolicy]*RetryPolicy{},
		requests:      map[requestKey]requestTokens{},
		interned:      map[string]string{},
		touched:       map[uint64]int64{},
	}
}

// intern returns one shared copy of a frequently repeated string (queue,
// kind, submitter, worker id), so a million jobs do not hold a million
// copies of "default".
// The table is only a memory saving, so when it reaches maxInterned it is
// simply cleared: names that come and go cannot grow it without bound.
func (s *state) intern(v string) string {
	if c, ok := s.interned[v]; ok {
		return c
	}
	if len(s.interned) >= maxInterned {
		clear(s.interned)
	}
	s.interned[v] = v
	return v
}

const maxInterned = 4096

// shardIndex returns the position of shard number n in s.shards, or where
// it would be inserted.
func (s *state) shardIndex(n uint64) (int, bool) {
	if len(s.shards) == 0 {
		return 0, false
	}
	// Fast path: no gaps below n.
	if d := n - s.shards[0].num; n >= s.shards[0].num && d < uint64(len(s.shards)) && s.shards[d].num == n {
		return int(d), true
	}
	return slices.BinarySearchFunc(s.shards, n, func(sh *jobShard, n uint64) int { return cmpU64(sh.num, n) })
}

func (s *state) shard(seq uint64) *jobShard {
	if i, ok := s.shardIndex(seq >> shardBits); ok {
		return s.shards[i]
	}
	return nil
}

// job returns the job with this seq, or nil. The result must not be mutated:
// use editJob.
func (s *state) job(seq uint64) *Job {
	if sh := s.shard(seq); sh != nil {
		return sh.jobs[seq&shardMask]
	}
	return nil
}

func (s *state) jobByID(id string) *Job {
	if seq, ok := s.jobIDs.find(id, s); ok {
		return s.job(seq)
	}
	return nil
}

// idOf is the id of a kept job, "" for a seq not kept: what the id index
// compares.
func (s *state) idOf(seq uint64) string {
	if j := s.job(seq); j != nil {
		return j.ID
	}
	return ""
}

// mutableShard returns the shard holding seq, copied first if a snapshot
// still reads it, creating it if create is set.
func (s *state) mutableShard(seq uint64, create bool) *jobShard {
	n := seq >> shardBits
	i, ok := s.shardIndex(n)
	switch {
	case !ok && create:
		// Seqs only grow, so a new shard always goes last.
		sh := &jobShard{num: n, gen: s.gen}
		s.shards = slices.Insert(s.shards, i, sh)
		return sh
	case !ok:
		return nil
	}
	sh := s.shards[i]
	if sh.gen != s.gen {
		if s.shared(sh.gen) {
			c := *sh
			sh = &c
			s.shards[i] = sh
		}
		// Its jobs are versions of older generations now.
		sh.gen, sh.own = s.gen, [shardSize / 64]uint64{}
	}
	return sh
}

// shared says whether a snapshot not yet released reads the versions of
// generation gen: whether a change must copy them first.
func (s *state) shared(gen uint64) bool {
	return len(s.frozen) > 0 && gen <= s.frozen[len(s.frozen)-1]
}

// editJob returns a version of the job that may be mutated in place. A
// version the current generation does not own is copied first while any
// snapshot is held: it may be one a snapshot reads. (Which one is not
// known without a generation in every job, so a version made after the
// last snapshot but before the current generation is copied needlessly;
// that takes a snapshot released while an older one is still held.)
func (s *state) editJob(seq uint64) *Job {
	sh := s.mutableShard(seq, false)
	i := seq & shardMask
	j := sh.jobs[i]
	s.touch(seq, jobBytes(j))
	if !sh.owns(i) {
		if len(s.frozen) > 0 {
			j = j.clone()
			sh.jobs[i] = j
		}
		sh.claim(i)
	}
	return j
}

// insertJob stores a new job under its seq.
func (s *state) insertJob(j *Job) {
	s.touch(j.Seq, 0)
	sh := s.mutableShard(j.Seq, true)
	sh.jobs[j.Seq&shardMask] = j
	sh.claim(j.Seq & shardMask)
	sh.n++
	s.jobIDs.set(j.ID, j.Seq, s)
	s.counts[j.State]++
	s.jobEntered(j)
	if j.timed() {
		s.timed++
	}
	if j.TimeoutMs > 0 {
		s.withTimeout++
	}
}

// removeJob deletes a job and every index entry that names it.
func (s *state) removeJob(j *Job) {
	s.touch(j.Seq, jobBytes(j))
	s.jobIDs.remove(j.ID, s) // before the job goes: the index reads its id
	sh := s.mutableShard(j.Seq, false)
	sh.jobs[j.Seq&shardMask] = nil
	sh.n--
	if sh.n == 0 {
		i, _ := s.shardIndex(sh.num)
		s.shards = slices.Delete(s.shards, i, i+1)
	}
	for i, ls := 0, j.Leases(); i < len(ls); i++ {
		s.forgetLease(&ls[i])
	}
	s.counts[j.State]--
	s.jobRemoved(j)
	if j.timed() {
		s.timed--
	}
	if j.TimeoutMs > 0 {
		s.withTimeout--
	}
}

// forgetLease removes a lease that is no longer kept from the token and
// request indexes.
func (s *state) forgetLease(l *Lease) {
	s.tokens.remove(l.Token)
	key := requestKey{l.WorkerID, l.RequestID}
	if rt, ok := s.requests[key]; ok && rt.holds(l.Token) {
		if rt.kept <= 1 {
			delete(s.requests, key)
		} else {
			rt.kept--
			s.requests[key] = rt
		}
	}
}

// requestKey names an acquire: its worker and request id.
type requestKey struct{ worker, request string }

// requestTokens is an acquire's entry in the request index. One acquire's
// grants take consecutive tokens, at most MaxAcquireBatch of them, so the
// entry is the first token, how far the last is past it, and how many of
// its leases are still kept: 16 bytes in the map's slot, where a list of
// the tokens was a slice header there and an array of its own (80 bytes
// for ten grants) among the state's small objects.
type requestTokens struct {
	first uint64
	span  uint16 // last token - first: below MaxAcquireBatch, which the state's check holds to
	kept  uint16 // its leases still kept, at least 1
}

// last is the acquire's last token.
func (rt requestTokens) last() uint64 { return rt.first + uint64(rt.span) }

// holds says whether tok is among the acquire's tokens.
func (rt requestTokens) holds(tok uint64) bool { return tok >= rt.first && tok <= rt.last() }

// with adds a kept lease of token tok to the entry (a restore's, one
// lease at a time). A span past what one acquire grants is kept as at
// most MaxUint16, which the state's check refuses.
func (rt requestTokens) with(tok uint64) requestTokens {
	if rt.kept == 0 {
		return requestTokens{first: tok, kept: 1}
	}
	lo, hi := min(rt.first, tok), max(rt.last(), tok)
	rt.first, rt.span = lo, uint16(min(hi-lo, math.MaxUint16))
	rt.kept = uint16(min(int(rt.kept)+1, math.MaxUint16))
	return rt
}

// eachJob calls fn for every job in seq order until fn returns false.
func eachJob(shards []*jobShard, fn func(*Job) bool) {
	for _, sh := range shards {
		for _, j := range sh.jobs {
			if j != nil && !fn(j) {
				return
			}
		}
	}
}

// --- the ready queues ---

// enterQueue adds a job that just became queued to its submitter's heap,
// and to its ready heap, or the delayed heap until its NotBefore.
func (s *state) enterQueue(j *Job) {
	if j.Submitter != "" {
		sh := s.submitted[j.Submitter]
		if sh == nil {
			sh = s.newHeap()
			s.submitted[j.Submitter] = sh
		}
		sh.entered(heapItem{seq: j.Seq})
	}
	if s.delayedJob(j) {
		s.delayed.push(delayedItem{at: j.NotBefore, seq: j.Seq})
		s.queues[j.Queue].scheduled++
		return
	}
	s.enterReady(j)
}

// enterReady adds a queued job that is due to its ready heap, creating it
// as needed.
func (s *state) enterReady(j *Job) {
	kinds := s.ready[j.Queue]
	if kinds == nil {
		kinds = s.newKinds()
		s.ready[j.Queue] = kinds
	}
	h := kinds[j.Kind]
	if h == nil {
		h = s.newHeap()
		kinds[j.Kind] = h
		s.kindAdded(j.Queue, len(kinds))
	}
	h.entered(heapItem{prio: j.Priority, seq: j.Seq})
	s.queues[j.Queue].readyEntered(j)
}

// leaveQueue records that a job left the queued state (its State already
// says so), dropping heaps that no longer hold a queued job.
func (s *state) leaveQueue(j *Job) {
	qc := s.queues[j.Queue]
	if s.delayedJob(j) {
		s.delayed.left(func(it delayedItem) bool { _, ok := s.waiting(it); return ok }) // its entry is stale now
		qc.scheduled--
	} else if kinds := s.ready[j.Queue]; kinds[j.Kind] != nil {
		h := kinds[j.Kind]
		h.left(s.isReady)
		if h.live == 0 {
			delete(kinds, j.Kind)
			s.heapEmptied(h)
			if len(kinds) == 0 {
				delete(s.ready, j.Queue)
				s.kindsEmptied(j.Queue, kinds)
			}
		}
		s.readyLeft(qc)
	}
	if sh := s.submitted[j.Submitter]; j.Submitter != "" && sh != nil {
		sh.left(s.isQueued)
		if sh.live == 0 {
			delete(s.submitted, j.Submitter)
			s.heapEmptied(sh)
		}
	}
}

func (s *state) isQueued(seq uint64) bool {
	j := s.job(seq)
	return j != nil && j.State == JobQueued
}

// isReady says whether a ready heap's entry names a job in it: queued and
// due. A job queued again with a backoff waits in the delayed heap, so an
// entry left from its earlier wait must not count.
func (s *state) isReady(seq uint64) bool {
	j := s.job(seq)
	return j != nil && j.State == JobQueued && !s.delayedJob(j)
}

// setState moves a job to a new state and keeps the ready queues, the
// submitter index, the finish order and the counts in step. Every state
// change goes through here.
func (s *state) setState(j *Job, to JobState) {
	from := j.State
	if from == to {
		return
	}
	s.counts[from]--
	s.counts[to]++
	qc := s.queues[j.Queue]
	qc.jobs[from]--
	qc.jobs[to]++
	j.State = to
	if from == JobQueued {
		s.leaveQueue(j)
	}
	if to == JobQueued {
		// It enters the queue now: the command's time is when it became
		// ready (readySince), which the ready order reads on entry. Every
		// caller stamps the same time afterwards too.
		j.UpdatedAt = s.lastTime
		s.enterQueue(j)
	}
	if from == JobDead { // retried: only a dead job ever leaves a terminal state
		s.leaveDead(j)
		j.setEnd(0, 0, j.Reason())
	}
	if to.Terminal() {
		s.finishSeq++
		j.setEnd(s.lastTime, s.finishSeq, j.Reason())
		if to == JobDead {
			s.enterDead(j)
		} else {
			s.finished = append(s.finished, j.Seq)
		}
	}
}

// --- leases ---

// liveLease returns the job's active lease, if its token is tok.
func liveLease(j *Job, tok uint64) *Lease {
	if l := j.lastLease(); l != nil && l.Token == tok && l.State == LeaseActive {
		return l
	}
	return nil
}

// endLease closes the job's live lease and drops it from the worker index.
func (s *state) endLease(j *Job, how LeaseState) *Lease {
	l := j.lastLease()
	s.timeoutStops(j, l)
	l.State = how
	l.EndedAt = s.lastTime
	s.dropLease(l.WorkerID, l.Token)
	s.queues[j.Queue].leases--
	return l
}

// addLease appends a new live lease to the job, keeping at most
// MaxLeaseHistory. room is how many live leases its worker is about to hold
// (holdLease). The caller records its token in the request index.
func (s *state) addLease(j *Job, l Lease, room int) {
	ls := j.Leases()
	if len(ls) >= MaxLeaseHistory {
		s.forgetLease(&ls[0])
		ls = append(ls[:0], ls[1:]...)
	}
	j.SetLeases(append(ls, l))
	s.tokens.add(l.Token, j.Seq)
	s.timeoutStarts(j, &l)
	s.holdLease(l.WorkerID, l.Token, j.Seq, room)
	s.queues[j.Queue].leases++
}

// --- events ---

func (s *state) emit(ev Event) {
	s.eventSeq++
	ev.Seq = s.eventSeq
	ev.Index = s.lastIndex
	ev.Time = s.lastTime
	if s.events.len() >= MaxEvents {
		s.dropEvents(s.events.len() - MaxEvents + 1)
	}
	s.bytes += eventBytes(&ev)
	s.eventVersions[ev.Type.snapVersion()]++
	s.events.push(ev)
}

// rebuildIndexes derives every index from the replicated fields. Used by
// restore; the result must answer as what applying the log built does. A
// request's entry may differ in form: once an acquire's first lease is
// forgotten, the applied entry still starts at its token, the rebuilt one
// at the lowest kept; both hold the same kept leases.
func (s *state) rebuildIndexes() {
	s.bytes = s.countBytes()
	s.eventVersions = s.countEventVersions()
	type fin struct{ fseq, seq uint64 }
	var finished, dead []fin
	var tokens []leaseEntry
	njobs := 0
	for _, sh := range s.shards {
		njobs += sh.n
	}
	ids := make([]idEntry, 0, njobs)  // the id index is built at once, after the loop
	var queue, kind, submitter string // the job before's, interned
	eachJob(s.shards, func(j *Job) bool {
		// Jobs in a row mostly share their queue, kind and submitter: the
		// table is asked only when a name changes.
		if j.Queue != queue {
			queue = s.intern(j.Queue)
		}
		if j.Kind != kind {
			kind = s.intern(j.Kind)
		}
		if j.Submitter != submitter {
			submitter = s.intern(j.Submitter)
		}
		j.Queue, j.Kind, j.Submitter = queue, kind, submitter
		j.Retry = s.internRetry(j.Retry)
		ids = append(ids, s.jobIDs.entry(j.ID, j.Seq))
		s.counts[j.State]++
		s.jobEntered(j)
		if j.timed() {
			s.timed++
		}
		if j.TimeoutMs > 0 {
			s.withTimeout++
		}
		for i, ls := 0, j.Leases(); i < len(ls); i++ {
			l := &ls[i]
			l.WorkerID = s.intern(l.WorkerID)
			tokens = append(tokens, leaseEntry{token: l.Token, seq: j.Seq})
			key := requestKey{l.WorkerID, l.RequestID}
			s.requests[key] = s.requests[key].with(l.Token)
		}
		if l, ok := j.CurrentLease(); ok {
			s.holdLease(l.WorkerID, l.Token, j.Seq, 1)
			s.queues[j.Queue].leases++
			if l.Revoke == RevokeNone {
				s.timeoutStarts(j, &l)
			}
		}
		switch {
		case j.State == JobQueued:
			s.enterQueue(j)
		case j.State == JobDead:
			dead = append(dead, fin{j.FinishSeq(), j.Seq})
		case j.State.Terminal():
			finished = append(finished, fin{j.FinishSeq(), j.Seq})
		}
		return true
	})
	s.tokens = restoredTokens(tokens)
	s.jobIDs.build(ids, s)
	// The worker index grew by appending: keep it at its exact size, as
	// the applies that built it did.
	for w, ls := range s.workerLeases {
		s.workerLeases[w] = slices.Clone(ls)
	}
	inOrder := func(list []fin) []uint64 {
		slices.SortFunc(list, func(a, b fin) int { return cmpU64(a.fseq, b.fseq) })
		out := make([]uint64, len(list))
		for i, f := range list {
			out[i] = f.seq
		}
		return out
	}
	s.finished = inOrder(finished)
	for _, seq := range inOrder(dead) {
		s.enterDead(s.job(seq))
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// held returns the state's own copy of the string p of the field f
// (keptQueue, keptKind, keptSubmitter, keptWorker or heldJob), if it
// holds one. It only reads: nothing is interned.
func (s *state) held(f int, p []byte) (string, bool) {
	switch f {
	case keptWorker:
		if w, ok := s.workers[string(p)]; ok {
			return w.ID, true
		}
	case keptQueue, keptKind, keptSubmitter:
		if v, ok := s.interned[string(p)]; ok {
			return v, true
		}
	case heldJob:
		// The id index only hashes and compares what it is asked for, so
		// the bytes are read in place: a job id longer than the 32 bytes a
		// conversion may keep on the stack allocates nothing either.
		if len(p) == 0 {
			break
		}
		if j := s.jobByID(unsafe.String(&p[0], len(p))); j != nil {
			return j.ID, true
		}
	}
	return "", false
}
