package checker

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestCleanHistoryPasses(t *testing.T) {
	rep := Check(clean(t), Options{RequireAllFinished: true})
	expectOnly(t, rep)
	stat := func(inv, name string) float64 {
		t.Helper()
		res, _ := rep.Result(inv)
		v, ok := res.Stats[name]
		if !ok {
			t.Fatalf("%s has no stat %s: %v", inv, name, res.Stats)
		}
		return v
	}
	for _, c := range []struct {
		inv, name string
		want      float64
	}{
		{"I1", "grants", 7},
		{"I3", "executions", 7},
		{"I3", "overlaps", 0},
		{"I4", "min_slack_ms", 205},
		{"I4", "expiries_observed", 3},
		{"I5", "fenced_rejected", 1},
		{"I5", "unfenced_stale_accepted", 1},
		{"I5", "refusals_matched", 1},
		{"I9", "jobs_completed", 4},
		{"I10", "jobs_checked", 4},
		{"I11", "expiries_checked", 3},
		{"I11", "min_margin_ms", 10},
		{"I12", "leader_recovery_ms", 50},
		{"I12", "orphans", 1},
		{"I12", "orphan_max_recovery_ms", 402},
	} {
		if got := stat(c.inv, c.name); got != c.want {
			t.Errorf("%s %s = %v, want %v", c.inv, c.name, got, c.want)
		}
	}
	if rep.MinExpirySlackMs == nil || *rep.MinExpirySlackMs != 205 || rep.LeaderRecoveryMs == nil || *rep.LeaderRecoveryMs != 50 {
		t.Fatalf("highlights %v %v", rep.MinExpirySlackMs, rep.LeaderRecoveryMs)
	}
	if c := rep.Ops[history.OpReport]; c.Attempted != 5 || c.OK != 4 || c.Fail != 1 {
		t.Fatalf("report counts %+v", c)
	}
	if c := rep.Ops[history.OpHeartbeat]; c.Info != 1 {
		t.Fatalf("heartbeat counts %+v", c)
	}
	if rep.Faults["kill-9"] != 2 || rep.Faults["worker-cut"] != 1 {
		t.Fatalf("faults %v", rep.Faults)
	}
}

// The clean history written as JSON Lines and read back checks the same.
func TestCleanHistoryThroughJSONLines(t *testing.T) {
	entries := clean(t)
	var buf bytes.Buffer
	if err := history.Write(&buf, entries); err != nil {
		t.Fatal(err)
	}
	read, err := history.Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	a, b := Check(entries, Options{}), Check(read, Options{})
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("reports differ after a round trip")
	}
}

func TestI1TokenInTwoJobs(t *testing.T) {
	b := scenario(t, defaults)
	j3 := b.job("j3")
	j3.Tokens = append([]uint64{1}, j3.Tokens...)
	j3.Leases = append([]history.Lease{{Token: 1, WorkerID: "w3", State: history.LeaseExpired}}, j3.Leases...)
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I1")
}

func TestI1GrantedTokenMissing(t *testing.T) {
	b := scenario(t, defaults)
	j2 := b.job("j2")
	j2.Tokens, j2.Leases = j2.Tokens[1:], j2.Leases[1:]
	rep := Check(b.finish(5000, true), Options{})
	expectOnly(t, rep, "I1")
	res, _ := rep.Result("I1")
	if !strings.Contains(res.Violations[0].Msg, "no token 2") {
		t.Fatalf("violation %q", res.Violations[0].Msg)
	}
}

func TestI2TwoLiveLeasesInFinalState(t *testing.T) {
	b := scenario(t, defaults)
	b.lease("j2", 2).State = history.LeaseActive
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I2")
}

// A read finds an old token live after a newer one was granted: the old
// lease outlived the grant. Porcupine agrees it cannot be linearized.
func TestI2OldTokenSeenLive(t *testing.T) {
	b := scenario(t, defaults)
	b.fence("j2", 2, 1450, 1452, 2, history.JobRunning)
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I2", "I10")
}

