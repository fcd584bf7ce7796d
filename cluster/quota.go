package cluster

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/fsm"
)

// The replicated state's quota. Every replica keeps the whole state in
// memory, so a state that outgrows one machine takes every replica down at
// once. The leader refuses submits that would take the state (fsm
// Stats.Bytes) past Config.StateQuotaBytes, while everything that frees
// space (reports, cancels, releases, expiries, compaction) keeps working,
// so the cluster recovers as jobs finish. The check is the leader's, at
// proposal time: concurrent submits may overshoot the quota by what is in
// flight, never by more. A submitter may also be bounded in queued jobs,
// which a retry of a dead job (queued again) passes as a submit does.

// quotaClearedAt is the share of the quota under which the alarm clears,
// so it does not flap at the edge.
const quotaClearedAt = 0.9

// checkSubmit refuses a new job over the quota or its submitter's bound. A
// submit of a job that exists (an idempotent retry) always passes: it adds
// nothing.
func (n *Node) checkSubmit(ls *leaderState, c *fsm.SubmitJob) error {
	quota, perSubmitter := n.cfg.StateQuotaBytes, n.cfg.MaxQueuedPerSubmitter
	if quota <= 0 && perSubmitter <= 0 {
		return nil
	}
	if n.fsm.HasJob(c.Spec.ID) {
		return nil // a resubmit: it adds nothing
	}
	if quota > 0 {
		if size := n.fsm.Bytes(); size+int64(len(c.Spec.Payload)) > quota {
			ls.quotaRefused.Store(true)
			return fmt.Errorf("%w: the replicated state is %d bytes of a quota of %d (state_quota_bytes); submits pass again as jobs finish and are compacted",
				ErrQuotaExceeded, size, quota)
		}
	}
	if perSubmitter > 0 && c.Spec.Submitter != "" {
		if q := n.fsm.QueuedBy(c.Spec.Submitter); q >= perSubmitter {
			return fmt.Errorf("%w: submitter %q has %d queued jobs, the bound (max_queued_per_submitter)", ErrQuotaExceeded, c.Spec.Submitter, q)
		}
	}
	return nil
}

// checkRetry refuses to queue a dead job again while its submitter has
// MaxQueuedPerSubmitter queued jobs: a retry queues a job as a submit
// does, and is bounded alike (a job that is not dead is left to the state
// machine to refuse).
func (n *Node) checkRetry(c *fsm.RetryJob) error {
	perSubmitter := n.cfg.MaxQueuedPerSubmitter
	if perSubmitter <= 0 {
		return nil
	}
	j, err := n.fsm.Job(c.JobID)
	if err != nil || j.State != fsm.JobDead || j.Submitter == "" {
		return nil
	}
	if q := n.fsm.QueuedBy(j.Submitter); q >= perSubmitter {
		return fmt.Errorf("%w: submitter %q has %d queued jobs, the bound (max_queued_per_submitter); job %s stays dead",
			ErrQuotaExceeded, j.Submitter, q, j.ID)
	}
	return nil
}

// checkScheduleRoom refuses a schedule whose template's payload would take
// the state past the quota: a schedule is kept, like a job, by every
// replica. Its jobs pass checkSubmit when they fire.
func (n *Node) checkScheduleRoom(c *fsm.PutSchedule) error {
	quota := n.cfg.StateQuotaBytes
	if quota <= 0 {
		return nil
	}
	if size := n.fsm.Bytes(); size+int64(len(c.Template.Payload)) > quota {
		return fmt.Errorf("%w: the replicated state is %d bytes of a quota of %d (state_quota_bytes)", ErrQuotaExceeded, size, quota)
	}
	return nil
}

// quotaTick raises the alarm (a quota.exceeded event) when the state
// reaches the quota or a submit was refused, and clears it (quota.cleared)
// once the state is back under 90 % of it. Each leader keeps its own
// alarm: a new leader over the quota raises it again.
func (n *Node) quotaTick(ctx context.Context, ls *leaderState) {
	quota := n.cfg.StateQuotaBytes
	if quota <= 0 {
		return
	}
	size := n.fsm.Bytes()
	switch {
	case !ls.quotaAlarm && (size >= quota || ls.quotaRefused.Load()):
		n.logger.Named("quota").Warn("quota_exceeded", "state_bytes", size, "quota_bytes", quota)
		n.recordEvents(ctx, fsm.RecordEvent{Event: fsm.EventQuotaExceeded,
			Detail: fmt.Sprintf("state %d bytes of a quota of %d: submits refused", size, quota)})
		ls.quotaAlarm = true
	case ls.quotaAlarm && float64(size) < quotaClearedAt*float64(quota):
		n.logger.Named("quota").Info("quota_cleared", "state_bytes", size, "quota_bytes", quota)
		n.recordEvents(ctx, fsm.RecordEvent{Event: fsm.EventQuotaCleared,
			Detail: fmt.Sprintf("state %d bytes of a quota of %d: submits taken again", size, quota)})
		ls.quotaAlarm = false
	}
	ls.quotaRefused.Store(false)
}
