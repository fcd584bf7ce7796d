package cluster_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
)

// outsider is a process on the network that is not a member: a Mux to dial
// from (with whatever TLS it has) and, if it serves, an RPC server.
type outsider struct {
	mux  *transport.Mux
	rpc  *transport.RPCServer
	raft *raft.NetworkTransport
}

func newOutsider(t *testing.T, serverTLS, clientTLS *tls.Config) *outsider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m, err := transport.NewMux(transport.MuxConfig{Listener: ln, ServerTLS: serverTLS, ClientTLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	o := &outsider{mux: m, rpc: transport.NewRPCServer(nil)}
	o.raft = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: m.RaftLayer(), MaxPool: 1,
		Timeout: 2 * time.Second, Logger: hclog.NewNullLogger()})
	done := make(chan struct{}, 2)
	go func() { m.Serve(); done <- struct{}{} }()
	go func() { o.rpc.Serve(m.RPCListener()); done <- struct{}{} }()
	t.Cleanup(func() {
		o.raft.Close()
		o.rpc.Close()
		m.Close()
		<-done
		<-done
	})
	return o
}

func (o *outsider) call(addr, method string, req, resp any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return o.mux.RPCClient().Call(ctx, addr, method, req, resp)
}

func forgedAppend(tr *raft.NetworkTransport, to string) error {
	var out raft.AppendEntriesResponse
	return tr.AppendEntries("x", raft.ServerAddress(to), &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("intruder"), Addr: []byte("127.0.0.1:1")}, Term: 1<<64 - 1,
	}, &out)
}

func forgedTimeoutNow(tr *raft.NetworkTransport, to string) error {
	var out raft.TimeoutNowResponse
	return tr.TimeoutNow("x", raft.ServerAddress(to), &raft.TimeoutNowRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("intruder"), Addr: []byte("127.0.0.1:1")},
	}, &out)
}

// membersOf is the set of voters and their table entries, as a string to
// compare before and after an attack; it waits for every entry first.
func membersOf(t *testing.T, c *clustertest.Cluster) string {
	t.Helper()
	var ms []cluster.Member
	c.WaitFor(10*time.Second, "every member's addresses in the node table", func() bool {
		var err error
		if ms, err = c.Leader().Members(); err != nil || len(ms) != len(c.Nodes) {
			return false
		}
		for _, m := range ms {
			if m.APIAddr == "" {
				return false
			}
		}
		return true
	})
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(m.ID + "=" + m.RaftAddr + "/" + m.APIAddr + ";")
	}
	return b.String()
}

func auditEvents(n *clustertest.Node, action string) []fsm.Event {
	var out []fsm.Event
	for _, ev := range n.FSM().Events(0, fsm.MaxPageSize).Events {
		if ev.Type == fsm.EventAudit && strings.HasPrefix(ev.Detail, action) {
			out = append(out, ev)
		}
	}
	return out
}

// With peer TLS, nobody without a server certificate of this cluster gets
// past the handshake: not plain TCP, not a client certificate of the same
// CA (valid on the API), not a server of another cluster. Their joins,
// forged AppendEntries (term 2^64-1) and TimeoutNow change nothing.
func TestPeerTLSRefusesOutsiders(t *testing.T) {
	pki := clustertest.NewPKI(t)
	c := clustertest.New(t, 3, pki.PeerTLS())
	leader := c.Leader()
	before, term := membersOf(t, c), leader.Status().Term

	clientCert := pki.Material("worker", transport.ClientIdentity(clustertest.TLSCluster, "worker-1"))
	otherCluster := pki.Material("staging", transport.ServerIdentity("staging", "node-0"))
	dialWith := func(m *transport.TLSMaterial) *tls.Config {
		// Present m's certificate, trust anything: the server side decides.
		pair, err := tls.LoadX509KeyPair(m.Files().CertFile, m.Files().KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true}
	}
	outsiders := map[string]*outsider{
		"plain tcp":          newOutsider(t, nil, nil),
		"client certificate": newOutsider(t, nil, dialWith(clientCert)),
		"other cluster":      newOutsider(t, nil, dialWith(otherCluster)),
	}
	for name, o := range outsiders {
		t.Run(name, func(t *testing.T) {
			for _, n := range c.Running() {
				join := transport.PeerJoinRequest{Node: transport.NodeAddr{ID: "intruder", RaftAddr: o.mux.Addr().String(), APIAddr: "127.0.0.1:1"}}
				err := o.call(n.Addr, transport.MethodPeerJoin, join, nil)
				var remote *transport.RPCError
				if err == nil || errors.As(err, &remote) {
					t.Fatalf("join at %s: %v, want refused at the handshake", n.ID(), err)
				}
				if err := forgedAppend(o.raft, n.Addr); err == nil {
					t.Fatalf("forged AppendEntries accepted by %s", n.ID())
				}
				if err := forgedTimeoutNow(o.raft, n.Addr); err == nil {
					t.Fatalf("forged TimeoutNow accepted by %s", n.ID())
				}
			}
		})
	}
	if after := membersOf(t, c); after != before {
		t.Fatalf("members changed:\n before %s\n after  %s", before, after)
	}
	if l := c.Leader(); l != leader || l.Status().Term != term {
		t.Fatalf("leadership moved: %s at term %d, was %s at %d", l.ID(), l.Status().Term, leader.ID(), term)
	}
}

