package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

var staleFlag = &cli.BoolFlag{Name: "stale", Usage: "read from the node asked, without a linearizable read"}

func readOpts(c *cli.Context) []client.ReadOption {
	if c.Bool("stale") {
		return []client.ReadOption{client.Stale()}
	}
	return nil
}

// payloadOf reads --payload: DATA, or @FILE, or @- for stdin.
func payloadOf(v string) ([]byte, error) {
	switch {
	case v == "@-":
		b, err := readAll(os.Stdin)
		return b, err
	case strings.HasPrefix(v, "@"):
		return os.ReadFile(v[1:])
	}
	return []byte(v), nil
}

func jobCommand() *cli.Command {
	return &cli.Command{
		Name:  "job",
		Usage: "submit, inspect and cancel jobs; retry and purge dead ones",
		Subcommands: []*cli.Command{
			{
				Name:  "submit",
				Usage: "submit a job (idempotent on --id)",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "queue", Aliases: []string{"q"}, Value: client.DefaultQueue,
						Usage: "the queue the job waits in (the API requires one)"},
					&cli.StringFlag{Name: "payload", Aliases: []string{"p"}, Usage: "DATA, @FILE or @- (stdin)"},
					&cli.StringFlag{Name: "kind", Aliases: []string{"k"}, Value: "default",
						Usage: "run: a lost worker fails the job; evaluation (or anything else): it is queued again"},
					&cli.StringFlag{Name: "id", Usage: "job id (default: generated)"},
					&cli.IntFlag{Name: "priority", Usage: "higher runs first"},
					&cli.StringFlag{Name: "submitter", EnvVars: []string{"LEASEHOLD_SUBMITTER"}, Usage: "who submits (recorded with each job; job cancel-submitter cancels by it)"},
					&cli.UintFlag{Name: "max-attempts", Usage: "runs of a job that fails retryably", DefaultText: "3"},
					&cli.DurationFlag{Name: "in", Usage: "run it no earlier than this long from now, by the leader's clock (e.g. 10m)"},
					&cli.TimestampFlag{Name: "at", Layout: time.RFC3339, Usage: "run it no earlier than this time (RFC 3339, e.g. 2027-01-02T15:04:05Z)"},
					&cli.DurationFlag{Name: "timeout", Usage: "kill each attempt still running this long after its grant (1s to 168h; 0: none); it counts as an attempt and the retry policy decides. The bound on the command itself goes before it: leasehold --timeout 30s job submit"},
				}, retryFlags()...),
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					payload, err := payloadOf(c.String("payload"))
					if err != nil {
						return err
					}
					var opts []client.SubmitOption
					switch {
					case c.IsSet("in") && c.IsSet("at"):
						return usageOf(c, "--in and --at: give one")
					case c.IsSet("in"):
						opts = append(opts, client.RunIn(c.Duration("in")))
					case c.IsSet("at"):
						opts = append(opts, client.RunAt(*c.Timestamp("at")))
					}
					if c.IsSet("timeout") {
						opts = append(opts, client.Timeout(c.Duration("timeout")))
					}
					if c.Int("priority") < -1<<31 || c.Int("priority") > 1<<31-1 {
						return usageOf(c, "--priority %d out of range", c.Int("priority"))
					}
					spec := &pb.JobSpec{
						Id: c.String("id"), Queue: c.String("queue"), Kind: c.String("kind"), Payload: payload,
						Priority: int32(c.Int("priority")), Submitter: c.String("submitter"), MaxAttempts: uint32(c.Uint("max-attempts")),
						Retry: retryOf(c),
					}
					job, _, err := cl.Submit(ctx, spec, opts...)
					if err != nil {
						return err
					}
					return printJobs(c, []*pb.Job{job}, true)
				}),
			},
			{
				Name: "get", Usage: "show a job (and the latest progress note of its live lease, kept by the leader only)", ArgsUsage: "ID", Flags: []cli.Flag{staleFlag},
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					id, err := oneArg(c, "ID")
					if err != nil {
						return err
					}
					job, err := cl.Job(ctx, id, readOpts(c)...)
					if err != nil {
						return err
					}
					return printJobs(c, []*pb.Job{job}, true)
				}),
			},
			{
				Name: "list", Usage: "list jobs",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "queue", Usage: "only jobs of this queue"}, &cli.StringFlag{Name: "kind", Usage: "only jobs of this kind"},
					&cli.StringFlag{Name: "submitter", Usage: "only jobs of this submitter"},
					&cli.StringFlag{Name: "worker", Usage: "only jobs whose newest lease is this worker's"}, &cli.StringFlag{Name: "state", Usage: "scheduled (to run later), queued (ready now), acquired, running, reported, cancelled, lost, failed, dead"},
					&cli.IntFlag{Name: "limit", Value: 100, Usage: "at most this many (0: all)"},
					&cli.Uint64Flag{Name: "after", Usage: "continue a list cut short by --limit: the value its note gives", DefaultText: "from the start"},
					staleFlag,
				},
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					req := &pb.ListJobsRequest{Queue: c.String("queue"), Kind: c.String("kind"), Submitter: c.String("submitter"), WorkerId: c.String("worker")}
					if s := c.String("state"); s != "" {
						v, ok := pb.JobState_value["JOB_STATE_"+strings.ToUpper(s)]
						if !ok {
							return usageOf(c, "--state %q: not a job state", s)
						}
						req.State = pb.JobState(v)
					}
					if c.Bool("stale") {
						req.Consistency = pb.Consistency_CONSISTENCY_STALE
					}
					limit := c.Int("limit")
					if limit < 0 {
						return usageOf(c, "--limit %d: 0 (all) or more", limit)
					}
					req.PageToken = c.Uint64("after")
					var jobs []*pb.Job
					for limit == 0 || len(jobs) < limit {
						if limit > 0 {
							// Never more than the limit: the next page starts
							// right after the last job shown.
							req.PageSize = uint32(min(limit-len(jobs), 1000))
						}
						res, err := cl.Jobs(ctx, req)
						if err != nil {
							return err
						}
						jobs = append(jobs, res.GetJobs()...)
						req.PageToken = res.GetNextPageToken()
						if req.PageToken == 0 {
							break
						}
					}
					if err := printJobs(c, jobs, false); err != nil {
						return err
					}
					if req.PageToken != 0 {
						// stderr: -o json's stdout stays one JSON array.
						fmt.Fprintf(c.App.ErrWriter, "(%d shown; more may follow: --limit 0 for all, or --after %d for the next page)\n",
							len(jobs), req.PageToken)
					}
					return nil
				}),
			},
			cancelCommand("cancel", false), cancelCommand("kill", true),
			{
				Name: "retry", Usage: "queue a dead job again with a fresh attempt budget (every voter at level 6)", ArgsUsage: "ID",
				Flags: []cli.Flag{&cli.StringFlag{Name: "reason", Usage: "recorded in the job.retried event"}},
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					id, err := oneArg(c, "ID")
					if err != nil {
						return err
					}
					job, err := cl.RetryJob(ctx, id, c.String("reason"))
					if err != nil {
						return err
					}
					return printJobs(c, []*pb.Job{job}, true)
				}),
			},
			purgeCommand(),
			{
				Name: "cancel-submitter", Usage: "cancel every queued job of one submitter", ArgsUsage: "SUBMITTER",
				Flags: []cli.Flag{&cli.StringFlag{Name: "reason", Usage: "why (recorded in the job and its event)"}},
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					sub, err := oneArg(c, "SUBMITTER")
					if err != nil {
						return err
					}
					n, err := cl.CancelSubmitter(ctx, sub, c.String("reason"))
					if err != nil {
						return err
					}
					return outputQuiet(c, strconv.Itoa(n), map[string]int{"cancelled": n}, func() { fmt.Printf("cancelled %d queued jobs of %s\n", n, sub) })
				}),
			},
		},
	}
}

