package main

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A dev node whose API or Raft port another process holds fails with the
// hint, found through the error chain of the real bind failure; an error
// that merely quotes the words gets no hint.
func TestPortTakenHint(t *testing.T) {
	const hint = "is another leasehold dev running?"
	for _, port := range []string{"api", "raft"} {
		t.Run(port, func(t *testing.T) {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			cfg := defaultServerConfig()
			cfg.NodeID, cfg.DataDir = "node-1", t.TempDir()
			// Bound to any free port; the advertised address is never dialed.
			cfg.RaftBind, cfg.APIBind, cfg.APIAdvertise = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:7701"
			if port == "api" {
				cfg.APIBind = taken.Addr().String()
			} else {
				cfg.RaftBind = taken.Addr().String()
			}
			n, err := startNode(cfg, hclog.NewNullLogger())
			if err == nil {
				n.stop(10 * time.Second)
				t.Fatalf("started on a taken %s port", port)
			}
			err = portTakenHint(err)
			if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), port+" port") || !strings.Contains(err.Error(), hint) {
				t.Fatalf("taken %s port: %v", port, err)
			}
		})
	}

	quoted := errors.New(`raft_advertise "x": address already in use`)
	if err := portTakenHint(quoted); err != quoted {
		t.Fatalf("an error quoting the words: %v", err)
	}
}
