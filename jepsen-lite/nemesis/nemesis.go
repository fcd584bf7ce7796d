package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// Process is the history's process name for the nemesis.
const Process = "nemesis"

// Timings are the cluster's, which fault durations scale with.
type Timings struct {
	Renew, Grace, Toleration, Election time.Duration
}

// Net is the part of the network the nemesis breaks (netem.Network).
type Net interface {
	Block(from, to string) error
	Unblock(from, to string) error
	Shape(from, to string, delay, jitter time.Duration, loss float64) error
	HealAll() error
}

// Cluster is what the nemesis acts on: the runner's nodes, worker
// processes and network. Names are the network's ("n1", "w1").
type Cluster interface {
	Nodes() []string
	Workers() []string
	Net() Net
	// Leader is the node leading now.
	Leader(ctx context.Context) (string, error)
	// Process is the history's process name of a running worker
	// process (its current incarnation).
	Process(worker string) string
	// BusyWorker is a worker that holds a lease now, preferring one that
	// runs a long job; "" if none.
	BusyWorker(ctx context.Context, long bool) string
	// ShellWorkers are the shell workers' ids (`leasehold worker run`
	// processes; none in most runs); BusyShellWorker is one holding a
	// lease now, "" if none.
	ShellWorkers() []string
	BusyShellWorker(ctx context.Context) string
	// RebootShellWorker kills a shell worker's `worker run` process and
	// every supervisor and command it started, as its machine's reboot
	// would; the harness's watchers record the commands' stops. Restart
	// starts the worker run process again.
	RebootShellWorker(name string) error
	// Kill kills a node or worker process with SIGKILL and waits for it
	// (a shell worker's `worker run` process alone: not its supervisors).
	Kill(name string) error
	// Restart starts a killed node or worker process again.
	Restart(ctx context.Context, name string) error
	// Pause sends SIGSTOP; Resume SIGCONT.
	Pause(name string) error
	Resume(name string) error
	// SetClock sets a node's chaos clock: an offset from real time and a
	// rate (1 real time), on top of what the node slept.
	SetClock(node string, offset time.Duration, rate float64) error
	// Sleep moves a node's clock ahead by d for good, as a machine that
	// slept: it never comes back (CLOCK_BOOTTIME does not), so sleeping
	// again is another jump ahead.
	Sleep(node string, d time.Duration) error
	// Transfer hands leadership to another node and names it.
	Transfer(ctx context.Context) (string, error)
	// HealProcesses resumes every paused process and restarts every
	// killed one, save the workers killed for good.
	HealProcesses(ctx context.Context) error
	// ResetClocks puts every node's clock back to real time plus what it
	// slept.
	ResetClocks() error
	// Outsider is the run's attacker on the nodes' peer ports; nil when
	// the run has none.
	Outsider() Outsider
	// Disks fill and free the nodes' disks; nil when the run has none.
	Disks() Disks
	// Ready asks a node whether it is ready (GET /readyz) and, if not,
	// why.
	Ready(ctx context.Context, node string) (ready bool, reason string, err error)
}

// Disks are the nodes' own small file systems, which the disk faults fill
// up and free.
type Disks interface {
	// Fill writes to node's disk until it has no room left and returns
	// how many bytes it wrote; Size is the disk's size.
	Fill(node string) (int64, error)
	Size(node string) int64
	// Free removes what Fill wrote.
	Free(node string) error
}

// Outsider attacks the nodes from an address that is no member's: it
// keeps trying, a round every interval, until ctx ends, and records every
// attempt itself.
type Outsider interface {
	Attack(ctx context.Context, every time.Duration)
}

// Step is one fault of a plan: a kind held for Hold, then Quiet without
// faults.
type Step struct {
	Kind  *Kind
	Hold  time.Duration
	Quiet time.Duration
}

// Nemesis carries out plans on a cluster and records them.
type Nemesis struct {
	c   Cluster
	rec *history.Recorder
	t   Timings
	rng *rand.Rand
	log hclog.Logger

	mu     sync.Mutex
	seq    int
	active map[string]*Active // started and not stopped, by fault id
	count  map[string]int     // faults started, by type
	errs   int
}

// New returns a nemesis acting on c; seed drives its choices of targets.
func New(c Cluster, rec *history.Recorder, t Timings, seed uint64, log hclog.Logger) *Nemesis {
	return &Nemesis{c: c, rec: rec, t: t, rng: rand.New(rand.NewPCG(seed, 7)), log: log,
		active: map[string]*Active{}, count: map[string]int{}}
}

