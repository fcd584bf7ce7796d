package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/localcluster"
	"github.com/leasehold/leasehold/internal/testbin"
	"github.com/leasehold/leasehold/internal/testwait"
)

// raftTimingsTOML is each test node's config file: Raft timeouts can only
// be set there, and fast ones keep elections short.
const raftTimingsTOML = `# leasehold e2e test node
[raft]
heartbeat_timeout = "300ms"
election_timeout = "300ms"
leader_lease_timeout = "150ms"
`

type node struct {
	i                     int // in the launcher's cluster
	id, apiAddr, raftAddr string
	c                     *cluster
}

// kill is SIGKILL, as a crash: no handover, no cleanup.
func (n *node) kill(t testing.TB) {
	t.Helper()
	if err := n.c.lc.Kill(n.i); err != nil {
		t.Fatal(err)
	}
}

// exited reports whether the node's process has exited.
func (n *node) exited() bool { return n.c.lc.Exited(n.i) }

// log is the tail of the node's output.
func (n *node) log() string { return n.c.lc.Log(n.i) }

// cluster is n `leasehold server` processes on loopback, started by the
// launcher every local cluster uses.
type cluster struct {
	lc    *localcluster.Cluster
	nodes []*node
	// stateHome is the workers' XDG_STATE_HOME: a worker restarted with
	// the same id finds its state directory again.
	stateHome string
	token     string // the CLI's bearer token, when auth is on
	// binOf names the binary a node runs ("" or nil: the one under test).
	binOf func(id string) string
}

// startCluster starts n servers (1 or 3) with fast timings and waits until
// they agree on a ready leader. Extra server flags come last, so they
// override the timings.
func startCluster(t testing.TB, n int, extra ...string) *cluster {
	t.Helper()
	return startClusterWith(t, n, "", "", extra...)
}

// startClusterWith is startCluster with more TOML in every node's config
// file, and the CLI's bearer token.
func startClusterWith(t testing.TB, n int, toml, token string, extra ...string) *cluster {
	t.Helper()
	return startClusterOf(t, &cluster{stateHome: t.TempDir(), token: token}, n, toml, extra...)
}

// startClusterOf starts the servers of c, killed when the test ends.
func startClusterOf(t testing.TB, c *cluster, n int, toml string, extra ...string) *cluster {
	t.Helper()
	args := append([]string{"--renew-seconds", "0.2", "--grace-seconds", "2", "--toleration-seconds", "4"}, extra...)
	lc, err := localcluster.Start(t.Context(), localcluster.Options{Binary: testbin.Leasehold(t), BinaryOf: c.binOf, Nodes: n,
		Dir: t.TempDir(), Config: raftTimingsTOML + toml, Args: args, ReadyTimeout: testwait.Bound(readyBound)})
	if err != nil {
		t.Fatal(err)
	}
	c.lc = lc
	testbin.KillAtEnd(t, lc)
	for i, id := range lc.NodeIDs() {
		c.nodes = append(c.nodes, &node{i: i, id: id, apiAddr: lc.Endpoints()[i], raftAddr: lc.RaftAddrs()[i], c: c})
	}
	return c
}

// endpoints lists every node's API address, comma separated.
func (c *cluster) endpoints() string {
	var eps []string
	for _, n := range c.nodes {
		eps = append(eps, n.apiAddr)
	}
	return strings.Join(eps, ",")
}

// env is the CLI's environment for this cluster: LEASEHOLD_ENDPOINTS, the
// bearer token when auth is on, and the workers' XDG_STATE_HOME.
func (c *cluster) env() []string {
	env := append(baseEnv(), "LEASEHOLD_ENDPOINTS="+c.endpoints(), "XDG_STATE_HOME="+c.stateHome)
	if c.token != "" {
		env = append(env, "LEASEHOLD_TOKEN="+c.token)
	}
	return env
}

// cli runs a command that must succeed against the cluster.
func (c *cluster) cli(t testing.TB, args ...string) string {
	t.Helper()
	return mustCLI(t, c.env(), args...)
}

