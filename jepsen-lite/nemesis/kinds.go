package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// Kind is one kind of fault. Its name is the fault type in the history.
type Kind struct {
	Name   string
	Family string
	// MinNodes: the kind needs this many nodes (a ring needs five).
	MinNodes int
	// Shaping: the kind delays or loses traffic (proxy network only).
	Shaping bool
	// Disk: the kind fills a node's disk (the nodes' data dirs must be on
	// disks of their own, which needs root).
	Disk bool
	// Shell: the kind acts on shell workers (`leasehold worker run`),
	// which the run must have.
	Shell bool
	// hold is how long the fault lasts, scaled to the cluster's timings.
	hold  func(t Timings, rng *rand.Rand) time.Duration
	start func(ctx context.Context, e *Env) (*Active, error)
}

// Type is the fault type recorded for it.
func (k *Kind) Type() string { return k.Name }

// Start starts the fault.
func (k *Kind) Start(ctx context.Context, e *Env) (*Active, error) { return k.start(ctx, e) }

// Env is what a fault starts in.
type Env struct {
	C   Cluster
	T   Timings
	Rng *rand.Rand
	// Rec records what a fault observes besides its start and stop (a
	// node ready again); Log what it could not do.
	Rec *history.Recorder
	Log hclog.Logger
}

// Active is a fault in progress: what it hit, how, and how to undo it.
type Active struct {
	At        int64 // when it took effect (history.Now)
	Targets   []string
	Pause     bool
	Kill      bool
	ClockJump time.Duration
	ClockRate float64
	Detail    string
	stop      func(ctx context.Context) error
	// settle, if set, runs after the stop is recorded and waits for the
	// cluster to recover from the fault (a freed disk's node ready again).
	settle func(ctx context.Context) error
}

// Families of faults, in the order --nemesis mixed runs them.
const (
	FamilyPartition = "partition"
	FamilyKill      = "kill"
	FamilyPause     = "pause"
	FamilyClock     = "clock"
	FamilyNet       = "net"
	FamilyTransfer  = "transfer"
	FamilyWorker    = "worker"
	FamilyOutsider  = "outsider"
	FamilyDisk      = "disk"
	// FamilyShell acts on shell workers; mixed leaves it out (a run has
	// shell workers only when asked).
	FamilyShell = "shell"
)

// Families lists every family.
func Families() []string {
	return []string{FamilyPartition, FamilyKill, FamilyPause, FamilyClock, FamilyNet, FamilyTransfer, FamilyWorker, FamilyOutsider, FamilyDisk, FamilyShell}
}

