package bench

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/proccpu"
)

// Run runs one workload and returns its figures. It cleans up after itself
// on an external cluster (queued jobs cancelled, workers deregistered), so
// runs can follow one another; a started cluster is the caller's to stop.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	prof, err := createCPUProfile(cfg.CPUProfile)
	if err != nil {
		return nil, err
	}
	defer prof.stop() // a run that ended before the window's end
	if err := checkLeaderProfile(cfg.LeaderProfile); err != nil {
		return nil, err
	}
	e, err := newEnv(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()
	e.prof = prof
	var res *Result
	switch cfg.Workload {
	case "acquire":
		res, err = runAcquire(ctx, e)
	case "heartbeat":
		res, err = runHeartbeat(ctx, e)
	case "status":
		res, err = runStatus(ctx, e)
	case "job-cycle":
		res, err = runJobCycle(ctx, e)
	case "mixed":
		res, err = runMixed(ctx, e)
	case "expiry":
		res, err = runExpiry(ctx, e)
	case "failover":
		res, err = runFailover(ctx, e)
	case "fencing":
		res, err = runFencing(ctx, e)
	case "scale":
		res, err = runScale(ctx, e)
	}
	if cfg.Cluster == nil && ctx.Err() == nil {
		e.cleanup()
	}
	return res, err
}

// timings are the cluster's executor timings.
type timings struct{ renew, grace, toleration time.Duration }

// env is what every workload runs with.
type env struct {
	cfg     *Config
	f       *fleet
	probe   *probe
	run     string // this run's id: the prefix of its jobs, queues and workers
	timings timings
	out     io.Writer

	workers []string // registered by this run, deregistered by cleanup

	prof *cpuProfile // the bench's own profile over the window (measure)

	// preKill keeps a killed node's last figures, read just before the
	// kill, so the window still counts what it did.
	preKill map[int]nodeSample
}

func newEnv(ctx context.Context, cfg *Config) (*env, error) {
	f, err := newFleet(cfg)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	tr := client.NewTransport(cfg.TLS)
	if cfg.TLS != nil {
		scheme = "https"
	}
	tr.Protocols = nil // plain HTTP/1.1 is enough for /metrics
	e := &env{
		cfg:     cfg,
		f:       f,
		probe:   &probe{http: &http.Client{Transport: tr}, scheme: scheme, token: cfg.Token},
		run:     runID(),
		out:     cfg.Log,
		preKill: map[int]nodeSample{},
	}
	if e.out == nil {
		e.out = io.Discard
	}
	// Members is retried over every endpoint and leaves the client pinned
	// to a node that answers; Status then asks that node.
	if _, err := f.first().Members(ctx); err != nil {
		e.close()
		return nil, fmt.Errorf("cluster at %v: %w", cfg.Endpoints, err)
	}
	st, err := f.first().Status(ctx)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("cluster at %v: %w", cfg.Endpoints, err)
	}
	t := st.GetTimings()
	e.timings = timings{t.GetRenew().AsDuration(), t.GetGrace().AsDuration(), t.GetToleration().AsDuration()}
	if e.timings.renew <= 0 || e.timings.toleration <= 0 {
		e.close()
		return nil, fmt.Errorf("cluster at %v reported no timings", cfg.Endpoints)
	}
	return e, nil
}

func (e *env) close() {
	e.f.close()
	if tr, ok := e.probe.http.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.out, "bench: "+format+"\n", args...)
}

// runID is short and random: runs against one cluster never share a job,
// queue or worker id.
func runID() string {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return "bench-" + hex.EncodeToString(b[:])
}

// cleanup leaves an external cluster as it was, as far as the API allows:
// its workers deregistered, which releases their leases (a chained job
// cycle ends holding the job its last report took), and then the run's
// queued jobs, those released included, cancelled. Jobs and events stay
// until the cluster's retention.
func (e *env) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := e.f.first()
	err := parallel(ctx, len(e.workers), 32, func(ctx context.Context, i int) error {
		_, err := cl.DeregisterWorker(ctx, e.workers[i])
		return err
	})
	if err != nil {
		e.logf("cleanup: deregistering workers: %v", err)
	}
	if n, err := cl.CancelSubmitter(ctx, e.run, "bench run ended"); err != nil {
		e.logf("cleanup: cancelling queued jobs: %v", err)
	} else if n > 0 {
		e.logf("cleanup: cancelled %d queued jobs", n)
	}
}

// nodeSample is one node's counters at one moment.
type nodeSample struct {
	ok      bool
	killed  bool // read just before the node was killed
	metrics nodeMetrics
	cpu     time.Duration
	cpuOK   bool
	// syscalls are the process's read and write system calls so far.
	syscalls   [2]uint64
	syscallsOK bool
}

