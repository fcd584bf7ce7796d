package api

import (
	"context"
	"testing"
	"time"
)

// ctxSink keeps what an allocation count makes from the stack.
var ctxSink context.Context

// A call's request record is found through every context derived from
// the one carrying it, cancellation passes through it as through any
// context, and carrying it is one allocation.
func TestRequestContextCarriesTheRecord(t *testing.T) {
	type other struct{}
	base, cancel := context.WithCancel(context.WithValue(context.Background(), other{}, "below"))
	req := request{id: Identity{Kind: "token", Name: "w1", Source: "127.0.0.1:5"}, path: "/p", forwarded: true}
	ctx := withRequest(base, req)
	derived, stop := context.WithTimeout(context.WithValue(ctx, other{}, "above"), time.Hour)
	defer stop()
	for name, c := range map[string]context.Context{"carrying": ctx, "derived": derived} {
		got := requestOf(c)
		if got.id.Name != req.id.Name || got.id.Source != req.id.Source || got.path != req.path || !got.forwarded {
			t.Errorf("%s: request %+v, want %+v", name, got, req)
		}
	}
	if v := ctx.Value(other{}); v != "below" {
		t.Errorf("a value below the record reads %v", v)
	}
	if got := requestOf(base); got.path != "" {
		t.Errorf("a context without the record reads %+v", got)
	}
	cancel()
	select {
	case <-derived.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("cancelling below the record did not reach a context derived from it")
	}
	if n := testing.AllocsPerRun(100, func() { ctxSink = withRequest(base, req) }); n != 1 {
		t.Errorf("carrying the record: %v allocations, want 1", n)
	}
}
