package checker

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// Test histories are written by hand with hb, in milliseconds from an
// arbitrary origin. hb also keeps the truth the cluster would hold (each
// job's leases), emits the events a correct cluster would emit for each
// call, and at the end writes identical final states for three nodes. A
// test that wants a violation calls the helpers out of order, or edits the
// truth or the entries.

const origin = int64(5_000_000_000_000)

func at(msec int64) int64 { return origin + msec*1_000_000 }

type hb struct {
	t       testing.TB
	e       []history.Entry
	ids     map[string]uint64
	seq     uint64
	jobs    map[string]*history.JobSummary
	order   []string
	last    uint64
	noEvent bool // the next call emits no event
}

// Timings of every test history: renew 100 ms, grace 500 ms, toleration
// 1 s (self-stop 800 ms after the last acknowledged send), elections and
// heartbeats 100 ms.
func newHB(t testing.TB) *hb {
	b := &hb{t: t, ids: map[string]uint64{}, jobs: map[string]*history.JobSummary{}}
	b.raw(history.Entry{Kind: history.KindRun, Ns: at(0), Run: &history.Run{
		Format: history.FormatVersion, Nodes: []string{"n1", "n2", "n3"}, Workers: []string{"w1", "w2", "w3", "w4"},
		RenewNs: 100e6, GraceNs: 500e6, TolerationNs: 1000e6, ElectionTimeoutNs: 100e6, HeartbeatTimeoutNs: 100e6,
		Members: testMembers(),
	}})
	return b
}

// testMembers are the test cluster's nodes as configured.
func testMembers() []history.Member {
	var out []history.Member
	for _, n := range []string{"n1", "n2", "n3"} {
		out = append(out, history.Member{ID: n, RaftAddr: "10.0.0." + n[1:] + ":7711", APIAddr: "10.0.0." + n[1:] + ":7701", Voter: true})
	}
	return out
}

// finalTerm is every node's term in the final states.
const finalTerm = 4

func (b *hb) raw(e history.Entry) int {
	b.t.Helper()
	if err := e.Validate(); err != nil {
		b.t.Fatalf("test entry: %v", err)
	}
	b.e = append(b.e, e)
	return len(b.e) - 1
}

// call records one call; comp < 0 leaves it without a complete.
func (b *hb) call(proc, name string, in history.Input, inv, comp int64, st history.Status, reason string, out *history.Output) {
	b.t.Helper()
	b.ids[proc]++
	id := b.ids[proc]
	b.raw(history.Entry{Kind: history.KindInvoke, Ns: at(inv), Process: proc, Op: &history.Op{ID: id, Name: name, Input: &in}})
	if comp >= 0 {
		b.raw(history.Entry{Kind: history.KindComplete, Ns: at(comp), Process: proc,
			Op: &history.Op{ID: id, Name: name, Status: st, Reason: reason, Output: out}})
	}
}

func (b *hb) event(msec int64, ev history.ClusterEvent) {
	b.t.Helper()
	if b.noEvent {
		b.noEvent = false
		return
	}
	b.seq++
	ev.Seq = b.seq
	b.raw(history.Entry{Kind: history.KindClusterEvent, Ns: at(msec), Event: &ev})
}

func (b *hb) job(id string) *history.JobSummary {
	j, ok := b.jobs[id]
	if !ok {
		j = &history.JobSummary{ID: id, State: history.JobQueued, Tokens: []uint64{}}
		b.jobs[id] = j
		b.order = append(b.order, id)
	}
	return j
}

func (b *hb) lease(job string, tok uint64) *history.Lease {
	j := b.job(job)
	for i := range j.Leases {
		if j.Leases[i].Token == tok {
			return &j.Leases[i]
		}
	}
	b.t.Fatalf("no lease %s/%d", job, tok)
	return nil
}

func (b *hb) submit(job string, inv, comp int64) {
	b.job(job)
	b.call("c1", history.OpSubmit, history.Input{JobID: job}, inv, comp, history.StatusOK, "", &history.Output{Created: true})
}