// mark is the cluster's and this process's counters at one moment.
type mark struct {
	at     time.Time
	nodes  []nodeSample
	gen    time.Duration
	host   time.Duration
	hostOK bool
	wire   [2]int64 // requests, failures
}

func (e *env) mark(ctx context.Context) mark {
	m := mark{at: time.Now(), nodes: make([]nodeSample, len(e.cfg.Endpoints)), gen: proccpu.Self(),
		wire: [2]int64{e.f.wire.requests.Load(), e.f.wire.failures.Load()}}
	m.host, m.hostOK = hostCPU()
	for i := range m.nodes {
		m.nodes[i] = e.sampleNode(ctx, i)
	}
	return m
}

func (e *env) sampleNode(ctx context.Context, i int) nodeSample {
	if s, ok := e.preKill[i]; ok {
		return s
	}
	var s nodeSample
	if met, err := e.probe.metrics(ctx, e.cfg.Endpoints[i]); err == nil {
		s.ok, s.metrics = true, met
	}
	if e.cfg.Cluster != nil {
		if pid := e.cfg.Cluster.PIDs()[i]; pid != 0 {
			if cpu, err := procCPU(pid); err == nil {
				s.cpu, s.cpuOK = cpu, true
			}
			if r, w, err := procSyscalls(pid); err == nil {
				s.syscalls, s.syscallsOK = [2]uint64{r, w}, true
			}
		}
	}
	return s
}

// window is what happened between two marks.
type window struct {
	elapsed   time.Duration
	srvCPU    float64   // % of a core, NaN unknown
	nodeCPU   []float64 // each node's, NaN unknown
	genCPU    float64
	hostCPU   float64 // every process on the machine, NaN unknown
	leader    int     // the node leading at the end (at the start if unknown)
	writes    []float64
	entries   []float64     // NaN where unknown
	allocs    []float64     // heap objects each node allocated, NaN unknown
	syscalls  [][2]float64  // each node's read and write system calls, NaN unknown
	rpcs      [][2]float64  // each node's heartbeat and append RPCs to its followers, NaN unknown
	timed     []commitMeans // each node's, NaN unknown
	wireReqs  int64
	wireFails int64
	// elections is how far the highest term any node reported moved: each
	// election a candidate started, won or not (pre-votes do not count).
	elections int64
}

func between(a, b mark) window {
	w := window{elapsed: b.at.Sub(a.at), leader: -1, wireReqs: b.wire[0] - a.wire[0], wireFails: b.wire[1] - a.wire[1]}
	secs := w.elapsed.Seconds()
	w.genCPU = 100 * (b.gen - a.gen).Seconds() / secs
	w.hostCPU = math.NaN()
	if a.hostOK && b.hostOK {
		w.hostCPU = 100 * (b.host - a.host).Seconds() / secs
	}
	w.srvCPU = 0
	for i := range a.nodes {
		na, nb := a.nodes[i], b.nodes[i]
		cpu := math.NaN()
		if na.cpuOK && nb.cpuOK {
			cpu = 100 * (nb.cpu - na.cpu).Seconds() / secs
		}
		w.nodeCPU = append(w.nodeCPU, cpu)
		w.srvCPU += cpu
		wr, en := math.NaN(), math.NaN()
		if na.ok && nb.ok {
			wr = float64(nb.metrics.logWrites - na.metrics.logWrites)
			en = float64(nb.metrics.logEntries - na.metrics.logEntries)
		}
		w.writes = append(w.writes, wr)
		w.entries = append(w.entries, en)
		al := math.NaN()
		if na.ok && nb.ok && na.metrics.mallocsOK && nb.metrics.mallocsOK && nb.metrics.mallocs >= na.metrics.mallocs { // a restarted process counts afresh
			al = float64(nb.metrics.mallocs - na.metrics.mallocs)
		}
		w.allocs = append(w.allocs, al)
		sc := [2]float64{math.NaN(), math.NaN()}
		if na.syscallsOK && nb.syscallsOK && nb.syscalls[0] >= na.syscalls[0] && nb.syscalls[1] >= na.syscalls[1] {
			sc = [2]float64{float64(nb.syscalls[0] - na.syscalls[0]), float64(nb.syscalls[1] - na.syscalls[1])}
		}
		w.syscalls = append(w.syscalls, sc)
		rpcs, timed := leaderDeltas(na, nb)
		w.rpcs = append(w.rpcs, rpcs)
		w.timed = append(w.timed, timed)
		if nb.ok && !nb.killed && nb.metrics.leader {
			w.leader = i
		}
	}
	var termA, termB uint64
	for i := range a.nodes {
		if a.nodes[i].ok {
			termA = max(termA, a.nodes[i].metrics.term)
		}
		if b.nodes[i].ok {
			termB = max(termB, b.nodes[i].metrics.term)
		}
	}
	w.elections = -1
	if termA > 0 && termB >= termA {
		w.elections = int64(termB - termA)
	}
	if w.leader < 0 {
		for i, n := range a.nodes {
			if n.ok && n.metrics.leader {
				w.leader = i
			}
		}
	}
	return w
}

