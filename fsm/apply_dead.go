package fsm

import (
	"fmt"
	"slices"
	"strings"
)

// Dead letters. From cluster level 6 a job that may not run again by its
// own rules (a retryable failure out of attempts, a worker lost too often)
// ends dead with its last error, where before it ended reported or failed.
// The rule changes what an existing command does, so it switches on the
// level the replicated node table records (level), never on the build: a
// replica of any build applying the same log decides alike. Dead jobs are
// kept until purged (PurgeJobs) or retried (RetryJob): they wait in their
// own finish-ordered index, s.dead, never in the one Compact takes from.

// level is the cluster's level as the replicated node table records it:
// the lowest level recorded, 0 while none is (as snapVersionFor reads it).
func (s *state) level() uint8 {
	v := uint8(0)
	for _, n := range s.nodes {
		v = lowerLevel(v, n.Level)
	}
	return v
}

// lowerLevel is the lower of a lowest level so far (0: none yet) and a
// node's recorded level (0: not recorded).
func lowerLevel(v, l uint8) uint8 {
	if l != 0 && (v == 0 || l < v) {
		return l
	}
	return v
}

// exhausted ends a job that may not run again: out of attempts, or stopped
// by the poison limit. From level 6 the job ends dead with reason, a
// job.dead event is recorded and it returns true; below level 6 it changes
// nothing and returns false, and the caller keeps the old rule (reported,
// or failed for a poison job). The job's lease has ended already.
func (s *state) exhausted(j *Job, reason string) bool {
	if s.level() < codecV6 {
		return false
	}
	j.setReason(clipReason(reason))
	s.setState(j, JobDead)
	j.UpdatedAt, j.ModifyIndex = s.lastTime, s.lastIndex
	ev := Event{Type: EventJobDead, JobID: j.ID, Detail: j.Reason()}
	if l := j.lastLease(); l != nil {
		ev.Token, ev.WorkerID, ev.Ref = l.Token, l.WorkerID, l.Ref()
	}
	s.emit(ev)
	return true
}

// outOfAttempts is the reason a job out of attempts ends dead with: the
// count and the last report's message.
func outOfAttempts(j *Job, message string) string {
	return joinReason(fmt.Sprintf("out of attempts (%d of %d)", j.Attempts, j.MaxAttempts), message)
}

// maxReasonLen is how long a job's reason may be (what a snapshot reads).
const maxReasonLen = MaxMessageLen + 64

// clipReason bounds a reason built around a message.
func clipReason(r string) string {
	if len(r) <= maxReasonLen {
		return r
	}
	return strings.ToValidUTF8(r[:maxReasonLen], "")
}

func applyRetryJob(s *state, cmd Command) (any, error) {
	c := cmd.(*RetryJob)
	j := s.jobByID(c.JobID)
	if j == nil {
		return nil, fmt.Errorf("%w: job %s", ErrNotFound, c.JobID)
	}
	if j.State != JobDead {
		return nil, fmt.Errorf("%w: job %s is %s; only a dead job is retried", ErrNotDead, j.ID, j.State)
	}
	j = s.editJob(j.Seq)
	// A fresh attempt budget; the lease history stays (the next grant's
	// token is larger than every one in it, as always).
	wasTimed := j.timed()
	j.Attempts, j.Losses, j.NotBefore = 0, 0, 0
	j.setReason("")
	if wasTimed && !j.timed() {
		s.timed--
	}
	s.setState(j, JobQueued)
	j.UpdatedAt, j.ModifyIndex = s.lastTime, s.lastIndex
	s.emit(Event{Type: EventJobRetried, JobID: j.ID, Detail: joinReason("a fresh attempt budget", c.Reason)})
	return j.export(), nil
}

func applyPurgeJobs(s *state, cmd Command) (any, error) {
	c := cmd.(*PurgeJobs)
	var res PurgeResult
	// Each purge leaves the dead indexes by a binary search in each
	// (leaveDead), so a purge costs the jobs it removes, never the dead
	// jobs it keeps.
	purge := func(j *Job) {
		res.Purged = append(res.Purged, j.ID)
		s.leaveDead(j)
		s.removeJob(j)
	}
	if len(c.JobIDs) > 0 {
		for _, id := range c.JobIDs {
			j := s.jobByID(id)
			if j == nil || j.State != JobDead { // a job listed twice is gone the second time
				res.Skipped = append(res.Skipped, id)
				continue
			}
			purge(j)
		}
	} else {
		// Oldest death first, of the queue or of all: its index is in
		// finish order, so by age the candidates are a prefix of it.
		idx := &s.dead
		if c.Queue != "" {
			idx = s.deadBy[c.Queue] // nil: the queue has no dead job
		}
		before := s.lastTime - c.OlderThan
		for i := 0; idx != nil && i < len(idx.items); i++ {
			e := idx.items[i]
			if e.seq == 0 {
				continue // a tombstone: it counts for nothing
			}
			j := s.job(e.seq)
			if c.OlderThan > 0 && j.FinishedAt() >= before {
				break
			}
			if len(res.Purged) == int(c.Limit) {
				res.More = true
				break
			}
			// purge may tidy idx.items (the front and tombstones): go on
			// from the first entry after this one's finish seq.
			purge(j)
			if c.Queue != "" && s.deadBy[c.Queue] == nil {
				break
			}
			i, _ = slices.BinarySearchFunc(idx.items, e.fseq+1, func(e deadEntry, f uint64) int { return cmpU64(e.fseq, f) })
			i--
		}
		if idx != nil {
			idx.tidy() // tombstones passed before a job kept
		}
	}
	if len(res.Purged) > 0 {
		s.emit(Event{Type: EventJobsPurged, Detail: joinReason(fmt.Sprintf("%d dead jobs", len(res.Purged)), c.Reason)})
	}
	return res, nil
}
