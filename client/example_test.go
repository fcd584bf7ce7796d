package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/client"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// The examples below need a running cluster (`make dev` serves one at
// client.DefaultEndpoints()), so they are compiled, not run: an example
// with no Output comment is never executed by go test.

// Submit a job. Submit is idempotent on the id: the same spec again
// answers the existing job with created false, another spec under the same
// id fails with ErrConflict. The queue defaults to "default".
func ExampleClient_Submit() {
	cl, err := client.New(client.Config{Endpoints: client.DefaultEndpoints(), Token: os.Getenv("LEASEHOLD_TOKEN")})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	job, created, err := cl.Submit(ctx, &leaseholdv1.JobSpec{
		Id:          "report-2026-12",
		Kind:        "report",
		Payload:     []byte(`{"month":"2026-12"}`),
		MaxAttempts: 5,
	}, client.RunIn(time.Minute)) // not before a minute from now, by the leader's clock
	switch {
	case errors.Is(err, client.ErrConflict):
		log.Fatal("report-2026-12 exists with another spec")
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println(job.GetSpec().GetId(), job.GetState(), "created:", created)
	// Prints: report-2026-12 JOB_STATE_SCHEDULED created: true
}

// A worker that runs jobs of kind "report" from the queue "default" until
// SIGINT or SIGTERM, then drains: running jobs get DrainTimeout to finish.
func ExampleWorker_Run() {
	cl, err := client.New(client.Config{Endpoints: client.DefaultEndpoints(), Token: os.Getenv("LEASEHOLD_TOKEN")})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	w, err := client.NewWorker(client.WorkerOptions{
		Client: cl, ID: "reporter-1", Queues: []string{"default"}, Concurrency: 2,
		Handlers: map[string]client.Handler{"report": func(ctx context.Context, j *client.Job) (client.Result, error) {
			// ctx ends when the lease does (revoked, lost, the worker
			// stopping); context.Cause(ctx) says which. Hand j.Token to
			// every store the job writes to, so it can refuse a stale
			// writer (see ExampleClient_Fence).
			j.Progress("rendering")
			ref, err := renderReport(ctx, j.Payload, j.Token)
			if err != nil {
				return client.Result{}, err // a failure; the job's retry policy decides
			}
			return client.Result{Ref: ref}, nil
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil { // nil after a graceful stop
		log.Fatal(err)
	}
}

func renderReport(context.Context, []byte, uint64) (string, error) {
	return "s3://reports/2026-12", nil
}

// A store the jobs write to checks the writer's fencing token before it
// commits: a token that is not the job's live lease (it expired, was
// revoked, or the job went to another worker with a larger token) is
// refused. `leasehold lease check JOB TOKEN` is the same check from a
// shell (exit 3 when not current).
func ExampleClient_Fence() {
	cl, err := client.New(client.Config{Endpoints: client.DefaultEndpoints(), Token: os.Getenv("LEASEHOLD_TOKEN")})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	jobID, token := "report-2026-12", uint64(7) // what the writer sent with its write
	fence, err := cl.Fence(ctx, jobID, token)
	if err != nil {
		log.Fatal(err) // ErrNotFound: no such job
	}
	if !fence.GetCurrent() {
		fmt.Printf("refused: token %d is not %s's live lease (job %s, live token %d)\n",
			token, jobID, fence.GetState(), fence.GetCurrentToken())
		return
	}
	fmt.Println("accepted")
}

// Watch the replicated event log from its start, in order, each event
// once: Watch reconnects and follows the leader by itself. Return an error
// from the callback to stop.
func ExampleClient_Watch() {
	cl, err := client.New(client.Config{Endpoints: client.DefaultEndpoints(), Token: os.Getenv("LEASEHOLD_TOKEN")})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	errSeenEnough := errors.New("seen enough")
	seen := 0
	err = cl.Watch(ctx, 0, func(events []*leaseholdv1.Event) error {
		for _, e := range events {
			fmt.Println(e.GetSeq(), e.GetTime().AsTime().Format(time.RFC3339), e.GetType(), e.GetJobId(), e.GetToken())
			if seen++; seen == 20 {
				return errSeenEnough
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errSeenEnough), errors.Is(err, context.DeadlineExceeded):
	case errors.Is(err, client.ErrTruncated):
		// Events were compacted away before they were read: read the
		// current state (Jobs, Workers), then watch again from
		// Events(...).GetLastSeq().
		log.Print("resync needed")
	default:
		log.Fatal(err)
	}
}

// Middleware for every job: a log line per job, counters, and a recover
// that logs a panic before the runtime reports it as a failure. The first
// middleware listed is the outermost.
func ExampleMiddleware() {
	logged := func(next client.Handler) client.Handler {
		return func(ctx context.Context, j *client.Job) (client.Result, error) {
			start := time.Now()
			res, err := next(ctx, j)
			log.Printf("job %s token %d attempt %d: %v after %s", j.ID, j.Token, j.Attempts+1, err, time.Since(start))
			return res, err
		}
	}
	var ran, failed atomic.Int64
	metered := func(next client.Handler) client.Handler {
		return func(ctx context.Context, j *client.Job) (client.Result, error) {
			ran.Add(1)
			res, err := next(ctx, j)
			if err != nil {
				failed.Add(1)
			}
			return res, err
		}
	}
	recovered := func(next client.Handler) client.Handler {
		return func(ctx context.Context, j *client.Job) (res client.Result, err error) {
			defer func() {
				if r := recover(); r != nil {
					log.Printf("job %s panicked: %v", j.ID, r)
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			return next(ctx, j)
		}
	}
	cl, err := client.New(client.Config{Endpoints: []string{"127.0.0.1:7701"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	w, err := client.NewWorker(client.WorkerOptions{
		Client: cl, ID: "importer-1",
		Middleware: []client.Middleware{logged, metered, recovered},
		Handlers: map[string]client.Handler{"import": func(ctx context.Context, j *client.Job) (client.Result, error) {
			for i := 1; i <= 3; i++ {
				j.Progress(fmt.Sprintf("batch %d of 3", i)) // shown by `leasehold job get`
				if err := importBatch(ctx, j.Payload, i, j.Token); err != nil {
					return client.Result{}, err
				}
			}
			return client.Result{Ref: "imported"}, nil
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = w // w.Run(ctx) runs jobs until ctx ends
}

func importBatch(context.Context, []byte, int, uint64) error { return nil }
