package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options describe a local cluster: Nodes `leasehold server` processes on
// loopback, node-1 to node-N, each with its own data directory.
type Options struct {
	// Binary is the leasehold executable. Required.
	Binary string
	// BinaryOf, when set and not "" for a node id, is that node's binary
	// instead (an older build in a mixed cluster).
	BinaryOf func(id string) string
	// Nodes is how many, at least 1. Default 3.
	Nodes int
	// Dir holds the nodes' config, data (Dir/ID) and logs (Dir/ID.log).
	// Default: a temporary directory, removed by Stop.
	Dir string
	// Config is every node's configuration file, TOML.
	Config string
	// Args are more server flags for every node, after the launcher's
	// (--config, --node-id, --data-dir, the ports, --bootstrap-expect,
	// --join), so they override the file.
	Args []string
	// ReadyTimeout bounds Start's wait for a leader every node agrees on.
	// Default 30s.
	ReadyTimeout time.Duration
}

// Cluster is a cluster of server processes this package started.
type Cluster struct {
	dir     string
	ownDir  bool
	http    *http.Client // reads /readyz
	stopped sync.Once

	mu    sync.Mutex // guards each node's proc and killed
	nodes []*node
}

type node struct {
	id, raftAddr, apiAddr string
	binary, logPath       string
	args                  []string // after the port flags; the same on every start
	proc                  *Process
	killed                bool // by Kill or Upgrade: its exit is not a failure
}

// Start starts the servers and waits until every node is ready and names
// the same leader. On error nothing is left running.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.Binary == "" {
		return nil, errors.New("localcluster: Options.Binary is empty")
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	c := &Cluster{dir: o.Dir, http: &http.Client{Transport: &http.Transport{}}}
	if c.dir == "" {
		dir, err := os.MkdirTemp("", "leasehold-cluster-")
		if err != nil {
			return nil, err
		}
		c.dir, c.ownDir = dir, true
	}
	if err := c.start(o); err != nil {
		c.Stop()
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
	defer cancel()
	if _, err := c.WaitReady(rctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(o Options) error {
	cfgPath := filepath.Join(c.dir, "leasehold.toml")
	if err := os.WriteFile(cfgPath, []byte(o.Config), 0o600); err != nil {
		return err
	}
	// Every node's ports are bound before the first starts: each node's
	// --join names them all.
	var ports []*Ports
	defer func() {
		for _, p := range ports {
			p.Close()
		}
	}()
	var joins []string
	for range o.Nodes {
		p, err := BindPorts()
		if err != nil {
			return err
		}
		ports = append(ports, p)
		joins = append(joins, p.RaftAddr())
	}
	for i, p := range ports {
		id := "node-" + strconv.Itoa(i+1)
		n := &node{id: id, raftAddr: p.RaftAddr(), apiAddr: p.APIAddr(), binary: o.Binary, logPath: filepath.Join(c.dir, id+".log")}
		if o.BinaryOf != nil && o.BinaryOf(id) != "" {
			n.binary = o.BinaryOf(id)
		}
		n.args = []string{"--config", cfgPath, "--node-id", id, "--data-dir", filepath.Join(c.dir, id),
			"--bootstrap-expect", strconv.Itoa(o.Nodes)}
		if o.Nodes > 1 {
			n.args = append(n.args, "--join", strings.Join(joins, ","))
		}
		n.args = append(n.args, o.Args...)
		c.nodes = append(c.nodes, n)
		if err := c.spawn(n, p); err != nil {
			return err
		}
	}
	return nil
}

// spawn starts n on ports, its output appended to its log. The caller
// closes ports.
func (c *Cluster) spawn(n *node, ports *Ports) error {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	portFlags := []string{"--raft-bind", ports.RaftAddr(), "--api-bind", ports.APIAddr()}
	if InheritsPorts(n.binary) {
		var err error
		if files, err = ports.Files(); err != nil {
			return err
		}
		portFlags = ports.Flags()
	} else {
		// A build from before --raft-fd binds its addresses itself: the
		// one case of a port released a moment before its node binds it.
		ports.Close()
	}
	log, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	// The child has its own copy of the log file.
	defer log.Close()
	argv := append(append([]string{n.binary, "server"}, portFlags...), n.args...)
	p, err := StartProcess(ProcessConfig{Argv: argv, Stdout: log, Stderr: log, Files: files})
	if err != nil {
		return fmt.Errorf("localcluster: %s: %w", n.id, err)
	}
	c.mu.Lock()
	n.proc, n.killed = p, false
	c.mu.Unlock()
	return nil
}

var inherits sync.Map // binary path → bool

// InheritsPorts reports whether binary's `server` takes inherited sockets
// (--raft-fd, --api-fd), which builds from before them (an older node in
// a mixed cluster) do not. It asks the binary's help once per path.
func InheritsPorts(binary string) bool {
	if v, ok := inherits.Load(binary); ok {
		return v.(bool)
	}
	out, _ := exec.Command(binary, "server", "--help").Output()
	yes := bytes.Contains(out, []byte("--raft-fd"))
	inherits.Store(binary, yes)
	return yes
}

// Endpoints are the API addresses of every node, killed ones included, in
// node order (node-1 first).
func (c *Cluster) Endpoints() []string { return c.each(func(n *node) string { return n.apiAddr }) }

// RaftAddrs are the nodes' Raft addresses, in node order.
func (c *Cluster) RaftAddrs() []string { return c.each(func(n *node) string { return n.raftAddr }) }

// NodeIDs are the nodes' ids, in node order.
func (c *Cluster) NodeIDs() []string { return c.each(func(n *node) string { return n.id }) }

func (c *Cluster) each(f func(*node) string) []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = f(n)
	}
	return out
}

