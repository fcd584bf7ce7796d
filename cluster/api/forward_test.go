package api_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/api"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

const (
	opsSecret = "ops-secret-0123456789"
	subSecret = "submitter-secret-0123456789"
)

const (
	workerASecret = "worker-a-secret-0123456789"
	ci2Secret     = "submitter-2-secret-0123456789"
)

var testCreds = api.Credentials{Tokens: []api.Token{
	{Name: "ops", Secret: opsSecret, Grant: api.Grant{Role: api.RoleAdmin}},
	{Name: "ci", Secret: subSecret, Grant: api.Grant{Role: api.RoleSubmitter, Submitter: "ci"}},
	{Name: "ci2", Secret: ci2Secret, Grant: api.Grant{Role: api.RoleSubmitter, Submitter: "ci2"}},
	{Name: "workers-a", Secret: workerASecret, Grant: api.Grant{Role: api.RoleWorker, Workers: []string{"wA", "pool-a-*"}}},
}}

// tokenCluster starts 3 nodes with API tokens, with or without peer TLS.
func tokenCluster(t *testing.T, peerTLS bool) *clustertest.Cluster {
	t.Helper()
	var opts []clustertest.Option
	if peerTLS {
		opts = append(opts, clustertest.NewPKI(t).PeerTLS())
	}
	c := clustertest.Prepare(t, 3, opts...)
	c.API = func(_ int, o *api.Options) { o.Credentials = testCreds }
	for i := range c.Nodes {
		c.Start(i)
	}
	return c
}

func bearer(secret string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if secret != "" {
				req.Header().Set("Authorization", "Bearer "+secret)
			}
			return next(ctx, req)
		}
	}))
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func audits(n *clustertest.Node, action string) []fsm.Event {
	var out []fsm.Event
	for _, ev := range n.FSM().Events(0, fsm.MaxPageSize).Events {
		if ev.Type == fsm.EventAudit && strings.HasPrefix(ev.Detail, action) {
			out = append(out, ev)
		}
	}
	return out
}

// A follower forwards a request to the leader over the peer port, never to
// the API address a reply or the node table names, and with peer TLS the
// caller's token stays on the follower: the leader learns who the caller is
// from the member that vouches for it. A capture server whose address was
// offered as the leader's API receives nothing.
func TestForwardingKeepsCredentialsInside(t *testing.T) {
	for _, peerTLS := range []bool{true, false} {
		name := map[bool]string{true: "peer tls", false: "insecure peer port"}[peerTLS]
		t.Run(name, func(t *testing.T) {
			var captured atomic.Int64
			capture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				captured.Add(1)
			}))
			defer capture.Close()

			c := tokenCluster(t, peerTLS)
			leader := c.Leader()
			follower := c.Nodes[(leader.Index+1)%3]
			// The takeover that used to poison the node table.
			err := leader.AddNode(callCtx(t), transport.NodeAddr{ID: leader.ID(), RaftAddr: leader.Addr,
				APIAddr: strings.TrimPrefix(capture.URL, "http://")}, cluster.Actor{Name: "test"})
			if err == nil {
				t.Fatal("a claim on the leader's id with another API address was taken")
			}

			jobs := leaseholdv1connect.NewJobServiceClient(http.DefaultClient, "http://"+follower.APIAddr, bearer(opsSecret))
			// A raw client, to see the reply's headers: it does not retry, so
			// an election under a loaded test machine (NO_LEADER) is waited out
			// here.
			var res *connect.Response[pb.SubmitJobResponse]
			c.WaitFor(10*time.Second, "a submit through the follower", func() bool {
				res, err = jobs.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "fwd-1", Queue: "q", Kind: "k"}}))
				return connect.CodeOf(err) != connect.CodeUnavailable
			})
			if err != nil {
				t.Fatalf("submit through the follower: %v", err)
			}
			if res.Header().Get(transport.HeaderLeader) == strings.TrimPrefix(capture.URL, "http://") {
				t.Fatal("the leader hint names the capture server")
			}
			cancel, err := jobs.CancelSubmitterJobs(callCtx(t), connect.NewRequest(&pb.CancelSubmitterJobsRequest{Submitter: "nobody"}))
			if err != nil || cancel.Msg.GetRemaining() != 0 {
				t.Fatalf("cancel-submitter through the follower: %v", err)
			}
			c.WaitFor(10*time.Second, "the forwarded admin action audited with its caller", func() bool {
				for _, ev := range audits(c.Leader(), "jobs.cancel_submitter") {
					if strings.HasPrefix(ev.Actor, "token:ops") && ev.Source != "" {
						return !peerTLS || strings.Contains(ev.Actor, "via "+follower.ID())
					}
				}
				return false
			})
			if n := captured.Load(); n != 0 {
				t.Fatalf("the capture server received %d requests", n)
			}
		})
	}
}

// The public port never takes a member's word for who a caller is: the
// forwarding headers from outside count for nothing.
func TestForwardedIdentityIgnoredOnPublicPort(t *testing.T) {
	c := tokenCluster(t, true)
	leader := c.Leader()
	jobs := leaseholdv1connect.NewJobServiceClient(http.DefaultClient, "http://"+leader.APIAddr,
		connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Leasehold-Forwarded", "1")
				req.Header().Set("Leasehold-Forwarded-Identity", "token:ops")
				return next(ctx, req)
			}
		})))
	_, err := jobs.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "forged", Queue: "q", Kind: "k"}}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated || transport.DetailOf(err).GetReason() != transport.ReasonUnauthenticated {
		t.Fatalf("a forged forwarded identity = %v, want UNAUTHENTICATED", err)
	}
	if _, err := leader.FSM().Job("forged"); !errors.Is(err, fsm.ErrNotFound) {
		t.Fatalf("the forged request's job exists: %v", err)
	}
}

// A refused call to an admin-only procedure is audited with who tried and
// from where, once per window however often it is repeated.
func TestRefusedAdminCallAudited(t *testing.T) {
	c := tokenCluster(t, false)
	leader := c.Leader()
	for _, secret := range []string{subSecret, subSecret, subSecret, "not-a-token-at-all-xx", ""} {
		cl := leaseholdv1connect.NewClusterServiceClient(http.DefaultClient, "http://"+leader.APIAddr, bearer(secret))
		_, err := cl.RemoveNode(callCtx(t), connect.NewRequest(&pb.RemoveNodeRequest{Id: "node-1"}))
		want := connect.CodePermissionDenied
		if secret != subSecret {
			want = connect.CodeUnauthenticated
		}
		if connect.CodeOf(err) != want {
			t.Fatalf("RemoveNode with %q: %v, want %v", secret, err, want)
		}
	}
	var got []fsm.Event
	c.WaitFor(10*time.Second, "the refusals audited", func() bool {
		got = audits(leader, "auth.refused")
		return len(got) == 2
	})
	if got[0].Actor != "token:ci" || !strings.Contains(got[0].Detail, "RemoveNode") || got[0].Source == "" {
		t.Fatalf("first refusal recorded as %+v", got[0])
	}
	if got[1].Actor != "unauthenticated" || got[1].Source == "" {
		t.Fatalf("second refusal recorded as %+v", got[1])
	}
	if ms, _ := leader.Members(); len(ms) != 3 {
		t.Fatalf("a refused removal removed a node: %+v", ms)
	}
}
