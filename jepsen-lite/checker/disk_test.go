package checker

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
)

// diskFault fills node's disk at start and frees it at stop.
func (b *hb) diskFault(id, node string, start, stop int64) {
	b.raw(history.Entry{Kind: history.KindFaultStart, Ns: at(start), Process: "nemesis",
		Fault: &history.Fault{ID: id, Type: "disk-follower", Targets: []string{node}, Disk: true}})
	b.raw(history.Entry{Kind: history.KindFaultStop, Ns: at(stop), Process: "nemesis", Fault: &history.Fault{ID: id}})
}

func (b *hb) ready(msec int64, node string) {
	b.raw(history.Entry{Kind: history.KindNodeReady, Ns: at(msec), Process: "nemesis", Marker: &history.Marker{Node: node}})
}

// A node ready soon after its disk was freed passes I12, and the time is
// reported; one never seen ready again, or ready too late, is a violation.
func TestDiskReadyAfterFree(t *testing.T) {
	b := scenario(t, defaults)
	b.diskFault("f9", "n3", 2400, 2600)
	b.ready(2500, "n3") // before the free: not the recovery
	b.ready(2700, "n2") // another node
	b.ready(2850, "n3")
	rep := Check(b.finish(5000, true), Options{RequireAllFinished: true})
	expectOnly(t, rep)
	i12, _ := rep.Result("I12")
	if i12.Stats["disks_freed"] != 1 || i12.Stats["disk_ready_max_ms"] != 250 || i12.Stats["disk_ready_bound_ms"] != 10940 ||
		rep.DiskReadyMs == nil || *rep.DiskReadyMs != 250 {
		t.Fatalf("stats %v, report %v", i12.Stats, rep.DiskReadyMs)
	}

	b = scenario(t, defaults)
	b.diskFault("f9", "n3", 2400, 2600)
	b.ready(2500, "n3")
	rep = Check(b.finish(5000, true), Options{RequireAllFinished: true})
	expectOnly(t, rep, "I12")
	violationsMention(t, i12Of(t, rep), "node n3's disk was freed at t+2.600s, and the node was never seen ready again")

	b = scenario(t, defaults)
	b.diskFault("f9", "n3", 2400, 2600)
	b.ready(2850, "n3")
	rep = Check(b.finish(5000, true), Options{RequireAllFinished: true, DiskReadyBound: 200 * time.Millisecond})
	expectOnly(t, rep, "I12")
	violationsMention(t, i12Of(t, rep), "node n3 was ready 250.0ms after its disk was freed, over the bound 200.0ms")
}

func i12Of(t *testing.T, rep Report) Result {
	t.Helper()
	res, _ := rep.Result("I12")
	return res
}

// While a disk is full: a write acknowledged is a write like any (and
// counted), one refused DISK_FULL is none, and a refused submit whose job
// exists after all is a violation.
func TestDiskFullWrites(t *testing.T) {
	b := scenario(t, defaults)
	b.diskFault("f9", "n1", 2400, 2600)
	b.submit("j8", 2450, 2460)
	b.job("j8").State = history.JobCancelled
	b.call("c1", history.OpSubmit, history.Input{JobID: "j9"}, 2450, 2455, history.StatusFail, transport.ReasonDiskFull, nil)
	b.ready(2700, "n1")
	entries := b.finish(5000, true)
	rep := Check(entries, Options{RequireAllFinished: true})
	expectOnly(t, rep)
	i7, _ := rep.Result("I7")
	if i7.Stats["acked_while_disk_full"] != 1 || i7.Stats["refused_disk_full"] != 1 {
		t.Fatalf("stats %v", i7.Stats)
	}

	// The acknowledged one lost.
	lost := make([]history.Entry, len(entries))
	for i, e := range entries {
		if e.Final != nil {
			e.Final = withoutJob(e.Final, "j8")
		}
		lost[i] = e
	}
	rep = Check(lost, Options{RequireAllFinished: true})
	expectOnly(t, rep, "I7")
	violationsMention(t, resultOf(t, rep, "I7"), "node n1: job j8 is missing after an acknowledged write")

	// The refused one written after all.
	b = scenario(t, defaults)
	b.diskFault("f9", "n1", 2400, 2600)
	b.call("c1", history.OpSubmit, history.Input{JobID: "j9"}, 2450, 2455, history.StatusFail, transport.ReasonDiskFull, nil)
	b.job("j9").State = history.JobCancelled
	b.ready(2700, "n1")
	rep = Check(b.finish(5000, true), Options{RequireAllFinished: true})
	expectOnly(t, rep, "I7")
	violationsMention(t, resultOf(t, rep, "I7"), "job j9 exists, but every submit of it was refused (DISK_FULL)")
}

func withoutJob(f *history.FinalState, job string) *history.FinalState {
	out := *f
	out.Jobs = nil
	for _, j := range f.Jobs {
		if j.ID != job {
			out.Jobs = append(out.Jobs, j)
		}
	}
	return &out
}

func resultOf(t *testing.T, rep Report, inv string) Result {
	t.Helper()
	res, ok := rep.Result(inv)
	if !ok {
		t.Fatalf("no %s result", inv)
	}
	return res
}
