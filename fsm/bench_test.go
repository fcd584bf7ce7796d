// Benchmarks of the state machine: apply throughput per command, and the
// cost of snapshotting and restoring a state of one million queued jobs.
//
// Run them all, each once, with
//
//	make bench-fsm
//
// that is, go test -run '^$' -bench . -benchmem -benchtime 1x ./fsm/ (about
// a minute on 2 cores, 1.2 GB of heap at the peak; the 1,000,000-job
// benchmarks are skipped with -short). The apply benchmarks give steadier
// figures with the default benchtime:
//
//	go test -run '^$' -bench Apply -benchmem ./fsm/
//
// LEASEHOLD_BENCH_JOBS overrides the 1,000,000 queued jobs of the large
// benchmarks, e.g. LEASEHOLD_BENCH_JOBS=50000 to run them under -race.
//
// Commands go through Encode and FSM.Apply like a replica's log entries. The
// timed loops never call CheckInvariants.
package fsm

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/proccpu"
)

const benchPayloadLen = 64

var (
	benchPayload = bytes.Repeat([]byte{'p'}, benchPayloadLen)
	benchKinds   = []string{"eval", "run"}
	benchQueues  = []string{"default"}
)

// benchSpec is job i of a benchmark: a 64-byte payload, one of eight
// priorities scattered over the seqs, one of two kinds and, when submitters
// is positive, one of that many submitters.
func benchSpec(prefix string, i, submitters int) JobSpec {
	s := JobSpec{
		ID:              prefix + strconv.Itoa(i),
		Queue:           "default",
		Kind:            benchKinds[i%len(benchKinds)],
		Payload:         benchPayload,
		Priority:        int32(uint32(i) * 2654435761 >> 29),
		MaxAttempts:     3,
		OnWorkerLost:    LostRequeue,
		MaxWorkerLosses: 3,
	}
	if submitters > 0 {
		s.Submitter = "team-" + strconv.Itoa(i%submitters)
	}
	return s
}

// benchDriver feeds an FSM encoded commands with consecutive indexes, like
// the harness's machine but without the invariant check after each step.
type benchDriver struct {
	f     *FSM
	index uint64
	now   int64
}

func newBenchDriver() *benchDriver {
	return &benchDriver{f: New(), now: 1_700_000_000_000_000_000}
}

func (d *benchDriver) encode(c Command) ([]byte, error) {
	d.now += 1000
	return Encode(d.now, c)
}

func (d *benchDriver) apply(data []byte) (any, error) {
	d.index++
	return d.f.Apply(d.index, data)
}

func (d *benchDriver) do(c Command) (any, error) {
	data, err := d.encode(c)
	if err != nil {
		return nil, err
	}
	return d.apply(data)
}

func (d *benchDriver) must(tb testing.TB, c Command) any {
	tb.Helper()
	res, err := d.do(c)
	if err != nil {
		tb.Fatalf("%T: %v", c, err)
	}
	return res
}

func (d *benchDriver) mustEncode(tb testing.TB, c Command) []byte {
	tb.Helper()
	data, err := d.encode(c)
	if err != nil {
		tb.Fatalf("encode %T: %v", c, err)
	}
	return data
}

// submitN submits n jobs named prefix0..prefix(n-1) through Apply.
func (d *benchDriver) submitN(tb testing.TB, prefix string, n, submitters int) {
	tb.Helper()
	for i := range n {
		res := d.must(tb, &SubmitJob{Spec: benchSpec(prefix, i, submitters)}).(SubmitResult)
		if !res.Created {
			tb.Fatalf("job %s was not created", res.Job.ID)
		}
	}
}

type heldLease struct {
	worker, job string
	token       uint64
}

// acquireN acquires n leases in batches of MaxAcquireBatch, registering a
// worker of capacity MaxCapacity (named prefix0, prefix1, ...) each time the
// previous one is full.
func (d *benchDriver) acquireN(tb testing.TB, prefix string, n int) []heldLease {
	tb.Helper()
	out := make([]heldLease, 0, n)
	worker, held, workers := "", MaxCapacity, 0
	for len(out) < n {
		if held == MaxCapacity {
			worker = prefix + strconv.Itoa(workers)
			workers++
			held = 0
			d.must(tb, &RegisterWorker{WorkerID: worker, Capacity: MaxCapacity})
		}
		want := min(MaxAcquireBatch, n-len(out), MaxCapacity-held)
		res := d.must(tb, &Acquire{WorkerID: worker, RequestID: "setup-" + strconv.FormatUint(d.index+1, 10),
			Queues: benchQueues, Max: uint32(want)}).(AcquireResult)
		if len(res.Grants) != want {
			tb.Fatalf("setup acquire granted %d leases, want %d", len(res.Grants), want)
		}
		for _, g := range res.Grants {
			out = append(out, heldLease{worker: worker, job: g.Job.ID, token: g.Lease.Token})
		}
		held += len(res.Grants)
	}
	return out
}

