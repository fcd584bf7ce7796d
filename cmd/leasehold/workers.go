package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// workerView is a worker as the CLI prints it. State and silence come from
// the leader's memory; a stale read on a follower says unknown.
type workerView struct {
	ID         string    `json:"id"`
	State      string    `json:"state"`
	LastHeard  string    `json:"last_heard,omitempty"`
	SilenceMS  *int64    `json:"silence_ms,omitempty"`
	LeaseCount uint32    `json:"lease_count"`
	Leases     []leaseID `json:"leases"`
	Capacity   uint32    `json:"capacity"`
	Version    string    `json:"version"`
	Registered string    `json:"registered_at"`
	Updated    string    `json:"updated_at"`
	silence    time.Duration
}

type leaseID struct {
	JobID string `json:"job_id"`
	Token uint64 `json:"token,string"`
}

func workerViewOf(w *pb.Worker) workerView {
	v := workerView{ID: w.GetId(), State: enumName(w.GetState().String(), "WORKER_STATE_"), LastHeard: timeOf(w.GetLastHeard()),
		LeaseCount: w.GetLeaseCount(), Leases: []leaseID{}, Capacity: w.GetCapacity(), Version: w.GetVersion(),
		Registered: timeOf(w.GetRegisteredAt()), Updated: timeOf(w.GetUpdatedAt())}
	if s := w.GetSilence(); s != nil {
		v.silence = s.AsDuration()
		ms := v.silence.Milliseconds()
		v.SilenceMS = &ms
	}
	for _, l := range w.GetLeases() {
		v.Leases = append(v.Leases, leaseID{JobID: l.GetJobId(), Token: l.GetToken()})
	}
	return v
}

// heard is the last-heard column: how long ago, or "-" when unknown.
func (v workerView) heard() string {
	if v.SilenceMS == nil {
		return "-"
	}
	return ago(v.silence)
}

// ago says how long ago, to a precision a person reads: "350ms ago",
// "3s ago", "4m05s ago", "2h10m ago", "3d04h ago".
func ago(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms ago", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds ago", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh ago", int(d.Hours())/24, int(d.Hours())%24)
}

// tabWriter aligns a table written to out (the app's Writer, which tests
// set, like output's JSON).
func tabWriter(out io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(out, 0, 4, 2, ' ', 0) }

// printWorkers prints workers as a table, or as JSON (an array, or the one
// worker's object when single).
func printWorkers(c *cli.Context, ws []*pb.Worker, single bool) error {
	views := make([]workerView, len(ws))
	for i, w := range ws {
		views[i] = workerViewOf(w)
	}
	var v any = views
	if single && len(views) == 1 {
		v = views[0]
	}
	return output(c, v, func() {
		writeWorkers(c.App.Writer, views, single)
	})
}

// writeWorkers writes the table; a single worker's leases follow it, one a
// line.
func writeWorkers(out io.Writer, views []workerView, single bool) {
	w := tabWriter(out)
	fmt.Fprintln(w, "ID\tSTATE\tLAST HEARD\tLEASES\tCAPACITY\tVERSION")
	for _, v := range views {
		version := v.Version
		if version == "" {
			version = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\n", v.ID, v.State, v.heard(), v.LeaseCount, v.Capacity, version)
	}
	w.Flush()
	if single && len(views) == 1 && len(views[0].Leases) > 0 {
		fmt.Fprintln(out)
		w = tabWriter(out)
		fmt.Fprintln(w, "JOB\tTOKEN")
		for _, l := range views[0].Leases {
			fmt.Fprintf(w, "%s\t%d\n", l.JobID, l.Token)
		}
		w.Flush()
	}
}

func workerListCommand() *cli.Command {
	return &cli.Command{
		Name: "list", Usage: "list registered workers: state, last heard, leases, capacity, version", Flags: []cli.Flag{staleFlag},
		Description: "State and last heard come from the leader's memory: active (heard within grace), unreachable\n" +
			"(silent past grace: no new lease), gone (silent past toleration: its leases expired; removed after\n" +
			"worker_gc_seconds if it holds nothing), unknown (a --stale read answered by a follower, or a worker\n" +
			"the leader has not heard since it took office). A deregistered worker is no longer listed.",
		Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			ws, err := cl.Workers(ctx, readOpts(c)...)
			if err != nil {
				return err
			}
			return printWorkers(c, ws, false)
		}),
	}
}

