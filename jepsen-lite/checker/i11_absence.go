package checker

import (
	"fmt"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// checkAbsence (I11): no lease expires because of a leader's absence.
//
// A heartbeat that named a lease and was acknowledged keep (or stop)
// renewed it on arrival, and arrival is after the heartbeat's invoke; so
// whichever leader ends the lease cannot commit the expiry before invoke +
// toleration (a new leader restarts every clock at takeover, the absence
// rule only moves deadlines later). The expiry's first observation comes
// after its commit. An observation before the latest such invoke +
// toleration (− Options.ClockTolerance) is therefore an early expiry: a
// leader charged the worker for silence that was not the worker's. It is
// excused when a fault named the worker in that window (it was paused or
// cut; a kill does not count) or a clock fault was on, since then the
// timing the rule rests on was itself disturbed.
// Heartbeats acknowledged lost, or not naming the lease, prove nothing
// about it: a decided expiry stands even if the worker speaks again.
func checkAbsence(v *view, r *Result) {
	tol := int64(v.opts.Toleration)
	if tol <= 0 {
		r.note("toleration unknown: early expiries not checked")
		return
	}
	checked, excused := 0, 0
	var minMargin *int64
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
			margin := obs.ns - (op.InvokeNs + tol)
			if minMargin == nil || margin < *minMargin {
				minMargin = &margin
			}
			if margin+int64(v.opts.ClockTolerance) >= 0 {
				continue
			}
			if v.workerFaulted(op.InvokeNs, obs.ns, worker, op.Process) {
				excused++
				continue
			}
			r.add(fmt.Sprintf("job %s token %d expired (seen %s) %s before toleration had passed since %s's heartbeat at %s was acknowledged",
				k.job, k.token, v.at(obs.ns), fmtMs(-margin), worker, v.at(op.InvokeNs)), k.job, k.token, op.CompleteIndex, obs.idx)
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
	if minMargin != nil {
		r.Stats["min_margin_ms"] = ms(*minMargin)
	}
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

// workerFaulted: a fault other than a kill named the worker (by id or
// process), or a clock fault was on, at some time in [from, to]. A kill
// explains silence after it, never an expiry before toleration.
func (v *view) workerFaulted(from, to int64, names ...string) bool {
	for i := range v.faults {
		f := &v.faults[i]
		if f.overlaps(from, to) && (f.clock || !f.kill && f.hits(names...)) {
			return true
		}
	}
	return false
}
