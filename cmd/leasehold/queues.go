package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

func queueCommand() *cli.Command {
	return &cli.Command{
		Name:  "queue",
		Usage: "watch and steer queues (admin)",
		Subcommands: []*cli.Command{
			{
				Name: "list", Usage: "every queue that holds a job or has settings: depth, oldest ready job, grant rate",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "after", Usage: "list the queues after this name (the next page)"},
					&cli.UintFlag{Name: "limit", Value: 1000, Usage: "queues listed, at most 1000"},
					staleFlag, // grant rates are the leader's memory: a follower shows 0
				},
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					if c.NArg() != 0 {
						return usageOf(c, "unexpected argument %q", c.Args().First())
					}
					if n := c.Uint("limit"); n == 0 || n > 1000 {
						return usageOf(c, "--limit %d: 1 to 1000", n)
					}
					queues, next, err := cl.ListQueues(ctx, c.String("after"), uint32(c.Uint("limit")), readOpts(c)...)
					if err != nil {
						return err
					}
					views := make([]queueView, len(queues))
					for i, q := range queues {
						views[i] = queueViewOf(q)
					}
					return output(c, queueList{Queues: views, Next: next}, func() {
						printQueues(c.App.Writer, views, true)
						if next != "" {
							fmt.Fprintf(c.App.ErrWriter, "(%d shown; more follow: --after %s for the next page)\n", len(views), next)
						}
					})
				}),
			},
			{
				Name: "pause", Usage: "grant no more jobs from a queue until it is resumed (leases already granted run on)", ArgsUsage: "QUEUE",
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					q, err := oneArg(c, "QUEUE")
					if err != nil {
						return err
					}
					s, err := cl.PauseQueue(ctx, q)
					return printQueueSettings(c, s, err)
				}),
			},
			{
				Name: "resume", Usage: "grant jobs from a paused queue again", ArgsUsage: "QUEUE",
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					q, err := oneArg(c, "QUEUE")
					if err != nil {
						return err
					}
					s, err := cl.ResumeQueue(ctx, q)
					return printQueueSettings(c, s, err)
				}),
			},
			{
				Name: "limit", Usage: "hold grants from a queue while it has N live leases (0: no limit)", ArgsUsage: "QUEUE --max-running N",
				Flags: []cli.Flag{
					&cli.UintFlag{Name: "max-running", Required: true, Usage: "the most live leases the queue may have (0 removes the limit; at most 1000000)"},
				},
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					q, err := oneArg(c, "QUEUE")
					if err != nil {
						return err
					}
					n := c.Uint("max-running")
					if n > 1_000_000 {
						return usageOf(c, "--max-running %d: at most 1000000", n)
					}
					s, err := cl.SetQueueLimit(ctx, q, uint32(n))
					return printQueueSettings(c, s, err)
				}),
			},
		},
	}
}

// queueView is a queue as the CLI prints it.
type queueView struct {
	Name      string            `json:"name"`
	Ready     uint64            `json:"ready"`
	Scheduled uint64            `json:"scheduled"`
	Running   uint64            `json:"running"`
	Dead      uint64            `json:"dead"`
	Jobs      map[string]uint64 `json:"jobs"` // every kept job by state
	// OldestReadySince: when the oldest ready job became ready; its age
	// in seconds on the answering node's clock.
	OldestReadySince  string  `json:"oldest_ready_since,omitempty"`
	OldestReadyAgeSec float64 `json:"oldest_ready_age_seconds,omitempty"`
	Paused            bool    `json:"paused"`
	MaxRunning        uint32  `json:"max_running"` // 0: no limit
	GrantRate         float64 `json:"grant_rate"`  // grants per second over the last minute (the leader's memory)
	age               time.Duration
}

type queueList struct {
	Queues []queueView `json:"queues"`
	Next   string      `json:"next_page_token,omitempty"` // more queues follow: list again with --after it
}

func queueViewOf(q *pb.Queue) queueView {
	v := queueView{Name: q.GetName(), Ready: q.GetReady(), Scheduled: q.GetScheduled(), Running: q.GetRunning(), Dead: q.GetDead(),
		Jobs: map[string]uint64{}, OldestReadySince: timeOf(q.GetOldestReadySince()), Paused: q.GetPaused(),
		MaxRunning: q.GetMaxRunning(), GrantRate: q.GetGrantRate()}
	if a := q.GetOldestReadyAge(); a != nil {
		v.age = a.AsDuration()
		v.OldestReadyAgeSec = v.age.Seconds()
	}
	for _, jc := range q.GetJobs() {
		v.Jobs[enumName(jc.GetState().String(), "JOB_STATE_")] = jc.GetCount()
	}
	return v
}

// printQueues writes the queue table; full adds the oldest ready job's age
// and the grant rate (cluster status has neither).
func printQueues(out io.Writer, views []queueView, full bool) {
	w := tabWriter(out)
	if full {
		fmt.Fprintln(w, "QUEUE\tREADY\tSCHEDULED\tRUNNING\tDEAD\tOLDEST READY\tGRANTS/S\tPAUSED\tMAX RUNNING")
	} else {
		fmt.Fprintln(w, "QUEUE\tREADY\tSCHEDULED\tRUNNING\tDEAD\tPAUSED\tMAX RUNNING")
	}
	for _, v := range views {
		limit := "-"
		if v.MaxRunning != 0 {
			limit = strconv.FormatUint(uint64(v.MaxRunning), 10)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t", v.Name, v.Ready, v.Scheduled, v.Running, v.Dead)
		if full {
			oldest := "-"
			if v.OldestReadySince != "" {
				oldest = ago(v.age)
			}
			fmt.Fprintf(w, "%s\t%.2f\t", oldest, v.GrantRate)
		}
		fmt.Fprintf(w, "%t\t%s\n", v.Paused, limit)
	}
	w.Flush()
}

func printQueueSettings(c *cli.Context, s *pb.QueueSettings, err error) error {
	if err != nil {
		return err
	}
	v := map[string]any{"name": s.GetName(), "paused": s.GetPaused(), "max_running": s.GetMaxRunning()}
	return outputQuiet(c, s.GetName(), v, func() {
		limit := "no limit"
		if s.GetMaxRunning() != 0 {
			limit = fmt.Sprintf("max running %d", s.GetMaxRunning())
		}
		state := "running"
		if s.GetPaused() {
			state = "paused"
		}
		fmt.Fprintf(c.App.Writer, "queue %s: %s, %s\n", s.GetName(), state, limit)
	})
}
