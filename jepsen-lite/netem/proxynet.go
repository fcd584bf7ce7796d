package netem

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"
)

// Ports every node uses (each node has addresses of its own).
const (
	RaftPort = 7711
	APIPort  = 7701
)

// ProxyNet is the unprivileged network: nodes on loopback addresses of
// their own, behind proxies. Within 127.A.0.0/16 (A picked at random):
// the runner is 127.A.0.1, node i binds 127.A.1.(10+i) and is dialed at
// its proxies on 127.A.2.(10+i), worker w dials from 127.A.3.(10+w), and
// the outsider has 127.A.4.1 and the flood 127.A.5.1 (the proxies know
// neither: their links are never broken).
type ProxyNet struct {
	a       int
	links   *Links
	proxies []*Proxy
}

var _ Network = (*ProxyNet)(nil)

// NewProxyNet starts the proxies of nodes nodes; seed drives jitter and
// loss; rto is how long a lost chunk waits (DefaultRTO if zero).
func NewProxyNet(nodes int, seed uint64, rto time.Duration) (*ProxyNet, error) {
	rng := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
	var lastErr error
	for range 20 {
		n := &ProxyNet{a: 20 + rng.IntN(230), links: NewLinks(seed, rto)}
		if err := n.start(nodes); err != nil {
			lastErr = err
			continue
		}
		return n, nil
	}
	return nil, fmt.Errorf("netem: no free loopback block for the proxies: %w", lastErr)
}

func (n *ProxyNet) start(nodes int) error {
	for i := 1; i <= nodes; i++ {
		// The node's own ports must be free too.
		for _, a := range []string{n.RaftBind(i), n.APIBind(i)} {
			ln, err := net.Listen("tcp", a)
			if err != nil {
				n.Close()
				return err
			}
			ln.Close()
		}
		for _, pair := range [][2]string{{n.RaftAddr(i), n.RaftBind(i)}, {n.APIAddr(i), n.APIBind(i)}} {
			p, err := NewProxy(pair[0], pair[1], NodeName(i), n.identify, n.links)
			if err != nil {
				n.Close()
				return err
			}
			n.proxies = append(n.proxies, p)
		}
	}
	return nil
}

func (n *ProxyNet) ip(c, d int) string { return fmt.Sprintf("127.%d.%d.%d", n.a, c, d) }

func (n *ProxyNet) Mode() string { return "proxy" }
func (n *ProxyNet) RaftBind(i int) string {
	return net.JoinHostPort(n.ip(1, 10+i), strconv.Itoa(RaftPort))
}
func (n *ProxyNet) APIBind(i int) string {
	return net.JoinHostPort(n.ip(1, 10+i), strconv.Itoa(APIPort))
}
func (n *ProxyNet) RaftAddr(i int) string {
	return net.JoinHostPort(n.ip(2, 10+i), strconv.Itoa(RaftPort))
}
func (n *ProxyNet) APIAddr(i int) string {
	return net.JoinHostPort(n.ip(2, 10+i), strconv.Itoa(APIPort))
}
func (n *ProxyNet) WorkerIP(w int) string                     { return n.ip(3, 10+w) }
func (n *ProxyNet) RunnerIP() string                          { return n.ip(0, 1) }
func (n *ProxyNet) ListenIP() string                          { return n.ip(0, 1) }
func (n *ProxyNet) OutsiderIP() string                        { return n.ip(4, 1) }
func (n *ProxyNet) FloodIP() string                           { return n.ip(5, 1) }
func (n *ProxyNet) NodeCommand(_ int, argv []string) []string { return argv }

// identify names a source address.
func (n *ProxyNet) identify(ip string) string {
	f := strings.Split(ip, ".")
	if len(f) != 4 || f[0] != "127" || f[1] != strconv.Itoa(n.a) {
		return ""
	}
	c, _ := strconv.Atoi(f[2])
	d, _ := strconv.Atoi(f[3])
	switch {
	case c == 0 && d == 1:
		return Runner
	case c == 1 && d > 10:
		return NodeName(d - 10)
	case c == 3 && d > 10:
		return WorkerName(d - 10)
	}
	return ""
}

func (n *ProxyNet) Block(from, to string) error {
	if err := checkPair(from, to); err != nil {
		return err
	}
	n.links.Block(from, to)
	return nil
}

func (n *ProxyNet) Unblock(from, to string) error {
	if err := checkPair(from, to); err != nil {
		return err
	}
	n.links.Unblock(from, to)
	return nil
}

func (n *ProxyNet) Shape(from, to string, delay, jitter time.Duration, loss float64) error {
	if err := checkPair(from, to); err != nil {
		return err
	}
	n.links.Shape(from, to, Shaping{Delay: delay, Jitter: jitter, Loss: loss})
	return nil
}

func (n *ProxyNet) HealAll() error {
	n.links.HealAll()
	return nil
}

func (n *ProxyNet) Close() error {
	n.links.HealAll()
	var errs []error
	for _, p := range n.proxies {
		errs = append(errs, p.Close())
	}
	n.proxies = nil
	return errors.Join(errs...)
}

// checkPair accepts a link between two endpoints, at least one a node
// (only nodes sit behind proxies or in namespaces).
func checkPair(from, to string) error {
	kf, _, err := parseName(from)
	if err != nil {
		return err
	}
	kt, _, err := parseName(to)
	if err != nil {
		return err
	}
	if kf != 'n' && kt != 'n' {
		return fmt.Errorf("netem: link %s→%s: %w (neither end is a node)", from, to, ErrUnsupported)
	}
	return nil
}