// purgeCommand removes dead jobs in as many calls as it takes: the ids
// 1000 at a time, or by queue and age while the answer says more remain.
func purgeCommand() *cli.Command {
	return &cli.Command{
		Name: "purge", Usage: "remove dead jobs by --id, or by --queue and/or --older-than (every voter at level 6)",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "id", Usage: "a dead job to remove (repeat the flag for more); a job not dead is skipped"},
			&cli.StringFlag{Name: "queue", Usage: "the dead jobs of this queue"},
			&cli.DurationFlag{Name: "older-than", Usage: "the dead jobs dead for longer than this, by the leader's clock (0s: every one)", DefaultText: "not a filter"},
			&cli.StringFlag{Name: "reason", Usage: "recorded in the jobs.purged event"},
		},
		Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			ids := c.StringSlice("id")
			byFilter := c.IsSet("queue") || c.IsSet("older-than")
			switch {
			case len(ids) == 0 && !byFilter:
				return usageOf(c, "name --id, --queue or --older-than (--older-than 0s purges every dead job)")
			case len(ids) > 0 && byFilter:
				return usageOf(c, "--id, or --queue and --older-than: not both")
			}
			res := struct {
				Purged  []string `json:"purged"`
				Skipped []string `json:"skipped,omitempty"`
			}{Purged: []string{}}
			for len(ids) > 0 || byFilter {
				req := &pb.PurgeJobsRequest{Queue: c.String("queue"), Reason: c.String("reason")}
				if c.IsSet("older-than") {
					req.OlderThan = durationpb.New(c.Duration("older-than"))
				}
				if len(ids) > 0 {
					n := min(len(ids), purgeBatch)
					req.Ids, ids = ids[:n], ids[n:]
				}
				resp, err := cl.PurgeJobs(ctx, req)
				if err != nil {
					return err
				}
				res.Purged = append(res.Purged, resp.GetPurged()...)
				res.Skipped = append(res.Skipped, resp.GetSkipped()...)
				if byFilter && (!resp.GetMore() || len(resp.GetPurged()) == 0) {
					break
				}
			}
			return outputQuiet(c, strings.Join(res.Purged, "\n"), res, func() {
				fmt.Printf("purged %d dead jobs\n", len(res.Purged))
				if len(res.Skipped) > 0 {
					fmt.Printf("skipped (unknown, or not dead): %s\n", strings.Join(res.Skipped, " "))
				}
			})
		}),
	}
}

