package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one run's figures. Line prints it as the RESULT line.
type Result struct {
	Workload    string
	Concurrency int
	// Ops are the operations started inside the window that succeeded,
	// Errs those that failed.
	Ops, Errs int64
	// Window is the measured window: Duration, or shorter when the job pool
	// ran out (acquire, job-cycle) or, for expiry, the drain.
	Window time.Duration
	// OpsPerSec is Ops / Window.
	OpsPerSec     float64
	P50, P99, Max time.Duration
	// CPUServers and CPUGenerator are CPU time used over the window in % of
	// one core: the servers' summed (NaN when not known: an external
	// cluster) and this process's.
	CPUServers, CPUGenerator float64
	// RaftWritesPerOp is the leader's Raft log writes (fsyncs) over the
	// window per op; NaN when there were no ops.
	RaftWritesPerOp float64
	// Keys are the workload's own figures, in print order.
	Keys []KV
}

// KV is one key=value of a RESULT line. Values never contain spaces.
type KV struct{ Key, Value string }

func (r *Result) add(key string, value any) {
	var s string
	switch v := value.(type) {
	case float64:
		s = num(v, 3)
	case time.Duration:
		s = ms(v)
	case bool:
		s = "0"
		if v {
			s = "1"
		}
	default:
		s = fmt.Sprint(v)
	}
	r.Keys = append(r.Keys, KV{key, strings.Join(strings.Fields(s), "_")})
}

// Get returns the value of key on the RESULT line.
func (r *Result) Get(key string) (string, bool) {
	for _, kv := range r.pairs() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

func num(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "NA"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func ms(d time.Duration) string { return num(float64(d)/float64(time.Millisecond), 3) }

// pairs are every key of the line, the fixed ones first.
func (r *Result) pairs() []KV {
	out := []KV{
		{"system", "leasehold"}, {"op", r.Workload}, {"c", strconv.Itoa(r.Concurrency)},
		{"ops", strconv.FormatInt(r.Ops, 10)}, {"ops_s", num(r.OpsPerSec, 1)},
		{"p50_ms", ms(r.P50)}, {"p99_ms", ms(r.P99)}, {"max_ms", ms(r.Max)},
		{"errs", strconv.FormatInt(r.Errs, 10)},
		{"cpu_srv_pct", num(r.CPUServers, 1)}, {"cpu_gen_pct", num(r.CPUGenerator, 1)},
		{"raft_writes_per_op", num(r.RaftWritesPerOp, 3)},
	}
	return append(out, r.Keys...)
}

// Line is the one-line form: RESULT key=value ..., the fixed keys first,
// then the workload's.
func (r *Result) Line() string {
	var b strings.Builder
	b.WriteString("RESULT")
	for _, kv := range r.pairs() {
		b.WriteString(" ")
		b.WriteString(kv.Key)
		b.WriteString("=")
		b.WriteString(kv.Value)
	}
	return b.String()
}

// ParseLine reads a RESULT line back into its keys.
func ParseLine(line string) (map[string]string, error) {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "RESULT" {
		return nil, fmt.Errorf("not a RESULT line: %q", line)
	}
	out := make(map[string]string, len(f)-1)
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("RESULT line: %q is not key=value", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("RESULT line: key %s twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// WriteJSON writes the line's keys as one JSON object, numbers as numbers.
func (r *Result) WriteJSON(w io.Writer) error {
	out := map[string]any{}
	for _, kv := range r.pairs() {
		if v, err := strconv.ParseFloat(kv.Value, 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
			out[kv.Key] = v
		} else {
			out[kv.Key] = kv.Value
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// WriteTable writes the result for a person.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tc=%d\twindow %s\n", r.Workload, r.Concurrency, r.Window.Round(time.Millisecond))
	fmt.Fprintf(tw, "  ops\t%d ok, %d errors\t%s/s\n", r.Ops, r.Errs, num(r.OpsPerSec, 1))
	fmt.Fprintf(tw, "  latency\tp50 %s ms\tp99 %s ms\tmax %s ms\n", ms(r.P50), ms(r.P99), ms(r.Max))
	fmt.Fprintf(tw, "  cpu (%% of a core)\tservers %s\tgenerator %s\n", num(r.CPUServers, 1), num(r.CPUGenerator, 1))
	fmt.Fprintf(tw, "  raft log writes per op\t%s\t\n", num(r.RaftWritesPerOp, 3))
	for _, kv := range r.Keys {
		fmt.Fprintf(tw, "  %s\t%s\t\n", kv.Key, kv.Value)
	}
	return tw.Flush()
}
