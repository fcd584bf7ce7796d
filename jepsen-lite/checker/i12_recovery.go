package checker

import (
	"fmt"
	"slices"
)

// checkRecovery (I12): after the heal, a leader within a few election
// timeouts, and orphaned jobs re-leased within toleration plus a small
// bound.
//
// The leader: the first leader_elected at or after the last heal must come
// within Options.LeaderBound of it. The orphans: leases granted before the
// heal, to a worker gone by then (a worker_gone marker, or a kill fault on
// it that never stopped), and not seen ended by the heal. Each must be
// re-leased (a fresh grant of its job with a larger token) or, when no
// grant follows (a run-style job ends lost), seen expired. The lease must
// be seen ended (expired, requeued, or granted again) by: the later of the
// heal and that leader, plus toleration (a new leader restarts every clock
// at takeover), plus Options.Slack. The re-lease itself also waits for a
// free slot among the workers left, which is the workload's doing, not the
// cluster's: it is required to happen, not bounded. Recovery times (to the
// re-lease) are measured from the heal and reported.
//
// A disk fault's stop is the heal of its node: its disk was freed then.
// The node must be seen ready again (node_ready) within
// Options.DiskReadyBound of it, whether or not a heal follows.
func checkRecovery(v *view, r *Result) {
	checkDiskRecovery(v, r)
	heal, healIdx, ok := v.lastHeal()
	if !ok {
		r.note("no heal recorded: recovery not checked")
		return
	}
	base := heal
	leader := -1
	for _, i := range v.elects {
		if v.entries[i].Ns >= heal {
			leader = i
			break
		}
	}
	if leader < 0 {
		r.add("no leader observed after the last heal", "", 0, healIdx)
	} else {
		at := v.entries[leader].Ns
		rec := at - heal
		v.leaderRec = &rec
		base = at
		r.Stats["leader_recovery_ms"] = ms(rec)
		if rec > int64(v.opts.LeaderBound) {
			r.add(fmt.Sprintf("leader %s observed %s after the heal, over the bound %s",
				v.entries[leader].Marker.Node, fmtMs(rec), fmtMs(int64(v.opts.LeaderBound))), "", 0, healIdx, leader)
		}
	}
	tol := int64(v.opts.Toleration)
	if tol <= 0 {
		r.note("toleration unknown: orphaned jobs not checked")
		return
	}
	deadline := base + tol + int64(v.opts.Slack)
	var worst int64
	for _, job := range v.jobs {
		for _, k := range v.grantedLeases(job) {
			if v.grantKnown(k.job, k.token) > heal {
				continue
			}
			worker := v.holder(k)
			if gone, ok := v.goneAt(worker); !ok || gone > heal {
				continue
			}
			if ended, _, _ := v.endedAt(k.job, k.token, fromAny); ended <= heal {
				continue
			}
			at, idx := v.recovered(k)
			if at == never {
				r.add(fmt.Sprintf("job %s: lease %d of gone worker %s was never re-leased after the heal", k.job, k.token, worker),
					k.job, k.token, healIdx)
				continue
			}
			rec := at - heal
			v.orphanRec = append(v.orphanRec, rec)
			worst = max(worst, rec)
			// The cluster's part is to end the lease; who takes the job
			// next waits for a free slot among the remaining workers.
			freed, freedIdx, _ := v.endedAt(k.job, k.token, fromAny)
			if freed > at {
				freed, freedIdx = at, idx
			}
			if freed > deadline {
				r.add(fmt.Sprintf("job %s: lease %d of gone worker %s ended %s after the heal, past toleration + slack (%s)",
					k.job, k.token, worker, fmtMs(freed-heal), fmtMs(deadline-heal)), k.job, k.token, healIdx, freedIdx)
			}
		}
	}
	r.Stats["orphans"] = float64(len(v.orphanRec))
	if len(v.orphanRec) > 0 {
		r.Stats["orphan_max_recovery_ms"] = ms(worst)
	}
}

// grantedLeases lists the job's tokens that acquires or events show
// granted, by token.
func (v *view) grantedLeases(job string) []leaseKey {
	var out []leaseKey
	add := func(tok uint64) {
		k := leaseKey{job, tok}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	for _, g := range v.grants[job] {
		add(g.g.Token)
	}
	for k := range v.acquired {
		if k.job == job {
			add(k.token)
		}
	}
	sortLeaseKeys(out)
	return out
}

// goneAt is when worker went for good: its worker_gone marker, or a kill
// fault on it that was never undone.
func (v *view) goneAt(worker string) (int64, bool) {
	if worker == "" {
		return 0, false
	}
	at, ok := v.gone[worker]
	for i := range v.faults {
		f := &v.faults[i]
		if f.kill && f.end == never && f.hits(worker) && (!ok || f.start < at) {
			at, ok = f.start, true
		}
	}
	return at, ok
}

// recovered is when an orphaned lease's job moved on: its next fresh
// grant, else the lease's expiry seen, unless a final state shows the job
// unfinished with no lease after this one: then the expiry ended the lease
// but the job was never queued again (nor ended), which is no recovery.
func (v *view) recovered(k leaseKey) (int64, int) {
	at, idx := never, -1
	for _, g := range v.grants[k.job] {
		if !g.replayed && g.g.Token > k.token && g.complete < at {
			at, idx = g.complete, v.ops[g.op].CompleteIndex
		}
	}
	if at != never {
		return at, idx
	}
	if obs, ok := v.expiries[k]; ok && !v.stranded(k) {
		return obs.ns, obs.idx
	}
	return never, -1
}

// stranded: a final state lists k's job unfinished with no token above
// k's.
func (v *view) stranded(k leaseKey) bool {
	for _, f := range v.finals {
		j, ok := f.jobs[k.job]
		if ok && !j.State.Terminal() && (len(j.Tokens) == 0 || j.Tokens[len(j.Tokens)-1] <= k.token) {
			return true
		}
	}
	return false
}

// checkDiskRecovery: every node whose disk was freed is seen ready again
// within DiskReadyBound.
func checkDiskRecovery(v *view, r *Result) {
	bound := int64(v.opts.DiskReadyBound)
	var worst int64
	freed := 0
	for i := range v.faults {
		f := &v.faults[i]
		if !f.disk || len(f.targets) == 0 {
			continue
		}
		node := f.targets[0]
		if f.stopIdx < 0 {
			r.add(fmt.Sprintf("node %s's disk, filled at %s, was never freed", node, v.at(f.start)), "", 0, f.startIdx)
			continue
		}
		freed++
		ready := -1
		for _, j := range v.readies {
			if e := &v.entries[j]; e.Marker.Node == node && e.Ns >= f.end {
				ready = j
				break
			}
		}
		if ready < 0 {
			r.add(fmt.Sprintf("node %s's disk was freed at %s, and the node was never seen ready again", node, v.at(f.end)),
				"", 0, f.stopIdx)
			continue
		}
		took := v.entries[ready].Ns - f.end
		worst = max(worst, took)
		if took > bound {
			r.add(fmt.Sprintf("node %s was ready %s after its disk was freed, over the bound %s", node, fmtMs(took), fmtMs(bound)),
				"", 0, f.stopIdx, ready)
		}
	}
	if freed > 0 {
		r.Stats["disks_freed"] = float64(freed)
		r.Stats["disk_ready_max_ms"] = ms(worst)
		r.Stats["disk_ready_bound_ms"] = ms(bound)
		v.diskReady = &worst
	}
}
