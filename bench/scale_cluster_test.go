package bench_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/leasehold/leasehold/bench"
)

// scale at a small size: 200 workers holding 10 leases each, fast timings.
// Every key is there, and nothing was lost: no error, no lease answered
// anything but KEEP, every lease still live at the end, and the restarted
// follower caught up.
func TestScale(t *testing.T) {
	lc := startClusterWith(t, bench.ClusterOptions{Pprof: true})
	kv := run(t, lc, bench.Config{Workload: "scale", Workers: 200, Leases: 10, Conns: 2})
	for _, k := range []string{"errs", "hb_missed", "hb_unsent", "not_keep", "not_keep_total", "hb_errs_total", "leases_lost"} {
		want(t, kv, k, 0)
	}
	want(t, kv, "workers", 200)
	if kv["transport"] != "stream" {
		t.Fatalf("transport=%s: scale's heartbeats travel over streams by default", kv["transport"])
	}
	want(t, kv, "c", 200)
	want(t, kv, "leases", 2000)
	want(t, kv, "live_leases", 2000)
	want(t, kv, "restart_caught_up", 1)
	// Two hundred workers, each due once per renew of 0.5 s in a 1 s window.
	want(t, kv, "hb_due", 400)
	want(t, kv, "ops", 400)
	for _, k := range []string{"setup_s", "setup_submit_s", "setup_submits_per_s", "setup_hold_s", "setup_workers_per_s",
		"setup_leases_per_s", "setup_retries", "hb_late", "hb_send_lag_p99_ms", "hb_send_lag_max_ms", "hb_gap_max_ms", "leases_renewed_s",
		"workers_per_renew_s", "expiry_looks_s", "expiry_looks_per_worker_grace", "expiry_full_scan_looks_s",
		"heap_base_bytes", "heap_inuse_bytes", "heap_alloc_bytes", "mem_per_lease_bytes", "rss_base_bytes", "rss_bytes",
		"rss_per_lease_bytes", "snapshot_s", "snapshot_bytes", "restart_ready_s", "restart_applied_behind",
		"restart_caught_up_s", "live_per_lease_bytes", "restart_mem_per_lease_bytes", "restart_live_per_lease_bytes"} {
		v, err := strconv.ParseFloat(kv[k], 64)
		if err != nil || math.IsNaN(v) {
			t.Errorf("%s=%q is not a number", k, kv[k])
		}
	}
	// No Raft snapshot is due at this size (fewer entries than its
	// threshold): the keys are there, NA.
	for _, k := range []string{"raft_snapshot_s", "raft_snapshot_bytes"} {
		if _, ok := kv[k]; !ok {
			t.Errorf("no %s", k)
		}
	}
	if n(t, kv, "snapshot_bytes") <= 0 || n(t, kv, "heap_inuse_bytes") <= 0 || n(t, kv, "rss_bytes") <= 0 {
		t.Errorf("snapshot_bytes=%s heap_inuse_bytes=%s rss_bytes=%s", kv["snapshot_bytes"], kv["heap_inuse_bytes"], kv["rss_bytes"])
	}
	if kv["restart_node"] == kv["leader"] || kv["restart_node"] == "NA" {
		t.Errorf("restarted %s, the leader is %s", kv["restart_node"], kv["leader"])
	}
}

// scale refuses a cluster it did not start: it reads the leader's memory
// from /proc and restarts a follower.
func TestScaleRefusedWithoutLocalCluster(t *testing.T) {
	_, err := bench.Run(context.Background(), bench.Config{Workload: "scale", Endpoints: []string{"127.0.0.1:1"}})
	if err == nil || !errors.Is(err, bench.ErrNeedsLocalCluster) {
		t.Fatalf("err = %v", err)
	}
}