// liveHeap collects garbage and returns the bytes of live heap objects.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// metricList holds figures until the timed loop is over: b.ResetTimer
// deletes the metrics reported before it.
type metricList []struct {
	v    float64
	unit string
}

func (m *metricList) add(v float64, unit string) {
	*m = append(*m, struct {
		v    float64
		unit string
	}{v, unit})
}

func (m metricList) report(b *testing.B) {
	for _, x := range m {
		b.ReportMetric(x.v, x.unit)
	}
}

func mb(n uint64) float64 { return float64(n) / (1 << 20) }

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// --- apply throughput ---

func BenchmarkApplySubmit(b *testing.B) {
	d := newBenchDriver()
	cmds := make([][]byte, b.N)
	for i := range cmds {
		cmds[i] = d.mustEncode(b, &SubmitJob{Spec: benchSpec("job-", i, 16)})
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	for i, data := range cmds {
		res, err := d.apply(data)
		if err != nil {
			b.Fatalf("submit %d: %v", i, err)
		}
		if !res.(SubmitResult).Created {
			b.Fatalf("submit %d created nothing", i)
		}
	}
	b.StopTimer()
	if got := d.f.Stats().Jobs[JobQueued]; got != b.N {
		b.Fatalf("%d queued jobs, want %d", got, b.N)
	}
}

// BenchmarkApplySubmitAfterMassExpiry times submits after an Expire
// command ended 4,096 leases at once (its most): an apply that touched many jobs
// must not make every later apply slower (size.go's settle).
func BenchmarkApplySubmitAfterMassExpiry(b *testing.B) {
	d := newBenchDriver()
	const abandoned = MaxExpireBatch
	d.submitN(b, "held-", abandoned, 16)
	leases := d.acquireN(b, "bw-", abandoned)
	refs := make([]LeaseRef, len(leases))
	for i, l := range leases {
		refs[i] = LeaseRef{JobID: l.job, Token: l.token}
	}
	d.must(b, &Expire{Leases: refs, Reason: "bench"})
	cmds := make([][]byte, b.N)
	for i := range cmds {
		cmds[i] = d.mustEncode(b, &SubmitJob{Spec: benchSpec("job-", i, 16)})
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	for i, data := range cmds {
		if _, err := d.apply(data); err != nil {
			b.Fatalf("submit %d: %v", i, err)
		}
	}
	b.StopTimer()
	if got := d.f.Stats().Jobs[JobQueued]; got != b.N+abandoned {
		b.Fatalf("%d queued jobs, want %d", got, b.N+abandoned)
	}
}

// BenchmarkApplyAcquire times acquires of one lease each, out of b.N queued
// jobs, by workers of capacity MaxCapacity (one per MaxCapacity acquires), so
// every acquire grants; one that does not fails the benchmark.
func BenchmarkApplyAcquire(b *testing.B) {
	d := newBenchDriver()
	d.submitN(b, "job-", b.N, 16)
	workers := make([]string, (b.N+MaxCapacity-1)/MaxCapacity)
	for i := range workers {
		workers[i] = "bw-" + strconv.Itoa(i)
		d.must(b, &RegisterWorker{WorkerID: workers[i], Capacity: MaxCapacity})
	}
	cmds := make([][]byte, b.N)
	for i := range cmds {
		cmds[i] = d.mustEncode(b, &Acquire{WorkerID: workers[i/MaxCapacity], RequestID: "acq-" + strconv.Itoa(i),
			Queues: benchQueues, Max: 1})
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	for i, data := range cmds {
		res, err := d.apply(data)
		if err != nil {
			b.Fatalf("acquire %d: %v", i, err)
		}
		if n := len(res.(AcquireResult).Grants); n != 1 {
			b.Fatalf("acquire %d granted %d leases, want 1", i, n)
		}
	}
	b.StopTimer()
	if st := d.f.Stats(); st.LiveLeases != b.N || st.Jobs[JobQueued] != 0 {
		b.Fatalf("%d live leases and %d queued jobs, want %d and 0", st.LiveLeases, st.Jobs[JobQueued], b.N)
	}
}

// BenchmarkApplyReport times successful reports of b.N live leases.
func BenchmarkApplyReport(b *testing.B) {
	d := newBenchDriver()
	d.submitN(b, "job-", b.N, 16)
	leases := d.acquireN(b, "bw-", b.N)
	cmds := make([][]byte, b.N)
	for i, l := range leases {
		cmds[i] = d.mustEncode(b, &Report{WorkerID: l.worker, JobID: l.job, Token: l.token,
			ReportID: "rep-" + strconv.Itoa(i), Outcome: OutcomeSucceeded, Ref: "ref-" + strconv.Itoa(i)})
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	for i, data := range cmds {
		res, err := d.apply(data)
		if err != nil {
			b.Fatalf("report %d: %v", i, err)
		}
		if st := res.(ReportResult).State; st != JobReported {
			b.Fatalf("report %d left the job %s", i, st)
		}
	}
	b.StopTimer()
	if st := d.f.Stats(); st.LiveLeases != 0 || st.Jobs[JobReported] != b.N {
		b.Fatalf("%d live leases and %d reported jobs, want 0 and %d", st.LiveLeases, st.Jobs[JobReported], b.N)
	}
}

// --- the one-million-job state ---

func bigJobs(tb testing.TB) int {
	if v := os.Getenv("LEASEHOLD_BENCH_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			tb.Fatalf("LEASEHOLD_BENCH_JOBS=%q: want a positive count", v)
		}
		return n
	}
	return 1_000_000
}

// buildBig builds, through Apply, a state of bigJobs queued jobs plus 5% more
// that were leased (by workers of MaxCapacity), half then reported. Eight
// priorities scatter each priority's jobs over every shard, so acquires made
// later pick old jobs all over the state.
func buildBig(b *testing.B) *benchDriver {
	b.Helper()
	queued := bigJobs(b)
	extra := queued / 20
	start := time.Now()
	d := newBenchDriver()
	d.submitN(b, "job-", queued+extra, 16)
	leases := d.acquireN(b, "holder-", extra)
	for i, l := range leases[:extra/2] {
		d.must(b, &Report{WorkerID: l.worker, JobID: l.job, Token: l.token,
			ReportID: "rep-" + strconv.Itoa(i), Outcome: OutcomeSucceeded, Ref: "ref-" + strconv.Itoa(i)})
	}
	st := d.f.Stats()
	if st.Jobs[JobQueued] != queued {
		b.Fatalf("built %d queued jobs, want %d", st.Jobs[JobQueued], queued)
	}
	b.Logf("built %v jobs (%d applies) in %v", st.Jobs, d.index, time.Since(start).Round(time.Millisecond))
	return d
}

// latHist is a log-linear histogram of durations (16 sub-buckets per power
// of two: 6% resolution) with the exact maximum.
type latHist struct {
	n       int64
	sum     time.Duration
	max     time.Duration
	buckets [1024]int64
}

func latBucket(ns int64) int {
	if ns < 16 {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 5
	return e*16 + int(ns>>e)
}

// latBucketMax is the largest duration that falls in bucket i.
func latBucketMax(i int) time.Duration {
	if i < 16 {
		return time.Duration(i)
	}
	e := i/16 - 1
	m := int64(i%16 + 16)
	return time.Duration((m+1)<<e - 1)
}

func (h *latHist) add(d time.Duration) {
	h.n++
	h.sum += d
	h.max = max(h.max, d)
	h.buckets[latBucket(int64(d))]++
}

// quantile returns an upper bound of the q-quantile (at most 6% above it).
func (h *latHist) quantile(q float64) time.Duration {
	target := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, c := range h.buckets {
		seen += c
		if seen >= target && c > 0 {
			return min(latBucketMax(i), h.max)
		}
	}
	return h.max
}

func (h *latHist) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Phases of the concurrent experiment.
const (
	phaseBaseline = iota // applies only, no snapshot taken yet
	phaseWrite           // a snapshot is being written
	phaseAfter           // the write is over, winding down
	phases
)

// applyLoad is the replica's apply goroutine: it cycles submit, acquire
// (one lease) and report, timing every Apply call into the histogram of the
// current phase, and takes a snapshot between two applies when asked (the
// FSM contract: Apply and Snapshot are called from one goroutine).
type applyLoad struct {
	d      *benchDriver
	worker string
	phase  atomic.Int32

	hist  [phases]latHist
	worst [phases]struct {
		d   time.Duration
		cmd string
	}
	start   [phases]time.Time
	end     [phases]time.Time
	freeze  time.Duration
	snapReq chan struct{}
	snapOut chan *Snapshot
	stop    chan struct{}
	done    chan struct{}
	err     error
}

func (a *applyLoad) run() {
	defer close(a.done)
	for i := 0; ; i++ {
		select {
		case <-a.stop:
			return
		case <-a.snapReq:
			t := time.Now()
			s := a.d.f.Snapshot()
			a.freeze = time.Since(t)
			a.snapOut <- s
		default:
		}
		if err := a.cycle(i); err != nil {
			a.err = err
			return
		}
	}
}

func (a *applyLoad) timed(c Command) (any, error) {
	data, err := a.d.encode(c)
	if err != nil {
		return nil, err
	}
	p := a.phase.Load()
	t := time.Now()
	res, err := a.d.apply(data)
	el := time.Since(t)
	a.hist[p].add(el)
	if el > a.worst[p].d {
		a.worst[p].d, a.worst[p].cmd = el, fmt.Sprintf("%T", c)
	}
	return res, err
}

func (a *applyLoad) cycle(i int) error {
	if _, err := a.timed(&SubmitJob{Spec: benchSpec("live-", i, 16)}); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	res, err := a.timed(&Acquire{WorkerID: a.worker, RequestID: "live-" + strconv.Itoa(i), Queues: benchQueues, Max: 1})
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	grants := res.(AcquireResult).Grants
	if len(grants) != 1 {
		return fmt.Errorf("acquire %d granted %d leases, want 1", i, len(grants))
	}
	g := grants[0]
	_, err = a.timed(&Report{WorkerID: a.worker, JobID: g.Job.ID, Token: g.Lease.Token,
		ReportID: "live-" + strconv.Itoa(i), Outcome: OutcomeSucceeded, Ref: "ref"})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// heapSampler records the peak heap per phase every millisecond, through
// runtime/metrics, which (unlike ReadMemStats) does not stop the world.
type heapSampler struct {
	phase     *atomic.Int32
	peakAlloc [phases]uint64 // bytes in heap objects, live or not yet collected
	peakInuse [phases]uint64 // plus free space in in-use spans (MemStats.HeapInuse)
	stop      chan struct{}
	done      chan struct{}
}

func (h *heapSampler) run() {
	defer close(h.done)
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
		}
		metrics.Read(samples)
		alloc := samples[0].Value.Uint64()
		p := h.phase.Load()
		h.peakAlloc[p] = max(h.peakAlloc[p], alloc)
		h.peakInuse[p] = max(h.peakInuse[p], alloc+samples[1].Value.Uint64())
	}
}

// gcPauses counts the GC stop-the-world pauses that ended in [from, to] and
// returns the longest (from the last 256 the runtime remembers).
func gcPauses(m *runtime.MemStats, from, to time.Time) (n int, longest time.Duration) {
	for i := range m.PauseEnd {
		end := int64(m.PauseEnd[i])
		if end >= from.UnixNano() && end <= to.UnixNano() {
			n++
			longest = max(longest, time.Duration(m.PauseNs[i]))
		}
	}
	return n, longest
}

// BenchmarkSnapshot1M measures, on a state of 1,000,000 queued jobs (plus
// 50,000 leased, half of them reported):
//
//	(a) the freeze, FSM.Snapshot alone: mean and max of 100;
//	(b) WriteTo into io.Discard (the timed part: ns/op is one freeze and
//	    one write) and into a bytes.Buffer, and the bytes written;
//	(c) Apply latency while a snapshot is written (to io.Discard) by another
//	    goroutine, against a baseline of the same apply loop (submit,
//	    acquire, report) with no snapshot being written. The snapshots of (a)
//	    and (b) are gone by then, but they advanced the copy-on-write
//	    generation, so the baseline pays the first-touch copies too;
//	(d) the heap: live before (c), peak during the baseline and during the
//	    write (sampled every millisecond, so it includes garbage not yet
//	    collected: compare the two), live while the snapshot is still
//	    held after the write, and live once it is dropped.
func BenchmarkSnapshot1M(b *testing.B) {
	if testing.Short() {
		b.Skip("1,000,000-job benchmark: not in -short mode")
	}
	b.StopTimer()
	var m metricList
	heapEmpty := liveHeap()
	d := buildBig(b)
	heapState := liveHeap()
	m.add(mb(heapState-heapEmpty), "state-MB")
	m.add(float64(heapState-heapEmpty)/float64(bigJobs(b)), "state-bytes/queued-job")

	// (a) the freeze alone.
	var freezeSum, freezeMax time.Duration
	const freezes = 100
	for range freezes {
		t := time.Now()
		s := d.f.Snapshot()
		el := time.Since(t)
		runtime.KeepAlive(s)
		freezeSum += el
		freezeMax = max(freezeMax, el)
	}
	m.add(us(freezeSum/freezes), "freeze-us")
	m.add(us(freezeMax), "freeze-max-us")

	// (b) WriteTo; timed: freeze + write to io.Discard.
	runtime.GC()
	var nDiscard int64
	var writeDiscard time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StartTimer()
		s := d.f.Snapshot()
		t := time.Now()
		n, err := s.WriteTo(io.Discard)
		writeDiscard += time.Since(t)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		nDiscard = n
	}
	writeDiscard /= time.Duration(b.N)
	m.add(ms(writeDiscard), "write-ms")
	m.add(float64(nDiscard), "snapshot-bytes")

	// Into a bytes.Buffer that grows as it goes, then into one grown
	// (and its memory touched) beforehand: the difference is the buffer's
	// growth, not the snapshot's encoding.
	var writeBuf [2]time.Duration
	for i := range writeBuf {
		runtime.GC()
		buf := new(bytes.Buffer)
		if i == 1 {
			p := make([]byte, nDiscard)
			for k := 0; k < len(p); k += 4096 {
				p[k] = 1 // fault the pages in
			}
			buf = bytes.NewBuffer(p[:0])
		}
		t := time.Now()
		nBuf, err := d.f.Snapshot().WriteTo(buf)
		writeBuf[i] = time.Since(t)
		if err != nil {
			b.Fatal(err)
		}
		if nBuf != nDiscard || int64(buf.Len()) != nBuf {
			b.Fatalf("wrote %d bytes to io.Discard, %d (buffer holds %d) to a buffer", nDiscard, nBuf, buf.Len())
		}
	}
	m.add(ms(writeBuf[0]), "write-buffer-ms")
	m.add(ms(writeBuf[1]), "write-buffer-pregrown-ms")
	b.Logf("(a) freeze: mean %v max %v over %d (%d shards, %d workers)", freezeSum/freezes, freezeMax, freezes,
		len(d.f.st.shards), len(d.f.st.workers))
	b.Logf("(b) write: io.Discard %v, bytes.Buffer %v, pre-grown bytes.Buffer %v; %d bytes (%.1f MB)",
		writeDiscard, writeBuf[0], writeBuf[1],
		nDiscard, mb(uint64(nDiscard)))

	// (c) and (d): applies during a concurrent write, against a baseline.
	d.must(b, &RegisterWorker{WorkerID: "live-worker", Capacity: 16})
	load := &applyLoad{d: d, worker: "live-worker", snapReq: make(chan struct{}), snapOut: make(chan *Snapshot),
		stop: make(chan struct{}), done: make(chan struct{})}
	sampler := &heapSampler{phase: &load.phase, stop: make(chan struct{}), done: make(chan struct{})}
	stopped := false
	stopAll := func() {
		if !stopped {
			stopped = true
			close(load.stop)
			<-load.done
			close(sampler.stop)
			<-sampler.done
		}
	}
	heapBefore := liveHeap()
	go sampler.run()
	go load.run()
	defer stopAll()

	window := max(3*time.Second, 4*writeDiscard)
	load.start[phaseBaseline] = time.Now()
	time.Sleep(window)
	load.end[phaseBaseline] = time.Now()
	// Snapshots written back to back for as long as the baseline ran, so
	// both windows have the same chance of catching a rare pause.
	load.phase.Store(phaseWrite)
	load.start[phaseWrite] = time.Now()
	var (
		snap                *Snapshot
		writes              int
		nConc               int64
		writeConcMax        time.Duration
		freezeConcMax       time.Duration
		writeConcSum        time.Duration
		freezeConcSum       time.Duration
		writeConcBytesTotal int64
	)
	for writes == 0 || time.Since(load.start[phaseWrite]) < window {
		snap = nil // the previous snapshot is garbage while the next one is written
		select {
		case load.snapReq <- struct{}{}:
			snap = <-load.snapOut
		case <-load.done:
			b.Fatalf("apply loop: %v", load.err)
		}
		t := time.Now()
		n, err := snap.WriteTo(io.Discard)
		el := time.Since(t)
		if err != nil {
			b.Fatal(err)
		}
		writes++
		nConc = n
		writeConcBytesTotal += n
		writeConcSum += el
		writeConcMax = max(writeConcMax, el)
		freezeConcSum += load.freeze
		freezeConcMax = max(freezeConcMax, load.freeze)
	}
	load.end[phaseWrite] = time.Now()
	load.phase.Store(phaseAfter)
	time.Sleep(100 * time.Millisecond)
	stopAll()
	if load.err != nil {
		b.Fatalf("apply loop: %v", load.err)
	}
	var mstats runtime.MemStats
	runtime.ReadMemStats(&mstats)
	gcBase, gcBaseMax := gcPauses(&mstats, load.start[phaseBaseline], load.end[phaseBaseline])
	gcWrite, gcWriteMax := gcPauses(&mstats, load.start[phaseWrite], load.end[phaseWrite])
	heapWithSnap := liveHeap()
	runtime.KeepAlive(snap)
	snap = nil
	heapAfter := liveHeap()

	base, during := &load.hist[phaseBaseline], &load.hist[phaseWrite]
	m.add(us(base.max), "max-apply-nosnap-us")
	m.add(us(base.quantile(0.99)), "p99-apply-nosnap-us")
	m.add(us(during.max), "max-apply-pause-us")
	m.add(us(during.quantile(0.99)), "p99-apply-us")
	m.add(us(during.quantile(0.999)), "p999-apply-us")
	m.add(float64(during.n), "applies-during-write")
	m.add(float64(writes), "writes-under-load")
	m.add(us(freezeConcMax), "freeze-under-load-max-us")
	m.add(ms(writeConcMax), "write-under-load-max-ms")
	m.add(mb(heapBefore), "heap-before-MB")
	m.add(mb(sampler.peakAlloc[phaseBaseline]), "heap-peak-nosnap-MB")
	m.add(mb(sampler.peakAlloc[phaseWrite]), "heap-peak-MB")
	m.add(mb(sampler.peakInuse[phaseWrite]), "heap-inuse-peak-MB")
	m.add(mb(heapWithSnap), "heap-live-snap-held-MB")
	m.add(mb(heapAfter), "heap-after-MB")
	for p, name := range []string{"baseline (no snapshot)", "during concurrent write"} {
		h := &load.hist[p]
		dur := load.end[p].Sub(load.start[p])
		b.Logf("(c) %s: %v, %d applies (%.0f/s), mean %v p50 %v p99 %v p99.9 %v max %v (a %s)",
			name, dur.Round(time.Millisecond), h.n, float64(h.n)/dur.Seconds(), h.mean(),
			h.quantile(0.5), h.quantile(0.99), h.quantile(0.999), h.max, load.worst[p].cmd)
	}
	b.Logf("(c) GC during baseline: %d pauses, longest %v; during write: %d pauses, longest %v",
		gcBase, gcBaseMax, gcWrite, gcWriteMax)
	b.Logf("(c) %d snapshots written under load (%.1f MB in all): freeze mean %v max %v, write mean %v max %v; the last was %d bytes",
		writes, mb(uint64(writeConcBytesTotal)), freezeConcSum/time.Duration(writes), freezeConcMax,
		writeConcSum/time.Duration(writes), writeConcMax, nConc)
	b.Logf("(d) heap: before %.1f MB, peak during baseline %.1f MB, peak during write %.1f MB (in use %.1f MB), "+
		"live with the snapshot held %.1f MB, live after %.1f MB",
		mb(heapBefore), mb(sampler.peakAlloc[phaseBaseline]), mb(sampler.peakAlloc[phaseWrite]),
		mb(sampler.peakInuse[phaseWrite]), mb(heapWithSnap), mb(heapAfter))
	m.report(b)
}

// bigSnapshot builds the 1M-job state and returns its snapshot bytes, its
// hash and stats, and the live heap the state took. The state itself is
// unreachable once it returns.
func bigSnapshot(b *testing.B) (data []byte, hash [32]byte, stats Stats, stateHeap uint64) {
	heapEmpty := liveHeap()
	d := buildBig(b)
	stateHeap = liveHeap() - heapEmpty
	var buf bytes.Buffer
	if _, err := d.f.Snapshot().WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes(), d.f.Hash(), d.f.Stats(), stateHeap
}

// BenchmarkRestore1M restores the 1,000,000-job snapshot into a fresh FSM,
// reading it from a file as a starting server does (so the heap holds
// little else when the restore starts). Restore decodes, rebuilds every
// index and runs the full invariant check; check-ms is that check alone,
// timed again on the restored state. restore-cpu-ms is the CPU time the
// process used during the restore, the collector's included (on an idle
// machine it runs on another core and costs little wall time), and
// peak-heap-MB the most heap it held meanwhile, live or not yet collected.
func BenchmarkRestore1M(b *testing.B) {
	if testing.Short() {
		b.Skip("1,000,000-job benchmark: not in -short mode")
	}
	b.StopTimer()
	data, hash, stats, stateHeap := bigSnapshot(b)
	benchRestore(b, data, hash, stats, stateHeap)
}

// BenchmarkRestoreLeased1M restores the state of the scale workload: a
// million jobs, every one leased, ten to a worker and to an acquire (the
// shape BenchmarkMemoryPerLiveLease builds), where each lease names its
// worker and its acquire's request. restored-state-MB against
// applied-state-MB is what a node restarted from a snapshot holds against
// the leader that built the state by applying it.
func BenchmarkRestoreLeased1M(b *testing.B) {
	if testing.Short() {
		b.Skip("1,000,000-lease benchmark: not in -short mode")
	}
	b.StopTimer()
	heapEmpty := liveHeap()
	d := buildLeased(b, bigJobs(b)/10*10, 10)
	stateHeap := liveHeap() - heapEmpty
	var buf bytes.Buffer
	if _, err := d.f.Snapshot().WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	hash, stats := d.f.Hash(), d.f.Stats()
	d = nil
	benchRestore(b, buf.Bytes(), hash, stats, stateHeap)
}

// benchRestore times the restore of data into a fresh FSM and checks the
// result against the state that wrote it.
func benchRestore(b *testing.B, data []byte, wantHash [32]byte, wantStats Stats, stateHeap uint64) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "snapshot")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	size := len(data)
	data = nil
	var g *FSM
	var cpu time.Duration
	var peak, heapBefore, heapAfter uint64
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		g = nil
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		heapBefore = liveHeap()
		stop, most := make(chan struct{}), make(chan uint64)
		go func() { most <- sampleHeapPeak(stop) }()
		g = New()
		used := proccpu.Self()
		b.StartTimer()
		err = g.Restore(bufio.NewReaderSize(f, 64<<10))
		b.StopTimer()
		cpu += proccpu.Self() - used
		close(stop)
		peak = max(peak, <-most)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		heapAfter = liveHeap()
	}
	restore := b.Elapsed() / time.Duration(b.N)
	cpu /= time.Duration(b.N)

	t := time.Now()
	if err := g.CheckInvariants(); err != nil {
		b.Fatal(err)
	}
	check := time.Since(t)
	if g.Hash() != wantHash {
		b.Fatal("the restored state hashes differently")
	}
	if got := g.Stats(); fmt.Sprint(got) != fmt.Sprint(wantStats) {
		b.Fatalf("restored stats %+v, want %+v", got, wantStats)
	}
	b.ReportMetric(ms(restore), "restore-ms")
	b.ReportMetric(ms(cpu), "restore-cpu-ms")
	b.ReportMetric(ms(check), "check-ms")
	b.ReportMetric(mb(peak), "peak-heap-MB")
	b.ReportMetric(float64(size), "snapshot-bytes")
	b.ReportMetric(mb(heapAfter), "heap-after-MB")
	b.ReportMetric(mb(heapAfter-heapBefore), "restored-state-MB")
	b.ReportMetric(mb(stateHeap), "applied-state-MB")
	b.Logf("restore %v, CPU %v, heap at most %.1f MB; of which the invariant check ~%v; snapshot %.1f MB; "+
		"heap before %.1f MB, after %.1f MB; state: restored %.1f MB, built by applies %.1f MB",
		restore, cpu, mb(peak), check, mb(uint64(size)), mb(heapBefore), mb(heapAfter), mb(heapAfter-heapBefore), mb(stateHeap))
}

