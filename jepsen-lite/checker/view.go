package checker

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// never is the end of an interval that did not end, and the completion of
// an op whose outcome is unknown.
const never = int64(math.MaxInt64)

// view indexes a history once for every checker: ops paired, spans
// paired, and per-job lists. Checkers only read it, save the few fields
// one checker leaves for another (excused jobs, fencing failures) and the
// report's highlights.
type view struct {
	opts    Options
	entries []history.Entry
	t0      int64 // the earliest entry's time, for messages
	ops     []history.Operation
	run     *history.Run
	runEnd  *history.RunEnd

	finals []final    // the last final_state of each node, by node name
	events []evRef    // deduplicated by seq, in seq order
	faults []faultSpn // in start order
	execs  []execSpan // in start order
	sinks  []int      // sink_write entry indexes
	heals  []int      // heal entry indexes, in time order
	elects []int      // leader_elected entry indexes, in time order
	gone   map[string]int64

	attempts []int // outsider_attempt entry indexes
	captures []int // outsider_capture entry indexes
	floods   []int // flood_call entry indexes
	readies  []int // node_ready entry indexes, in time order

	jobs       []string              // every job id the history names, sorted
	grants     map[string][]grantRef // ok acquire grants per job
	jobOps     map[string][]int      // ops whose input names the job
	subCancels map[string][]int      // ok cancel_submitter ops per job cancelled
	heartbeats map[string][]int      // heartbeat ops per worker
	expiries   map[leaseKey]expiryObs
	acquired   map[leaseKey]evRef    // lease.acquired events
	evidence   map[string][]evidence // see endings.go
	known      map[leaseKey]int64    // when each token was first seen granted

	// Left by checkers for others and for the report.
	excused   map[string]bool // I3: jobs with a pause-excused overlap
	fenceBad  map[string]bool // I5: jobs with a fencing violation
	minSlack  *int64          // I4
	leaderRec *int64          // I12
	diskReady *int64          // I12: the slowest node ready after its disk was freed
	orphanRec []int64         // I12
	viz       []string        // I10
}

type leaseKey struct {
	job   string
	token uint64
}

type final struct {
	idx  int
	fs   *history.FinalState
	jobs map[string]*history.JobSummary
}

type evRef struct {
	idx int
	ns  int64
	ev  *history.ClusterEvent
}

type grantRef struct {
	op       int // index into ops
	g        history.Grant
	replayed bool
	invoke   int64
	complete int64
}

type faultSpn struct {
	startIdx, stopIdx int
	id, typ           string
	targets           []string
	start, end        int64
	pause, clock      bool
	kill, disk        bool
	jump              int64   // the clock jump at the start (back at the stop)
	rate              float64 // the clocks' rate while on; 0 unknown
}

// hits reports whether the fault names any of names.
func (f *faultSpn) hits(names ...string) bool {
	for _, n := range names {
		if n != "" && slices.Contains(f.targets, n) {
			return true
		}
	}
	return false
}

// overlaps reports whether the fault was on at some time in [from, to].
func (f *faultSpn) overlaps(from, to int64) bool { return f.start <= to && f.end >= from }

type execSpan struct {
	startIdx, stopIdx int // stopIdx -1: no exec_stop (see cause)
	job               string
	token             uint64
	worker, process   string
	start, stop       int64
	cause             history.StopCause
	lastAck           int64
	renew, tol        int64
}

type expiryObs struct {
	ns     int64
	idx    int
	worker string
}

