package checker

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
)

const floodSource = "10.0.0.249"

// flood records one flood call at msec.
func (b *hb) flood(msec int64, c history.FloodCall) int {
	return b.raw(history.Entry{Kind: history.KindFloodCall, Ns: at(msec), Process: "flood", Flood: &c})
}

// floodRound is one refused round of every attack at every node, as a
// correct secure cluster answers it, with the audit events its admin
// calls and impersonations cost.
func (b *hb) floodRound(msec int64) {
	for _, n := range []string{"n1", "n2", "n3"} {
		for _, c := range []history.FloodCall{
			{Attack: history.FloodGzipBomb, Cred: history.CredValid, Status: 429, Code: "resource_exhausted", Reason: transport.ReasonTooLarge},
			{Attack: history.FloodGzipBomb, Cred: history.CredNone, Status: 401, Code: "unauthenticated", Reason: transport.ReasonUnauthenticated},
			{Attack: history.FloodOversizedDeclared, Cred: history.CredValid, Status: 429, Reason: transport.ReasonTooLarge},
			{Attack: history.FloodOversizedStreamed, Cred: history.CredValid, Error: "stream reset"},
			{Attack: history.FloodGhostHeartbeat, Cred: history.CredValid, Code: "failed_precondition", Reason: transport.ReasonUnknownWorker},
			{Attack: history.FloodGhostAcquire, Cred: history.CredValid, Reason: transport.ReasonDiskFull},
			{Attack: history.FloodWrongToken, Cred: history.CredWrong, Reason: transport.ReasonUnauthenticated},
			{Attack: history.FloodAdminCall, Cred: history.CredValid, Reason: transport.ReasonForbidden},
			{Attack: history.FloodImpersonate, Cred: history.CredValid, Reason: transport.ReasonForbidden},
			{Attack: history.FloodIdleConn, Cred: history.CredValid, Error: "unexpected EOF", HeldNs: 30e9},
		} {
			c.Node = n
			b.flood(msec, c)
		}
		b.event(msec+5, history.ClusterEvent{Type: history.EventAudit, Source: floodSource + ":40000", Actor: "token:flood",
			Detail: "auth.refused: POST /leasehold.v1.ClusterService/RemoveNode: forbidden"})
	}
}

// withFlood is the clean scenario with a secure run's flood beside it.
func withFlood(t *testing.T, edit func(b *hb)) Report {
	t.Helper()
	b := scenario(t, defaults)
	b.e[0].Run.FloodSource, b.e[0].Run.Secure = floodSource, true
	b.floodRound(100)
	b.floodRound(2000)
	if edit != nil {
		edit(b)
	}
	return Check(b.finish(5000, true), Options{RequireAllFinished: true})
}

func f1(t *testing.T, rep Report) Result {
	t.Helper()
	res, ok := rep.Result("F1")
	if !ok {
		t.Fatal("no F1 result")
	}
	return res
}

// Every flood call refused, every event kept, the audits within their
// rate: F1 passes and counts what it saw.
func TestFloodRefusedPasses(t *testing.T) {
	rep := withFlood(t, nil)
	expectOnly(t, rep)
	res := f1(t, rep)
	if res.Stats["flood_calls"] != 60 || res.Stats["flood_served"] != 0 || res.Stats["audit_events_flood"] != 6 ||
		res.Stats["calls_idle-conn"] != 6 || res.Stats["reason_TOO_LARGE"] != 12 || res.Stats["final_events_audit"] != 6 {
		t.Fatalf("stats %v", res.Stats)
	}
	if len(res.Notes) > 0 {
		t.Fatalf("notes %v", res.Notes)
	}
	if rep.FloodCalls != 60 || rep.FloodServed != 0 {
		t.Fatalf("report %d calls, %d served", rep.FloodCalls, rep.FloodServed)
	}
	var sum strings.Builder
	rep.Summary(&sum)
	for _, want := range []string{"F1   flood                    pass", "flood calls                  60, 0 served", "final events by type"} {
		if !strings.Contains(sum.String(), want) {
			t.Fatalf("summary lacks %q:\n%s", want, sum.String())
		}
	}
}

// A flood call answered 2xx is a violation, whatever the attack.
func TestFloodServedFails(t *testing.T) {
	for _, c := range []history.FloodCall{
		{Attack: history.FloodGzipBomb, Node: "n2", Cred: history.CredValid, Status: 200, Served: true},
		{Attack: history.FloodGhostHeartbeat, Node: "n1", Cred: history.CredValid, Status: 200, Served: true},
		{Attack: history.FloodAdminCall, Node: "n3", Cred: history.CredValid, Status: 200, Served: true},
		{Attack: history.FloodIdleConn, Node: "n3", Cred: history.CredValid, Status: 200, Served: true},
	} {
		t.Run(c.Attack, func(t *testing.T) {
			var idx int
			rep := withFlood(t, func(b *hb) { idx = b.flood(2100, c) })
			expectOnly(t, rep, "F1")
			res := f1(t, rep)
			violationsMention(t, res, "flood "+c.Attack+" (credential valid) at "+c.Node+" was served")
			if len(res.Violations) != 1 || res.Violations[0].Entries[0] != idx {
				t.Fatalf("violations %+v, want one citing %d", res.Violations, idx)
			}
		})
	}
}

// A refusal with another reason than the attack's is noted, not flagged;
// "not now" answers are neither.
func TestFloodOtherRefusalNoted(t *testing.T) {
	rep := withFlood(t, func(b *hb) {
		b.flood(2100, history.FloodCall{Attack: history.FloodGzipBomb, Node: "n1", Cred: history.CredValid, Status: 400, Reason: transport.ReasonInvalidArgument})
		b.flood(2100, history.FloodCall{Attack: history.FloodGhostHeartbeat, Node: "n1", Cred: history.CredValid, Reason: transport.ReasonNoLeader})
	})
	expectOnly(t, rep)
	if res := f1(t, rep); len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "gzip-bomb (credential valid) refused INVALID_ARGUMENT, not TOO_LARGE") {
		t.Fatalf("notes %v", res.Notes)
	}
}