// Catalog is every kind of fault.
func Catalog() []*Kind {
	toleration := func(t Timings, _ *rand.Rand) time.Duration { return t.Toleration }
	pastGrace := func(t Timings, _ *rand.Rand) time.Duration { return t.Grace + 2*t.Renew }
	pastToleration := func(t Timings, _ *rand.Rand) time.Duration { return t.Toleration + t.Grace }
	return []*Kind{
		{Name: "partition-node", Family: FamilyPartition, hold: toleration, start: partitionNode},
		{Name: "partition-leader", Family: FamilyPartition, hold: toleration, start: partitionLeader},
		{Name: "partition-halves", Family: FamilyPartition, hold: toleration, start: partitionHalves},
		{Name: "partition-oneway", Family: FamilyPartition, hold: toleration, start: partitionOneWay},
		{Name: "partition-ring", Family: FamilyPartition, MinNodes: 5, hold: toleration, start: partitionRing},
		{Name: "partition-bridge", Family: FamilyPartition, MinNodes: 5, hold: toleration, start: partitionBridge},

		{Name: "kill-node", Family: FamilyKill, hold: toleration, start: killNodes(pickFollower)},
		{Name: "kill-leader", Family: FamilyKill, hold: pastGrace, start: killNodes(pickLeader)},
		{Name: "kill-all", Family: FamilyKill, hold: pastGrace, start: killNodes(pickAll)},
		{Name: "kill-worker", Family: FamilyKill, start: killWorker, hold: func(t Timings, rng *rand.Rand) time.Duration {
			// Back before its leases expire (it re-attaches), or after.
			if rng.IntN(2) == 0 {
				return t.Grace
			}
			return t.Toleration + t.Grace
		}},

		{Name: "sigstop-leader", Family: FamilyPause, hold: pastGrace, start: pauseNodes(pickLeader)},
		{Name: "sigstop-leader-long", Family: FamilyPause, hold: pastToleration, start: pauseNodes(pickLeader)},
		{Name: "sigstop-all", Family: FamilyPause, hold: pastGrace, start: pauseNodes(pickAll)},
		{Name: "sigstop-all-long", Family: FamilyPause, hold: pastToleration, start: pauseNodes(pickAll)},
		{Name: "sigstop-worker", Family: FamilyPause, hold: pastToleration, start: pauseWorker},

		{Name: "clock-leader-sleep", Family: FamilyClock, hold: toleration, start: clockSleep(pickLeader)},
		{Name: "clock-all-sleep", Family: FamilyClock, hold: toleration, start: clockSleep(pickAll)},
		{Name: "clock-follower-jump", Family: FamilyClock, hold: toleration, start: clockFollowerJump},
		{Name: "clock-leader-fast", Family: FamilyClock, hold: toleration, start: clockLeaderRate(true)},
		{Name: "clock-leader-slow", Family: FamilyClock, hold: toleration, start: clockLeaderRate(false)},
		{Name: "clock-leader-back", Family: FamilyClock, hold: toleration, start: clockLeaderBack},

		{Name: "proxy-delay", Family: FamilyNet, Shaping: true, hold: toleration, start: shapeAll(false)},
		{Name: "proxy-loss", Family: FamilyNet, Shaping: true, hold: toleration, start: shapeAll(true)},
		{Name: "proxy-slow-node", Family: FamilyNet, Shaping: true, hold: toleration, start: slowNode},

		{Name: "transfer", Family: FamilyTransfer, hold: func(Timings, *rand.Rand) time.Duration { return 0 }, start: transfer},

		{Name: "worker-cut", Family: FamilyWorker, hold: pastToleration, start: workerCut},
		{Name: "partition-leader-worker", Family: FamilyWorker, start: isolateLeaderWithWorker,
			hold: func(t Timings, _ *rand.Rand) time.Duration { return 2*t.Toleration + t.Grace }},
		{Name: "partition-leader-worker-pause", Family: FamilyWorker, start: isolatePausedLeaderWithWorker,
			hold: func(t Timings, _ *rand.Rand) time.Duration { return t.Toleration + t.Grace + 2*t.Renew }},

		{Name: "outsider", Family: FamilyOutsider, hold: toleration, start: outsiderAttack},

		{Name: "kill-shell-worker", Family: FamilyShell, Shell: true, start: killShellWorker, hold: func(t Timings, rng *rand.Rand) time.Duration {
			// Back within the self-stop deadline (it re-attaches to its
			// commands, still running, and reports them under their
			// tokens); back after the deadline but maybe before the
			// expiry (the supervisors stopped the commands: it settles
			// the jobs it still holds); or back after its leases expired
			// (the commands had to stop before the expiry).
			switch rng.IntN(3) {
			case 0:
				return t.Grace
			case 1:
				return t.Toleration - t.Renew
			}
			return t.Toleration + t.Grace
		}},
		{Name: "reboot-shell-worker", Family: FamilyShell, Shell: true, start: rebootShellWorker, hold: func(t Timings, rng *rand.Rand) time.Duration {
			// Back before its leases expire (it finds its commands gone
			// and settles their jobs by kind), or after.
			if rng.IntN(2) == 0 {
				return t.Grace
			}
			return t.Toleration + t.Grace
		}},

		{Name: "disk-follower", Family: FamilyDisk, Disk: true, hold: toleration, start: fillDisk(pickFollower)},
		{Name: "disk-leader", Family: FamilyDisk, Disk: true, hold: pastGrace, start: fillDisk(pickLeader)},
	}
}

