package api

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"unsafe"
)

// useStack recurses through about n bytes of stack.
//
//go:noinline
func useStack(n int) byte {
	var frame [256]byte
	frame[stackIndex] = byte(n)
	if n <= len(frame) {
		return frame[0]
	}
	return useStack(n-len(frame)) + frame[0]
}

// stackMoved runs a call using depth bytes of stack on a fresh goroutine,
// after growStack when grow, and says whether the goroutine's stack was
// copied meanwhile: a local's address changes when it is.
func stackMoved(grow bool, depth int) bool {
	moved := make(chan bool)
	go func() {
		if grow {
			growStack()
		}
		var x byte
		before := uintptr(unsafe.Pointer(&x))
		useStack(depth)
		moved <- uintptr(unsafe.Pointer(&x)) != before
	}()
	return <-moved
}

// After growStack, a call as deep as a handler's does not grow the stack
// again; without it, the same call on a fresh goroutine does.
func TestGrowStackGrowsOnce(t *testing.T) {
	// A collection may change the size new goroutines start with, or
	// shrink a stack: none runs during the test.
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	start := []metrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	metrics.Read(start)
	if start[0].Value.Kind() == metrics.KindUint64 && start[0].Value.Uint64() >= 2*handlerStackBytes {
		t.Skipf("goroutines start with %d bytes of stack: growStack has nothing to do", start[0].Value.Uint64())
	}
	const depth = handlerStackBytes
	if !stackMoved(false, depth) {
		t.Skipf("a fresh goroutine held %d bytes of calls without growing its stack: the check below would prove nothing", depth)
	}
	if stackMoved(true, depth) {
		t.Fatalf("the stack grew again for %d bytes of calls after growStack", depth)
	}
}

func TestGrownStackServesTheRequest(t *testing.T) {
	h := grownStack(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Path", r.URL.Path)
		w.WriteHeader(http.StatusTeapot)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	if rec.Code != http.StatusTeapot || rec.Header().Get("X-Path") != "/x" {
		t.Fatalf("answered %d %q", rec.Code, rec.Header().Get("X-Path"))
	}
}

// BenchmarkGrownStackCall times what every API call pays for its stack: a
// fresh goroutine that runs growStack, then a call as deep as a handler's.
//
//	go test -run '^$' -bench GrownStackCall -count 4 ./cluster/api/
func BenchmarkGrownStackCall(b *testing.B) {
	done := make(chan struct{})
	for range b.N {
		go func() {
			growStack()
			useStack(handlerStackBytes)
			done <- struct{}{}
		}()
		<-done
	}
}
