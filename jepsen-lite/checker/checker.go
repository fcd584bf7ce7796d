package checker

import (
	"slices"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// Options tune the checkers. The zero value works: time bounds come from the
// history's run entry, the rest from the defaults below.
type Options struct {
	// OutDir receives Porcupine's HTML visualization of every job whose
	// lease operations are not linearizable (I10). Empty: none written.
	OutDir string

	// Renew, Grace, Toleration and ElectionTimeout override the run
	// entry's.
	Renew, Grace, Toleration, ElectionTimeout time.Duration
	// LeaderBound: after the last heal a leader must be observed within it
	// (I12). Default 5 election timeouts, or 10 s when the election
	// timeout is unknown.
	LeaderBound time.Duration
	// DiskReadyBound: a node whose disk was freed must be seen ready
	// within it (I12). Default raft's longest replication backoff (the
	// leader retries a follower's failed append after at most 10.24 s,
	// and the node is ready at the first append that succeeds) plus
	// LeaderBound (an election, when the full node was the leader) plus
	// Slack.
	DiskReadyBound time.Duration
	// Slack is the allowance for work that takes real time but no
	// protocol time: a handler returning after its context is cancelled,
	// an expiry tick, a long-poll handing out a requeued job. It pads the
	// self-stop deadline (I4) and the orphan re-lease bound (I12).
	// Default 2 × renew, or 1 s when renew is unknown.
	Slack time.Duration
	// ClockTolerance pads I11's bound for clocks that disagree (the
	// leader times silence on CLOCK_BOOTTIME, the history is on
	// CLOCK_MONOTONIC). Default zero: on one machine that never sleeps
	// they agree.
	ClockTolerance time.Duration

	// RequireAllFinished: every submitted job must be terminal in every
	// final state (I9). Runs that stop their workers early leave it off.
	RequireAllFinished bool
	// AllowCompacted: a job missing from a final state may have been
	// compacted after its retention; it is counted, not flagged (I1, I7).
	AllowCompacted bool
	// LeaseHistory is how many leases the server keeps per job (fsm's
	// MaxLeaseHistory). Tokens older than a full history are not judged
	// against final states. Default 32.
	LeaseHistory int

	// PauseFaults, ClockFaults and KillFaults name fault types that pause
	// their targets, move their clocks, or kill their processes, in
	// addition to faults whose entries say so themselves.
	PauseFaults []string
	ClockFaults []string
	KillFaults  []string

	// LinearizabilityTimeout bounds Porcupine per job (I10); a job that
	// runs out of time is noted, not flagged. Default 10 s.
	LinearizabilityTimeout time.Duration
}

// Defaults applied by Check.
const (
	DefaultLeaseHistory           = 32
	DefaultLinearizabilityTimeout = 10 * time.Second
	defaultLeaderBoundFallback    = 10 * time.Second
	defaultSlackFallback          = time.Second
	leaderBoundElections          = 5
	// raftBackoffMax is hashicorp/raft's longest wait before it retries
	// a failed replication: failureWait (10 ms) doubled up to
	// maxFailureScale (12) − 2 times.
	raftBackoffMax = 10240 * time.Millisecond
)

// Default fault type names, matching the nemeses SPEC and the runner name.
var (
	DefaultPauseFaults = []string{"pause", "sigstop", "sigstop-leader", "sigstop-worker"}
	DefaultClockFaults = []string{"clock-skew"}
	DefaultKillFaults  = []string{"kill", "kill-9", "crash"}
)

// resolved fills defaults from run (which may be nil) into a copy.
func (o Options) resolved(run *history.Run) Options {
	if run != nil {
		if o.Renew == 0 {
			o.Renew = time.Duration(run.RenewNs)
		}
		if o.Grace == 0 {
			o.Grace = time.Duration(run.GraceNs)
		}
		if o.Toleration == 0 {
			o.Toleration = time.Duration(run.TolerationNs)
		}
		if o.ElectionTimeout == 0 {
			o.ElectionTimeout = time.Duration(run.ElectionTimeoutNs)
		}
	}
	if o.LeaderBound == 0 {
		o.LeaderBound = defaultLeaderBoundFallback
		if o.ElectionTimeout > 0 {
			o.LeaderBound = leaderBoundElections * o.ElectionTimeout
		}
	}
	if o.Slack == 0 {
		o.Slack = defaultSlackFallback
		if o.Renew > 0 {
			o.Slack = 2 * o.Renew
		}
	}
	if o.DiskReadyBound == 0 {
		o.DiskReadyBound = raftBackoffMax + o.LeaderBound + o.Slack
	}
	if o.LeaseHistory == 0 {
		o.LeaseHistory = DefaultLeaseHistory
	}
	if o.LinearizabilityTimeout == 0 {
		o.LinearizabilityTimeout = DefaultLinearizabilityTimeout
	}
	o.PauseFaults = append(slices.Clone(o.PauseFaults), DefaultPauseFaults...)
	o.ClockFaults = append(slices.Clone(o.ClockFaults), DefaultClockFaults...)
	o.KillFaults = append(slices.Clone(o.KillFaults), DefaultKillFaults...)
	return o
}

// Result is one checker's verdict.
type Result struct {
	Name       string             `json:"name"`
	Invariant  string             `json:"invariant"`
	Violations []Violation        `json:"violations"`
	Stats      map[string]float64 `json:"stats,omitempty"`
	// Notes say what the checker could not judge and why (no final
	// states, events incomplete, a Porcupine timeout): a pass with notes
	// proves less than one without.
	Notes []string `json:"notes,omitempty"`
}

// OK reports whether the checker found nothing.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// Violation is one thing the history shows went wrong.
type Violation struct {
	Msg   string `json:"msg"`
	JobID string `json:"job_id,omitempty"`
	Token uint64 `json:"token,omitempty"`
	// Entries are indexes into the checked entries (line numbers minus
	// one, for a history read from one file).
	Entries []int `json:"entries,omitempty"`
}

// checkFunc is one invariant's checker.
type checkFunc func(v *view, r *Result)

// checkers run in this order: I5 before I3, because I3's excuse for a
// paused worker holds only if fencing held for that job.
var checkers = []struct {
	name, invariant string
	fn              checkFunc
}{
	{"tokens", "I1", checkTokens},
	{"single-lease", "I2", checkSingleLease},
	{"fencing", "I5", checkFencing},
	{"exclusive-execution", "I3", checkExclusive},
	{"expiry-after-self-stop", "I4", checkExpiry},
	{"report-idempotency", "I6", checkReportIdempotency},
	{"durability", "I7", checkDurability},
	{"convergence", "I8", checkConvergence},
	{"complete-once", "I9", checkCompleteOnce},
	{"linearizable", "I10", checkLinearizable},
	{"no-absence-expiry", "I11", checkAbsence},
	{"recovery", "I12", checkRecovery},
	{"not-before", "I13", checkNotBefore},
	{"schedule-once", "I14", checkScheduleOnce},
	{"outsider", "O1", checkOutsider},
	{"flood", "F1", checkFlood},
}

// reportOrder is the order of Report.Results.
var reportOrder = []string{"I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "I9", "I10", "I11", "I12", "I13", "I14", "O1", "F1"}

// Checker names one checker: its invariant ("I1") and its name.
type Checker struct{ Invariant, Name string }

// Checkers lists every checker in the order of Report.Results.
func Checkers() []Checker {
	var out []Checker
	for _, inv := range reportOrder {
		for _, c := range checkers {
			if c.invariant == inv {
				out = append(out, Checker{Invariant: inv, Name: c.name})
			}
		}
	}
	return out
}

// Check runs every checker over a history and returns the report. The
// entries are read, never changed. A history that cannot be indexed (an
// op completed twice, say) yields a report with Errors and no results.
func Check(entries []history.Entry, opts Options) Report {
	rep := Report{Entries: len(entries)}
	v, err := newView(entries, opts)
	if err != nil {
		rep.Errors = append(rep.Errors, err.Error())
		return rep
	}
	rep.fillTotals(v)
	results := make(map[string]*Result, len(checkers))
	for _, c := range checkers {
		r := &Result{Name: c.name, Invariant: c.invariant, Violations: []Violation{}, Stats: map[string]float64{}}
		c.fn(v, r)
		results[c.invariant] = r
	}
	for _, inv := range reportOrder {
		rep.Results = append(rep.Results, *results[inv])
	}
	rep.fillHighlights(v)
	return rep
}

func (r *Result) add(msg, job string, token uint64, entries ...int) {
	r.Violations = append(r.Violations, Violation{Msg: msg, JobID: job, Token: token, Entries: entries})
}

func (r *Result) note(msg string) {
	if !slices.Contains(r.Notes, msg) {
		r.Notes = append(r.Notes, msg)
	}
}
