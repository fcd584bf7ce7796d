package fsm

// RetryPolicy spaces the executions of a job whose executions fail
// retryably. After its n-th failure (Job.Attempts = n) the job waits
//
//	Initial × (Multiplier/1000)^(n-1), at most Max,
//
// shortened by up to Jitter percent, before it is queued for a grant again.
// The jitter is derived from the job's id and n, so every replica computes
// the same delay; jobs that failed together still spread out. The
// arithmetic is integer only: floating point may round differently where
// the compiler fuses operations, and replicas must agree to the nanosecond.
type RetryPolicy struct {
	Initial    int64  // nanoseconds, > 0
	Max        int64  // nanoseconds, >= Initial
	Multiplier uint32 // per mille: 1000 keeps the delay, 2000 doubles it
	Jitter     uint32 // percent, 0 to 100
}

// retryDelay is the wait after the job's attempt-th failure.
func (p *RetryPolicy) retryDelay(jobID string, attempt uint32) int64 {
	d := p.Initial
	for i := uint32(1); i < attempt && d < p.Max; i++ {
		if d > (1<<62)/int64(p.Multiplier) {
			d = p.Max
			break
		}
		d = d * int64(p.Multiplier) / 1000
	}
	d = min(d, p.Max)
	if p.Jitter > 0 {
		// u in [0, 10000]: a fraction of the jitter, from FNV-1a of id and attempt.
		h := uint64(14695981039346656037)
		for i := 0; i < len(jobID); i++ {
			h = (h ^ uint64(jobID[i])) * 1099511628211
		}
		for i := range 4 {
			h = (h ^ uint64(byte(attempt>>(8*i)))) * 1099511628211
		}
		u := int64(h % 10001)
		d -= d / 1_000_000 * int64(p.Jitter) * u // Jitter% × u/10000, in millionths
	}
	return d
}

// internRetry returns the state's one copy of a policy: a million jobs
// submitted with the same policy share it. Policies are never mutated.
func (s *state) internRetry(p *RetryPolicy) *RetryPolicy {
	if p == nil {
		return nil
	}
	if c, ok := s.retries[*p]; ok {
		return c
	}
	if len(s.retries) >= maxInterned {
		clear(s.retries)
	}
	c := *p
	s.retries[c] = &c
	return &c
}
