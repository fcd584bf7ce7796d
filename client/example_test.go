package client_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/client"
)

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
