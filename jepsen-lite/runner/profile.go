package runner

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/checker"
)

// Builds are the leasehold binaries a profile runs, all built with -tags
// chaos (the clock seam); the broken ones each turn one guarantee off.
// NoSelfStop is a jepsen-lite binary instead: the guarantee it turns off
// is the Go worker's (package client), which jepsen-lite's worker
// processes run.
type Builds struct {
	Real        string // -tags chaos
	NoFence     string // -tags chaos,chaos_nofence: fence checks always pass
	NoAbsence   string // -tags chaos,chaos_noabsence: the leader charges workers for its absence
	NoVerify    string // -tags chaos,chaos_noverify: heartbeats acked without a leadership check
	EarlyAck    string // -tags chaos,chaos_earlyack: a submit answered before a quorum has it
	StaleReads  string // -tags chaos,chaos_stalereads: linearizable reads from the local state, no barrier
	DoubleGrant string // -tags chaos,chaos_doublegrant: a job with a live lease granted again
	TokenReuse  string // -tags chaos,chaos_tokenreuse: a new leader's first grant reuses a token
	NoReportID  string // -tags chaos,chaos_noreportid: a repeated report id applied again
	NoRelease   string // -tags chaos,chaos_norelease: an expired lease's job never queued again
	OpenPeer    string // -tags chaos,chaos_openpeer: a join's claim taken without asking the claimed node
	NoDelay     string // -tags chaos,chaos_nodelay: a job's not_before ignored, granted at once
	Refire      string // -tags chaos,chaos_refire: a schedule's settled slot fired again
	NoSelfStop  string // jepsen-lite, -tags chaos_noselfstop: its workers never self-stop
}

// BuildsIn names the binaries `make chaos-bins` builds into dir.
func BuildsIn(dir string) Builds {
	return Builds{
		Real:        filepath.Join(dir, "leasehold-chaos"),
		NoFence:     filepath.Join(dir, "leasehold-chaos-nofence"),
		NoAbsence:   filepath.Join(dir, "leasehold-chaos-noabsence"),
		NoVerify:    filepath.Join(dir, "leasehold-chaos-noverify"),
		EarlyAck:    filepath.Join(dir, "leasehold-chaos-earlyack"),
		StaleReads:  filepath.Join(dir, "leasehold-chaos-stalereads"),
		DoubleGrant: filepath.Join(dir, "leasehold-chaos-doublegrant"),
		TokenReuse:  filepath.Join(dir, "leasehold-chaos-tokenreuse"),
		NoReportID:  filepath.Join(dir, "leasehold-chaos-noreportid"),
		NoRelease:   filepath.Join(dir, "leasehold-chaos-norelease"),
		OpenPeer:    filepath.Join(dir, "leasehold-chaos-openpeer"),
		NoDelay:     filepath.Join(dir, "leasehold-chaos-nodelay"),
		Refire:      filepath.Join(dir, "leasehold-chaos-refire"),
		NoSelfStop:  filepath.Join(dir, "jepsen-lite-noselfstop"),
	}
}

// Profiles names the profiles.
func Profiles() []string { return []string{"ci", "soak"} }