// acquire: worker is granted job with tok, started at once.
func (b *hb) acquire(worker, job string, tok uint64, inv, comp int64) {
	j := b.job(job)
	j.Tokens = append(j.Tokens, tok)
	j.Leases = append(j.Leases, history.Lease{Token: tok, WorkerID: worker, RequestID: "rq" + tokStr(tok), State: history.LeaseActive, Started: true})
	j.State, j.CurrentToken = history.JobRunning, tok
	b.last = max(b.last, tok)
	b.call(worker, history.OpAcquire, history.Input{WorkerID: worker, RequestID: "rq" + tokStr(tok), Max: 1, Start: true}, inv, comp,
		history.StatusOK, "", &history.Output{Grants: []history.Grant{{JobID: job, Token: tok, WorkerID: worker, RequestID: "rq" + tokStr(tok), Started: true}}})
	b.event(comp+1, history.ClusterEvent{Type: history.EventLeaseAcquired, JobID: job, Token: tok, WorkerID: worker})
}

// report: worker's report on tok is acknowledged with outcome succeeded.
func (b *hb) report(worker, job string, tok uint64, rid string, inv, comp int64) {
	l := b.lease(job, tok)
	l.State, l.ReportID, l.Outcome = history.LeaseReported, rid, history.OutcomeSucceeded
	j := b.job(job)
	j.State, j.CurrentToken, j.Outcome = history.JobReported, 0, history.OutcomeSucceeded
	b.call(worker, history.OpReport, history.Input{WorkerID: worker, JobID: job, Token: tok, ReportID: rid,
		Outcome: history.OutcomeSucceeded, Ref: "ref-" + rid}, inv, comp, history.StatusOK, "",
		&history.Output{Outcome: history.OutcomeSucceeded, State: history.JobReported})
	b.event(comp+1, history.ClusterEvent{Type: history.EventLeaseReported, JobID: job, Token: tok, WorkerID: worker,
		Ref: "ref-" + rid, Detail: "OUTCOME_SUCCEEDED"})
}

// refusedReport: a report the cluster refused with reason, recorded.
func (b *hb) refusedReport(worker, job string, tok uint64, rid, reason string, inv, comp int64) {
	b.call(worker, history.OpReport, history.Input{WorkerID: worker, JobID: job, Token: tok, ReportID: rid,
		Outcome: history.OutcomeSucceeded, Ref: "ref-" + rid}, inv, comp, history.StatusFail, reason, nil)
	typ := history.EventStaleReport
	if reason == "CONFLICT" {
		typ = history.EventReportConflict
	}
	b.event(comp+1, history.ClusterEvent{Type: typ, JobID: job, Token: tok, WorkerID: worker, Ref: "ref-" + rid})
}

// release: worker's release of tok is acknowledged; the job is queued.
func (b *hb) release(worker, job string, tok uint64, inv, comp int64) {
	l := b.lease(job, tok)
	l.State = history.LeaseReleased
	j := b.job(job)
	j.State, j.CurrentToken = endState(l), 0
	b.call(worker, history.OpRelease, history.Input{WorkerID: worker, JobID: job, Token: tok}, inv, comp, history.StatusOK, "",
		&history.Output{Job: &history.JobSummary{ID: job, State: j.State, Tokens: slices.Clone(j.Tokens)}})
	b.event(comp+1, history.ClusterEvent{Type: history.EventLeaseReleased, JobID: job, Token: tok, WorkerID: worker})
}

// endState is a job's state when its lease ends without a report: a
// revoked job ends cancelled, any other is queued again.
func endState(l *history.Lease) history.JobState {
	if l.Revoke != "" {
		return history.JobCancelled
	}
	return history.JobQueued
}

