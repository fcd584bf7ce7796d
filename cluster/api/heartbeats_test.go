package api_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/cluster/api"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

type beatStream = connect.BidiStreamForClient[pb.HeartbeatStreamRequest, pb.HeartbeatStreamResponse]

// h2c is an HTTP/2 client without TLS, as bidirectional streams need.
func h2c(t *testing.T) *http.Client {
	t.Helper()
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// workersOf is a WorkerService client of node n, with secret's token.
func workersOf(t *testing.T, n *clustertest.Node, secret string) leaseholdv1connect.WorkerServiceClient {
	return leaseholdv1connect.NewWorkerServiceClient(h2c(t), "http://"+n.APIAddr, bearer(secret))
}

// openBeats opens a heartbeat stream to n; it is closed when the test ends.
func openBeats(t *testing.T, n *clustertest.Node, secret string) *beatStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := workersOf(t, n, secret).HeartbeatStream(ctx)
	if secret != "" {
		s.RequestHeader().Set("Authorization", "Bearer "+secret)
	}
	t.Cleanup(func() {
		cancel()
		s.CloseRequest()
		s.CloseResponse()
	})
	return s
}

func sendBeat(t *testing.T, s *beatStream, seq uint64, worker string, leases ...*pb.LeaseRef) {
	t.Helper()
	err := s.Send(&pb.HeartbeatStreamRequest{Seq: seq, Heartbeat: &pb.HeartbeatRequest{WorkerId: worker, Leases: leases}})
	if err != nil {
		t.Fatalf("send beat %d: %v", seq, err)
	}
}

// receive takes the next answer, failing the test on a hang.
func receive(t *testing.T, s *beatStream) (*pb.HeartbeatStreamResponse, error) {
	t.Helper()
	type answer struct {
		msg *pb.HeartbeatStreamResponse
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		m, err := s.Receive()
		ch <- answer{m, err}
	}()
	select {
	case a := <-ch:
		return a.msg, a.err
	case <-time.After(20 * time.Second):
		t.Fatal("no answer on the heartbeat stream")
		return nil, nil
	}
}

func ack(t *testing.T, s *beatStream, seq uint64) *pb.HeartbeatResponse {
	t.Helper()
	m, err := receive(t, s)
	if err != nil {
		t.Fatalf("beat %d: %v", seq, err)
	}
	if m.GetSeq() != seq {
		t.Fatalf("answer to beat %d, want %d", m.GetSeq(), seq)
	}
	return m.GetHeartbeat()
}

// holding registers worker with capacity and has it acquire n jobs of a
// queue of its own; it returns their leases.
func holding(t *testing.T, n *clustertest.Node, secret, worker string, jobs ...string) []*pb.LeaseRef {
	t.Helper()
	ws := workersOf(t, n, secret)
	if _, err := ws.RegisterWorker(callCtx(t), connect.NewRequest(&pb.RegisterWorkerRequest{WorkerId: worker, Capacity: 8})); err != nil {
		t.Fatal(err)
	}
	js := leaseholdv1connect.NewJobServiceClient(h2c(t), "http://"+n.APIAddr, bearer(opsSecretIf(secret)))
	for _, id := range jobs {
		if _, err := js.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: id, Queue: "q-" + worker, Kind: "k"}})); err != nil {
			t.Fatal(err)
		}
	}
	res, err := ws.Acquire(callCtx(t), connect.NewRequest(&pb.AcquireRequest{WorkerId: worker, RequestId: "r-" + worker,
		Queues: []string{"q-" + worker}, Max: uint32(len(jobs)), Start: true}))
	if err != nil || len(res.Msg.GetGrants()) != len(jobs) {
		t.Fatalf("acquire for %s: %v", worker, err)
	}
	var refs []*pb.LeaseRef
	for _, g := range res.Msg.GetGrants() {
		refs = append(refs, &pb.LeaseRef{JobId: g.GetJob().GetSpec().GetId(), Token: g.GetLease().GetToken()})
	}
	return refs
}

