package workload

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/internal/h2ctest"
	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
)

// A node that refuses what a correct one refuses, except heartbeats,
// which it serves: the flood records every attack with the node's answer,
// marks only the heartbeats served, and holds its idle connections open
// until it stops.
func TestFloodRecordsAnswers(t *testing.T) {
	errw := connect.NewErrorWriter()
	refuse := func(w http.ResponseWriter, r *http.Request, reason string) {
		errw.Write(w, r, transport.NewError(reason, errors.New("refused"), nil))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/leasehold.v1.WorkerService/Heartbeat", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Connect-Timeout-Ms") == "" {
			// A body made by hand (the generated client sends its
			// deadline): the bodies' attacks.
			io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
			refuse(w, r, transport.ReasonTooLarge)
			return
		}
		w.Header().Set("Content-Type", "application/proto")
		w.WriteHeader(http.StatusOK) // served: what the checkers must flag
	})
	mux.HandleFunc("/leasehold.v1.WorkerService/Acquire", func(w http.ResponseWriter, r *http.Request) {
		refuse(w, r, transport.ReasonUnknownWorker)
	})
	mux.HandleFunc("/leasehold.v1.ClusterService/Members", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // waits for a body that never comes
		refuse(w, r, transport.ReasonInvalidArgument)
	})
	srv := h2ctest.Start(t, mux)
	addr := srv.Listener.Addr().String()

	rec := history.NewRecorder(nil)
	f, err := StartFlood(context.Background(), FloodConfig{Rec: rec, SourceIP: "127.0.0.1",
		Nodes: []FloodTarget{{Name: "n1", Addr: addr}}, IdleConns: 5})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		seen := map[string]bool{}
		for _, e := range rec.Entries() {
			seen[e.Flood.Attack] = true
		}
		if seen[history.FloodGzipBomb] && seen[history.FloodOversizedDeclared] && seen[history.FloodOversizedStreamed] &&
			seen[history.FloodGhostHeartbeat] && seen[history.FloodGhostAcquire] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("attacks seen: %v", seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.Stop()

	idle := 0
	for _, e := range rec.Entries() {
		c := e.Flood
		if err := e.Validate(); err != nil {
			t.Fatal(err)
		}
		if c.Node != "n1" || c.Cred != history.CredNone {
			t.Fatalf("an insecure flood call %+v", c)
		}
		switch c.Attack {
		case history.FloodGhostHeartbeat:
			if !c.Served {
				t.Fatalf("a served heartbeat not marked: %+v", c)
			}
		case history.FloodIdleConn:
			idle++
			if c.Served || c.Error != "closed by the flood at its end" || c.HeldNs <= 0 {
				t.Fatalf("an idle connection: %+v", c)
			}
		case history.FloodGhostAcquire:
			if c.Served || c.Reason != transport.ReasonUnknownWorker {
				t.Fatalf("a ghost acquire: %+v", c)
			}
		case history.FloodGzipBomb, history.FloodOversizedDeclared, history.FloodOversizedStreamed:
			// Refused, or cut off while its body was still being sent.
			if c.Served || c.Error == "" && c.Reason != transport.ReasonTooLarge {
				t.Fatalf("a body: %+v", c)
			}
		default:
			t.Fatalf("an insecure run made a %s call", c.Attack)
		}
	}
	if idle != 5 {
		t.Fatalf("%d idle connections recorded at the stop, want 5", idle)
	}
}

// The bomb is small on the wire and inflates to its size.
func TestGzipBomb(t *testing.T) {
	b, err := gzipBomb(floodBombSize)
	if err != nil || len(b) > 64<<10 {
		t.Fatalf("bomb of %d bytes: %v", len(b), err)
	}
}

// The idle connections come from the flood's own address.
func TestFloodDialsFromItsAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			got <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			c.Close()
		}
	}()
	f := &Flood{cfg: FloodConfig{SourceIP: "127.0.0.7"}}
	c, err := f.dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.7 here: %v", err)
	}
	defer c.Close()
	if ip := <-got; ip != "127.0.0.7" {
		t.Fatalf("dialed from %s", ip)
	}
}
