package cluster

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/fsm"
)

// Execution timeouts. A job's timeout runs from each lease's grant (its
// GrantedAt, the leader time of the acquire). The state machine keeps the
// live leases with a timeout ordered by deadline; the leader, and only the
// leader, asks it for the leases past theirs by its wall clock (the one it
// stamps on commands) and proposes fsm.TimeOut, whose apply checks each
// deadline again against the command's own time. A timed-out lease is
// revoked with a kill, which the worker hears in its next heartbeat reply
// as for any kill.
//
// The leader's timer loop does it, after the expiries of each pass, on the
// node's clock seam: the loop's one timer is armed for the next deadline
// when that comes before the next expiry pass, so a timeout is proposed
// on time, and it stops with the term. Nothing is proposed while a voter
// is below the level of TimeOut: no job can carry a timeout then.

// timeoutWait is how long the leader's timer loop sleeps: interval, or
// less when a lease's deadline comes first.
func (n *Node) timeoutWait(interval time.Duration) time.Duration {
	now := n.clock.Wall().UnixNano()
	at, ok := n.fsm.NextTimeoutAfter(now)
	if !ok || time.Duration(at-now) >= interval || !n.timeoutsOn() {
		return interval
	}
	// The deadline is a wall time and the timer monotonic: a wall clock
	// that steps is caught up with at the next pass.
	return max(time.Duration(at-now), time.Millisecond)
}

// timeoutsOn says whether every voter applies TimeOut. It is asked only
// when a lease has a timeout (it reads the Raft configuration).
func (n *Node) timeoutsOn() bool { return n.ClusterLevel() >= fsm.CodecOf(&fsm.TimeOut{}) }

// timeoutTick revokes the leases past their deadline by this node's wall
// clock, in commands of at most fsm.MaxTimeOutBatch leases. A command that
// fails stops the pass; the next one proposes what is left.
func (n *Node) timeoutTick(ctx context.Context, ls *leaderState) {
	log := n.logger.Named("timeouts")
	now := n.clock.Wall().UnixNano()
	for ctx.Err() == nil {
		due := n.fsm.TimedOut(now, fsm.MaxTimeOutBatch)
		if len(due) == 0 || !n.timeoutsOn() {
			return
		}
		if cur, err := n.established(); err != nil || cur != ls {
			return
		}
		v, err := n.raftApply(ctx, &fsm.TimeOut{Leases: due})
		if err != nil {
			log.Warn("timeouts_failed_will_retry", "leases", len(due), "error", err)
			return
		}
		res := v.(fsm.TimeOutResult)
		log.Info("leases_timed_out", "leases", len(res.TimedOut), "ignored", len(res.Ignored))
		if len(res.TimedOut) == 0 {
			return // every one ignored: decided afresh next pass, no spin
		}
	}
}
