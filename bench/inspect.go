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

// What the bench reads of a server beyond its counters: any gauge of
// /metrics, its Go heap (from pprof, which the server serves to admins
// when started with --pprof), its resident memory (from /proc), and a
// download of its snapshot.

// gauges reads the named samples of a node's /metrics, as floats. A name
// the node does not serve is missing from the map.
func (p *probe) gauges(ctx context.Context, addr string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := p.get(ctx, addr, "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics at %s: %s", addr, resp.Status)
	}
	return parseGauges(io.LimitReader(resp.Body, 1<<20), names...)
}

// parseGauges reads the samples named (without labels) from the
// Prometheus text format.
func parseGauges(r io.Reader, names ...string) (map[string]float64, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !want[name] {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics: %s %q: %w", name, value, err)
		}
		out[name] = v
	}
	return out, sc.Err()
}

// heapStats are the Go runtime's figures for a server's heap, read right
// after a garbage collection the request forced.
type heapStats struct {
	inuse uint64 // HeapInuse: bytes in spans holding objects, fragmentation included
	alloc uint64 // HeapAlloc: bytes of live objects (and any allocated since the GC)
}

// heap forces a GC on the node and reads its heap figures from
// /debug/pprof/heap?gc=1&debug=1, whose text ends with runtime.MemStats.
func (p *probe) heap(ctx context.Context, addr string) (heapStats, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := p.get(ctx, addr, "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return heapStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return heapStats{}, fmt.Errorf("/debug/pprof/heap at %s: %s (the servers need --pprof, and the bench an admin token)", addr, resp.Status)
	}
	return parseMemStats(resp.Body)
}

// parseMemStats reads "# HeapInuse = N" and "# HeapAlloc = N" from a heap
// profile in its debug=1 text form.
func parseMemStats(r io.Reader) (heapStats, error) {
	var h heapStats
	found := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20) // stack lines can be long
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		if !ok {
			continue
		}
		var dst *uint64
		switch name {
		case "HeapInuse":
			dst = &h.inuse
		case "HeapAlloc":
			dst = &h.alloc
		default:
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return h, fmt.Errorf("heap profile: %s = %q", name, value)
		}
		*dst = v
		found++
	}
	if err := sc.Err(); err != nil {
		return h, err
	}
	if found < 2 {
		return h, fmt.Errorf("heap profile: no HeapInuse and HeapAlloc (not debug=1 text?)")
	}
	return h, nil
}

// procRSS is a process's resident memory in bytes, from /proc/PID/status.
func procRSS(pid int) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseRSS(f)
}

// parseRSS reads the "VmRSS:  123 kB" line of /proc/PID/status.
func parseRSS(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS line %q", sc.Text())
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS line %q: %w", sc.Text(), err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmRSS line")
}

// download saves what GET path answers at the node into a file, synced to
// disk, and returns its size: the snapshot (/v1/snapshot), or a profile.
func (p *probe) download(ctx context.Context, addr, path, file string) (int64, error) {
	resp, err := p.get(ctx, addr, path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s at %s: %s", path, addr, resp.Status)
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, resp.Body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}
