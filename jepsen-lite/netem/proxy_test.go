package netem

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(echoHelper())
	}
	goleak.VerifyTestMain(m)
}

// echoServer echoes every line it gets, and reports each on got.
type echoServer struct {
	ln  net.Listener
	got chan string
}

func newEchoServer(t *testing.T, addr string) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln, got: make(chan string, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					s.got <- line
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return s
}

// proxied is a client connection through a proxy to an echo server.
type proxied struct {
	t     *testing.T
	links *Links
	echo  *echoServer
	conn  net.Conn
	r     *bufio.Reader
}

func newProxied(t *testing.T) *proxied {
	t.Helper()
	echo := newEchoServer(t, "127.0.0.1:0")
	links := NewLinks(1, 50*time.Millisecond)
	p, err := NewProxy("127.0.0.1:0", echo.ln.Addr().String(), "n1", func(string) string { return "w1" }, links)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &proxied{t: t, links: links, echo: echo, conn: c, r: bufio.NewReader(c)}
}

func (p *proxied) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.conn, line+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

// reply reads one echoed line, waiting at most bound.
func (p *proxied) reply(bound time.Duration) (string, error) {
	p.conn.SetReadDeadline(time.Now().Add(bound))
	defer p.conn.SetReadDeadline(time.Time{})
	line, err := p.r.ReadString('\n')
	if len(line) > 0 {
		line = line[:len(line)-1]
	}
	return line, err
}

const (
	bound   = 10 * time.Second       // waiting for something that must happen
	silence = 150 * time.Millisecond // watching for something that must not
)

func TestProxyForwards(t *testing.T) {
	p := newProxied(t)
	p.send("ping")
	if got, err := p.reply(bound); err != nil || got != "ping" {
		t.Fatalf("reply %q, %v", got, err)
	}
}

// A cut holds everything back, in both directions when both are cut, and
// delivers what it held once healed (as TCP retransmits after a
// partition).
func TestProxyCutAndHeal(t *testing.T) {
	p := newProxied(t)
	p.links.Block("w1", "n1")
	p.links.Block("n1", "w1")
	p.send("held")
	if got, err := p.reply(silence); !isTimeout(err) {
		t.Fatalf("through a cut: %q, %v", got, err)
	}
	select {
	case line := <-p.echo.got:
		t.Fatalf("the server got %q through a cut", line)
	default:
	}
	p.links.HealAll()
	if got, err := p.reply(bound); err != nil || got != "held" {
		t.Fatalf("after the heal: %q, %v", got, err)
	}
}

// A one-way cut: what the client sends arrives, the answer does not until
// the link back heals.
func TestProxyOneWay(t *testing.T) {
	p := newProxied(t)
	p.links.Block("n1", "w1")
	p.send("one-way")
	if line := recvWithin(t, p.echo.got, bound); line != "one-way\n" {
		t.Fatalf("server got %q", line)
	}
	if got, err := p.reply(silence); !isTimeout(err) {
		t.Fatalf("answer through a cut: %q, %v", got, err)
	}
	p.links.Unblock("n1", "w1")
	if got, err := p.reply(bound); err != nil || got != "one-way" {
		t.Fatalf("after unblocking: %q, %v", got, err)
	}
}

// Delay holds each chunk back; loss adds a retransmission timeout.
func TestProxyDelayAndLoss(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape Shaping
		least time.Duration
	}{
		{"delay", Shaping{Delay: 120 * time.Millisecond}, 120 * time.Millisecond},
		{"loss", Shaping{Loss: 1}, 50 * time.Millisecond}, // the test's RTO
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxied(t)
			p.links.Shape("w1", "n1", tc.shape)
			start := time.Now()
			p.send("slow")
			if got, err := p.reply(bound); err != nil || got != "slow" {
				t.Fatalf("reply %q, %v", got, err)
			}
			if rtt := time.Since(start); rtt < tc.least {
				t.Fatalf("round trip %v, want at least %v", rtt, tc.least)
			}
			p.links.Shape("w1", "n1", Shaping{})
			start = time.Now()
			p.send("fast")
			if got, err := p.reply(bound); err != nil || got != "fast" {
				t.Fatalf("reply %q, %v", got, err)
			}
		})
	}
}

// Chunks keep their order whatever their delays.
func TestProxyKeepsOrderUnderJitter(t *testing.T) {
	p := newProxied(t)
	p.links.Shape("w1", "n1", Shaping{Jitter: 30 * time.Millisecond, Loss: 0.3})
	want := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, s := range want {
		p.send(s)
	}
	for _, s := range want {
		if got, err := p.reply(bound); err != nil || got != s {
			t.Fatalf("got %q (%v), want %q", got, err, s)
		}
	}
}

func TestProxyCloseCutsConnections(t *testing.T) {
	echo := newEchoServer(t, "127.0.0.1:0")
	p, err := NewProxy("127.0.0.1:0", echo.ln.Addr().String(), "n1", func(string) string { return "w1" }, NewLinks(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	io.WriteString(c, "x\n")
	recvWithin(t, echo.got, bound)
	// Read the echo back first: it may already be on its way through the
	// proxy, and the read below must see only what Close does.
	c.SetReadDeadline(time.Now().Add(bound))
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("echo: %v", err)
	}
	p.links.Block("n1", "w1") // a held connection must not keep Close waiting
	io.WriteString(c, "y\n")
	recvWithin(t, echo.got, bound) // its echo is held back by the block
	p.Close()
	c.SetReadDeadline(time.Now().Add(bound))
	if _, err := r.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("read after Close: %v, want the connection cut", err)
	}
}

func TestProxyNetAddressesAndLinks(t *testing.T) {
	n, err := NewProxyNet(3, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	seen := map[string]bool{}
	for i := 1; i <= 3; i++ {
		for _, a := range []string{n.RaftBind(i), n.RaftAddr(i), n.APIBind(i), n.APIAddr(i)} {
			if seen[a] {
				t.Fatalf("address %s used twice", a)
			}
			seen[a] = true
		}
		if got := n.identify(hostOf(n.RaftBind(i))); got != NodeName(i) {
			t.Fatalf("node %d's address names %q", i, got)
		}
	}
	if n.identify(n.WorkerIP(2)) != "w2" || n.identify(n.RunnerIP()) != Runner || n.identify("127.0.0.1") != "" {
		t.Fatalf("identify: worker %q runner %q other %q", n.identify(n.WorkerIP(2)), n.identify(n.RunnerIP()), n.identify("127.0.0.1"))
	}
	if err := n.Block("w1", Runner); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("blocking two non-nodes: %v", err)
	}
	if err := n.Block("x9", "n1"); err == nil {
		t.Fatalf("an unknown endpoint was accepted")
	}

	// Through node 1's Raft proxy, from node 2's own address.
	echo := newEchoServer(t, n.RaftBind(1))
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(hostOf(n.RaftBind(2)))}}
	c, err := d.Dial("tcp", n.RaftAddr(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := n.Block("n2", "n1"); err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "vote\n")
	select {
	case line := <-echo.got:
		t.Fatalf("n1 heard %q from n2 through a cut", line)
	case <-time.After(silence):
	}
	n.HealAll()
	if line := recvWithin(t, echo.got, bound); line != "vote\n" {
		t.Fatalf("n1 heard %q", line)
	}
}

func recvWithin[T any](t *testing.T, ch <-chan T, d time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("nothing within %v", d)
		panic("unreachable")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
