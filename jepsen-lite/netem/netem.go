package netem

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Runner is the name of the runner's endpoint.
const Runner = "runner"

// ErrUnsupported: the network cannot inject this fault.
var ErrUnsupported = errors.New("not supported by this network")

// Network places the processes of a run and breaks the links between them.
// Its methods are safe for concurrent use.
type Network interface {
	// Mode is "netns" or "proxy".
	Mode() string
	// RaftBind and APIBind are the addresses node i (1-based) binds;
	// RaftAddr and APIAddr the ones everyone else dials.
	RaftBind(i int) string
	RaftAddr(i int) string
	APIBind(i int) string
	APIAddr(i int) string
	// WorkerIP is the source address worker process w (1-based) dials
	// from; RunnerIP the runner's. ListenIP is where the runner serves
	// workers (the sinks), reachable from every worker.
	WorkerIP(w int) string
	RunnerIP() string
	ListenIP() string
	// OutsiderIP is an address no member has, for the outsider nemesis:
	// it dials the nodes from it and listens on it (its own peer port and
	// a capture server), and every node can reach it.
	OutsiderIP() string
	// FloodIP is another address no member has, for the flood: it calls
	// the nodes' APIs from it, so its connections count against a host
	// of their own, and no fault ever cuts it off.
	FloodIP() string
	// NodeCommand returns the command line that runs argv as node i, in
	// its place on the network.
	NodeCommand(i int, argv []string) []string

	// Block drops everything sent from one endpoint to another (one
	// direction); Unblock undoes it. Blocking twice is blocking once.
	Block(from, to string) error
	Unblock(from, to string) error
	// Shape delays (plus up to jitter) and loses (holds back for a
	// retransmission timeout, with probability loss) what from sends to
	// to. Zero values undo it. ErrUnsupported where it cannot.
	Shape(from, to string, delay, jitter time.Duration, loss float64) error
	// HealAll undoes every Block and Shape.
	HealAll() error
	// Close heals and tears down everything the network created.
	Close() error
}

// NodeName names node i (1-based); WorkerName worker process w.
func NodeName(i int) string   { return "n" + strconv.Itoa(i) }
func WorkerName(w int) string { return "w" + strconv.Itoa(w) }

// parseName splits "n3" into ('n', 3).
func parseName(name string) (kind byte, i int, err error) {
	if name == Runner {
		return 'r', 0, nil
	}
	if len(name) < 2 || (name[0] != 'n' && name[0] != 'w') {
		return 0, 0, fmt.Errorf("netem: unknown endpoint %q", name)
	}
	i, err = strconv.Atoi(name[1:])
	if err != nil || i < 1 {
		return 0, 0, fmt.Errorf("netem: unknown endpoint %q", name)
	}
	return name[0], i, nil
}

// hostOf returns the host of host:port.
func hostOf(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return addr[:i]
	}
	return addr
}
