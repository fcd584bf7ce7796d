package client_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/transport"
)

// refuse answers a snapshot request the way a node does: JSON with a
// reason, the leader in the header.
func refuse(status int, reason, leader string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if leader != "" {
			w.Header().Set(transport.HeaderLeader, leader)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"reason": reason, "message": "scripted " + reason})
	}
}

func TestSaveSnapshotFollowsLeader(t *testing.T) {
	a, b := newFakeNode(t), newFakeNode(t)
	a.setMembers(a.addr, b.addr)
	a.setSnapshot(refuse(http.StatusServiceUnavailable, transport.ReasonNotLeader, b.addr))
	b.setSnapshot(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "method", http.StatusMethodNotAllowed)
			return
		}
		_, _ = io.WriteString(w, "snapshot-bytes")
	})
	c := newClientWith(t, client.Config{Endpoints: []string{a.addr}, Token: "tok"})
	var buf bytes.Buffer
	if err := c.SaveSnapshot(testCtx(t), &buf); err != nil {
		t.Fatalf("SaveSnapshot: %v", err)
	}
	if buf.String() != "snapshot-bytes" || c.Leader() != b.addr {
		t.Fatalf("saved %q, leader %s", buf.String(), c.Leader())
	}
	if got := b.requests("snapshot GET")[0].header.Get("Authorization"); got != "Bearer tok" {
		t.Fatalf("Authorization %q", got)
	}
}

// A restore refused after the body was read is sent again from the start
// when the reader can be rewound.
func TestRestoreSnapshotRewindsOnRetry(t *testing.T) {
	node := newFakeNode(t)
	var mu sync.Mutex
	var bodies []string
	node.setSnapshot(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(body))
		first := len(bodies) == 1
		mu.Unlock()
		if first {
			refuse(http.StatusServiceUnavailable, transport.ReasonNoLeader, "")(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	c := newClient(t, node.addr)
	if err := c.RestoreSnapshot(testCtx(t), bytes.NewReader([]byte("backup"))); err != nil {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 2 || bodies[0] != "backup" || bodies[1] != "backup" {
		t.Fatalf("bodies %q, want the whole backup twice", bodies)
	}
}

// A node that refuses without reading gets nothing of the reader, so even
// a reader that cannot be rewound is sent whole to the leader.
func TestRestoreSnapshotRedirectsBeforeSending(t *testing.T) {
	a, b := newFakeNode(t), newFakeNode(t)
	a.setMembers(a.addr, b.addr)
	a.setSnapshot(refuse(http.StatusServiceUnavailable, transport.ReasonNotLeader, b.addr))
	got := make(chan string, 1)
	b.setSnapshot(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- string(body)
		w.WriteHeader(http.StatusOK)
	})
	c := newClient(t, a.addr)
	onlyReader := struct{ io.Reader }{strings.NewReader("backup")}
	if err := c.RestoreSnapshot(testCtx(t), onlyReader); err != nil {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	if body := recv(t, "the leader's upload", got); body != "backup" {
		t.Fatalf("leader got %q", body)
	}
	if n := a.count("snapshot PUT"); n != 1 {
		t.Fatalf("%d attempts on the follower", n)
	}
}

func TestRestoreSnapshotRefusal(t *testing.T) {
	node := newFakeNode(t)
	node.setSnapshot(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		refuse(http.StatusBadRequest, transport.ReasonInvalidArgument, "")(w, r)
	})
	c := newClient(t, node.addr)
	err := c.RestoreSnapshot(testCtx(t), strings.NewReader("not a snapshot"))
	var e *client.Error
	if !errors.Is(err, client.ErrInvalidArgument) || !errors.As(err, &e) || e.Message != "scripted INVALID_ARGUMENT" {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	if n := node.count("snapshot PUT"); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}

// A retryable failure after part of a reader that cannot be rewound was
// sent is final.
func TestRestoreSnapshotCannotRewind(t *testing.T) {
	node := newFakeNode(t)
	node.setSnapshot(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		refuse(http.StatusServiceUnavailable, transport.ReasonNoLeader, "")(w, r)
	})
	c := newClient(t, node.addr)
	err := c.RestoreSnapshot(testCtx(t), struct{ io.Reader }{strings.NewReader("backup")})
	if !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	if n := node.count("snapshot PUT"); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}

func TestSnapshotPlainHTTPError(t *testing.T) {
	node := newFakeNode(t)
	node.setSnapshot(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "who are you", http.StatusUnauthorized)
	})
	c := newClient(t, node.addr)
	if err := c.SaveSnapshot(testCtx(t), io.Discard); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("SaveSnapshot: %v", err)
	}
}

// Restore returns the leader's own answer to the restore.
func TestRestoreReturnsTheAnswer(t *testing.T) {
	node := newFakeNode(t)
	node.setSnapshot(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"last_index":12,"last_token":4503599627370497,"workers":2}`+"\n")
	})
	c := newClient(t, node.addr)
	res, err := c.Restore(testCtx(t), bytes.NewReader([]byte("backup")))
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if want := (client.RestoreResult{LastIndex: 12, LastToken: 4503599627370497, Workers: 2}); res != want {
		t.Fatalf("Restore: %+v, want %+v", res, want)
	}
}
