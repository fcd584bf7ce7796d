package runner

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/localcluster"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/jepsen-lite/nemesis"
	"github.com/leasehold/leasehold/jepsen-lite/netem"
	"github.com/leasehold/leasehold/jepsen-lite/outsider"
	"github.com/leasehold/leasehold/jepsen-lite/workload"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// cluster is the run's processes and network, as the nemesis and the
// runner see them. It implements nemesis.Cluster.
type cluster struct {
	cfg     Config
	net     netem.Network
	secrets *secrets // nil unless cfg.Secure
	nodes   []*proc
	// workers are filled in once the sinks serve; shells too (the shell
	// workers, `leasehold worker run`).
	workers []*proc
	shells  []*proc
	http    *http.Client // the runner's, from its own address
	// The runner's clients, each with the least role that does its job
	// (in a secure run; otherwise all are open): client for the
	// submitters, the sinks' fence checks and the runner's own reads
	// (submitter); reader for the reader alone (submitter), a client that
	// only reads, so only its reads' answers move it between nodes;
	// workerClient for the reporter and the stale writer, which act as
	// workers (worker); admin for transfers.
	client, reader, workerClient, admin *client.Client
	// stubs per node, for questions about one node (not followed to
	// the leader), with the submitter's token.
	status []leaseholdv1connect.ClusterServiceClient
	jobs   []leaseholdv1connect.JobServiceClient
	events []leaseholdv1connect.EventServiceClient
	// outsider attacks the nodes in the outsider family's faults; nil
	// when the run has none.
	outsider *outsider.Outsider
	// disks hold the nodes' data dirs in a run with disk faults; nil
	// otherwise.
	disks nodeDisks

	mu     sync.Mutex
	clocks map[string]*clockState // by node
}

var (
	_ nemesis.Cluster  = (*cluster)(nil)
	_ nemesis.Outsider = (*outsider.Outsider)(nil)
)

func (c *cluster) dir(parts ...string) string {
	return filepath.Join(append([]string{c.cfg.Out}, parts...)...)
}

