package api

import (
	"net/http"
	"sync"
	"time"
)

// bodyWatch bounds how long an HTTP/2 request's body may take to arrive,
// for every stream of every connection, with one goroutine.
//
// A read deadline set on an HTTP/2 stream is a message to its connection's
// serving goroutine, which starts a timer for it: a hand-off, a closure and
// a timer for every call, although nearly every body has arrived whole by
// the time its handler reads it. Instead, a body being read is kept on a
// list, and the watch looks at the list every resolution (a tenth of
// body_timeout, between 10 ms and 1 s): a body that has not ended by its
// deadline is cut by setting its stream's read deadline in the past, which
// net/http does at once on the calling goroutine, and the read that waits
// for it fails with os.ErrDeadlineExceeded as a timer's would. A body
// leaves the list when it ends, when its read fails, and when its handler
// returns, whichever comes first, so a body is never cut after its handler
// has returned (the watch cuts and the handler's end unlists under one
// lock).
//
// A body is cut between its deadline and about one resolution after it (a
// busy machine may wake the watch later). HTTP/1.1 bodies keep a read
// deadline on their connection, which costs no hand-off.
//
// The watch relies on the handler chain: authenticate, which lists a body,
// unlists it when the handler below it returns, and nothing above it
// returns before it does (Server.Handler); a stream cut after its handler
// returned would panic in net/http.
type bodyWatch struct {
	timeout, resolution time.Duration

	mu   sync.Mutex
	head *countedBody // the bodies being read, in no particular order

	// life counts the Serves running on the watch's server: the watch's
	// goroutine runs while there is one, so a server served again after
	// a Shutdown, or by two Serves at once, has its bodies timed.
	life       sync.Mutex
	users      int
	stop, done chan struct{}
}

// watchEpoch is the zero of the watch's monotonic clock.
var watchEpoch = time.Now()

// watchNow reads the watch's monotonic clock.
func watchNow() time.Duration { return time.Since(watchEpoch) }

// newBodyWatch returns a watch for bodies due within timeout; nil when
// timeout is zero (bodies are not timed). It runs between start and close.
func newBodyWatch(timeout time.Duration) *bodyWatch {
	if timeout <= 0 {
		return nil
	}
	return &bodyWatch{timeout: timeout, resolution: min(max(timeout/10, 10*time.Millisecond), time.Second)}
}

// start runs the watch until the matching close (the last one, when
// started more than once).
func (bw *bodyWatch) start() {
	bw.life.Lock()
	defer bw.life.Unlock()
	bw.users++
	if bw.users > 1 {
		return
	}
	stop, done := make(chan struct{}), make(chan struct{})
	bw.stop, bw.done = stop, done
	go func() {
		defer close(done)
		t := time.NewTicker(bw.resolution)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				bw.cutDue(watchNow())
			}
		}
	}()
}

// close undoes one start, and stops the watch, waiting for it, when it
// was the last. Bodies listed while it is stopped are not cut, which Serve
// avoids by closing it after its servers are shut down (a Shutdown whose
// context ended closes them instead, and the reads of any handler still
// running then fail with their connection).
func (bw *bodyWatch) close() {
	bw.life.Lock()
	defer bw.life.Unlock()
	if bw.users == 0 {
		return
	}
	bw.users--
	if bw.users == 0 {
		close(bw.stop)
		<-bw.done
	}
}

// add lists b, read through the HTTP/2 stream w answers, due timeout from now.
func (bw *bodyWatch) add(b *countedBody, w http.ResponseWriter) {
	b.stream, b.due = w, watchNow()+bw.timeout
	bw.mu.Lock()
	b.next = bw.head
	if bw.head != nil {
		bw.head.prev = b
	}
	bw.head, b.listed = b, true
	bw.mu.Unlock()
}

// remove unlists b if it is listed.
func (bw *bodyWatch) remove(b *countedBody) {
	bw.mu.Lock()
	bw.unlink(b)
	bw.mu.Unlock()
}

func (bw *bodyWatch) unlink(b *countedBody) {
	if !b.listed {
		return
	}
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		bw.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	}
	b.prev, b.next, b.listed = nil, nil, false
}

// cutDue cuts and unlists every body due by now.
func (bw *bodyWatch) cutDue(now time.Duration) (cut int) {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	for b := bw.head; b != nil; {
		next := b.next
		// In the past: net/http closes the stream's body with
		// os.ErrDeadlineExceeded here and now, without a timer. A writer
		// that cannot take a deadline keeps its body listed, for its
		// handler's end to unlist.
		if b.due <= now && http.NewResponseController(b.stream).SetReadDeadline(time.Unix(1, 0)) == nil {
			bw.unlink(b)
			cut++
		}
		b = next
	}
	return cut
}

// listed counts the bodies on the list.
func (bw *bodyWatch) listed() (n int) {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	for b := bw.head; b != nil; b = b.next {
		n++
	}
	return n
}
