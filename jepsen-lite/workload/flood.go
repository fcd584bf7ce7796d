package workload

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// FloodProcess is the flood's name in the history.
const FloodProcess = "flood"

// The flood's pace. It is bounded so that on two cores the real load
// keeps its timings: about 4 bodies (each at most a few MiB on the wire,
// 1 MiB read or inflated by the node), 15 ghost calls, and in a secure
// run 10 calls with wrong or non-admin credentials a second, one call of
// each loop at a time, and FloodIdleConns connections held open.
const (
	floodBodyEvery        = 250 * time.Millisecond // gzip bombs and oversized bodies: 4/s
	floodGhostHBEvery     = 100 * time.Millisecond // ghost heartbeats: 10/s
	floodGhostAcqEvery    = 200 * time.Millisecond // ghost acquires: 5/s
	floodWrongEvery       = 200 * time.Millisecond // wrong tokens: 5/s (secure runs)
	floodAdminEvery       = 333 * time.Millisecond // admin calls: 3/s (secure runs)
	floodImpersonateEvery = 500 * time.Millisecond // other workers' names: 2/s (secure runs)
	// DefaultFloodIdleConns connections send headers and never a body.
	DefaultFloodIdleConns = 150
	floodCallTimeout      = 5 * time.Second
	// A connection that could not be opened (its node is down) waits this
	// long before its slot tries again.
	floodRedial = time.Second
)

// Sizes of what the flood sends: a gzip message inflating to 32 MiB, a
// body announcing 8 MiB, and 2 MiB sent without a length; the nodes take
// 1 MiB.
const (
	floodBombSize     = 32 << 20
	floodDeclaredSize = 8 << 20
	floodStreamedSize = 2 << 20
)

// floodWrongToken is a bearer token no node knows.
const floodWrongToken = "flood-not-a-token-of-this-cluster"

// FloodTarget is a node the flood calls.
type FloodTarget struct {
	Name string // its node name
	Addr string // its API address
}

// FloodConfig places the flood and names its targets.
type FloodConfig struct {
	Rec *history.Recorder
	// SourceIP is the flood's own address: it dials from it.
	SourceIP string
	Nodes    []FloodTarget
	// TLS, in a secure run, trusts the cluster's CA; nil: plain HTTP.
	TLS *tls.Config
	// Token, in a secure run, is the flood's own credential: a worker's,
	// scoped to ids starting with history.FloodGhostPrefix. Empty in an
	// insecure run, which skips the attacks on credentials (an open API
	// takes any call from anyone, by design).
	Token string
	// Workers are the real workers' ids, in whose names it tries to act.
	Workers []string
	// IdleConns is how many connections it holds open; default
	// DefaultFloodIdleConns.
	IdleConns int
	Logger    hclog.Logger
}

// Flood is a careless or hostile client beside the real load, calling
// every node from an address of its own: gzip bombs and oversized bodies,
// connections that send a request's headers and never its body,
// heartbeats and acquires in the names of workers nobody registered, and
// in a secure run calls with a wrong token, admin calls with a non-admin
// token, and acquires in real workers' names. It records every call
// (flood_call) with what the node answered; none may be served.
type Flood struct {
	cfg  FloodConfig
	http *http.Client
	// idleTLS is the idle connections' TLS (HTTP/1.1), nil without TLS:
	// a copy of its own, as an http.Transport writes into the one it is
	// given.
	idleTLS *tls.Config
	scheme  string
	bomb    []byte
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	ghost      atomic.Uint64 // ghost ids handed out
	calls      atomic.Int64  // calls recorded
	served     atomic.Int64  // of which served
	dialFailed atomic.Int64  // idle connections that could not be opened
}

