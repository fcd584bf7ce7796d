package fsm

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Counts are what this replica applied since its process started: the
// commands by type, the events by type, and the reports by outcome. They
// are not replicated state: a restarted node counts from zero, as a
// Prometheus counter does, and two nodes that applied the same entries
// since they started count the same. For metrics.
type Counts struct {
	Commands map[CommandType]uint64
	Events   map[EventType]uint64
	Reports  map[Outcome]uint64
}

// counters are Counts as they are kept: one atomic per possible value,
// so an apply adds without allocating and a scrape reads without the
// state's lock.
type counters struct {
	commands [256]atomic.Uint64
	events   [256]atomic.Uint64
	reports  [256]atomic.Uint64
}

// count adds one applied command and the events it recorded, the last n
// of the state's event log.
func (c *counters) count(s *state, t CommandType, n int) {
	c.commands[t].Add(1)
	for i := max(s.events.len()-n, 0); i < s.events.len(); i++ {
		ev := s.events.at(i)
		c.events[ev.Type].Add(1)
		if ev.Type == EventLeaseReported {
			if o, ok := ParseOutcome(ev.Detail); ok {
				c.reports[o].Add(1)
			}
		}
	}
}

// Counts returns what this replica applied since it started; a type
// never applied is absent.
func (f *FSM) Counts() Counts {
	c := Counts{Commands: map[CommandType]uint64{}, Events: map[EventType]uint64{}, Reports: map[Outcome]uint64{}}
	for i := range f.counts.commands {
		if v := f.counts.commands[i].Load(); v > 0 {
			c.Commands[CommandType(i)] = v
		}
		if v := f.counts.events[i].Load(); v > 0 {
			c.Events[EventType(i)] = v
		}
		if v := f.counts.reports[i].Load(); v > 0 {
			c.Reports[Outcome(i)] = v
		}
	}
	return c
}

// String names the command type by its Go type, as in "SubmitJob".
func (t CommandType) String() string {
	commandNamesOnce.Do(func() {
		for t, f := range commandFactories {
			commandNames[t] = strings.TrimPrefix(fmt.Sprintf("%T", f()), "*fsm.")
		}
	})
	if name := commandNames[t]; name != "" {
		return name
	}
	return fmt.Sprintf("command(%d)", uint8(t))
}

// commandNames are the types' names, made once (String is on the apply
// path of the metrics).
var (
	commandNamesOnce sync.Once
	commandNames     [256]string
)

// JobStates lists every job state, in number order.
func JobStates() []JobState { return sortedKeys(jobStateNames) }

// Outcomes lists every report outcome, in number order.
func Outcomes() []Outcome { return sortedKeys(outcomeNames) }

func sortedKeys[K cmp.Ordered](names map[K]string) []K {
	keys := make([]K, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
