package fsm

// The state's size in bytes: an estimate of the memory every replica spends
// on it, counting the variable parts exactly (payloads, ids, refs, messages,
// details) and each record's fixed part by the overheads below. It is
// derived, like the indexes: kept current by every apply, rebuilt on
// restore, and checked against a full recount by check. The leader refuses
// submits past a quota on it (package cluster).
const (
	jobOverhead    = 256 // the Job, its map entries and its heap and shard slots
	leaseOverhead  = 128 // a Lease and its token and request index entries
	eventOverhead  = 96
	workerOverhead = 128
)

func jobBytes(j *Job) int64 {
	n := int64(jobOverhead + len(j.ID) + len(j.Queue) + len(j.Kind) + len(j.Submitter) + len(j.Payload) + len(j.Reason()))
	for i, ls := 0, j.Leases(); i < len(ls); i++ {
		l := &ls[i]
		n += int64(leaseOverhead + len(l.WorkerID) + len(l.RequestID) + len(l.ReportID()) + len(l.Ref()) + len(l.Message()))
	}
	return n
}

func eventBytes(ev *Event) int64 {
	return int64(eventOverhead + len(ev.JobID) + len(ev.WorkerID) + len(ev.Ref) + len(ev.Detail) + len(ev.Actor) + len(ev.Source))
}

// touch notes a job's size before this apply first changes it; settle
// adds the difference once the apply is done.
func (s *state) touch(seq uint64, before int64) {
	if _, seen := s.touched[seq]; !seen {
		s.touched[seq] = before
	}
}

// settle accounts for every job the apply changed, added or removed.
//
// A map keeps the room it once needed, and iterating it costs that room
// even when it is empty: after an apply that touched many jobs (a mass
// expiry, a compaction) the map is replaced, not cleared, so that the
// applies after it do not pay for it.
func (s *state) settle() {
	if len(s.touched) == 0 {
		return
	}
	for seq, before := range s.touched {
		var now int64
		if j := s.job(seq); j != nil {
			now = jobBytes(j)
		}
		s.bytes += now - before
	}
	if len(s.touched) > touchedKeep {
		s.touched = make(map[uint64]int64, touchedKeep)
		return
	}
	clear(s.touched)
}

// touchedKeep is the most jobs one apply may touch and still leave the map
// of touched jobs to be reused.
const touchedKeep = 64

// dropEvents forgets the n oldest events and their bytes.
func (s *state) dropEvents(n int) {
	n = min(n, s.events.len())
	for i := range n {
		ev := s.events.at(i)
		s.bytes -= eventBytes(ev)
		s.eventVersions[ev.Type.snapVersion()]--
	}
	s.events.drop(n)
}

// countEventVersions recounts the kept events by the snapshot version their
// type needs (restore, check).
func (s *state) countEventVersions() [snapVersion + 1]int {
	var c [snapVersion + 1]int
	for i := range s.events.len() {
		c[s.events.at(i).Type.snapVersion()]++
	}
	return c
}

// countBytes recounts the state's size from scratch (restore, check).
func (s *state) countBytes() int64 {
	var n int64
	eachJob(s.shards, func(j *Job) bool { n += jobBytes(j); return true })
	for i := range s.events.len() {
		n += eventBytes(s.events.at(i))
	}
	for _, sc := range s.schedules {
		n += scheduleBytes(sc)
	}
	return n
}

// sizeBytes is the state's size with its workers (each counted at its
// overhead and the longest id and version, so the sum costs nothing to
// keep).
func (s *state) sizeBytes() int64 {
	return s.bytes + int64(len(s.workers))*(workerOverhead+MaxIDLen+MaxVersionLen)
}
