package history

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// Recorder appends entries to a history: one JSON line per entry to its
// writer, written whole with a single Write as the entry happens (so a
// runner killed mid-run leaves every finished line behind), and a copy in
// memory for checking. It is safe for concurrent use; entries are
// numbered in the order they were appended.
//
// A failed write does not stop recording: the workload's timing matters
// more than the file, and the in-memory copy stays whole. The first write
// error is kept and returned by Err, which the runner checks at the end.
type Recorder struct {
	w   io.Writer
	now func() int64

	mu      sync.Mutex
	entries []Entry
	seq     int64
	lastOp  uint64
	pending map[uint64]pendingOp
	err     error
}

// pendingOp is an invoked op waiting for its complete.
type pendingOp struct {
	process string
	name    string
}

// NewRecorder returns a recorder writing to w; a nil w keeps the history
// in memory only.
func NewRecorder(w io.Writer) *Recorder {
	return &Recorder{w: w, now: Now, pending: make(map[uint64]pendingOp)}
}

// Invoke records that process is calling op with in, stamped now, and
// returns the op's id for Complete. Ids are unique within the recorder.
func (r *Recorder) Invoke(process, op string, in Input) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastOp++
	id := r.lastOp
	r.pending[id] = pendingOp{process: process, name: op}
	r.appendLocked(Entry{Kind: KindInvoke, Ns: r.now(), Process: process, Op: &Op{ID: id, Name: op, Input: &in}})
	return id
}

// Complete records how op id ended, stamped now. A fail needs the API's
// reason; an info may give one (TIMEOUT, OUTCOME_UNKNOWN, UNAVAILABLE).
func (r *Recorder) Complete(id uint64, status Status, reason string, out *Output) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pending[id]
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknownOp, id)
	}
	e := Entry{Kind: KindComplete, Ns: r.now(), Process: p.process,
		Op: &Op{ID: id, Name: p.name, Status: status, Reason: reason, Output: out}}
	if err := e.Validate(); err != nil {
		return err
	}
	delete(r.pending, id)
	r.appendLocked(e)
	return nil
}

// CompleteErr records op id's end from the error a client call returned,
// classified by Classify; out is kept only for a success.
func (r *Recorder) CompleteErr(id uint64, err error, out *Output) error {
	status, reason := Classify(err)
	if status != StatusOK {
		out = nil
	}
	return r.Complete(id, status, reason, out)
}

// Append records an entry of any kind but invoke and complete. A zero Ns
// is stamped now. The entry is validated first and refused, unrecorded,
// if it is not well formed.
func (r *Recorder) Append(e Entry) error {
	if e.Kind == KindInvoke || e.Kind == KindComplete {
		return fmt.Errorf("%w: %s", ErrNotAppendable, e.Kind)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Ns == 0 {
		e.Ns = r.now()
	}
	if err := e.Validate(); err != nil {
		return err
	}
	r.appendLocked(e)
	return nil
}

// appendLocked numbers e, keeps it and writes its line.
func (r *Recorder) appendLocked(e Entry) {
	r.seq++
	e.Seq = r.seq
	r.entries = append(r.entries, e)
	if r.w == nil {
		return
	}
	line, err := json.Marshal(e)
	if err == nil {
		_, err = r.w.Write(append(line, '\n'))
	}
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("history: writing entry %d: %w", e.Seq, err)
	}
}

// Entries returns a copy of everything recorded so far, in order. The
// payloads are shared with the recorder: treat them as read-only.
func (r *Recorder) Entries() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Entry, len(r.entries))
	copy(out, r.entries)
	return out
}

// Pending returns how many invoked ops have not completed. At the end of a
// run they are unknown outcomes; the checkers treat them as info.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// Err returns the first write error, if any.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