// expire: the leader expired tok; the runner saw the event at msec.
func (b *hb) expire(job string, tok uint64, msec int64) {
	l := b.lease(job, tok)
	l.State = history.LeaseExpired
	j := b.job(job)
	j.State, j.CurrentToken = endState(l), 0
	j.Losses++
	b.event(msec, history.ClusterEvent{Type: history.EventLeaseExpired, JobID: job, Token: tok, WorkerID: l.WorkerID})
}

// heartbeat: acknowledged keep for every lease named.
func (b *hb) heartbeat(worker string, inv, comp int64, leases ...history.LeaseRef) {
	out := &history.Output{}
	for _, l := range leases {
		out.Verdicts = append(out.Verdicts, history.Verdict{JobID: l.JobID, Token: l.Token, Verdict: history.VerdictKeep})
	}
	b.call(worker, history.OpHeartbeat, history.Input{WorkerID: worker, Leases: leases}, inv, comp, history.StatusOK, "", out)
}

func (b *hb) fence(job string, tok uint64, inv, comp int64, current uint64, state history.JobState) {
	b.call("c1", history.OpFenceCheck, history.Input{JobID: job, Token: tok}, inv, comp, history.StatusOK, "",
		&history.Output{Current: current != 0 && current == tok, CurrentToken: current, State: state})
}

func (b *hb) getJob(job string, inv, comp int64, seen history.JobSummary) {
	b.call("c1", history.OpGetJob, history.Input{JobID: job}, inv, comp, history.StatusOK, "", &history.Output{Job: &seen})
}

// exec: worker ran job under tok from start to stop (stop < 0: no
// exec_stop); lastAck > 0 records the self-stop input.
func (b *hb) exec(worker, job string, tok uint64, start, stop int64, cause history.StopCause, lastAck int64) {
	b.raw(history.Entry{Kind: history.KindExecStart, Ns: at(start), Process: worker,
		Exec: &history.Exec{JobID: job, Token: tok, WorkerID: worker}})
	if stop < 0 {
		return
	}
	x := &history.Exec{JobID: job, Token: tok, WorkerID: worker, Cause: cause}
	if lastAck > 0 {
		x.LastAckSendNs = at(lastAck)
	}
	b.raw(history.Entry{Kind: history.KindExecStop, Ns: at(stop), Process: worker, Exec: x})
}

func (b *hb) sink(kind, worker, job string, tok uint64, msec int64, accepted bool) {
	b.raw(history.Entry{Kind: history.KindSinkWrite, Ns: at(msec), Process: worker,
		Sink: &history.SinkWrite{Sink: kind, JobID: job, Token: tok, WorkerID: worker, Accepted: accepted}})
}

// fault: stop < 0 leaves it on to the end.
func (b *hb) fault(id, typ string, targets []string, start, stop int64) {
	b.raw(history.Entry{Kind: history.KindFaultStart, Ns: at(start), Process: "nemesis",
		Fault: &history.Fault{ID: id, Type: typ, Targets: targets}})
	if stop >= 0 {
		b.raw(history.Entry{Kind: history.KindFaultStop, Ns: at(stop), Process: "nemesis", Fault: &history.Fault{ID: id}})
	}
}

func (b *hb) heal(msec int64) {
	b.raw(history.Entry{Kind: history.KindHeal, Ns: at(msec), Process: "nemesis"})
}

func (b *hb) leader(msec int64, node string) {
	b.raw(history.Entry{Kind: history.KindLeaderElected, Ns: at(msec), Marker: &history.Marker{Node: node}})
}

