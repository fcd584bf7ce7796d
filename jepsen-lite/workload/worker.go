package workload

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/jepsen-lite/history"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// WorkerConfig configures one worker process.
type WorkerConfig struct {
	// ID is the worker's id in the cluster (kept across restarts, so it
	// re-attaches); Process its name in the history (one per incarnation).
	ID, Process string
	Endpoints   []string
	// SourceIP is the address it dials the cluster from.
	SourceIP string
	// TLS, when set, makes the worker speak HTTPS to the cluster; Token is
	// its bearer token ("" for none).
	TLS   *tls.Config
	Token string
	// SinkURL is where the runner serves the sinks.
	SinkURL string
	// HistoryPath receives the process's history (appended).
	HistoryPath  string
	Concurrency  int
	PollWait     time.Duration
	CallTimeout  time.Duration
	DrainTimeout time.Duration
	Logger       hclog.Logger
}

// workerProc is one worker process: the runtime, its history and sinks.
type workerProc struct {
	cfg   WorkerConfig
	rec   *history.Recorder
	sinks *SinkClient
	log   hclog.Logger

	lastAck    atomic.Int64 // CLOCK_MONOTONIC ns of the last acknowledged send
	selfStopAt atomic.Int64 // CLOCK_MONOTONIC ns of the last self-stop
	renewNs    atomic.Int64
	tolNs      atomic.Int64
}

// RunWorker runs a worker until ctx ends, then shuts it down gracefully,
// recording everything in cfg.HistoryPath.
func RunWorker(ctx context.Context, cfg WorkerConfig) error {
	f, err := os.OpenFile(cfg.HistoryPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.Process, Output: os.Stderr, Level: hclog.Info})
	}
	w := &workerProc{cfg: cfg, rec: history.NewRecorder(f), sinks: NewSinkClient(cfg.SinkURL), log: cfg.Logger}
	defer w.sinks.CloseIdle()
	c, err := client.New(client.Config{Endpoints: cfg.Endpoints, HTTPClient: NewHTTPClient(cfg.SourceIP, cfg.TLS),
		TLS: cfg.TLS, Token: cfg.Token, CallTimeout: cfg.CallTimeout, RetryBase: 20 * time.Millisecond, RetryMax: 500 * time.Millisecond})
	if err != nil {
		return err
	}
	defer c.Close()
	handlers := map[string]client.Handler{KindShort: w.handle, KindLong: w.handle, KindRun: w.handle}
	rt, err := client.NewWorker(client.WorkerOptions{
		Client: c, ID: cfg.ID, Queues: []string{QueueMain}, Concurrency: cfg.Concurrency, Handlers: handlers,
		PollWait: cfg.PollWait, DrainTimeout: cfg.DrainTimeout, Logger: cfg.Logger,
		// A restarted worker runs its jobs again under the leases it still
		// holds: one lease, two executions, which the checkers allow.
		Reattach: func(context.Context, *client.Job) (client.Handler, bool) { return w.handle, true },
		Observer: client.Observer{Call: w.observeCall, Acknowledged: w.acknowledged, SelfStopped: w.selfStopped},
	})
	if err != nil {
		return err
	}
	err = rt.Run(ctx)
	return errors.Join(err, w.rec.Err())
}

func (w *workerProc) observeCall(method string, req proto.Message) func(proto.Message, error) {
	op, in, ok := OpOf(method, req)
	if !ok {
		return nil
	}
	id := w.rec.Invoke(w.cfg.Process, op, in)
	return func(resp proto.Message, err error) {
		w.noteTimings(resp)
		w.rec.CompleteErr(id, err, OutputOf(resp))
	}
}

// noteTimings keeps the cluster's timings as the runtime learns them.
func (w *workerProc) noteTimings(resp proto.Message) {
	var t *leaseholdv1.Timings
	switch r := resp.(type) {
	case *leaseholdv1.RegisterWorkerResponse:
		t = r.GetTimings()
	case *leaseholdv1.HeartbeatResponse:
		t = r.GetTimings()
	}
	if t != nil {
		w.renewNs.Store(int64(t.GetRenew().AsDuration()))
		w.tolNs.Store(int64(t.GetToleration().AsDuration()))
	}
}

func (w *workerProc) acknowledged(sent time.Time) {
	if m := bootToMonotonic(sent); m > w.lastAck.Load() {
		w.lastAck.Store(m)
	}
}

func (w *workerProc) selfStopped(time.Time) { w.selfStopAt.Store(history.Now()) }

// bootToMonotonic converts a reading of the runtime's clock
// (CLOCK_BOOTTIME on Linux) to CLOCK_MONOTONIC, the history's clock. On a
// machine that does not suspend the two differ by a constant.
func bootToMonotonic(t time.Time) int64 {
	off, ok := bootAhead()
	if !ok {
		return 0
	}
	return t.UnixNano() - off
}

// sinkTimeout bounds one sink write; it does not follow the job's context:
// a write under way when the job is told to stop finishes, as real writes
// do, and the execution has stopped only once it returns.
const sinkTimeout = 5 * time.Second

// handle runs one job: it writes to both sinks every WriteEvery until Run
// has passed or its context ends, recording the execution around it.
func (w *workerProc) handle(ctx context.Context, job *client.Job) (client.Result, error) {
	exec := history.Exec{JobID: job.ID, Token: job.Token, WorkerID: w.cfg.ID}
	start := history.Now()
	w.rec.Append(history.Entry{Kind: history.KindExecStart, Ns: start, Process: w.cfg.Process, Exec: &exec})
	p, perr := DecodePayload(job.Payload)
	if perr != nil {
		p = Payload{RunMs: 0, WriteEveryMs: 1}
	}
	p.writeFor(ctx, func(n int) { w.write(ctx, job, n) })
	cause := w.causeOf(ctx, start)
	stop := exec
	stop.Cause, stop.LastAckSendNs = cause, w.lastAck.Load()
	stop.RenewNs, stop.TolerationNs = w.renewNs.Load(), w.tolNs.Load()
	w.rec.Append(history.Entry{Kind: history.KindExecStop, Process: w.cfg.Process, Exec: &stop})
	switch {
	case cause != history.CauseCompleted:
		return client.Result{}, ctx.Err()
	case perr != nil:
		return client.Result{}, perr
	case p.Fail && p.SnoozeMs > 0:
		return client.Result{Ref: ref(job)}, client.Snooze(p.snooze())
	case p.Fail:
		return client.Result{Ref: ref(job)}, client.Retryable(errors.New("scripted retryable failure"))
	}
	return client.Result{Ref: ref(job)}, nil
}

func ref(job *client.Job) string { return fmt.Sprintf("ref-%s-%d", job.ID, job.Token) }

// write writes to both sinks. A write in flight is abandoned when the
// handler must stop, as a real job's would be: a self-stop is on time only
// if the job's I/O ends with it.
func (w *workerProc) write(ctx context.Context, job *client.Job, n int) {
	writeSinks(ctx, w.sinks, w.log, job.ID, job.Token, w.cfg.ID, n)
}

// causeOf says why a handler stopped.
func (w *workerProc) causeOf(ctx context.Context, start int64) history.StopCause {
	if ctx.Err() == nil {
		return history.CauseCompleted
	}
	cause := context.Cause(ctx)
	var rev *client.RevokedError
	switch {
	case errors.As(cause, &rev):
		return history.CauseRevoked
	case errors.Is(cause, client.ErrShutdown):
		return history.CauseShutdown
	case errors.Is(cause, client.ErrLeaseLost) && w.selfStopAt.Load() >= start:
		return history.CauseSelfStop
	}
	return history.CauseLost
}
