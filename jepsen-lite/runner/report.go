package runner

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/checker"
)

// runReport is report.json: the run's settings, its verdict and every
// figure the checkers measured.
type runReport struct {
	Name      string   `json:"name"`
	Passed    bool     `json:"passed"`
	Expect    []string `json:"expect,omitempty"`
	Caught    []string `json:"caught,omitempty"`
	Found     []string `json:"found,omitempty"`
	Problems  []string `json:"problems,omitempty"`
	Notes     []string `json:"notes,omitempty"`
	Net       string   `json:"net"`
	Secure    bool     `json:"secure"`
	Nodes     int      `json:"nodes"`
	Workers   int      `json:"workers"`
	Nemesis   []string `json:"nemesis"`
	Flood     bool     `json:"flood"`
	Seed      int64    `json:"seed"`
	Bin       string   `json:"bin"`
	ElapsedMs float64  `json:"elapsed_ms"`
	Timings   struct {
		RenewMs, GraceMs, TolerationMs, ElectionMs float64
	} `json:"timings"`
	Violations int             `json:"violations"`
	Check      *checker.Report `json:"check"`
}

func (o *Outcome) jsonReport() runReport {
	r := runReport{Name: o.Config.Name, Passed: o.Passed, Expect: o.Config.Expect, Caught: o.Caught, Found: o.Found, Problems: o.Problems, Notes: o.Notes,
		Net: o.Net, Secure: o.Config.Secure, Nodes: o.Config.Nodes, Workers: o.Config.Workers, Nemesis: o.Config.Nemesis,
		Flood: o.Config.Flood, Seed: o.Config.Seed,
		Bin: o.Config.Bin, ElapsedMs: ms(o.Elapsed), Violations: o.Report.Violations(), Check: &o.Report}
	t := o.Config.Timings
	r.Timings.RenewMs, r.Timings.GraceMs, r.Timings.TolerationMs, r.Timings.ElectionMs = ms(t.Renew), ms(t.Grace), ms(t.Toleration), ms(t.Election)
	return r
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Summary writes the run's verdict and the checkers' table.
func (o *Outcome) Summary(w io.Writer) {
	verdict := "PASS"
	if !o.Passed {
		verdict = "FAIL"
	}
	what := "no violation expected"
	if len(o.Config.Expect) > 0 {
		what = fmt.Sprintf("broken build, expected %s, caught [%s]", strings.Join(o.Config.Expect, ","), strings.Join(o.Caught, ","))
	}
	fmt.Fprintf(w, "=== %s: %s (%s) net=%s secure=%v nodes=%d nemesis=%s flood=%v seed=%d in %s\n", o.Config.Name, verdict, what, o.Net,
		o.Config.Secure, o.Config.Nodes, strings.Join(o.Config.Nemesis, ","), o.Config.Flood, o.Config.Seed, o.Elapsed.Round(time.Second))
	for _, p := range o.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	for _, n := range o.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	o.Report.Summary(w)
	fmt.Fprintf(w, "files: %s (history.jsonl, report.json, logs/)\n\n", o.Config.Out)
}
