//go:build linux

// The supervisor runs on Linux only (NewRunner refuses elsewhere).

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200"
	start, state, err := parseStat(line)
	if err != nil || start != 987654 || state != "S" {
		t.Fatalf("parseStat = %d, %q, %v; want 987654, S", start, state, err)
	}
	if _, _, err := parseStat("1 (x) S 1 2"); err == nil {
		t.Fatal("a short stat line parsed")
	}
}

// A process is itself only with its start time: the same pid with another
// start time (the kernel reused it) is not alive.
func TestProcessAlive(t *testing.T) {
	self, err := processOf(os.Getpid())
	if err != nil || !self.Alive() {
		t.Fatalf("this process: %+v, %v", self, err)
	}
	if (Process{PID: self.PID, StartTime: self.StartTime + 1}).Alive() {
		t.Fatal("a pid with another start time counted as alive")
	}
	if (Process{}).Alive() {
		t.Fatal("the zero Process counted as alive")
	}
}

func jobDir(t *testing.T, payload string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, payloadFile), []byte(payload), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func result(t *testing.T, dir string) Result {
	t.Helper()
	var res Result
	if err := readJSON(filepath.Join(dir, resultFile), &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// The supervisor writes the command's exit status, stderr tail and ref.
func TestSuperviseWritesResult(t *testing.T) {
	dir := jobDir(t, "in")
	t.Setenv("REF", filepath.Join(dir, refFile))
	code := Supervise(SuperviseOptions{JobDir: dir, DeadlineFile: filepath.Join(dir, "none"), KillAfter: time.Second,
		Argv: []string{"sh", "-c", `read x; echo "got $x" >&2; echo ref-1 > "$REF"; exit 3`}})
	if code != 0 {
		t.Fatalf("Supervise = %d", code)
	}
	res := result(t, dir)
	if res.ExitCode != 3 || res.Tail != "got in\n" || res.Ref != "ref-1" || res.Stopped != "" {
		t.Fatalf("result %+v", res)
	}
	var rec Record
	if err := readJSON(filepath.Join(dir, supervisorFile), &rec); err != nil || rec.Supervisor.PID != os.Getpid() || rec.Command.PID == 0 {
		t.Fatalf("record %+v, %v", rec, err)
	}
}

// A deadline that passes without renewal stops the command.
func TestSuperviseStopsAtDeadline(t *testing.T) {
	dir := jobDir(t, "")
	deadline := filepath.Join(dir, "deadline")
	soon := Boottime() + 300*time.Millisecond
	if err := os.WriteFile(deadline, []byte(strconv.FormatInt(int64(soon), 10)), 0o600); err != nil {
		t.Fatal(err)
	}
	begun := time.Now()
	Supervise(SuperviseOptions{JobDir: dir, DeadlineFile: deadline, KillAfter: time.Minute,
		Argv: []string{"sh", "-c", `trap '' TERM; sleep 60`}})
	res := result(t, dir)
	if res.Stopped != "deadline" || res.Signal != "killed" {
		t.Fatalf("result %+v; want stopped at the deadline by SIGKILL", res)
	}
	if took := time.Since(begun); took < 300*time.Millisecond || took > 10*time.Second {
		t.Fatalf("stopped after %v, want just after the 300ms deadline", took)
	}
}

// A finished job's files stay until two heartbeats were acknowledged after
// its result went to the runtime (its report has got through by then).
func TestRunnerKeepsFinishedUntilTwoAcks(t *testing.T) {
	r, err := NewRunner(Options{Dir: t.TempDir(), Argv: []string{"true"}, Supervise: []string{"unused"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := r.jobDir(7)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	r.WriteDeadline(time.Unix(0, int64(Boottime())))
	r.finish(dir)
	r.WriteDeadline(time.Unix(0, int64(Boottime())))
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("removed after one ack: %v", err)
	}
	r.WriteDeadline(time.Unix(0, int64(Boottime())))
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("kept after two acks: %v", err)
	}
	d, ok := readDeadline(filepath.Join(r.o.Dir, deadlineFile))
	if !ok || d <= 0 {
		t.Fatalf("deadline file: %v, %v", d, ok)
	}
}

// Re-attach after a worker died just after starting a supervisor: one
// that records itself a moment later is found; one that never does counts
// as gone, and the job is settled by its kind.
func TestReattachWaitsForASupervisorStarting(t *testing.T) {
	r, err := NewRunner(Options{Dir: t.TempDir(), Argv: []string{"true"}, Supervise: []string{"unused"}})
	if err != nil {
		t.Fatal(err)
	}
	job := func(token uint64, policy pb.LostPolicy) *client.Job {
		dir := r.jobDir(token)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, payloadFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		return &client.Job{ID: fmt.Sprint("j", token), Token: token, Spec: &pb.JobSpec{OnWorkerLost: policy}}
	}

	starting := job(1, pb.LostPolicy_LOST_POLICY_FAIL)
	self, err := processOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	written := make(chan error, 1)
	time.AfterFunc(200*time.Millisecond, func() {
		written <- writeJSON(filepath.Join(r.jobDir(1), supervisorFile), Record{Supervisor: self})
	})
	if _, ok := r.Reattach(context.Background(), starting); !ok {
		t.Fatal("a supervisor that recorded itself late was not re-attached")
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}

	if _, ok := r.Reattach(context.Background(), job(2, pb.LostPolicy_LOST_POLICY_REQUEUE)); ok {
		t.Fatal("an evaluation without a supervisor was re-attached, not released")
	}
	h, ok := r.Reattach(context.Background(), job(3, pb.LostPolicy_LOST_POLICY_FAIL))
	if !ok {
		t.Fatal("a run-style job without a supervisor was released")
	}
	if _, err := h(context.Background(), nil); !errors.Is(err, client.ErrExecutionLost) {
		t.Fatalf("settled run-style job: %v; want ErrExecutionLost (released as lost)", err)
	}
	for _, token := range []uint64{2, 3} {
		if _, err := os.Stat(r.jobDir(token)); !os.IsNotExist(err) {
			t.Errorf("job %d's files kept after settling: %v", token, err)
		}
	}
}

// A supervisor that dies without a result (killed) fails the job, and the
// command it leaves behind does not run on unwatched.
func TestWaitSupervisorDiedWithoutResult(t *testing.T) {
	r, err := NewRunner(Options{Dir: t.TempDir(), Argv: []string{"true"}, Supervise: []string{"unused"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := r.jobDir(9)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	orphan := exec.Command("sleep", "60")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan error, 1)
	go func() { reaped <- orphan.Wait() }()
	cmdProc, err := processOf(orphan.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	sup := exec.Command("sleep", "0.2") // the supervisor, about to die
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	supProc, _ := processOf(sup.Process.Pid)
	exited := make(chan struct{})
	go func() { sup.Wait(); close(exited) }()
	if err := writeJSON(filepath.Join(dir, supervisorFile), Record{Supervisor: supProc, Command: cmdProc}); err != nil {
		t.Fatal(err)
	}

	// An evaluation: a retryable failure.
	_, err = r.wait(context.Background(), &client.Job{ID: "j9", Token: 9}, dir, supProc, exited)
	if !errors.Is(err, client.ErrRetryable) || !strings.Contains(err.Error(), "without a result") {
		t.Fatalf("wait = %v, want a retryable error: the supervisor exited without a result", err)
	}
	// A run-style job: settled as lost.
	run := &client.Job{ID: "j9", Token: 9, Spec: &pb.JobSpec{OnWorkerLost: pb.LostPolicy_LOST_POLICY_FAIL}}
	if _, err := r.wait(context.Background(), run, dir, supProc, exited); !errors.Is(err, client.ErrExecutionLost) {
		t.Fatalf("wait = %v; want ErrExecutionLost (released as lost)", err)
	}
	select {
	case <-reaped:
	case <-time.After(10 * time.Second):
		orphan.Process.Kill()
		t.Fatal("the command left behind still runs")
	}
}

// A command that exits 75 after writing a duration to its retry-after file
// asks for that delay (a snooze); anything else in the file is ignored.
func TestRetryAfterFile(t *testing.T) {
	dir := jobDir(t, "")
	t.Setenv("AFTER", filepath.Join(dir, retryAfterFile))
	code := Supervise(SuperviseOptions{JobDir: dir, DeadlineFile: filepath.Join(dir, "none"), KillAfter: time.Second,
		Argv: []string{"sh", "-c", `echo 90s > "$AFTER"; exit 75`}})
	if code != 0 {
		t.Fatalf("Supervise = %d", code)
	}
	res := result(t, dir)
	if res.ExitCode != ExitRetryable || res.RetryAfter != "90s" {
		t.Fatalf("result %+v", res)
	}
	r, err := NewRunner(Options{Dir: t.TempDir(), Argv: []string{"true"}, Supervise: []string{"unused"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		code  int
		after string
		want  time.Duration
	}{
		{75, "90s", 90 * time.Second},
		{75, "soon", 0},
		{75, "200h", 0}, // past the bound
		{75, "", 0},
		{1, "90s", 0}, // not a retryable failure
	} {
		got, err := r.resultOf(context.Background(), Result{ExitCode: c.code, RetryAfter: c.after})
		if err != nil || got.RetryAfter != c.want || got.Retryable != (c.code == 75) {
			t.Errorf("exit %d, retry-after %q: %+v %v; want retryable %t after %s", c.code, c.after, got, err, c.code == 75, c.want)
		}
	}
}
