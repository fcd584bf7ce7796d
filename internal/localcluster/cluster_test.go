package localcluster_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/localcluster"
	"github.com/leasehold/leasehold/internal/testbin"
	"github.com/leasehold/leasehold/internal/testwait"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// fast are Raft timeouts that keep elections short.
const fast = "[raft]\nheartbeat_timeout = \"300ms\"\nelection_timeout = \"300ms\"\nleader_lease_timeout = \"150ms\"\n"

// A cluster starts on ports bound before the nodes started, elects a
// leader every node names, survives the leader's kill, takes the node back
// on its old addresses, and leaves nothing running after Stop.
func TestClusterKillRestartStop(t *testing.T) {
	c, err := localcluster.Start(t.Context(), localcluster.Options{Binary: testbin.Leasehold(t), Dir: t.TempDir(), Config: fast,
		ReadyTimeout: testwait.Bound(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	testbin.KillAtEnd(t, c)
	eps := c.Endpoints()
	if len(eps) != 3 || len(c.NodeIDs()) != 3 || c.NodeIDs()[0] != "node-1" {
		t.Fatalf("endpoints %v, ids %v", eps, c.NodeIDs())
	}
	for _, a := range append(eps, c.RaftAddrs()...) {
		// Served by the node: binding it again fails.
		if l, err := net.Listen("tcp", a); err == nil {
			l.Close()
			t.Errorf("%s is free: no node serves on it", a)
		}
	}
	ctx := testwait.Context(t, 30*time.Second)
	leader, err := c.WaitReady(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	if pids := c.PIDs(); pids[leader] != 0 || !c.Exited(leader) {
		t.Errorf("killed node: pid %d, exited %v", pids[leader], c.Exited(leader))
	}
	next, err := c.WaitReady(ctx)
	if err != nil || next == leader {
		t.Fatalf("after the leader's kill: leader %d (killed %d), %v", next, leader, err)
	}
	if err := c.Kill(leader); err == nil {
		t.Error("a killed node was killed again")
	}
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(leader); err == nil {
		t.Error("a running node was restarted")
	}
	if _, err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if pids := c.PIDs(); pids[leader] == 0 {
		t.Errorf("the restarted node has no process: %v", pids)
	}
	c.Stop()
	for i := range eps {
		if !c.Exited(i) {
			t.Errorf("node %d runs after Stop", i)
		}
	}
}

// A node that exits on its own (here, a flag it refuses) fails the start
// at once, with its log, instead of the ready wait running out.
func TestStartFailsWithTheLogOfANodeThatExits(t *testing.T) {
	start := time.Now()
	_, err := localcluster.Start(t.Context(), localcluster.Options{Binary: testbin.Leasehold(t), Nodes: 1, Dir: t.TempDir(),
		Args: []string{"--log-level", "loud"}, ReadyTimeout: testwait.Bound(30 * time.Second)})
	if err == nil || !strings.Contains(err.Error(), "node-1 exited") || !strings.Contains(err.Error(), "log_level") {
		t.Fatalf("Start: %v, want node-1's exit and its log", err)
	}
	if time.Since(start) > testwait.Bound(20*time.Second) {
		t.Errorf("the failure took %s", time.Since(start))
	}
}

func TestBindPorts(t *testing.T) {
	p, err := localcluster.BindPorts()
	if err != nil {
		t.Fatal(err)
	}
	raft, api := p.RaftAddr(), p.APIAddr()
	if raft == api || !strings.HasPrefix(raft, "127.0.0.1:") {
		t.Errorf("ports %s and %s", raft, api)
	}
	// Held: nobody else may take them.
	if _, err := localcluster.BindPortsAt(raft, api); err == nil {
		t.Error("a bound port was bound again")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := localcluster.BindPortsAt(raft, api)
	if err != nil {
		t.Fatalf("the released addresses: %v", err)
	}
	again.Close()
}

// Env keeps LEASEHOLD_* variables from children.
func TestEnv(t *testing.T) {
	t.Setenv("LEASEHOLD_ENDPOINTS", "127.0.0.1:7701")
	env := localcluster.Env("X=1")
	for _, kv := range env {
		if strings.HasPrefix(kv, "LEASEHOLD_") {
			t.Errorf("%s passed to a child", kv)
		}
	}
	if env[len(env)-1] != "X=1" {
		t.Errorf("extra not last: %v", env[len(env)-1])
	}
}

// The binary under test takes inherited sockets; a build that does not
// say --raft-fd in its help is given addresses to bind instead.
func TestInheritsPorts(t *testing.T) {
	if !localcluster.InheritsPorts(testbin.Leasehold(t)) {
		t.Error("the binary under test does not take --raft-fd")
	}
	old := filepath.Join(t.TempDir(), "leasehold-old")
	if err := os.WriteFile(old, []byte("#!/bin/sh\necho 'leasehold server [--raft-bind value]'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if localcluster.InheritsPorts(old) {
		t.Error("a build without --raft-fd is said to take it")
	}
}
