package checker

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// maxLinRefs bounds the entries a linearizability violation cites; the
// visualization shows them all.
const maxLinRefs = 50

// checkLinearizable (I10): the lease operations are linearizable.
//
// The history is split by job (model.go specifies one job) and each part
// checked by Porcupine: submits, the grants of acknowledged acquires,
// starts, reports, releases, cancels and kills (info ones may take effect
// any time after their invoke, or never), and linearizable reads (fence
// checks, non-stale get_job; an unanswered read tells nothing and is
// left out). Heartbeats, list_leases and stale reads are not part of it:
// they promise no linearizability. A job Porcupine cannot decide within
// Options.LinearizabilityTimeout is noted. A failing job's visualization
// goes to Options.OutDir. A job that a worker whose calls the history does
// not hold (history.Run's unrecorded: a shell worker) held a lease of is
// left out, counted: its lease operations are only partly seen.
func checkLinearizable(v *view, r *Result) {
	envCancel := false
	for i := range v.ops {
		if v.ops[i].Name == history.OpCancelSubmitter && v.ops[i].Status != history.StatusOK {
			envCancel = true
		}
	}
	clients := map[string]int{}
	checked, nops, unknown, unseen := 0, 0, 0, 0
	for _, job := range v.jobs {
		if v.heldByUnrecorded(job) {
			unseen++
			continue
		}
		ops, hasSubmit := v.linOps(job, clients)
		if len(ops) == 0 {
			continue
		}
		checked++
		nops += len(ops)
		model := jobModel(!hasSubmit, envCancel, v.opts.AllowCompacted, v.timed(job))
		res, info := porcupine.CheckOperationsVerbose(model, ops, v.opts.LinearizabilityTimeout)
		switch res {
		case porcupine.Unknown:
			unknown++
			r.note(fmt.Sprintf("job %s: Porcupine timed out after %v; not judged", job, v.opts.LinearizabilityTimeout))
		case porcupine.Illegal:
			msg := fmt.Sprintf("job %s: its %d lease operations are not linearizable", job, len(ops))
			if path, err := v.visualize(job, model, info, ops); err != nil {
				r.note(fmt.Sprintf("job %s: visualization not written: %v", job, err))
			} else if path != "" {
				msg += "; see " + path
			}
			refs := make([]int, 0, min(len(ops), maxLinRefs))
			for _, op := range ops[:min(len(ops), maxLinRefs)] {
				refs = append(refs, op.Metadata.(int))
			}
			r.add(msg, job, 0, refs...)
		}
	}
	r.Stats["jobs_checked"] = float64(checked)
	r.Stats["operations"] = float64(nops)
	r.Stats["jobs_timed_out"] = float64(unknown)
	if unseen > 0 {
		r.Stats["jobs_unrecorded_holder"] = float64(unseen)
		r.note(fmt.Sprintf("%d jobs left out: a worker whose calls are not recorded (a shell worker) held a lease of each", unseen))
	}
}

// heldByUnrecorded reports whether a worker whose calls the history does
// not hold was granted a lease of job, by the events or a final state.
func (v *view) heldByUnrecorded(job string) bool {
	if v.run == nil || len(v.run.Unrecorded) == 0 {
		return false
	}
	for _, e := range v.events {
		if e.ev.JobID == job && e.ev.Type == history.EventLeaseAcquired && slices.Contains(v.run.Unrecorded, e.ev.WorkerID) {
			return true
		}
	}
	for _, f := range v.finals {
		if j, ok := f.jobs[job]; ok && slices.ContainsFunc(j.Leases, func(l history.Lease) bool { return slices.Contains(v.run.Unrecorded, l.WorkerID) }) {
			return true
		}
	}
	return false
}

