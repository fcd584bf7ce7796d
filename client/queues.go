package client

import (
	"context"

	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Queues (admin only): their depth, pause and resume, and a limit on their
// running jobs. The changes are replicated and need every voter at level 6.

// ListQueues returns one page of queues by name, after pageToken (empty:
// from the first); next is the token of the following page, empty when
// there is none. pageSize 0 means the server's largest page (1000).
func (c *Client) ListQueues(ctx context.Context, pageToken string, pageSize uint32, opts ...ReadOption) (queues []*leaseholdv1.Queue, next string, err error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.ListQueuesRequest{PageToken: pageToken, PageSize: pageSize, Consistency: consistency(opts)},
		queueSvc, queuesAPI.ListQueues)
	if err != nil {
		return nil, "", err
	}
	return resp.GetQueues(), resp.GetNextPageToken(), nil
}

// PauseQueue stops new grants from queue until ResumeQueue; leases already
// granted run on.
func (c *Client) PauseQueue(ctx context.Context, queue string) (*leaseholdv1.QueueSettings, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.PauseQueueRequest{Queue: queue}, queueSvc, queuesAPI.PauseQueue)
	return resp.GetSettings(), err
}

// ResumeQueue lets grants from queue go on.
func (c *Client) ResumeQueue(ctx context.Context, queue string) (*leaseholdv1.QueueSettings, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.ResumeQueueRequest{Queue: queue}, queueSvc, queuesAPI.ResumeQueue)
	return resp.GetSettings(), err
}

// SetQueueLimit holds grants from queue while it has maxRunning live
// leases or more; 0 removes the limit.
func (c *Client) SetQueueLimit(ctx context.Context, queue string, maxRunning uint32) (*leaseholdv1.QueueSettings, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.SetQueueLimitRequest{Queue: queue, MaxRunning: maxRunning},
		queueSvc, queuesAPI.SetQueueLimit)
	return resp.GetSettings(), err
}
