package checker

import (
	"testing"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// Shell workers (`leasehold worker run`): their calls are not recorded
// (history.Run's unrecorded), their commands record the executions, each
// as a process of its own (WORKER/TOKEN/PID), and a kill of the worker run
// process names that process alone: its commands run on.

// shellGrant: the cluster grants worker (unrecorded) job with tok at msec;
// only the event shows it.
func (b *hb) shellGrant(worker, job string, tok uint64, msec int64) {
	j := b.job(job)
	j.Tokens = append(j.Tokens, tok)
	j.Leases = append(j.Leases, history.Lease{Token: tok, WorkerID: worker, State: history.LeaseActive, Started: true})
	j.State, j.CurrentToken = history.JobRunning, tok
	b.last = max(b.last, tok)
	b.event(msec, history.ClusterEvent{Type: history.EventLeaseAcquired, JobID: job, Token: tok, WorkerID: worker})
}

// shellReport: worker's (unrecorded) report of tok succeeded at msec.
func (b *hb) shellReport(worker, job string, tok uint64, msec int64) {
	l := b.lease(job, tok)
	l.State, l.ReportID, l.Outcome = history.LeaseReported, "sr"+tokStr(tok), history.OutcomeSucceeded
	j := b.job(job)
	j.State, j.CurrentToken, j.Outcome = history.JobReported, 0, history.OutcomeSucceeded
	b.event(msec, history.ClusterEvent{Type: history.EventLeaseReported, JobID: job, Token: tok, WorkerID: worker,
		Ref: "ref-" + job, Detail: "OUTCOME_SUCCEEDED"})
}

// command: a shell worker's command for job under tok, as jepsen-lite
// shell-job records it (stop < 0: no exec_stop at all, its watcher gone
// too); lastAck is what it read from the deadline file.
func (b *hb) command(worker, job string, tok uint64, pid int, start, stop int64, cause history.StopCause, lastAck int64) {
	proc := worker + "/" + tokStr(tok) + "/" + tokStr(uint64(pid))
	b.raw(history.Entry{Kind: history.KindExecStart, Ns: at(start), Process: proc,
		Exec: &history.Exec{JobID: job, Token: tok, WorkerID: worker}})
	if stop < 0 {
		return
	}
	x := &history.Exec{JobID: job, Token: tok, WorkerID: worker, Cause: cause}
	if lastAck > 0 {
		x.LastAckSendNs = at(lastAck)
	}
	b.raw(history.Entry{Kind: history.KindExecStop, Ns: at(stop), Process: proc, Exec: x})
}

// shellHistory: shell worker s1 holds j1 and j2 when its worker run
// process is killed at 200 (last acknowledged heartbeat sent at 100: its
// self-stop deadline is 900).
//   - j1: s1 comes back at 500, re-attaches to j1's command, still
//     running, and reports it under token 1.
//   - j2: its command is stopped by its supervisor at the deadline (the
//     watcher records killed_process at j2Stop); j2's lease expires, seen
//     at 1110; Go worker w1 runs the job from 1203 under token 3.
//
// j2Stop < 0: the command has no recorded stop at all.
func shellHistory(t *testing.T, j2Stop int64) []history.Entry {
	b := newHB(t)
	b.e[0].Run.Unrecorded = []string{"s1"}
	b.submit("j1", 10, 12)
	b.submit("j2", 13, 15)
	b.shellGrant("s1", "j1", 1, 20)
	b.command("s1", "j1", 1, 101, 23, 700, history.CauseCompleted, 650)
	b.shellGrant("s1", "j2", 2, 30)
	b.command("s1", "j2", 2, 102, 33, j2Stop, history.CauseKilledProcess, 100)
	b.raw(history.Entry{Kind: history.KindFaultStart, Ns: at(200), Process: "nemesis",
		Fault: &history.Fault{ID: "f1", Type: "kill-shell-worker", Targets: []string{"s1#1"}, Kill: true}})
	b.raw(history.Entry{Kind: history.KindFaultStop, Ns: at(500), Process: "nemesis", Fault: &history.Fault{ID: "f1"}})
	b.shellReport("s1", "j1", 1, 702)
	b.getJob("j1", 800, 802, history.JobSummary{ID: "j1", State: history.JobReported, Tokens: []uint64{1}, Outcome: history.OutcomeSucceeded,
		Leases: []history.Lease{{Token: 1, WorkerID: "s1", State: history.LeaseReported, Started: true}}})
	// The fenced sink's check of the command's write.
	b.fence("j1", 1, 297, 299, 1, history.JobRunning)
	b.sink(history.SinkFenced, "sink", "j1", 1, 300, true)

	b.expire("j2", 2, 1110)
	b.acquire("w1", "j2", 3, 1200, 1202)
	b.exec("w1", "j2", 3, 1203, 1400, history.CauseCompleted, 1300)
	b.heartbeat("w1", 1300, 1302, ref("j2", 3))
	b.report("w1", "j2", 3, "r3", 1401, 1403)
	b.heal(2000)
	b.leader(2010, "n1")
	return b.finish(3000, true)
}

func TestShellWorkerCleanHistoryPasses(t *testing.T) {
	rep := Check(shellHistory(t, 905), Options{RequireAllFinished: true})
	expectOnly(t, rep)
	i3, _ := rep.Result("I3")
	i4, _ := rep.Result("I4")
	i10, _ := rep.Result("I10")
	if i3.Stats["executions"] != 3 || i4.Stats["expired_executions_checked"] != 1 || i4.Stats["self_stop_deadlines_checked"] != 3 {
		t.Fatalf("the commands' executions are not all checked: I3 %v, I4 %v", i3.Stats, i4.Stats)
	}
	// Both jobs had a lease held by s1, whose acquires, heartbeats and
	// reports the history lacks: not judged by Porcupine.
	if i10.Stats["jobs_unrecorded_holder"] != 2 || i10.Stats["jobs_checked"] != 0 || len(i10.Notes) != 1 {
		t.Fatalf("I10 stats %v", i10.Stats)
	}
}

// A shell worker's calls are not in the history: judged as if they were
// all there, its jobs would fail I10 for want of the calls (a read finds
// j1 reported, which no recorded report did).
func TestShellWorkerUnrecordedCallsNeeded(t *testing.T) {
	es := shellHistory(t, 905)
	es[0].Run.Unrecorded = nil
	expectOnly(t, Check(es, Options{RequireAllFinished: true}), "I10")
}

// The command of j2 runs on past its lease's expiry (seen at 1110), and
// past its self-stop deadline (900), though it stops before w1 starts.
func TestShellCommandPastExpiry(t *testing.T) {
	rep := Check(shellHistory(t, 1150), Options{RequireAllFinished: true})
	expectOnly(t, rep, "I4")
	if res, _ := rep.Result("I4"); len(res.Violations) != 2 {
		t.Fatalf("want the expiry and the self-stop deadline, got %v", res.Violations)
	}
}

// The command of j2 runs on after w1 started the job under token 3.
func TestShellCommandOverlapsNextHolder(t *testing.T) {
	rep := Check(shellHistory(t, 1300), Options{RequireAllFinished: true})
	expectOnly(t, rep, "I3", "I4")
	if res, _ := rep.Result("I3"); res.Stats["overlaps"] != 1 {
		t.Fatalf("I3 stats %v", res.Stats)
	}
}

// A command with no recorded stop runs to the end of time: the kill of its
// worker run process (s1#1) does not end it, for the command outlives
// that process.
func TestShellCommandOutlivesWorkerKill(t *testing.T) {
	rep := Check(shellHistory(t, -1), Options{RequireAllFinished: true})
	expectOnly(t, rep, "I3", "I4")
	if res, _ := rep.Result("I3"); res.Stats["never_stopped"] != 1 {
		t.Fatalf("I3 stats %v", res.Stats)
	}
}