// Select returns the kinds named by names (families, kind names, or
// "mixed" for every family) that a cluster of nodes nodes on a network
// with or without shaping can run, in catalog order.
func Select(names []string, nodes int, shaping bool) ([]*Kind, error) {
	all := Catalog()
	want := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		switch {
		case n == "mixed":
			for _, f := range Families() {
				want[f] = f != FamilyShell
			}
		case slices.Contains(Families(), n) || slices.ContainsFunc(all, func(k *Kind) bool { return k.Name == n }):
			want[n] = true
		case n == "" || n == "none":
		default:
			return nil, fmt.Errorf("nemesis: no family or fault %q (families: %s)", n, strings.Join(Families(), ", "))
		}
	}
	var out []*Kind
	for _, k := range all {
		if !want[k.Name] && !want[k.Family] {
			continue
		}
		explicit := want[k.Name]
		if k.MinNodes > nodes || (k.Shaping && !shaping) {
			if explicit {
				return nil, fmt.Errorf("nemesis: %s needs %d nodes and shaping %v; this run has %d nodes, shaping %v",
					k.Name, max(k.MinNodes, 3), k.Shaping, nodes, shaping)
			}
			continue
		}
		out = append(out, k)
	}
	return out, nil
}

// Plan orders kinds for a fault phase of at least total: every kind once,
// in an order shuffled by rng, then more such rounds while total lasts.
// Each step holds its fault for the kind's time (scaled to t, plus up to
// a third more at random) and then rests for quiet.
func Plan(kinds []*Kind, total time.Duration, t Timings, quiet time.Duration, rng *rand.Rand) []Step {
	if len(kinds) == 0 {
		return nil
	}
	var out []Step
	var elapsed time.Duration
	for round := 0; round == 0 || elapsed < total; round++ {
		order := slices.Clone(kinds)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, k := range order {
			if round > 0 && elapsed >= total {
				break
			}
			hold := k.hold(t, rng)
			hold += time.Duration(rng.Int64N(int64(hold)/3 + 1))
			out = append(out, Step{Kind: k, Hold: hold, Quiet: quiet})
			elapsed += hold + quiet
		}
	}
	return out
}

// Picking targets.

type picker func(ctx context.Context, e *Env) ([]string, error)

func pickLeader(ctx context.Context, e *Env) ([]string, error) {
	l, err := e.C.Leader(ctx)
	if err != nil {
		return nil, err
	}
	return []string{l}, nil
}

func pickFollower(ctx context.Context, e *Env) ([]string, error) {
	nodes := e.C.Nodes()
	l, _ := e.C.Leader(ctx) // any node will do without a leader
	var fs []string
	for _, n := range nodes {
		if n != l {
			fs = append(fs, n)
		}
	}
	return []string{fs[e.Rng.IntN(len(fs))]}, nil
}

func pickAll(_ context.Context, e *Env) ([]string, error) { return e.C.Nodes(), nil }

func others(all, these []string) []string {
	var out []string
	for _, n := range all {
		if !slices.Contains(these, n) {
			out = append(out, n)
		}
	}
	return out
}

// Partitions.

// cut blocks every link between a and b, both ways.
func cut(net Net, a, b []string) error {
	for _, x := range a {
		for _, y := range b {
			if err := errors.Join(net.Block(x, y), net.Block(y, x)); err != nil {
				return err
			}
		}
	}
	return nil
}

func uncut(net Net, a, b []string) error {
	var errs []error
	for _, x := range a {
		for _, y := range b {
			errs = append(errs, net.Unblock(x, y), net.Unblock(y, x))
		}
	}
	return errors.Join(errs...)
}

// split cuts a from b and undoes it at the stop.
func split(e *Env, a, b []string, detail string) (*Active, error) {
	net := e.C.Net()
	if err := cut(net, a, b); err != nil {
		uncut(net, a, b)
		return nil, err
	}
	return &Active{At: history.Now(), Targets: a, Detail: detail,
		stop: func(context.Context) error { return uncut(net, a, b) }}, nil
}

func partitionNode(ctx context.Context, e *Env) (*Active, error) {
	n, err := pickFollower(ctx, e)
	if err != nil {
		return nil, err
	}
	return split(e, n, others(e.C.Nodes(), n), "isolated "+n[0])
}

func partitionLeader(ctx context.Context, e *Env) (*Active, error) {
	l, err := pickLeader(ctx, e)
	if err != nil {
		return nil, err
	}
	return split(e, l, others(e.C.Nodes(), l), "isolated the leader "+l[0])
}

