//go:build linux

package workload

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

func readEntries(t *testing.T, path string) []history.Entry {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	es, err := history.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// A command that recorded its own stop says so on the pipe: its watcher
// records nothing. One whose end of the pipe closed without a word (it
// was SIGKILLed) gets its stop recorded, no earlier than the close.
func TestShellWatchRecordsOnlyAnUnrecordedStop(t *testing.T) {
	dir := t.TempDir()
	exe := history.Exec{JobID: "j1", Token: 7, WorkerID: "s1"}
	for _, told := range []bool{true, false} {
		path := filepath.Join(dir, "history-"+strconv.FormatBool(told)+".jsonl")
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan int, 1)
		go func() {
			done <- RunShellWatch(ShellWatchConfig{History: path, Process: "s1/7/1", Exec: exe}, r)
			r.Close()
		}()
		if told {
			w.Write([]byte{watchDone})
		}
		closed := history.Now()
		w.Close()
		if code := <-done; code != 0 {
			t.Fatalf("told %v: exit %d", told, code)
		}
		es := readEntries(t, path)
		if told {
			if len(es) != 0 {
				t.Fatalf("a stop recorded for a command that recorded its own: %+v", es)
			}
			continue
		}
		if len(es) != 1 || es[0].Kind != history.KindExecStop || es[0].Process != "s1/7/1" || es[0].Exec.Cause != history.CauseKilledProcess ||
			es[0].Exec.JobID != "j1" || es[0].Exec.Token != 7 || es[0].Exec.WorkerID != "s1" || es[0].Ns < closed {
			t.Fatalf("after the pipe closed at %d: %+v", closed, es)
		}
	}
}

// The deadline file (CLOCK_BOOTTIME) becomes the last acknowledged send on
// the history's clock: deadline − toleration + 2 × renew.
func TestLastAckOfDeadline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deadline")
	renew, tol := 300*time.Millisecond, 4*time.Second
	if lastAckOfDeadline(path, renew, tol) != 0 {
		t.Fatal("no deadline file, yet a last ack")
	}
	var boot unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
		t.Fatal(err)
	}
	ahead := 3400 * time.Millisecond
	if err := os.WriteFile(path, []byte(strconv.FormatInt(boot.Nano()+int64(ahead), 10)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := history.Now()
	got := lastAckOfDeadline(path, renew, tol)
	after := history.Now()
	// The deadline is `ahead` from a boot-time reading taken before
	// `before`, so on the monotonic clock it is at most before + ahead.
	want := int64(ahead) - int64(tol) + 2*int64(renew)
	if got > before+want || got < before+want-(after-before)-int64(time.Second) {
		t.Fatalf("last ack %d, want about %d", got, before+want)
	}
	if lastAckOfDeadline(path, 0, tol) != 0 {
		t.Fatal("a last ack without the timings")
	}
}