// newCluster writes the nodes' configuration (and, for a secure run, its
// certificates and tokens) and makes their processes (not started). With
// disks, each node's data dir is on its own.
func newCluster(cfg Config, n netem.Network, disks nodeDisks) (*cluster, error) {
	c := &cluster{cfg: cfg, net: n, disks: disks}
	for _, d := range []string{c.dir("logs"), c.dir("data"), c.dir("clock")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	var clientTLS *tls.Config
	if cfg.Secure {
		s, err := makeSecrets(c.dir("pki"), n, cfg.Nodes)
		if err != nil {
			return nil, fmt.Errorf("runner: pki: %w", err)
		}
		c.secrets, clientTLS = s, s.clientTLS
	}
	c.http = workload.NewHTTPClient(n.RunnerIP(), clientTLS)
	t := cfg.Timings
	logStore := cfg.LogStore
	if logStore == "" {
		logStore = "wal"
	}
	// Small WAL segments: a run's data fits a small tmpfs (the disk
	// family), and a full disk shows at the next segment, not 64 MiB on.
	toml := fmt.Sprintf("[raft]\nheartbeat_timeout = %q\nelection_timeout = %q\nleader_lease_timeout = %q\n"+
		"log_store = %q\nwal_segment_bytes = %d\n\n"+
		"[plugins.executor]\nrenew_seconds = %g\ngrace_seconds = %g\ntoleration_seconds = %g\n",
		t.Heartbeat, t.Election, t.LeaderLease, logStore, 4<<20, t.Renew.Seconds(), t.Grace.Seconds(), t.Toleration.Seconds())
	var join []string
	for i := 1; i <= cfg.Nodes; i++ {
		join = append(join, n.RaftAddr(i))
	}
	scheme := "http://"
	if cfg.Secure {
		scheme = "https://"
		toml = fmt.Sprintf("cluster_name = %q\n\n", ClusterName) + toml
	}
	stubAuth := connect.WithInterceptors(bearer(c.token(roleSubmitter)))
	for i := 1; i <= cfg.Nodes; i++ {
		name := netem.NodeName(i)
		clock := c.dir("clock", name)
		if err := os.WriteFile(clock, []byte("0 1\n"), 0o644); err != nil {
			return nil, err
		}
		nodeTOML := toml
		if c.secrets != nil {
			nodeTOML += c.secrets.nodeTOML(i - 1)
		}
		// It may hold tokens.
		cfgPath := c.dir("leasehold-" + name + ".toml")
		if err := writeFile(cfgPath, []byte(nodeTOML), 0o600); err != nil {
			return nil, err
		}
		dataDir := c.dir("data", name)
		if d, ok := disks[name]; ok {
			dataDir = d.Data()
		}
		args := []string{cfg.Bin, "server", "--node-id", name, "--data-dir", dataDir,
			"--raft-bind", n.RaftBind(i), "--raft-advertise", n.RaftAddr(i), "--api-bind", n.APIBind(i),
			"--api-advertise", n.APIAddr(i), "--bootstrap-expect", strconv.Itoa(cfg.Nodes),
			"--join", strings.Join(join, ","), "--config", cfgPath, "--log-level", "info"}
		if !cfg.Secure {
			// A node on a namespace's address is exposed: without peer TLS
			// and API authentication it refuses to start unless told
			// --insecure. (Nodes behind the proxies bind loopback and would
			// start anyway; the flag says the same thing there.)
			args = append(args, "--insecure")
		}
		argv := n.NodeCommand(i, args)
		c.nodes = append(c.nodes, &proc{name: name, argv: func(int) []string { return argv },
			env: localcluster.Env("LEASEHOLD_CHAOS_CLOCK=" + clock), logPath: c.dir("logs", name+".log")})
		base := scheme + n.APIAddr(i)
		c.status = append(c.status, leaseholdv1connect.NewClusterServiceClient(c.http, base, stubAuth))
		c.jobs = append(c.jobs, leaseholdv1connect.NewJobServiceClient(c.http, base, stubAuth))
		c.events = append(c.events, leaseholdv1connect.NewEventServiceClient(c.http, base, stubAuth))
	}
	var errs []error
	for _, cl := range []struct {
		to   **client.Client
		role string
	}{{&c.client, roleSubmitter}, {&c.reader, roleSubmitter}, {&c.workerClient, roleWorker}, {&c.admin, roleAdmin}} {
		var err error
		*cl.to, err = c.newClient(cl.role, 2*time.Second)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// token is a role's token in a secure run, "" otherwise.
func (c *cluster) token(role string) string {
	if c.secrets == nil {
		return ""
	}
	return c.secrets.tokens[role]
}

// newClient is a client of the whole cluster from the runner's address,
// with role's token.
func (c *cluster) newClient(role string, callTimeout time.Duration) (*client.Client, error) {
	var conf *tls.Config
	if c.secrets != nil {
		conf = c.secrets.clientTLS
	}
	return client.New(client.Config{Endpoints: c.endpoints(), HTTPClient: c.http, TLS: conf, Token: c.token(role),
		CallTimeout: callTimeout, RetryBase: 20 * time.Millisecond, RetryMax: 500 * time.Millisecond})
}

// bearer sends token with every call of a generated client ("" sends
// nothing).
func bearer(token string) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if token != "" {
				req.Header().Set(transport.HeaderAuthorization, "Bearer "+token)
			}
			return next(ctx, req)
		}
	})
}

// configured is the membership the run sets up: every node, a voter.
func (c *cluster) configured() []history.Member {
	var out []history.Member
	for i := 1; i <= c.cfg.Nodes; i++ {
		out = append(out, history.Member{ID: netem.NodeName(i), RaftAddr: c.net.RaftAddr(i), APIAddr: c.net.APIAddr(i), Voter: true})
	}
	return out
}

func (c *cluster) endpoints() []string {
	var out []string
	for i := 1; i <= c.cfg.Nodes; i++ {
		out = append(out, c.net.APIAddr(i))
	}
	return out
}

// addWorkers makes the worker processes (not started). In a secure run
// each reads the CA and the worker token from files: a token on a command
// line would be in every log of a start.
func (c *cluster) addWorkers(self, sinkURL string) {
	t := c.cfg.Timings
	var secure []string
	if c.secrets != nil {
		secure = []string{"--ca-file", c.secrets.caFile, "--token-file", c.secrets.tokenFile(roleWorker)}
	}
	for w := 1; w <= c.cfg.Workers; w++ {
		id := netem.WorkerName(w)
		src := c.net.WorkerIP(w)
		argv := func(inc int) []string {
			proc := fmt.Sprintf("%s#%d", id, inc)
			return append([]string{self, "worker", "--id", id, "--process", proc, "--endpoints", strings.Join(c.endpoints(), ","),
				"--source", src, "--sink", sinkURL, "--history", c.dir(fmt.Sprintf("history-%s-%d.jsonl", id, inc)),
				"--concurrency", strconv.Itoa(c.cfg.Concurrency), "--poll-wait", (4 * t.Renew).String(),
				"--call-timeout", max(4*t.Renew, time.Second).String(), "--drain-timeout", (2 * t.Renew).String()}, secure...)
		}
		c.workers = append(c.workers, &proc{name: id, argv: argv, env: localcluster.Env(), logPath: c.dir("logs", id+".log")})
	}
}

