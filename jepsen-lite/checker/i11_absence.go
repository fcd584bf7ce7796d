package checker

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// clockFaultLag is how long a clock fault may take to reach its targets
// after its fault_start (leasehold's chaos clock re-reads its control file
// at most every 50 ms): a jump is placed anywhere in [start, start+lag].
const clockFaultLag = 100 * time.Millisecond

// checkAbsence (I11): no lease expires because of a leader's absence.
//
// A heartbeat that named a lease and was acknowledged keep (or stop)
// renewed it on arrival, and arrival is after the heartbeat's invoke; so
// whichever leader ends the lease cannot commit the expiry before invoke +
// toleration (a new leader restarts every clock at takeover, the absence
// rule only moves deadlines later). The expiry's first observation comes
// after its commit. An observation before the latest such invoke +
// toleration (− Options.ClockTolerance) is therefore an early expiry: a
// leader charged the worker for silence that was not the worker's.
//
// The leader's own absence moves the bound further:
//   - While every node of the run was paused (a SIGSTOP of the whole
//     cluster) for longer than grace, no timer ran: either the leader comes
//     back and its loop sees the gap (and shifts every deadline by it), or
//     a new leader takes office after it (and restarts every clock). Time
//     in such a stretch does not count toward the silence.
//   - A clock fault that says what it did (history.Fault's clock_jump_ns,
//     clock_rate) is accounted for: the deciding node's clock may have
//     run ahead by what it gained in the window, through jumps forward of
//     at most grace (a longer one is a gap the absence rule absorbs, like
//     a machine that slept) and through a fast rate. The bound is eased by
//     the most any one node gained. A clock fault that says nothing
//     excuses the expiry.
//
// An early expiry is excused when a fault named the worker in the window
// (it was paused or cut; a kill does not count). Heartbeats acknowledged
// lost, or not naming the lease, prove nothing about it: a decided expiry
// stands even if the worker speaks again.
func checkAbsence(v *view, r *Result) {
	tol := int64(v.opts.Toleration)
	if tol <= 0 {
		r.note("toleration unknown: early expiries not checked")
		return
	}
	absent := v.clusterAbsences()
	checked, excused := 0, 0
	var minMargin *int64
	var absentTotal, maxAllowance int64
	for _, job := range v.jobs {
		for _, k := range v.expiredLeases(job) {
			obs := v.expiries[k]
			worker := obs.worker
			if worker == "" {
				worker = v.holder(k)
			}
			hb, ok := v.lastRenewal(worker, k)
			if !ok {
				continue
			}
			checked++
			op := &v.ops[hb]
			away := overlapTotal(absent, op.InvokeNs, obs.ns)
			absentTotal += away
			margin := obs.ns - (op.InvokeNs + tol + away)
			if minMargin == nil || margin < *minMargin {
				minMargin = &margin
			}
			allowance, known := v.clockGain(op.InvokeNs, obs.ns)
			maxAllowance = max(maxAllowance, allowance)
			if margin+allowance+int64(v.opts.ClockTolerance) >= 0 {
				continue
			}
			if !known || v.workerFaulted(op.InvokeNs, obs.ns, worker, op.Process) {
				excused++
				continue
			}
			msg := fmt.Sprintf("job %s token %d expired (seen %s) %s before toleration had passed since %s's heartbeat at %s was acknowledged",
				k.job, k.token, v.at(obs.ns), fmtMs(-margin), worker, v.at(op.InvokeNs))
			if away > 0 {
				msg += fmt.Sprintf(", not counting %s while every node was paused", fmtMs(away))
			}
			if allowance > 0 {
				msg += fmt.Sprintf(", allowing %s for clocks run ahead", fmtMs(allowance))
			}
			r.add(msg, k.job, k.token, op.CompleteIndex, obs.idx)
		}
	}
	absences := 0
	for _, e := range v.events {
		if e.ev.Type == history.EventAbsenceRule {
			absences++
		}
	}
	r.Stats["expiries_checked"] = float64(checked)
	r.Stats["expiries_excused"] = float64(excused)
	r.Stats["absence_rule_events"] = float64(absences)
	r.Stats["cluster_paused_ms"] = ms(overlapTotal(absent, 0, never))
	if absentTotal > 0 {
		r.Stats["absence_discounted_ms"] = ms(absentTotal)
	}
	if maxAllowance > 0 {
		r.Stats["max_clock_allowance_ms"] = ms(maxAllowance)
	}
	if minMargin != nil {
		r.Stats["min_margin_ms"] = ms(*minMargin)
	}
}

// span is a time interval [from, to].
type span struct{ from, to int64 }