// opsSecretIf is the admin token on a cluster with tokens ("" without).
func opsSecretIf(secret string) string {
	if secret == "" {
		return ""
	}
	return opsSecret
}

func reasonOf(err error) string { return transport.DetailOf(err).GetReason() }

// streamGoroutines counts the goroutines serving heartbeat streams.
func streamGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "api.(*Server).serveHeartbeats") || strings.Contains(g, "api.(*Server).readBeats") {
			n++
		}
	}
	return n
}

// A follower does not serve the stream, nor forward it: it ends it at once
// with NOT_LEADER naming the leader, before any beat is answered.
func TestHeartbeatStreamFollowerSendsToLeader(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	refs := holding(t, leader, "", "w1", "j1")
	f := c.Nodes[(leader.Index+1)%3]
	c.WaitFor(10*time.Second, "the follower to know the leader's API address", func() bool {
		_, addr := f.Leader()
		return addr == leader.APIAddr
	})
	s := openBeats(t, f, "")
	// The follower may end the stream before the beat is written: Send
	// then fails ("write envelope: EOF"), and Receive has the follower's
	// answer, which is what is checked.
	_ = s.Send(&pb.HeartbeatStreamRequest{Seq: 1, Heartbeat: &pb.HeartbeatRequest{WorkerId: "w1", Leases: refs}})
	m, err := receive(t, s)
	if err == nil {
		t.Fatalf("a follower answered a beat: %v", m)
	}
	d := transport.DetailOf(err)
	if connect.CodeOf(err) != connect.CodeUnavailable || d.GetReason() != transport.ReasonNotLeader || d.GetLeaderApi() != leader.APIAddr {
		t.Fatalf("follower's answer %v (detail %v), want NOT_LEADER naming %s", err, d, leader.APIAddr)
	}
}

