package outsider

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gullible is a node with no defences but one: it takes a join once the
// node at the claimed Raft address confirms the claim (peer.info), and
// takes every Raft message.
type gullible struct {
	mux  *transport.Mux
	rpc  *transport.RPCServer
	raft *raft.NetworkTransport
}

func newGullible(t *testing.T) *gullible {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux, err := transport.NewMux(transport.MuxConfig{Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	g := &gullible{mux: mux, rpc: transport.NewRPCServer(nil)}
	g.raft = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: mux.RaftLayer(), MaxPool: 1,
		Timeout: 2 * time.Second, Logger: hclog.NewNullLogger()})
	g.rpc.Handle(transport.MethodPeerJoin, func(ctx context.Context, body json.RawMessage) (any, error) {
		var req transport.PeerJoinRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		var info transport.PeerInfo
		if err := mux.RPCClient().Call(ctx, req.Node.RaftAddr, transport.MethodPeerInfo, transport.PeerInfoRequest{}, &info); err != nil {
			return nil, err
		}
		if info.Node != req.Node {
			return nil, errors.New("claim not confirmed")
		}
		return transport.PeerJoinReply{LeaderID: "g1"}, nil
	})
	done := make(chan struct{})
	go mux.Serve()
	go g.rpc.Serve(mux.RPCListener())
	go func() {
		for {
			select {
			case rpc := <-g.raft.Consumer():
				switch rpc.Command.(type) {
				case *raft.AppendEntriesRequest:
					rpc.Respond(&raft.AppendEntriesResponse{}, nil)
				case *raft.RequestVoteRequest:
					rpc.Respond(&raft.RequestVoteResponse{}, nil)
				case *raft.TimeoutNowRequest:
					rpc.Respond(&raft.TimeoutNowResponse{}, nil)
				default:
					rpc.Respond(nil, errors.New("no"))
				}
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		g.raft.Close()
		g.rpc.Close()
		mux.Close()
	})
	return g
}

func attempts(rec *history.Recorder) []history.Attempt {
	var out []history.Attempt
	for _, e := range rec.Entries() {
		if e.Kind == history.KindOutsiderAttempt {
			out = append(out, *e.Attempt)
		}
	}
	return out
}

func newOutsider(t *testing.T, rec *history.Recorder, nodes []Node, cert *tls.Config) *Outsider {
	t.Helper()
	o, err := New(Config{IP: "127.0.0.1", Nodes: nodes, ClientCert: cert, Rec: rec, CallTimeout: 2 * time.Second,
		Leader: func(context.Context) (string, error) { return nodes[0].ID, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Error(err)
		}
	})
	return o
}

// Against a node without defences the attempts show as accepted: the
// impostor, which the outsider confirms when asked, and every Raft
// message; the stranger is refused because the outsider answers as the
// impostor. An insecure run sends only out-of-range Raft messages.
func TestAttemptsRecordWhatTheNodeDid(t *testing.T) {
	g := newGullible(t)
	rec := history.NewRecorder(nil)
	nodes := []Node{{ID: "g1", RaftAddr: g.mux.Addr().String(), APIAddr: "127.0.0.1:1"}}
	o := newOutsider(t, rec, nodes, nil)
	n, accepted := o.round(context.Background(), 0)
	as := attempts(rec)
	if n != len(as) || n != 5 {
		t.Fatalf("%d attempts recorded %d: %+v", n, len(as), as)
	}
	got := map[string]bool{}
	for _, a := range as {
		got[a.Attack] = a.Accepted
		if a.Via != history.ViaTCP || a.Node != "g1" {
			t.Errorf("attempt %+v", a)
		}
		if a.Claim != nil && a.Claim.APIAddr != o.CaptureAddr() {
			t.Errorf("a claim without the capture address: %+v", a.Claim)
		}
		if a.Claim == nil && a.Term != termOutOfRange {
			t.Errorf("an insecure run sent term %d", a.Term)
		}
	}
	want := map[string]bool{history.AttackJoinStranger: false, history.AttackJoinTakeover: false, history.AttackJoinImpostor: true,
		history.AttackRaftAppend: true, history.AttackRaftVote: true}
	for k, v := range want {
		if acc, ok := got[k]; !ok || acc != v {
			t.Errorf("%s: accepted %v (made %v), want %v", k, acc, ok, v)
		}
	}
	if accepted != 3 {
		t.Errorf("%d accepted, want 3", accepted)
	}
}

// A secure run adds the TLS attempts, in-range Raft messages and
// TimeoutNow.
func TestSecureAttempts(t *testing.T) {
	g := newGullible(t)
	rec := history.NewRecorder(nil)
	nodes := []Node{{ID: "g1", RaftAddr: g.mux.Addr().String(), APIAddr: "127.0.0.1:1"}}
	o := newOutsider(t, rec, nodes, &tls.Config{InsecureSkipVerify: true})
	o.round(context.Background(), 0)
	var vias, attacks []string
	var terms []uint64
	for _, a := range attempts(rec) {
		vias, attacks, terms = append(vias, a.Via), append(attacks, a.Attack), append(terms, a.Term)
		if a.Via == history.ViaClientCert && a.Accepted {
			t.Errorf("a TLS attempt on a plain port was accepted: %+v", a)
		}
	}
	if len(attacks) != 2*8 || !slices.Contains(vias, history.ViaClientCert) || !slices.Contains(attacks, history.AttackRaftTimeoutNow) ||
		!slices.Contains(terms, termInRange) {
		t.Fatalf("attacks %v via %v terms %v", attacks, vias, terms)
	}
}

// The capture server records every connection, and what it spoke.
func TestCaptureRecords(t *testing.T) {
	g := newGullible(t)
	rec := history.NewRecorder(nil)
	o := newOutsider(t, rec, []Node{{ID: "g1", RaftAddr: g.mux.Addr().String()}}, nil)
	for _, first := range [][]byte{{0x16, 3, 1}, []byte("POST /leasehold.v1.JobService/GetJob HTTP/1.1\r\n")} {
		c, err := net.Dial("tcp", o.CaptureAddr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(first)
		c.Close()
	}
	// Wait on the recorded entries, not on Captured(): the counter moves
	// before the entry is recorded.
	captured := func() []string {
		var got []string
		for _, e := range rec.Entries() {
			if e.Kind == history.KindOutsiderCapture {
				got = append(got, e.Capture.First)
			}
		}
		return got
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(captured()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := captured()
	slices.Sort(got)
	if !slices.Equal(got, []string{"http/1 POST", "tls"}) {
		t.Fatalf("captured %v", got)
	}
}