func partitionHalves(_ context.Context, e *Env) (*Active, error) {
	nodes := slices.Clone(e.C.Nodes())
	e.Rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	a, b := nodes[:len(nodes)/2], nodes[len(nodes)/2:]
	return split(e, a, b, fmt.Sprintf("%v | %v", a, b))
}

// partitionOneWay drops what the leader sends, or what it receives.
func partitionOneWay(ctx context.Context, e *Env) (*Active, error) {
	l, err := pickLeader(ctx, e)
	if err != nil {
		return nil, err
	}
	rest := others(e.C.Nodes(), l)
	from, to, detail := l, rest, "the leader "+l[0]+" cannot send"
	if e.Rng.IntN(2) == 0 {
		from, to, detail = rest, l, "the leader "+l[0]+" cannot hear"
	}
	net := e.C.Net()
	var links [][2]string
	for _, x := range from {
		for _, y := range to {
			links = append(links, [2]string{x, y})
		}
	}
	undo := func(context.Context) error {
		var errs []error
		for _, k := range links {
			errs = append(errs, net.Unblock(k[0], k[1]))
		}
		return errors.Join(errs...)
	}
	for _, k := range links {
		if err := net.Block(k[0], k[1]); err != nil {
			undo(ctx)
			return nil, err
		}
	}
	return &Active{At: history.Now(), Targets: l, Detail: detail, stop: undo}, nil
}

// partitionRing: each node hears only its two neighbours, a majority of
// five, and no two nodes hear the same majority.
func partitionRing(_ context.Context, e *Env) (*Active, error) {
	nodes := slices.Clone(e.C.Nodes())
	e.Rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	net := e.C.Net()
	var pairs [][2]string
	for i := range nodes {
		for j := i + 1; j < len(nodes); j++ {
			if d := j - i; d != 1 && d != len(nodes)-1 {
				pairs = append(pairs, [2]string{nodes[i], nodes[j]})
			}
		}
	}
	undo := func(context.Context) error {
		var errs []error
		for _, p := range pairs {
			errs = append(errs, uncut(net, p[:1], p[1:]))
		}
		return errors.Join(errs...)
	}
	for _, p := range pairs {
		if err := cut(net, p[:1], p[1:]); err != nil {
			undo(context.Background())
			return nil, err
		}
	}
	return &Active{At: history.Now(), Targets: nodes, Detail: fmt.Sprintf("ring %v", nodes), stop: undo}, nil
}

// partitionBridge: two pairs that cannot hear each other, and one node
// that hears everyone.
func partitionBridge(_ context.Context, e *Env) (*Active, error) {
	nodes := slices.Clone(e.C.Nodes())
	e.Rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	a, b := nodes[1:3], nodes[3:]
	act, err := split(e, a, b, fmt.Sprintf("%v | %s | %v", a, nodes[0], b))
	if act != nil {
		act.Targets = append(slices.Clone(a), b...)
	}
	return act, err
}

// Processes.

func killNodes(pick picker) func(ctx context.Context, e *Env) (*Active, error) {
	return func(ctx context.Context, e *Env) (*Active, error) {
		nodes, err := pick(ctx, e)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			if err := e.C.Kill(n); err != nil {
				return nil, err
			}
		}
		return &Active{At: history.Now(), Targets: nodes, Kill: true, Detail: "kill -9",
			stop: func(ctx context.Context) error {
				var errs []error
				for _, n := range nodes {
					errs = append(errs, e.C.Restart(ctx, n))
				}
				return errors.Join(errs...)
			}}, nil
	}
}

// busyWorker is a worker holding a lease (a long job's if long), or any.
func busyWorker(ctx context.Context, e *Env, long bool) string {
	if w := e.C.BusyWorker(ctx, long); w != "" {
		return w
	}
	ws := e.C.Workers()
	return ws[e.Rng.IntN(len(ws))]
}

func killWorker(ctx context.Context, e *Env) (*Active, error) {
	w := busyWorker(ctx, e, false)
	proc := e.C.Process(w)
	if err := e.C.Kill(w); err != nil {
		return nil, err
	}
	return &Active{At: history.Now(), Targets: []string{w, proc}, Kill: true, Detail: "kill -9",
		stop: func(ctx context.Context) error { return e.C.Restart(ctx, w) }}, nil
}

