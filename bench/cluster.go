package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ClusterOptions describe a local cluster: Nodes `leasehold server`
// processes of Binary on loopback, each with its own data directory.
type ClusterOptions struct {
	// Binary is the leasehold executable. Required.
	Binary string
	// Nodes is 1, 3 or 5. Default 3.
	Nodes int
	// Dir holds the nodes' data, config and logs. Default: a temporary
	// directory, removed by Stop.
	Dir string
	// The executor timings, in seconds. Defaults 1, 5 and 15.
	RenewSeconds, GraceSeconds, TolerationSeconds float64
	// LogLevel of the nodes' logs (each in Dir/node-N.log). Default warn.
	LogLevel string
	// ReadyTimeout bounds the wait for a leader every node agrees on.
	// Default 30s.
	ReadyTimeout time.Duration
	// LogStore is [raft] log_store of every node; empty keeps the
	// server's default.
	LogStore string
	// Token, when set, turns on authentication: the nodes accept it as an
	// admin token, and every call must carry it.
	Token string
	// Pprof serves the nodes' Go profiles at /debug/pprof/ (to admins:
	// anyone when Token is empty), which scale reads the heap from.
	Pprof bool
	// ServerRaftTimeouts keeps the server's own Raft timeouts instead of
	// the bench's short ones (raftTOML), as scale does: it measures the
	// service as deployed, not a failover.
	ServerRaftTimeouts bool
}

// raftTOML is every node's config file. The Raft timeouts are the
// server's defaults, so failover is measured as shipped.
const raftTOML = `# written by leasehold bench
[raft]
`

// LocalCluster is a cluster of server processes this package started.
type LocalCluster struct {
	dir     string
	ownDir  bool
	nodes   []*serverProc
	probe   *probe
	stopped sync.Once
}

type serverProc struct {
	id       string
	apiAddr  string
	raftAddr string
	logPath  string
	binary   string
	args     []string // what Restart starts it with again
	cmd      *exec.Cmd
	done     chan struct{} // closed once the process has been waited for
	killed   atomic.Bool   // killed by Kill: its exit is not a failure
}

func (s *serverProc) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// StartCluster starts the servers and waits until every node is ready and
// names the same leader. On error nothing is left running.
func StartCluster(ctx context.Context, o ClusterOptions) (*LocalCluster, error) {
	o = o.withDefaults()
	if o.Binary == "" {
		return nil, fmt.Errorf("%w: ClusterOptions.Binary is empty", ErrInvalidConfig)
	}
	if o.Nodes != 1 && o.Nodes != 3 && o.Nodes != 5 {
		return nil, fmt.Errorf("%w: Nodes %d: 1, 3 or 5", ErrInvalidConfig, o.Nodes)
	}
	c := &LocalCluster{dir: o.Dir, probe: &probe{http: &http.Client{}, scheme: "http"}}
	if c.dir == "" {
		dir, err := os.MkdirTemp("", "leasehold-bench-")
		if err != nil {
			return nil, err
		}
		c.dir, c.ownDir = dir, true
	}
	if err := c.start(ctx, o); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (o ClusterOptions) withDefaults() ClusterOptions {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.RenewSeconds == 0 {
		o.RenewSeconds = 1
	}
	if o.GraceSeconds == 0 {
		o.GraceSeconds = 5
	}
	if o.TolerationSeconds == 0 {
		o.TolerationSeconds = 15
	}
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	return o
}

func (c *LocalCluster) start(ctx context.Context, o ClusterOptions) error {
	cfg := raftTOML
	if o.ServerRaftTimeouts {
		cfg = "# written by leasehold bench\n[raft]\n"
	}
	if o.LogStore != "" {
		cfg += fmt.Sprintf("log_store = %q\n", o.LogStore)
	}
	if o.Token != "" {
		cfg += fmt.Sprintf("\n[[auth.tokens]]\nname = \"bench\"\ntoken = %q\nrole = \"admin\"\n", o.Token)
		c.probe.token = o.Token
	}
	cfgPath := filepath.Join(c.dir, "leasehold.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}
	addrs, err := freeAddrs(2 * o.Nodes)
	if err != nil {
		return err
	}
	var joins []string
	for i := range o.Nodes {
		n := &serverProc{id: fmt.Sprintf("node-%d", i+1), apiAddr: addrs[2*i], raftAddr: addrs[2*i+1], done: make(chan struct{})}
		n.logPath = filepath.Join(c.dir, n.id+".log")
		c.nodes = append(c.nodes, n)
		joins = append(joins, n.raftAddr)
	}
	secs := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	for _, n := range c.nodes {
		args := []string{"server", "--config", cfgPath, "--node-id", n.id, "--data-dir", filepath.Join(c.dir, n.id),
			"--raft-bind", n.raftAddr, "--api-bind", n.apiAddr, "--bootstrap-expect", strconv.Itoa(o.Nodes),
			"--renew-seconds", secs(o.RenewSeconds), "--grace-seconds", secs(o.GraceSeconds),
			"--toleration-seconds", secs(o.TolerationSeconds), "--log-level", o.LogLevel}
		if o.Nodes > 1 {
			args = append(args, "--join", strings.Join(joins, ","))
		}
		if o.Pprof {
			args = append(args, "--pprof")
		}
		n.binary, n.args = o.Binary, args
		if err := c.spawn(n); err != nil {
			return err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
	defer cancel()
	_, err = c.waitReady(rctx)
	return err
}

func (c *LocalCluster) spawn(n *serverProc) error {
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	n.done = make(chan struct{})
	n.killed.Store(false)
	n.cmd = exec.Command(n.binary, n.args...)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.Env = serverEnv()
	n.cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group: Ctrl-C on the terminal reaches the bench,
		// which stops the servers in order, not the servers directly.
		Setpgid: true,
		// Should the bench itself be killed, the servers die with it.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := n.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%w: %s: %v", ErrClusterStart, n.id, err)
	}
	go func() {
		n.cmd.Wait()
		logf.Close()
		close(n.done)
	}()
	return nil
}

// serverEnv is this process's environment without LEASEHOLD_* variables:
// the bench's flags say how the servers run, not the operator's shell.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			env = append(env, kv)
		}
	}
	return env
}

