package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/transport"
)

// snapshotPath is where a node serves snapshots: GET saves, PUT restores.
const snapshotPath = "/v1/snapshot"

// SaveSnapshot writes a snapshot of the cluster's state to w. Failures
// before the first byte reaches w are retried like any call; once bytes
// have been written the error is returned, since w cannot be rewound. Only
// ctx bounds the transfer (a large state takes a while).
func (c *Client) SaveSnapshot(ctx context.Context, w io.Writer) error {
	return c.call(ctx, callOpts{noAttemptTimeout: true}, func(ctx context.Context, ep *endpoints) (http.Header, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.snapshotURL(ep), nil)
		if err != nil {
			return nil, &permanentError{err}
		}
		c.authorize(req.Header)
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return resp.Header, snapshotError(resp)
		}
		cw := &countingWriter{w: w}
		if _, err := io.Copy(cw, resp.Body); err != nil {
			err = fmt.Errorf("leasehold: save snapshot: %w", err)
			if cw.n > 0 {
				return resp.Header, &permanentError{err}
			}
			return resp.Header, err
		}
		return resp.Header, nil
	})
}

// RestoreSnapshot replaces the cluster's state with the snapshot read from
// r (an operator's restore; fencing tokens still only grow). The request
// asks for "100-continue", so a node that refuses it (not the leader, not
// ready) answers before r is read, and the client retries on the leader.
// After r has been read from, a failure is retried only if r is an
// io.Seeker, which is rewound. Only ctx bounds the transfer.
func (c *Client) RestoreSnapshot(ctx context.Context, r io.Reader) error {
	_, err := c.Restore(ctx, r)
	return err
}

// RestoreResult is the leader's answer to a restore: the restored state's
// last Raft index, its last token (the next token granted is above it)
// and its workers.
type RestoreResult struct {
	LastIndex uint64 `json:"last_index"`
	LastToken uint64 `json:"last_token"`
	Workers   int    `json:"workers"`
}

// Restore is RestoreSnapshot with the leader's answer, read from the
// restore's own reply (a status read afterwards may reach a follower that
// has not applied it yet).
func (c *Client) Restore(ctx context.Context, r io.Reader) (RestoreResult, error) {
	var res RestoreResult
	start := int64(-1)
	seeker, _ := r.(io.Seeker)
	if seeker != nil {
		if pos, err := seeker.Seek(0, io.SeekCurrent); err == nil {
			start = pos
		}
	}
	dirty := false // an earlier attempt read from r
	err := c.call(ctx, callOpts{noAttemptTimeout: true}, func(ctx context.Context, ep *endpoints) (http.Header, error) {
		if dirty {
			if _, err := seeker.Seek(start, io.SeekStart); err != nil {
				return nil, &permanentError{fmt.Errorf("leasehold: restore snapshot: rewind: %w", err)}
			}
			dirty = false
		}
		body := &attemptBody{r: r}
		hdr, err := c.restoreAttempt(ctx, ep, body, &res)
		if body.finish() > 0 && err != nil {
			if start < 0 {
				return hdr, &permanentError{err}
			}
			dirty = true
		}
		return hdr, err
	})
	return res, err
}

func (c *Client) restoreAttempt(ctx context.Context, ep *endpoints, body io.Reader, res *RestoreResult) (http.Header, error) {
	// NopCloser: the transport must not close r, which the caller owns.
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.snapshotURL(ep), io.NopCloser(body))
	if err != nil {
		return nil, &permanentError{err}
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Expect", "100-continue")
	c.authorize(req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp.Header, snapshotError(resp)
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	// An older node's empty or other answer leaves res zero: the restore
	// itself succeeded.
	_ = json.Unmarshal(raw, res)
	return resp.Header, nil
}

func (c *Client) snapshotURL(ep *endpoints) string {
	return c.scheme + "://" + ep.addr + snapshotPath
}

// snapshotBody is the JSON a node answers a refused snapshot request with.
type snapshotBody struct {
	Reason    string `json:"reason"`
	Message   string `json:"message"`
	Field     string `json:"field"`
	LeaderID  string `json:"leader_id"`
	LeaderAPI string `json:"leader_api"`
}

// snapshotError maps a non-2xx snapshot answer to an *Error: the reason in
// its JSON body if it has one, else the HTTP status (a proxy's 503 is
// unavailable, like for every other call).
func snapshotError(resp *http.Response) *Error {
	var body snapshotBody
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(raw, &body) != nil || body.Reason == "" {
		return &Error{Code: httpCode(resp.StatusCode), Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, truncate(string(raw), 256))}
	}
	e := &Error{
		Reason:    body.Reason,
		Code:      transport.CodeOf(body.Reason),
		Message:   body.Message,
		Field:     body.Field,
		LeaderID:  body.LeaderID,
		LeaderAPI: body.LeaderAPI,
	}
	if e.Reason == transport.ReasonNotLeader && e.LeaderAPI == "" {
		e.LeaderAPI = resp.Header.Get(transport.HeaderLeader)
	}
	return e
}

// httpCode is the Connect code of an HTTP status with no leasehold reason.
func httpCode(status int) connect.Code {
	switch status {
	case http.StatusBadRequest:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return connect.CodeUnavailable
	}
	return connect.CodeInternal
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// attemptBody is one attempt's view of a restore's reader. The HTTP
// transport may still read a request body after Do has returned; finish
// waits out a read in progress and refuses later ones, so a retry can
// rewind the reader without the abandoned attempt taking bytes from it.
type attemptBody struct {
	mu   sync.Mutex
	r    io.Reader
	n    int64
	done bool
}

func (b *attemptBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, errAttemptOver
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

// finish ends the attempt's use of the reader and says how much it read.
func (b *attemptBody) finish() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	return b.n
}

var errAttemptOver = errors.New("snapshot upload attempt is over")