// pickShellWorker is a busy shell worker if one is, else any.
func pickShellWorker(ctx context.Context, e *Env) (string, error) {
	if w := e.C.BusyShellWorker(ctx); w != "" {
		return w, nil
	}
	ws := e.C.ShellWorkers()
	if len(ws) == 0 {
		return "", errors.New("nemesis: no shell workers")
	}
	return ws[e.Rng.IntN(len(ws))], nil
}

// killShellWorker SIGKILLs a shell worker's `worker run` process, busy if
// one is, and restarts it with the same id at the stop. Only that process
// dies: its supervisors and their commands run on (each in a session of
// its own), so the fault names the process, not the worker, and no
// execution of its commands ends at the kill.
func killShellWorker(ctx context.Context, e *Env) (*Active, error) {
	w, err := pickShellWorker(ctx, e)
	if err != nil {
		return nil, err
	}
	proc := e.C.Process(w)
	if err := e.C.Kill(w); err != nil {
		return nil, err
	}
	return &Active{At: history.Now(), Targets: []string{proc}, Kill: true,
		Detail: "kill -9 of " + w + "'s worker run process; its supervisors and commands run on",
		stop:   func(ctx context.Context) error { return e.C.Restart(ctx, w) }}, nil
}

// rebootShellWorker kills a shell worker's worker run process with its
// supervisors and commands, as a reboot of its machine would, and
// restarts the worker run process at the stop. The commands' stops are
// recorded by their watchers, which are the harness's.
func rebootShellWorker(ctx context.Context, e *Env) (*Active, error) {
	w, err := pickShellWorker(ctx, e)
	if err != nil {
		return nil, err
	}
	proc := e.C.Process(w)
	if err := e.C.RebootShellWorker(w); err != nil {
		return nil, err
	}
	return &Active{At: history.Now(), Targets: []string{proc}, Kill: true,
		Detail: "reboot of " + w + ": its worker run process, supervisors and commands killed",
		stop:   func(ctx context.Context) error { return e.C.Restart(ctx, w) }}, nil
}

func pauseNodes(pick picker) func(ctx context.Context, e *Env) (*Active, error) {
	return func(ctx context.Context, e *Env) (*Active, error) {
		nodes, err := pick(ctx, e)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			if err := e.C.Pause(n); err != nil {
				return nil, err
			}
		}
		return &Active{At: history.Now(), Targets: nodes, Pause: true, Detail: "SIGSTOP",
			stop: func(context.Context) error {
				var errs []error
				for _, n := range nodes {
					errs = append(errs, e.C.Resume(n))
				}
				return errors.Join(errs...)
			}}, nil
	}
}

func pauseWorker(ctx context.Context, e *Env) (*Active, error) {
	w := busyWorker(ctx, e, true)
	proc := e.C.Process(w)
	if err := e.C.Pause(w); err != nil {
		return nil, err
	}
	return &Active{At: history.Now(), Targets: []string{w, proc}, Pause: true, Detail: "SIGSTOP",
		stop: func(context.Context) error { return e.C.Resume(w) }}, nil
}

// Clocks.

// setClocks sets nodes' clocks and puts them back to real time at the stop.
func setClocks(e *Env, nodes []string, offset time.Duration, rate float64, detail string) (*Active, error) {
	reset := func(context.Context) error {
		var errs []error
		for _, n := range nodes {
			errs = append(errs, e.C.SetClock(n, 0, 1))
		}
		return errors.Join(errs...)
	}
	for _, n := range nodes {
		if err := e.C.SetClock(n, offset, rate); err != nil {
			reset(context.Background())
			return nil, err
		}
	}
	a := &Active{At: history.Now(), Targets: nodes, ClockJump: offset, Detail: detail, stop: reset}
	if rate != 1 {
		a.ClockRate = rate
	}
	return a, nil
}