// finish closes the history: run_end, then one final state per node from
// the truth, read at msec, with every event the history holds in each
// node's event log.
func (b *hb) finish(msec int64, eventsComplete bool) []history.Entry {
	b.raw(history.Entry{Kind: history.KindRunEnd, Ns: at(msec), RunEnd: &history.RunEnd{EventsComplete: eventsComplete, LastEventSeq: b.seq}})
	log := b.eventLog()
	for k, node := range []string{"n1", "n2", "n3"} {
		var jobs []history.JobSummary
		for _, id := range b.order {
			j := *b.jobs[id]
			j.Tokens = slices.Clone(j.Tokens)
			j.Leases = slices.Clone(j.Leases)
			jobs = append(jobs, j)
		}
		b.raw(history.Entry{Kind: history.KindFinalState, Ns: at(msec + 1 + int64(k)), Process: "runner", Final: &history.FinalState{
			Node: node, AppliedIndex: 100 + b.seq, LastToken: b.last, Complete: true, Jobs: jobs,
			StateHash: history.HashJobs(b.last, jobs), Term: finalTerm, Members: testMembers(), Events: log, CutEventSeq: b.seq,
		}})
	}
	return b.e
}

// eventLog sums up the events recorded so far, as a node that kept them
// all would.
func (b *hb) eventLog() *history.EventLog {
	log := &history.EventLog{ByType: map[string]int{}}
	for _, e := range b.e {
		if e.Kind != history.KindClusterEvent {
			continue
		}
		if log.FirstSeq == 0 {
			log.FirstSeq = e.Event.Seq
		}
		log.LastSeq = e.Event.Seq
		log.Count++
		log.ByType[e.Event.Type]++
		if e.Event.Type == history.EventStaleReport {
			log.StaleReports = append(log.StaleReports, e.Event.Seq)
		}
	}
	return log
}

func tokStr(t uint64) string { return strconv.FormatUint(t, 10) }

// knobs move the few times the violation tests need to move in the clean
// scenario.
type knobs struct {
	w2Stop      int64 // w2 stops job j2 (token 2); self-stop deadline 900
	j2Expiry    int64 // the expiry of j2's token 2 is seen
	j3Expiry    int64 // the expiry of j3's token 3 is seen; w3 last renewed at 400
	leaderAfter int64 // a leader is seen after the heal at 3000
	j4Relet     int64 // j4 is leased again after the heal (-1: never)
	j4Expiry    int64 // j4's orphaned lease expires
}

var defaults = knobs{w2Stop: 905, j2Expiry: 1110, j3Expiry: 1410, leaderAfter: 3050, j4Relet: 3400, j4Expiry: 3310}

func ref(job string, tok uint64) history.LeaseRef { return history.LeaseRef{JobID: job, Token: tok} }