// Profile returns the runs of a profile. Every run's Out is under out;
// seed 0 picks one per run from the time.
func Profile(name string, b Builds, self, out string, seed int64) ([]Config, error) {
	mk := func(run string, bin string, nodes int, nemesis string, d time.Duration) Config {
		return Config{Name: run, Bin: bin, Self: self, Out: filepath.Join(out, run), Nodes: nodes,
			Nemesis: strings.Split(nemesis, ","), Duration: d, Seed: seed, Timings: CITimings}
	}
	switch name {
	case "ci":
		// The real build under every family, one family per run and then
		// all mixed; then each broken build under the fault that exposes it.
		// The kill run is secure (peer mutual TLS, API TLS and tokens) with
		// the outsider attacking it; mixed, insecure, has the outsider too.
		// The disk family is in mixed only (its nodes' data dirs on tmpfs);
		// the flood runs beside the kill run (secure: every attack on
		// credentials too) and beside mixed (insecure, through every fault).
		runs := []Config{
			mk("partition-5", b.Real, 5, "partition", 20*time.Second),
			mk("kill-secure", b.Real, 3, "kill,outsider", 20*time.Second),
			mk("pause", b.Real, 3, "pause", 20*time.Second),
			mk("clock", b.Real, 3, "clock", 20*time.Second),
			mk("transfer-worker", b.Real, 3, "transfer,worker", 20*time.Second),
			mk("net", b.Real, 3, "net", 15*time.Second),
			mk("mixed", b.Real, 3, "mixed", 40*time.Second),
			mk("shell-worker", b.Real, 3, "shell", 20*time.Second),
		}
		runs[1].KillWorkerAtEnd = true // an orphan to re-lease (I12)
		runs[1].Secure = true
		runs[1].Flood = true
		// The WAL is the default log store; boltdb stays tested too.
		runs[0].LogStore = "boltdb"
		runs[2].LogStore = "boltdb"
		runs[6].Flood = true
		runs[5].Net = NetProxy // delay and loss need the proxies
		// Two shell workers (`leasehold worker run`, each job's command
		// under a supervisor that outlives it) take the jobs beside one Go
		// worker; their worker run processes are killed and come back.
		runs[7].Workers, runs[7].ShellWorkers = 1, 2
		// The fenced sink asks the cluster; with fence checks off it keeps
		// the stale writer's writes.
		nofence := mk("broken-nofence", b.NoFence, 3, "none", 10*time.Second)
		nofence.Expect = []string{"I5"}
		// The leader away past toleration while it stays leader: its
		// clock sleeps (Raft's timers see nothing), and its timer loop
		// wakes at once, as a resumed process's overdue timers do. Without
		// the absence rule it expires the leases of a worker that kept
		// heartbeating, unless that worker's beat came in between the
		// jump and the tick. One worker only: with the reporter it makes
		// two timed workers, fewer than the guard against mass expiry
		// needs (cluster/expire.go). With three or more, all silent past
		// grace at once after the jump, the guard holds the expiries and
		// their next check comes after every worker has beaten again: the
		// guard hides the missing rule (five workers went uncaught in CI).
		noabs := mk("broken-noabsence", b.NoAbsence, 3, "clock-leader-sleep", 20*time.Second)
		noabs.Workers = 1
		noabs.Expect = []string{"I11"}
		// A deposed leader answers a worker it shares a partition with.
		// Raft's leader lease makes a partitioned leader step down long
		// before another is elected, so the leader is also stopped while
		// the majority takes office; woken, still cut off and before the
		// worker stopped itself, it answers the worker's waiting
		// heartbeats from its stale state before it steps down: the
		// worker runs past the majority's expiry (I4) beside the jobs'
		// new holders (I3), with leases "held" that have ended (I5). Woken
		// only at the stop (past toleration, as before), the worker had
		// stopped and its beats carried no leases: caught in some runs,
		// missed in others. One fault exposes the bug often but not
		// always: in 15 s (two or three faults) runs were caught with as
		// few as 2 violations, so the run takes 25 s (four or five).
		noverify := mk("broken-noverify", b.NoVerify, 3, "partition-leader-worker-pause", 25*time.Second)
		noverify.Expect = []string{"I3", "I4", "I5"}
		// The rest run ten seconds of faults or fewer: each exposes its
		// bug at the first fault, or without any.
		//
		// A worker cut off from the cluster past toleration: its jobs
		// run on past the self-stop deadline (I4) and beside the next
		// holder (I3). The leasehold build is the real one; the worker
		// processes are the broken jepsen-lite.
		noselfstop := mk("broken-noselfstop", b.Real, 3, "worker-cut", 10*time.Second)
		noselfstop.Self = b.NoSelfStop
		noselfstop.Expect = []string{"I3", "I4"}
		// The leader cut off acknowledges the submits it took before it
		// steps down; the majority never had them (I7). A leader killed
		// loses only what it acknowledged in its last milliseconds, which
		// was rarely anything: with kills beside the partitions, 10 s of
		// faults lost 0 to 6 submits, and none in 2 runs of 16 (3
		// December). Partitions alone, over 20 s (three or four of them),
		// lose a few each.
		earlyack := mk("broken-earlyack", b.EarlyAck, 3, "partition-leader", 20*time.Second)
		earlyack.Expect = []string{"I7"}
		// The leader cut off keeps answering linearizable reads from its
		// state as it was when cut off, after it stepped down and while
		// the majority moves on. The reader, a client that only reads,
		// stays with it: no answer names another leader (I10). A
		// follower cut off is not enough: clients follow the leader and
		// never ask it.
		stalereads := mk("broken-stalereads", b.StaleReads, 3, "partition-leader", 10*time.Second)
		stalereads.Expect = []string{"I10"}
		// No fault needed: every acquire takes over another worker's
		// lease, whose holder runs on beside the new one (I3) while the
		// event log shows two live leases (I2). The holder's report is
		// refused as stale, so no job completes twice (I9 holds).
		doublegrant := mk("broken-doublegrant", b.DoubleGrant, 3, "none", 10*time.Second)
		doublegrant.Expect = []string{"I2", "I3"}
		// Every new leader reuses the last token: leadership moves.
		tokenreuse := mk("broken-tokenreuse", b.TokenReuse, 3, "transfer", 10*time.Second)
		tokenreuse.Expect = []string{"I1"}
		// Jobs whose grant reused a token may never finish: the
		// drain's failure is the bug's, not worth 42 s.
		tokenreuse.DrainBound = 10 * time.Second
		// The reporter repeats report ids with or without faults.
		noreportid := mk("broken-noreportid", b.NoReportID, 3, "none", 10*time.Second)
		noreportid.Expect = []string{"I6"}
		// A worker cut off past toleration, and one killed for good at
		// the end: their leases expire and the jobs are never queued
		// again (I9: never finished; I12: the orphans not re-leased).
		norelease := mk("broken-norelease", b.NoRelease, 3, "worker-cut", 10*time.Second)
		norelease.KillWorkerAtEnd = true // orphans for I12
		norelease.Expect = []string{"I9", "I12"}
		norelease.DrainBound = 10 * time.Second // the stranded jobs never finish
		// The outsider's join under a new id is taken (O1). Insecure:
		// with peer TLS the handshake refuses it first.
		openpeer := mk("broken-openpeer", b.OpenPeer, 3, "outsider", 10*time.Second)
		openpeer.Expect = []string{"O1"}
		// No fault needed: jobs submitted to run later and retries after
		// a backoff or a snooze are granted at once, before their
		// not_before (I13).
		nodelay := mk("broken-nodelay", b.NoDelay, 3, "none", 10*time.Second)
		nodelay.Expect = []string{"I13"}
		// No fault needed: each leader's look fires the run's schedule's
		// latest slot again (I14).
		refire := mk("broken-refire", b.Refire, 3, "none", 10*time.Second)
		refire.Expect = []string{"I14"}
		return append(runs, nofence, noabs, noverify, noselfstop, earlyack, stalereads, doublegrant, tokenreuse,
			noreportid, norelease, openpeer, nodelay, refire), nil
	case "soak":
		// Five nodes at production timings, every family mixed, the flood
		// beside the load, for an hour; an hour's log on each tmpfs.
		s := mk("soak", b.Real, 5, "mixed", time.Hour)
		s.Timings = ProductionTimings
		s.Workers, s.Concurrency = 5, 4
		s.KillWorkerAtEnd = true
		s.Flood = true
		s.DiskSize = 256 << 20
		return []Config{s}, nil
	}
	return nil, fmt.Errorf("runner: no profile %q (%s)", name, strings.Join(Profiles(), ", "))
}