// With peer TLS a member speaks only for itself: node-1 asking to change
// node-0's entry (pointing its API at a capture address) is refused as
// forbidden and audited, and the table is unchanged.
func TestPeerJoinOnlyForOwnID(t *testing.T) {
	pki := clustertest.NewPKI(t)
	c := clustertest.New(t, 3, pki.PeerTLS())
	leader := c.Leader()
	victim := c.Nodes[(leader.Index+1)%3]
	liar := c.Nodes[(leader.Index+2)%3]
	before := membersOf(t, c)

	m := pki.Material("liar", transport.ServerIdentity(clustertest.TLSCluster, liar.ID()))
	server, client, err := m.PeerConfigs(clustertest.TLSCluster)
	if err != nil {
		t.Fatal(err)
	}
	o := newOutsider(t, server, client)
	join := transport.PeerJoinRequest{Node: transport.NodeAddr{ID: victim.ID(), RaftAddr: victim.Addr, APIAddr: "127.0.0.1:9"}}
	err = o.call(leader.Addr, transport.MethodPeerJoin, join, nil)
	var remote *transport.RPCError
	if !errors.As(err, &remote) || remote.Code != transport.CodeForbidden {
		t.Fatalf("join for another node = %v, want %s", err, transport.CodeForbidden)
	}
	if after := membersOf(t, c); after != before {
		t.Fatalf("members changed:\n before %s\n after  %s", before, after)
	}
	c.WaitFor(10*time.Second, "the refusal audited", func() bool {
		for _, ev := range auditEvents(leader, "cluster.join") {
			if strings.Contains(ev.Detail, "refused") && strings.Contains(ev.Actor, liar.ID()) && ev.Source != "" {
				return true
			}
		}
		return false
	})
}

