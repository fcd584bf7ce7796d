package netem

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// helperEnv makes the test binary an echo server on the address it names
// (run inside a node's namespace by TestNetnsPartition).
const helperEnv = "NETEM_ECHO_HELPER"

func echoHelper() int {
	ln, err := net.Listen("tcp", os.Getenv(helperEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("listening")
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

func requireNetns(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("netns tests build namespaces: not with -short")
	}
	if !NetnsAvailable() {
		t.Skip("needs root, ip and iptables")
	}
}

// A node in its namespace is reachable from a worker's address on the
// bridge; a DROP rule cuts exactly that worker; HealAll and Close undo
// everything.
func TestNetnsPartition(t *testing.T) {
	requireNetns(t)
	n, err := NewNetns(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := n.NodeCommand(1, []string{self, "-test.run=^$"})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), helperEnv+"="+n.APIBind(1))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	buf := make([]byte, 10)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "listening\n" {
		t.Fatalf("helper: %q %v", buf, err)
	}

	dial := func(w int) error {
		d := net.Dialer{Timeout: 300 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: net.ParseIP(n.WorkerIP(w))}}
		c, err := d.Dial("tcp", n.APIAddr(1))
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(c, "x"); err != nil {
			return err
		}
		b := make([]byte, 1)
		_, err = io.ReadFull(c, b)
		return err
	}
	if err := dial(1); err != nil {
		t.Fatalf("worker 1 to node 1: %v", err)
	}
	if err := n.Block("w1", "n1"); err != nil {
		t.Fatal(err)
	}
	if err := n.Block("w1", "n1"); err != nil { // twice is once
		t.Fatal(err)
	}
	if err := dial(1); err == nil {
		t.Fatalf("worker 1 reached node 1 through a DROP rule")
	}
	if err := dial(2); err != nil {
		t.Fatalf("worker 2 was cut too: %v", err)
	}
	if err := n.Unblock("w1", "n1"); err != nil {
		t.Fatal(err)
	}
	if err := dial(1); err != nil {
		t.Fatalf("after unblock: %v", err)
	}
	if err := n.Block("n1", "w1"); err != nil { // the answers only
		t.Fatal(err)
	}
	if err := dial(1); err == nil {
		t.Fatalf("a one-way cut let the answer through")
	}
	if err := n.HealAll(); err != nil {
		t.Fatal(err)
	}
	if err := dial(1); err != nil {
		t.Fatalf("after HealAll: %v", err)
	}
	if err := n.Shape("w1", "n1", time.Second, 0, 0); err == nil {
		t.Fatalf("delay accepted in netns mode")
	}

	cmd.Process.Kill()
	cmd.Wait()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	nss, links, err := ownedNames()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append(nss, links...) {
		if strings.HasPrefix(name, n.prefix) {
			t.Fatalf("%s left behind", name)
		}
	}
}

// Leftovers of a run whose process is gone are removed; a live run's are
// not.
func TestCleanLeftovers(t *testing.T) {
	requireNetns(t)
	dead := deadPID(t)
	stale := Prefix + strconv.FormatInt(int64(dead), 36) + "-br"
	live := Prefix + strconv.FormatInt(int64(os.Getpid()), 36) + "-br"
	for _, name := range []string{stale, live} {
		if err := run("ip", "link", "add", name, "type", "bridge"); err != nil {
			t.Fatal(err)
		}
	}
	defer run("ip", "link", "del", live)
	defer run("ip", "link", "del", stale)
	if err := CleanLeftovers(); err != nil {
		t.Fatal(err)
	}
	_, links, err := ownedNames()
	if err != nil {
		t.Fatal(err)
	}
	has := func(name string) bool {
		for _, l := range links {
			if l == name {
				return true
			}
		}
		return false
	}
	if has(stale) || !has(live) {
		t.Fatalf("after cleaning: %v (stale %s, live %s)", links, stale, live)
	}
}

// deadPID is the id of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestOwnerOf(t *testing.T) {
	for name, want := range map[string]string{
		"lhj2bv-br": "lhj2bv-", "lhj2bv-n12": "lhj2bv-", "lhj2bv-v1": "lhj2bv-", "lhj2bv-p3": "lhj2bv-",
		"lhj2bv-x1": "", "lhj-br": "", "eth0": "",
	} {
		got, _, ok := ownerOf(name)
		if got != want || ok != (want != "") {
			t.Fatalf("ownerOf(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}