// RunProfile carries out runs in order, printing each run's summary to w,
// and then a table of all of them. It stops early only when ctx ends.
func RunProfile(ctx context.Context, runs []Config, w io.Writer) ([]*Outcome, error) {
	var outs []*Outcome
	start := time.Now()
	for _, cfg := range runs {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(w, "--- %s: %s, %d nodes, nemesis %s\n", cfg.Name, filepath.Base(cfg.Bin), max(cfg.Nodes, 3), strings.Join(cfg.Nemesis, ","))
		o, err := Run(ctx, cfg)
		if err != nil {
			o = &Outcome{Config: cfg, Problems: []string{err.Error()}}
		}
		if err == nil {
			o.Summary(w)
		} else {
			fmt.Fprintf(w, "=== %s: FAIL: %v\n\n", cfg.Name, err)
		}
		outs = append(outs, o)
	}
	ProfileTable(w, outs, time.Since(start))
	sum := CheckerSummary(outs)
	CheckerTable(w, sum)
	if len(runs) > 0 && len(outs) > 0 {
		// The runs share the profile's directory: its report.json is
		// the profile's, beside each run's own.
		dir := filepath.Dir(runs[0].Out)
		if err := writeJSON(filepath.Join(dir, "report.json"), profileReport{Runs: runSummaries(outs), Checkers: sum}); err != nil {
			fmt.Fprintf(w, "profile report not written: %v\n", err)
		}
	}
	return outs, ctx.Err()
}

