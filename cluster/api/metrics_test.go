package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/cluster/clustertest"
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
