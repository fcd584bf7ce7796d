package testwait

import (
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestScale(t *testing.T) {
	t.Setenv(ScaleEnv, "")
	want := 1.0
	if raceEnabled {
		want = 3
	}
	if runtime.NumCPU() < 4 {
		want *= 2
	}
	if got := Scale(); got != want {
		t.Errorf("Scale() = %g, want %g (race %v)", got, want, raceEnabled)
	}
	t.Setenv(ScaleEnv, "7")
	if got := Bound(time.Second); got != 7*time.Second {
		t.Errorf("with %s=7, Bound(1s) = %s", ScaleEnv, got)
	}
	t.Setenv(ScaleEnv, "0.5") // never shrinks a bound
	if got := Scale(); got != want {
		t.Errorf("with %s=0.5, Scale() = %g, want %g", ScaleEnv, got, want)
	}
}