// The leader answers each beat with its seq, renews the worker's leases
// (its fake clock runs twice past toleration while the stream beats, and
// nothing expires), carries revokes and lost verdicts, and lists the
// leases a beat did not name.
func TestHeartbeatStreamAnswersEachBeat(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	refs := holding(t, leader, "", "w1", "a", "b")
	s := openBeats(t, leader, "")

	hb := func(seq uint64, leases ...*pb.LeaseRef) *pb.HeartbeatResponse {
		t.Helper()
		sendBeat(t, s, seq, "w1", leases...)
		return ack(t, s, seq)
	}
	// The stream's answer is the unary call's, word for word.
	ws := workersOf(t, leader, "")
	hbBoth := func(seq uint64, leases ...*pb.LeaseRef) *pb.HeartbeatResponse {
		t.Helper()
		r := hb(seq, leases...)
		u, err := ws.Heartbeat(callCtx(t), connect.NewRequest(&pb.HeartbeatRequest{WorkerId: "w1", Leases: leases}))
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(r, u.Msg) {
			t.Fatalf("beat %d: the stream answered\n%v\nthe unary call\n%v", seq, r, u.Msg)
		}
		return r
	}
	r := hbBoth(7, refs...)
	if len(r.GetLeases()) != 2 || r.GetTimings().GetRenew().AsDuration() != clustertest.Renew {
		t.Fatalf("first answer %v", r)
	}
	for _, st := range r.GetLeases() {
		if st.GetVerdict() != pb.Verdict_VERDICT_KEEP {
			t.Fatalf("lease %d: %v, want keep", st.GetToken(), st.GetVerdict())
		}
	}

	// Renewed on arrival: beat every tick while the leader's clock runs
	// twice past toleration.
	tick := c.Tick(leader.Index)
	seq := uint64(8)
	for d := time.Duration(0); d < 2*clustertest.Toleration; d += tick {
		hb(seq, refs...)
		seq++
		c.Step(leader.Index, tick)
	}
	for _, ref := range refs {
		j, err := leader.FSM().Job(ref.GetJobId())
		if l, ok := j.CurrentLease(); err != nil || !ok || l.Token != ref.GetToken() {
			t.Fatalf("lease %d of %s did not survive beats on the stream: %v", ref.GetToken(), ref.GetJobId(), err)
		}
	}

	// Beats sent back to back are answered in order, each with its seq.
	for i := uint64(100); i < 105; i++ {
		sendBeat(t, s, i, "w1", refs...)
	}
	for i := uint64(100); i < 105; i++ {
		ack(t, s, i)
	}

	// A cancelled job: the next answer says stop (cancel); its job still
	// reports.
	js := leaseholdv1connect.NewJobServiceClient(h2c(t), "http://"+leader.APIAddr)
	if _, err := js.CancelJob(callCtx(t), connect.NewRequest(&pb.CancelJobRequest{Id: "a"})); err != nil {
		t.Fatal(err)
	}
	r = hbBoth(200, refs...)
	if st := r.GetLeases()[0]; st.GetVerdict() != pb.Verdict_VERDICT_STOP || st.GetRevoke() != pb.Revoke_REVOKE_CANCEL {
		t.Fatalf("revoked lease answered %v", st)
	}
	if st := r.GetLeases()[1]; st.GetVerdict() != pb.Verdict_VERDICT_KEEP {
		t.Fatalf("the other lease answered %v", st)
	}

	// A released lease, and a token that was never granted: lost. A live
	// lease not named: listed as unnamed.
	if _, err := ws.Release(callCtx(t), connect.NewRequest(&pb.ReleaseRequest{WorkerId: "w1", JobId: "b", Token: refs[1].GetToken()})); err != nil {
		t.Fatal(err)
	}
	r = hbBoth(201, refs[1], &pb.LeaseRef{JobId: "a", Token: refs[0].GetToken() + 1000})
	for _, st := range r.GetLeases() {
		if st.GetVerdict() != pb.Verdict_VERDICT_LOST {
			t.Fatalf("lease %d of %s answered %v, want lost", st.GetToken(), st.GetJobId(), st.GetVerdict())
		}
	}
	if u := r.GetUnnamed(); len(u) != 1 || u[0].GetToken() != refs[0].GetToken() {
		t.Fatalf("unnamed %v, want the live lease of a", u)
	}

	// The client closing its side ends the stream cleanly.
	if err := s.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	if m, err := receive(t, s); err == nil || !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("after the client closed its side: %v, %v", m, err)
	}
	c.WaitFor(10*time.Second, "the stream's goroutines to end", func() bool { return streamGoroutines() == 0 })
}

// A worker credential acts only as the workers it names, beat by beat: a
// beat in another worker's name ends the stream with PERMISSION_DENIED
// after the beats before it are answered.
func TestHeartbeatStreamActsOnlyAsItsWorkers(t *testing.T) {
	c := tokenCluster(t, false)
	leader := c.Leader()
	mine := holding(t, leader, workerASecret, "wA", "a1")
	theirs := holding(t, leader, opsSecret, "wB", "b1")
	s := openBeats(t, leader, workerASecret)
	sendBeat(t, s, 1, "wA", mine...)
	sendBeat(t, s, 2, "wB", theirs...)
	ack(t, s, 1)
	m, err := receive(t, s)
	if err == nil || connect.CodeOf(err) != connect.CodePermissionDenied || reasonOf(err) != transport.ReasonForbidden {
		t.Fatalf("a beat as another worker: %v, %v; want PERMISSION_DENIED", m, err)
	}
	c.WaitFor(10*time.Second, "the refusal audited", func() bool {
		for _, ev := range audits(leader, "auth.denied") {
			if strings.Contains(ev.Detail, "HeartbeatStream") && strings.Contains(ev.Detail, `"wB"`) {
				return true
			}
		}
		return false
	})
}

