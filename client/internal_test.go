package client

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/transport/rules"
)

// Backoff is full jitter: the n-th wait is anywhere in [0, min(max,
// base×2^n)], and both halves of that range come up.
func TestBackoffFullJitter(t *testing.T) {
	c := &Client{cfg: Config{RetryBase: 10 * time.Millisecond, RetryMax: 200 * time.Millisecond}}
	for n := range 70 {
		ceil := c.cfg.RetryMax
		if n < 5 {
			ceil = c.cfg.RetryBase << n
		}
		low, high := false, false
		for range 2000 {
			d := c.backoff(n)
			if d < 0 || d > ceil {
				t.Fatalf("backoff(%d) = %v, outside [0, %v]", n, d, ceil)
			}
			low = low || d < ceil/2
			high = high || d > ceil/2
		}
		if !low || !high {
			t.Fatalf("backoff(%d) never fell in one half of [0, %v]", n, ceil)
		}
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"}, // é is two bytes: not split
		{"a\xffb", 10, "a\uFFFDb"},
	} {
		got := clip(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) || len(got) > max(tc.n, len(tc.want)) {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	if got := clip(strings.Repeat("é", 3000), rules.MaxMessageLen); len(got) > rules.MaxMessageLen || !utf8.ValidString(got) {
		t.Errorf("clip of a long message: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

// A connection the HTTP/2 transport lost or closed under a call is a
// network failure (retried elsewhere); another unknown error is not.
func TestHTTP2ConnectionErrorsAreRetried(t *testing.T) {
	for _, msg := range []string{
		"http2: client connection force closed via ClientConn.Close",
		"protocol error: incomplete envelope: http2: client connection lost",
	} {
		e := toError(connect.NewError(connect.CodeUnknown, errors.New(msg)))
		if classify(e) != backOff {
			t.Errorf("%q is not retried", msg)
		}
	}
	if classify(toError(connect.NewError(connect.CodeUnknown, errors.New("something else")))) == backOff {
		t.Error("an unknown error is retried")
	}
}
