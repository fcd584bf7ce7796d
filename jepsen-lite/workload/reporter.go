package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/client"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// ReporterID is the worker id the Reporter registers as.
const ReporterID = "m1"

// Reporter is a worker driven by hand, for the report paths the worker
// runtime never takes on purpose: it acquires a manual job, heartbeats
// once, then reports it and at once reports again with the same id (a
// duplicate: the first answer), sometimes with another id (a conflict);
// or releases it and then reports on the released token (stale). It keeps
// every report it sent and re-sends an old one each round, so repeats land
// on whichever leader is in office by then (retried across leader
// changes), and must all get the first answer.
type Reporter struct {
	c    *Caller
	wait time.Duration
	rng  *rand.Rand
	sent []*leaseholdv1.ReportRequest
}

// NewReporter polls for manual jobs for up to wait at a time.
func NewReporter(c *Caller, wait time.Duration, seed uint64) *Reporter {
	return &Reporter{c: c, wait: wait, rng: rand.New(rand.NewPCG(seed, 4))}
}

// Run works until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	for r.c.Register(ctx, ReporterID, 4) != nil {
		if !sleepCtx(ctx, r.wait) {
			return
		}
	}
	for ctx.Err() == nil {
		r.step(ctx)
		if n := len(r.sent); n > 0 {
			r.c.Report(ctx, r.sent[r.rng.IntN(n)])
		}
	}
}

func (r *Reporter) step(ctx context.Context) {
	req := &leaseholdv1.AcquireRequest{WorkerId: ReporterID, RequestId: newReportID(r.rng), Queues: []string{QueueManual},
		Kinds: []string{KindManual}, Max: 1, Start: true, Wait: durationpb.New(r.wait)}
	resp, err := r.c.Acquire(ctx, req)
	if errors.Is(err, client.ErrUnknownWorker) {
		// The leader removed it as idle (or an operator did): register
		// again, as the worker runtime does. It held nothing.
		r.c.Register(ctx, ReporterID, 4)
		return
	}
	if err != nil || len(resp.GetGrants()) == 0 {
		if err != nil {
			// The acquire may have granted a lease whose answer was
			// lost: heartbeats would keep it alive for ever.
			r.releaseUnnamed(ctx, nil)
			sleepCtx(ctx, r.wait/4)
		}
		return
	}
	l := resp.GetGrants()[0].GetLease()
	job, tok := l.GetJobId(), l.GetToken()
	r.releaseUnnamed(ctx, []*leaseholdv1.LeaseRef{{JobId: job, Token: tok}})
	report := func(outcome leaseholdv1.Outcome, retryable bool) *leaseholdv1.ReportRequest {
		return &leaseholdv1.ReportRequest{WorkerId: ReporterID, JobId: job, Token: tok, ReportId: newReportID(r.rng),
			Outcome: outcome, Retryable: retryable, Ref: fmt.Sprintf("ref-%s-%d", job, tok)}
	}
	switch x := r.rng.IntN(10); {
	case x < 6:
		first := report(leaseholdv1.Outcome_OUTCOME_SUCCEEDED, false)
		r.sendTwice(ctx, first)
		if r.rng.IntN(3) == 0 {
			r.c.Report(ctx, report(leaseholdv1.Outcome_OUTCOME_FAILED, false)) // another id: a conflict
		}
	case x < 8:
		r.sendTwice(ctx, report(leaseholdv1.Outcome_OUTCOME_FAILED, true))
	default:
		if _, err := r.c.Release(ctx, ReporterID, job, tok, "jepsen-lite release"); err == nil {
			r.c.Report(ctx, report(leaseholdv1.Outcome_OUTCOME_SUCCEEDED, false)) // stale
		}
	}
}

// releaseUnnamed heartbeats the leases the Reporter knows it holds and
// releases any other the answer says it holds (a grant whose answer was
// lost, a lease whose report's outcome is unknown), as the worker runtime
// does.
func (r *Reporter) releaseUnnamed(ctx context.Context, held []*leaseholdv1.LeaseRef) {
	resp, err := r.c.Heartbeat(ctx, ReporterID, held)
	if err != nil {
		return
	}
	for _, u := range resp.GetUnnamed() {
		r.c.Release(ctx, ReporterID, u.GetJobId(), u.GetToken(), "not known to the reporter")
	}
}

// sendTwice reports and repeats the same report at once.
func (r *Reporter) sendTwice(ctx context.Context, req *leaseholdv1.ReportRequest) {
	r.sent = append(r.sent, req)
	r.c.Report(ctx, req)
	r.c.Report(ctx, req)
}

func newReportID(rng *rand.Rand) string { return fmt.Sprintf("%016x", rng.Uint64()) }

// every calls fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn(ctx)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
