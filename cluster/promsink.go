package cluster

import (
	"strings"
	"sync"
	"time"
	"unicode"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Raft and raft-wal report their own measurements (commit time, FSM apply
// time, last contact, log store appends, ...) to go-metrics' process-wide
// instance. processMetrics bridges it into a Prometheus registry, with the
// Go runtime's and the process's collectors: facts of the process, not of
// one node. A process runs one node, except in tests, where these are
// shared by the nodes it runs.
var processMetrics struct {
	once sync.Once
	reg  *prometheus.Registry
}

// processGatherer installs the bridge once, before the first node opens its
// stores (raft-wal captures the go-metrics instance when it opens).
func processGatherer() prometheus.Gatherer {
	processMetrics.once.Do(func() {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		// A measurement not updated for a minute disappears, as Raft's
		// per-peer series of a removed peer should.
		opts := gmprom.PrometheusOpts{Registerer: reg, Expiration: time.Minute}
		for _, d := range raftHelp {
			name := append([]string{"leasehold"}, strings.Split(d.key, ".")...)
			switch d.kind {
			case 's':
				opts.SummaryDefinitions = append(opts.SummaryDefinitions, gmprom.SummaryDefinition{Name: name, Help: d.help})
			case 'c':
				opts.CounterDefinitions = append(opts.CounterDefinitions, gmprom.CounterDefinition{Name: name, Help: d.help})
			case 'g':
				opts.GaugeDefinitions = append(opts.GaugeDefinitions, gmprom.GaugeDefinition{Name: name, Help: d.help})
			}
		}
		sink, err := gmprom.NewPrometheusSinkFrom(opts)
		if err == nil {
			cfg := gometrics.DefaultConfig("leasehold")
			cfg.EnableHostname, cfg.EnableHostnameLabel, cfg.EnableServiceLabel = false, false, false
			cfg.EnableRuntimeMetrics = false // the Go collector has them
			_, _ = gometrics.NewGlobal(cfg, snakeSink{sink})
		}
		processMetrics.reg = reg
	})
	return processMetrics.reg
}

// raftHelp is the HELP of Raft's and raft-wal's main measurements (by
// their snake-case keys; Raft reports times in milliseconds). A family not
// listed here has its name as its HELP.
var raftHelp = []struct {
	kind byte // 's'ummary, 'c'ounter, 'g'auge
	key  string
	help string
}{
	{'s', "raft.commit_time", "Leader: milliseconds from appending an entry to its commit by a quorum."},
	{'s', "raft.fsm.apply", "Milliseconds the state machine took to apply a committed entry."},
	{'s', "raft.fsm.enqueue", "Milliseconds to hand a batch of committed entries to the state machine."},
	{'s', "raft.leader.dispatch_log", "Leader: milliseconds to write a batch of entries to its own log."},
	{'s', "raft.leader.last_contact", "Leader: milliseconds since it last heard from each follower, sampled."},
	{'g', "raft.commit_num_logs", "Leader: entries committed in the last commit."},
	{'g', "raft.leader.dispatch_num_logs", "Leader: entries in the last batch written to its log."},
	{'g', "raft.peers", "Voters and non-voters Raft knows, this node included."},
	{'c', "raft.apply", "Entries proposed to Raft on this node."},
	{'c', "raft.barrier", "Read barriers issued on this node (linearizable reads)."},
	{'c', "raft.verify_leader", "Leadership checks Raft ran on this node."},
	{'c', "raft.state.leader", "Times this node became leader."},
	{'c', "raft.state.follower", "Times this node became follower."},
	{'c', "raft.state.candidate", "Times this node became candidate (started an election)."},
	{'c', "raft.transition.heartbeat_timeout", "Times a follower's heartbeat timeout ran out: it heard no leader in time."},
	{'c', "raft.wal.log_appends", "raft-wal: batches appended to the log."},
	{'c', "raft.wal.log_entries_written", "raft-wal: entries written to the log."},
	{'c', "raft.wal.log_entry_bytes_written", "raft-wal: bytes of entries written to the log."},
	{'c', "raft.wal.log_entries_read", "raft-wal: entries read from the log."},
	{'c', "raft.wal.log_entry_bytes_read", "raft-wal: bytes of entries read from the log."},
	{'c', "raft.wal.segment_rotations", "raft-wal: segment files started."},
	{'c', "raft.wal.stable_gets", "raft-wal: reads of the stable store (term, vote)."},
	{'c', "raft.wal.stable_sets", "raft-wal: writes of the stable store (term, vote)."},
	{'c', "raft.wal.head_truncations", "raft-wal: truncations of the log's head after a snapshot."},
	{'g', "raft.wal.last_segment_age_seconds", "raft-wal: seconds since the last segment file was started."},
	{'c', "raft.wal.tail_truncations", "raft-wal: truncations of the log's tail (a new leader's conflicting entries)."},
}

// snakeSink writes go-metrics' keys in Prometheus' snake case:
// raft.commitTime becomes leasehold_raft_commit_time.
type snakeSink struct{ next gometrics.MetricSink }

func (s snakeSink) SetGauge(key []string, val float32) { s.next.SetGauge(snakeKey(key), val) }
func (s snakeSink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.next.SetGaugeWithLabels(snakeKey(key), val, labels)
}
func (s snakeSink) EmitKey(key []string, val float32)     { s.next.EmitKey(snakeKey(key), val) }
func (s snakeSink) IncrCounter(key []string, val float32) { s.next.IncrCounter(snakeKey(key), val) }
func (s snakeSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.next.IncrCounterWithLabels(snakeKey(key), val, labels)
}
func (s snakeSink) AddSample(key []string, val float32) { s.next.AddSample(snakeKey(key), val) }
func (s snakeSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.next.AddSampleWithLabels(snakeKey(key), val, labels)
}

func snakeKey(key []string) []string {
	out := make([]string, len(key))
	for i, part := range key {
		out[i] = snakeOf(part)
	}
	return out
}

// snakeParts caches snake per key part: Raft reports a few dozen
// measurements, several for every entry it writes, always with the same
// parts (per-peer parts are peers' ids, bounded by the membership).
var snakeParts sync.Map // part -> its snake case

func snakeOf(part string) string {
	if v, ok := snakeParts.Load(part); ok {
		return v.(string)
	}
	s := snake(part)
	snakeParts.Store(part, s)
	return s
}

// snake turns camelCase into camel_case: appendEntries, fsm.applyBatchNum
// (a part at a time), lastContact.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
