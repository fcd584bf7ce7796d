package api

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
	"github.com/leasehold/leasehold/transport/rules"
)

// Schedules: writes go to the leader like a submit, and a submitter
// credential manages only the schedules whose jobs it submits (as its own
// jobs); reads are answered like job reads, with the next slots computed
// by the answering node.

type schedulesAPI = leaseholdv1connect.ScheduleServiceClient

func schedulesOf(p *peerClients) schedulesAPI { return p.schedules }

type scheduleService struct{ s *Server }

// nextSlotsShown is how many next slots a schedule shows.
const nextSlotsShown = 3

func (sv scheduleService) CreateSchedule(ctx context.Context, req *connect.Request[pb.CreateScheduleRequest]) (*connect.Response[pb.CreateScheduleResponse], error) {
	return leaderCall(sv.s, ctx, req, schedulesOf, schedulesAPI.CreateSchedule, func(ctx context.Context) (*pb.CreateScheduleResponse, error) {
		r, err := applyAs[fsm.PutScheduleResult](sv.s, ctx, req.Msg, func(m *pb.CreateScheduleRequest) (*fsm.PutSchedule, error) {
			cmd, err := putScheduleOf(m)
			if err != nil {
				return nil, err
			}
			// No policy named: the default. Unlike a submit's, it does not
			// wait for the cluster's level: a schedule needs level 6 anyway,
			// so a create retried later names the same policy.
			if m.GetTemplate().Retry == nil {
				cmd.Template.Retry = DefaultRetry()
			}
			if id := identityOf(ctx); id.Role == RoleSubmitter && id.Submitter != "*" && cmd.Template.Submitter == "" {
				cmd.Template.Submitter = id.Submitter
			}
			if err := sv.s.actAsSubmitter(ctx, cmd.Template.Submitter); err != nil {
				return nil, err
			}
			// Replacing another's schedule is acting in its submitter's name:
			// checked here, and again where the put is applied (Owner).
			cmd.Owner = scopedSubmitter(ctx)
			if old, err := sv.s.node.FSM().Schedule(m.GetName()); err == nil {
				return cmd, sv.s.actAsSubmitter(ctx, old.Template.Submitter)
			}
			return cmd, nil
		})
		if err != nil {
			return nil, err
		}
		return &pb.CreateScheduleResponse{Schedule: scheduleToProto(&r.Schedule, sv.s.node.Wall()), Created: r.Created}, nil
	})
}

// putScheduleOf translates a create, checking the expression and the zone
// as the leader will read them.
func putScheduleOf(m *pb.CreateScheduleRequest) (*fsm.PutSchedule, error) {
	if err := rules.CheckName("name", m.GetName()); err != nil {
		return nil, err
	}
	if m.GetTemplate() == nil {
		return nil, rules.Invalid("template", "must be set")
	}
	if m.GetTemplate().GetId() != "" {
		return nil, rules.Invalid("template.id", "a schedule's jobs are named by their slot (NAME@TIME): leave it empty")
	}
	// The state machine's schedule keeps no timeout (fsm.JobSpec has none):
	// refused rather than dropped without a word. 0 is none, as in a submit.
	if t := m.GetTemplate().Timeout; t != nil && (!t.IsValid() || t.AsDuration() != 0) {
		return nil, rules.Invalid("template.timeout", "a schedule's jobs cannot carry a timeout yet: leave it unset")
	}
	if len(m.GetCron()) > fsm.MaxCronLen {
		return nil, rules.TooLong("cron", len(m.GetCron()), fsm.MaxCronLen)
	}
	if len(m.GetTimeZone()) > fsm.MaxZoneLen {
		return nil, rules.TooLong("time_zone", len(m.GetTimeZone()), fsm.MaxZoneLen)
	}
	if _, err := cluster.ParseCron(m.GetCron(), m.GetTimeZone()); err != nil {
		return nil, rules.Invalid("cron", "%v", err)
	}
	missed := fsm.MissedSkip
	switch m.GetMissed() {
	case pb.MissedSlots_MISSED_SLOTS_UNSPECIFIED, pb.MissedSlots_MISSED_SLOTS_SKIP:
	case pb.MissedSlots_MISSED_SLOTS_RUN_LATEST:
		missed = fsm.MissedRunLatest
	default:
		return nil, rules.Invalid("missed", "unknown value %d", m.GetMissed())
	}
	tmpl, err := specFromProto(m.GetTemplate())
	if err != nil {
		return nil, err
	}
	return &fsm.PutSchedule{Name: m.GetName(), Cron: m.GetCron(), Zone: m.GetTimeZone(), Missed: missed,
		Template: tmpl, Paused: m.GetPaused(), Replace: m.GetReplace()}, nil
}

func (sv scheduleService) GetSchedule(ctx context.Context, req *connect.Request[pb.GetScheduleRequest]) (*connect.Response[pb.GetScheduleResponse], error) {
	if err := rules.CheckName("name", req.Msg.GetName()); err != nil {
		return nil, toWire(err)
	}
	return readCall(sv.s, ctx, req, req.Msg.GetConsistency(), schedulesOf, schedulesAPI.GetSchedule, func(_ context.Context, f *fsm.FSM) (*pb.GetScheduleResponse, error) {
		sc, err := f.Schedule(req.Msg.GetName())
		if err != nil {
			return nil, err
		}
		return &pb.GetScheduleResponse{Schedule: scheduleToProto(&sc, sv.s.node.Wall())}, nil
	})
}