// A node whose final event log lost events the run saw: from the front
// (evicted), in between, at the end, or just a stale report: each is a
// violation, flood or not.
func TestEventsEvicted(t *testing.T) {
	for _, c := range []struct {
		name, want string
		edit       func(log *history.EventLog)
	}{
		{"front", "starts at seq 5: 4 events the run saw from seq 1 were evicted (3 lease.acquired, 1 lease.reported)", func(log *history.EventLog) {
			log.FirstSeq, log.Count = 5, log.Count-4
		}},
		{"empty", "starts at seq 0", func(log *history.EventLog) { *log = history.EventLog{} }},
		{"hole", "holds 13 events from seq 1 to 15: 2 are missing in between", func(log *history.EventLog) { log.Count -= 2 }},
		{"end", "ends at seq 14, before seq 15 the run saw", func(log *history.EventLog) { log.LastSeq, log.Count = log.LastSeq-1, log.Count-1 }},
		{"stale report", "no longer holds the stale report of job j2 token 2", func(log *history.EventLog) { log.StaleReports = nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			entries := scenario(t, defaults).finish(5000, true)
			for i := range entries {
				if f := entries[i].Final; f != nil && f.Node == "n3" {
					log := *f.Events
					c.edit(&log)
					f.Events = &log
				}
			}
			rep := Check(entries, Options{RequireAllFinished: true})
			expectOnly(t, rep, "F1")
			violationsMention(t, f1(t, rep), "node n3's event log "+c.want)
		})
	}
}

// Events the watch saw after the final states were read (a schedule that
// fired meanwhile) are not asked of them; one at or before the cut still
// is.
func TestEventsAfterTheCut(t *testing.T) {
	after := func(t *testing.T, edit func(log *history.EventLog)) Report {
		t.Helper()
		entries := scenario(t, defaults).finish(5000, true)
		var cut uint64
		for i := range entries {
			if f := entries[i].Final; f != nil {
				cut = f.CutEventSeq
				if f.Node == "n3" && edit != nil {
					log := *f.Events
					edit(&log)
					f.Events = &log
				}
			}
		}
		if cut == 0 {
			t.Fatal("the final states carry no cut")
		}
		for k, typ := range []string{history.EventAudit, history.EventStaleReport} {
			entries = append(entries, history.Entry{Kind: history.KindClusterEvent, Ns: at(5100 + int64(k)), Process: "events",
				Event: &history.ClusterEvent{Seq: cut + 1 + uint64(k), Type: typ, JobID: "j9", Token: 9}})
		}
		return Check(entries, Options{RequireAllFinished: true})
	}
	rep := after(t, nil)
	expectOnly(t, rep)
	if res := f1(t, rep); res.Stats["watch_events_after_cut"] != 2 {
		t.Fatalf("stats %v", res.Stats)
	}
	rep = after(t, func(log *history.EventLog) { log.LastSeq, log.Count = log.LastSeq-1, log.Count-1 })
	expectOnly(t, rep, "F1")
	res := f1(t, rep)
	violationsMention(t, res, "node n3's event log ends at seq 14, before seq 15 the run saw")
	if len(res.Violations) != 1 {
		t.Fatalf("violations %+v", res.Violations)
	}
}

// Final states without event logs (an older history) are noted.
func TestEventsNotRecorded(t *testing.T) {
	entries := scenario(t, defaults).finish(5000, true)
	for i := range entries {
		if f := entries[i].Final; f != nil {
			f.Events = nil
		}
	}
	rep := Check(entries, Options{RequireAllFinished: true})
	expectOnly(t, rep)
	if res := f1(t, rep); len(res.Notes) != 3 {
		t.Fatalf("notes %v", res.Notes)
	}
}

// An event naming a ghost worker is a violation: ghosts are never timed.
func TestFloodGhostEventFails(t *testing.T) {
	rep := withFlood(t, func(b *hb) {
		b.event(2200, history.ClusterEvent{Type: "worker.unreachable", WorkerID: history.FloodGhostPrefix + "17"})
	})
	expectOnly(t, rep, "F1")
	violationsMention(t, f1(t, rep), "names the flood's made-up worker flood-ghost-17")
}

// More audit events from the flood's address than the refusals' rate
// allows over its span is a violation; audits from elsewhere do not count.
func TestFloodAuditsBounded(t *testing.T) {
	// The flood's span is 1.9 s (plus the 10 s window): 3 × (59 + 20) = 237.
	flood := func(n int, source string) func(b *hb) {
		return func(b *hb) {
			for range n {
				b.event(2100, history.ClusterEvent{Type: history.EventAudit, Source: source + ":41000", Actor: "unauthenticated",
					Detail: "auth.refused: GET /v1/snapshot: missing, unknown or unverified credentials"})
			}
		}
	}
	rep := withFlood(t, flood(231, "10.0.0.1"))
	expectOnly(t, rep)
	if res := f1(t, rep); res.Stats["audit_events_flood"] != 6 || res.Stats["audit_bound"] != 237 {
		t.Fatalf("stats %v", res.Stats)
	}
	expectOnly(t, withFlood(t, flood(231, floodSource)))
	rep = withFlood(t, flood(232, floodSource))
	expectOnly(t, rep, "F1")
	violationsMention(t, f1(t, rep), "the flood caused 238 audit events (238 auth.refused) in 12s, over the 237")
}
