package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// The expiry and snapshot figures are on /metrics, each with its HELP and
// TYPE lines and a sample.
func TestMetricsExpiryAndSnapshot(t *testing.T) {
	c := clustertest.New(t, 1)
	resp, err := http.Get("http://" + c.Leader().APIAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s, %v", resp.Status, err)
	}
	text := string(body)
	for name, typ := range map[string]string{
		"leasehold_expiry_workers_looked_total": "counter",
		"leasehold_snapshot_last_seconds":       "gauge",
		"leasehold_snapshot_last_bytes":         "gauge",
	} {
		for _, want := range []string{"# HELP " + name + " ", "# TYPE " + name + " " + typ + "\n", "\n" + name + " "} {
			if !strings.Contains(text, want) {
				t.Errorf("/metrics has no %q", want)
			}
		}
	}
}

// A job's life shows on /metrics: its grant, its report by outcome, its
// queue wait and run time, the apply latencies of its commands, the
// heartbeat's ack; a silent worker's expiry, its lateness and the worker's
// stale report after it; an error answer counts by its reason; the Go runtime's,
// the process's and Raft's own families are there; and every family has a
// HELP line and a snake-case name.
func TestMetricsFollowTheWork(t *testing.T) {
	c := clustertest.New(t, 1)
	n := c.Leader()
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(n.Apply(ctx, &fsm.RegisterWorker{WorkerID: "w", Capacity: 1}))
	must(n.Apply(ctx, &fsm.SubmitJob{Spec: fsm.JobSpec{ID: "j", Queue: "q1", Kind: "k", MaxAttempts: 1, MaxWorkerLosses: 3, OnWorkerLost: fsm.LostRequeue}}))
	res, err := n.Acquire(ctx, fsm.Acquire{WorkerID: "w", RequestID: "r", Queues: []string{"q1"}, Max: 1}, time.Second)
	if err != nil || len(res.Grants) != 1 {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	tok := res.Grants[0].Lease.Token
	must(n.Heartbeat(ctx, "w", []fsm.LeaseRef{{JobID: "j", Token: tok}}))
	must(n.Apply(ctx, &fsm.Report{WorkerID: "w", JobID: "j", Token: tok, ReportID: "rep", Outcome: fsm.OutcomeSucceeded}))
	must(n.Apply(ctx, &fsm.SetQueue{Queue: "q2", SetPaused: true, Paused: true}))
	must(n.Apply(ctx, &fsm.SubmitJob{Spec: fsm.JobSpec{ID: "held", Queue: "q2", Kind: "k", MaxAttempts: 1, MaxWorkerLosses: 3, OnWorkerLost: fsm.LostRequeue}}))
	// A second worker falls silent holding a lease: it expires, and its
	// late report is a stale one.
	must(n.Apply(ctx, &fsm.RegisterWorker{WorkerID: "w2", Capacity: 1}))
	must(n.Apply(ctx, &fsm.SubmitJob{Spec: fsm.JobSpec{ID: "j2", Queue: "q3", Kind: "k", MaxAttempts: 1, MaxWorkerLosses: 3, OnWorkerLost: fsm.LostRequeue}}))
	res2, err := n.Acquire(ctx, fsm.Acquire{WorkerID: "w2", RequestID: "r2", Queues: []string{"q3"}, Max: 1}, time.Second)
	if err != nil || len(res2.Grants) != 1 {
		t.Fatalf("acquire: %+v %v", res2, err)
	}
	c.Run(n.Index, clustertest.Toleration+2*c.Tick(n.Index))
	c.WaitFor(10*time.Second, "the silent worker's lease expired", func() bool {
		j, err := n.FSM().Job("j2")
		return err == nil && j.State == fsm.JobQueued && j.Losses == 1
	})
	if _, err := n.Apply(ctx, &fsm.Report{WorkerID: "w2", JobID: "j2", Token: res2.Grants[0].Lease.Token, ReportID: "late", Outcome: fsm.OutcomeSucceeded}); !errors.Is(err, fsm.ErrStaleToken) {
		t.Fatalf("a late report: %v, want a stale token", err)
	}
	resp, err := http.Post("http://"+n.APIAddr+"/leasehold.v1.JobService/GetJob", "application/json", strings.NewReader(`{"id":"nosuch"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GetJob nosuch: %s", resp.Status)
	}

	families := scrape(t, n.APIAddr)
	sample := func(name string, labels map[string]string) float64 {
		t.Helper()
		f, ok := families[name]
		if !ok {
			t.Fatalf("/metrics has no %s", name)
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("/metrics has no %s%v", name, labels)
		return 0
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"leasehold_grants_total", nil, 2},
		{"leasehold_reports_total", map[string]string{"outcome": "succeeded"}, 1},
		{"leasehold_reports_total", map[string]string{"outcome": "failed"}, 0},
		{"leasehold_queue_wait_seconds", map[string]string{"queue": "q1"}, 1},
		{"leasehold_run_seconds", map[string]string{"queue": "q1", "outcome": "succeeded"}, 1},
		{"leasehold_apply_seconds", map[string]string{"command": "Acquire"}, 2},
		{"leasehold_apply_seconds", map[string]string{"command": "Report"}, 2}, // the stale one too
		{"leasehold_heartbeat_ack_seconds", nil, 1},
		{"leasehold_jobs", map[string]string{"state": "reported"}, 1},
		{"leasehold_live_leases", nil, 0},
		{"leasehold_leader", nil, 1},
		{"leasehold_raft_state", map[string]string{"state": "Leader"}, 1},
		{"leasehold_api_refusals_total", map[string]string{"reason": "NOT_FOUND"}, 1},
		{"leasehold_expiries_total", nil, 1},
		{"leasehold_stale_reports_total", nil, 1},
		{"leasehold_expiry_lateness_seconds", nil, 1},
		{"leasehold_jobs", map[string]string{"state": "queued"}, 2}, // held and the expired one
		{"leasehold_queue_paused", map[string]string{"queue": "q2"}, 1},
		{"leasehold_queue_paused", map[string]string{"queue": "q1"}, 0},
		{"leasehold_queue_ready", map[string]string{"queue": "q2"}, 1},
		{"leasehold_queue_running", map[string]string{"queue": "q1"}, 0},
	} {
		if got := sample(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if sample("leasehold_log_store_write_seconds", nil) == 0 || sample("leasehold_leader_check_seconds", nil) == 0 {
		t.Error("no log store write or leadership check observed")
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "leasehold_raft_commit_time"} {
		if _, ok := families[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	// The docs list every family of the node's own, and the dashboard
	// plots only families that exist.
	docs, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	dashboard, err := os.ReadFile("../../deploy/grafana/leasehold.json")
	if err != nil {
		t.Fatal(err)
	}
	own, err := n.Registerer().(prometheus.Gatherer).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range own {
		if name := f.GetName(); !strings.Contains(string(docs), "`"+name) {
			t.Errorf("docs/metrics.md does not list %s", name)
		}
	}
	for _, name := range regexp.MustCompile(`leasehold_[a-z_]+`).FindAllString(string(dashboard), -1) {
		name = strings.TrimSuffix(name, "_bucket")
		if _, ok := families[name]; !ok {
			t.Errorf("the dashboard plots %s, which /metrics does not serve", name)
		}
	}
	for name, f := range families {
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
		if strings.ToLower(name) != name {
			t.Errorf("%s is not snake case", name)
		}
	}
}

// scrape reads a node's /metrics as metric families.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return families
}
