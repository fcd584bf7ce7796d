package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// retryFlags are a job's retry policy flags (job submit, schedule create).
func retryFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "retry-initial", Usage: "wait after the first retryable failure (0: retry at once)", DefaultText: "1s"},
		&cli.DurationFlag{Name: "retry-max", Usage: "longest wait between retries", DefaultText: "10m with the default policy, else 1024 x initial"},
		&cli.Float64Flag{Name: "retry-multiplier", Usage: "each wait is the last one times this, 1 to 10", DefaultText: "2"},
		&cli.Float64Flag{Name: "retry-jitter", Usage: "shorten each wait by up to this fraction, 0 to 1", DefaultText: "0.2 with the default policy, else 0"},
	}
}

// retryOf is the policy retryFlags name, or nil (the server's default).
func retryOf(c *cli.Context) *pb.RetryPolicy {
	if !c.IsSet("retry-initial") && !c.IsSet("retry-max") && !c.IsSet("retry-multiplier") && !c.IsSet("retry-jitter") {
		return nil
	}
	initial := c.Duration("retry-initial")
	if !c.IsSet("retry-initial") {
		initial = time.Second
	}
	return &pb.RetryPolicy{Initial: durationpb.New(initial), Max: durationpb.New(c.Duration("retry-max")),
		Multiplier: c.Float64("retry-multiplier"), Jitter: c.Float64("retry-jitter")}
}

func scheduleCommand() *cli.Command {
	nameAction := func(do func(ctx context.Context, c *cli.Context, cl *client.Client, name string) (*pb.Schedule, error)) cli.ActionFunc {
		return withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			name, err := oneArg(c, "NAME")
			if err != nil {
				return err
			}
			sc, err := do(ctx, c, cl, name)
			if err != nil {
				return err
			}
			return printSchedules(c, []*pb.Schedule{sc}, true)
		})
	}
	return &cli.Command{
		Name:  "schedule",
		Usage: "replicated schedules (cron): the leader submits a job at each slot, at most once per slot",
		Description: `At each slot of its cron expression the leader submits the schedule's job with
the id NAME@SLOT (the slot in RFC 3339, UTC): a slot fires at most once, across
failovers, restarts and restores. A schedule fires only slots after it was
created, replaced or resumed. Slots that came due while no leader ran the
schedules and are more than a minute late (the server's schedule grace) are
missed: --missed skip (the default) fires none of them, run-latest fires the
latest once. Either way no storm of missed slots. Needs a cluster at level 6.`,
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "create a schedule (idempotent on NAME; --replace changes an existing one)",
				ArgsUsage: "NAME",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "cron", Required: true,
						Usage: "minute hour day-of-month month day-of-week (e.g. '0 2 * * *'), with an optional leading seconds field ('*/10 * * * * *'), or @hourly, @daily, @weekly, @monthly, @every 90s"},
					&cli.StringFlag{Name: "tz", Usage: "IANA time zone the expression is read in (e.g. Europe/Paris)", DefaultText: "UTC"},
					&cli.StringFlag{Name: "missed", Value: "skip", Usage: "slots missed while no leader ran the schedules: skip, or run-latest (fire the latest once)"},
					&cli.BoolFlag{Name: "paused", Usage: "create it paused"},
					&cli.BoolFlag{Name: "replace", Usage: "change the schedule if it exists with another definition (it keeps its counts; slots before now are settled)"},
					&cli.StringFlag{Name: "queue", Aliases: []string{"q"}, Value: client.DefaultQueue, Usage: "the queue each job waits in"},
					&cli.StringFlag{Name: "kind", Aliases: []string{"k"}, Value: "default",
						Usage: "run: a lost worker fails the job; evaluation (or anything else): it is queued again"},
					&cli.StringFlag{Name: "payload", Aliases: []string{"p"}, Usage: "DATA, @FILE or @- (stdin)"},
					&cli.IntFlag{Name: "priority", Usage: "higher runs first"},
					&cli.StringFlag{Name: "submitter", EnvVars: []string{"LEASEHOLD_SUBMITTER"}, Usage: "who submits (recorded with each job; job cancel-submitter cancels by it)"},
					&cli.UintFlag{Name: "max-attempts", Usage: "runs of a job that fails retryably", DefaultText: "3"},
				}, retryFlags()...),
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					name, err := oneArg(c, "NAME")
					if err != nil {
						return err
					}
					payload, err := payloadOf(c.String("payload"))
					if err != nil {
						return err
					}
					var missed pb.MissedSlots
					switch c.String("missed") {
					case "skip":
						missed = pb.MissedSlots_MISSED_SLOTS_SKIP
					case "run-latest", "run_latest":
						missed = pb.MissedSlots_MISSED_SLOTS_RUN_LATEST
					default:
						return usageOf(c, "--missed %q: skip or run-latest", c.String("missed"))
					}
					if c.Int("priority") < -1<<31 || c.Int("priority") > 1<<31-1 {
						return usageOf(c, "--priority %d out of range", c.Int("priority"))
					}
					req := &pb.CreateScheduleRequest{Name: name, Cron: c.String("cron"), TimeZone: c.String("tz"), Missed: missed,
						Paused: c.Bool("paused"), Replace: c.Bool("replace"),
						Template: &pb.JobSpec{Queue: c.String("queue"), Kind: c.String("kind"), Payload: payload,
							Priority: int32(c.Int("priority")), Submitter: c.String("submitter"), MaxAttempts: uint32(c.Uint("max-attempts")),
							Retry: retryOf(c)}}
					sc, _, err := cl.CreateSchedule(ctx, req)
					if err != nil {
						return err
					}
					return printSchedules(c, []*pb.Schedule{sc}, true)
				}),
			},
			{
				Name: "list", Usage: "list schedules, with their next slot (without payloads: schedule get shows one)", Flags: []cli.Flag{staleFlag},
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					scs, err := cl.Schedules(ctx, readOpts(c)...)
					if err != nil {
						return err
					}
					return printSchedules(c, scs, false)
				}),
			},
			{
				Name: "get", Usage: "show a schedule, with its next slots", ArgsUsage: "NAME", Flags: []cli.Flag{staleFlag},
				Action: nameAction(func(ctx context.Context, c *cli.Context, cl *client.Client, name string) (*pb.Schedule, error) {
					return cl.Schedule(ctx, name, readOpts(c)...)
				}),
			},
			{
				Name: "pause", Usage: "pause a schedule (the slots that fall while it is paused never fire)", ArgsUsage: "NAME",
				Action: nameAction(func(ctx context.Context, _ *cli.Context, cl *client.Client, name string) (*pb.Schedule, error) {
					return cl.PauseSchedule(ctx, name)
				}),
			},
			{
				Name: "resume", Usage: "resume a paused schedule from its next slot", ArgsUsage: "NAME",
				Action: nameAction(func(ctx context.Context, _ *cli.Context, cl *client.Client, name string) (*pb.Schedule, error) {
					return cl.ResumeSchedule(ctx, name)
				}),
			},
			{
				Name: "delete", Usage: "delete a schedule (the jobs it submitted stay)", ArgsUsage: "NAME",
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					name, err := oneArg(c, "NAME")
					if err != nil {
						return err
					}
					if err := cl.DeleteSchedule(ctx, name); err != nil {
						return err
					}
					return outputQuiet(c, name, map[string]string{"deleted": name}, func() { fmt.Printf("deleted schedule %s\n", name) })
				}),
			},
		},
	}
}

