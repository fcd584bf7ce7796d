package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ci = Timings{Renew: 300 * time.Millisecond, Grace: 1500 * time.Millisecond, Toleration: 4 * time.Second, Election: 300 * time.Millisecond}

func names(ks []*Kind) []string {
	var out []string
	for _, k := range ks {
		out = append(out, k.Name)
	}
	return out
}

func TestSelect(t *testing.T) {
	ks, err := Select([]string{"partition"}, 3, false)
	if err != nil || !slices.Equal(names(ks), []string{"partition-node", "partition-leader", "partition-halves", "partition-oneway"}) {
		t.Fatalf("partition on 3 nodes: %v %v", names(ks), err)
	}
	ks, _ = Select([]string{"partition"}, 5, false)
	if !slices.Contains(names(ks), "partition-ring") || !slices.Contains(names(ks), "partition-bridge") {
		t.Fatalf("partition on 5 nodes: %v", names(ks))
	}
	mixed, _ := Select([]string{"mixed"}, 3, false)
	for _, k := range mixed {
		if k.Shaping || k.MinNodes > 3 {
			t.Fatalf("mixed on 3 nodes without shaping has %s", k.Name)
		}
	}
	withShaping, _ := Select([]string{"mixed"}, 5, true)
	shell, _ := Select([]string{"shell"}, 3, false)
	if len(shell) == 0 || len(withShaping)+len(shell) != len(Catalog()) {
		t.Fatalf("mixed on 5 nodes with shaping: %d kinds, and %d of the shell family, of %d", len(withShaping), len(shell), len(Catalog()))
	}
	for _, k := range withShaping {
		if k.Shell || k.Family == FamilyShell {
			t.Fatalf("mixed has %s: a run has shell workers only when asked", k.Name)
		}
	}
	if ks, err := Select([]string{"sigstop-all-long", "clock-all-sleep"}, 3, false); err != nil || len(ks) != 2 {
		t.Fatalf("two kinds by name: %v %v", names(ks), err)
	}
	if _, err := Select([]string{"proxy-delay"}, 3, false); err == nil {
		t.Fatalf("proxy-delay accepted without shaping")
	}
	if _, err := Select([]string{"partition-ring"}, 3, true); err == nil {
		t.Fatalf("a ring accepted on 3 nodes")
	}
	if _, err := Select([]string{"earthquake"}, 3, true); err == nil {
		t.Fatalf("an unknown name accepted")
	}
}

// Every kind comes once even when the phase is too short for it; more
// rounds fill a longer phase; holds scale with the timings; the seed
// decides everything.
func TestPlan(t *testing.T) {
	ks, _ := Select([]string{"pause", "kill"}, 3, false)
	plan := Plan(ks, 0, ci, time.Second, rand.New(rand.NewPCG(1, 1)))
	if len(plan) != len(ks) {
		t.Fatalf("a zero-length phase: %d steps for %d kinds", len(plan), len(ks))
	}
	seen := map[string]bool{}
	for _, s := range plan {
		seen[s.Kind.Name] = true
		nominal := s.Kind.hold(ci, rand.New(rand.NewPCG(0, 0)))
		if s.Kind.Name != "kill-worker" && (s.Hold < nominal || s.Hold > nominal*4/3+1) {
			t.Fatalf("%s held %v, nominal %v", s.Kind.Name, s.Hold, nominal)
		}
		if s.Quiet != time.Second {
			t.Fatalf("quiet %v", s.Quiet)
		}
	}
	if len(seen) != len(ks) {
		t.Fatalf("kinds planned %v", seen)
	}

	long := Plan(ks, 5*time.Minute, ci, time.Second, rand.New(rand.NewPCG(1, 1)))
	var total time.Duration
	for _, s := range long {
		total += s.Hold + s.Quiet
	}
	if total < 5*time.Minute || len(long) <= len(ks) {
		t.Fatalf("a 5-minute phase planned %v in %d steps", total, len(long))
	}
	again := Plan(ks, 5*time.Minute, ci, time.Second, rand.New(rand.NewPCG(1, 1)))
	if fmt.Sprint(stepNames(long)) != fmt.Sprint(stepNames(again)) {
		t.Fatalf("one seed, two plans")
	}

	prod := Timings{Renew: 10 * time.Second, Grace: 50 * time.Second, Toleration: 300 * time.Second, Election: time.Second}
	for _, s := range Plan(ks, 0, prod, time.Second, rand.New(rand.NewPCG(2, 2))) {
		if s.Kind.Name == "sigstop-all-long" && s.Hold < prod.Toleration+prod.Grace {
			t.Fatalf("past toleration at production timings held only %v", s.Hold)
		}
	}
}

func stepNames(ss []Step) []string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s/%v", s.Kind.Name, s.Hold))
	}
	return out
}