// scenario is a clean run with every fault the checkers care about:
//   - j1: w1 runs and reports it; its fenced write lands while it holds
//     the lease;
//   - j2: w2 is cut off from the cluster, stops itself (self_stop) before
//     its lease expires, the job goes to w1; after the heal w2's late
//     report is refused STALE_TOKEN and recorded, its fenced write is
//     rejected, its unfenced write accepted (counted, not a violation);
//   - j3: w3 is killed; its lease expires; w1 takes and finishes the job;
//   - j4: w4 takes it, is killed during a leader partition; after the heal
//     a new leader restarts the clocks, the lease expires, and w1 takes
//     the orphan within toleration.
//
// It returns the builder before finish, so a test can add to it.
func scenario(t testing.TB, k knobs) *hb {
	b := newHB(t)
	b.submit("j1", 10, 12)
	b.submit("j2", 13, 15)
	b.submit("j3", 16, 18)

	b.acquire("w1", "j1", 1, 20, 22)
	b.exec("w1", "j1", 1, 23, 249, history.CauseCompleted, 200)
	b.acquire("w2", "j2", 2, 30, 32)
	b.exec("w2", "j2", 2, 33, k.w2Stop, history.CauseSelfStop, 100)
	b.acquire("w3", "j3", 3, 40, 42)
	b.exec("w3", "j3", 3, 43, -1, "", 0) // killed at 500

	b.heartbeat("w1", 100, 102, ref("j1", 1))
	b.heartbeat("w2", 100, 102, ref("j2", 2))
	b.heartbeat("w3", 100, 102, ref("j3", 3))
	b.sink(history.SinkFenced, "w1", "j1", 1, 150, true)
	b.fault("f1", "worker-cut", []string{"w2"}, 150, 3000)
	b.call("w2", history.OpHeartbeat, history.Input{WorkerID: "w2", Leases: []history.LeaseRef{ref("j2", 2)}}, 200, 400, history.StatusInfo, "TIMEOUT", nil)
	b.heartbeat("w1", 200, 202, ref("j1", 1))
	b.heartbeat("w3", 400, 402, ref("j3", 3))
	b.report("w1", "j1", 1, "r1", 250, 253)
	b.fence("j1", 1, 260, 262, 0, history.JobReported)
	b.fault("f2", "kill-9", []string{"w3"}, 500, -1)

	b.expire("j2", 2, k.j2Expiry)
	b.getJob("j2", 1150, 1152, history.JobSummary{ID: "j2", State: history.JobQueued, Tokens: []uint64{2},
		Leases: []history.Lease{{Token: 2, WorkerID: "w2", State: history.LeaseExpired, Started: true}}})
	b.acquire("w1", "j2", 4, 1200, 1202)
	b.exec("w1", "j2", 4, 1203, 1400, history.CauseCompleted, 1300)
	b.heartbeat("w1", 1300, 1302, ref("j2", 4))
	b.report("w1", "j2", 4, "r4", 1401, 1403)

	b.expire("j3", 3, k.j3Expiry)
	b.acquire("w1", "j3", 5, 1500, 1502)
	b.exec("w1", "j3", 5, 1503, 1600, history.CauseCompleted, 1550)
	b.heartbeat("w1", 1550, 1552, ref("j3", 5))
	b.report("w1", "j3", 5, "r5", 1601, 1603)

	b.submit("j4", 1800, 1802)
	b.acquire("w4", "j4", 6, 1900, 1902)
	b.exec("w4", "j4", 6, 1903, -1, "", 0) // killed at 1950
	b.heartbeat("w4", 1920, 1922, ref("j4", 6))
	b.fault("f3", "kill-9", []string{"w4"}, 1950, -1)
	b.fault("f4", "partition-leader", []string{"n1"}, 2000, 3000)
	b.leader(2300, "n2")
	b.heal(3000)
	if k.leaderAfter >= 0 {
		b.leader(k.leaderAfter, "n2")
	}

	b.refusedReport("w2", "j2", 2, "r2", "STALE_TOKEN", 3100, 3102)
	b.sink(history.SinkFenced, "w2", "j2", 2, 3105, false)
	b.sink(history.SinkUnfenced, "w2", "j2", 2, 3106, true)

	b.expire("j4", 6, k.j4Expiry)
	if k.j4Relet < 0 {
		return b // never leased again
	}
	b.acquire("w1", "j4", 7, k.j4Relet, k.j4Relet+2)
	b.exec("w1", "j4", 7, k.j4Relet+3, k.j4Relet+100, history.CauseCompleted, k.j4Relet+50)
	b.heartbeat("w1", k.j4Relet+50, k.j4Relet+52, ref("j4", 7))
	b.report("w1", "j4", 7, "r7", k.j4Relet+101, k.j4Relet+103)
	return b
}

func clean(t testing.TB) []history.Entry { return scenario(t, defaults).finish(5000, true) }

// expectOnly checks that exactly the invariants named found violations.
func expectOnly(t *testing.T, rep Report, invariants ...string) {
	t.Helper()
	if len(rep.Errors) > 0 {
		t.Fatalf("history not checked: %v", rep.Errors)
	}
	var wrong []string
	for _, res := range rep.Results {
		want := slices.Contains(invariants, res.Invariant)
		if want == res.OK() {
			wrong = append(wrong, res.Invariant)
		}
	}
	if len(wrong) > 0 {
		var sb strings.Builder
		_ = rep.Summary(&sb)
		t.Fatalf("wrong verdicts for %v (want violations exactly in %v):\n%s", wrong, invariants, sb.String())
	}
	if rep.OK() != (len(invariants) == 0) {
		t.Fatalf("OK() = %v", rep.OK())
	}
}
