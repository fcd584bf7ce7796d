package client

import (
	"context"
	"fmt"

	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

type schedulesAPI = leaseholdv1connect.ScheduleServiceClient

func scheduleSvc(e *endpoints) schedulesAPI { return e.schedules }

// CreateSchedule creates a schedule: at each slot of req.Cron (in
// req.TimeZone, UTC if empty) the leader submits req.Template as the job
// "NAME@SLOT" (the slot in RFC 3339, UTC), at most once per slot. It is
// idempotent on the name: the same definition again answers the existing
// schedule with created false; another definition fails with ErrConflict
// unless req.Replace is set. An empty template queue is DefaultQueue.
// Every schedule call needs a cluster at level 6 (ErrUpgradeRequired
// before).
func (c *Client) CreateSchedule(ctx context.Context, req *leaseholdv1.CreateScheduleRequest) (sc *leaseholdv1.Schedule, created bool, err error) {
	if req == nil || req.Template == nil {
		return nil, false, fmt.Errorf("leasehold: create schedule: %w: no job template", ErrInvalidArgument)
	}
	if req.Template.Queue == "" {
		req.Template.Queue = DefaultQueue
	}
	resp, err := unary(ctx, c, callOpts{}, req, scheduleSvc, schedulesAPI.CreateSchedule)
	if err != nil {
		return nil, false, err
	}
	return resp.GetSchedule(), resp.GetCreated(), nil
}

// Schedule reads one schedule, with its next slots.
func (c *Client) Schedule(ctx context.Context, name string, opts ...ReadOption) (*leaseholdv1.Schedule, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.GetScheduleRequest{Name: name, Consistency: consistency(opts)}, scheduleSvc, schedulesAPI.GetSchedule)
	if err != nil {
		return nil, err
	}
	return resp.GetSchedule(), nil
}

// Schedules lists every schedule, by name, each template without its
// payload (Schedule answers one with it).
func (c *Client) Schedules(ctx context.Context, opts ...ReadOption) ([]*leaseholdv1.Schedule, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.ListSchedulesRequest{Consistency: consistency(opts)}, scheduleSvc, schedulesAPI.ListSchedules)
	if err != nil {
		return nil, err
	}
	return resp.GetSchedules(), nil
}

// PauseSchedule pauses a schedule: it fires nothing until resumed, and the
// slots that fall meanwhile are never fired.
func (c *Client) PauseSchedule(ctx context.Context, name string) (*leaseholdv1.Schedule, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.PauseScheduleRequest{Name: name}, scheduleSvc, schedulesAPI.PauseSchedule)
	if err != nil {
		return nil, err
	}
	return resp.GetSchedule(), nil
}

// ResumeSchedule resumes a paused schedule from its next slot.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*leaseholdv1.Schedule, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.ResumeScheduleRequest{Name: name}, scheduleSvc, schedulesAPI.ResumeSchedule)
	if err != nil {
		return nil, err
	}
	return resp.GetSchedule(), nil
}

// DeleteSchedule deletes a schedule; the jobs it submitted stay. A call
// retried after a lost answer may find it deleted already: ErrNotFound.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	_, err := unary(ctx, c, callOpts{}, &leaseholdv1.DeleteScheduleRequest{Name: name}, scheduleSvc, schedulesAPI.DeleteSchedule)
	return err
}