// fakeCluster records what the nemesis does to it.
type fakeCluster struct {
	mu      sync.Mutex
	nodes   []string
	leader  string
	blocked map[[2]string]bool
	shaped  map[[2]string]bool
	log     []string
	clocks  map[string]string
	slept   map[string]time.Duration
	paused  map[string]bool
	dead    map[string]bool
	incarn  map[string]int
	// attacking: an outsider's Attack is running.
	attacking int
	// full: nodes whose disks are full; stuck: nodes never ready again.
	full, stuck map[string]bool
}

func newFakeCluster(n int) *fakeCluster {
	c := &fakeCluster{leader: "n1", blocked: map[[2]string]bool{}, shaped: map[[2]string]bool{}, clocks: map[string]string{}, slept: map[string]time.Duration{},
		paused: map[string]bool{}, dead: map[string]bool{}, incarn: map[string]int{"w1": 1, "w2": 1, "s1": 1, "s2": 1},
		full: map[string]bool{}, stuck: map[string]bool{}}
	for i := 1; i <= n; i++ {
		c.nodes = append(c.nodes, fmt.Sprintf("n%d", i))
	}
	return c
}

func (c *fakeCluster) note(f string, a ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, fmt.Sprintf(f, a...))
}

func (c *fakeCluster) Nodes() []string   { return c.nodes }
func (c *fakeCluster) Workers() []string { return []string{"w1", "w2"} }
func (c *fakeCluster) Net() Net          { return c }
func (c *fakeCluster) Leader(context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader, nil
}
func (c *fakeCluster) Process(w string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%s#%d", w, c.incarn[w])
}
func (c *fakeCluster) BusyWorker(context.Context, bool) string { return "w2" }
func (c *fakeCluster) ShellWorkers() []string                  { return []string{"s1", "s2"} }
func (c *fakeCluster) BusyShellWorker(context.Context) string  { return "s2" }
func (c *fakeCluster) RebootShellWorker(name string) error {
	c.note("reboot %s", name)
	return c.Kill(name)
}
func (c *fakeCluster) Kill(name string) error {
	c.note("kill %s", name)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead[name] = true
	return nil
}
func (c *fakeCluster) Restart(_ context.Context, name string) error {
	c.note("restart %s", name)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dead, name)
	if _, ok := c.incarn[name]; ok {
		c.incarn[name]++
	}
	return nil
}
func (c *fakeCluster) Pause(name string) error {
	c.note("pause %s", name)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paused[name] = true
	return nil
}
func (c *fakeCluster) Resume(name string) error {
	c.note("resume %s", name)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.paused, name)
	return nil
}
func (c *fakeCluster) SetClock(node string, off time.Duration, rate float64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clocks[node] = fmt.Sprintf("%v %v", off, rate)
	return nil
}
func (c *fakeCluster) Sleep(node string, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept[node] += d
	return nil
}
func (c *fakeCluster) Transfer(context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leader = "n2"
	return "n2", nil
}
func (c *fakeCluster) HealProcesses(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.paused)
	clear(c.dead)
	return nil
}
func (c *fakeCluster) Outsider() Outsider { return fakeOutsider{c} }
func (c *fakeCluster) Disks() Disks       { return c }
func (c *fakeCluster) Fill(node string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.full[node] = true
	return 64 << 20, nil
}
func (c *fakeCluster) Size(string) int64 { return 64 << 20 }
func (c *fakeCluster) Free(node string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.full, node)
	return nil
}
func (c *fakeCluster) Ready(_ context.Context, node string) (bool, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.full[node] || c.stuck[node] {
		return false, "disk full on node " + node, nil
	}
	return true, "", nil
}

// fakeOutsider attacks until told to stop.
type fakeOutsider struct{ c *fakeCluster }

func (o fakeOutsider) Attack(ctx context.Context, _ time.Duration) {
	o.c.mu.Lock()
	o.c.attacking++
	o.c.mu.Unlock()
	<-ctx.Done()
	o.c.mu.Lock()
	o.c.attacking--
	o.c.mu.Unlock()
}

func (c *fakeCluster) ResetClocks() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.clocks)
	return nil
}
func (c *fakeCluster) Block(a, b string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.blocked[[2]string{a, b}] = true
	return nil
}
func (c *fakeCluster) Unblock(a, b string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.blocked, [2]string{a, b})
	return nil
}
func (c *fakeCluster) Shape(a, b string, d, j time.Duration, loss float64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d == 0 && j == 0 && loss == 0 {
		delete(c.shaped, [2]string{a, b})
	} else {
		c.shaped[[2]string{a, b}] = true
	}
	return nil
}
func (c *fakeCluster) HealAll() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.blocked)
	clear(c.shaped)
	return nil
}

func quiet() hclog.Logger { return hclog.NewNullLogger() }