// Each beat spends a request of its credential's rate, as a call would:
// past the burst the stream ends RATE_LIMITED with a retry hint.
func TestHeartbeatStreamBeatsAreRateLimited(t *testing.T) {
	l := api.DefaultLimits()
	l.Rate, l.Burst = 0.001, 4
	c := limitsCluster(t, l)
	leader := c.Leader()
	// Register, submit, acquire: three requests of the burst; the stream
	// is the fourth, its first beat the fifth.
	refs := holding(t, leader, opsSecret, "w1", "j1")
	s := openBeats(t, leader, opsSecret)
	sendBeat(t, s, 1, "w1", refs...)
	m, err := receive(t, s)
	if err == nil || reasonOf(err) != transport.ReasonRateLimited || transport.DetailOf(err).GetRetryAfter().AsDuration() <= 0 {
		t.Fatalf("a beat past the burst: %v, %v; want RATE_LIMITED with retry_after", m, err)
	}
}

// A leader that lost its quorum never acknowledges a beat recorded after
// it was cut off: the beat waits for a quorum check that fails, and the
// stream ends NOT_LEADER (or NO_LEADER while no leader is known). Raft is
// slow here so the cut-off leader goes on believing it leads for a while.
func TestHeartbeatStreamDeposedLeaderNeverAcks(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.SlowRaft())
	old := c.Leader()
	refs := holding(t, old, "", "w1", "j1")
	s := openBeats(t, old, "")
	sendBeat(t, s, 1, "w1", refs...)
	ack(t, s, 1)

	var others []int
	for _, n := range c.Nodes {
		if n != old {
			others = append(others, n.Index)
		}
	}
	c.Partition([]int{old.Index}, others)
	if st := old.Status(); st.State != "Leader" || !st.Ready {
		t.Fatalf("the cut-off leader stepped down at once (%+v): the test proves nothing", st)
	}
	sendBeat(t, s, 2, "w1", refs...)
	m, err := receive(t, s)
	if err == nil {
		t.Fatalf("a leader cut off from its quorum acknowledged beat %d", m.GetSeq())
	}
	if r := reasonOf(err); r != transport.ReasonNotLeader && r != transport.ReasonNoLeader {
		t.Fatalf("the cut-off leader ended the stream with %v, want NOT_LEADER or NO_LEADER", err)
	}
	c.Heal()
}

// A stream ends when its leader's term ends, without waiting for a beat:
// NOT_LEADER, naming the new leader once one is known.
func TestHeartbeatStreamEndsWithTheTerm(t *testing.T) {
	c := clustertest.New(t, 3)
	old := c.Leader()
	refs := holding(t, old, "", "w1", "j1")
	s := openBeats(t, old, "")
	sendBeat(t, s, 1, "w1", refs...)
	ack(t, s, 1)
	next := c.Nodes[(old.Index+1)%3]
	c.Transfer(old, next)
	m, err := receive(t, s)
	if err == nil || (reasonOf(err) != transport.ReasonNotLeader && reasonOf(err) != transport.ReasonNoLeader) {
		t.Fatalf("after the term ended: %v, %v; want NOT_LEADER", m, err)
	}
	c.WaitFor(10*time.Second, "the stream's goroutines to end", func() bool { return streamGoroutines() == 0 })
}

// idleBound is idleBoundCluster's body_timeout: its heartbeat streams end
// after this long without a beat (renew is shorter).
const idleBound = time.Second

// idleBoundCluster is an open 3-node cluster with body_timeout idleBound.
func idleBoundCluster(t *testing.T) *clustertest.Cluster {
	t.Helper()
	l := api.DefaultLimits()
	l.BodyTimeout = idleBound
	c := clustertest.Prepare(t, 3)
	c.API = func(_ int, o *api.Options) { o.Limits = l }
	for i := range c.Nodes {
		c.Start(i)
	}
	return c
}

