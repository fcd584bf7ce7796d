package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/jepsen-lite/checker"
	"github.com/leasehold/leasehold/jepsen-lite/disk"
	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/jepsen-lite/nemesis"
	"github.com/leasehold/leasehold/jepsen-lite/netem"
	"github.com/leasehold/leasehold/jepsen-lite/workload"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Outcome is one run's result.
type Outcome struct {
	Config  Config
	Net     string // the network mode used
	Report  checker.Report
	Elapsed time.Duration
	// Passed: no violation, or, for a run of a broken build, at least one
	// violation of an expected invariant.
	Passed bool
	// Caught names the expected invariants that found violations.
	Caught []string
	// Found names every invariant that found violations, expected or not.
	Found []string
	// Problems are failures of the run itself (a node that never came up,
	// a drain that did not finish); a run with problems does not pass.
	Problems []string
	// Notes say what the run left out and why (disk faults where no
	// tmpfs can be mounted).
	Notes []string
}

// errUnsupported: a run needs Linux (network namespaces, tmpfs mounts,
// /proc, CLOCK_MONOTONIC shared by its processes).
var errUnsupported = fmt.Errorf("runner: jepsen-lite needs Linux, not %s: %w", runtime.GOOS, errors.ErrUnsupported)

// Run carries out one run: it starts the cluster and the workers, runs
// the workload through the fault phase, heals, waits for recovery, drains,
// reads the final states, tears everything down, and checks the merged
// history. The history, the nodes' logs and data, the report (report.json)
// and Porcupine's HTML for failing jobs are left in cfg.Out.
//
// The returned error is for a run that could not be carried out at all;
// everything else is in the Outcome.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	if runtime.GOOS != "linux" {
		return nil, errUnsupported
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	// A killed runner's disks are still mounted under its directory.
	if err := disk.CleanLeftovers(); err != nil {
		return nil, err
	}
	// A directory used before: its histories, data and logs would mix
	// with this run's (histories are appended to, nodes would boot from
	// the old cluster's state).
	if err := removeRunFiles(cfg.Out); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(cfg.Out, "runner.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	var logOut io.Writer = logFile
	if cfg.Verbose {
		logOut = io.MultiWriter(logFile, os.Stderr)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: cfg.Name, Output: logOut, Level: hclog.Info})
	start := time.Now()

	n, err := newNetwork(cfg, log)
	if err != nil {
		return nil, err
	}
	defer n.Close()
	out := &Outcome{Config: cfg, Net: n.Mode()}
	kinds, err := nemesis.Select(cfg.Nemesis, cfg.Nodes, n.Mode() == NetProxy)
	if err != nil {
		return nil, err
	}
	var disks nodeDisks
	if slices.ContainsFunc(kinds, isDiskKind) {
		disks, err = mountDisks(cfg)
		switch {
		case errors.Is(err, disk.ErrUnsupported):
			kinds = slices.DeleteFunc(kinds, isDiskKind)
			note := fmt.Sprintf("disk faults skipped: %v", err)
			out.Notes = append(out.Notes, note)
			log.Warn(note)
		case err != nil:
			return nil, err
		default:
			// After the nodes have stopped (deferred later, run first):
			// their data is kept in data/ like any run's.
			defer func() {
				if err := disks.release(filepath.Join(cfg.Out, "data")); err != nil {
					log.Error("disks not released", "error", err)
				}
				removeDisks(filepath.Join(cfg.Out, "disk"))
			}()
		}
	}
	if cfg.ShellWorkers == 0 && slices.ContainsFunc(kinds, isShellKind) {
		return nil, fmt.Errorf("runner: the shell family's faults need shell workers (--shell-workers)")
	}
	log.Info("run", "net", n.Mode(), "nodes", cfg.Nodes, "workers", cfg.Workers, "shell_workers", cfg.ShellWorkers,
		"nemesis", cfg.Nemesis, "seed", cfg.Seed, "flood", cfg.Flood)

	histFile, err := os.Create(filepath.Join(cfg.Out, "history-runner.jsonl"))
	if err != nil {
		return nil, err
	}
	defer histFile.Close()
	rec := history.NewRecorder(histFile)

	c, err := newCluster(cfg, n, disks)
	if err != nil {
		return nil, err
	}
	// Whatever happens below, every process is stopped.
	stopped := false
	defer func() {
		if !stopped {
			c.shutdown()
		}
	}()

	problems := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		log.Error(msg)
		out.Problems = append(out.Problems, msg)
	}
	if err := runPhases(ctx, cfg, c, kinds, rec, log, problems); err != nil {
		return nil, err
	}
	c.shutdown()
	stopped = true

	// Merge every process's history by time.
	entries := rec.Entries()
	if err := rec.Err(); err != nil {
		problems("runner history: %v", err)
	}
	// The worker processes' files, then the shell workers' commands' (one
	// per command, history-sN-cmd-TOKEN-PID.jsonl).
	files, _ := filepath.Glob(filepath.Join(cfg.Out, "history-w*.jsonl"))
	cmdFiles, _ := filepath.Glob(filepath.Join(cfg.Out, "history-s*-cmd-*.jsonl"))
	for _, f := range append(files, cmdFiles...) {
		es, err := readHistory(f)
		if err != nil {
			problems("%s: %v", filepath.Base(f), err)
		}
		entries = append(entries, es...)
	}
	sort.SliceStable(entries, func(a, b int) bool { return entries[a].Ns < entries[b].Ns })
	if err := writeHistory(filepath.Join(cfg.Out, "history.jsonl"), entries); err != nil {
		return nil, err
	}

	out.Report = checker.Check(entries, checker.Options{OutDir: cfg.Out, RequireAllFinished: true})
	out.Elapsed = time.Since(start)
	out.judge()
	if err := writeJSON(filepath.Join(cfg.Out, "report.json"), out.jsonReport()); err != nil {
		return nil, err
	}
	log.Info("done", "passed", out.Passed, "violations", out.Report.Violations(), "elapsed", out.Elapsed)
	return out, nil
}

