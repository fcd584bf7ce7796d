package bench

import (
	"math/bits"
	"time"
)

// hist records durations in log-linear buckets: exact below 256ns, then
// 128 buckets per power of two, so a quantile is within 0.8% of the true
// value. The maximum is kept exactly. Not safe for concurrent use: each
// caller records into its own and they are merged at the end.
type hist struct {
	counts []uint64
	n      uint64
	max    time.Duration
}

const (
	subBits    = 7
	subBuckets = 1 << subBits                    // buckets per power of two
	histSize   = (64 - subBits + 1) * subBuckets // enough for any uint64
)

func newHist() *hist { return &hist{counts: make([]uint64, histSize)} }

func bucketOf(v uint64) int {
	if v < 2*subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1 // v>>e is in [128, 256)
	return e*subBuckets + int(v>>e)
}

// bucketValue is the middle of bucket i.
func bucketValue(i int) time.Duration {
	if i < 2*subBuckets {
		return time.Duration(i)
	}
	e := i/subBuckets - 1
	lo := uint64(i%subBuckets+subBuckets) << e
	return time.Duration(lo + (uint64(1)<<e)/2)
}

func (h *hist) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
	h.max = max(h.max, d)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the value at rank ceil(q×n), or 0 for an empty hist.
// The top quantile is the exact maximum.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), h.n)
	if rank == h.n {
		return h.max
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(bucketValue(i), h.max)
		}
	}
	return h.max
}
