package client

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
)

// joinFrames wraps the transport a Client calls through so that each
// message of a streaming call leaves as one HTTP/2 DATA frame, not two.
//
// Connect writes a streamed message into the request body as two writes,
// its 5-byte envelope prefix and then the message, and Go's HTTP/2
// transport sends every read of the body as a DATA frame of its own, and
// flushes it: two frames, and two writes to the socket, for every
// heartbeat a worker's stream sends. The server then handles two frames,
// and may wake the stream's handler twice, for one message. The wrapper's
// body reads each message whole (up to the transport's buffer) before it
// returns, and does not wait past the end of one unless the next is
// already being handed over (announced messages, below): a message is
// sent as soon as it is written.
type joinFrames struct{ next http.RoundTripper }

// withJoinedFrames returns hc's transport wrapped by joinFrames, in a copy of
// hc (nil transport: http.DefaultTransport).
func withJoinedFrames(hc *http.Client) *http.Client {
	out := *hc
	next := out.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	out.Transport = joinFrames{next: next}
	return &out
}

// CloseIdleConnections closes the wrapped transport's idle connections,
// as http.Client.CloseIdleConnections asks.
func (t joinFrames) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t joinFrames) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody || !enveloped(r.Header.Get("Content-Type")) {
		return t.next.RoundTrip(r)
	}
	// A RoundTripper must not change the request it is given: send a
	// shallow copy that reads the body through the joiner.
	r2 := new(http.Request)
	*r2 = *r
	r2.Body = &joinedBody{body: r.Body, announced: announcedIn(r.Context())}
	return t.next.RoundTrip(r2)
}

// Announced messages: a stream whose messages come from many goroutines
// (a heartbeat stream several workers share) counts each message before
// its sender waits for its turn to write it. The body's reader, at the end
// of a read's first message, notes how many others are counted, and goes
// on to read that many more (no more, and only while they fit): messages
// sent together leave together, one DATA frame and one write to the socket
// for all of them instead of one each. It waits only for messages whose
// senders were already handing them over when the first one ended, never
// for a sender that came later, and a message alone on its stream leaves
// as soon as it is read.
type announcedKey struct{}

// withAnnounced returns ctx carrying n, the count of a stream's messages
// announced and not yet read off its body.
func withAnnounced(ctx context.Context, n *atomic.Int64) context.Context {
	return context.WithValue(ctx, announcedKey{}, n)
}

func announcedIn(ctx context.Context) *atomic.Int64 {
	n, _ := ctx.Value(announcedKey{}).(*atomic.Int64)
	return n
}

// enveloped reports whether a request's body is a stream of enveloped
// messages in binary (Connect's streaming protocol, gRPC and gRPC-Web, not
// gRPC-Web's base64 text), each a flags byte and a 4-byte big-endian length
// before the message.
func enveloped(contentType string) bool {
	if strings.HasPrefix(contentType, "application/connect+") {
		return true
	}
	for _, ct := range []string{"application/grpc", "application/grpc-web"} {
		if rest, ok := strings.CutPrefix(contentType, ct); ok && (rest == "" || rest[0] == '+' || rest[0] == ';') {
			return true
		}
	}
	return false
}

// envelopeFlags are the flags an envelope may carry (compressed, and the
// end of a stream or gRPC-Web's trailers): a prefix with any other bit set
// is not one, and the body is passed through as it is read.
const envelopeFlags = 0x01 | 0x02 | 0x80

// envelopePrefix is the length of an envelope's prefix.
const envelopePrefix = 5

// joinedBody reads a stream of enveloped messages and returns from Read
// at the end of each one (or when p is full), so that a read is a
// message, whatever the writes that made it; or, with announced messages,
// the messages announced when its first one ended.
type joinedBody struct {
	body   io.ReadCloser
	prefix [envelopePrefix]byte
	got    int    // bytes of the current message's prefix read; envelopePrefix: in its message
	left   uint32 // bytes of the current message still to read, once its prefix is read
	raw    bool   // a prefix did not parse: reads pass through
	// announced, when set, counts the messages senders are handing over
	// and this body has not read whole (withAnnounced).
	announced *atomic.Int64
}

func (b *joinedBody) Read(p []byte) (n int, err error) {
	if b.raw {
		return b.body.Read(p)
	}
	budget := -1 // announced messages this read may still join; -1: not yet known
	for n < len(p) {
		want := len(p) - n
		if b.got < envelopePrefix {
			want = min(want, envelopePrefix-b.got)
		} else if uint64(b.left) < uint64(want) {
			want = int(b.left) // compared unconverted: an int may be 32 bits
		}
		var m int
		m, err = b.body.Read(p[n : n+want])
		if b.got < envelopePrefix {
			copy(b.prefix[b.got:], p[n:n+m])
			b.got += m
			if b.got == envelopePrefix {
				if b.prefix[0]&^envelopeFlags != 0 {
					// Not an envelope: never wait for a length it
					// does not mean.
					b.raw = true
					return n + m, err
				}
				b.left = binary.BigEndian.Uint32(b.prefix[1:])
			}
		} else {
			b.left -= uint32(m)
		}
		n += m
		if b.got == envelopePrefix && b.left == 0 {
			// The message is whole: hand it over rather than wait for
			// the next, which may not come for a while, unless a sender
			// has announced the next and there is room for it.
			b.got = 0
			if b.announced != nil && b.join(&budget, err == nil && len(p)-n >= envelopePrefix) {
				continue
			}
			return n, err
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// join takes the message just read whole off the announced count, always
// (a message left counted would hold every later read until its buffer
// filled), and says whether the read goes on to the next message: only
// when room says it may (no error, and room for the next one's prefix),
// another is announced, and budget allows. At a read's first message end,
// budget is set to the messages announced then; each one joined spends
// one, so a read never waits for a sender that announced after that.
func (b *joinedBody) join(budget *int, room bool) bool {
	left := b.announced.Add(-1)
	if *budget < 0 {
		*budget = int(max(left, 0))
	}
	if !room || left <= 0 || *budget == 0 {
		return false
	}
	*budget--
	return true
}

func (b *joinedBody) Close() error { return b.body.Close() }