func newView(entries []history.Entry, opts Options) (*view, error) {
	ops, err := history.Operations(entries)
	if err != nil {
		return nil, err
	}
	v := &view{
		entries: entries, ops: ops, gone: map[string]int64{},
		grants: map[string][]grantRef{}, jobOps: map[string][]int{}, subCancels: map[string][]int{},
		heartbeats: map[string][]int{}, expiries: map[leaseKey]expiryObs{}, acquired: map[leaseKey]evRef{},
		excused: map[string]bool{}, fenceBad: map[string]bool{},
	}
	jobs := map[string]bool{}
	finals := map[string]final{}
	seenSeq := map[uint64]bool{}
	for i := range entries {
		e := &entries[i]
		if v.t0 == 0 || e.Ns < v.t0 {
			v.t0 = e.Ns
		}
		switch e.Kind {
		case history.KindRun:
			if v.run == nil {
				v.run = e.Run
			}
		case history.KindRunEnd:
			v.runEnd = e.RunEnd
		case history.KindFinalState:
			f := final{idx: i, fs: e.Final, jobs: map[string]*history.JobSummary{}}
			for k := range e.Final.Jobs {
				f.jobs[e.Final.Jobs[k].ID] = &e.Final.Jobs[k]
				jobs[e.Final.Jobs[k].ID] = true
			}
			finals[e.Final.Node] = f
		case history.KindClusterEvent:
			if seenSeq[e.Event.Seq] {
				continue // read twice across a reconnect
			}
			seenSeq[e.Event.Seq] = true
			v.events = append(v.events, evRef{idx: i, ns: e.Ns, ev: e.Event})
			if e.Event.Type == history.EventLeaseAcquired {
				v.acquired[leaseKey{e.Event.JobID, e.Event.Token}] = v.events[len(v.events)-1]
			}
			if e.Event.JobID != "" {
				jobs[e.Event.JobID] = true
			}
		case history.KindSinkWrite:
			v.sinks = append(v.sinks, i)
		case history.KindHeal:
			v.heals = append(v.heals, i)
		case history.KindLeaderElected:
			v.elects = append(v.elects, i)
		case history.KindWorkerGone:
			if t, ok := v.gone[e.Marker.WorkerID]; !ok || e.Ns < t {
				v.gone[e.Marker.WorkerID] = e.Ns
			}
		case history.KindOutsiderAttempt:
			v.attempts = append(v.attempts, i)
		case history.KindOutsiderCapture:
			v.captures = append(v.captures, i)
		case history.KindFloodCall:
			v.floods = append(v.floods, i)
		case history.KindNodeReady:
			v.readies = append(v.readies, i)
		}
	}
	v.opts = opts.resolved(v.run)
	for _, n := range sortedKeys(finals) {
		v.finals = append(v.finals, finals[n])
	}
	sort.SliceStable(v.events, func(a, b int) bool { return v.events[a].ev.Seq < v.events[b].ev.Seq })
	byNs := func(idx []int) {
		sort.SliceStable(idx, func(a, b int) bool { return entries[idx[a]].Ns < entries[idx[b]].Ns })
	}
	byNs(v.heals)
	byNs(v.elects)
	byNs(v.readies)
	v.faults = pairFaults(entries, v.opts)
	v.indexOps(jobs)
	v.execs = pairExecs(entries, v.faults, v.gone)
	for _, x := range v.execs {
		jobs[x.job] = true
	}
	for _, i := range v.sinks {
		jobs[entries[i].Sink.JobID] = true
	}
	v.indexExpiries()
	v.jobs = sortedKeys(jobs)
	v.buildEvidence()
	return v, nil
}

// indexOps files every op under the jobs and workers it names.
func (v *view) indexOps(jobs map[string]bool) {
	for i := range v.ops {
		op := &v.ops[i]
		if op.Input.JobID != "" {
			v.jobOps[op.Input.JobID] = append(v.jobOps[op.Input.JobID], i)
			jobs[op.Input.JobID] = true
		}
		switch op.Name {
		case history.OpAcquire:
			if op.Status != history.StatusOK {
				continue
			}
			for _, g := range op.Output.Grants {
				v.grants[g.JobID] = append(v.grants[g.JobID], grantRef{
					op: i, g: g, replayed: op.Output.Replayed, invoke: op.InvokeNs, complete: op.CompleteNs,
				})
				jobs[g.JobID] = true
			}
		case history.OpCancelSubmitter:
			if op.Status == history.StatusOK {
				for _, j := range op.Output.Cancelled {
					v.subCancels[j] = append(v.subCancels[j], i)
					jobs[j] = true
				}
			}
		case history.OpHeartbeat:
			w := firstNonEmpty(op.Input.WorkerID, op.Process)
			v.heartbeats[w] = append(v.heartbeats[w], i)
		}
	}
}

// indexExpiries keeps, per lease, the earliest observation that it had
// expired: an event, or a read listing the lease as expired. Either comes
// after the expiry committed, so it bounds the commit from above.
func (v *view) indexExpiries() {
	see := func(job string, tok uint64, ns int64, idx int, worker string) {
		k := leaseKey{job, tok}
		o, ok := v.expiries[k]
		if !ok || ns < o.ns {
			o.ns, o.idx = ns, idx
		}
		if o.worker == "" {
			o.worker = worker
		}
		v.expiries[k] = o
	}
	for _, e := range v.events {
		if e.ev.Type == history.EventLeaseExpired {
			see(e.ev.JobID, e.ev.Token, e.ns, e.idx, e.ev.WorkerID)
		}
	}
	for i := range v.ops {
		op := &v.ops[i]
		if op.Status != history.StatusOK || !v.linearizableRead(op) {
			continue
		}
		if j := op.Output.Job; j != nil {
			for _, l := range j.Leases {
				if l.State == history.LeaseExpired {
					see(j.ID, l.Token, op.CompleteNs, op.CompleteIndex, l.WorkerID)
				}
			}
		}
		if l := op.Output.Lease; l != nil && l.State == history.LeaseExpired && op.Input.JobID != "" {
			see(op.Input.JobID, l.Token, op.CompleteNs, op.CompleteIndex, l.WorkerID)
		}
	}
}

// linearizableRead: a read whose answer reflects every write that
// completed before it was invoked. Fence checks always are; job and lease
// reads unless the caller asked for a stale one.
func (v *view) linearizableRead(op *history.Operation) bool {
	switch op.Name {
	case history.OpFenceCheck:
		return true
	case history.OpGetJob, history.OpGetLease:
		return !op.Input.Stale
	}
	return false
}