func (sv scheduleService) ListSchedules(ctx context.Context, req *connect.Request[pb.ListSchedulesRequest]) (*connect.Response[pb.ListSchedulesResponse], error) {
	return readCall(sv.s, ctx, req, req.Msg.GetConsistency(), schedulesOf, schedulesAPI.ListSchedules, func(_ context.Context, f *fsm.FSM) (*pb.ListSchedulesResponse, error) {
		// Without payloads (GetSchedule has them): 1000 templates of 256 KiB
		// would be one answer of 256 MiB, and as much copied.
		res := &pb.ListSchedulesResponse{}
		now := sv.s.node.Wall()
		for _, sc := range f.ScheduleDefinitions() {
			res.Schedules = append(res.Schedules, scheduleToProto(&sc, now))
		}
		return res, nil
	})
}

func (sv scheduleService) PauseSchedule(ctx context.Context, req *connect.Request[pb.PauseScheduleRequest]) (*connect.Response[pb.PauseScheduleResponse], error) {
	return leaderCall(sv.s, ctx, req, schedulesOf, schedulesAPI.PauseSchedule, func(ctx context.Context) (*pb.PauseScheduleResponse, error) {
		sc, err := sv.setPaused(ctx, req.Msg.GetName(), true)
		if err != nil {
			return nil, err
		}
		return &pb.PauseScheduleResponse{Schedule: sc}, nil
	})
}

func (sv scheduleService) ResumeSchedule(ctx context.Context, req *connect.Request[pb.ResumeScheduleRequest]) (*connect.Response[pb.ResumeScheduleResponse], error) {
	return leaderCall(sv.s, ctx, req, schedulesOf, schedulesAPI.ResumeSchedule, func(ctx context.Context) (*pb.ResumeScheduleResponse, error) {
		sc, err := sv.setPaused(ctx, req.Msg.GetName(), false)
		if err != nil {
			return nil, err
		}
		return &pb.ResumeScheduleResponse{Schedule: sc}, nil
	})
}

// scopedSubmitter is the one submitter a submitter credential acts for,
// which a schedule command carries as its Owner so that the state machine
// checks the schedule's owner again where commands are ordered; "" for a
// credential that may act for any (an admin, a submitter for "*").
func scopedSubmitter(ctx context.Context) string {
	if id := identityOf(ctx); id.Role == RoleSubmitter && id.Submitter != "*" {
		return id.Submitter
	}
	return ""
}

// mayManage refuses a submitter credential another submitter's schedule;
// one this node does not have is checked by the leader, where the request
// goes.
func (sv scheduleService) mayManage(ctx context.Context, name string) error {
	if err := rules.CheckName("name", name); err != nil {
		return err
	}
	if sc, err := sv.s.node.FSM().Schedule(name); err == nil {
		return sv.s.actAsSubmitter(ctx, sc.Template.Submitter)
	}
	return nil
}

func (sv scheduleService) setPaused(ctx context.Context, name string, paused bool) (*pb.Schedule, error) {
	if err := sv.mayManage(ctx, name); err != nil {
		return nil, err
	}
	r, err := applyAs[fsm.PutScheduleResult](sv.s, ctx, name, func(name string) (*fsm.PutSchedule, error) {
		return &fsm.PutSchedule{Name: name, PauseOnly: true, Paused: paused, Owner: scopedSubmitter(ctx)}, nil
	})
	if err != nil {
		return nil, err
	}
	return scheduleToProto(&r.Schedule, sv.s.node.Wall()), nil
}

func (sv scheduleService) DeleteSchedule(ctx context.Context, req *connect.Request[pb.DeleteScheduleRequest]) (*connect.Response[pb.DeleteScheduleResponse], error) {
	return leaderCall(sv.s, ctx, req, schedulesOf, schedulesAPI.DeleteSchedule, func(ctx context.Context) (*pb.DeleteScheduleResponse, error) {
		if err := sv.mayManage(ctx, req.Msg.GetName()); err != nil {
			return nil, err
		}
		cmd := &fsm.DeleteSchedule{Name: req.Msg.GetName(), Owner: scopedSubmitter(ctx)}
		if err := cmd.Validate(); err != nil {
			return nil, err
		}
		if _, err := sv.s.node.Apply(ctx, cmd); err != nil {
			return nil, err
		}
		return &pb.DeleteScheduleResponse{}, nil
	})
}

func scheduleToProto(sc *fsm.Schedule, now time.Time) *pb.Schedule {
	out := &pb.Schedule{
		Name: sc.Name, Cron: sc.Cron, TimeZone: sc.Zone, Template: specToProto(&sc.Template),
		Missed: pb.MissedSlots_MISSED_SLOTS_SKIP, Paused: sc.Paused, LastSlot: ts(sc.LastSlot),
		Fired: sc.Fired, Skipped: sc.Skipped, LastJobId: sc.LastJob, CreatedAt: ts(sc.CreatedAt), UpdatedAt: ts(sc.UpdatedAt),
	}
	if sc.Missed == fsm.MissedRunLatest {
		out.Missed = pb.MissedSlots_MISSED_SLOTS_RUN_LATEST
	}
	for _, t := range cluster.NextSlots(sc, now, nextSlotsShown) {
		out.NextSlots = append(out.NextSlots, timestamppb.New(t))
	}
	return out
}