// sampleHeapPeak reads the heap's objects (live or not yet collected)
// every 5 ms until stop is closed, and returns the most it saw.
func sampleHeapPeak(stop <-chan struct{}) uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var most uint64
	for {
		metrics.Read(sample)
		most = max(most, sample[0].Value.Uint64())
		select {
		case <-stop:
			metrics.Read(sample)
			return max(most, sample[0].Value.Uint64())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// BenchmarkMemoryPerQueuedJob reports the live heap per queued job (64-byte
// payload), with the event log (its submit events, up to MaxEvents) and
// without it (after a Compact drops every event).
func BenchmarkMemoryPerQueuedJob(b *testing.B) {
	const jobs = 200_000
	for _, tc := range []struct {
		name       string
		submitters int
	}{{"no-submitter", 0}, {"16-submitters", 16}} {
		b.Run(tc.name, func(b *testing.B) {
			var perJob, perJobNoEvents float64
			for range b.N {
				b.StopTimer()
				before := liveHeap()
				d := newBenchDriver()
				b.StartTimer()
				d.submitN(b, "job-", jobs, tc.submitters)
				b.StopTimer()
				withEvents := liveHeap()
				d.must(b, &Compact{JobsBefore: 0, EventsBefore: math.MaxInt64, Limit: 1})
				noEvents := liveHeap()
				if st := d.f.Stats(); st.Jobs[JobQueued] != jobs || st.Events != 0 {
					b.Fatalf("stats %+v", st)
				}
				runtime.KeepAlive(d)
				perJob = float64(withEvents-before) / jobs
				perJobNoEvents = float64(noEvents-before) / jobs
			}
			b.ReportMetric(perJob, "bytes/job")
			b.ReportMetric(perJobNoEvents, "bytes/job-no-events")
		})
	}
}

// BenchmarkMemoryPerLiveLease reports the live heap per live lease in the
// shape of `leasehold bench scale`: jobs with no payload, workers holding
// 10 leases each, granted and started by one acquire per worker with a
// client's 32-character request id. bytes/lease counts everything the
// state holds, the event log included (at most MaxEvents); the -no-events
// figure is after a Compact dropped every event; inuse-bytes/lease counts
// the heap's spans in use instead of its live objects: the fragmentation
// the leader's heap figure in bench scale includes. LEASEHOLD_BENCH_JOBS sets
// the leases (default 1,000,000, skipped with -short).
func BenchmarkMemoryPerLiveLease(b *testing.B) {
	if testing.Short() && os.Getenv("LEASEHOLD_BENCH_JOBS") == "" {
		b.Skip("1,000,000-lease benchmark: not in -short mode")
	}
	const per = 10
	leases := bigJobs(b) / per * per
	var perLease, perLeaseNoEvents, inusePerLease float64
	for range b.N {
		b.StopTimer()
		before, beforeInuse := liveHeap(), heapInuse()
		d := buildLeased(b, leases, per)
		withEvents, withEventsInuse := liveHeap(), heapInuse()
		d.must(b, &Compact{JobsBefore: 0, EventsBefore: math.MaxInt64, Limit: 1})
		noEvents := liveHeap()
		if st := d.f.Stats(); st.LiveLeases != leases {
			b.Fatalf("%d live leases, want %d", st.LiveLeases, leases)
		}
		runtime.KeepAlive(d)
		perLease = float64(withEvents-before) / float64(leases)
		perLeaseNoEvents = float64(noEvents-before) / float64(leases)
		inusePerLease = float64(withEventsInuse-beforeInuse) / float64(leases)
	}
	b.ReportMetric(perLease, "bytes/lease")
	b.ReportMetric(inusePerLease, "inuse-bytes/lease")
	b.ReportMetric(perLeaseNoEvents, "bytes/lease-no-events")
}

// buildLeased builds, through Apply, what the bench's scale workload
// holds: leases jobs in one queue, with the API's defaults for what the
// bench leaves out, every one leased and started, per to a worker and to
// an acquire.
func buildLeased(b *testing.B, leases, per int) *benchDriver {
	b.Helper()
	d := newBenchDriver()
	const run = "bench-0a1b2c3d"
	for i := range leases {
		spec := JobSpec{ID: run + "-scale-" + strconv.Itoa(i), Queue: run + "-scale", Kind: "bench", Submitter: run,
			OnWorkerLost: LostRequeue, MaxAttempts: 3, MaxWorkerLosses: 5}
		d.must(b, &SubmitJob{Spec: spec})
	}
	for w := range leases / per {
		id := run + "-w" + strconv.Itoa(w)
		d.must(b, &RegisterWorker{WorkerID: id, Capacity: uint32(per)})
		res := d.must(b, &Acquire{WorkerID: id, RequestID: fmt.Sprintf("%032x", w), Queues: []string{run + "-scale"},
			Max: uint32(per), Start: true}).(AcquireResult)
		if len(res.Grants) != per {
			b.Fatalf("worker %d granted %d leases", w, len(res.Grants))
		}
	}
	return d
}

// heapInuse is the bytes of heap spans in use, fragmentation included, as
// read right after liveHeap's collection.
func heapInuse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkApplyCycleOnEmptyQueue times one job's whole cycle (submit,
// acquire, report) on a queue that holds no other job, as under a job
// cycle whose workers keep up with the executors: each job refills a queue
// the one before emptied.
func BenchmarkApplyCycleOnEmptyQueue(b *testing.B) {
	d := newBenchDriver()
	d.must(b, &RegisterWorker{WorkerID: "bw", Capacity: 1})
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		d.must(b, &SubmitJob{Spec: benchSpec("job-", i, 1)})
		res := d.must(b, &Acquire{WorkerID: "bw", RequestID: "acq-" + strconv.Itoa(i), Queues: benchQueues, Max: 1}).(AcquireResult)
		if len(res.Grants) != 1 {
			b.Fatalf("acquire %d granted %d leases, want 1", i, len(res.Grants))
		}
		g := res.Grants[0]
		d.must(b, &Report{WorkerID: "bw", JobID: g.Job.ID, Token: g.Lease.Token, ReportID: "rep-" + strconv.Itoa(i),
			Outcome: OutcomeSucceeded})
	}
	b.StopTimer()
	if st := d.f.Stats(); st.Jobs[JobQueued] != 0 || st.Jobs[JobReported] != b.N {
		b.Fatalf("%d queued and %d reported jobs, want 0 and %d", st.Jobs[JobQueued], st.Jobs[JobReported], b.N)
	}
}