// scheduleView is a schedule as the CLI prints it.
type scheduleView struct {
	Name          string     `json:"name"`
	Cron          string     `json:"cron"`
	TimeZone      string     `json:"time_zone"`
	Missed        string     `json:"missed"`
	Paused        bool       `json:"paused"`
	Queue         string     `json:"queue"`
	Kind          string     `json:"kind"`
	Priority      int32      `json:"priority"`
	Submitter     string     `json:"submitter,omitempty"`
	Payload       *string    `json:"payload,omitempty"` // UTF-8 text
	PayloadBase64 string     `json:"payload_base64,omitempty"`
	Retry         *retryView `json:"retry,omitempty"`
	// LastSlot: every slot up to it is settled (fired or skipped).
	LastSlot  string   `json:"last_slot"`
	Fired     uint64   `json:"fired"`
	Skipped   uint64   `json:"skipped"`
	LastJob   string   `json:"last_job,omitempty"`
	NextSlots []string `json:"next_slots"`
	CreatedAt string   `json:"created_at"`
	UpdatedAt string   `json:"updated_at"`
}

func scheduleViewOf(sc *pb.Schedule) scheduleView {
	t := sc.GetTemplate()
	v := scheduleView{Name: sc.GetName(), Cron: sc.GetCron(), TimeZone: sc.GetTimeZone(),
		Missed: strings.ReplaceAll(enumName(sc.GetMissed().String(), "MISSED_SLOTS_"), "_", "-"), Paused: sc.GetPaused(),
		Queue: t.GetQueue(), Kind: t.GetKind(), Priority: t.GetPriority(), Submitter: t.GetSubmitter(),
		LastSlot: timeOf(sc.GetLastSlot()), Fired: sc.GetFired(), Skipped: sc.GetSkipped(), LastJob: sc.GetLastJobId(),
		NextSlots: []string{}, CreatedAt: timeOf(sc.GetCreatedAt()), UpdatedAt: timeOf(sc.GetUpdatedAt())}
	v.Payload, v.PayloadBase64 = payloadView(t.GetPayload())
	if v.TimeZone == "" {
		v.TimeZone = "UTC"
	}
	if r := t.GetRetry(); r != nil {
		v.Retry = &retryView{Initial: r.GetInitial().AsDuration().String(), Max: r.GetMax().AsDuration().String(),
			Multiplier: r.GetMultiplier(), Jitter: r.GetJitter()}
	}
	for _, n := range sc.GetNextSlots() {
		v.NextSlots = append(v.NextSlots, timeOf(n))
	}
	return v
}

func printSchedules(c *cli.Context, scs []*pb.Schedule, single bool) error {
	views := make([]scheduleView, len(scs))
	for i, sc := range scs {
		views[i] = scheduleViewOf(sc)
	}
	var v any = views
	if single && len(views) == 1 {
		v = views[0]
		if c.Bool("quiet") {
			return outputQuiet(c, views[0].Name, nil, nil)
		}
	}
	return output(c, v, func() {
		w := newTable()
		fmt.Fprintln(w, "NAME\tCRON\tTZ\tMISSED\tPAUSED\tQUEUE\tKIND\tFIRED\tSKIPPED\tLAST JOB\tNEXT SLOT")
		for _, v := range views {
			next := "-"
			if len(v.NextSlots) > 0 {
				next = tableTime(v.NextSlots[0])
			}
			last := v.LastJob
			if last == "" {
				last = "-"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%s\t%s\t%d\t%d\t%s\t%s\n", v.Name, clean(v.Cron), clean(v.TimeZone), v.Missed, v.Paused,
				v.Queue, v.Kind, v.Fired, v.Skipped, last, next)
		}
		w.Flush()
	})
}
