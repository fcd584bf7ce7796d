package netem

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Prefix starts the name of every namespace and interface a Netns
// creates, followed by the creating process's id in base 36 and a dash:
// leftovers of a run that died are found by it.
const Prefix = "lhj"

// NetnsAvailable reports whether this process can build a Netns: root,
// with ip and iptables on the PATH.
func NetnsAvailable() bool {
	if os.Geteuid() != 0 {
		return false
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return false
		}
	}
	return true
}

// Netns is the privileged network: node i lives in namespace
// <prefix>n<i> with address 10.231.K.(10+i) on a veth pair whose other
// end is on bridge <prefix>br, which holds the runner's address
// 10.231.K.1, worker w's 10.231.K.(100+w), the outsider's 10.231.K.250 and
// the flood's 10.231.K.249.
// Partitions are iptables DROP rules in the nodes' namespaces.
type Netns struct {
	prefix  string
	subnet  string // "10.231.K"
	nodes   int
	workers int

	mu     sync.Mutex
	rules  map[nsRule]bool
	closed bool
}

var _ Network = (*Netns)(nil)

type nsRule struct {
	node  int    // the namespace
	chain string // INPUT or OUTPUT
	peer  string // the address dropped
}

// cmdTimeout bounds one ip or iptables command.
const cmdTimeout = 20 * time.Second

// NewNetns removes what dead runs left behind, then builds the namespaces,
// the bridge and the addresses for nodes nodes and workers workers.
func NewNetns(nodes, workers int) (*Netns, error) {
	if !NetnsAvailable() {
		return nil, fmt.Errorf("netem: netns needs root, ip and iptables: %w", ErrUnsupported)
	}
	if err := CleanLeftovers(); err != nil {
		return nil, err
	}
	n := &Netns{prefix: Prefix + strconv.FormatInt(int64(os.Getpid()), 36) + "-", nodes: nodes, workers: workers, rules: map[nsRule]bool{}}
	k, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	n.subnet = fmt.Sprintf("10.231.%d", k)
	if err := n.build(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Netns) ns(i int) string      { return fmt.Sprintf("%sn%d", n.prefix, i) }
func (n *Netns) bridge() string       { return n.prefix + "br" }
func (n *Netns) hostEnd(i int) string { return fmt.Sprintf("%sv%d", n.prefix, i) }
func (n *Netns) nodeEnd(i int) string { return fmt.Sprintf("%sp%d", n.prefix, i) }
func (n *Netns) nodeIP(i int) string  { return fmt.Sprintf("%s.%d", n.subnet, 10+i) }

func (n *Netns) build() error {
	br := n.bridge()
	steps := [][]string{
		{"link", "add", br, "type", "bridge"},
		{"addr", "add", n.RunnerIP() + "/24", "dev", br},
	}
	for w := 1; w <= n.workers; w++ {
		steps = append(steps, []string{"addr", "add", n.WorkerIP(w) + "/24", "dev", br})
	}
	steps = append(steps, []string{"addr", "add", n.OutsiderIP() + "/24", "dev", br},
		[]string{"addr", "add", n.FloodIP() + "/24", "dev", br})
	steps = append(steps, []string{"link", "set", br, "up"})
	for i := 1; i <= n.nodes; i++ {
		ns, host, peer := n.ns(i), n.hostEnd(i), n.nodeEnd(i)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"link", "add", host, "type", "veth", "peer", "name", peer},
			[]string{"link", "set", peer, "netns", ns},
			[]string{"link", "set", host, "master", br},
			[]string{"link", "set", host, "up"},
			[]string{"-n", ns, "addr", "add", n.nodeIP(i) + "/24", "dev", peer},
			[]string{"-n", ns, "link", "set", peer, "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		if err := run("ip", s...); err != nil {
			return err
		}
	}
	return nil
}

func (n *Netns) Mode() string { return "netns" }
func (n *Netns) RaftBind(i int) string {
	return net.JoinHostPort(n.nodeIP(i), strconv.Itoa(RaftPort))
}
func (n *Netns) RaftAddr(i int) string { return n.RaftBind(i) }
func (n *Netns) APIBind(i int) string {
	return net.JoinHostPort(n.nodeIP(i), strconv.Itoa(APIPort))
}
func (n *Netns) APIAddr(i int) string  { return n.APIBind(i) }
func (n *Netns) WorkerIP(w int) string { return fmt.Sprintf("%s.%d", n.subnet, 100+w) }
func (n *Netns) RunnerIP() string      { return n.subnet + ".1" }
func (n *Netns) OutsiderIP() string    { return n.subnet + ".250" }
func (n *Netns) FloodIP() string       { return n.subnet + ".249" }
func (n *Netns) ListenIP() string      { return n.RunnerIP() }

// NodeCommand runs argv in node i's namespace; ip execs it, so the
// process id is the node's.
func (n *Netns) NodeCommand(i int, argv []string) []string {
	return append([]string{"ip", "netns", "exec", n.ns(i)}, argv...)
}

// addrOf is an endpoint's address.
func (n *Netns) addrOf(name string) (kind byte, i int, ip string, err error) {
	kind, i, err = parseName(name)
	if err != nil {
		return 0, 0, "", err
	}
	switch {
	case kind == 'n' && i <= n.nodes:
		return kind, i, n.nodeIP(i), nil
	case kind == 'w' && i <= n.workers:
		return kind, i, n.WorkerIP(i), nil
	case kind == 'r':
		return kind, 0, n.RunnerIP(), nil
	}
	return 0, 0, "", fmt.Errorf("netem: no endpoint %q in this network", name)
}