// PIDs returns the process id of each node, 0 for one that exited.
func (c *Cluster) PIDs() []int {
	out := make([]int, len(c.nodes))
	for i := range c.nodes {
		if p := c.proc(i); p != nil && !p.Exited() {
			out[i] = p.Pid()
		}
	}
	return out
}

// Exited reports whether node i's process has exited (killed or not).
func (c *Cluster) Exited(i int) bool {
	p := c.proc(i)
	return p == nil || p.Exited()
}

// Dir is where the nodes' config, data and logs are.
func (c *Cluster) Dir() string { return c.dir }

func (c *Cluster) proc(i int) *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].proc
}

func (c *Cluster) index(apiAddr string) int {
	for i, n := range c.nodes {
		if n.apiAddr == apiAddr {
			return i
		}
	}
	return -1
}

// Kill sends SIGKILL to node i, as a crash: no leadership handover, no
// flush. It returns when the process has been reaped.
func (c *Cluster) Kill(i int) error {
	n := c.nodes[i]
	c.mu.Lock()
	p := n.proc
	if p == nil || p.Exited() {
		c.mu.Unlock()
		return fmt.Errorf("localcluster: %s is not running", n.id)
	}
	n.killed = true
	c.mu.Unlock()
	p.Kill()
	return nil
}

// Restart starts node i again, after Kill, on its addresses, with its
// data directory and flags as before; its log goes on in the same file.
// It returns once the process runs: WaitReady says when it serves. It
// must not run concurrently with other calls about node i.
func (c *Cluster) Restart(i int) error {
	n := c.nodes[i]
	if !c.Exited(i) {
		return fmt.Errorf("localcluster: %s is running", n.id)
	}
	ports, err := BindPortsAt(n.raftAddr, n.apiAddr)
	if err != nil {
		return fmt.Errorf("localcluster: restart %s: %w", n.id, err)
	}
	defer ports.Close()
	return c.spawn(n, ports)
}

// Upgrade stops node i in order (SIGTERM, up to grace, then SIGKILL) and
// starts it again on binary, with the same data and flags: an upgrade in
// place.
func (c *Cluster) Upgrade(i int, binary string, grace time.Duration) error {
	n := c.nodes[i]
	c.mu.Lock()
	p := n.proc
	n.killed = true
	c.mu.Unlock()
	p.Stop(grace)
	n.binary = binary
	return c.Restart(i)
}

// Stop stops every server (SIGTERM, then SIGKILL after 10s), waits for
// them, and removes the directory if Start made it. It is safe to call
// more than once.
func (c *Cluster) Stop() {
	c.stopped.Do(func() {
		var wg sync.WaitGroup
		for i, n := range c.nodes {
			p := c.proc(i)
			if p == nil {
				continue
			}
			c.mu.Lock()
			n.killed = true
			c.mu.Unlock()
			wg.Go(func() { p.Stop(10 * time.Second) })
		}
		wg.Wait()
		c.http.CloseIdleConnections()
		if c.ownDir {
			os.RemoveAll(c.dir)
		}
	})
}

// Log is the tail of node i's log.
func (c *Cluster) Log(i int) string { return tailFile(c.nodes[i].logPath) }

// Logs returns the tail of every node's log, for a failure report.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "--- %s (%s):\n%s\n", n.id, n.logPath, tailFile(n.logPath))
	}
	return b.String()
}

func tailFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	const max = 8 << 10
	if len(b) > max {
		b = append([]byte("..."), b[len(b)-max:]...)
	}
	return string(b)
}