// ShellName names shell worker s (1-based).
func ShellName(s int) string { return "s" + strconv.Itoa(s) }

// addShellWorkers makes the shell worker processes (not started): `worker
// run` of the chaos build, each with a state directory of its own under
// the run's (state/ID, kept across its restarts, so a restarted one
// re-attaches), running jepsen-lite shell-job for each job. They dial the
// cluster from the runner's address (the CLI binds no source address): no
// network fault of a run names them. In a secure run the token goes in the
// environment, not on the command line.
func (c *cluster) addShellWorkers(self, sinkURL string) error {
	t := c.cfg.Timings
	var secure []string
	env := localcluster.Env()
	if c.secrets != nil {
		secure = []string{"--ca-file", c.secrets.caFile}
		env = localcluster.Env("LEASEHOLD_TOKEN=" + c.token(roleWorker))
	}
	for s := 1; s <= c.cfg.ShellWorkers; s++ {
		id := ShellName(s)
		state := c.dir("state", id)
		if err := os.MkdirAll(state, 0o700); err != nil {
			return err
		}
		argv := append(append([]string{c.cfg.Bin, "worker", "run", "--id", id, "--endpoints", strings.Join(c.endpoints(), ","),
			"--queue", workload.QueueMain, "--kind", strings.Join([]string{workload.KindShort, workload.KindLong, workload.KindRun}, ","),
			"--concurrency", strconv.Itoa(c.cfg.Concurrency), "--state-dir", state,
			"--kill-after", time.Second.String(), "--drain", (2 * t.Renew).String()}, secure...),
			"--", self, "shell-job", "--history-dir", c.cfg.Out, "--sink", sinkURL,
			"--deadline-file", filepath.Join(state, "deadline"), "--renew", t.Renew.String(), "--toleration", t.Toleration.String())
		c.shells = append(c.shells, &proc{name: id, argv: func(int) []string { return argv }, env: env,
			logPath: c.dir("logs", id+".log")})
	}
	return nil
}

// ShellWorkers are the shell workers' ids.
func (c *cluster) ShellWorkers() []string {
	var out []string
	for _, p := range c.shells {
		out = append(out, p.name)
	}
	return out
}

func (c *cluster) Nodes() []string {
	var out []string
	for _, p := range c.nodes {
		out = append(out, p.name)
	}
	return out
}

func (c *cluster) Workers() []string {
	var out []string
	for _, p := range c.workers {
		out = append(out, p.name)
	}
	return out
}

func (c *cluster) Net() nemesis.Net { return c.net }

// Outsider is the run's outsider, if it has one.
func (c *cluster) Outsider() nemesis.Outsider {
	if c.outsider == nil {
		return nil
	}
	return c.outsider
}

// startOutsider puts the outsider on its own address: its peer port and
// its capture server listen from now until the nodes have stopped, so a
// connection to the capture server at any time is recorded.
func (c *cluster) startOutsider(rec *history.Recorder, log hclog.Logger) error {
	var cert *tls.Config
	if c.secrets != nil {
		var err error
		if cert, err = c.secrets.outsiderTLS(); err != nil {
			return err
		}
	}
	var nodes []outsider.Node
	for _, m := range c.configured() {
		nodes = append(nodes, outsider.Node{ID: m.ID, RaftAddr: m.RaftAddr, APIAddr: m.APIAddr})
	}
	o, err := outsider.New(outsider.Config{IP: c.net.OutsiderIP(), RaftPort: netem.RaftPort, CapturePort: netem.APIPort,
		Nodes: nodes, Leader: c.Leader, ClientCert: cert, Rec: rec, Logger: log.Named("outsider")})
	if err != nil {
		return err
	}
	c.outsider = o
	return nil
}

// startFlood starts the flood beside the load, from its own address, with
// its own token in a secure run.
func (c *cluster) startFlood(ctx context.Context, rec *history.Recorder, log hclog.Logger) (*workload.Flood, error) {
	var conf *tls.Config
	if c.secrets != nil {
		conf = c.secrets.clientTLS
	}
	var nodes []workload.FloodTarget
	for i := 1; i <= c.cfg.Nodes; i++ {
		nodes = append(nodes, workload.FloodTarget{Name: netem.NodeName(i), Addr: c.net.APIAddr(i)})
	}
	return workload.StartFlood(ctx, workload.FloodConfig{Rec: rec, SourceIP: c.net.FloodIP(), Nodes: nodes, TLS: conf,
		Token: c.token(roleFlood), Workers: workerNames(c.cfg.Workers), Logger: log.Named("flood")})
}

