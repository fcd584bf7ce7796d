package checker

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// Report is everything Check found.
type Report struct {
	Entries int `json:"entries"`
	// Errors: the history could not be checked at all.
	Errors  []string `json:"errors,omitempty"`
	Results []Result `json:"results"`
	// Ops counts calls by op name.
	Ops map[string]OpCounts `json:"ops"`
	// Faults counts nemesis actions by type.
	Faults map[string]int `json:"faults"`
	// MinExpirySlackMs: the smallest gap between a holder's stop and the
	// first sight of its lease's expiry (I4); nil if none was measured.
	MinExpirySlackMs *float64 `json:"min_expiry_slack_ms,omitempty"`
	// LeaderRecoveryMs: from the last heal to the first leader seen (I12).
	LeaderRecoveryMs *float64 `json:"leader_recovery_ms,omitempty"`
	// OrphanRecoveryMs: from the last heal to each orphaned job's re-lease
	// (I12).
	OrphanRecoveryMs []float64 `json:"orphan_recovery_ms,omitempty"`
	// DiskReadyMs: the longest a node took to be ready again after its
	// disk was freed (I12); nil without disk faults.
	DiskReadyMs *float64 `json:"disk_ready_ms,omitempty"`
	// FloodCalls and FloodServed count the flood's calls and those
	// answered as if allowed (F1).
	FloodCalls  int `json:"flood_calls,omitempty"`
	FloodServed int `json:"flood_served,omitempty"`
	// Visualizations are the Porcupine HTML files written (I10).
	Visualizations []string `json:"visualizations,omitempty"`
}

// OpCounts are the calls of one op name by how they ended.
type OpCounts struct {
	Attempted int `json:"attempted"`
	OK        int `json:"ok"`
	Fail      int `json:"fail"`
	Info      int `json:"info"`
}

// OK reports whether the history was checked and no checker found a
// violation.
func (r *Report) OK() bool {
	if len(r.Errors) > 0 || len(r.Results) == 0 {
		return false
	}
	for i := range r.Results {
		if !r.Results[i].OK() {
			return false
		}
	}
	return true
}

// Violations counts violations over every checker.
func (r *Report) Violations() int {
	n := 0
	for i := range r.Results {
		n += len(r.Results[i].Violations)
	}
	return n
}

// Result returns the result for an invariant ("I1".."I13", "O1", "F1").
func (r *Report) Result(invariant string) (Result, bool) {
	for _, res := range r.Results {
		if res.Invariant == invariant {
			return res, true
		}
	}
	return Result{}, false
}

func (r *Report) fillTotals(v *view) {
	r.Ops = map[string]OpCounts{}
	for i := range v.ops {
		op := &v.ops[i]
		c := r.Ops[op.Name]
		c.Attempted++
		switch op.Status {
		case history.StatusOK:
			c.OK++
		case history.StatusFail:
			c.Fail++
		default:
			c.Info++
		}
		r.Ops[op.Name] = c
	}
	r.Faults = map[string]int{}
	for _, f := range v.faults {
		r.Faults[f.typ]++
	}
}

func (r *Report) fillHighlights(v *view) {
	msp := func(ns int64) *float64 { x := ms(ns); return &x }
	if v.minSlack != nil {
		r.MinExpirySlackMs = msp(*v.minSlack)
	}
	if v.leaderRec != nil {
		r.LeaderRecoveryMs = msp(*v.leaderRec)
	}
	for _, ns := range v.orphanRec {
		r.OrphanRecoveryMs = append(r.OrphanRecoveryMs, ms(ns))
	}
	if v.diskReady != nil {
		r.DiskReadyMs = msp(*v.diskReady)
	}
	r.FloodCalls = len(v.floods)
	for _, i := range v.floods {
		if v.entries[i].Flood.Served {
			r.FloodServed++
		}
	}
	r.Visualizations = v.viz
}