// clockSleep jumps clocks forward past toleration: what a machine (or a
// whole cluster's host) that slept looks like to CLOCK_BOOTTIME, while
// Raft's monotonic timers saw nothing. The slept time is never given back
// (a clock that jumped back would be held still by the server's monotone
// clamp, and the next sleep would only catch up): each sleep is a jump.
func clockSleep(pick picker) func(ctx context.Context, e *Env) (*Active, error) {
	return func(ctx context.Context, e *Env) (*Active, error) {
		nodes, err := pick(ctx, e)
		if err != nil {
			return nil, err
		}
		jump := e.T.Toleration + e.T.Grace
		for _, n := range nodes {
			if err := e.C.Sleep(n, jump); err != nil {
				return nil, err
			}
		}
		return &Active{At: history.Now(), Targets: nodes, ClockJump: jump, Detail: fmt.Sprintf("slept %v", jump)}, nil
	}
}

func clockFollowerJump(ctx context.Context, e *Env) (*Active, error) {
	n, err := pickFollower(ctx, e)
	if err != nil {
		return nil, err
	}
	jump := e.T.Toleration
	if e.Rng.IntN(2) == 0 {
		jump = -jump
	}
	return setClocks(e, n, jump, 1, fmt.Sprintf("jumped %v", jump))
}

// clockLeaderRate runs the leader's clock fast (by a quarter of what the
// time model tolerates, 2 × renew / toleration) or slow (10%).
func clockLeaderRate(fast bool) func(ctx context.Context, e *Env) (*Active, error) {
	return func(ctx context.Context, e *Env) (*Active, error) {
		l, err := pickLeader(ctx, e)
		if err != nil {
			return nil, err
		}
		rate := 0.9
		if fast {
			rate = 1 + float64(2*e.T.Renew)/float64(e.T.Toleration)/4
		}
		return setClocks(e, l, 0, rate, fmt.Sprintf("rate %.4f", rate))
	}
}

// clockLeaderBack throws the leader's clock back by more than grace, so
// that putting it right again is a jump the absence rule absorbs.
func clockLeaderBack(ctx context.Context, e *Env) (*Active, error) {
	l, err := pickLeader(ctx, e)
	if err != nil {
		return nil, err
	}
	jump := -(e.T.Grace + 2*e.T.Renew)
	return setClocks(e, l, jump, 1, fmt.Sprintf("jumped %v", jump))
}

// Shaping.

// allLinks are every link that touches a node, both ways, but the
// runner's.
func allLinks(c Cluster) [][2]string {
	var out [][2]string
	nodes := c.Nodes()
	for i, a := range nodes {
		for _, b := range nodes[i+1:] {
			out = append(out, [2]string{a, b}, [2]string{b, a})
		}
		for _, w := range c.Workers() {
			out = append(out, [2]string{a, w}, [2]string{w, a})
		}
	}
	return out
}

func shape(e *Env, links [][2]string, delay, jitter time.Duration, loss float64, targets []string, detail string) (*Active, error) {
	net := e.C.Net()
	undo := func(context.Context) error {
		var errs []error
		for _, l := range links {
			errs = append(errs, net.Shape(l[0], l[1], 0, 0, 0))
		}
		return errors.Join(errs...)
	}
	for _, l := range links {
		if err := net.Shape(l[0], l[1], delay, jitter, loss); err != nil {
			undo(context.Background())
			return nil, err
		}
	}
	return &Active{At: history.Now(), Targets: targets, Detail: detail, stop: undo}, nil
}

// shapeAll delays every link a little (a tenth of a renew, plus as much
// jitter), or loses 5% of what they carry.
func shapeAll(loss bool) func(ctx context.Context, e *Env) (*Active, error) {
	return func(_ context.Context, e *Env) (*Active, error) {
		if loss {
			return shape(e, allLinks(e.C), 0, 0, 0.05, e.C.Nodes(), "5% loss")
		}
		d := e.T.Renew / 10
		return shape(e, allLinks(e.C), d, d, 0, e.C.Nodes(), fmt.Sprintf("delay %v + jitter %v", d, d))
	}
}

// slowNode delays everything to and from one follower by a renew.
func slowNode(ctx context.Context, e *Env) (*Active, error) {
	n, err := pickFollower(ctx, e)
	if err != nil {
		return nil, err
	}
	var links [][2]string
	for _, l := range allLinks(e.C) {
		if l[0] == n[0] || l[1] == n[0] {
			links = append(links, l)
		}
	}
	return shape(e, links, e.T.Renew, e.T.Renew/4, 0, n, fmt.Sprintf("delay %v", e.T.Renew))
}

