package netem

import (
	"math/rand/v2"
	"sync"
	"time"
)

// DefaultRTO is how long a "lost" chunk is held back: what a TCP sender
// waits before it retransmits a lost segment (Linux's minimum RTO).
const DefaultRTO = 200 * time.Millisecond

// Shaping is what happens to the bytes of one link: each chunk waits
// Delay plus up to Jitter, and with probability Loss is lost and so waits
// a retransmission timeout more. Order is kept, as TCP keeps it.
type Shaping struct {
	Delay  time.Duration
	Jitter time.Duration
	Loss   float64
}

type linkKey struct{ from, to string }

// Links is the state of every link between named endpoints, shared by the
// proxies of a network. The zero value is not usable; NewLinks makes one.
type Links struct {
	rto time.Duration

	mu      sync.Mutex
	blocked map[linkKey]bool
	shaped  map[linkKey]Shaping
	changed chan struct{} // closed and replaced at every change
	rng     *rand.Rand
}

// NewLinks returns a table with every link open; seed drives jitter and
// loss, rto is how long a lost chunk waits (DefaultRTO if zero).
func NewLinks(seed uint64, rto time.Duration) *Links {
	if rto <= 0 {
		rto = DefaultRTO
	}
	return &Links{
		rto: rto, blocked: map[linkKey]bool{}, shaped: map[linkKey]Shaping{},
		changed: make(chan struct{}), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

// Block holds back everything from sends to to until Unblock.
func (l *Links) Block(from, to string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blocked[linkKey{from, to}] = true
	l.notifyLocked()
}

// Unblock releases a blocked link; what it held is delivered.
func (l *Links) Unblock(from, to string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.blocked, linkKey{from, to})
	l.notifyLocked()
}

// Shape sets a link's shaping; the zero Shaping removes it.
func (l *Links) Shape(from, to string, s Shaping) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == (Shaping{}) {
		delete(l.shaped, linkKey{from, to})
	} else {
		l.shaped[linkKey{from, to}] = s
	}
	l.notifyLocked()
}

// HealAll opens every link.
func (l *Links) HealAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.blocked)
	clear(l.shaped)
	l.notifyLocked()
}

// Blocked reports whether the link is blocked, and returns a channel
// closed at the next change of any link.
func (l *Links) Blocked(from, to string) (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.blocked[linkKey{from, to}], l.changed
}

// wait is how long a chunk read now on the link must wait.
func (l *Links) wait(from, to string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.shaped[linkKey{from, to}]
	if !ok {
		return 0
	}
	d := s.Delay
	if s.Jitter > 0 {
		d += time.Duration(l.rng.Int64N(int64(s.Jitter) + 1))
	}
	if s.Loss > 0 && l.rng.Float64() < s.Loss {
		d += l.rto
	}
	return d
}

func (l *Links) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}
