package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testwait"
)

// h2Writer stands for an HTTP/2 stream's writer: it records the read
// deadlines set on it.
type h2Writer struct {
	*httptest.ResponseRecorder
	deadlines []time.Time
}

func (w *h2Writer) SetReadDeadline(t time.Time) error {
	w.deadlines = append(w.deadlines, t)
	return nil
}

// failingBody fails every read.
type failingBody struct{}

func (failingBody) Read([]byte) (int, error) { return 0, errors.New("connection reset") }
func (failingBody) Close() error             { return nil }

// An HTTP/2 body is timed by the watch, not by a deadline set on its
// stream as it arrives: a body that ends, or whose read fails, leaves the
// watch; only a body still unended at its deadline is cut, by a read
// deadline in the past on its own stream, and it leaves the watch too. An
// HTTP/1.1 body keeps its connection's read deadline.
func TestBodyWatchCutsOnlyBodiesUnendedAtTheirDeadline(t *testing.T) {
	l := DefaultLimits()
	l.BodyTimeout = time.Second
	s := &Server{limits: l, watch: newBodyWatch(l.BodyTimeout)}
	request := func(proto int, body io.ReadCloser) (*http.Request, *h2Writer) {
		r := httptest.NewRequest("POST", "/leasehold.v1.WorkerService/Report", nil)
		r.ProtoMajor, r.Body = proto, body
		w := &h2Writer{ResponseRecorder: httptest.NewRecorder()}
		listed, err := s.limitBody(w, r)
		if err != nil {
			t.Fatal(err)
		}
		if (listed != nil) != (proto == 2) {
			t.Fatalf("HTTP/%d: listed %v", proto, listed != nil)
		}
		return r, w
	}
	ended, endedW := request(2, io.NopCloser(bytes.NewReader([]byte("a whole body"))))
	failed, failedW := request(2, failingBody{})
	_, hangingW := request(2, io.NopCloser(bytes.NewReader(nil))) // never read
	_, h1W := request(1, io.NopCloser(bytes.NewReader(nil)))
	before := watchNow()
	if got := s.watch.listed(); got != 3 {
		t.Fatalf("%d bodies listed, want the 3 HTTP/2 ones", got)
	}
	for _, w := range []*h2Writer{endedW, failedW, hangingW} {
		if len(w.deadlines) != 0 {
			t.Fatalf("an HTTP/2 stream had read deadlines %v set as its request arrived", w.deadlines)
		}
	}
	if len(h1W.deadlines) != 1 || !h1W.deadlines[0].After(time.Now()) {
		t.Fatalf("an HTTP/1.1 body's read deadlines: %v, want one ahead", h1W.deadlines)
	}
	// The list is hanging, failed, ended: the failed body leaves from
	// its middle, the ended one from its end.
	if _, err := failed.Body.Read(make([]byte, 8)); err == nil {
		t.Fatal("a failing body read without error")
	}
	if _, err := io.ReadAll(ended.Body); err != nil {
		t.Fatal(err)
	}
	if got := s.watch.listed(); got != 1 {
		t.Fatalf("%d bodies listed after one ended and one failed, want 1", got)
	}
	if cut := s.watch.cutDue(before); cut != 0 || len(hangingW.deadlines) != 0 {
		t.Fatalf("before any deadline: %d cut, deadlines %v", cut, hangingW.deadlines)
	}
	if cut := s.watch.cutDue(before + l.BodyTimeout); cut != 1 {
		t.Fatalf("at the deadline: %d cut, want 1", cut)
	}
	if len(hangingW.deadlines) != 1 || !hangingW.deadlines[0].Before(time.Now()) {
		t.Fatalf("the unended body's stream got read deadlines %v, want one in the past", hangingW.deadlines)
	}
	if len(endedW.deadlines)+len(failedW.deadlines) != 0 {
		t.Fatalf("ended bodies were cut: %v, %v", endedW.deadlines, failedW.deadlines)
	}
	if got := s.watch.listed(); got != 0 {
		t.Fatalf("%d bodies listed after the cut, want 0", got)
	}
}

// The watch runs from the first start to the last close, cutting what
// is due at its resolution: a server served twice at once is timed until
// both end, and one served again after a close is timed again. close
// waits for the watch, and an extra close does nothing.
func TestBodyWatchRunsWhileStarted(t *testing.T) {
	bw := newBodyWatch(20 * time.Millisecond)
	if bw.resolution != 10*time.Millisecond {
		t.Fatalf("resolution %s, want the 10ms floor", bw.resolution)
	}
	bw.close() // never started
	cutWhileRunning := func(what string) {
		t.Helper()
		w := &h2Writer{ResponseRecorder: httptest.NewRecorder()}
		bw.add(&countedBody{}, w)
		testwait.For(t, 10*time.Second, what, func() error {
			if n := bw.listed(); n != 0 {
				return fmt.Errorf("%d listed", n)
			}
			return nil
		})
		if len(w.deadlines) != 1 {
			t.Fatalf("%s: the stream got read deadlines %v, want one", what, w.deadlines)
		}
	}
	bw.start()
	bw.start()
	cutWhileRunning("a body cut while started twice")
	bw.close()
	cutWhileRunning("a body cut after one of two closes")
	bw.close()
	bw.close()
	bw.add(&countedBody{}, &h2Writer{ResponseRecorder: httptest.NewRecorder()})
	if cut := bw.cutDue(watchNow()); cut != 0 {
		t.Fatalf("%d cut before the deadline", cut)
	}
	bw.start()
	cutWhileRunning("a body cut after a restart") // and the one listed while stopped
	bw.close()
	if newBodyWatch(0) != nil {
		t.Fatal("a watch for body_timeout 0")
	}
	if got := newBodyWatch(time.Hour).resolution; got != time.Second {
		t.Fatalf("resolution %s at an hour, want the 1s ceiling", got)
	}
}

// Bodies listed, ended and cut from many goroutines at once leave the
// list whole: every body is unlisted exactly once, by its end or by the
// cut, and the list comes back empty (run with -race).
func TestBodyWatchConcurrentUse(t *testing.T) {
	bw := newBodyWatch(time.Second)
	const callers, each = 8, 200
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for i := range each {
				b := &countedBody{watch: bw}
				bw.add(b, &h2Writer{ResponseRecorder: httptest.NewRecorder()})
				if i%2 == 0 {
					bw.remove(b)
				}
				bw.remove(b) // again: a no-op, or the only one for odd i
			}
		})
	}
	wg.Go(func() {
		for range each {
			bw.cutDue(watchNow() + time.Hour)
		}
	})
	wg.Wait()
	if n := bw.listed(); n != 0 {
		t.Fatalf("%d listed after every body ended", n)
	}
}
