package api_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// A follower whose disk is full says so: it is not ready (/readyz 503 with
// the reason), writes sent through it are answered RESOURCE_EXHAUSTED
// DISK_FULL naming it, and the cluster goes on without it. Once its writes
// succeed again it is ready again, and has every entry.
func TestDiskFullFollower(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	f := c.Nodes[(leader.Index+1)%3]
	submit := func(n *clustertest.Node, id string) error {
		jobs := leaseholdv1connect.NewJobServiceClient(http.DefaultClient, "http://"+n.APIAddr)
		_, err := jobs.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: id, Queue: "q", Kind: "k"}}))
		return err
	}
	readyz := func(n *clustertest.Node) (int, map[string]any) {
		resp, err := http.Get("http://" + n.APIAddr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}

	f.Disk.Fail(syscall.ENOSPC)
	if err := submit(leader, "while-full"); err != nil {
		t.Fatalf("the leader and the other follower are a quorum: %v", err)
	}
	c.WaitFor(10*time.Second, "the follower's failed append to make it not ready", func() bool { return !f.Status().Ready })
	code, body := readyz(f)
	if code != http.StatusServiceUnavailable || body["ready"] != false ||
		!strings.Contains(body["reason"].(string), "disk full on node "+f.ID()) {
		t.Fatalf("readyz of the full follower: %d %v", code, body)
	}
	err := submit(f, "through-full")
	var cerr *connect.Error
	d := transport.DetailOf(err)
	if !errors.As(err, &cerr) || cerr.Code() != connect.CodeResourceExhausted || d.GetReason() != transport.ReasonDiskFull ||
		d.GetNodeId() != f.ID() || !strings.Contains(cerr.Message(), "disk full on node "+f.ID()) {
		t.Fatalf("a write through the full follower: %v (detail %+v)", err, d)
	}

	f.Disk.Heal()
	c.WaitFor(20*time.Second, "the follower ready again once an append succeeds", func() bool { return f.Status().Ready })
	if code, body := readyz(f); code != http.StatusOK || body["reason"] != nil {
		t.Fatalf("readyz after space came back: %d %v", code, body)
	}
	if err := submit(f, "through-healed"); err != nil {
		t.Fatal(err)
	}
	c.Converged()
	for _, id := range []string{"while-full", "through-healed"} {
		if _, err := f.FSM().Job(id); err != nil {
			t.Fatalf("the follower lacks %s: %v", id, err)
		}
	}
	if _, err := c.Leader().FSM().Job("through-full"); err == nil {
		t.Fatal("a write refused with DISK_FULL was applied")
	}
}
