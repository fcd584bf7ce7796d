package checker

import (
	"fmt"
	"math"
)

// checkExpiry (I4): every expiry commits after the holder's self-stop.
//
// The commit time of an expiry is not in the history; its first
// observation is (a lease.expired event received, or a linearizable read
// listing the lease expired), and that comes after the commit. So every
// execution under an expired token must have stopped by the observation:
// a stop after it is certainly after the commit. The slack (observation
// minus stop) is reported; its minimum is an upper bound on the real
// margin. A holder paused during its execution is excused (counted).
//
// Independently of any expiry, a worker promises to stop by its self-stop
// deadline, last acknowledged heartbeat send + toleration − 2 × renew:
// every exec_stop that carries last_ack_send_ns is held to that deadline
// plus Options.Slack (a handler returns a little after its context ends),
// unless the process was paused.
func checkExpiry(v *view, r *Result) {
	checkStopsBeforeExpiry(v, r)
	checkSelfStopDeadlines(v, r)
}

func checkStopsBeforeExpiry(v *view, r *Result) {
	byLease := map[leaseKey][]int{}
	for i := range v.execs {
		x := &v.execs[i]
		k := leaseKey{x.job, x.token}
		byLease[k] = append(byLease[k], i)
	}
	checked, excused, bare := 0, 0, 0
	for _, job := range v.jobs {
		for _, k := range v.expiredLeases(job) {
			obs := v.expiries[k]
			xs := byLease[k]
			if len(xs) == 0 {
				bare++
				continue
			}
			for _, i := range xs {
				x := &v.execs[i]
				checked++
				if x.stop <= obs.ns {
					slack := obs.ns - x.stop
					if v.minSlack == nil || slack < *v.minSlack {
						v.minSlack = &slack
					}
					continue
				}
				if v.paused(x.start, obs.ns, x.process, x.worker) {
					excused++
					continue
				}
				refs := []int{x.startIdx, obs.idx}
				if x.stopIdx >= 0 {
					refs = append(refs, x.stopIdx)
				}
				r.add(fmt.Sprintf("job %s token %d: %s ran until %s, after its expiry was seen at %s",
					k.job, k.token, x.worker, v.atOrNever(x.stop), v.at(obs.ns)), k.job, k.token, refs...)
			}
		}
	}
	r.Stats["expiries_observed"] = float64(len(v.expiries))
	r.Stats["expired_executions_checked"] = float64(checked)
	r.Stats["expired_executions_excused"] = float64(excused)
	r.Stats["expiries_without_execution"] = float64(bare)
	if v.minSlack != nil {
		r.Stats["min_slack_ms"] = ms(*v.minSlack)
	}
	if len(v.expiries) == 0 {
		r.note("no expiry observed: nothing to order against self-stops")
	}
}

// expiredLeases lists job's leases seen expired, by token.
func (v *view) expiredLeases(job string) []leaseKey {
	var out []leaseKey
	for k := range v.expiries {
		if k.job == job {
			out = append(out, k)
		}
	}
	sortLeaseKeys(out)
	return out
}

func checkSelfStopDeadlines(v *view, r *Result) {
	checked := 0
	worst := int64(math.MinInt64)
	for i := range v.execs {
		x := &v.execs[i]
		if x.stopIdx < 0 || x.lastAck == 0 {
			continue
		}
		renew, tol := x.renew, x.tol
		if renew == 0 {
			renew = int64(v.opts.Renew)
		}
		if tol == 0 {
			tol = int64(v.opts.Toleration)
		}
		if renew <= 0 || tol <= 0 {
			r.note("renew or toleration unknown: some self-stop deadlines not checked")
			continue
		}
		checked++
		deadline := x.lastAck + tol - 2*renew
		late := x.stop - deadline
		worst = max(worst, late)
		if late <= int64(v.opts.Slack) || v.paused(x.start, x.stop, x.process, x.worker) {
			continue
		}
		r.add(fmt.Sprintf("job %s token %d: %s stopped at %s, %s past its self-stop deadline %s (slack %s)",
			x.job, x.token, x.worker, v.at(x.stop), fmtMs(late), v.at(deadline), fmtMs(int64(v.opts.Slack))),
			x.job, x.token, x.startIdx, x.stopIdx)
	}
	r.Stats["self_stop_deadlines_checked"] = float64(checked)
	if checked > 0 {
		r.Stats["latest_stop_vs_deadline_ms"] = ms(worst)
	}
}