// CheckerRow is what the broken builds of a profile proved about one
// checker: the broken runs that expected it, those among them it caught,
// and the broken runs where it found violations unasked.
type CheckerRow struct {
	Invariant string   `json:"invariant"`
	Name      string   `json:"name"`
	Expected  []string `json:"expected_by,omitempty"`
	Caught    []string `json:"caught,omitempty"`
	Missed    []string `json:"missed,omitempty"`
	AlsoFound []string `json:"also_found,omitempty"`
	// Unexercised: no broken run of the profile expects it or found
	// anything with it; nothing shows it can fail.
	Unexercised bool `json:"unexercised,omitempty"`
}

type runSummary struct {
	Name     string   `json:"name"`
	Bin      string   `json:"bin"`
	Passed   bool     `json:"passed"`
	Expect   []string `json:"expect,omitempty"`
	Caught   []string `json:"caught,omitempty"`
	Found    []string `json:"found,omitempty"`
	Problems []string `json:"problems,omitempty"`
	Elapsed  float64  `json:"elapsed_ms"`
}

// profileReport is a profile's report.json.
type profileReport struct {
	Runs     []runSummary `json:"runs"`
	Checkers []CheckerRow `json:"checkers"`
}

func runSummaries(outs []*Outcome) []runSummary {
	var rs []runSummary
	for _, o := range outs {
		rs = append(rs, runSummary{Name: o.Config.Name, Bin: filepath.Base(o.Config.Bin), Passed: o.Passed, Expect: o.Config.Expect,
			Caught: o.Caught, Found: o.Found, Problems: o.Problems, Elapsed: ms(o.Elapsed)})
	}
	return rs
}