// Run carries out plan in order until it ends or ctx does; a fault in
// progress when ctx ends is stopped before Run returns. A fault that
// cannot start (no leader to isolate, no busy worker to pause) is logged
// and skipped.
func (n *Nemesis) Run(ctx context.Context, plan []Step) {
	for _, s := range plan {
		if ctx.Err() != nil {
			return
		}
		id, err := n.Start(ctx, s.Kind)
		if err != nil {
			n.log.Warn("fault not started", "kind", s.Kind.Name, "error", err)
			n.mu.Lock()
			n.errs++
			n.mu.Unlock()
			sleep(ctx, s.Quiet)
			continue
		}
		sleep(ctx, s.Hold)
		// Stopping must happen even when the run is interrupted.
		if err := n.Stop(context.WithoutCancel(ctx), id); err != nil {
			n.log.Error("fault not stopped", "kind", s.Kind.Name, "id", id, "error", err)
		}
		sleep(ctx, s.Quiet)
	}
}

// Start starts one fault of kind and records it; it returns the fault id.
func (n *Nemesis) Start(ctx context.Context, kind *Kind) (string, error) {
	n.mu.Lock()
	rng := rand.New(rand.NewPCG(n.rng.Uint64(), n.rng.Uint64()))
	n.mu.Unlock()
	a, err := kind.Start(ctx, &Env{C: n.c, T: n.t, Rng: rng, Rec: n.rec, Log: n.log})
	if err != nil {
		return "", err
	}
	n.mu.Lock()
	n.seq++
	id := fmt.Sprintf("f%d", n.seq)
	n.active[id] = a
	n.count[kind.Type()]++
	n.mu.Unlock()
	f := &history.Fault{ID: id, Type: kind.Type(), Targets: a.Targets, Pause: a.Pause, Kill: a.Kill, Disk: kind.Disk,
		Clock: a.ClockJump != 0 || a.ClockRate != 0, ClockJumpNs: int64(a.ClockJump), ClockRate: a.ClockRate, Detail: a.Detail}
	n.rec.Append(history.Entry{Kind: history.KindFaultStart, Ns: a.At, Process: Process, Fault: f})
	n.log.Info("fault started", "id", id, "type", f.Type, "targets", f.Targets, "detail", f.Detail)
	return id, nil
}

// Stop undoes fault id and records it.
func (n *Nemesis) Stop(ctx context.Context, id string) error {
	n.mu.Lock()
	a, ok := n.active[id]
	delete(n.active, id)
	n.mu.Unlock()
	if !ok {
		return fmt.Errorf("nemesis: no active fault %s", id)
	}
	var err error
	if a.stop != nil {
		err = a.stop(ctx)
	}
	n.rec.Append(history.Entry{Kind: history.KindFaultStop, Process: Process, Fault: &history.Fault{ID: id}})
	n.log.Info("fault stopped", "id", id, "error", err)
	if a.settle != nil {
		// After the stop is recorded: the checkers time recovery from it.
		if serr := a.settle(ctx); serr != nil {
			n.log.Error("not recovered after the fault", "id", id, "error", serr)
			err = errors.Join(err, serr)
		}
	}
	return err
}

// KillForGood kills a worker process that holds a lease and never
// restarts it: its leases are orphans the cluster must re-lease after the
// heal (I12). It records the kill (never stopped) and worker_gone.
func (n *Nemesis) KillForGood(ctx context.Context) (string, error) {
	w := n.c.BusyWorker(ctx, false)
	if w == "" {
		return "", errors.New("nemesis: no worker holds a lease")
	}
	proc := n.c.Process(w)
	if err := n.c.Kill(w); err != nil {
		return "", err
	}
	at := history.Now()
	n.mu.Lock()
	n.seq++
	id := fmt.Sprintf("f%d", n.seq)
	n.count["kill-worker"]++
	n.mu.Unlock()
	n.rec.Append(history.Entry{Kind: history.KindFaultStart, Ns: at, Process: Process, Fault: &history.Fault{
		ID: id, Type: "kill-worker", Targets: []string{w, proc}, Kill: true, Detail: "for good: its leases are orphans"}})
	n.rec.Append(history.Entry{Kind: history.KindWorkerGone, Ns: at, Process: Process, Marker: &history.Marker{WorkerID: w}})
	return w, nil
}

// HealAll stops every active fault, then heals the network, resumes and
// restarts processes and resets clocks whatever the faults did, and
// records the heal.
func (n *Nemesis) HealAll(ctx context.Context) error {
	n.mu.Lock()
	ids := make([]string, 0, len(n.active))
	for id := range n.active {
		ids = append(ids, id)
	}
	n.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, n.Stop(ctx, id))
	}
	errs = append(errs, n.c.Net().HealAll(), n.c.ResetClocks(), n.c.HealProcesses(ctx))
	n.rec.Append(history.Entry{Kind: history.KindHeal, Process: Process})
	return errors.Join(errs...)
}

// Counts are the faults started, by type, and how many could not start.
func (n *Nemesis) Counts() (map[string]int, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]int, len(n.count))
	for k, v := range n.count {
		out[k] = v
	}
	return out, n.errs
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
