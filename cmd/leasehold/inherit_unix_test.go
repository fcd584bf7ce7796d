//go:build unix

package main

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// dupFD is a descriptor of its own for f, as a child inherits one:
// inheritListeners takes and closes it.
func dupFD(t *testing.T, f *os.File) int {
	t.Helper()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestInheritListeners: a socket passed as a file descriptor is served on,
// its address replacing the bind address; a descriptor that is not a
// listening TCP socket is refused.
func TestInheritListeners(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lnFile, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer lnFile.Close()
	cfg := defaultServerConfig()
	if err := cfg.inheritListeners(0, dupFD(t, lnFile)); err != nil {
		t.Fatal(err)
	}
	defer cfg.apiListener.Close()
	if cfg.raftListener != nil || cfg.RaftBind != defaultServerConfig().RaftBind {
		t.Errorf("no --raft-fd, yet the Raft port changed: %v %s", cfg.raftListener, cfg.RaftBind)
	}
	if cfg.APIBind != ln.Addr().String() || cfg.apiListener.Addr().String() != ln.Addr().String() {
		t.Errorf("api bind %s, listener %v, want %s", cfg.APIBind, cfg.apiListener.Addr(), ln.Addr())
	}

	file, err := os.CreateTemp(t.TempDir(), "not-a-socket")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for fd, want := range map[int]string{2: "stdin, stdout and stderr", dupFD(t, file): "--raft-fd"} {
		cfg := defaultServerConfig()
		if err := cfg.inheritListeners(fd, 0); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--raft-fd %d: %v, want an error saying %q", fd, err, want)
		}
	}
}