// StartFlood starts the flood; Stop ends it.
func StartFlood(ctx context.Context, cfg FloodConfig) (*Flood, error) {
	if cfg.Rec == nil || len(cfg.Nodes) == 0 {
		return nil, errors.New("workload: the flood needs a recorder and nodes")
	}
	if cfg.IdleConns == 0 {
		cfg.IdleConns = DefaultFloodIdleConns
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	bomb, err := gzipBomb(floodBombSize)
	if err != nil {
		return nil, err
	}
	f := &Flood{scheme: "http://", bomb: bomb}
	if cfg.TLS != nil {
		f.scheme = "https://"
		f.idleTLS = cfg.TLS.Clone()
		f.idleTLS.NextProtos = []string{"http/1.1"}
		cfg.TLS = cfg.TLS.Clone() // the flood's transport's own
	}
	f.cfg, f.http = cfg, NewHTTPClient(cfg.SourceIP, cfg.TLS)
	ctx, f.cancel = context.WithCancel(ctx)
	loops := []struct {
		every time.Duration
		step  func(context.Context, int)
	}{
		{floodBodyEvery, f.body},
		{floodGhostHBEvery, f.ghostHeartbeat},
		{floodGhostAcqEvery, f.ghostAcquire},
	}
	if f.secure() {
		loops = append(loops, []struct {
			every time.Duration
			step  func(context.Context, int)
		}{{floodWrongEvery, f.wrongToken}, {floodAdminEvery, f.adminCall}, {floodImpersonateEvery, f.impersonate}}...)
	}
	for _, l := range loops {
		f.wg.Go(func() {
			i := 0
			every(ctx, l.every, func(ctx context.Context) { l.step(ctx, i); i++ })
		})
	}
	f.wg.Go(func() { f.idleLoop(ctx) })
	return f, nil
}

// Stop ends the flood, closing its connections, and waits for it.
func (f *Flood) Stop() {
	f.cancel()
	f.wg.Wait()
	f.http.CloseIdleConnections()
	f.cfg.Logger.Info("flood stopped", "calls", f.calls.Load(), "served", f.served.Load(), "idle_dials_failed", f.dialFailed.Load())
}

func (f *Flood) secure() bool { return f.cfg.Token != "" }

func (f *Flood) node(i int) FloodTarget { return f.cfg.Nodes[i%len(f.cfg.Nodes)] }

func (f *Flood) record(c history.FloodCall) {
	f.calls.Add(1)
	if c.Served {
		f.served.Add(1)
		f.cfg.Logger.Error("flood call served", "attack", c.Attack, "node", c.Node, "cred", c.Cred, "status", c.Status)
	}
	f.cfg.Rec.Append(history.Entry{Kind: history.KindFloodCall, Process: FloodProcess, Flood: &c})
}

// authorization is the header value a credential sends ("" for none).
func (f *Flood) authorization(cred string) string {
	switch cred {
	case history.CredValid:
		return "Bearer " + f.cfg.Token
	case history.CredWrong:
		return "Bearer " + floodWrongToken
	}
	return ""
}

// Bodies.

type bodyAttack struct {
	attack, cred string
}

// body sends the i-th of the oversized bodies, with each credential in
// turn (only none in an insecure run, where there is nothing to check).
func (f *Flood) body(ctx context.Context, i int) {
	attacks := []bodyAttack{{history.FloodGzipBomb, history.CredNone}, {history.FloodOversizedDeclared, history.CredNone},
		{history.FloodOversizedStreamed, history.CredNone}}
	if f.secure() {
		attacks = []bodyAttack{
			{history.FloodGzipBomb, history.CredValid}, {history.FloodOversizedDeclared, history.CredValid},
			{history.FloodOversizedStreamed, history.CredValid}, {history.FloodGzipBomb, history.CredNone},
			{history.FloodOversizedDeclared, history.CredWrong}, {history.FloodOversizedStreamed, history.CredNone},
		}
	}
	a := attacks[i%len(attacks)]
	hdr := http.Header{"Content-Type": {"application/proto"}, "Connect-Protocol-Version": {"1"}}
	var body io.Reader
	var length int64
	switch a.attack {
	case history.FloodGzipBomb:
		hdr.Set("Content-Encoding", "gzip")
		body, length = bytes.NewReader(f.bomb), int64(len(f.bomb))
	case history.FloodOversizedDeclared:
		body, length = io.LimitReader(zeros{}, floodDeclaredSize), floodDeclaredSize
	case history.FloodOversizedStreamed:
		body, length = io.LimitReader(zeros{}, floodStreamedSize), -1
	}
	// A path the flood's credential may call (it is a worker's), so that
	// the body's bound is what refuses it.
	f.raw(ctx, f.node(i/len(attacks)), a.attack, a.cred, http.MethodPost, "/leasehold.v1.WorkerService/Heartbeat", hdr, body, length)
}

// raw makes one call by hand and records it.
func (f *Flood) raw(ctx context.Context, n FloodTarget, attack, cred, method, path string, hdr http.Header, body io.Reader, length int64) {
	ctx, cancel := context.WithTimeout(ctx, floodCallTimeout)
	defer cancel()
	c := history.FloodCall{Attack: attack, Node: n.Name, Cred: cred}
	req, err := http.NewRequestWithContext(ctx, method, f.scheme+n.Addr+path, body)
	if err != nil {
		c.Error = err.Error()
		f.record(c)
		return
	}
	req.ContentLength = length
	for k, v := range hdr {
		req.Header[k] = v
	}
	if auth := f.authorization(cred); auth != "" {
		req.Header.Set(transport.HeaderAuthorization, auth)
	}
	resp, err := f.http.Do(req)
	if err != nil {
		c.Error = shortError(err)
		f.record(c)
		return
	}
	defer resp.Body.Close()
	c.Status = resp.StatusCode
	c.Served = resp.StatusCode/100 == 2
	if !c.Served {
		c.Code, c.Reason = connectErrorOf(resp.Body)
	}
	f.record(c)
}

// connectErrorOf reads a Connect unary error body: its code and the
// API's reason from its ErrorDetail.
func connectErrorOf(body io.Reader) (code, reason string) {
	var e struct {
		Code    string `json:"code"`
		Details []struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"details"`
	}
	if err := json.NewDecoder(io.LimitReader(body, 64<<10)).Decode(&e); err != nil {
		return "", ""
	}
	for _, d := range e.Details {
		if d.Type != "leasehold.v1.ErrorDetail" {
			continue
		}
		b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil {
			continue
		}
		var ed leaseholdv1.ErrorDetail
		if proto.Unmarshal(b, &ed) == nil {
			reason = ed.GetReason()
		}
	}
	return e.Code, reason
}

// Calls through the generated clients.

func (f *Flood) interceptor(cred string) connect.Option {
	auth := f.authorization(cred)
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if auth != "" {
				req.Header().Set(transport.HeaderAuthorization, auth)
			}
			return next(ctx, req)
		}
	}))
}

// rpc makes one call through a generated client and records it.
func (f *Flood) rpc(ctx context.Context, n FloodTarget, attack, cred string, call func(ctx context.Context, base string, opt connect.Option) error) {
	ctx, cancel := context.WithTimeout(ctx, floodCallTimeout)
	defer cancel()
	c := history.FloodCall{Attack: attack, Node: n.Name, Cred: cred}
	err := call(ctx, f.scheme+n.Addr, f.interceptor(cred))
	switch {
	case err == nil:
		c.Status, c.Served = http.StatusOK, true
	default:
		c.Code = connect.CodeOf(err).String()
		if d := transport.DetailOf(err); d != nil {
			c.Reason = d.GetReason()
		} else {
			c.Error = shortError(err)
		}
	}
	f.record(c)
}

func (f *Flood) workers(base string, opt connect.Option) leaseholdv1connect.WorkerServiceClient {
	return leaseholdv1connect.NewWorkerServiceClient(f.http, base, opt)
}

func (f *Flood) nextGhost() string {
	return fmt.Sprintf("%s%d", history.FloodGhostPrefix, f.ghost.Add(1))
}

// ghostCred is what ghosts call with: the flood's own token, whose scope
// names them, or nothing in an insecure run.
func (f *Flood) ghostCred() string {
	if f.secure() {
		return history.CredValid
	}
	return history.CredNone
}

// ghostHeartbeat heartbeats as a worker nobody registered: UNKNOWN_WORKER,
// never timed, no event.
func (f *Flood) ghostHeartbeat(ctx context.Context, i int) {
	id := f.nextGhost()
	f.rpc(ctx, f.node(i), history.FloodGhostHeartbeat, f.ghostCred(), func(ctx context.Context, base string, opt connect.Option) error {
		_, err := f.workers(base, opt).Heartbeat(ctx, connect.NewRequest(&leaseholdv1.HeartbeatRequest{WorkerId: id}))
		return err
	})
}

// ghostAcquire asks for the real load's jobs as a worker nobody
// registered: were it served, a real job would go to a ghost.
func (f *Flood) ghostAcquire(ctx context.Context, i int) {
	id := f.nextGhost()
	f.rpc(ctx, f.node(i), history.FloodGhostAcquire, f.ghostCred(), func(ctx context.Context, base string, opt connect.Option) error {
		_, err := f.workers(base, opt).Acquire(ctx, connect.NewRequest(&leaseholdv1.AcquireRequest{WorkerId: id,
			RequestId: "rq-" + id, Queues: []string{QueueMain}, Max: 1}))
		return err
	})
}

// wrongToken calls what any role may call, with a token no node knows:
// UNAUTHENTICATED, and no audit record (not an admin call).
func (f *Flood) wrongToken(ctx context.Context, i int) {
	f.rpc(ctx, f.node(i), history.FloodWrongToken, history.CredWrong, func(ctx context.Context, base string, opt connect.Option) error {
		if i%2 == 0 {
			_, err := leaseholdv1connect.NewClusterServiceClient(f.http, base, opt).Status(ctx, connect.NewRequest(&leaseholdv1.StatusRequest{}))
			return err
		}
		_, err := leaseholdv1connect.NewJobServiceClient(f.http, base, opt).GetJob(ctx, connect.NewRequest(&leaseholdv1.GetJobRequest{Id: "j00001"}))
		return err
	})
}

// adminCall makes an admin-only call (removing a node no cluster has,
// moving leadership, taking a backup) with the flood's worker token or a
// wrong one: refused, and audited at the refusals' rate.
func (f *Flood) adminCall(ctx context.Context, i int) {
	cred := history.CredValid
	if (i/3)%2 == 1 {
		cred = history.CredWrong
	}
	n := f.node(i / 6)
	switch i % 3 {
	case 0:
		f.rpc(ctx, n, history.FloodAdminCall, cred, func(ctx context.Context, base string, opt connect.Option) error {
			_, err := leaseholdv1connect.NewClusterServiceClient(f.http, base, opt).RemoveNode(ctx,
				connect.NewRequest(&leaseholdv1.RemoveNodeRequest{Id: "flood-nobody"}))
			return err
		})
	case 1:
		f.rpc(ctx, n, history.FloodAdminCall, cred, func(ctx context.Context, base string, opt connect.Option) error {
			_, err := leaseholdv1connect.NewClusterServiceClient(f.http, base, opt).TransferLeadership(ctx,
				connect.NewRequest(&leaseholdv1.TransferLeadershipRequest{}))
			return err
		})
	default:
		f.raw(ctx, n, history.FloodAdminCall, cred, http.MethodGet, "/v1/snapshot", nil, nil, 0)
	}
}

// impersonate asks for leases in a real worker's name with a credential
// scoped to ghosts: PERMISSION_DENIED, audited. Its queue holds nothing,
// so even a wrong grant would take no job.
func (f *Flood) impersonate(ctx context.Context, i int) {
	if len(f.cfg.Workers) == 0 {
		return
	}
	w := f.cfg.Workers[i%len(f.cfg.Workers)]
	f.rpc(ctx, f.node(i/len(f.cfg.Workers)), history.FloodImpersonate, history.CredValid, func(ctx context.Context, base string, opt connect.Option) error {
		_, err := f.workers(base, opt).Acquire(ctx, connect.NewRequest(&leaseholdv1.AcquireRequest{WorkerId: w,
			RequestId: fmt.Sprintf("flood-rq-%d", i), Queues: []string{"flood-empty"}, Max: 1}))
		return err
	})
}

// Idle connections.

// idleLoop keeps IdleConns connections open, spread over the nodes, each
// having sent a request's headers and never its body; one the node closes
// is opened again.
func (f *Flood) idleLoop(ctx context.Context) {
	slots := make(chan struct{}, f.cfg.IdleConns)
	for i := 0; ; i++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		f.wg.Go(func() {
			defer func() { <-slots }()
			f.idle(ctx, f.node(i))
		})
	}
}

// idle holds one connection until the node answers or closes it, or the
// flood stops. A connection that cannot be opened is not recorded (its
// node is down); the slot waits a little.
func (f *Flood) idle(ctx context.Context, n FloodTarget) {
	conn, err := f.dial(ctx, n.Addr)
	if err != nil {
		if f.dialFailed.Add(1) == 1 && ctx.Err() == nil {
			f.cfg.Logger.Warn("an idle connection could not be opened; its slot waits and tries again", "node", n.Name, "error", err)
		}
		sleepCtx(ctx, floodRedial)
		return
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()
	cred := f.ghostCred() // a valid token gets past authentication to the body read
	c := history.FloodCall{Attack: history.FloodIdleConn, Node: n.Name, Cred: cred}
	var head strings.Builder
	fmt.Fprintf(&head, "POST /leasehold.v1.ClusterService/Members HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n", n.Addr)
	if auth := f.authorization(cred); auth != "" {
		fmt.Fprintf(&head, "Authorization: %s\r\n", auth)
	}
	head.WriteString("\r\n")
	start := time.Now()
	if _, err := io.WriteString(conn, head.String()); err != nil {
		if ctx.Err() != nil {
			return // stopped before it was anything
		}
		c.Error = shortError(err)
		f.record(c)
		return
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	c.HeldNs = int64(time.Since(start))
	switch {
	case ctx.Err() != nil:
		c.Error = "closed by the flood at its end"
	case err != nil:
		c.Error = shortError(err)
	default:
		c.Status = resp.StatusCode
		c.Served = resp.StatusCode/100 == 2
		if !c.Served {
			c.Code, c.Reason = connectErrorOf(resp.Body)
		}
		resp.Body.Close()
	}
	f.record(c)
}

// dial opens a connection from the flood's address, with TLS speaking
// HTTP/1.1 in a secure run.
func (f *Flood) dial(ctx context.Context, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	if f.cfg.SourceIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(f.cfg.SourceIP)}
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || f.idleTLS == nil {
		return conn, err
	}
	conf := f.idleTLS.Clone()
	if conf.ServerName == "" {
		conf.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(conn, conf)
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}

// gzipBomb is a gzip stream of n zero bytes: a few tens of KiB that
// inflate to n.
func gzipBomb(n int) ([]byte, error) {
	var z bytes.Buffer
	gz, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	chunk := make([]byte, 1<<20)
	for range n / len(chunk) {
		if _, err := gz.Write(chunk); err != nil {
			return nil, err
		}
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return z.Bytes(), nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// shortError cuts an error's text to a line.
func shortError(err error) string {
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return msg
}