// linOps turns job's calls into Porcupine operations, and says whether a
// submit is among them (if not, the job existed before the history).
func (v *view) linOps(job string, clients map[string]int) ([]porcupine.Operation, bool) {
	var out []porcupine.Operation
	hasSubmit := false
	add := func(op *history.Operation, in linInput, o linOutput) {
		id, ok := clients[op.Process]
		if !ok {
			id = len(clients)
			clients[op.Process] = id
		}
		ret := op.CompleteNs
		if op.Status == history.StatusInfo {
			ret = never
		}
		out = append(out, porcupine.Operation{ClientId: id, Input: in, Call: op.InvokeNs, Output: o, Return: ret, Metadata: op.Index})
	}
	for _, i := range v.jobOps[job] {
		op := &v.ops[i]
		in := linInput{Op: op.Name, Token: op.Input.Token, ReportID: op.Input.ReportID,
			Outcome: op.Input.Outcome, Retryable: op.Input.Retryable}
		o := linOutput{Status: op.Status, Reason: op.Reason, State: op.Output.State, Outcome: op.Output.Outcome,
			Current: op.Output.Current, CurrentToken: op.Output.CurrentToken, Created: op.Output.Created, Revoked: op.Output.Revoked}
		switch op.Name {
		case history.OpSubmit:
			hasSubmit = true
		case history.OpStart, history.OpReport:
		case history.OpRelease, history.OpCancel, history.OpKill:
			// Their answers carry the job; its state is the one to check.
			if j := op.Output.Job; j != nil && o.State == "" {
				o.State = j.State
			}
		case history.OpFenceCheck:
			if op.Status == history.StatusInfo {
				continue
			}
		case history.OpGetJob:
			if op.Status == history.StatusInfo || op.Input.Stale {
				continue
			}
			if op.Status == history.StatusOK {
				if op.Output.Job == nil {
					continue
				}
				o.State, o.CurrentToken = op.Output.Job.State, op.Output.Job.CurrentToken
			}
		default:
			continue
		}
		add(op, in, o)
	}
	for _, g := range v.grants[job] {
		add(&v.ops[g.op], linInput{Op: history.OpAcquire, Token: g.g.Token, Started: g.g.Started, Replayed: g.replayed},
			linOutput{Status: history.StatusOK})
	}
	for _, i := range v.subCancels[job] {
		add(&v.ops[i], linInput{Op: history.OpCancel}, linOutput{Status: history.StatusOK, State: history.JobCancelled})
	}
	return out, hasSubmit
}

// visualize writes Porcupine's HTML for one job, with the faults as
// annotations, and returns its path ("" when OutDir is unset).
func (v *view) visualize(job string, model porcupine.Model, info porcupine.LinearizationInfo, ops []porcupine.Operation) (string, error) {
	if v.opts.OutDir == "" {
		return "", nil
	}
	if err := os.MkdirAll(v.opts.OutDir, 0o755); err != nil {
		return "", err
	}
	lo, hi := never, int64(0)
	for _, op := range ops {
		lo = min(lo, op.Call)
		if op.Return != never {
			hi = max(hi, op.Return)
		}
		hi = max(hi, op.Call)
	}
	var notes []porcupine.Annotation
	for _, f := range v.faults {
		if !f.overlaps(lo, hi) {
			continue
		}
		notes = append(notes, porcupine.Annotation{
			Tag: "nemesis", Start: max(f.start, lo), End: min(f.end, hi),
			Description: f.typ, Details: strings.Join(f.targets, ", "), BackgroundColor: "#fde2e2",
		})
	}
	info.AddAnnotations(notes)
	path := filepath.Join(v.opts.OutDir, "i10-"+fileSafe(job)+".html")
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return "", err
	}
	v.viz = append(v.viz, path)
	return path, nil
}

// fileSafe keeps a job id usable as a file name.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

// timed reports whether a submit of the job asked for a timeout: its
// leases may then time out, out of sight (model.go).
func (v *view) timed(job string) bool {
	for _, i := range v.jobOps[job] {
		if op := &v.ops[i]; op.Name == history.OpSubmit && op.Input.TimeoutNs > 0 {
			return true
		}
	}
	return false
}