// Without peer TLS (insecure mode) a join is still only taken when the
// node at the claimed Raft address confirms it. The takeover seen in the
// field (the leader's id and Raft address with a capture server's API
// address, so followers would forward callers' credentials there) is
// refused, as is a second node claiming a live member's id.
func TestJoinClaimsAreConfirmed(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	follower := c.Nodes[(leader.Index+1)%3]
	before := membersOf(t, c)
	o := newOutsider(t, nil, nil)

	takeover := transport.PeerJoinRequest{Node: transport.NodeAddr{ID: leader.ID(), RaftAddr: leader.Addr, APIAddr: "127.0.0.1:9"}}
	for _, target := range []string{leader.Addr, follower.Addr} {
		err := o.call(target, transport.MethodPeerJoin, takeover, nil)
		var remote *transport.RPCError
		if errors.As(err, &remote) && remote.Code == transport.CodeNotLeader {
			err = o.call(remote.Details["leader_raft_addr"], transport.MethodPeerJoin, takeover, nil)
		}
		if !errors.As(err, &remote) || remote.Code != transport.CodeClaimRefused {
			t.Fatalf("address takeover via %s = %v, want %s", target, err, transport.CodeClaimRefused)
		}
	}

	// An impostor answers peer.info as the follower, at its own address.
	// Even an admin cannot give it the id while the follower answers.
	impostor := transport.NodeAddr{ID: follower.ID(), RaftAddr: o.mux.Addr().String(), APIAddr: "127.0.0.1:9"}
	o.rpc.Handle(transport.MethodPeerInfo, func(context.Context, json.RawMessage) (any, error) {
		return transport.PeerInfo{Node: impostor, InCluster: true}, nil
	})
	if err := leader.AddNode(ctx(t), impostor, cluster.Actor{Name: "token:ops"}); !errors.Is(err, cluster.ErrIDInUse) {
		t.Fatalf("admin adding a second %s = %v, want ErrIDInUse", follower.ID(), err)
	}
	// Over the peer port, without TLS, nobody can prove to be a member, so
	// no member moves, whether it answers or not: the impostor's join
	// was once taken while the member was down or cut off.
	for _, down := range []bool{false, true} {
		if down {
			c.Kill(follower.Index)
		}
		err := o.call(leader.Addr, transport.MethodPeerJoin, transport.PeerJoinRequest{Node: impostor}, nil)
		var remote *transport.RPCError
		if !errors.As(err, &remote) || remote.Code != transport.CodeForbidden {
			t.Fatalf("second node as %s (member down: %t) = %v, want %s", follower.ID(), down, err, transport.CodeForbidden)
		}
		if after := membersOf(t, c); after != before {
			t.Fatalf("members changed:\n before %s\n after  %s", before, after)
		}
	}
	c.WaitFor(10*time.Second, "both refusals audited", func() bool {
		var claim, inUse bool
		for _, ev := range auditEvents(leader, "cluster.join") {
			claim = claim || strings.Contains(ev.Detail, "claim not confirmed")
			inUse = inUse || strings.Contains(ev.Detail, "node id in use")
		}
		return claim && inUse
	})
}

// Admin actions leave audit records naming who asked.
func TestAdminActionsAudited(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	target := c.Nodes[(leader.Index+1)%3]
	if err := leader.TransferLeadership(ctx(t), target.ID(), cluster.Actor{Name: "token:ops", Source: "10.9.9.9:1"}); err != nil {
		t.Fatal(err)
	}
	err := c.Leader().RemoveNode(ctx(t), "node-9", cluster.Actor{Name: "token:ops", Source: "10.9.9.9:1"})
	if !errors.Is(err, fsm.ErrNotFound) {
		t.Fatalf("removing a non-member = %v, want not found", err)
	}
	var transfer, remove []fsm.Event
	defer func() {
		if t.Failed() {
			t.Logf("transfer %+v\nremove %+v\ndropped %d", transfer, remove, c.Leader().AuditsDropped())
		}
	}()
	c.WaitFor(10*time.Second, "transfer and remove audited", func() bool {
		n := c.Leader()
		transfer = auditEvents(n, "cluster.transfer")
		remove = auditEvents(n, "cluster.remove")
		return len(transfer) == 1 && transfer[0].Actor == "token:ops" && transfer[0].Source == "10.9.9.9:1" &&
			len(remove) == 1 && strings.Contains(remove[0].Detail, "node-9: failed")
	})
}

// Without peer TLS the port is open (insecure mode), but a forged
// AppendEntries with term 2^64-1, which used to wrap every node's term to
// 0 and leave the cluster leaderless for good, is refused by every node and
// counted; the cluster keeps its leader and its terms.
func TestForgedTermRefused(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	term := leader.Status().Term
	o := newOutsider(t, nil, nil)
	for _, n := range c.Running() {
		if err := forgedAppend(o.raft, n.Addr); err == nil {
			t.Fatalf("%s accepted an AppendEntries at term 2^64-1", n.ID())
		}
		if got := n.Metrics().RaftRPCsRefused; got != 1 {
			t.Fatalf("%s counted %d refused Raft messages, want 1", n.ID(), got)
		}
	}
	for _, n := range c.Running() {
		if st := n.Status(); st.Term > term+1 {
			t.Fatalf("%s is at term %d after the attack (was %d)", n.ID(), st.Term, term)
		}
	}
	do(t, c, &fsm.SubmitJob{Spec: spec("after-attack", fsm.LostRequeue)})
	if c.Leader() != leader {
		t.Fatal("the attack moved leadership")
	}
}