// WriteJSON writes the report as indented JSON, with "ok" on top.
func (r *Report) WriteJSON(w io.Writer) error {
	type withOK struct {
		OK bool `json:"ok"`
		*Report
	}
	b, err := json.MarshalIndent(withOK{r.OK(), r}, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// summaryViolations is how many violations Summary prints per checker.
const summaryViolations = 10

// Summary writes a fixed-width table for a terminal: one row per
// invariant, the op and fault counts, the recovery figures, then the
// first violations and notes of each checker.
func (r *Report) Summary(w io.Writer) error {
	var b strings.Builder
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "jepsen-lite: %d entries, %d violations: %s\n", r.Entries, r.Violations(), verdict)
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "error: %s\n", e)
	}
	if len(r.Results) > 0 {
		fmt.Fprintf(&b, "\n%-4s %-24s %-6s %5s  %s\n", "INV", "CHECK", "RESULT", "VIOL", "NOTES")
		for _, res := range r.Results {
			status := "pass"
			if !res.OK() {
				status = "FAIL"
			}
			fmt.Fprintf(&b, "%-4s %-24s %-6s %5d  %d\n", res.Invariant, res.Name, status, len(res.Violations), len(res.Notes))
		}
	}
	if len(r.Ops) > 0 {
		fmt.Fprintf(&b, "\n%-18s %9s %8s %8s %8s\n", "OP", "ATTEMPTED", "OK", "FAIL", "INFO")
		for _, name := range sortedKeys(r.Ops) {
			c := r.Ops[name]
			fmt.Fprintf(&b, "%-18s %9d %8d %8d %8d\n", name, c.Attempted, c.OK, c.Fail, c.Info)
		}
	}
	if len(r.Faults) > 0 {
		fmt.Fprintf(&b, "\n%-18s %9s\n", "FAULT", "COUNT")
		for _, name := range sortedKeys(r.Faults) {
			fmt.Fprintf(&b, "%-18s %9d\n", name, r.Faults[name])
		}
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "%-28s %s\n", "min expiry slack", optMs(r.MinExpirySlackMs))
	fmt.Fprintf(&b, "%-28s %s\n", "leader after heal", optMs(r.LeaderRecoveryMs))
	if len(r.OrphanRecoveryMs) > 0 {
		fmt.Fprintf(&b, "%-28s %d, slowest %.1fms\n", "orphans re-leased", len(r.OrphanRecoveryMs), slices.Max(r.OrphanRecoveryMs))
	} else {
		fmt.Fprintf(&b, "%-28s -\n", "orphans re-leased")
	}
	if o1, ok := r.Result("O1"); ok && o1.Stats["outsider_attempts"] > 0 {
		fmt.Fprintf(&b, "%-28s %.0f, %.0f accepted; capture server reached %.0f times\n", "outsider attempts",
			o1.Stats["outsider_attempts"], o1.Stats["outsider_accepted"], o1.Stats["captured"])
	}
	if o1, ok := r.Result("O1"); ok && o1.Stats["term_bound"] > 0 {
		fmt.Fprintf(&b, "%-28s %.0f (bound %.0f)\n", "highest final term", o1.Stats["max_term"], o1.Stats["term_bound"])
	}
	if i12, ok := r.Result("I12"); ok && r.DiskReadyMs != nil {
		fmt.Fprintf(&b, "%-28s %.0f freed, slowest ready after %.1fms (bound %.0fms)\n", "disks", i12.Stats["disks_freed"],
			*r.DiskReadyMs, i12.Stats["disk_ready_bound_ms"])
	}
	if f1, ok := r.Result("F1"); ok && r.FloodCalls > 0 {
		fmt.Fprintf(&b, "%-28s %d, %d served; idle connections %.0f (held up to %.0fms)\n", "flood calls", r.FloodCalls, r.FloodServed,
			f1.Stats["calls_idle-conn"], f1.Stats["idle_held_max_ms"])
		fmt.Fprintf(&b, "%-28s %.0f, %.1f/s (bound %.0f)\n", "audit events of the flood", f1.Stats["audit_events_flood"],
			f1.Stats["audit_per_s"], f1.Stats["audit_bound"])
	}
	if f1, ok := r.Result("F1"); ok && f1.Stats["final_events"] > 0 {
		fmt.Fprintf(&b, "%-28s %.0f events from seq %.0f (the run saw seq %.0f to %.0f)\n", "final event log",
			f1.Stats["final_events"], f1.Stats["final_first_seq"], f1.Stats["watch_first_seq"], f1.Stats["watch_last_seq"])
		var types []string
		for _, k := range sortedKeys(f1.Stats) {
			if typ, ok := strings.CutPrefix(k, "final_events_"); ok {
				types = append(types, fmt.Sprintf("%s %.0f", typ, f1.Stats[k]))
			}
		}
		fmt.Fprintf(&b, "%-28s %s\n", "final events by type", strings.Join(types, ", "))
	}
	for _, p := range r.Visualizations {
		fmt.Fprintf(&b, "%-28s %s\n", "visualization", p)
	}
	for _, res := range r.Results {
		if res.OK() && len(res.Notes) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s %s\n", res.Invariant, res.Name)
		for i, vio := range res.Violations {
			if i == summaryViolations {
				fmt.Fprintf(&b, "  ... and %d more\n", len(res.Violations)-i)
				break
			}
			fmt.Fprintf(&b, "  ! %s\n", vio.Msg)
		}
		for _, n := range res.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func optMs(x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fms", *x)
}