// Each kind breaks what it says and undoes it at its stop, and its fault
// entries say what the checkers need: pause, kill, the clock's jump or
// rate, the targets by node, worker and process name.
func TestEveryKindStartsAndStops(t *testing.T) {
	for _, k := range Catalog() {
		t.Run(k.Name, func(t *testing.T) {
			c := newFakeCluster(5)
			rec := history.NewRecorder(nil)
			n := New(c, rec, ci, 1, quiet())
			id, err := n.Start(context.Background(), k)
			if err != nil {
				t.Fatal(err)
			}
			if k.Family == FamilyOutsider {
				// The attack runs in the background.
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					c.mu.Lock()
					on := c.attacking > 0
					c.mu.Unlock()
					if on {
						break
					}
				}
			}
			c.mu.Lock()
			broke := len(c.blocked) + len(c.shaped) + len(c.paused) + len(c.dead) + len(c.clocks) + len(c.slept) + c.attacking + len(c.full)
			c.mu.Unlock()
			if broke == 0 && k.Name != "transfer" {
				t.Fatalf("%s broke nothing", k.Name)
			}
			start := rec.Entries()[0].Fault
			switch {
			case strings.HasPrefix(k.Name, "sigstop"):
				if !start.Pause {
					t.Fatalf("a pause not marked: %+v", start)
				}
			case strings.HasPrefix(k.Name, "kill"):
				if !start.Kill {
					t.Fatalf("a kill not marked: %+v", start)
				}
			case strings.HasPrefix(k.Name, "clock"):
				if !start.Clock || (start.ClockJumpNs == 0) == (start.ClockRate == 0) {
					t.Fatalf("a clock fault without its jump or rate: %+v", start)
				}
			}
			// A worker fault names the worker process, except where the
			// worker is only a bystander of a pause (naming it would
			// excuse it). A shell worker's names its `worker run` process
			// only: the commands, which outlive it, are not ended by it.
			switch {
			case k.Shell:
				if !slices.Equal(start.Targets, []string{"s2#1"}) {
					t.Fatalf("a shell worker fault's targets %v: want the busy one's worker run process alone", start.Targets)
				}
			case strings.Contains(k.Name, "worker") && !start.Pause && !slices.Contains(start.Targets, "w2#1"):
				t.Fatalf("a worker fault's targets %v lack the process", start.Targets)
			}
			if err := n.Stop(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			c.mu.Lock()
			left := len(c.blocked) + len(c.shaped) + len(c.paused) + len(c.dead) + c.attacking + len(c.full)
			wrong := 0
			for _, v := range c.clocks {
				if v != "0s 1" {
					wrong++
				}
			}
			c.mu.Unlock()
			if left+wrong > 0 {
				t.Fatalf("%s left %d links, processes or clocks broken", k.Name, left+wrong)
			}
			es := rec.Entries()
			if k.Family == FamilyDisk {
				// The node is seen ready again after the stop.
				if len(es) != 3 || es[2].Kind != history.KindNodeReady || es[2].Marker.Node != start.Targets[0] {
					t.Fatalf("a disk fault's entries %+v", es)
				}
				es = es[:2]
			}
			if len(es) != 2 || es[0].Kind != history.KindFaultStart || es[1].Kind != history.KindFaultStop || es[1].Fault.ID != id {
				t.Fatalf("entries %+v", es)
			}
		})
	}
}

