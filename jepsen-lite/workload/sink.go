package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// SinkWrite is one write a job makes to a downstream store.
type SinkWrite struct {
	Sink     string `json:"sink"` // history.SinkFenced or history.SinkUnfenced
	JobID    string `json:"job_id"`
	Token    uint64 `json:"token"`
	WorkerID string `json:"worker_id"`
	Key      string `json:"key"`
}

// Fencer answers fence checks: Caller.Fence, which records them.
type Fencer interface {
	Fence(ctx context.Context, jobID string, token uint64) (*leaseholdv1.CheckFenceResponse, error)
}

// Sinks are two downstream stores served by the runner. The fenced one
// asks the cluster whether a write's token is its job's live lease before
// it keeps the write, as a store that honours fencing tokens would; the
// unfenced one keeps everything, to show what fencing prevents. Every
// write is recorded as a sink_write, kept or not.
type Sinks struct {
	rec     *history.Recorder
	process string
	fencer  Fencer

	mu   sync.Mutex
	kept map[string]int // writes kept, by sink
}

// NewSinks records as process and checks fences with fencer.
func NewSinks(rec *history.Recorder, process string, fencer Fencer) *Sinks {
	return &Sinks{rec: rec, process: process, fencer: fencer, kept: map[string]int{}}
}

// fenceTimeout bounds a fenced write's check: a store that cannot check
// refuses.
const fenceTimeout = 3 * time.Second

// Write applies one write and says whether the sink kept it.
func (s *Sinks) Write(ctx context.Context, w SinkWrite) (bool, error) {
	if w.JobID == "" || w.Token == 0 {
		return false, errors.New("sink write without job id or token")
	}
	rec := history.SinkWrite{Sink: w.Sink, JobID: w.JobID, Token: w.Token, WorkerID: w.WorkerID, Key: w.Key}
	switch w.Sink {
	case history.SinkUnfenced:
		rec.Accepted = true
	case history.SinkFenced:
		rec.CheckNs = history.Now()
		cctx, cancel := context.WithTimeout(ctx, fenceTimeout)
		resp, err := s.fencer.Fence(cctx, w.JobID, w.Token)
		cancel()
		rec.Accepted = err == nil && resp.GetCurrent()
	default:
		return false, fmt.Errorf("no sink %q", w.Sink)
	}
	if err := s.rec.Append(history.Entry{Kind: history.KindSinkWrite, Process: s.process, Sink: &rec}); err != nil {
		return false, err
	}
	if rec.Accepted {
		s.mu.Lock()
		s.kept[w.Sink]++
		s.mu.Unlock()
	}
	return rec.Accepted, nil
}

// Kept counts the writes a sink kept.
func (s *Sinks) Kept(sink string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kept[sink]
}

// ServeHTTP takes a SinkWrite as JSON on POST /write and answers
// {"accepted": bool}.
func (s *Sinks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/write" {
		http.NotFound(w, r)
		return
	}
	var sw SinkWrite
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&sw); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ok, err := s.Write(r.Context(), sw)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]bool{"accepted": ok})
}

// SinkServer serves Sinks over HTTP until Close.
type SinkServer struct {
	ln  net.Listener
	srv *http.Server
	wg  sync.WaitGroup
}

// ServeSinks listens on addr (host:port, port 0 for any).
func ServeSinks(addr string, s *Sinks) (*SinkServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ss := &SinkServer{ln: ln, srv: &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}}
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		ss.srv.Serve(ln)
	}()
	return ss, nil
}

// URL is where workers send writes.
func (ss *SinkServer) URL() string { return "http://" + ss.ln.Addr().String() }

// Close stops the server and waits for writes in progress.
func (ss *SinkServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := ss.srv.Shutdown(ctx)
	ss.wg.Wait()
	return err
}

// SinkClient is a worker's connection to the runner's sinks.
type SinkClient struct {
	url  string
	http *http.Client
}

// NewSinkClient writes to the sinks at url.
func NewSinkClient(url string) *SinkClient {
	return &SinkClient{url: url, http: &http.Client{Timeout: 5 * time.Second}}
}

// Write sends one write and returns whether the sink kept it.
func (c *SinkClient) Write(ctx context.Context, w SinkWrite) (bool, error) {
	body, err := json.Marshal(w)
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/write", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("sink: %s", resp.Status)
	}
	var ans struct {
		Accepted bool `json:"accepted"`
	}
	err = json.NewDecoder(resp.Body).Decode(&ans)
	return ans.Accepted, err
}

// CloseIdle releases the client's idle connections.
func (c *SinkClient) CloseIdle() { c.http.CloseIdleConnections() }