func (c *cluster) proc(name string) (*proc, error) {
	for _, p := range c.all() {
		if p.name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("runner: no process %q", name)
}

func (c *cluster) nodeIndex(name string) int {
	for i, p := range c.nodes {
		if p.name == name {
			return i
		}
	}
	return -1
}

// all is every process: nodes, workers, shell workers.
func (c *cluster) all() []*proc {
	return append(append(slices.Clone(c.nodes), c.workers...), c.shells...)
}

// Process is a worker's current process name.
func (c *cluster) Process(worker string) string {
	p, err := c.proc(worker)
	if err != nil {
		return worker
	}
	return fmt.Sprintf("%s#%d", worker, p.currentIncarnation())
}

// statusOf asks one node about itself.
func (c *cluster) statusOf(ctx context.Context, i int, hash bool) (*leaseholdv1.StatusResponse, error) {
	resp, err := c.status[i].Status(ctx, connect.NewRequest(&leaseholdv1.StatusRequest{IncludeHash: hash}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// statuses asks every node at once; a node that does not answer within
// bound has a nil status.
func (c *cluster) statuses(ctx context.Context, bound time.Duration, hash bool) []*leaseholdv1.StatusResponse {
	out := make([]*leaseholdv1.StatusResponse, len(c.nodes))
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			out[i], _ = c.statusOf(sctx, i, hash)
		})
	}
	wg.Wait()
	return out
}

// errNoLeader: no node says it leads and is ready.
var errNoLeader = errors.New("runner: no ready leader")

// Leader is the ready leader of the highest term any node reports.
func (c *cluster) Leader(ctx context.Context) (string, error) {
	best, term := "", uint64(0)
	for i, st := range c.statuses(ctx, time.Second, false) {
		if st != nil && st.GetState() == "Leader" && st.GetReady() && st.GetTerm() >= term {
			best, term = c.nodes[i].name, st.GetTerm()
		}
	}
	if best == "" {
		return "", errNoLeader
	}
	return best, nil
}

// waitLeader polls until a node leads, up to bound.
func (c *cluster) waitLeader(ctx context.Context, bound time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var leader string
	if err := poll.Until(ctx, func() (err error) { leader, err = c.Leader(ctx); return err }); err != nil {
		return "", fmt.Errorf("runner: no leader within %v", bound)
	}
	return leader, nil
}

// bootLeader waits for the first leader, up to bound, and gives up at
// once when a node exits meanwhile (a configuration it refuses, say): its
// log's last line says why.
func (c *cluster) bootLeader(ctx context.Context, bound time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var leader string
	var exited error
	err := poll.Until(ctx, func() (err error) {
		for _, p := range c.nodes {
			if !p.alive() {
				exited = fmt.Errorf("runner: %s exited while the cluster formed (%v): %s", p.name, p.exitErr(), lastLine(p.logPath))
				cancel()
				return exited
			}
		}
		leader, err = c.Leader(ctx)
		return err
	})
	switch {
	case exited != nil:
		return "", exited
	case err != nil:
		return "", fmt.Errorf("runner: no leader within %v", bound)
	}
	return leader, nil
}

// lastLine is the last non-empty line of a log file, cut to a screenful.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := lines[len(lines)-1]
	if len(last) > 500 {
		last = last[:500] + "..."
	}
	return last
}

// BusyWorker is a live, unpaused worker process holding a lease,
// preferring the one whose (long) job started last.
func (c *cluster) BusyWorker(ctx context.Context, long bool) string {
	return c.busy(ctx, long, c.workers)
}

// BusyShellWorker is a live shell worker (its `worker run` process) holding
// a lease, preferring one whose long job started last.
func (c *cluster) BusyShellWorker(ctx context.Context) string {
	return c.busy(ctx, true, c.shells)
}

// busy is a live, unpaused process among procs holding a lease,
// preferring the one whose (long) job started last.
func (c *cluster) busy(ctx context.Context, long bool, procs []*proc) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := c.client.Jobs(ctx, &leaseholdv1.ListJobsRequest{State: leaseholdv1.JobState_JOB_STATE_RUNNING,
		PageSize: 1000, Consistency: leaseholdv1.Consistency_CONSISTENCY_STALE})
	if err != nil {
		return ""
	}
	best, bestAt, bestLong := "", time.Time{}, false
	for _, j := range resp.GetJobs() {
		ls := j.GetLeases()
		if len(ls) == 0 {
			continue
		}
		l := ls[len(ls)-1]
		i := slices.IndexFunc(procs, func(p *proc) bool { return p.name == l.GetWorkerId() })
		if i < 0 || !procs[i].alive() || procs[i].isPaused() {
			continue
		}
		isLong := j.GetSpec().GetKind() == workload.KindLong
		at := l.GetGrantedAt().AsTime()
		better := best == "" || (long && isLong && !bestLong) || ((!long || isLong == bestLong) && at.After(bestAt))
		if better {
			best, bestAt, bestLong = l.GetWorkerId(), at, isLong
		}
	}
	return best
}