// purgeBatch is how many ids one PurgeJobs call may list.
const purgeBatch = 1000

func cancelCommand(name string, kill bool) *cli.Command {
	usage := "cancel a queued job, or tell the worker of a leased one to stop"
	if kill {
		usage = "cancel a queued job, or tell the worker of a leased one to stop at once"
	}
	return &cli.Command{
		Name: name, Usage: usage, ArgsUsage: "ID", Flags: []cli.Flag{&cli.StringFlag{Name: "reason", Usage: "why (recorded in the job and its event)"}},
		Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			id, err := oneArg(c, "ID")
			if err != nil {
				return err
			}
			job, _, err := cl.Cancel(ctx, id, kill, c.String("reason"))
			if err != nil {
				return err
			}
			return printJobs(c, []*pb.Job{job}, true)
		}),
	}
}

func leaseCommand() *cli.Command {
	return &cli.Command{
		Name:  "lease",
		Usage: "inspect leases and check fencing tokens",
		Subcommands: []*cli.Command{
			{
				Name: "list", Usage: "the live leases of a worker", ArgsUsage: "WORKER", Flags: []cli.Flag{staleFlag},
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					w, err := oneArg(c, "WORKER")
					if err != nil {
						return err
					}
					grants, err := cl.Leases(ctx, w, readOpts(c)...)
					if err != nil {
						return err
					}
					views := make([]leaseView, len(grants))
					for i, g := range grants {
						views[i] = leaseViewOf(g.GetLease())
					}
					return printLeases(c, views)
				}),
			},
			{
				Name: "get", Usage: "show a lease", ArgsUsage: "TOKEN", Flags: []cli.Flag{staleFlag},
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					tok, err := tokenArg(c)
					if err != nil {
						return err
					}
					l, err := cl.Lease(ctx, tok, readOpts(c)...)
					if err != nil {
						return err
					}
					return printLeases(c, []leaseView{leaseViewOf(l)})
				}),
			},
			{
				Name: "check", Usage: "is TOKEN the live lease of JOB? (linearizable; exit 3 when it is not)", ArgsUsage: "JOB TOKEN",
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					if c.NArg() != 2 {
						return usageOf(c, "expected two arguments: JOB TOKEN")
					}
					tok, err := parseToken(c, c.Args().Get(1))
					if err != nil {
						return err
					}
					res, err := cl.Fence(ctx, c.Args().Get(0), tok)
					if err != nil {
						return err
					}
					err = output(c, map[string]any{"current": res.GetCurrent(), "current_token": u64(res.GetCurrentToken()),
						"state": enumName(res.GetState().String(), "JOB_STATE_")}, func() {
						fmt.Printf("current=%t current_token=%s state=%s\n", res.GetCurrent(), tokenStr(res.GetCurrentToken()),
							enumName(res.GetState().String(), "JOB_STATE_"))
					})
					if err == nil && !res.GetCurrent() {
						return cli.Exit("", 3)
					}
					return err
				}),
			},
		},
	}
}