// clusterAbsences lists the stretches, longer than grace, during which
// every node of the run was paused. Without the run's nodes or grace there
// are none: nothing is discounted.
func (v *view) clusterAbsences() []span {
	if v.run == nil || len(v.run.Nodes) == 0 || v.opts.Grace <= 0 {
		return nil
	}
	var common []span
	for i, node := range v.run.Nodes {
		var mine []span
		for k := range v.faults {
			f := &v.faults[k]
			if f.pause && f.hits(node) {
				mine = append(mine, span{f.start, f.end})
			}
		}
		mine = unionSpans(mine)
		if i == 0 {
			common = mine
		} else {
			common = intersectSpans(common, mine)
		}
	}
	out := common[:0:0]
	for _, s := range common {
		if s.to-s.from > int64(v.opts.Grace) {
			out = append(out, s)
		}
	}
	return out
}

func unionSpans(ss []span) []span {
	sort.Slice(ss, func(a, b int) bool { return ss[a].from < ss[b].from })
	var out []span
	for _, s := range ss {
		if n := len(out); n > 0 && s.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// intersectSpans intersects two sorted lists of disjoint spans.
func intersectSpans(a, b []span) []span {
	var out []span
	for i, j := 0, 0; i < len(a) && j < len(b); {
		from, to := max(a[i].from, b[j].from), min(a[i].to, b[j].to)
		if from < to {
			out = append(out, span{from, to})
		}
		if a[i].to < b[j].to {
			i++
		} else {
			j++
		}
	}
	return out
}

// overlapTotal is how much of [from, to] the spans cover.
func overlapTotal(ss []span, from, to int64) int64 {
	var n int64
	for _, s := range ss {
		if lo, hi := max(s.from, from), min(s.to, to); lo < hi {
			n += hi - lo
		}
	}
	return n
}

// clockGain is the most any one node's clock can have run ahead of real
// time during [from, to] through clock faults (see checkAbsence); known is
// false when a clock fault on in the window does not say what it did.
func (v *view) clockGain(from, to int64) (gain int64, known bool) {
	lag, grace := int64(clockFaultLag), int64(v.opts.Grace)
	counts := func(jump int64) bool { return jump > 0 && (grace <= 0 || jump <= grace) }
	inWindow := func(at int64) bool { return at != never && at+lag >= from && at <= to }
	byNode := map[string]int64{}
	known = true
	for i := range v.faults {
		f := &v.faults[i]
		if !f.clock || !f.overlaps(from-lag, to) {
			continue
		}
		if f.jump == 0 && f.rate == 0 {
			known = false
			continue
		}
		var g int64
		if counts(f.jump) && inWindow(f.start) {
			g += f.jump
		}
		if counts(-f.jump) && inWindow(f.end) {
			g -= f.jump
		}
		if f.rate > 1 {
			if lo, hi := max(f.start, from), min(f.end, to); lo < hi {
				g += int64(float64(hi-lo) * (f.rate - 1))
			}
		}
		for _, t := range slices.Compact(slices.Sorted(slices.Values(f.targets))) {
			byNode[t] += g
		}
	}
	for _, g := range byNode {
		gain = max(gain, g)
	}
	return gain, known
}

// holder is the worker a lease was granted to, as an acquire's answer or
// the event log tells.
func (v *view) holder(k leaseKey) string {
	for _, g := range v.grants[k.job] {
		if g.g.Token == k.token && g.g.WorkerID != "" {
			return g.g.WorkerID
		}
	}
	if e, ok := v.acquired[k]; ok {
		return e.ev.WorkerID
	}
	return ""
}

// lastRenewal is worker's acknowledged heartbeat with the latest invoke
// that answered keep or stop for lease k.
func (v *view) lastRenewal(worker string, k leaseKey) (int, bool) {
	best, found := -1, false
	for _, i := range v.heartbeats[worker] {
		op := &v.ops[i]
		if op.Status != history.StatusOK {
			continue
		}
		for _, vd := range op.Output.Verdicts {
			if vd.JobID == k.job && vd.Token == k.token &&
				(vd.Verdict == history.VerdictKeep || vd.Verdict == history.VerdictStop) &&
				(!found || op.InvokeNs > v.ops[best].InvokeNs) {
				best, found = i, true
			}
		}
	}
	return best, found
}

// workerFaulted: a fault other than a kill or a clock fault named the
// worker (by id or process) at some time in [from, to]. A kill explains
// silence after it, never an expiry before toleration; clock faults are
// accounted for by clockGain.
func (v *view) workerFaulted(from, to int64, names ...string) bool {
	for i := range v.faults {
		f := &v.faults[i]
		if f.overlaps(from, to) && !f.kill && !f.clock && f.hits(names...) {
			return true
		}
	}
	return false
}