// freeAddrs returns n distinct loopback addresses whose ports were free a
// moment ago, avoiding `leasehold dev`'s.
func freeAddrs(n int) ([]string, error) {
	var out []string
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l) // held open until all are picked: no duplicates
		port := l.Addr().(*net.TCPAddr).Port
		if port >= 7701 && port <= 7713 {
			continue
		}
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// Endpoints are the API addresses of every node, killed ones included, in
// node order (node-1 first).
func (c *LocalCluster) Endpoints() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.apiAddr
	}
	return out
}

// NodeIDs are the nodes' ids, in node order.
func (c *LocalCluster) NodeIDs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.id
	}
	return out
}

// PIDs returns the process id of each node, 0 for one that exited.
func (c *LocalCluster) PIDs() []int {
	out := make([]int, len(c.nodes))
	for i, n := range c.nodes {
		if n.cmd != nil && n.cmd.Process != nil && !n.exited() {
			out[i] = n.cmd.Process.Pid
		}
	}
	return out
}

// Dir is where the nodes' data, config and logs are.
func (c *LocalCluster) Dir() string { return c.dir }

// waitReady polls /readyz until every running node is ready and names the
// same leader, a running node, and returns its index. A node that exits
// meanwhile fails the wait with the tail of its log.
func (c *LocalCluster) waitReady(ctx context.Context) (int, error) {
	var last error
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		for _, n := range c.nodes {
			if n.exited() && !n.killed.Load() {
				return -1, fmt.Errorf("%w: %s exited (%v); its log:\n%s", ErrClusterStart, n.id, n.cmd.ProcessState, tailFile(n.logPath))
			}
		}
		leader, err := c.agreedLeader(ctx)
		if err == nil {
			return leader, nil
		}
		last = err
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return -1, fmt.Errorf("%w: no leader every node agrees on: %v", ErrClusterStart, last)
		}
	}
}

// WaitReady waits until every running node is ready and agrees on the
// leader, and returns the leader's index.
func (c *LocalCluster) WaitReady(ctx context.Context) (int, error) { return c.waitReady(ctx) }

func (c *LocalCluster) agreedLeader(ctx context.Context) (int, error) {
	leader := -1
	for _, n := range c.nodes {
		if n.exited() {
			continue
		}
		r, err := c.probe.ready(ctx, n.apiAddr)
		if err != nil {
			return -1, err
		}
		if !r.Ready || r.LeaderAPI == "" {
			return -1, fmt.Errorf("%s not ready (state %s)", n.id, r.State)
		}
		l := c.index(r.LeaderAPI)
		if l < 0 || c.nodes[l].exited() {
			return -1, fmt.Errorf("%s names leader %s, not a running node", n.id, r.LeaderAPI)
		}
		if leader >= 0 && leader != l {
			return -1, fmt.Errorf("nodes disagree on the leader: %s and %s", c.nodes[leader].id, c.nodes[l].id)
		}
		leader = l
	}
	if leader < 0 {
		return -1, errors.New("no node running")
	}
	return leader, nil
}

func (c *LocalCluster) index(apiAddr string) int {
	for i, n := range c.nodes {
		if n.apiAddr == apiAddr {
			return i
		}
	}
	return -1
}

// Leader returns the index of the node that every running node names as
// leader, waiting for one until ctx ends.
func (c *LocalCluster) Leader(ctx context.Context) (int, error) { return c.waitReady(ctx) }

// Kill sends SIGKILL to node i, as a crash: no leadership handover, no
// flush. It returns when the process has been reaped.
func (c *LocalCluster) Kill(i int) error {
	n := c.nodes[i]
	if n.exited() {
		return fmt.Errorf("%s already exited", n.id)
	}
	n.killed.Store(true)
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-n.done
	return nil
}

// Restart starts node i again, after Kill, with its data directory and
// flags as before; its log goes on in the same file. It returns once the
// process runs: WaitReady, or the node's /readyz, says when it serves.
// It must not run concurrently with other calls about node i.
func (c *LocalCluster) Restart(i int) error {
	n := c.nodes[i]
	if !n.exited() {
		return fmt.Errorf("%s is running", n.id)
	}
	return c.spawn(n)
}

// Stop stops every server (SIGTERM, then SIGKILL after 10s), waits for
// them, and removes the directory if StartCluster made it. It is safe to
// call more than once.
func (c *LocalCluster) Stop() {
	c.stopped.Do(func() {
		var wg sync.WaitGroup
		for _, n := range c.nodes {
			if n.cmd == nil || n.cmd.Process == nil {
				continue
			}
			wg.Go(func() {
				if !n.exited() {
					n.cmd.Process.Signal(syscall.SIGTERM)
				}
				t := time.NewTimer(10 * time.Second)
				defer t.Stop()
				select {
				case <-n.done:
				case <-t.C:
					n.cmd.Process.Kill()
					<-n.done
				}
			})
		}
		wg.Wait()
		if c.ownDir {
			os.RemoveAll(c.dir)
		}
	})
}

// Logs returns the tail of every node's log, for a failure report.
func (c *LocalCluster) Logs() string {
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
	const max = 4 << 10
	if len(b) > max {
		b = append([]byte("..."), b[len(b)-max:]...)
	}
	return string(b)
}
