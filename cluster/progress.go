package cluster

import (
	"sync"
	"time"

	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport/rules"
)

// ProgressNote is a handler's short word on its job, sent with a heartbeat
// for one of the leases the beat names.
type ProgressNote struct {
	Token uint64
	Note  string // empty clears the lease's note
}

// Progress is the latest note of a job's live lease, as the leader heard it.
type Progress struct {
	Note  string
	Heard time.Time // the leader's wall clock when the beat arrived
}

// progressTable is the leader's memory of the latest progress note of each
// live lease, by job (a job has at most one live lease). It belongs to one
// term's leaderState, so leadership lost drops it whole: notes are never
// replicated, and a new leader starts with none.
//
// A note enters only for a lease the beat's answer found live and held by
// the worker that sent it (after the quorum check), so an entry is never
// made for a stale token; one whose lease has since ended is dropped by the
// next sweep, and never shown (get asks for the job's current token). So
// the entries are bounded by the live leases plus the leases ended since
// the last sweep.
type progressTable struct {
	mu    sync.Mutex
	notes map[string]progressEntry
}

type progressEntry struct {
	token uint64
	Progress
}

// hear records the note of a lease confirmed live: it replaces the job's
// note, an empty one clears it.
func (t *progressTable) hear(jobID string, token uint64, note string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if note == "" {
		delete(t.notes, jobID)
		return
	}
	if t.notes == nil {
		t.notes = map[string]progressEntry{}
	}
	t.notes[jobID] = progressEntry{token: token, Progress: Progress{Note: note, Heard: at}}
}

// get returns the note of the job's lease token, if the table holds one.
func (t *progressTable) get(jobID string, token uint64) (Progress, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.notes[jobID]
	if !ok || e.token != token {
		return Progress{}, false
	}
	return e.Progress, true
}

// sweep drops the notes of leases that are no longer live.
func (t *progressTable) sweep(live func(jobID string, token uint64) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, e := range t.notes {
		if !live(id, e.token) {
			delete(t.notes, id)
		}
	}
}

func (t *progressTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.notes)
}

// validateNotes checks a beat's notes against the leases it names: each
// for a named lease, at most one per lease, its text within
// rules.MaxProgressLen bytes of UTF-8 without control characters but tab
// and newline.
func validateNotes(held []fsm.LeaseRef, notes []ProgressNote) error {
	if len(notes) == 0 {
		return nil
	}
	if len(notes) > len(held) {
		return rules.Invalid("notes", "%d notes for %d leases: at most one per lease", len(notes), len(held))
	}
	named := make(map[uint64]bool, len(held))
	for _, l := range held {
		named[l.Token] = true
	}
	seen := make(map[uint64]bool, len(notes))
	for _, n := range notes {
		if err := rules.CheckText("notes.note", n.Note, rules.MaxProgressLen); err != nil {
			return err
		}
		if seen[n.Token] {
			return rules.Invalid("notes.token", "lease %d has two notes", n.Token)
		}
		seen[n.Token] = true
		if !named[n.Token] {
			return rules.Invalid("notes.token", "lease %d is not named in the heartbeat's leases", n.Token)
		}
	}
	return nil
}

// Progress returns the note of the job's live lease token, when this node
// is the established leader and heard one this term; a follower, or a
// leader that heard none, has none.
func (n *Node) Progress(jobID string, token uint64) (Progress, bool) {
	ls, err := n.established()
	if err != nil || token == 0 {
		return Progress{}, false
	}
	return ls.progress.get(jobID, token)
}

// sweepProgress drops the notes of leases that ended.
func (n *Node) sweepProgress(ls *leaderState) {
	ls.progress.sweep(func(jobID string, token uint64) bool {
		l, err := n.fsm.Lease(token)
		return err == nil && l.JobID == jobID && l.State == fsm.LeaseActive
	})
}