// commitMeans are where a leader's commits spent their time over a window,
// in ms: an entry's commit, an append RPC to a follower, and a write and
// sync of its own log.
type commitMeans struct{ commit, appendRPC, logWrite float64 }

// leaderDeltas are what one node did as leader between two reads: the
// heartbeat and append RPCs it sent, over all its followers, and its
// commitMeans.
// Each is NaN when unknown: a read failed, the process restarted, a
// follower's series was forgotten (cluster/promsink.go) or a count fell,
// or, for a mean, there is nothing in the window to take it over.
func leaderDeltas(a, b nodeSample) (rpcs [2]float64, timed commitMeans) {
	rpcs = [2]float64{math.NaN(), math.NaN()}
	timed = commitMeans{math.NaN(), math.NaN(), math.NaN()}
	ma, mb := a.metrics, b.metrics
	if !a.ok || !b.ok || ma.started != mb.started {
		return rpcs, timed
	}
	mean := func(ta, tb timing) float64 {
		if tb.n <= ta.n || tb.sum < ta.sum {
			return math.NaN()
		}
		return (tb.sum - ta.sum) / float64(tb.n-ta.n)
	}
	timed.commit = mean(ma.timed[timedCommit], mb.timed[timedCommit])
	timed.logWrite = mean(ma.timed[timedLogWrite], mb.timed[timedLogWrite])
	var beats, appends uint64
	var ta, tb timing
	for labels, pa := range ma.peers {
		pb := mb.peers[labels]
		if pb == nil || pb.beats < pa.beats || pb.appends.n < pa.appends.n || pb.appends.sum < pa.appends.sum {
			return rpcs, timed
		}
	}
	for labels, pb := range mb.peers {
		var pa peerSeries // a series that began in the window counts whole
		if p := ma.peers[labels]; p != nil {
			pa = *p
		}
		beats += pb.beats - pa.beats
		appends += pb.appends.n - pa.appends.n
		ta.sum, ta.n = ta.sum+pa.appends.sum, ta.n+pa.appends.n
		tb.sum, tb.n = tb.sum+pb.appends.sum, tb.n+pb.appends.n
	}
	rpcs = [2]float64{float64(beats), float64(appends)}
	timed.appendRPC = mean(ta, tb)
	return rpcs, timed
}