func (c *cluster) node(id string) *node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// statusJSON is `cluster status -o json`, the fields the tests read.
type statusJSON struct {
	NodeID    string `json:"node_id"`
	State     string `json:"state"`
	Term      uint64 `json:"term"`
	LeaderID  string `json:"leader_id"`
	LeaderAPI string `json:"leader_api"`
	Ready     bool   `json:"ready"`
}

// status is one node's own view (cluster status is answered by the node
// asked, without retries).
func status(t testing.TB, apiAddr string, env ...string) (statusJSON, error) {
	t.Helper()
	r := runCLI(t, append(baseEnv(), env...), "--endpoints", apiAddr, "--timeout", "2s", "cluster", "status", "-o", "json")
	if r.code != 0 {
		return statusJSON{}, fmt.Errorf("cluster status at %s: exit %d: %s", apiAddr, r.code, strings.TrimSpace(r.stderr))
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		return st, fmt.Errorf("cluster status at %s: %v: %s", apiAddr, err, r.stdout)
	}
	return st, nil
}

// waitReady waits until every node the test did not kill is ready and names
// the same leader, one of them, and returns that leader. A node that exited
// on its own fails the test at once.
func (c *cluster) waitReady(t testing.TB) *node {
	t.Helper()
	i, err := c.lc.WaitReady(testwait.Context(t, readyBound))
	if err != nil {
		t.Fatal(err)
	}
	return c.nodes[i]
}

// jobJSON is `job get -o json`.
type jobJSON struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Queue    string `json:"queue"`
	Kind     string `json:"kind"`
	Attempts uint32 `json:"attempts"`
	Token    uint64 `json:"token,string"`
	Worker   string `json:"worker"`
	Outcome  string `json:"outcome"`
	Ref      string `json:"ref"`
	Reason   string `json:"reason"`
	Payload  string `json:"payload"`
	// PayloadBase64 is there instead for a payload that is not UTF-8.
	PayloadBase64 string `json:"payload_base64"`
	// NotBefore: RFC 3339 with nanoseconds, empty when the job runs at once.
	NotBefore string      `json:"not_before"`
	Leases    []leaseJSON `json:"leases"`
	// Progress is the live lease's latest note, ProgressAt when the leader
	// heard it (RFC 3339).
	Progress   string `json:"progress"`
	ProgressAt string `json:"progress_at"`
	Timeout    string `json:"timeout"`
}

type leaseJSON struct {
	Token     uint64 `json:"token,string"`
	JobID     string `json:"job_id"`
	Worker    string `json:"worker"`
	State     string `json:"state"`
	Revoke    string `json:"revoke"`
	Outcome   string `json:"outcome"`
	Ref       string `json:"ref"`
	Message   string `json:"message"`
	GrantedAt string `json:"granted_at"`
	EndedAt   string `json:"ended_at"`
	TimedOut  bool   `json:"timed_out"`
}

// job reads a job with `job get -o json ID`.
func (c *cluster) job(t testing.TB, id string) jobJSON {
	t.Helper()
	var j jobJSON
	decodeJSON(t, "job get "+id, c.cli(t, "job", "get", "-o", "json", id), &j)
	return j
}

// waitJob waits until the job is in state and returns it.
func (c *cluster) waitJob(t testing.TB, id, state string) jobJSON {
	t.Helper()
	var j jobJSON
	waitFor(t, jobBound, "job "+id+" "+state, func() error {
		if j = c.job(t, id); j.State != state {
			return fmt.Errorf("state %s", j.State)
		}
		return nil
	})
	return j
}

// startWorker runs `leasehold worker run ARGS` against the cluster. At
// cleanup it gets SIGTERM first, so it stops its command (give it a short
// --kill-after and --drain) before SIGKILL.
func (c *cluster) startWorker(t testing.TB, id string, args ...string) *proc {
	t.Helper()
	return c.startWorkerEnv(t, id, nil, args...)
}

// startWorkerEnv is startWorker with more environment variables, which
// win over the cluster's.
func (c *cluster) startWorkerEnv(t testing.TB, id string, env []string, args ...string) *proc {
	t.Helper()
	return startProc(t, "worker "+id, workerGrace, append(c.env(), env...), append([]string{"worker", "run", "--id", id}, args...)...)
}