// w1 releases job j5 but keeps running it; w2 takes it meanwhile.
func TestI3OverlapAfterRelease(t *testing.T) {
	b := scenario(t, defaults)
	b.submit("j5", 3600, 3602)
	b.acquire("w1", "j5", 8, 3610, 3612)
	b.exec("w1", "j5", 8, 3613, 3900, history.CauseCompleted, 0)
	b.release("w1", "j5", 8, 3700, 3702)
	b.acquire("w2", "j5", 9, 3750, 3752)
	b.exec("w2", "j5", 9, 3753, 3800, history.CauseCompleted, 0)
	b.report("w2", "j5", 9, "r9", 3801, 3803)
	rep := Check(b.finish(5000, true), Options{})
	expectOnly(t, rep, "I3")
	if res, _ := rep.Result("I3"); res.Stats["overlaps"] != 1 {
		t.Fatalf("stats %v", res.Stats)
	}
}

// pausedHistory: w1 is SIGSTOPped holding j1; its lease expires, w2 runs
// the job; w1 wakes and writes to the fenced sink before it learns it
// lost the lease. A correct cluster's fence check rejects that write.
func pausedHistory(t *testing.T, staleWriteAccepted bool) []history.Entry {
	b := newHB(t)
	b.submit("j1", 10, 12)
	b.acquire("w1", "j1", 1, 20, 22)
	b.exec("w1", "j1", 1, 23, 2010, history.CauseLost, 50)
	b.heartbeat("w1", 50, 52, ref("j1", 1))
	b.raw(history.Entry{Kind: history.KindFaultStart, Ns: at(100), Process: "nemesis",
		Fault: &history.Fault{ID: "p1", Type: "sigstop-worker", Targets: []string{"w1"}}})
	b.expire("j1", 1, 1060)
	b.acquire("w2", "j1", 2, 1100, 1102)
	b.exec("w2", "j1", 2, 1103, 1500, history.CauseCompleted, 1400)
	b.heartbeat("w2", 1400, 1402, ref("j1", 2))
	b.sink(history.SinkFenced, "w2", "j1", 2, 1450, true)
	b.report("w2", "j1", 2, "r2", 1501, 1503)
	b.raw(history.Entry{Kind: history.KindFaultStop, Ns: at(2000), Process: "nemesis", Fault: &history.Fault{ID: "p1"}})
	b.sink(history.SinkFenced, "w1", "j1", 1, 2005, staleWriteAccepted)
	b.heal(2020)
	b.leader(2030, "n1")
	return b.finish(3000, true)
}

func TestI3PauseExcusedWhenFencingHolds(t *testing.T) {
	rep := Check(pausedHistory(t, false), Options{})
	expectOnly(t, rep)
	if res, _ := rep.Result("I3"); res.Stats["excused_overlaps"] != 1 {
		t.Fatalf("I3 stats %v", res.Stats)
	}
	if res, _ := rep.Result("I4"); res.Stats["expired_executions_excused"] != 1 {
		t.Fatalf("I4 stats %v", res.Stats)
	}
}

func TestI3PauseNotExcusedWhenFencingFails(t *testing.T) {
	expectOnly(t, Check(pausedHistory(t, true), Options{}), "I3", "I5")
}

// w2 runs on past its self-stop deadline and past its lease's expiry,
// though it stops before w1 starts the job.
func TestI4StopAfterExpiry(t *testing.T) {
	k := defaults
	k.w2Stop = 1150
	rep := Check(scenario(t, k).finish(5000, true), Options{})
	expectOnly(t, rep, "I4")
	res, _ := rep.Result("I4")
	if len(res.Violations) != 2 {
		t.Fatalf("want the expiry and the self-stop deadline, got %v", res.Violations)
	}
}

func TestI5FencedSinkAcceptsStaleToken(t *testing.T) {
	b := scenario(t, defaults)
	b.sink(history.SinkFenced, "w2", "j2", 2, 3107, true)
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I5")
}

// A deposed leader tells w2, long after its lease was taken from it, that
// it still holds it (the worker named nothing: it had stopped).
func TestI5HeartbeatClaimsEndedLease(t *testing.T) {
	b := scenario(t, defaults)
	b.call("w2", history.OpHeartbeat, history.Input{WorkerID: "w2"}, 3200, 3202, history.StatusOK, "",
		&history.Output{Unnamed: []history.LeaseRef{{JobID: "j2", Token: 2}}})
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I5")
}

