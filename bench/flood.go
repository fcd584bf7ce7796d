package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A flood is what a careless or hostile client does beside the real load
// (Config.Flood): gzip bombs and oversized bodies, connections that send
// headers and never a body, heartbeats from made-up workers, and calls
// with a wrong token. job-cycle --flood reports its own throughput and
// latency with the flood running, to compare with a run without.
type flood struct {
	e       *env
	http    *http.Client
	scheme  string
	bomb    []byte
	wg      sync.WaitGroup
	bodies  atomic.Int64 // oversized or compressed bodies sent
	idle    atomic.Int64 // hanging connections opened
	ghosts  atomic.Int64 // heartbeats from made-up workers
	badAuth atomic.Int64 // calls with a wrong token
	served  atomic.Int64 // flood calls the cluster answered 2xx (should stay 0 but for ghosts before the fix)
}

// floodIdleConns is how many hanging connections the flood keeps open.
const floodIdleConns = 200

func (e *env) startFlood(ctx context.Context) *flood {
	fl := &flood{e: e, scheme: e.probe.scheme, bomb: gzipBomb(64 << 20)}
	fl.http = &http.Client{Transport: &http.Transport{TLSClientConfig: e.cfg.TLS, MaxIdleConnsPerHost: 4}}
	for _, run := range []func(context.Context){fl.bodiesLoop, fl.idleLoop, fl.ghostLoop, fl.badAuthLoop} {
		fl.wg.Add(1)
		go func() { defer fl.wg.Done(); run(ctx) }()
	}
	return fl
}

func (fl *flood) endpoint() string {
	eps := fl.e.cfg.Endpoints
	return eps[rand.IntN(len(eps))]
}

func (fl *flood) post(ctx context.Context, path string, body io.Reader, length int64, hdr map[string]string) {
	req, err := http.NewRequestWithContext(ctx, "POST", fl.scheme+"://"+fl.endpoint()+path, body)
	if err != nil {
		return
	}
	req.ContentLength = length
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := fl.http.Do(req)
	if err != nil {
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 == 2 && resp.Header.Get("Grpc-Status") == "" && resp.Trailer.Get("Grpc-Status") == "" {
		fl.served.Add(1)
	}
}

// bodiesLoop sends gzip bombs (with the run's token, so they pass
// authentication) and oversized plain bodies, one after the other.
func (fl *flood) bodiesLoop(ctx context.Context) {
	grpc := map[string]string{"Content-Type": "application/grpc", "Grpc-Encoding": "gzip", "Te": "trailers"}
	if fl.e.cfg.Token != "" {
		grpc["Authorization"] = "Bearer " + fl.e.cfg.Token
	}
	for i := 0; ctx.Err() == nil; i++ {
		if i%2 == 0 {
			fl.post(ctx, "/leasehold.v1.JobService/SubmitJob", bytes.NewReader(fl.bomb), int64(len(fl.bomb)), grpc)
		} else {
			fl.post(ctx, "/leasehold.v1.JobService/SubmitJob", io.LimitReader(zeros{}, 8<<20), 8<<20,
				map[string]string{"Content-Type": "application/proto", "Authorization": grpc["Authorization"]})
		}
		fl.bodies.Add(1)
	}
}

// idleLoop keeps floodIdleConns connections open that sent headers
// announcing a body and never send it, opening a new one whenever the
// cluster closes one.
func (fl *flood) idleLoop(ctx context.Context) {
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	defer func() {
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
	}()
	sem := make(chan struct{}, floodIdleConns)
	for ctx.Err() == nil {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", fl.endpoint())
		if err != nil {
			<-sem
			continue
		}
		fmt.Fprintf(c, "POST /leasehold.v1.ClusterService/Members HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
		fl.idle.Add(1)
		mu.Lock()
		open[c] = true
		mu.Unlock()
		fl.wg.Add(1)
		go func() {
			defer fl.wg.Done()
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			io.Copy(io.Discard, c) // until the cluster (or ctx) closes it
			mu.Lock()
			delete(open, c)
			mu.Unlock()
			c.Close()
			<-sem
		}()
	}
}

// ghostLoop heartbeats as workers nobody registered.
func (fl *flood) ghostLoop(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		fl.e.f.pick().Heartbeat(cctx, fmt.Sprintf("%s-ghost-%d", fl.e.run, i), nil)
		cancel()
		fl.ghosts.Add(1)
	}
}

// badAuthLoop calls with a token the cluster does not know.
func (fl *flood) badAuthLoop(ctx context.Context) {
	hdr := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer not-a-token-of-this-cluster"}
	for ctx.Err() == nil {
		fl.post(ctx, "/leasehold.v1.ClusterService/Status", bytes.NewReader([]byte("{}")), 2, hdr)
		fl.badAuth.Add(1)
	}
}

// gzipBomb is a gRPC frame whose compressed SubmitJob message inflates to
// n bytes.
func gzipBomb(n int) []byte {
	var z bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	chunk := make([]byte, 1<<20)
	for range n / len(chunk) {
		gz.Write(chunk)
	}
	gz.Close()
	frame := make([]byte, 5, 5+z.Len())
	frame[0] = 1
	binary.BigEndian.PutUint32(frame[1:], uint32(z.Len()))
	return append(frame, z.Bytes()...)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
