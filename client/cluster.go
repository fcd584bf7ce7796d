package client

import (
	"context"

	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Status is the view of the node the client is pinned to (Leader), in one
// attempt: it is a question about that node, so it is not retried on
// another.
func (c *Client) Status(ctx context.Context) (*leaseholdv1.StatusResponse, error) {
	return unary(ctx, c, callOpts{once: true}, &leaseholdv1.StatusRequest{}, clusterSvc, clusterAPI.Status)
}

// Members lists the cluster's Raft members.
func (c *Client) Members(ctx context.Context) ([]*leaseholdv1.Member, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.MembersRequest{}, clusterSvc, clusterAPI.Members)
	if err != nil {
		return nil, err
	}
	return resp.GetMembers(), nil
}

// AddNode adds a voter.
func (c *Client) AddNode(ctx context.Context, id, raftAddr, apiAddr string) error {
	_, err := unary(ctx, c, callOpts{}, &leaseholdv1.AddNodeRequest{Id: id, RaftAddr: raftAddr, ApiAddr: apiAddr},
		clusterSvc, clusterAPI.AddNode)
	return err
}

// RemoveNode removes a member.
func (c *Client) RemoveNode(ctx context.Context, id string) error {
	_, err := unary(ctx, c, callOpts{}, &leaseholdv1.RemoveNodeRequest{Id: id}, clusterSvc, clusterAPI.RemoveNode)
	return err
}

// TransferLeadership hands leadership to the node id, or to the most
// up-to-date voter when id is empty, and returns the new leader's id.
func (c *Client) TransferLeadership(ctx context.Context, id string) (leaderID string, err error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.TransferLeadershipRequest{Id: id},
		clusterSvc, clusterAPI.TransferLeadership)
	if err != nil {
		return "", err
	}
	return resp.GetLeaderId(), nil
}