func newNetwork(cfg Config, log hclog.Logger) (netem.Network, error) {
	mode := cfg.Net
	if mode == NetAuto {
		mode = NetProxy
		if netem.NetnsAvailable() {
			mode = NetNetns
		}
	}
	if mode == NetNetns {
		n, err := netem.NewNetns(cfg.Nodes, cfg.Workers)
		if err == nil || cfg.Net == NetNetns {
			return n, err
		}
		// Root, but namespaces are not allowed here (a container
		// without CAP_SYS_ADMIN): the proxies need no privilege.
		log.Warn("network namespaces unavailable, using proxies", "error", err)
	}
	// A lost chunk waits a quarter of a renew: loss shows as delay, as TCP
	// retransmissions would make it.
	return netem.NewProxyNet(cfg.Nodes, uint64(cfg.Seed), cfg.Timings.Renew/4)
}

// runPhases is the run from the first boot to the final states. It
// returns an error only when the run cannot go on at all.
func runPhases(ctx context.Context, cfg Config, c *cluster, kinds []*nemesis.Kind, rec *history.Recorder, log hclog.Logger, problem func(string, ...any)) error {
	t := cfg.Timings
	floodSource := ""
	if cfg.Flood {
		floodSource = c.net.FloodIP()
	}
	rec.Append(history.Entry{Kind: history.KindRun, Process: "runner", Run: &history.Run{
		Format: history.FormatVersion, Name: cfg.Name, Seed: cfg.Seed, Nodes: c.Nodes(), Workers: append(workerNames(cfg.Workers), shellNames(cfg.ShellWorkers)...),
		Nemeses: cfg.Nemesis, RenewNs: int64(t.Renew), GraceNs: int64(t.Grace), TolerationNs: int64(t.Toleration),
		ElectionTimeoutNs: int64(t.Election), HeartbeatTimeoutNs: int64(t.Heartbeat), Members: c.configured(), Secure: cfg.Secure,
		FloodSource: floodSource, Unrecorded: shellNames(cfg.ShellWorkers)}})

	for _, p := range c.nodes {
		if err := p.start(); err != nil {
			return err
		}
	}
	leader, err := c.bootLeader(ctx, 60*time.Second)
	if err != nil {
		return fmt.Errorf("%w (node logs in %s)", err, c.dir("logs"))
	}
	log.Info("leader", "node", leader)
	rec.Append(history.Entry{Kind: history.KindLeaderElected, Process: "runner", Marker: &history.Marker{Node: leader}})
	if slices.ContainsFunc(kinds, func(k *nemesis.Kind) bool { return k.Family == nemesis.FamilyOutsider }) {
		if err := c.startOutsider(rec, log); err != nil {
			return fmt.Errorf("runner: outsider: %w", err)
		}
	}

	// The runner's own actors, each a process of the history.
	callTimeout := max(4*t.Renew, time.Second)
	caller := func(process string) *workload.Caller {
		return &workload.Caller{Rec: rec, Process: process, Client: c.client, Timeout: callTimeout}
	}
	// The reporter and the stale writer act as workers.
	workerCaller := func(process string) *workload.Caller {
		return &workload.Caller{Rec: rec, Process: process, Client: c.workerClient, Timeout: callTimeout}
	}
	sinks := workload.NewSinks(rec, "sink", caller("sink"))
	ss, err := workload.ServeSinks(c.net.ListenIP()+":0", sinks)
	if err != nil {
		return err
	}
	defer ss.Close()
	c.addWorkers(cfg.Self, ss.URL())
	if err := c.addShellWorkers(cfg.Self, ss.URL()); err != nil {
		return err
	}
	for _, p := range append(slices.Clone(c.workers), c.shells...) {
		if err := p.start(); err != nil {
			return err
		}
	}
	events := startEventLog(ctx, rec, c.client)
	defer events.stop()
	c.createSchedule(ctx, log)

	seed := uint64(cfg.Seed)
	jobs := workload.NewJobs()
	load, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopLoad(); wg.Wait() }()
	if cfg.Flood {
		flood, err := c.startFlood(load, rec, log)
		if err != nil {
			return fmt.Errorf("runner: flood: %w", err)
		}
		// It ends with the load, before the drain and the final reads.
		wg.Go(func() { <-load.Done(); flood.Stop() })
	}
	sub := workload.NewSubmitter(caller(workload.SubmitterMain), jobs, workload.SubmitterConfig{
		Interval: t.Renew / 3, MaxQueued: 3 * cfg.Workers * cfg.Concurrency, Renew: t.Renew, Toleration: t.Toleration}, seed)
	wg.Go(func() { sub.Run(load) })
	// The reader, the stale writer and the reporter go on through the drain.
	tail, stopTail := context.WithCancel(ctx)
	defer stopTail()
	var tailWG sync.WaitGroup
	reader := &workload.Caller{Rec: rec, Process: "reader", Client: c.reader, Timeout: callTimeout}
	tailWG.Go(func() { workload.NewReader(reader, jobs, t.Renew/2, seed).Run(tail) })
	tailWG.Go(func() { workload.NewStaleWriter(workerCaller("stale"), jobs, sinks, t.Renew, seed).Run(tail) })
	tailWG.Go(func() { workload.NewReporter(workerCaller(workload.ReporterID), 2*t.Renew, seed).Run(tail) })
	defer func() { stopTail(); tailWG.Wait() }()

	// Let work start before the first fault: a fault that finds no lease
	// held tests nothing.
	if !c.waitBusy(ctx, 20*time.Second) {
		problem("no worker held a lease before the faults")
	}
	sleep(ctx, 2*t.Renew)

	nem := nemesis.New(c, rec, t.nemesis(), seed, log.Named("nemesis"))
	plan := nemesis.Plan(kinds, cfg.Duration, t.nemesis(), t.Renew*3, rand.New(rand.NewPCG(seed, 9)))
	log.Info("fault phase", "steps", len(plan), "kinds", len(kinds))
	if len(plan) == 0 {
		sleep(ctx, cfg.Duration)
	} else {
		nem.Run(ctx, plan)
	}
	if cfg.KillWorkerAtEnd {
		if w, err := nem.KillForGood(ctx); err != nil {
			problem("no busy worker to kill for good: %v", err)
		} else {
			c.markGone(w)
			log.Info("worker killed for good", "worker", w)
		}
	}
	healCtx := context.WithoutCancel(ctx)
	if err := nem.HealAll(healCtx); err != nil {
		problem("heal: %v", err)
	}
	if leader, err := c.waitLeader(healCtx, 60*time.Second); err != nil {
		problem("no leader after the heal: %v", err)
	} else {
		rec.Append(history.Entry{Kind: history.KindLeaderElected, Process: "runner", Marker: &history.Marker{Node: leader}})
		log.Info("leader after heal", "node", leader)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	// Recovery: the load goes on until an orphaned lease would have
	// expired and been taken again.
	sleep(ctx, t.Toleration+t.Grace+2*t.Renew)
	stopLoad()
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	// Drain: the early executor cancels what it left queued; everything
	// else must finish.
	cc := caller(workload.SubmitterEarly)
	dctx, dcancel := context.WithTimeout(healCtx, 10*time.Second)
	workload.CancelSubmitter(dctx, rec, cc.Process, c.client.CancelSubmitterOnce, workload.SubmitterEarly)
	dcancel()
	drainBound := 3*t.Toleration + 30*time.Second
	if cfg.DrainBound > 0 {
		drainBound = cfg.DrainBound
	}
	if err := c.drain(ctx, drainBound); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		problem("drain: %v", err)
	}
	stopTail()
	tailWG.Wait()

	// Workers stop in order (they have nothing left to run), then the
	// final states are read from every node.
	var sw sync.WaitGroup
	for _, p := range append(slices.Clone(c.workers), c.shells...) {
		sw.Go(func() { p.stop(2*t.Renew + 5*time.Second) })
	}
	sw.Wait()
	for _, p := range append(slices.Clone(c.workers), c.shells...) {
		if err := p.exitErr(); err != nil && !p.gone {
			problem("worker %s exited: %v (log %s)", p.name, err, p.logPath)
		}
	}
	lastSeq, err := c.finalStates(healCtx, rec, 60*time.Second)
	if err != nil {
		problem("%v", err)
	}
	if err := events.catchUp(healCtx, lastSeq, 30*time.Second); err != nil {
		problem("%v", err)
	}
	complete, last := events.stop()
	rec.Append(history.Entry{Kind: history.KindRunEnd, Process: "runner", RunEnd: &history.RunEnd{EventsComplete: complete, LastEventSeq: last}})
	return nil
}

