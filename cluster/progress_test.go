package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport/rules"
)

// The table keeps the latest note per job under its token, answers only for
// that token, clears on an empty note, and a sweep keeps only live leases.
func TestProgressTable(t *testing.T) {
	var tab progressTable
	at := time.Unix(1000, 0)
	if _, ok := tab.get("a", 1); ok {
		t.Fatal("an empty table answered")
	}
	tab.hear("a", 1, "one", at)
	tab.hear("a", 1, "two", at.Add(time.Second))
	tab.hear("b", 2, "b's", at)
	if p, ok := tab.get("a", 1); !ok || p.Note != "two" || !p.Heard.Equal(at.Add(time.Second)) {
		t.Fatalf("a: %+v, %v; want the latest note", p, ok)
	}
	if _, ok := tab.get("a", 3); ok {
		t.Fatal("a note answered for another token of its job")
	}
	tab.hear("a", 1, "", at)
	if _, ok := tab.get("a", 1); ok || tab.len() != 1 {
		t.Fatalf("an empty note did not clear a's (%d entries)", tab.len())
	}
	tab.hear("c", 4, "c's", at)
	tab.sweep(func(job string, token uint64) bool { return job == "c" && token == 4 })
	if _, ok := tab.get("b", 2); ok || tab.len() != 1 {
		t.Fatalf("the sweep kept an ended lease's note (%d entries)", tab.len())
	}
}

func TestValidateNotes(t *testing.T) {
	held := []fsm.LeaseRef{{JobID: "a", Token: 1}, {JobID: "b", Token: 2}}
	long := make([]byte, rules.MaxProgressLen+1)
	for i := range long {
		long[i] = 'x'
	}
	for name, c := range map[string]struct {
		notes []ProgressNote
		ok    bool
	}{
		"none":      {nil, true},
		"two":       {[]ProgressNote{{1, "x"}, {2, ""}}, true},
		"longest":   {[]ProgressNote{{1, string(long[1:])}}, true},
		"too long":  {[]ProgressNote{{1, string(long)}}, false},
		"control":   {[]ProgressNote{{1, "a\x00b"}}, false},
		"bad utf-8": {[]ProgressNote{{1, "\xff"}}, false},
		"not named": {[]ProgressNote{{3, "x"}}, false},
		"twice":     {[]ProgressNote{{1, "x"}, {1, "y"}}, false},
		"too many":  {[]ProgressNote{{1, "x"}, {2, "y"}, {3, "z"}}, false},
	} {
		err := validateNotes(held, c.notes)
		var fe *rules.FieldError
		if c.ok != (err == nil) || err != nil && !errors.As(err, &fe) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
