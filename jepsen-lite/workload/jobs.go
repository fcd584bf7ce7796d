package workload

import (
	"math/rand/v2"
	"sync"

	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Jobs is the runner's record of the jobs it asked for, shared by its
// actors. Safe for concurrent use.
type Jobs struct {
	mu    sync.Mutex
	ids   []string
	specs map[string]*leaseholdv1.JobSpec
}

// NewJobs returns an empty record.
func NewJobs() *Jobs { return &Jobs{specs: map[string]*leaseholdv1.JobSpec{}} }

// Add records a job that was submitted (or may have been).
func (j *Jobs) Add(spec *leaseholdv1.JobSpec) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.specs[spec.GetId()]; ok {
		return
	}
	j.specs[spec.GetId()] = spec
	j.ids = append(j.ids, spec.GetId())
}

// Spec returns a recorded job's spec.
func (j *Jobs) Spec(id string) *leaseholdv1.JobSpec {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.specs[id]
}

// Pick returns a job, favouring recent ones (half the time one of the
// last 20); "" when there are none.
func (j *Jobs) Pick(rng *rand.Rand) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := len(j.ids)
	if n == 0 {
		return ""
	}
	if rng.IntN(2) == 0 {
		return j.ids[n-1-rng.IntN(min(n, 20))]
	}
	return j.ids[rng.IntN(n)]
}

// IDs lists every recorded job.
func (j *Jobs) IDs() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.ids...)
}

// Len is how many jobs are recorded.
func (j *Jobs) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.ids)
}