// removeRunFiles removes what an earlier run left in dir: the files and
// directories a run writes, nothing else.
func removeRunFiles(dir string) error {
	var paths []string
	for _, pattern := range []string{"history*.jsonl", "report.json", "runner.log", "leasehold*.toml", "i10-*.html"} {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return err
		}
		paths = append(paths, m...)
	}
	for _, d := range []string{"data", "logs", "clock", "pki", "disk", "state"} {
		paths = append(paths, filepath.Join(dir, d))
	}
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

func isDiskKind(k *nemesis.Kind) bool { return k.Disk }

func isShellKind(k *nemesis.Kind) bool { return k.Shell }

// waitBusy waits until workers hold leases, up to bound.
// createSchedule creates a schedule that fires every two seconds into a
// queue no worker takes: I14 checks from the event log that each of its
// slots fires at most once through the run's faults. A cluster that
// cannot take it (a voter below level 6) runs without it.
func (c *cluster) createSchedule(ctx context.Context, log hclog.Logger) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, _, err := c.client.CreateSchedule(cctx, &leaseholdv1.CreateScheduleRequest{Name: workload.ScheduleName, Cron: "*/2 * * * * *",
		Missed:   leaseholdv1.MissedSlots_MISSED_SLOTS_RUN_LATEST,
		Template: &leaseholdv1.JobSpec{Queue: workload.QueueSchedule, Kind: workload.KindManual, Payload: []byte("tick")}})
	if err != nil {
		log.Warn("schedule_not_created", "error", err)
	}
}

