package fsm

import (
	"fmt"
	"sync"
)

// FSM is the lease state machine. It holds no clock, starts no goroutine and
// performs no I/O but the snapshot stream.
//
// Concurrency contract (the same as hashicorp/raft's FSM):
//   - Apply, Snapshot and Restore are called from one goroutine, never
//     concurrently with each other.
//   - Snapshot.WriteTo may run concurrently with Apply: it reads a frozen
//     copy-on-write view.
//   - Every query may run concurrently with everything; queries see the state
//     between two applies, never in the middle of one.
type FSM struct {
	mu       sync.RWMutex
	st       *state
	handlers map[CommandType]handler
	changed  chan struct{} // closed and replaced after every apply that emits events
	counts   counters      // what this replica applied since it started (counts.go)
	dec      decoder       // Apply's, under mu (decodeBody)
}

type handler func(s *state, c Command) (any, error)

// New returns an empty state machine.
func New() *FSM {
	f := &FSM{st: newState(), handlers: map[CommandType]handler{}, changed: make(chan struct{})}
	f.register(CmdRegisterWorker, applyRegisterWorker)
	f.register(CmdDeregisterWorker, applyDeregisterWorker)
	f.register(CmdSubmitJob, applySubmitJob)
	f.register(CmdAcquire, applyAcquire)
	f.register(CmdStart, applyStart)
	f.register(CmdReport, applyReport)
	f.register(CmdRelease, applyRelease)
	f.register(CmdCancel, applyCancel)
	f.register(CmdCancelSubmitter, applyCancelSubmitter)
	f.register(CmdExpire, applyExpire)
	f.register(CmdCompact, applyCompact)
	f.register(CmdRaiseTokenFloor, applyRaiseTokenFloor)
	f.register(CmdRecordEvent, applyRecordEvent)
	f.register(CmdSetNode, applySetNode)
	f.register(CmdRemoveNode, applyRemoveNode)
	f.register(CmdRecordEvents, applyRecordEvents)
	f.register(CmdAudit, applyAudit)
	f.register(CmdRemoveIdle, applyRemoveIdle)
	f.register(CmdRetryJob, applyRetryJob)
	f.register(CmdPurgeJobs, applyPurgeJobs)
	f.register(CmdSetQueue, applySetQueue)
	f.register(CmdTimeOut, applyTimeOut)
	f.register(CmdPutSchedule, applyPutSchedule)
	f.register(CmdDeleteSchedule, applyDeleteSchedule)
	f.register(CmdFireSchedule, applyFireSchedule)
	for t := range commandFactories {
		if f.handlers[t] == nil {
			panic(fmt.Sprintf("fsm: command type %d has no handler", t))
		}
	}
	return f
}

// register adds a handler; a second registration of one type panics.
func (f *FSM) register(t CommandType, h handler) {
	if _, dup := f.handlers[t]; dup {
		panic(fmt.Sprintf("fsm: handler for command type %d registered twice", t))
	}
	f.handlers[t] = h
}

// Apply decodes and applies the log entry at index. It returns the
// command's result (see results.go) or its error.
//
// Errors for which IsFatal is true (an undecodable entry, an index out of
// order) change nothing, and the caller must stop applying: a replica that
// skips an entry diverges. Every other error is a deterministic refusal:
// every replica refuses the same command the same way, and a refusal
// changes nothing but the last applied index and time and, where the rules
// say so, an event it records.
func (f *FSM) Apply(index uint64, data []byte) (any, error) {
	// The checksum is checked before the lock (readers need not wait for
	// it); the fields are read under it, for the state: the decoder reads
	// the names and ids the state holds, to share them rather than copy.
	body, err := checkedBody(data)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.st
	env, err := decodeBody(&f.dec, body, s)
	if err != nil {
		return nil, err
	}
	if index <= s.lastIndex {
		return nil, fmt.Errorf("%w: index %d is not after the last applied index %d", ErrOutOfOrder, index, s.lastIndex)
	}
	s.lastIndex = index
	// The state's clock never runs backwards, even when a new leader's clock
	// is behind the old one's: finish times and event times stay ordered.
	s.lastTime = max(s.lastTime, env.Time)
	s.promoteDue()
	events := s.eventSeq
	res, err := f.handlers[env.Command.Type()](s, env.Command)
	s.dropStaleTimeouts()
	s.settle()
	s.recycle()
	f.counts.count(s, env.Command.Type(), int(s.eventSeq-events))
	if s.eventSeq != events {
		close(f.changed)
		f.changed = make(chan struct{})
	}
	return res, err
}

// Changed returns a channel that is closed after the next apply that records
// an event (every change of a job or lease does). Long-polls wait on it.
func (f *FSM) Changed() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.changed
}

// LastIndex returns the raft index of the last applied command.
func (f *FSM) LastIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.lastIndex
}