func TestPartitionShapes(t *testing.T) {
	c := newFakeCluster(5)
	e := &Env{C: c, T: ci, Rng: rand.New(rand.NewPCG(3, 3))}
	a, err := partitionRing(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	// Each node keeps exactly two neighbours.
	for _, x := range c.nodes {
		hears := 0
		for _, y := range c.nodes {
			if x != y && !c.blocked[[2]string{y, x}] {
				hears++
			}
		}
		if hears != 2 {
			t.Fatalf("in the ring %s hears %d nodes", x, hears)
		}
	}
	a.stop(context.Background())
	if _, err := partitionBridge(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	bridges := 0
	for _, x := range c.nodes {
		cut := false
		for _, y := range c.nodes {
			cut = cut || c.blocked[[2]string{x, y}]
		}
		if !cut {
			bridges++
		}
	}
	if bridges != 1 || len(c.blocked) != 8 {
		t.Fatalf("bridge: %d nodes hear everyone, %d links cut", bridges, len(c.blocked))
	}
}

// The leader isolated with a worker: the worker reaches only the old
// leader, the other workers only the rest.
func TestIsolateLeaderWithWorker(t *testing.T) {
	c := newFakeCluster(3)
	e := &Env{C: c, T: ci, Rng: rand.New(rand.NewPCG(3, 3))}
	if _, err := isolateLeaderWithWorker(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][2]string{{"w2", "n2"}, {"n3", "w2"}, {"w1", "n1"}, {"n1", "n2"}, {"n3", "n1"}} {
		if !c.blocked[l] {
			t.Fatalf("%s→%s open", l[0], l[1])
		}
	}
	for _, l := range [][2]string{{"w2", "n1"}, {"n1", "w2"}, {"w1", "n2"}, {"n2", "n3"}} {
		if c.blocked[l] {
			t.Fatalf("%s→%s cut", l[0], l[1])
		}
	}
}

// Run carries out a plan; HealAll stops whatever is left, heals, and
// records the heal; KillForGood records the kill and the worker's end.
func TestRunHealAndKillForGood(t *testing.T) {
	c := newFakeCluster(3)
	rec := history.NewRecorder(nil)
	n := New(c, rec, ci, 1, quiet())
	ks, _ := Select([]string{"partition-leader", "sigstop-all", "transfer"}, 3, false)
	var plan []Step
	for _, k := range ks {
		plan = append(plan, Step{Kind: k})
	}
	n.Run(context.Background(), plan)
	counts, failed := n.Counts()
	if failed != 0 || counts["partition-leader"] != 1 || counts["transfer"] != 1 {
		t.Fatalf("counts %v, failed %d", counts, failed)
	}
	if _, err := n.Start(context.Background(), ks[0]); err != nil {
		t.Fatal(err)
	}
	w, err := n.KillForGood(context.Background())
	if err != nil || w != "w2" {
		t.Fatalf("KillForGood: %q %v", w, err)
	}
	if err := n.HealAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(c.blocked) != 0 {
		t.Fatalf("links still cut after HealAll")
	}
	es := rec.Entries()
	last := es[len(es)-1]
	if last.Kind != history.KindHeal {
		t.Fatalf("last entry %s", last.Kind)
	}
	starts, stops, gone := 0, 0, 0
	for _, e := range es {
		switch e.Kind {
		case history.KindFaultStart:
			starts++
		case history.KindFaultStop:
			stops++
		case history.KindWorkerGone:
			gone++
		}
		if err := e.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	// The kill for good is never stopped.
	if starts != 5 || stops != 4 || gone != 1 {
		t.Fatalf("%d starts, %d stops, %d gone", starts, stops, gone)
	}
}

// A disk fault fills the leader's or a follower's disk, records that the
// node stopped being ready, and at its stop frees the disk and waits for
// the node: node_ready after the stop, or an error (and no node_ready)
// when it never comes back.
func TestDiskFault(t *testing.T) {
	c := newFakeCluster(3)
	rec := history.NewRecorder(nil)
	n := New(c, rec, ci, 1, quiet())
	ks, _ := Select([]string{"disk"}, 3, false)
	if !slices.Equal(names(ks), []string{"disk-follower", "disk-leader"}) || !ks[0].Disk {
		t.Fatalf("disk family: %v", names(ks))
	}
	id, err := n.Start(context.Background(), ks[1])
	if err != nil {
		t.Fatal(err)
	}
	start := rec.Entries()[0].Fault
	if !slices.Equal(start.Targets, []string{"n1"}) || !start.Disk || !strings.Contains(start.Detail, "not ready after") ||
		!strings.Contains(start.Detail, "disk full on node n1") {
		t.Fatalf("the leader's disk fault: %+v", start)
	}
	if err := n.Stop(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	es := rec.Entries()
	if len(es) != 3 || es[1].Kind != history.KindFaultStop || es[2].Kind != history.KindNodeReady || es[2].Ns < es[1].Ns {
		t.Fatalf("entries %+v", es)
	}

	// A node that never says it is ready again.
	id, err = n.Start(context.Background(), ks[0])
	if err != nil {
		t.Fatal(err)
	}
	target := rec.Entries()[3].Fault.Targets[0]
	if target == "n1" {
		t.Fatalf("a follower's disk fault hit the leader")
	}
	c.mu.Lock()
	c.stuck[target] = true
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := n.Stop(ctx, id); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("stop of a fault whose node never came back: %v", err)
	}
	for _, e := range rec.Entries()[4:] {
		if e.Kind == history.KindNodeReady {
			t.Fatalf("node_ready recorded for a node that never was: %+v", e)
		}
	}
}

// Without disks of their own the disk faults cannot start.
func TestDiskFaultNeedsDisks(t *testing.T) {
	ks, _ := Select([]string{"disk-follower"}, 3, false)
	e := &Env{C: noDisks{newFakeCluster(3)}, T: ci, Rng: rand.New(rand.NewPCG(1, 1))}
	if _, err := ks[0].Start(context.Background(), e); err == nil {
		t.Fatal("a disk fault started without disks")
	}
}

type noDisks struct{ *fakeCluster }

func (noDisks) Disks() Disks { return nil }
