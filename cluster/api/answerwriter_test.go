package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

type countingFlusher struct {
	*httptest.ResponseRecorder
	flushes int
}

func (c *countingFlusher) Flush() { c.flushes++ }

// A held writer notes flushes and makes one on release; a release with no
// flush asked for makes none; unheld, every flush goes through.
func TestAnswerWriterHoldsFlushes(t *testing.T) {
	c := &countingFlusher{ResponseRecorder: httptest.NewRecorder()}
	a := &answerWriter{ResponseWriter: c, flusher: c}
	a.Flush()
	if c.flushes != 1 {
		t.Fatalf("an unheld flush made %d", c.flushes)
	}
	a.hold()
	for range 5 {
		a.Flush()
	}
	if c.flushes != 1 {
		t.Fatalf("flushes went through while held: %d", c.flushes)
	}
	a.release()
	if c.flushes != 2 {
		t.Fatalf("release made %d flushes for five held, want 1", c.flushes-1)
	}
	a.hold()
	a.release()
	if c.flushes != 2 {
		t.Fatalf("a release with nothing held flushed")
	}
	a.Flush()
	if c.flushes != 3 {
		t.Fatalf("a flush after release was held")
	}
	if a.Unwrap() != http.ResponseWriter(c) {
		t.Fatal("the writer does not unwrap to the connection's")
	}
}
