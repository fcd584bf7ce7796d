package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/leasehold/leasehold/jepsen-lite/nemesis"
)

// Disks are the nodes' disks: none yet, so the disk faults cannot start.
func (c *cluster) Disks() nemesis.Disks { return nil }

// Ready asks node whether it is ready, as a load balancer would:
// GET /readyz, 200 or 503 with its reason.
func (c *cluster) Ready(ctx context.Context, node string) (bool, string, error) {
	i := c.nodeIndex(node)
	if i < 0 {
		return false, "", fmt.Errorf("runner: no node %q", node)
	}
	scheme := "http://"
	if c.secrets != nil {
		scheme = "https://"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+c.net.APIAddr(i+1)+"/readyz", nil)
	if err != nil {
		return false, "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false, "", err
	}
	defer resp.Body.Close()
	var body struct {
		Ready  bool   `json:"ready"`
		Reason string `json:"reason"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&body); err != nil {
		return false, "", fmt.Errorf("runner: %s /readyz: %s: %w", node, resp.Status, err)
	}
	return body.Ready && resp.StatusCode == http.StatusOK, body.Reason, nil
}