// A lease named as held is judged only on evidence of its end: a live one,
// or one nothing says ended, is no violation.
func TestI5HeartbeatClaimsLiveLease(t *testing.T) {
	b := scenario(t, defaults)
	b.call("w1", history.OpHeartbeat, history.Input{WorkerID: "w1"}, 150, 152, history.StatusOK, "",
		&history.Output{Unnamed: []history.LeaseRef{{JobID: "j1", Token: 1}, {JobID: "j1", Token: 99}}})
	expectOnly(t, Check(b.finish(5000, true), Options{}))
}

func TestI5RefusalNotRecorded(t *testing.T) {
	b := scenario(t, defaults)
	b.noEvent = true
	b.refusedReport("w2", "j2", 2, "r2b", "STALE_TOKEN", 3200, 3202)
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I5")
	// Without the whole event log the refusal cannot be matched.
	b = scenario(t, defaults)
	b.noEvent = true
	b.refusedReport("w2", "j2", 2, "r2b", "STALE_TOKEN", 3200, 3202)
	rep := Check(b.finish(5000, false), Options{})
	expectOnly(t, rep)
	if res, _ := rep.Result("I5"); len(res.Notes) == 0 {
		t.Fatalf("I5 should note the unmatched refusals")
	}
}

// The cluster takes w2's late report on the expired token: a stale report
// accepted, which also completes the job twice.
func TestI5StaleReportAccepted(t *testing.T) {
	b := scenario(t, defaults)
	b.report("w2", "j2", 2, "r2x", 3200, 3202)
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I5", "I9", "I10")
}

func TestI6RepeatAnsweredDifferently(t *testing.T) {
	b := scenario(t, defaults)
	b.call("w1", history.OpReport, history.Input{WorkerID: "w1", JobID: "j1", Token: 1, ReportID: "r1", Outcome: history.OutcomeSucceeded},
		300, 302, history.StatusOK, "", &history.Output{Outcome: history.OutcomeSucceeded, State: history.JobQueued, Requeued: true})
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I6", "I10")
}

func TestI6RepeatRefusedAsConflict(t *testing.T) {
	b := scenario(t, defaults)
	b.refusedReport("w1", "j1", 1, "r1", "CONFLICT", 300, 302)
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I6", "I10")
}

func TestI7ReportOutcomeLost(t *testing.T) {
	b := scenario(t, defaults)
	b.lease("j1", 1).Outcome = history.OutcomeFailed
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I7")
}

func TestI7SubmittedJobLost(t *testing.T) {
	b := scenario(t, defaults)
	b.submit("j5", 3600, 3602)
	delete(b.jobs, "j5")
	b.order = b.order[:len(b.order)-1]
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I7")
	// Compaction allowed: counted, not a loss.
	b = scenario(t, defaults)
	b.submit("j5", 3600, 3602)
	delete(b.jobs, "j5")
	b.order = b.order[:len(b.order)-1]
	rep := Check(b.finish(5000, true), Options{AllowCompacted: true})
	expectOnly(t, rep)
	if res, _ := rep.Result("I7"); res.Stats["jobs_compacted"] != 3 {
		t.Fatalf("I7 stats %v", res.Stats)
	}
}

func TestI8NodesDisagree(t *testing.T) {
	entries := clean(t)
	entries[len(entries)-1].Final.AppliedIndex++
	expectOnly(t, Check(entries, Options{}), "I8")

	entries = clean(t)
	last := entries[len(entries)-1].Final
	last.Jobs[0].State = history.JobCancelled
	rep := Check(entries, Options{})
	expectOnly(t, rep, "I8")
	res, _ := rep.Result("I8")
	if !strings.Contains(res.Violations[len(res.Violations)-1].Msg, "job j1 first differs") {
		t.Fatalf("violations %v", res.Violations)
	}
}

func TestI9JobNeverFinished(t *testing.T) {
	b := scenario(t, defaults)
	b.submit("j5", 3600, 3602)
	entries := b.finish(5000, true)
	expectOnly(t, Check(entries, Options{}))
	expectOnly(t, Check(entries, Options{RequireAllFinished: true}), "I9")
}

func TestI9LeasedAfterCompletion(t *testing.T) {
	b := scenario(t, defaults)
	b.acquire("w1", "j1", 8, 4000, 4002)
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I9", "I10")
}