func (c *cluster) waitBusy(ctx context.Context, bound time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	return poll.Until(ctx, func() error {
		if c.BusyWorker(ctx, false) == "" {
			return errors.New("no worker holds a lease")
		}
		return nil
	}) == nil
}

// drain waits until no job is queued or leased, up to bound.
func (c *cluster) drain(ctx context.Context, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	left := -1
	for {
		qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := c.unfinished(qctx)
		qcancel()
		if err == nil {
			if n == 0 {
				return nil
			}
			left = n
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d jobs unfinished after %v", left, bound)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func workerNames(n int) []string {
	var out []string
	for w := 1; w <= n; w++ {
		out = append(out, netem.WorkerName(w))
	}
	return out
}

func shellNames(n int) []string {
	var out []string
	for s := 1; s <= n; s++ {
		out = append(out, ShellName(s))
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// readHistory reads a worker's history; a worker killed mid-write leaves
// its last line cut short, which is dropped.
func readHistory(path string) ([]history.Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	es, err := history.Read(f)
	if errors.Is(err, history.ErrTruncated) {
		err = nil
	}
	return es, err
}

func writeHistory(path string, entries []history.Entry) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := history.Write(f, entries); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// judge decides whether the run passed.
func (o *Outcome) judge() {
	o.Found = nil
	for _, r := range o.Report.Results {
		if len(r.Violations) > 0 {
			o.Found = append(o.Found, r.Invariant)
		}
	}
	if len(o.Config.Expect) == 0 {
		o.Passed = o.Report.OK() && len(o.Problems) == 0
		return
	}
	// A broken build: the run must find what it broke.
	for _, r := range o.Report.Results {
		if len(r.Violations) == 0 {
			continue
		}
		if slices.Contains(o.Config.Expect, "any") || slices.ContainsFunc(o.Config.Expect, func(e string) bool {
			return strings.EqualFold(e, r.Invariant) || strings.EqualFold(e, r.Name)
		}) {
			o.Caught = append(o.Caught, r.Invariant)
		}
	}
	o.Passed = len(o.Caught) > 0
}