// A stream ends, and its goroutines with it, when its client goes away,
// when no beat comes for the idle bound, and when the server shuts down.
func TestHeartbeatStreamEnds(t *testing.T) {
	c := idleBoundCluster(t)
	leader := c.Leader()
	refs := holding(t, leader, "", "w1", "j1")

	t.Run("client gone", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		s := workersOf(t, leader, "").HeartbeatStream(ctx)
		sendBeat(t, s, 1, "w1", refs...)
		ack(t, s, 1)
		cancel()
		s.CloseRequest()
		s.CloseResponse()
		c.WaitFor(10*time.Second, "the stream's goroutines to end", func() bool { return streamGoroutines() == 0 })
	})
	t.Run("idle", func(t *testing.T) {
		s := openBeats(t, leader, "")
		sendBeat(t, s, 1, "w1", refs...)
		ack(t, s, 1)
		start := time.Now()
		m, err := receive(t, s)
		if err == nil || reasonOf(err) != transport.ReasonTimeout {
			t.Fatalf("an idle stream: %v, %v; want TIMEOUT", m, err)
		}
		if waited := time.Since(start); waited < idleBound {
			t.Fatalf("ended after %s of silence, before the bound %s", waited, idleBound)
		}
		c.WaitFor(10*time.Second, "the stream's goroutines to end", func() bool { return streamGoroutines() == 0 })
	})
	t.Run("shutdown", func(t *testing.T) {
		s := openBeats(t, leader, "")
		sendBeat(t, s, 1, "w1", refs...)
		ack(t, s, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := leader.API.Shutdown(ctx)
		leader.API = nil // shut down once
		if err != nil {
			t.Fatalf("shutdown with a stream open: %v", err)
		}
		if m, err := receive(t, s); err == nil {
			t.Fatalf("a stream outlived its server: %v", m)
		}
		if n := streamGoroutines(); n != 0 {
			t.Fatalf("%d stream goroutines outlived the server's shutdown", n)
		}
	})
}

// A worker that beats a little more often than the idle bound keeps its
// stream for many bounds: the write deadline that cuts off a client that
// stops reading is kept ahead while answers are written, so it never
// passes on a stream that is read (set once, at 2 bounds, it would reset
// this stream after its third beat).
func TestHeartbeatStreamSlowBeatsLiveOn(t *testing.T) {
	c := idleBoundCluster(t)
	leader := c.Leader()
	refs := holding(t, leader, "", "w1", "j1")
	bound := max(idleBound, 3*clustertest.Renew) // the server's streamIdle
	s := openBeats(t, leader, "")
	start := time.Now()
	for seq := uint64(1); seq <= 5; seq++ {
		if seq > 1 {
			time.Sleep(9 * bound / 10) // the worker's cadence, not a wait for a condition
		}
		sendBeat(t, s, seq, "w1", refs...)
		ack(t, s, seq)
	}
	if lived := time.Since(start); lived < 3*bound {
		t.Fatalf("the stream lived %s, want at least %s to prove anything", lived, 3*bound)
	}
}

// A credential removed by a reload (SIGHUP) stops heartbeating on a stream
// it opened before: each beat acts with the credentials the node has now.
func TestHeartbeatStreamReloadReachesOpenStreams(t *testing.T) {
	c := tokenCluster(t, false)
	leader := c.Leader()
	mine := holding(t, leader, workerASecret, "wA", "a1")
	s := openBeats(t, leader, workerASecret)
	sendBeat(t, s, 1, "wA", mine...)
	ack(t, s, 1)
	var creds api.Credentials
	for _, tk := range testCreds.Tokens {
		if tk.Secret != workerASecret {
			creds.Tokens = append(creds.Tokens, tk)
		}
	}
	for _, n := range c.Nodes {
		n.APIServer.SetCredentials(creds)
	}
	sendBeat(t, s, 2, "wA", mine...)
	m, err := receive(t, s)
	if err == nil || connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a beat after its token was removed: %v, %v; want UNAUTHENTICATED", m, err)
	}
	c.WaitFor(10*time.Second, "the stream's goroutines to end", func() bool { return streamGoroutines() == 0 })
}

