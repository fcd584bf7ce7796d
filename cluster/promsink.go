package cluster

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	gometrics "github.com/hashicorp/go-metrics/compat"
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
		sink := newRaftSink(time.Minute)
		reg.MustRegister(sink)
		// No service name: go-metrics would copy every key to put it
		// first; the sink names every series leasehold_ itself.
		cfg := gometrics.DefaultConfig("")
		cfg.EnableHostname, cfg.EnableHostnameLabel, cfg.EnableServiceLabel = false, false, false
		cfg.EnableRuntimeMetrics = false // the Go collector has them
		_, _ = gometrics.NewGlobal(cfg, sink)
		processMetrics.reg = reg
	})
	return processMetrics.reg
}

// raftHelp is the HELP of Raft's and raft-wal's main measurements (by
// their snake-case keys; Raft reports times in milliseconds). A family not
// listed here has its name as its HELP.
var raftHelp = []struct {
	kind byte // 's'ample (a histogram), 'c'ounter, 'g'auge
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

// raftSink is go-metrics' sink for Raft's and raft-wal's measurements,
// and a Prometheus collector of them. Raft reports a dozen of them for
// every entry it writes, so an update must be cheap: it finds its series
// by a key built in a stack buffer (a map lookup that allocates nothing)
// and updates it in place; only the first update of a series names it
// (go-metrics' raft.commitTime becomes leasehold_raft_commit_time) and
// makes its Prometheus metric. Samples are histograms (raftBuckets),
// counters and gauges plain values. A labelled series
// (Raft labels its per-peer measurements) not updated for expire
// disappears at the next scrape, as a removed peer's should; the others
// stay (a counter of elections may not move for days).
type raftSink struct {
	expire time.Duration
	mu     sync.RWMutex
	series map[string]*raftSeries
}

type raftSeries struct {
	kind    byte   // 's'ample (a histogram), 'c'ounter, 'g'auge
	name    string // its Prometheus name
	labels  string // its label names, in order
	expires bool   // labelled: it goes when not updated for the sink's expire
	desc    *prometheus.Desc
	hist    prometheus.Histogram
	bits    atomic.Uint64 // a counter's or a gauge's value, as float64 bits
	updated atomic.Int64  // unix nanoseconds
}

func newRaftSink(expire time.Duration) *raftSink {
	return &raftSink{expire: expire, series: map[string]*raftSeries{}}
}

func (s *raftSink) SetGauge(key []string, val float32) { s.SetGaugeWithLabels(key, val, nil) }
func (s *raftSink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	if se := s.find('g', key, labels); se != nil {
		se.bits.Store(math.Float64bits(float64(val)))
	}
}
func (s *raftSink) EmitKey([]string, float32)             {} // no Prometheus type keeps each value
func (s *raftSink) IncrCounter(key []string, val float32) { s.IncrCounterWithLabels(key, val, nil) }
func (s *raftSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	if val < 0 {
		return // a counter only grows
	}
	if se := s.find('c', key, labels); se != nil {
		for {
			old := se.bits.Load()
			if se.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+float64(val))) {
				return
			}
		}
	}
}
func (s *raftSink) AddSample(key []string, val float32) { s.AddSampleWithLabels(key, val, nil) }
func (s *raftSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	if se := s.find('s', key, labels); se != nil {
		se.hist.Observe(float64(val))
	}
}

// find returns the series of kind, key and labels, made on first use; nil
// if its name is taken by another kind or other label names (Prometheus
// keeps one type and one set of label names per family).
func (s *raftSink) find(kind byte, key []string, labels []gometrics.Label) *raftSeries {
	var buf [160]byte
	b := append(buf[:0], kind)
	for _, part := range key {
		b = append(append(b, '.'), part...)
	}
	for _, l := range labels {
		b = append(append(append(append(b, ';'), l.Name...), '='), l.Value...)
	}
	s.mu.RLock()
	se := s.series[string(b)]
	s.mu.RUnlock()
	if se == nil {
		se = s.make(string(b), kind, key, labels)
	}
	if se != nil {
		se.updated.Store(time.Now().UnixNano())
	}
	return se
}

