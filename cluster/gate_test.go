package cluster

import (
	"slices"
	"testing"

	"github.com/leasehold/leasehold/fsm"
)

// An acquire's gate is named by its set of queues and kinds (names hold
// no comma): the same in any order, different for another set, and naming
// it leaves the request as it was.
func TestGateKey(t *testing.T) {
	a := &fsm.Acquire{Queues: []string{"b", "a"}, Kinds: []string{"y", "x"}}
	b := &fsm.Acquire{Queues: []string{"a", "b"}, Kinds: []string{"x", "y"}}
	if ka, kb := gateKey(a), gateKey(b); ka != kb || ka != "a,b|x,y" {
		t.Fatalf("gateKey %q and %q, want both a,b|x,y", ka, kb)
	}
	if !slices.Equal(a.Queues, []string{"b", "a"}) || !slices.Equal(a.Kinds, []string{"y", "x"}) {
		t.Fatalf("gateKey reordered the request: %v %v", a.Queues, a.Kinds)
	}
	for _, other := range []*fsm.Acquire{
		{Queues: []string{"a"}, Kinds: []string{"b", "x", "y"}},
		{Queues: []string{"a", "b", "x"}, Kinds: []string{"y"}},
		{Queues: []string{"a", "b"}},
	} {
		if gateKey(other) == gateKey(a) {
			t.Errorf("gateKey(%v|%v) = gateKey(%v|%v)", other.Queues, other.Kinds, a.Queues, a.Kinds)
		}
	}
	if got := gateKey(&fsm.Acquire{Queues: []string{"q"}}); got != "q|" {
		t.Fatalf("one queue: %q, want q|", got)
	}
	if n := testing.AllocsPerRun(100, func() { gateKey(&fsm.Acquire{Queues: []string{"q"}}) }); n > 1 {
		t.Errorf("one queue's key: %.0f allocations, want at most 1", n)
	}
}