// A client that sends beats and never reads the answers cannot hold its
// stream: once flow control stops the answers, the write deadline (1.5 to
// 2 idle bounds after the batch began) ends the stream.
func TestHeartbeatStreamUnreadAnswersEnd(t *testing.T) {
	c := idleBoundCluster(t)
	leader := c.Leader()
	holding(t, leader, "", "w1", "j1")

	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	// Small receive windows: a few unread answers fill them.
	tr := &http.Transport{Protocols: p, HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10}}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithCancel(context.Background())
	s := leaseholdv1connect.NewWorkerServiceClient(&http.Client{Transport: tr}, "http://"+leader.APIAddr).HeartbeatStream(ctx)
	t.Cleanup(func() {
		cancel()
		s.CloseRequest()
		s.CloseResponse()
	})
	// Each beat names 500 leases the worker does not hold: each answer
	// lists them all, lost.
	var refs []*pb.LeaseRef
	for i := range 500 {
		refs = append(refs, &pb.LeaseRef{JobId: fmt.Sprintf("job-%06d", i), Token: uint64(i) + 1000})
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for seq := uint64(1); seq <= 100; seq++ {
			if s.Send(&pb.HeartbeatStreamRequest{Seq: seq, Heartbeat: &pb.HeartbeatRequest{WorkerId: "w1", Leases: refs}}) != nil {
				return
			}
		}
	}()
	c.WaitFor(10*time.Second, "the stream to be served", func() bool { return streamGoroutines() > 0 })
	c.WaitFor(30*time.Second, "the unread stream's goroutines to end", func() bool { return streamGoroutines() == 0 })
	cancel()
	<-sent
}

// flushCounter counts the flushes a handler asks of its response writer.
type flushCounter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (f flushCounter) Flush() {
	f.n.Add(1)
	f.ResponseWriter.(http.Flusher).Flush()
}

func (f flushCounter) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// serveCountingFlushes serves h over h2c on a listener of its own, counting
// the flushes of heartbeat streams into n; it returns the address.
func serveCountingFlushes(t *testing.T, h http.Handler, n *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == leaseholdv1connect.WorkerServiceHeartbeatStreamProcedure {
			w = flushCounter{ResponseWriter: w, n: n}
		}
		h.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// Beats sent back to back, which arrive while the answerer waits for the
// quorum check covering the first, are answered together, and a batch of
// answers leaves in one flush. Connect flushes after every message: with a
// flush per answer, n beats took at least n flushes; fewer means some
// batch of two or more left in one (on a fast machine the 64 come in a
// handful of batches). Each beat still gets its own answer, in order.
func TestHeartbeatStreamAnswersABatchInOneFlush(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	var refs [][]*pb.LeaseRef
	const workers = 8
	for i := range workers {
		refs = append(refs, holding(t, leader, "", fmt.Sprintf("w%d", i), fmt.Sprintf("j%d", i)))
	}
	var flushes atomic.Int64
	addr := serveCountingFlushes(t, leader.APIServer.Handler(), &flushes)
	ctx, cancel := context.WithCancel(context.Background())
	s := leaseholdv1connect.NewWorkerServiceClient(h2c(t), "http://"+addr).HeartbeatStream(ctx)
	t.Cleanup(func() {
		cancel()
		s.CloseRequest()
		s.CloseResponse()
	})

	// The workers of one process share the stream, as etcd's keepalives
	// share one; each beat names its own worker.
	const beats = 64
	for i := uint64(1); i <= beats; i++ {
		sendBeat(t, s, i, fmt.Sprintf("w%d", i%workers), refs[i%workers]...)
	}
	for i := uint64(1); i <= beats; i++ {
		r := ack(t, s, i)
		if st := r.GetLeases(); len(st) != 1 || st[0].GetVerdict() != pb.Verdict_VERDICT_KEEP || st[0].GetToken() != refs[i%workers][0].GetToken() {
			t.Fatalf("beat %d of w%d answered %v", i, i%workers, r)
		}
	}
	if got := flushes.Load(); got >= beats {
		t.Fatalf("%d beats sent back to back took %d flushes: the answers were not flushed by the batch", beats, got)
	}
	t.Logf("%d beats, %d flushes", beats, flushes.Load())
}