// A linearizable read contradicts the report acknowledged before it; only
// the model can tell. Its visualization is written.
func TestI10ReadContradictsReport(t *testing.T) {
	b := scenario(t, defaults)
	b.getJob("j1", 270, 272, history.JobSummary{ID: "j1", State: history.JobQueued, Tokens: []uint64{1}})
	dir := t.TempDir()
	rep := Check(b.finish(5000, true), Options{OutDir: dir})
	expectOnly(t, rep, "I10")
	want := filepath.Join(dir, "i10-j1.html")
	if len(rep.Visualizations) != 1 || rep.Visualizations[0] != want {
		t.Fatalf("visualizations %v", rep.Visualizations)
	}
	html, err := os.ReadFile(want)
	if err != nil || !bytes.Contains(html, []byte("report(1")) {
		t.Fatalf("visualization: %v (%d bytes)", err, len(html))
	}
}

// j3's lease expires 50 ms before toleration has passed since w3's last
// acknowledged heartbeat (a kill does not excuse it).
func TestI11EarlyExpiry(t *testing.T) {
	k := defaults
	k.j3Expiry = 1350
	entries := scenario(t, k).finish(5000, true)
	rep := Check(entries, Options{})
	expectOnly(t, rep, "I11")
	if res, _ := rep.Result("I11"); res.Stats["min_margin_ms"] != -50 {
		t.Fatalf("I11 stats %v", res.Stats)
	}
	expectOnly(t, Check(entries, Options{ClockTolerance: 60e6}))
}

func TestI11ExcusedByClockFault(t *testing.T) {
	k := defaults
	k.j3Expiry = 1350
	b := scenario(t, k)
	b.fault("c1", "clock-skew", []string{"n1"}, 1000, 1100)
	rep := Check(b.finish(5000, true), Options{})
	expectOnly(t, rep)
	if res, _ := rep.Result("I11"); res.Stats["expiries_excused"] != 1 {
		t.Fatalf("I11 stats %v", res.Stats)
	}
}

func TestI12LeaderLate(t *testing.T) {
	k := defaults
	k.leaderAfter = 3700
	expectOnly(t, Check(scenario(t, k).finish(5000, true), Options{}), "I12")
	k.leaderAfter = -1
	expectOnly(t, Check(scenario(t, k).finish(5000, true), Options{}), "I12")
}

func TestI12OrphanLate(t *testing.T) {
	k := defaults
	k.j4Expiry, k.j4Relet = 4390, 4400
	rep := Check(scenario(t, k).finish(5000, true), Options{})
	expectOnly(t, rep, "I12")
	if len(rep.OrphanRecoveryMs) != 1 || rep.OrphanRecoveryMs[0] != 1402 {
		t.Fatalf("orphan recovery %v", rep.OrphanRecoveryMs)
	}
	// A larger slack covers it.
	expectOnly(t, Check(scenario(t, k).finish(5000, true), Options{Slack: 500e6}))
}

// An orphan whose lease expired but whose job was never queued again (the
// broken chaos_norelease build): the expiry is no recovery while a final
// state shows the job unfinished with no later lease. A job the expiry
// ended (run-style, lost) recovered by it.
func TestI12OrphanExpiredNotRequeued(t *testing.T) {
	k := defaults
	k.j4Relet = -1
	b := scenario(t, k)
	b.job("j4").State = history.JobRunning
	rep := Check(b.finish(5000, true), Options{})
	expectOnly(t, rep, "I2", "I12") // I2: running with no live lease
	b = scenario(t, k)
	b.job("j4").State = history.JobLost
	expectOnly(t, Check(b.finish(5000, true), Options{}))
}

// An orphan that expires in time but waits for a free worker is the
// workload's doing: reported, not flagged.
func TestI12OrphanWaitsForCapacity(t *testing.T) {
	k := defaults
	k.j4Relet = 4400
	rep := Check(scenario(t, k).finish(5000, true), Options{})
	expectOnly(t, rep)
	if len(rep.OrphanRecoveryMs) != 1 || rep.OrphanRecoveryMs[0] != 1402 {
		t.Fatalf("orphan recovery %v", rep.OrphanRecoveryMs)
	}
}

func TestUnpairedHistoryIsAnError(t *testing.T) {
	entries := clean(t)
	entries = append(entries, history.Entry{Kind: history.KindComplete, Ns: at(6000), Process: "ghost",
		Op: &history.Op{ID: 1, Name: history.OpReport, Status: history.StatusOK}})
	rep := Check(entries, Options{})
	if rep.OK() || len(rep.Errors) != 1 || len(rep.Results) != 0 {
		t.Fatalf("report %+v", rep)
	}
}

