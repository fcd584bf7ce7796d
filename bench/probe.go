package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// probe reads a node's plain HTTP endpoints: /metrics and the profiles.
type probe struct {
	http   *http.Client
	scheme string
	token  string
}

func (p *probe) get(ctx context.Context, addr, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.scheme+"://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	return p.http.Do(req)
}

// nodeMetrics are the counters of /metrics the bench reads.
type nodeMetrics struct {
	logWrites  uint64 // leasehold_raft_log_writes_total: batches fsynced
	logEntries uint64 // leasehold_raft_log_entries_total
	leader     bool   // leasehold_leader
	term       uint64 // leasehold_raft_term
	// mallocs is go_memstats_mallocs_total, the heap objects the process
	// has allocated: per op, a figure a busy host does not blur.
	mallocs   uint64
	mallocsOK bool
	// started is process_start_time_seconds: a change between two reads
	// is a restart, which started every count again.
	started float64
	// peers are the series this node keeps per follower while it leads,
	// by their labels: the AppendEntries RPCs it sent, heartbeats
	// (leasehold_raft_replication_heartbeat_count) and appends
	// (leasehold_raft_replication_append_entries_rpc, timed).
	peers map[string]*peerSeries
	// timed are two more of the leader's timings: an entry's commit
	// (leasehold_raft_commit_time) and a write of its own log with its
	// sync (leasehold_log_store_write_seconds). With the appends' time
	// they say where a commit's time goes.
	timed [2]timing
}

// peerSeries are a leader's series for one follower.
type peerSeries struct {
	beats   uint64
	appends timing
}

// timing is a histogram's sum (in milliseconds) and count.
type timing struct {
	sum float64
	n   uint64
}

// The timings of nodeMetrics.timed.
const (
	timedCommit = iota
	timedLogWrite
)

func (p *probe) metrics(ctx context.Context, addr string) (nodeMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := p.get(ctx, addr, "/metrics")
	if err != nil {
		return nodeMetrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nodeMetrics{}, fmt.Errorf("/metrics at %s: %s", addr, resp.Status)
	}
	return parseMetrics(io.LimitReader(resp.Body, 1<<20))
}

// parseMetrics reads the Prometheus text format, the samples it needs.
func parseMetrics(r io.Reader) (nodeMetrics, error) {
	var m nodeMetrics
	found := 0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || f < 0 {
			continue
		}
		v := uint64(f) // the text format may write a large count as 1.234e+06
		switch name {
		case "leasehold_raft_log_writes_total":
			m.logWrites = v
			found++
		case "leasehold_raft_log_entries_total":
			m.logEntries = v
		case "leasehold_leader":
			m.leader = v == 1
		case "leasehold_raft_term":
			m.term = v
		case "go_memstats_mallocs_total":
			m.mallocs, m.mallocsOK = v, true
		case "process_start_time_seconds":
			m.started = f
		case "leasehold_raft_commit_time_sum":
			m.timed[timedCommit].sum = f
		case "leasehold_raft_commit_time_count":
			m.timed[timedCommit].n = v
		case "leasehold_log_store_write_seconds_sum":
			m.timed[timedLogWrite].sum = f * 1000
		case "leasehold_log_store_write_seconds_count":
			m.timed[timedLogWrite].n = v
		default:
			// One series a follower, labelled by its id (the older
			// unlabelled names, one a follower too, are left out).
			family, labels, ok := strings.Cut(name, "{")
			if !ok {
				continue
			}
			labels = strings.TrimSuffix(labels, "}")
			peer := func() *peerSeries {
				if m.peers == nil {
					m.peers = map[string]*peerSeries{}
				}
				ps := m.peers[labels]
				if ps == nil {
					ps = &peerSeries{}
					m.peers[labels] = ps
				}
				return ps
			}
			switch family {
			case "leasehold_raft_replication_heartbeat_count":
				peer().beats = v
			case "leasehold_raft_replication_append_entries_rpc_count":
				peer().appends.n = v
			case "leasehold_raft_replication_append_entries_rpc_sum":
				peer().appends.sum = f
			}
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if found == 0 {
		return m, fmt.Errorf("/metrics: no leasehold_raft_log_writes_total")
	}
	return m, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times. Linux fixes it
// at 100 on every architecture Go supports.
const clockTicks = 100

// procCPU returns the user+system CPU time a process has used, from
// /proc/PID/stat (fields 14 and 15, counted after the command name, which
// may itself contain spaces and parentheses).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// procSyscalls returns the read and write system calls a process has made,
// from /proc/PID/io (syscr, syscw: read, readv, pread and their writing
// kin, sockets included).
func procSyscalls(pid int) (reads, writes uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0, err
	}
	var seen int
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok || k != "syscr" && k != "syscw" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/io: %s %q", pid, k, v)
		}
		if k == "syscr" {
			reads = n
		} else {
			writes = n
		}
		seen++
	}
	if seen != 2 {
		return 0, 0, fmt.Errorf("/proc/%d/io: no syscr and syscw", pid)
	}
	return reads, writes, nil
}

// hostCPU is the CPU time every process on the machine has used since boot
// (/proc/stat's first line, all but idle and iowait): with the servers' and
// the bench's own, it shows how much else ran during a window.
func hostCPU() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, false
	}
	var busy uint64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, false
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks, true
}
