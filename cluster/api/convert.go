package api

import (
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

// Conversions between the wire's messages and the state machine's types.
// Only this package (and so only package cluster) translates between them.

// Defaults the API fills into a submitted spec; the state machine requires
// every policy field explicitly. There is no default queue: a job names the
// queue it waits in (the CLI and the Go client send "default" for callers
// that name none).
const (
	DefaultKind            = "default"
	DefaultMaxAttempts     = 3
	DefaultMaxWorkerLosses = 5
	// The retry policy of a job that names none: 1 s after the first
	// failure, doubling, at most 10 minutes, shortened by up to a fifth.
	DefaultRetryInitial    = time.Second
	DefaultRetryMax        = 10 * time.Minute
	DefaultRetryMultiplier = 2.0
	DefaultRetryJitter     = 0.2
	// MaxWait bounds a long poll.
	MaxWait = rules.MaxWait
)

// specFromProto fills defaults and returns the state machine's spec, or
// refuses what the spec cannot say: an on_worker_lost the API does not
// name (a bare cast would wrap it into a policy). The caller validates the
// rest (through the command), so nothing invalid reaches the log.
func specFromProto(s *pb.JobSpec) (fsm.JobSpec, error) {
	policy := s.GetOnWorkerLost()
	if _, ok := pb.LostPolicy_name[int32(policy)]; !ok {
		return fsm.JobSpec{}, rules.Invalid("spec.on_worker_lost", "unknown value %d", policy)
	}
	spec := fsm.JobSpec{
		ID: s.GetId(), Queue: s.GetQueue(), Kind: s.GetKind(), Payload: s.GetPayload(),
		Priority: s.GetPriority(), Submitter: s.GetSubmitter(), MaxAttempts: s.GetMaxAttempts(),
		OnWorkerLost: fsm.LostPolicy(policy), MaxWorkerLosses: s.GetMaxWorkerLosses(),
	}
	if s.Retry != nil {
		p, err := retryFromProto(s.GetRetry())
		if err != nil {
			return fsm.JobSpec{}, err
		}
		spec.Retry = p
	}
	if spec.Kind == "" {
		spec.Kind = DefaultKind
	}
	if spec.MaxAttempts == 0 {
		spec.MaxAttempts = DefaultMaxAttempts
	}
	if spec.MaxWorkerLosses == 0 {
		spec.MaxWorkerLosses = DefaultMaxWorkerLosses
	}
	if policy == pb.LostPolicy_LOST_POLICY_UNSPECIFIED {
		// A run has side effects a second run would repeat: fail it on
		// worker loss. Anything else is safe to run again.
		spec.OnWorkerLost = fsm.LostRequeue
		if spec.Kind == "run" {
			spec.OnWorkerLost = fsm.LostFail
		}
	}
	return spec, nil
}

// DefaultRetry is the policy of a job that names none.
func DefaultRetry() *fsm.RetryPolicy {
	p, _ := retryFromProto(&pb.RetryPolicy{Initial: durationpb.New(DefaultRetryInitial), Max: durationpb.New(DefaultRetryMax),
		Multiplier: DefaultRetryMultiplier, Jitter: DefaultRetryJitter})
	return p
}

// retryFromProto reads a retry policy: an initial delay of zero is none
// (retry at once); a zero max is the initial delay times 2^10 (at most
// the bound), a zero multiplier 2.
func retryFromProto(r *pb.RetryPolicy) (*fsm.RetryPolicy, error) {
	initial, max := r.GetInitial().AsDuration(), r.GetMax().AsDuration()
	if r.GetInitial() != nil && !r.GetInitial().IsValid() || initial < 0 || initial > rules.MaxRetryDelay {
		return nil, rules.Invalid("spec.retry.initial", "must be 0 to %s", rules.MaxRetryDelay)
	}
	if r.GetMax() != nil && !r.GetMax().IsValid() || max < 0 || max > rules.MaxRetryDelay {
		return nil, rules.Invalid("spec.retry.max", "must be 0 to %s", rules.MaxRetryDelay)
	}
	mult, jitter := r.GetMultiplier(), r.GetJitter()
	if math.IsNaN(mult) || mult != 0 && (mult < 1 || mult > rules.MaxRetryMultiplier/1000) {
		return nil, rules.Invalid("spec.retry.multiplier", "must be 1 to %d (0: 2)", rules.MaxRetryMultiplier/1000)
	}
	if math.IsNaN(jitter) || jitter < 0 || jitter > 1 {
		return nil, rules.Invalid("spec.retry.jitter", "must be 0 to 1")
	}
	if initial == 0 {
		return nil, nil
	}
	if max == 0 {
		max = min(initial<<10, rules.MaxRetryDelay)
	}
	if max < initial {
		return nil, rules.Invalid("spec.retry.max", "%s is less than the initial delay %s", max, initial)
	}
	if mult == 0 {
		mult = 2
	}
	return &fsm.RetryPolicy{Initial: int64(initial), Max: int64(max), Multiplier: uint32(math.Round(mult * 1000)),
		Jitter: uint32(math.Round(jitter * 100))}, nil
}

// retryToProto converts a retry policy in one allocation, the policy and
// its two durations together, where each was one: most jobs carry the
// API's default policy, and an answer is mostly jobs.
func retryToProto(p *fsm.RetryPolicy) *pb.RetryPolicy {
	if p == nil {
		return nil
	}
	block := new(struct {
		policy       pb.RetryPolicy
		initial, max durationpb.Duration
	})
	fillDuration(&block.initial, time.Duration(p.Initial))
	fillDuration(&block.max, time.Duration(p.Max))
	out := &block.policy
	out.Initial, out.Max = &block.initial, &block.max
	out.Multiplier, out.Jitter = float64(p.Multiplier)/1000, float64(p.Jitter)/100
	return out
}

// fillDuration sets out to d, as durationpb.New does.
func fillDuration(out *durationpb.Duration, d time.Duration) {
	nanos := d.Nanoseconds()
	secs := nanos / 1e9
	out.Seconds, out.Nanos = secs, int32(nanos-secs*1e9)
}

func ts(unixNano int64) *timestamppb.Timestamp {
	if unixNano == 0 {
		return nil
	}
	return timestamppb.New(time.Unix(0, unixNano))
}

// stamps hands out the timestamps of one answer's job from one
// allocation, where each was an allocation of its own: a granted job
// carries four or more.
type stamps []timestamppb.Timestamp

// at is ts from s's room (a new allocation once it is used up).
func (s *stamps) at(unixNano int64) *timestamppb.Timestamp {
	if unixNano == 0 {
		return nil
	}
	if len(*s) == cap(*s) {
		return ts(unixNano)
	}
	*s = (*s)[:len(*s)+1]
	t := &(*s)[len(*s)-1]
	sec, nsec := unixNano/1e9, unixNano%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	t.Seconds, t.Nanos = sec, int32(nsec)
	return t
}

// set counts the times that are not zero.
func set(times ...int64) int {
	n := 0
	for _, t := range times {
		if t != 0 {
			n++
		}
	}
	return n
}

func specToProto(s *fsm.JobSpec) *pb.JobSpec {
	out := new(pb.JobSpec)
	fillSpec(out, s)
	return out
}

func fillSpec(out *pb.JobSpec, s *fsm.JobSpec) {
	out.Id, out.Queue, out.Kind, out.Payload, out.Priority = s.ID, s.Queue, s.Kind, s.Payload, s.Priority
	out.Submitter, out.MaxAttempts, out.OnWorkerLost = s.Submitter, s.MaxAttempts, pb.LostPolicy(s.OnWorkerLost)
	out.MaxWorkerLosses, out.Retry = s.MaxWorkerLosses, retryToProto(s.Retry)
}

func leaseToProto(jobID string, l *fsm.Lease) *pb.Lease {
	out := new(pb.Lease)
	st := make(stamps, 0, set(l.GrantedAt, l.StartedAt, l.EndedAt))
	fillLease(out, jobID, l, &st)
	return out
}

func fillLease(out *pb.Lease, jobID string, l *fsm.Lease, st *stamps) {
	out.Token, out.JobId, out.WorkerId, out.RequestId = l.Token, jobID, l.WorkerID, l.RequestID
	out.State, out.Revoke = pb.LeaseState(l.State), revokeToProto(l.Revoke)
	out.GrantedAt, out.StartedAt, out.EndedAt = st.at(l.GrantedAt), st.at(l.StartedAt), st.at(l.EndedAt)
	out.ReportId, out.Outcome, out.Retryable = l.ReportID(), pb.Outcome(l.Outcome), l.Retryable
	out.Ref, out.Message, out.TimedOut = l.Ref(), l.Message(), l.Revoke == fsm.RevokeTimeout
}

// stateToProto converts a stored job state: the API numbers them as the
// state machine does, but dead, which the state machine numbers 8, the
// number the API gave the scheduled view.
func stateToProto(s fsm.JobState) pb.JobState {
	if s == fsm.JobDead {
		return pb.JobState_JOB_STATE_DEAD
	}
	return pb.JobState(s)
}

// stateFromProto is the inverse of stateToProto for the stored states
// (scheduled is a view, translated by the list itself).
func stateFromProto(s pb.JobState) fsm.JobState {
	if s == pb.JobState_JOB_STATE_DEAD {
		return fsm.JobDead
	}
	return fsm.JobState(s)
}

// revokeToProto shows a timeout as the kill it is to the worker (the
// lease's timed_out says why).
func revokeToProto(r fsm.Revoke) pb.Revoke {
	if r == fsm.RevokeTimeout {
		return pb.Revoke_REVOKE_KILL
	}
	return pb.Revoke(r)
}

// jobToProto converts a job; now is the answering node's clock (Node.Wall),
// against which a queued job reads as scheduled.
//
// The job, its spec, its leases and all their timestamps take four
// allocations: an acquire's or a report's answer is mostly jobs.
func jobToProto(j *fsm.Job, now time.Time) *pb.Job {
	n := set(j.SubmittedAt, j.UpdatedAt, j.FinishedAt(), j.NotBefore)
	for i, ls := 0, j.Leases(); i < len(ls); i++ {
		l := &ls[i]
		n += set(l.GrantedAt, l.StartedAt, l.EndedAt)
	}
	st := make(stamps, 0, n)
	block := new(struct {
		job  pb.Job
		spec pb.JobSpec
	})
	out := &block.job
	fillSpec(&block.spec, &j.JobSpec)
	out.Spec, out.Seq, out.State, out.Attempts = &block.spec, j.Seq, stateToProto(j.State), j.Executions()
	out.Losses, out.SubmittedAt, out.UpdatedAt = j.Losses, st.at(j.SubmittedAt), st.at(j.UpdatedAt)
	out.FinishedAt, out.Reason, out.CreateIndex, out.ModifyIndex = st.at(j.FinishedAt()), j.Reason(), j.CreateIndex, j.ModifyIndex
	out.NotBefore = st.at(j.NotBefore)
	if j.TimeoutMs > 0 {
		out.Spec.Timeout = durationpb.New(time.Duration(j.Timeout()))
	}
	// Scheduled is a view: queued, and not yet due by this node's clock.
	if j.State == fsm.JobQueued && j.NotBefore > now.UnixNano() {
		out.State = pb.JobState_JOB_STATE_SCHEDULED
	}
	if ls := j.Leases(); len(ls) > 0 {
		leases := make([]pb.Lease, len(ls))
		out.Leases = make([]*pb.Lease, len(ls))
		for i := range ls {
			fillLease(&leases[i], j.ID, &ls[i], &st)
			out.Leases[i] = &leases[i]
		}
	}
	return out
}

func workerToProto(w *fsm.Worker) *pb.Worker {
	return &pb.Worker{Id: w.ID, Capacity: w.Capacity, RegisteredAt: ts(w.RegisteredAt), UpdatedAt: ts(w.UpdatedAt), Version: w.Version}
}

// presenceToProto sets what the leader knows of a worker's presence.
func presenceToProto(out *pb.Worker, p cluster.Presence) {
	switch p.State {
	case cluster.ReachActive:
		out.State = pb.WorkerState_WORKER_STATE_ACTIVE
	case cluster.ReachUnreachable:
		out.State = pb.WorkerState_WORKER_STATE_UNREACHABLE
	case cluster.ReachGone:
		out.State = pb.WorkerState_WORKER_STATE_GONE
	default:
		out.State = pb.WorkerState_WORKER_STATE_UNKNOWN
	}
	if p.Heard {
		out.Silence = durationpb.New(p.Silence)
		out.LastHeard = timestamppb.New(p.LastHeard)
	}
}

// heartbeatToProto fills out with the answer to one beat, the same for a
// unary heartbeat and a stream's. It reuses statuses (a stream answers
// every beat with one message; nil for a fresh one) and returns them,
// grown to fit.
func heartbeatToProto(out *pb.HeartbeatResponse, res *cluster.HeartbeatResult, statuses []*pb.LeaseStatus) []*pb.LeaseStatus {
	for len(statuses) < len(res.Leases) {
		statuses = append(statuses, &pb.LeaseStatus{})
	}
	for _, ps := range out.Leases[min(len(res.Leases), len(out.Leases)):] {
		ps.JobId = "" // the last answer's: a beat's ids are not kept past it
	}
	out.Leases = statuses[:len(res.Leases)]
	for i, st := range res.Leases {
		ps := out.Leases[i]
		ps.JobId, ps.Token, ps.Verdict, ps.Revoke = st.JobID, st.Token, verdictToProto(st.Verdict), revokeToProto(st.Revoke)
	}
	out.NotesTerm = res.Term
	out.Unnamed = out.Unnamed[:0]
	for i := range res.Unnamed {
		out.Unnamed = append(out.Unnamed, leaseToProto(res.Unnamed[i].JobID, &res.Unnamed[i].Lease))
	}
	return statuses
}

func verdictToProto(v cluster.Verdict) pb.Verdict {
	switch v {
	case cluster.VerdictKeep:
		return pb.Verdict_VERDICT_KEEP
	case cluster.VerdictStop:
		return pb.Verdict_VERDICT_STOP
	}
	return pb.Verdict_VERDICT_LOST
}

func eventToProto(e *fsm.Event) *pb.Event {
	return &pb.Event{
		Seq: e.Seq, Index: e.Index, Time: ts(e.Time), Type: e.Type.String(), JobId: e.JobID,
		Token: e.Token, WorkerId: e.WorkerID, Ref: e.Ref, Detail: e.Detail, Actor: e.Actor, Source: e.Source,
	}
}

func grantsToProto(gs []fsm.Grant, now time.Time) []*pb.Grant {
	out := make([]*pb.Grant, 0, len(gs))
	for i := range gs {
		out = append(out, &pb.Grant{Job: jobToProto(&gs[i].Job, now), Lease: leaseToProto(gs[i].Job.ID, &gs[i].Lease)})
	}
	return out
}

func refsFromProto(refs []*pb.LeaseRef) []fsm.LeaseRef {
	out := make([]fsm.LeaseRef, len(refs))
	for i, r := range refs {
		out[i] = fsm.LeaseRef{JobID: r.GetJobId(), Token: r.GetToken()}
	}
	return out
}

// notesFromProto appends a heartbeat's progress notes to dst.
func notesFromProto(dst []cluster.ProgressNote, notes []*pb.ProgressNote) []cluster.ProgressNote {
	for _, n := range notes {
		dst = append(dst, cluster.ProgressNote{Token: n.GetToken(), Note: n.GetNote()})
	}
	return dst
}

func refsToProto(refs []fsm.LeaseRef) []*pb.LeaseRef {
	out := make([]*pb.LeaseRef, len(refs))
	for i, r := range refs {
		out[i] = &pb.LeaseRef{JobId: r.JobID, Token: r.Token}
	}
	return out
}

func timingsToProto(renew, grace, toleration time.Duration) *pb.Timings {
	return &pb.Timings{Renew: durationpb.New(renew), Grace: durationpb.New(grace), Toleration: durationpb.New(toleration)}
}

// waitOf bounds a requested long-poll wait, or refuses one that is not a
// duration (seconds and nanos out of range or of opposite signs).
func waitOf(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, rules.Invalid("wait", "%v", err)
	}
	return min(max(d.AsDuration(), 0), MaxWait), nil
}

// checkConsistency refuses a consistency the API does not name.
func checkConsistency(c pb.Consistency) error {
	if _, ok := pb.Consistency_name[int32(c)]; !ok {
		return rules.Invalid("consistency", "unknown value %d", c)
	}
	return nil
}