func pairFaults(entries []history.Entry, opts Options) []faultSpn {
	var out []faultSpn
	open := map[string]int{}
	for i := range entries {
		e := &entries[i]
		switch e.Kind {
		case history.KindFaultStart:
			f := e.Fault
			open[f.ID] = len(out)
			out = append(out, faultSpn{
				startIdx: i, stopIdx: -1, id: f.ID, typ: f.Type, targets: f.Targets, start: e.Ns, end: never,
				pause: f.Pause || slices.Contains(opts.PauseFaults, f.Type),
				clock: f.Clock || slices.Contains(opts.ClockFaults, f.Type),
				kill:  f.Kill || slices.Contains(opts.KillFaults, f.Type),
				disk:  f.Disk,
				jump:  f.ClockJumpNs, rate: f.ClockRate,
			})
		case history.KindFaultStop:
			if k, ok := open[e.Fault.ID]; ok {
				out[k].end, out[k].stopIdx = e.Ns, i
				delete(open, e.Fault.ID)
			}
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].start < out[b].start })
	return out
}

// pairExecs pairs exec_start with exec_stop per (job, token, worker,
// process), first in first out. A start without a stop ended when its
// process was killed or its worker declared gone, if either happened
// after it started; otherwise it never ended.
func pairExecs(entries []history.Entry, faults []faultSpn, gone map[string]int64) []execSpan {
	type key struct {
		job             string
		token           uint64
		worker, process string
	}
	var out []execSpan
	open := map[key][]int{}
	for i := range entries {
		e := &entries[i]
		if e.Exec == nil {
			continue
		}
		k := key{e.Exec.JobID, e.Exec.Token, e.Exec.WorkerID, e.Process}
		switch e.Kind {
		case history.KindExecStart:
			open[k] = append(open[k], len(out))
			out = append(out, execSpan{startIdx: i, stopIdx: -1, job: k.job, token: k.token,
				worker: k.worker, process: k.process, start: e.Ns, stop: never})
		case history.KindExecStop:
			q := open[k]
			if len(q) == 0 {
				continue // a stop whose start was never recorded tells nothing
			}
			x := &out[q[0]]
			open[k] = q[1:]
			x.stopIdx, x.stop, x.cause = i, e.Ns, e.Exec.Cause
			x.lastAck, x.renew, x.tol = e.Exec.LastAckSendNs, e.Exec.RenewNs, e.Exec.TolerationNs
		}
	}
	for i := range out {
		x := &out[i]
		if x.stopIdx >= 0 {
			continue
		}
		for _, f := range faults {
			if f.kill && f.start >= x.start && f.start < x.stop && f.hits(x.process, x.worker) {
				x.stop, x.cause = f.start, history.CauseKilledProcess
			}
		}
		if t, ok := gone[x.worker]; ok && t >= x.start && t < x.stop {
			x.stop, x.cause = t, history.CauseKilledProcess
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].start < out[b].start })
	return out
}

// paused reports whether a pause fault naming any of names was on at some
// time in [from, to].
func (v *view) paused(from, to int64, names ...string) bool {
	for i := range v.faults {
		f := &v.faults[i]
		if f.pause && f.overlaps(from, to) && f.hits(names...) {
			return true
		}
	}
	return false
}

// lastHeal is the last heal's time, false if the run had none.
func (v *view) lastHeal() (int64, int, bool) {
	if len(v.heals) == 0 {
		return 0, -1, false
	}
	i := v.heals[len(v.heals)-1]
	return v.entries[i].Ns, i, true
}

// finalLease finds token's lease in a final state's job, if listed.
func finalLease(j *history.JobSummary, tok uint64) (*history.Lease, bool) {
	for i := range j.Leases {
		if j.Leases[i].Token == tok {
			return &j.Leases[i], true
		}
	}
	return nil, false
}

// trimmed reports whether a token absent from a job's list may simply be
// older than the leases the server keeps.
func (v *view) trimmed(j *history.JobSummary, tok uint64) bool {
	return len(j.Tokens) >= v.opts.LeaseHistory && len(j.Tokens) > 0 && tok < j.Tokens[0]
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// at shows a time as seconds since the history's first entry.
func (v *view) at(ns int64) string { return fmt.Sprintf("t+%.3fs", float64(ns-v.t0)/1e9) }

func (v *view) atOrNever(ns int64) string {
	if ns == never {
		return "the end (never stopped)"
	}
	return v.at(ns)
}

func sortLeaseKeys(ks []leaseKey) {
	sort.Slice(ks, func(a, b int) bool {
		if ks[a].job != ks[b].job {
			return ks[a].job < ks[b].job
		}
		return ks[a].token < ks[b].token
	})
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

func fmtMs(ns int64) string { return fmt.Sprintf("%.1fms", ms(ns)) }