func (s *raftSink) make(id string, kind byte, key []string, labels []gometrics.Label) *raftSeries {
	parts := make([]string, len(key))
	for i, part := range key {
		parts[i] = snake(part)
	}
	dotted := strings.Join(parts, ".")
	name := "leasehold_" + metricNameChars.Replace(strings.Join(parts, "_"))
	help := name
	for _, d := range raftHelp {
		if d.key == dotted {
			help = d.help
		}
	}
	constLabels := prometheus.Labels{}
	var labelNames []string
	for _, l := range labels {
		n := metricNameChars.Replace(l.Name)
		constLabels[n] = l.Value
		labelNames = append(labelNames, n)
	}
	se := &raftSeries{kind: kind, name: name, labels: strings.Join(labelNames, ","), expires: len(labels) > 0,
		desc: prometheus.NewDesc(name, help, nil, constLabels)}
	if kind == 's' {
		se.hist = prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: constLabels,
			Buckets: sampleBuckets(key)})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.series {
		if o.name == se.name && (o.kind != se.kind || o.labels != se.labels) {
			return nil // the family is the first one's
		}
	}
	if old := s.series[id]; old != nil {
		return old // made meanwhile
	}
	s.series[id] = se
	return se
}

// The bounds of the histograms of Raft's samples. A histogram, unlike
// the summaries go-metrics' own Prometheus sink makes, aggregates across
// nodes, and its Observe is a bucket search and two atomic adds: a
// summary's quantile streams sort and merge samples in a goroutine of
// their own, 1 to 3 % of a busy leader's CPU.
var (
	// msBuckets: Raft's timings, in its unit, milliseconds (0.05 ms to 10 s).
	msBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}
	// countBuckets: the samples that count entries or bytes
	// (fsm.apply_batch_num, boltdb.logs_per_batch, log_batch_size, ...).
	countBuckets = prometheus.ExponentialBuckets(1, 4, 11) // 1 to 4^10
	// fractionBuckets: a goroutine's saturation, 0 to 1.
	fractionBuckets = prometheus.LinearBuckets(0.1, 0.1, 10)
)

// sampleBuckets picks the bounds of a sample's histogram by its key.
func sampleBuckets(key []string) []float64 {
	if len(key) == 0 {
		return msBuckets
	}
	switch last := key[len(key)-1]; {
	case last == "saturation":
		return fractionBuckets
	case strings.HasSuffix(last, "Num"), strings.HasSuffix(last, "Size"), last == "logsPerBatch", last == "writeCapacity":
		return countBuckets
	}
	return msBuckets
}

// metricNameChars replaces what a Prometheus name cannot hold.
var metricNameChars = strings.NewReplacer(" ", "_", ".", "_", "-", "_", "=", "_", "/", "_")

// Describe sends nothing: the series come and go with Raft's reports (an
// unchecked collector).
func (s *raftSink) Describe(chan<- *prometheus.Desc) {}

// Collect sends every series, but forgets the labelled ones not updated
// within expire.
func (s *raftSink) Collect(ch chan<- prometheus.Metric) {
	cutoff := time.Now().Add(-s.expire).UnixNano()
	var expired []string
	s.mu.RLock()
	for id, se := range s.series {
		if se.expires && se.updated.Load() < cutoff {
			expired = append(expired, id)
			continue
		}
		switch se.kind {
		case 's':
			se.hist.Collect(ch)
		case 'c':
			ch <- prometheus.MustNewConstMetric(se.desc, prometheus.CounterValue, math.Float64frombits(se.bits.Load()))
		case 'g':
			ch <- prometheus.MustNewConstMetric(se.desc, prometheus.GaugeValue, math.Float64frombits(se.bits.Load()))
		}
	}
	s.mu.RUnlock()
	if len(expired) > 0 {
		s.mu.Lock()
		for _, id := range expired {
			if se := s.series[id]; se != nil && se.updated.Load() < cutoff {
				delete(s.series, id)
			}
		}
		s.mu.Unlock()
	}
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