// Leadership and workers.

func transfer(ctx context.Context, e *Env) (*Active, error) {
	old, _ := e.C.Leader(ctx)
	to, err := e.C.Transfer(ctx)
	if err != nil {
		return nil, err
	}
	return &Active{At: history.Now(), Targets: []string{old, to}, Detail: old + " → " + to}, nil
}

// workerCut cuts a busy worker off from every node.
func workerCut(ctx context.Context, e *Env) (*Active, error) {
	w := busyWorker(ctx, e, true)
	act, err := split(e, []string{w}, e.C.Nodes(), "cut off "+w)
	if act != nil {
		act.Targets = []string{w, e.C.Process(w)}
	}
	return act, err
}

// isolateLeaderWithWorker puts the leader and a worker running a long job
// on one side, everyone else on the other: the worker can reach only the
// old leader. A correct old leader stops acknowledging it (no quorum); the
// worker stops itself before the majority's new leader expires its lease
// and grants the job again.
func isolateLeaderWithWorker(ctx context.Context, e *Env) (*Active, error) {
	l, err := pickLeader(ctx, e)
	if err != nil {
		return nil, err
	}
	w := busyWorker(ctx, e, true)
	rest := others(e.C.Nodes(), l)
	otherWorkers := others(e.C.Workers(), []string{w})
	net := e.C.Net()
	undo := func(context.Context) error {
		return errors.Join(uncut(net, l, rest), uncut(net, []string{w}, rest), uncut(net, otherWorkers, l))
	}
	if err := errors.Join(cut(net, l, rest), cut(net, []string{w}, rest), cut(net, otherWorkers, l)); err != nil {
		undo(ctx)
		return nil, err
	}
	return &Active{At: history.Now(), Targets: []string{l[0], w, e.C.Process(w)},
		Detail: fmt.Sprintf("%s with %s | %v", l[0], w, rest), stop: undo}, nil
}

// isolatePausedLeaderWithWorker is isolateLeaderWithWorker with the old
// leader stopped (SIGSTOP) as the partition starts, so it cannot step down
// while the majority elects another leader. It is woken (pausedLeaderWake)
// still cut off, while the worker still runs its jobs, with the worker's
// heartbeats waiting in its sockets: a correct one answers none of them
// (it cannot confirm its leadership), and the worker stops itself before
// the majority expires its leases. One that answers them carries the
// worker past that expiry (I4) and beside the jobs' next holders (I3).
// The partition holds until the stop.
func isolatePausedLeaderWithWorker(ctx context.Context, e *Env) (*Active, error) {
	a, err := isolateLeaderWithWorker(ctx, e)
	if err != nil {
		return nil, err
	}
	leader := a.Targets[0]
	if err := e.C.Pause(leader); err != nil {
		a.stop(ctx)
		return nil, err
	}
	heal := a.stop
	// Only the leader is paused: the worker, cut off but running, must
	// stop itself in time like any other, so it is named in the detail
	// alone (a target of a pause is excused by the checkers).
	a.Targets, a.Pause = []string{leader}, true
	wake := pausedLeaderWake(e.T)
	a.Detail += fmt.Sprintf(", leader SIGSTOPped for %v", wake)
	var once sync.Once
	var resumeErr error
	resume := func() { once.Do(func() { resumeErr = e.C.Resume(leader) }) }
	woken := time.AfterFunc(wake, resume)
	a.stop = func(ctx context.Context) error {
		if woken.Stop() {
			// A fault held shorter than the wake: woken at the stop, still
			// cut off for three renews, as before the partition heals.
			resume()
			t := time.NewTimer(3 * e.T.Renew)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		} else {
			resume() // waits for the timer's resume, if it runs now
		}
		return errors.Join(resumeErr, heal(ctx))
	}
	return a, nil
}