// result fills the fixed fields of a Result from a phase and its window,
// and the keys every workload prints. cmdsPerOp is how many Raft commands
// one op proposes, so raft_writes_per_op can be read against it.
func (e *env) result(p *phase, w window, cmdsPerOp float64) *Result {
	r := &Result{
		Workload: e.cfg.Workload, Concurrency: e.cfg.Concurrency,
		Ops: p.ops, Errs: p.errs, Window: p.window(),
		P50: p.hist.quantile(0.50), P99: p.hist.quantile(0.99), Max: p.hist.max,
		CPUServers: w.srvCPU, CPUGenerator: w.genCPU, RaftWritesPerOp: math.NaN(),
	}
	if r.Window > 0 {
		r.OpsPerSec = float64(p.ops) / r.Window.Seconds()
	}
	leaderWrites, leaderEntries := math.NaN(), math.NaN()
	if w.leader >= 0 {
		leaderWrites, leaderEntries = w.writes[w.leader], w.entries[w.leader]
	}
	if p.ops > 0 {
		r.RaftWritesPerOp = leaderWrites / float64(p.ops)
	}
	r.add("run", e.run)
	r.add("window_s", num(r.Window.Seconds(), 3))
	r.add("target", string(e.cfg.Target))
	if heartbeating[e.cfg.Workload] {
		r.add("transport", e.transport())
	}
	r.add("nodes", len(e.cfg.Endpoints))
	r.add("started", e.cfg.Cluster != nil)
	r.add("payload_bytes", e.cfg.PayloadSize)
	r.add("cmds_per_op", num(cmdsPerOp, 1))
	r.add("entries_per_write", num(leaderEntries/leaderWrites, 2))
	for i, wr := range w.writes {
		r.add(fmt.Sprintf("fsyncs_s_node%d", i+1), num(wr/w.elapsed.Seconds(), 1))
	}
	// Heap allocations per op, all servers and the leader: they count work
	// the way CPU time does, but a busy host does not change them, so a
	// change that saves allocations shows in one run.
	allocs, leaderAllocs := 0.0, math.NaN()
	for _, a := range w.allocs {
		allocs += a // NaN when any node's is unknown
	}
	if w.leader >= 0 && w.leader < len(w.allocs) {
		leaderAllocs = w.allocs[w.leader]
	}
	if p.ops == 0 {
		allocs, leaderAllocs = math.NaN(), math.NaN()
	}
	r.add("allocs_per_op", num(allocs/float64(p.ops), 1))
	r.add("allocs_per_op_leader", num(leaderAllocs/float64(p.ops), 1))
	// The leader's read and write system calls per op: what its network
	// and disk cost in calls into the kernel. Known for a started cluster.
	leaderSyscalls := [2]float64{math.NaN(), math.NaN()}
	if w.leader >= 0 && w.leader < len(w.syscalls) && p.ops > 0 {
		leaderSyscalls = w.syscalls[w.leader]
	}
	r.add("reads_per_op_leader", num(leaderSyscalls[0]/float64(p.ops), 2))
	r.add("writes_per_op_leader", num(leaderSyscalls[1]/float64(p.ops), 2))
	// The leader's Raft RPCs per op, to all its followers: the heartbeats
	// (periodic, and those its leadership checks asked for) and the
	// appends that carry the log.
	leaderRPCs := [2]float64{math.NaN(), math.NaN()}
	if w.leader >= 0 && w.leader < len(w.rpcs) && p.ops > 0 {
		leaderRPCs = w.rpcs[w.leader]
	}
	r.add("raft_heartbeats_per_op_leader", num(leaderRPCs[0]/float64(p.ops), 3))
	r.add("raft_appends_per_op_leader", num(leaderRPCs[1]/float64(p.ops), 3))
	// Where the leader's commits spent their time, as means over the
	// window: an entry's commit, one append RPC to a follower (its round
	// trip with the follower's sync), and one write and sync of the
	// leader's own log, which run side by side (docs/performance.md).
	leaderTimed := commitMeans{math.NaN(), math.NaN(), math.NaN()}
	if w.leader >= 0 && w.leader < len(w.timed) {
		leaderTimed = w.timed[w.leader]
	}
	r.add("commit_ms_leader", num(leaderTimed.commit, 3))
	r.add("append_rpc_ms_leader", num(leaderTimed.appendRPC, 3))
	r.add("log_write_ms_leader", num(leaderTimed.logWrite, 3))
	if !math.IsNaN(w.srvCPU) {
		for i, cpu := range w.nodeCPU {
			r.add(fmt.Sprintf("cpu_pct_node%d", i+1), num(cpu, 1))
		}
	}
	// What else ran on this machine meanwhile: a busy neighbour skews every
	// figure above. Unknown for an external cluster (the servers are
	// elsewhere, or unaccounted for).
	r.add("host_cpus", runtime.NumCPU())
	r.add("cpu_host_pct", num(w.hostCPU, 1))
	r.add("cpu_other_pct", num(w.hostCPU-w.srvCPU-w.genCPU, 1))
	r.add("leader", leaderName(w.leader))
	if w.elections >= 0 {
		r.add("elections", w.elections)
	} else {
		r.add("elections", "NA")
	}
	r.add("wire_reqs", w.wireReqs)
	r.add("wire_errs", w.wireFails)
	if len(p.errKinds) > 0 {
		r.add("err_kinds", kindsString(p.errKinds))
	}
	if p.drained {
		r.add("drained", true)
	}
	return r
}

// heartbeating are the workloads whose heartbeats go over streams, or
// with one call each when Unary (job-cycle's single heartbeat per cycle
// is always a call).
var heartbeating = map[string]bool{"heartbeat": true, "acquire": true, "mixed": true, "failover": true, "expiry": true, "scale": true}

func leaderName(i int) string {
	if i < 0 {
		return "NA"
	}
	return fmt.Sprintf("node%d", i+1)
}

// errKind names an error for err_kinds: the API's reason, or what failed.
func errKind(err error) string {
	if ce, ok := asClientError(err); ok {
		if ce.Reason != "" {
			return ce.Reason
		}
		// The Connect code, in the reasons' case: UNKNOWN, UNAVAILABLE.
		return strings.ToUpper(ce.Code.String())
	}
	switch {
	case errors.Is(err, errLost):
		return "LOST"
	case errors.Is(err, errNoGrant):
		return "NO_GRANT"
	case errors.Is(err, context.DeadlineExceeded):
		return "DEADLINE"
	}
	return "OTHER"
}

func asClientError(err error) (*client.Error, bool) {
	var ce *client.Error
	ok := errors.As(err, &ce)
	return ce, ok
}

// kindsString prints error counts by kind, most frequent first:
// STALE_TOKEN:3,UNAVAILABLE:1.
func kindsString(kinds map[string]int64) string {
	keys := slices.Collect(maps.Keys(kinds))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(kinds[b], kinds[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, kinds[k])
	}
	return strings.Join(parts, ",")
}