func workerGetCommand() *cli.Command {
	return &cli.Command{
		Name: "get", Usage: "show a worker and its leases", ArgsUsage: "ID", Flags: []cli.Flag{staleFlag},
		Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			id, err := oneArg(c, "ID")
			if err != nil {
				return err
			}
			w, err := cl.Worker(ctx, id, readOpts(c)...)
			if err != nil {
				return err
			}
			return printWorkers(c, []*pb.Worker{w}, true)
		}),
	}
}

// endedView is a lease a deregistration ended and what became of its job.
type endedView struct {
	JobID    string `json:"job_id"`
	Token    uint64 `json:"token,string"`
	JobState string `json:"job_state,omitempty"`
}

func workerDeregisterCommand() *cli.Command {
	return &cli.Command{
		Name: "deregister", Usage: "remove a worker; its live leases are settled as a lost worker's", ArgsUsage: "ID",
		Description: "Each live lease of the worker ends as its expiry would (the worker is lost): a loss is counted,\n" +
			"no attempt, and the job follows its on_worker_lost policy: a run-style job ends lost, an\n" +
			"evaluation is queued again (a job whose cancel or kill was pending ends cancelled). With\n" +
			"--release every job is queued again at once instead, no loss counted.\n" +
			"A worker still running its jobs learns at its next heartbeat that they are lost and stops\n" +
			"them, but a job queued again may start elsewhere before that: so a worker that is active and\n" +
			"holds leases is refused unless --force. Stop the worker first, or deregister it once it is\n" +
			"unreachable. Admins may deregister any worker; a worker credential only the workers it names.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Usage: "deregister even an active worker that holds leases"},
			&cli.BoolFlag{Name: "release", Usage: "release the leases (every job queued again, no loss counted) instead of settling them as lost"},
		},
		Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			id, err := oneArg(c, "ID")
			if err != nil {
				return err
			}
			if !c.Bool("force") {
				w, err := cl.Worker(ctx, id)
				if err != nil {
					return err
				}
				if w.GetState() == pb.WorkerState_WORKER_STATE_ACTIVE && w.GetLeaseCount() > 0 {
					return fmt.Errorf("worker %s is active and holds %d leases: its jobs may still run, and a job queued again "+
						"could start elsewhere before it stops; stop the worker first, or use --force", id, w.GetLeaseCount())
				}
			}
			deregister := cl.DeregisterLostWorker
			if c.Bool("release") {
				deregister = cl.DeregisterWorker
			}
			refs, err := deregister(ctx, id)
			if err != nil {
				return err
			}
			views := make([]endedView, len(refs))
			for i, r := range refs {
				views[i] = endedView{JobID: r.GetJobId(), Token: r.GetToken()}
				// What became of the job: lost, queued again, failed
				// (too many losses), or cancelled if a revoke was
				// pending (it may have moved on since).
				if j, err := cl.Job(ctx, r.GetJobId()); err == nil {
					views[i].JobState = enumName(j.GetState().String(), "JOB_STATE_")
				} else if !errors.Is(err, client.ErrNotFound) {
					return err
				}
			}
			return outputQuiet(c, id, map[string]any{"deregistered": id, "ended": views}, func() {
				writeDeregistered(c.App.Writer, id, views)
			})
		}),
	}
}

func writeDeregistered(out io.Writer, id string, views []endedView) {
	if len(views) == 0 {
		fmt.Fprintf(out, "deregistered %s; it held no lease\n", id)
		return
	}
	fmt.Fprintf(out, "deregistered %s; ended %d leases:\n", id, len(views))
	w := tabWriter(out)
	fmt.Fprintln(w, "JOB\tTOKEN\tJOB STATE")
	for _, v := range views {
		state := v.JobState
		if state == "" {
			state = "-"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\n", v.JobID, v.Token, state)
	}
	w.Flush()
}