// pausedLeaderWake is how long partition-leader-worker-pause keeps the old
// leader stopped. The worker's last acknowledged beat was sent about when
// the fault began, so it stops itself toleration-2*renew later; the
// majority expires its leases a toleration after it takes office (an
// election, well within grace). A beat sent after grace+2*renew and
// acknowledged by the woken old leader moves the worker's deadline past
// that expiry; woken later than toleration-2*renew, the worker would have
// stopped already and its beats would carry no leases. So the old leader
// wakes after grace+3*renew (2.4 s with the CI timings, against 3.4 s).
func pausedLeaderWake(t Timings) time.Duration { return t.Grace + 3*t.Renew }

// The outsider.

// outsiderAttack lets the run's outsider attack every node's peer port, a
// round every renew, until the fault stops. It is a fault of its own, not
// a background load: with no other fault on, every member is up and
// reachable, so a node can always tell an impostor claiming a live
// member's id from that member (without peer TLS, a member it cannot reach
// looks like one that moved, and its id is given to whoever confirms it).
func outsiderAttack(ctx context.Context, e *Env) (*Active, error) {
	o := e.C.Outsider()
	if o == nil {
		return nil, errors.New("nemesis: this run has no outsider")
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.Attack(actx, e.T.Renew)
	}()
	return &Active{At: history.Now(), Targets: e.C.Nodes(), Detail: "forged joins and Raft messages from a non-member",
		stop: func(context.Context) error {
			cancel()
			<-done
			return nil
		}}, nil
}

// Disks.

// diskNotice bounds the wait, after a fill, for the node to notice: it
// does at its next write to the log, which the load makes within a few
// renews.
func diskNotice(t Timings) time.Duration { return max(2*time.Second, 4*t.Renew) }

// diskReadyWait bounds the wait, after a free, for the node to say it is
// ready again; the checkers judge how long it took (I12).
const diskReadyWait = time.Minute

// fillDisk fills a node's disk to the last byte and watches it stop
// being ready; at the stop it frees the disk and waits until the node is
// ready again, recording when it was (node_ready).
func fillDisk(pick picker) func(ctx context.Context, e *Env) (*Active, error) {
	return func(ctx context.Context, e *Env) (*Active, error) {
		disks := e.C.Disks()
		if disks == nil {
			return nil, errors.New("nemesis: this run's nodes have no disks of their own")
		}
		nodes, err := pick(ctx, e)
		if err != nil {
			return nil, err
		}
		node := nodes[0]
		n, err := disks.Fill(node)
		if err != nil {
			disks.Free(node)
			return nil, err
		}
		at := history.Now()
		detail := fmt.Sprintf("filled %s's disk (%s): wrote %s", node, mib(disks.Size(node)), mib(n))
		// What the node says while its disk is full, for the record.
		noticed, reason := waitReady(ctx, e, node, false, diskNotice(e.T))
		switch {
		case noticed:
			detail += fmt.Sprintf("; not ready after %v: %s", time.Duration(history.Now()-at).Round(time.Millisecond), reason)
		case reason != "":
			detail += "; still ready after " + diskNotice(e.T).String() + " (" + reason + ")"
		default:
			detail += "; still ready after " + diskNotice(e.T).String()
		}
		var freedAt int64
		return &Active{At: at, Targets: nodes, Detail: detail,
			stop: func(context.Context) error {
				err := disks.Free(node)
				freedAt = history.Now()
				return err
			},
			settle: func(ctx context.Context) error {
				ready, reason := waitReady(ctx, e, node, true, diskReadyWait)
				if !ready {
					return fmt.Errorf("nemesis: %s not ready %v after its disk was freed: %s", node, diskReadyWait, reason)
				}
				took := time.Duration(history.Now() - freedAt).Round(time.Millisecond)
				e.Rec.Append(history.Entry{Kind: history.KindNodeReady, Process: Process,
					Marker: &history.Marker{Node: node, Detail: fmt.Sprintf("ready %v after its disk was freed", took)}})
				return nil
			}}, nil
	}
}

// waitReady polls node until its readiness is want, up to bound, and
// returns whether it got there and the node's last reason for not being
// ready (or the error asking it).
func waitReady(ctx context.Context, e *Env, node string, want bool, bound time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	last := ""
	for {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		ready, reason, err := e.C.Ready(rctx, node)
		rcancel()
		switch {
		case err != nil:
			last = err.Error()
		case ready == want:
			return true, reason
		default:
			last = reason
		}
		select {
		case <-ctx.Done():
			return false, last
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