func (c *cluster) Kill(name string) error {
	p, err := c.proc(name)
	if err != nil {
		return err
	}
	return p.kill()
}

func (c *cluster) Restart(ctx context.Context, name string) error {
	p, err := c.proc(name)
	if err != nil {
		return err
	}
	if p.alive() {
		return nil
	}
	if err := p.start(); err != nil {
		return err
	}
	if i := c.nodeIndex(name); i >= 0 {
		return c.waitListening(ctx, i)
	}
	return nil
}

// waitListening waits until a restarted node answers on its API port.
func (c *cluster) waitListening(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := poll.Until(ctx, func() error {
		sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer scancel()
		_, err := c.statusOf(sctx, i, false)
		return err
	})
	if err != nil {
		return fmt.Errorf("runner: %s not answering after a restart: %w", c.nodes[i].name, err)
	}
	return nil
}

func (c *cluster) Pause(name string) error {
	p, err := c.proc(name)
	if err != nil {
		return err
	}
	return p.signal(sigstop)
}

func (c *cluster) Resume(name string) error {
	p, err := c.proc(name)
	if err != nil {
		return err
	}
	return p.signal(sigcont)
}

// clockState is what a node's chaos clock file says: the fault's offset
// and rate, on top of what the node slept for good.
type clockState struct {
	slept, offset time.Duration
	rate          float64
}

// SetClock sets the fault part of a node's chaos clock.
func (c *cluster) SetClock(node string, offset time.Duration, rate float64) error {
	return c.editClock(node, func(s *clockState) { s.offset, s.rate = offset, rate })
}

// Sleep moves a node's clock ahead for good.
func (c *cluster) Sleep(node string, d time.Duration) error {
	return c.editClock(node, func(s *clockState) { s.slept += d })
}

func (c *cluster) ResetClocks() error {
	var errs []error
	for _, n := range c.Nodes() {
		errs = append(errs, c.SetClock(n, 0, 1))
	}
	return errors.Join(errs...)
}

// editClock changes a node's clock state and writes its chaos clock file
// ("OFFSET_SECONDS RATE"), atomically.
func (c *cluster) editClock(node string, edit func(*clockState)) error {
	if c.nodeIndex(node) < 0 {
		return fmt.Errorf("runner: no node %q", node)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clocks == nil {
		c.clocks = map[string]*clockState{}
	}
	st := c.clocks[node]
	if st == nil {
		st = &clockState{rate: 1}
		c.clocks[node] = st
	}
	edit(st)
	path := c.dir("clock", node)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%g %g\n", (st.slept+st.offset).Seconds(), st.rate)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Transfer asks the leader to hand over to the most up-to-date voter.
func (c *cluster) Transfer(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.admin.TransferLeadership(ctx, "")
}

// HealProcesses resumes every paused process and restarts every killed
// one but the workers killed for good.
func (c *cluster) HealProcesses(ctx context.Context) error {
	var errs []error
	for _, p := range c.all() {
		switch {
		case p.alive() && p.isPaused():
			errs = append(errs, p.signal(sigcont))
		case !p.alive() && !p.gone:
			errs = append(errs, c.Restart(ctx, p.name))
		}
	}
	return errors.Join(errs...)
}

// markGone keeps a worker from being restarted.
func (c *cluster) markGone(name string) {
	if p, err := c.proc(name); err == nil {
		p.mu.Lock()
		p.gone = true
		p.mu.Unlock()
	}
}

// shutdown stops every process in order: workers first (they drain and
// release), then nodes.
func (c *cluster) shutdown() {
	var wg sync.WaitGroup
	for _, p := range append(slices.Clone(c.workers), c.shells...) {
		wg.Go(func() { p.stop(5 * time.Second) })
	}
	wg.Wait()
	for _, p := range c.nodes {
		wg.Go(func() { p.stop(10 * time.Second) })
	}
	wg.Wait()
	for _, cl := range []*client.Client{c.client, c.reader, c.workerClient, c.admin} {
		cl.Close()
	}
	c.http.CloseIdleConnections()
	if c.outsider != nil {
		c.outsider.Close()
	}
}
