package checker

import (
	"fmt"
)

// checkExclusive (I3): no two workers run one job at overlapping real
// times.
//
// Executions are the exec_start/exec_stop spans (view.go pairs them; one
// that never stopped runs until its process was killed or forever). Two
// executions of one job under different tokens must not overlap. When they
// do, the one with the older token is the one that overran. If a pause
// fault hit its process between its grant and the overlap, timing could
// not have stopped it (the self-stop is a timer in the paused process),
// so the overlap is excused and counted, and fencing must have held for
// the job instead: an excused overlap on a job with an I5 violation is a
// violation here too. Two executions under one token (a restarted worker
// re-attaching) are one lease, not judged here.
func checkExclusive(v *view, r *Result) {
	byJob := map[string][]int{}
	open := 0
	for i := range v.execs {
		x := &v.execs[i]
		byJob[x.job] = append(byJob[x.job], i)
		if x.stop == never {
			open++
		}
	}
	overlaps, excused := 0, 0
	for _, job := range sortedKeys(byJob) {
		xs := byJob[job]
		for a := 0; a < len(xs); a++ {
			for b := a + 1; b < len(xs); b++ {
				x, y := &v.execs[xs[a]], &v.execs[xs[b]]
				if x.token == y.token {
					continue
				}
				from, to := max(x.start, y.start), min(x.stop, y.stop)
				if from >= to {
					continue
				}
				overlaps++
				old, cur := x, y
				if y.token < x.token {
					old, cur = y, x
				}
				refs := []int{old.startIdx, cur.startIdx}
				if old.stopIdx >= 0 {
					refs = append(refs, old.stopIdx)
				}
				if v.paused(v.grantStart(old), from, old.process, old.worker) {
					excused++
					v.excused[job] = true
					if v.fenceBad[job] {
						r.add(fmt.Sprintf("job %s: token %d on %s overlapped token %d on %s for %s; excused by a pause, but fencing failed for the job (I5)",
							job, old.token, old.worker, cur.token, cur.worker, fmtMs(to-from)), job, old.token, refs...)
					}
					continue
				}
				r.add(fmt.Sprintf("job %s: token %d on %s ran until %s, overlapping token %d on %s from %s",
					job, old.token, old.worker, v.atOrNever(old.stop), cur.token, cur.worker, v.at(cur.start)), job, old.token, refs...)
			}
		}
	}
	r.Stats["executions"] = float64(len(v.execs))
	r.Stats["never_stopped"] = float64(open)
	r.Stats["overlaps"] = float64(overlaps)
	r.Stats["excused_overlaps"] = float64(excused)
}

// grantStart is the earliest time the execution's lease could have been
// granted: the invoke of the acquire that granted it, or the execution's
// own start. A pause after the grant but before the start counts too.
func (v *view) grantStart(x *execSpan) int64 {
	t := x.start
	for _, g := range v.grants[x.job] {
		if g.g.Token == x.token && g.invoke < t {
			t = g.invoke
		}
	}
	return t
}