// rule is the DROP rule that blocks from→to: in the receiving node's
// INPUT chain, or when the receiver is not a node, the sender's OUTPUT.
func (n *Netns) rule(from, to string) (nsRule, error) {
	kf, fi, fip, err := n.addrOf(from)
	if err != nil {
		return nsRule{}, err
	}
	kt, ti, tip, err := n.addrOf(to)
	if err != nil {
		return nsRule{}, err
	}
	switch {
	case kt == 'n':
		return nsRule{node: ti, chain: "INPUT", peer: fip}, nil
	case kf == 'n':
		return nsRule{node: fi, chain: "OUTPUT", peer: tip}, nil
	}
	return nsRule{}, fmt.Errorf("netem: link %s→%s: %w (neither end is a node)", from, to, ErrUnsupported)
}

func (r nsRule) args(op string) []string {
	dir := "-s"
	if r.chain == "OUTPUT" {
		dir = "-d"
	}
	return []string{"-w", op, r.chain, dir, r.peer, "-j", "DROP"}
}

func (n *Netns) Block(from, to string) error {
	r, err := n.rule(from, to)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.rules[r] {
		return nil
	}
	if err := run("ip", append([]string{"netns", "exec", n.ns(r.node), "iptables"}, r.args("-A")...)...); err != nil {
		return err
	}
	n.rules[r] = true
	return nil
}

func (n *Netns) Unblock(from, to string) error {
	r, err := n.rule(from, to)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.rules[r] {
		return nil
	}
	if err := run("ip", append([]string{"netns", "exec", n.ns(r.node), "iptables"}, r.args("-D")...)...); err != nil {
		return err
	}
	delete(n.rules, r)
	return nil
}

// Shape is not available: the kernel here has no netem, and a proxy in
// front of a namespace would hide who is talking from iptables.
func (n *Netns) Shape(from, to string, delay, jitter time.Duration, loss float64) error {
	if delay == 0 && jitter == 0 && loss == 0 {
		return nil
	}
	return fmt.Errorf("netem: delay and loss in netns mode: %w (use --net proxy)", ErrUnsupported)
}

func (n *Netns) HealAll() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for i := 1; i <= n.nodes; i++ {
		for _, chain := range []string{"INPUT", "OUTPUT"} {
			errs = append(errs, run("ip", "netns", "exec", n.ns(i), "iptables", "-w", "-F", chain))
		}
	}
	clear(n.rules)
	return errors.Join(errs...)
}

// Close deletes the namespaces (and with them the veth pairs) and the
// bridge. It is safe to call twice.
func (n *Netns) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	return removeOwned(n.prefix)
}

// CleanLeftovers removes namespaces and interfaces of runs whose process
// is gone.
func CleanLeftovers() error {
	owners := map[string]bool{}
	nss, links, err := ownedNames()
	if err != nil {
		return err
	}
	for _, name := range append(nss, links...) {
		if pfx, pid, ok := ownerOf(name); ok && !alive(pid) {
			owners[pfx] = true
		}
	}
	var errs []error
	for pfx := range owners {
		errs = append(errs, removeOwned(pfx))
	}
	return errors.Join(errs...)
}

var ownedRe = regexp.MustCompile(`^(` + Prefix + `([0-9a-z]+)-)(?:n\d+|br|v\d+|p\d+)$`)

// ownerOf splits a name this package made into its run's prefix and pid.
func ownerOf(name string) (prefix string, pid int, ok bool) {
	m := ownedRe.FindStringSubmatch(name)
	if m == nil {
		return "", 0, false
	}
	p, err := strconv.ParseInt(m[2], 36, 64)
	if err != nil {
		return "", 0, false
	}
	return m[1], int(p), true
}

// ownedNames lists namespaces and links whose names start with Prefix.
func ownedNames() (nss, links []string, err error) {
	out, err := output("ip", "netns", "list")
	if err != nil {
		return nil, nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], Prefix) {
			nss = append(nss, f[0])
		}
	}
	out, err = output("ip", "-o", "link", "show")
	if err != nil {
		return nil, nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, Prefix) {
			links = append(links, name)
		}
	}
	return nss, links, nil
}

// removeOwned deletes every namespace and link of one run's prefix.
func removeOwned(prefix string) error {
	mine := func(name string) bool { p, _, ok := ownerOf(name); return ok && p == prefix }
	nss, _, err := ownedNames()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range nss {
		if mine(name) {
			errs = append(errs, run("ip", "netns", "del", name))
		}
	}
	// Deleting a namespace takes its veth pairs with it; what is left is
	// the bridge and any host end whose peer never moved. The kernel
	// removes the pairs after `ip netns del` returns, so a host end listed
	// here may be gone by the time it is deleted: that is no error.
	_, links, err := ownedNames()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, name := range links {
		if mine(name) {
			if err := run("ip", "link", "del", name); err != nil && linkExists(name) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// linkExists reports whether a network interface called name exists.
func linkExists(name string) bool {
	return run("ip", "link", "show", "dev", name) == nil
}

// freeSubnet picks K so that 10.231.K.0/24 is on no interface.
func freeSubnet() (int, error) {
	addrs, err := output("ip", "-o", "addr", "show")
	if err != nil {
		return 0, err
	}
	start := os.Getpid()%250 + 1
	for d := range 250 {
		k := (start+d)%250 + 1
		if !strings.Contains(addrs, fmt.Sprintf(" 10.231.%d.", k)) {
			return k, nil
		}
	}
	return 0, errors.New("netem: no free 10.231.K.0/24")
}

func run(name string, args ...string) error {
	_, err := output(name, args...)
	return err
}

func output(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("netem: %s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
