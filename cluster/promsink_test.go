package cluster

import (
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
)

// The sink names Raft's measurements as Prometheus does, keeps counters,
// gauges and samples as such, labels by go-metrics' labels, refuses a
// name taken by another kind, and forgets a labelled series not updated
// for its expiry.
func TestRaftSink(t *testing.T) {
	sink := newRaftSink(time.Hour)
	reg := prometheus.NewRegistry()
	reg.MustRegister(sink)
	peer := []gometrics.Label{{Name: "peer_id", Value: "node-2"}}
	sink.IncrCounter([]string{"raft", "apply"}, 1)
	sink.IncrCounter([]string{"raft", "apply"}, 2)
	sink.IncrCounter([]string{"raft", "apply"}, -5) // a counter only grows
	sink.SetGauge([]string{"raft", "peers"}, 3)
	sink.SetGauge([]string{"raft", "peers"}, 5)
	for _, v := range []float32{1, 2, 3} {
		sink.AddSample([]string{"raft", "commitTime"}, v)
	}
	sink.AddSampleWithLabels([]string{"raft", "replication", "appendEntries", "rpc"}, 7, peer)
	sink.SetGauge([]string{"raft", "apply"}, 9)                                // the name is a counter's: dropped
	sink.AddSample([]string{"raft", "replication", "appendEntries", "rpc"}, 1) // that family has a peer label: dropped
	sink.EmitKey([]string{"raft", "emitted"}, 1)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range families {
		got[f.GetName()] = f.GetType().String()
		m := f.GetMetric()[0]
		switch f.GetName() {
		case "leasehold_raft_apply":
			if m.GetCounter().GetValue() != 3 || f.GetHelp() != "Entries proposed to Raft on this node." {
				t.Errorf("apply counter %v, help %q", m.GetCounter(), f.GetHelp())
			}
		case "leasehold_raft_peers":
			if m.GetGauge().GetValue() != 5 {
				t.Errorf("peers gauge %v", m.GetGauge())
			}
		}
		if f.GetName() == "leasehold_raft_commit_time" {
			// 1, 2 and 3 ms: one at or below 1, two at or below 2.5.
			h := f.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 3 || h.GetSampleSum() != 6 {
				t.Errorf("commit time histogram %v", h)
			}
			want := map[float64]uint64{0.5: 0, 1: 1, 2.5: 2, 5: 3}
			for _, b := range h.GetBucket() {
				if n, ok := want[b.GetUpperBound()]; ok {
					if b.GetCumulativeCount() != n {
						t.Errorf("commit time bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), n)
					}
					delete(want, b.GetUpperBound())
				}
			}
			if len(want) > 0 {
				t.Errorf("commit time buckets %v missing", want)
			}
		}
		if f.GetName() == "leasehold_raft_replication_append_entries_rpc" {
			if l := f.GetMetric()[0].GetLabel(); len(l) != 1 || l[0].GetName() != "peer_id" || l[0].GetValue() != "node-2" {
				t.Errorf("per-peer labels %v", l)
			}
		}
	}
	for name, typ := range map[string]string{"leasehold_raft_apply": "COUNTER", "leasehold_raft_peers": "GAUGE", "leasehold_raft_commit_time": "HISTOGRAM", "leasehold_raft_replication_append_entries_rpc": "HISTOGRAM"} {
		if got[name] != typ {
			t.Errorf("%s: %q, want %s (all: %v)", name, got[name], typ, got)
		}
	}
	if _, ok := got["leasehold_raft_emitted"]; ok {
		t.Error("an emitted key became a series")
	}

	// Expiry: a labelled series not updated within it disappears (a
	// removed peer's); the others stay.
	sink.expire = -time.Hour // the cutoff lies after every update
	families, _ = reg.Gather()
	kept := map[string]bool{}
	for _, f := range families {
		kept[f.GetName()] = true
	}
	if kept["leasehold_raft_replication_append_entries_rpc"] || !kept["leasehold_raft_apply"] || !kept["leasehold_raft_commit_time"] || len(kept) != 3 {
		t.Errorf("after the expiry: %v", kept)
	}
}

// BenchmarkRaftSink is what Raft pays for one measurement:
// go test -run '^$' -bench RaftSink ./cluster/
func BenchmarkRaftSink(b *testing.B) {
	sink := newRaftSink(time.Minute)
	key := []string{"raft", "replication", "appendEntries", "rpc"}
	peer := []gometrics.Label{{Name: "peer_id", Value: "node-2"}}
	b.ReportAllocs()
	for b.Loop() {
		sink.AddSampleWithLabels(key, 1, peer)
		sink.IncrCounter([]string{"raft", "apply"}, 1)
	}
}

// A sample that is not a time gets bounds of its own kind.
func TestRaftSampleBuckets(t *testing.T) {
	for _, c := range []struct {
		key  []string
		want []float64
	}{
		{[]string{"raft", "commitTime"}, msBuckets},
		{[]string{"raft", "fsm", "applyBatchNum"}, countBuckets},
		{[]string{"raft", "boltdb", "logBatchSize"}, countBuckets},
		{[]string{"raft", "boltdb", "logsPerBatch"}, countBuckets},
		{[]string{"raft", "thread", "fsm", "saturation"}, fractionBuckets},
	} {
		if got := sampleBuckets(c.key); len(got) != len(c.want) || got[len(got)-1] != c.want[len(c.want)-1] {
			t.Errorf("%v: buckets %v, want %v", c.key, got, c.want)
		}
	}
}