func printLeases(c *cli.Context, views []leaseView) error {
	return output(c, views, func() {
		w := newTable()
		fmt.Fprintln(w, "TOKEN\tJOB\tWORKER\tSTATE\tREVOKE\tOUTCOME\tREF\tGRANTED")
		for _, v := range views {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Token, v.JobID, v.Worker, v.State, dash(v.Revoke), dash(v.Outcome),
				dash(v.Ref), tableTime(v.GrantedAt))
		}
		w.Flush()
	})
}

func eventsCommand() *cli.Command {
	return &cli.Command{
		Name:  "events",
		Usage: "print the event log, from a sequence number on",
		Flags: []cli.Flag{
			&cli.Uint64Flag{Name: "after", Usage: "events after this seq"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new events"},
			&cli.StringFlag{Name: "type", Usage: "only events of this type (e.g. lease.stale_report, or audit for admin actions and refused attempts)"},
		},
		Action: func(c *cli.Context) error {
			cl, err := newClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			header := false
			print := func(evs []*pb.Event) error {
				// Each batch aligned on its own: --follow prints as
				// events come.
				w := newTable()
				defer w.Flush()
				for _, e := range evs {
					if t := c.String("type"); t != "" && e.GetType() != t {
						continue
					}
					v := eventViewOf(e)
					if flagString(c, "output") == "json" {
						b, _ := json.Marshal(v)
						fmt.Println(string(b)) // one object per line, so --follow streams
						continue
					}
					if !header {
						fmt.Fprintln(w, eventHeader)
						header = true
					}
					fmt.Fprintln(w, v.row())
				}
				return nil
			}
			if c.Bool("follow") {
				return ignoreCancel(cl.Watch(c.Context, c.Uint64("after"), print))
			}
			ctx, cancel := context.WithTimeout(c.Context, lookup(c, "timeout").Duration("timeout"))
			defer cancel()
			after := c.Uint64("after")
			for {
				res, err := cl.Events(ctx, after, 1000, 0)
				if err != nil {
					return err
				}
				if res.GetTruncated() {
					// stderr: -o json's stdout stays one object per line.
					fmt.Fprintf(c.App.ErrWriter, "(events after seq %d were compacted away: the oldest kept follow)\n", after)
				}
				print(res.GetEvents())
				if len(res.GetEvents()) == 0 {
					return nil
				}
				after = res.GetEvents()[len(res.GetEvents())-1].GetSeq()
			}
		},
	}
}

func oneArg(c *cli.Context, name string) (string, error) {
	if c.NArg() != 1 {
		return "", usageOf(c, "expected one argument: %s", name)
	}
	return c.Args().First(), nil
}

func tokenArg(c *cli.Context) (uint64, error) {
	s, err := oneArg(c, "TOKEN")
	if err != nil {
		return 0, err
	}
	return parseToken(c, s)
}

// parseToken reads a fencing token argument: a whole number from 1 up.
func parseToken(c *cli.Context, s string) (uint64, error) {
	tok, err := strconv.ParseUint(s, 10, 64)
	if err != nil || tok == 0 {
		return 0, usageOf(c, "TOKEN %q is not a token (a whole number from 1 up)", s)
	}
	return tok, nil
}

// ignoreCancel makes the command's own cancellation (Ctrl-C, which ends
// a watch or a worker) a clean exit. A node's refusal that merely says
// "context canceled" is not this command's and stays an error.
func ignoreCancel(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
