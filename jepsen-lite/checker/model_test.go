package checker

import (
	"path/filepath"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// Tiny histories of one job for the model alone. Times are plain numbers;
// never marks an answer that never came.

func lop(client int, call, ret int64, in linInput, out linOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

var (
	okOut = linOutput{Status: history.StatusOK}
	info  = linOutput{Status: history.StatusInfo}
)

func submitOp(call, ret int64) porcupine.Operation {
	return lop(0, call, ret, linInput{Op: history.OpSubmit}, linOutput{Status: history.StatusOK, Created: true})
}

func grantOp(client int, call, ret int64, tok uint64) porcupine.Operation {
	return lop(client, call, ret, linInput{Op: history.OpAcquire, Token: tok, Started: true}, okOut)
}

func reportOp(client int, call, ret int64, tok uint64, rid string, out linOutput) porcupine.Operation {
	return lop(client, call, ret, linInput{Op: history.OpReport, Token: tok, ReportID: rid, Outcome: history.OutcomeSucceeded}, out)
}

func reportedOut() linOutput {
	return linOutput{Status: history.StatusOK, Outcome: history.OutcomeSucceeded, State: history.JobReported}
}

func fenceOp(client int, call, ret int64, tok, current uint64, state history.JobState) porcupine.Operation {
	return lop(client, call, ret, linInput{Op: history.OpFenceCheck, Token: tok},
		linOutput{Status: history.StatusOK, Current: current != 0 && current == tok, CurrentToken: current, State: state})
}

func checkModel(t *testing.T, want bool, ops ...porcupine.Operation) {
	t.Helper()
	checkModelOf(t, jobModel(false, false, false, false), want, ops...)
}

func checkModelOf(t *testing.T, model porcupine.Model, want bool, ops ...porcupine.Operation) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(model, ops, 0)
	if got := res == porcupine.Ok; got != want {
		path := filepath.Join(t.TempDir(), "model.html")
		_ = porcupine.VisualizePath(model, info, path)
		t.Fatalf("linearizable = %v, want %v (see %s)", got, want, path)
	}
}

func TestModelLinearizableLifecycle(t *testing.T) {
	checkModel(t, true,
		submitOp(0, 1),
		grantOp(1, 2, 3, 7),
		fenceOp(2, 4, 5, 7, 7, history.JobRunning),
		reportOp(1, 6, 8, 7, "r1", reportedOut()),
		// Overlaps the report: may see it or not.
		fenceOp(2, 7, 9, 7, 7, history.JobRunning),
		fenceOp(2, 10, 11, 7, 0, history.JobReported),
		// A repeat gets the first answer, whenever it comes.
		reportOp(1, 12, 13, 7, "r1", reportedOut()),
	)
}

// The classic stale write: token 7 reports after token 9 was granted.
func TestModelRejectsReportAfterNewerGrant(t *testing.T) {
	checkModel(t, false,
		submitOp(0, 1),
		grantOp(1, 2, 3, 7),
		grantOp(2, 10, 11, 9), // 7 expired unseen in between: fine
		reportOp(1, 12, 13, 7, "r1", reportedOut()),
	)
}

func TestModelTokensOnlyGrow(t *testing.T) {
	checkModel(t, false,
		submitOp(0, 1),
		grantOp(1, 2, 3, 9),
		grantOp(2, 10, 11, 7),
	)
	// Concurrent grants may commit in either order.
	checkModel(t, true,
		submitOp(0, 1),
		grantOp(1, 2, 10, 9),
		grantOp(2, 3, 11, 7),
	)
}

// An unknown outcome may land at any time after its invoke, or never.
func TestModelInfoReport(t *testing.T) {
	checkModel(t, true,
		submitOp(0, 1),
		grantOp(1, 2, 3, 7),
		reportOp(1, 4, never, 7, "r1", info),
		fenceOp(2, 10, 11, 7, 7, history.JobRunning),  // not landed yet
		fenceOp(2, 12, 13, 7, 0, history.JobReported), // landed
	)
	// Once seen landed it cannot unland.
	checkModel(t, false,
		submitOp(0, 1),
		grantOp(1, 2, 3, 7),
		reportOp(1, 4, never, 7, "r1", info),
		fenceOp(2, 12, 13, 7, 0, history.JobReported),
		fenceOp(2, 14, 15, 7, 7, history.JobRunning),
	)
}

func TestModelRepeatMustMatch(t *testing.T) {
	checkModel(t, false,
		submitOp(0, 1),
		grantOp(1, 2, 3, 7),
		reportOp(1, 4, 5, 7, "r1", reportedOut()),
		reportOp(1, 6, 7, 7, "r1", linOutput{Status: history.StatusOK, Outcome: history.OutcomeSucceeded, State: history.JobQueued}),
	)
	checkModel(t, false, // another report id on a reported lease is a conflict, not an answer
		submitOp(0, 1),
		grantOp(1, 2, 3, 7),
		reportOp(1, 4, 5, 7, "r1", reportedOut()),
		reportOp(1, 6, 7, 7, "r2", reportedOut()),
	)
	checkModel(t, true,
		submitOp(0, 1),
		grantOp(1, 2, 3, 7),
		reportOp(1, 4, 5, 7, "r1", reportedOut()),
		reportOp(1, 6, 7, 7, "r2", linOutput{Status: history.StatusFail, Reason: "CONFLICT"}),
	)
}

// A grant the runner never saw is pinned by the first read that names it;
// after that, an older token cannot be current.
func TestModelUnseenGrant(t *testing.T) {
	checkModel(t, true,
		submitOp(0, 1),
		fenceOp(2, 5, 6, 4, 5, history.JobAcquired),
	)
	checkModel(t, false,
		submitOp(0, 1),
		fenceOp(2, 5, 6, 4, 5, history.JobAcquired),
		fenceOp(2, 7, 8, 3, 3, history.JobAcquired),
	)
}

// A STALE_TOKEN refusal means the lease had ended; it cannot be seen live
// again afterwards.
func TestModelStaleRefusalEndsLease(t *testing.T) {
	checkModel(t, false,
		submitOp(0, 1),
		grantOp(1, 2, 3, 7),
		reportOp(1, 4, 5, 7, "r1", linOutput{Status: history.StatusFail, Reason: "STALE_TOKEN"}),
		fenceOp(2, 6, 7, 7, 7, history.JobRunning),
	)
}

func TestModelFinishedJobIsNotLeasedAgain(t *testing.T) {
	checkModel(t, false,
		submitOp(0, 1),
		grantOp(1, 2, 3, 7),
		reportOp(1, 4, 5, 7, "r1", reportedOut()),
		grantOp(2, 6, 7, 8),
	)
}

func TestModelCancel(t *testing.T) {
	revoke := lop(3, 4, 5, linInput{Op: history.OpCancel},
		linOutput{Status: history.StatusOK, Revoked: true, State: history.JobRunning})
	release := lop(1, 6, 7, linInput{Op: history.OpRelease, Token: 7}, linOutput{Status: history.StatusOK, State: history.JobCancelled})
	checkModel(t, true, submitOp(0, 1), grantOp(1, 2, 3, 7), revoke, release)
	// A revoked lease released leaves the job cancelled, not queued.
	requeued := lop(1, 6, 7, linInput{Op: history.OpRelease, Token: 7}, linOutput{Status: history.StatusOK, State: history.JobQueued})
	checkModel(t, false, submitOp(0, 1), grantOp(1, 2, 3, 7), revoke, requeued)
	// Cancelling a queued job ends it.
	cancel := lop(3, 2, 3, linInput{Op: history.OpCancel}, linOutput{Status: history.StatusOK, State: history.JobCancelled})
	checkModel(t, false, submitOp(0, 1), cancel, grantOp(1, 4, 5, 7))
}

func TestModelSubmitIsIdempotent(t *testing.T) {
	again := lop(1, 2, 3, linInput{Op: history.OpSubmit}, linOutput{Status: history.StatusOK, Created: false})
	checkModel(t, true, submitOp(0, 1), again)
	twice := lop(1, 2, 3, linInput{Op: history.OpSubmit}, linOutput{Status: history.StatusOK, Created: true})
	checkModel(t, false, submitOp(0, 1), twice)
	// One call whose first attempt created the job and whose retry found it.
	retried := lop(0, 0, 1, linInput{Op: history.OpSubmit}, linOutput{Status: history.StatusOK, Created: false})
	checkModel(t, true, retried, grantOp(1, 2, 3, 7))
}

// A job with a timeout: its lease may time out out of sight, and then its
// worker's report (killed, say) ends timed_out, the job queued again or
// dead. Without a timeout the same answer is a violation, and even with
// one the server may not call a lease timed_out that a repeat answered
// otherwise.
func TestModelTimedOutLease(t *testing.T) {
	killed := func(client int, call, ret int64, tok uint64, rid string, out linOutput) porcupine.Operation {
		return lop(client, call, ret, linInput{Op: history.OpReport, Token: tok, ReportID: rid, Outcome: history.OutcomeKilled}, out)
	}
	timedOut := func(state history.JobState) linOutput {
		return linOutput{Status: history.StatusOK, Outcome: history.OutcomeTimedOut, State: state}
	}
	ops := []porcupine.Operation{
		submitOp(0, 1),
		grantOp(1, 2, 3, 7),
		killed(1, 4, 5, 7, "r1", timedOut(history.JobQueued)),
		grantOp(1, 6, 7, 9),
		killed(1, 8, 9, 9, "r2", timedOut(history.JobDead)),
		fenceOp(2, 10, 11, 9, 0, history.JobDead),
	}
	checkModelOf(t, jobModel(false, false, false, true), true, ops...)
	checkModelOf(t, jobModel(false, false, false, false), false, ops...)
	// A lease that did not time out is reported as its worker said.
	checkModelOf(t, jobModel(false, false, false, true), false,
		submitOp(0, 1),
		grantOp(1, 2, 3, 7),
		killed(1, 4, 5, 7, "r1", linOutput{Status: history.StatusOK, Outcome: history.OutcomeKilled, State: history.JobReported}),
		killed(1, 6, 7, 7, "r1", timedOut(history.JobQueued)),
	)
	// A cancel of a timed-out lease ends the job cancelled, not retried.
	checkModelOf(t, jobModel(false, false, false, true), false,
		submitOp(0, 1),
		grantOp(1, 2, 3, 7),
		lop(2, 4, 5, linInput{Op: history.OpCancel}, linOutput{Status: history.StatusOK, Revoked: true}),
		lop(1, 6, 7, linInput{Op: history.OpRelease, Token: 7}, linOutput{Status: history.StatusOK, State: history.JobQueued}),
	)
}
