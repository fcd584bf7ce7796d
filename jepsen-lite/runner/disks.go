package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/leasehold/leasehold/jepsen-lite/disk"
	"github.com/leasehold/leasehold/jepsen-lite/nemesis"
	"github.com/leasehold/leasehold/jepsen-lite/netem"
)

// nodeDisks are the nodes' tmpfs, by node name, in a run with disk
// faults. The node's data dir is on it; at the end it is copied to the
// run's data/ and unmounted.
type nodeDisks map[string]*disk.Disk

var _ nemesis.Disks = nodeDisks(nil)

// mountDisks mounts a tmpfs of cfg.DiskSize under out/disk for each node.
// It returns disk.ErrUnsupported (wrapped) when this process cannot mount.
func mountDisks(cfg Config) (nodeDisks, error) {
	ds := nodeDisks{}
	for i := 1; i <= cfg.Nodes; i++ {
		name := netem.NodeName(i)
		d, err := disk.Mount(filepath.Join(cfg.Out, "disk", name), name, cfg.DiskSize)
		if err != nil {
			ds.release("")
			return nil, err
		}
		ds[name] = d
	}
	return ds, nil
}

// release saves each node's data to saveDir/<node> (none if saveDir is
// empty) and unmounts the disks.
func (ds nodeDisks) release(saveDir string) error {
	var errs []error
	for name, d := range ds {
		if saveDir != "" {
			errs = append(errs, d.SaveTo(filepath.Join(saveDir, name)))
		}
		errs = append(errs, d.Unmount())
	}
	return errors.Join(errs...)
}

func (ds nodeDisks) disk(node string) (*disk.Disk, error) {
	d, ok := ds[node]
	if !ok {
		return nil, fmt.Errorf("runner: node %q has no disk of its own", node)
	}
	return d, nil
}

func (ds nodeDisks) Fill(node string) (int64, error) {
	d, err := ds.disk(node)
	if err != nil {
		return 0, err
	}
	return d.Fill()
}

func (ds nodeDisks) Free(node string) error {
	d, err := ds.disk(node)
	if err != nil {
		return err
	}
	return d.Free()
}

func (ds nodeDisks) Size(node string) int64 {
	if d, ok := ds[node]; ok {
		return d.Size()
	}
	return 0
}

// Disks are the nodes' disks, nil in a run without disk faults.
func (c *cluster) Disks() nemesis.Disks {
	if c.disks == nil {
		return nil
	}
	return c.disks
}

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

// removeDisks removes the mount points' directory of a run, once every
// disk is unmounted (a leftover mount of a killed runner is unmounted by
// disk.CleanLeftovers first).
func removeDisks(dir string) error {
	err := os.Remove(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