// CheckerSummary says, per checker, which broken runs caught it.
func CheckerSummary(outs []*Outcome) []CheckerRow {
	var rows []CheckerRow
	for _, c := range checker.Checkers() {
		row := CheckerRow{Invariant: c.Invariant, Name: c.Name}
		for _, o := range outs {
			if len(o.Config.Expect) == 0 {
				continue
			}
			expected := slices.ContainsFunc(o.Config.Expect, func(e string) bool {
				return strings.EqualFold(e, c.Invariant) || strings.EqualFold(e, c.Name)
			})
			found := slices.Contains(o.Found, c.Invariant)
			switch {
			case expected && found:
				row.Expected = append(row.Expected, o.Config.Name)
				row.Caught = append(row.Caught, o.Config.Name)
			case expected:
				row.Expected = append(row.Expected, o.Config.Name)
				row.Missed = append(row.Missed, o.Config.Name)
			case found:
				row.AlsoFound = append(row.AlsoFound, o.Config.Name)
			}
		}
		row.Unexercised = len(row.Expected) == 0 && len(row.AlsoFound) == 0
		rows = append(rows, row)
	}
	return rows
}

// CheckerTable is one line per checker: the broken builds that proved it
// can fail.
func CheckerTable(w io.Writer, rows []CheckerRow) {
	fmt.Fprintf(w, "\n%-4s %-22s %s\n", "INV", "CHECKER", "BROKEN BUILDS CAUGHT")
	for _, r := range rows {
		var parts []string
		if len(r.Caught) > 0 {
			parts = append(parts, strings.Join(r.Caught, ", "))
		}
		if len(r.Missed) > 0 {
			parts = append(parts, "MISSED "+strings.Join(r.Missed, ", "))
		}
		if len(r.AlsoFound) > 0 {
			parts = append(parts, "also (unexpected) "+strings.Join(r.AlsoFound, ", "))
		}
		if r.Unexercised {
			parts = append(parts, "none: no broken build exercises it")
		}
		fmt.Fprintf(w, "%-4s %-22s %s\n", r.Invariant, r.Name, strings.Join(parts, "; "))
	}
}

// ProfileTable is one line per run.
func ProfileTable(w io.Writer, outs []*Outcome, elapsed time.Duration) {
	fmt.Fprintf(w, "%-18s %-6s %-10s %5s %6s %6s %6s %9s %9s %7s %9s %s\n", "RUN", "RESULT", "NET", "OPS", "INFO", "FAULTS", "VIOL",
		"SLACK_MS", "LEADER_MS", "DISK_MS", "FLOOD", "NOTE")
	for _, o := range outs {
		verdict := "pass"
		if !o.Passed {
			verdict = "FAIL"
		}
		ops, info, faults := 0, 0, 0
		for _, c := range o.Report.Ops {
			ops += c.Attempted
			info += c.Info
		}
		for _, n := range o.Report.Faults {
			faults += n
		}
		note := ""
		if len(o.Config.Expect) > 0 {
			note = fmt.Sprintf("broken build: expected %s, caught [%s]", strings.Join(o.Config.Expect, "/"), strings.Join(o.Caught, ","))
		}
		if len(o.Problems) > 0 {
			note = strings.TrimSpace(note + " problems: " + strings.Join(o.Problems, "; "))
		}
		if len(o.Notes) > 0 {
			note = strings.TrimSpace(note + " " + strings.Join(o.Notes, "; "))
		}
		flood := "-"
		if o.Report.FloodCalls > 0 {
			flood = fmt.Sprintf("%d/%d", o.Report.FloodServed, o.Report.FloodCalls) // served of sent
		}
		net := o.Net
		if o.Config.Secure {
			net += "+tls" // peer mutual TLS, API TLS and tokens
		}
		if o.Config.LogStore == "boltdb" {
			net += "+bolt" // raft-boltdb rather than the WAL
		}
		fmt.Fprintf(w, "%-18s %-6s %-10s %5d %6d %6d %6d %9s %9s %7s %9s %s\n", o.Config.Name, verdict, net, ops, info, faults,
			o.Report.Violations(), optMs(o.Report.MinExpirySlackMs), optMs(o.Report.LeaderRecoveryMs), optMs(o.Report.DiskReadyMs), flood, note)
	}
	fmt.Fprintf(w, "total %s\n", elapsed.Round(time.Second))
}

func optMs(x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f", *x)
}