func TestReportOutputs(t *testing.T) {
	k := defaults
	k.w2Stop = 1150
	rep := Check(scenario(t, k).finish(5000, true), Options{})
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		OK      bool     `json:"ok"`
		Results []Result `json:"results"`
	}
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	if decoded.OK || len(decoded.Results) != 16 || decoded.Results[3].Invariant != "I4" || len(decoded.Results[3].Violations) != 2 {
		t.Fatalf("decoded %+v", decoded)
	}
	var sum bytes.Buffer
	if err := rep.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	out := sum.String()
	for _, want := range []string{"FAIL", "I4   expiry-after-self-stop   FAIL       2", "report", "kill-9", "leader after heal", "50.0ms"} {
		if !strings.Contains(out, want) {
			t.Fatalf("summary lacks %q:\n%s", want, out)
		}
	}
}

// A history made by a Recorder with real clock readings checks clean: the
// format the runner writes is the format the checkers read.
func TestRecorderHistoryChecks(t *testing.T) {
	var buf bytes.Buffer
	rec := history.NewRecorder(&buf)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(rec.Append(history.Entry{Kind: history.KindRun, Run: &history.Run{Format: history.FormatVersion, Nodes: []string{"n1"},
		RenewNs: 100e6, GraceNs: 500e6, TolerationNs: 1000e6}}))
	id := rec.Invoke("c1", history.OpSubmit, history.Input{JobID: "a"})
	must(rec.Complete(id, history.StatusOK, "", &history.Output{Created: true}))
	id = rec.Invoke("w1", history.OpAcquire, history.Input{WorkerID: "w1", RequestID: "q1"})
	must(rec.Complete(id, history.StatusOK, "", &history.Output{Grants: []history.Grant{{JobID: "a", Token: 1, WorkerID: "w1", RequestID: "q1"}}}))
	must(rec.Append(history.Entry{Kind: history.KindExecStart, Process: "w1", Exec: &history.Exec{JobID: "a", Token: 1, WorkerID: "w1"}}))
	must(rec.Append(history.Entry{Kind: history.KindExecStop, Process: "w1", Exec: &history.Exec{JobID: "a", Token: 1, WorkerID: "w1", Cause: history.CauseCompleted}}))
	id = rec.Invoke("w1", history.OpReport, history.Input{WorkerID: "w1", JobID: "a", Token: 1, ReportID: "r", Outcome: history.OutcomeSucceeded})
	must(rec.Complete(id, history.StatusOK, "", &history.Output{Outcome: history.OutcomeSucceeded, State: history.JobReported}))
	id = rec.Invoke("c1", history.OpFenceCheck, history.Input{JobID: "a", Token: 1})
	must(rec.Complete(id, history.StatusOK, "", &history.Output{State: history.JobReported}))
	jobs := []history.JobSummary{{ID: "a", State: history.JobReported, Tokens: []uint64{1}, Outcome: history.OutcomeSucceeded,
		Leases: []history.Lease{{Token: 1, WorkerID: "w1", RequestID: "q1", State: history.LeaseReported, ReportID: "r", Outcome: history.OutcomeSucceeded}}}}
	must(rec.Append(history.Entry{Kind: history.KindFinalState, Final: &history.FinalState{Node: "n1", AppliedIndex: 4, LastToken: 1,
		Complete: true, Jobs: jobs, StateHash: history.HashJobs(1, jobs)}}))
	must(rec.Err())
	entries, err := history.Read(&buf)
	must(err)
	rep := Check(entries, Options{RequireAllFinished: true})
	expectOnly(t, rep)
}

// The same history always gives the same report, violations in the same
// order citing the same entries.
func TestReportIsReproducible(t *testing.T) {
	b := scenario(t, defaults)
	b.report("w2", "j2", 2, "r2x", 3200, 3202)
	b.fence("j2", 2, 3300, 3301, 2, history.JobRunning)
	entries := b.finish(5000, true)
	var first bytes.Buffer
	rep := Check(entries, Options{})
	if err := rep.WriteJSON(&first); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		var again bytes.Buffer
		rep := Check(entries, Options{})
		if err := rep.WriteJSON(&again); err != nil {
			t.Fatal(err)
		}
		if again.String() != first.String() {
			t.Fatalf("reports differ:\n%s\n---\n%s", first.String(), again.String())
		}
	}
}
