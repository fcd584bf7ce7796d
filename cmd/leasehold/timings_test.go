package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/cluster"
)

// serverConfigOf resolves a server command line (flags, and the file
// --config names) as `leasehold server` does, on loopback addresses so the
// exposure rule stays out of the way.
func serverConfigOf(t *testing.T, args ...string) (ServerConfig, error) {
	t.Helper()
	var cfg ServerConfig
	var resolveErr error
	app := &cli.App{Name: "leasehold", Commands: []*cli.Command{{Name: "server", Flags: serverFlags(),
		Action: func(c *cli.Context) error {
			cfg, resolveErr = resolveServerConfig(c)
			return nil
		}}}}
	base := []string{"leasehold", "server", "--data-dir", t.TempDir(), "--raft-bind", "127.0.0.1:7711", "--api-bind", "127.0.0.1:7701"}
	if err := app.Run(append(base, args...)); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return cfg, resolveErr
}

// nodeConfigOf is the node's configuration for a command line.
func nodeConfigOf(t *testing.T, args ...string) (cluster.Config, error) {
	t.Helper()
	cfg, err := serverConfigOf(t, args...)
	if err != nil {
		return cluster.Config{}, err
	}
	ccfg, _, err := cfg.clusterConfig(hclog.NewNullLogger())
	return ccfg, err
}

func writeTOML(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leasehold.toml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// One timing set alone, by flag or in the file, brings the timings left
// at their defaults along so the rules hold; the timing set is kept as set.
func TestLoneTimingFits(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		check func(cluster.Config) bool
	}{
		{[]string{"--grace-seconds", "2"}, func(c cluster.Config) bool { return c.Grace == 2*time.Second && c.Renew == 400*time.Millisecond }},
		{[]string{"--config", writeTOML(t, "[plugins.executor]\ngrace_seconds = 2\n")}, func(c cluster.Config) bool { return c.Grace == 2*time.Second }},
		{[]string{"--grace-seconds", "0.5"}, func(c cluster.Config) bool {
			return c.ElectionTimeout == 125*time.Millisecond && c.HeartbeatTimeout == 125*time.Millisecond && c.LeaderLeaseTimeout == 125*time.Millisecond
		}},
		{[]string{"--grace-seconds", "400"}, func(c cluster.Config) bool {
			return c.Toleration == 2400*time.Second && c.WorkerGCThreshold == 4800*time.Second && c.Renew == 10*time.Second
		}},
		{[]string{"--toleration-seconds", "12"}, func(c cluster.Config) bool { return c.Toleration == 12*time.Second && c.Grace == 2*time.Second }},
		{[]string{"--renew-seconds", "60"}, func(c cluster.Config) bool { return c.Renew == time.Minute && c.Grace == 5*time.Minute }},
		{[]string{"--raft-heartbeat-timeout", "1s"}, func(c cluster.Config) bool { return c.ElectionTimeout == time.Second }},
		{nil, func(c cluster.Config) bool { // the defaults stay the defaults
			d := cluster.DefaultConfig()
			return c.Renew == d.Renew && c.Grace == d.Grace && c.Toleration == d.Toleration && c.ElectionTimeout == d.ElectionTimeout
		}},
	} {
		c, err := nodeConfigOf(t, tc.args...)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if !tc.check(c) {
			t.Errorf("%v: renew %s grace %s toleration %s gc %s heartbeat %s election %s lease %s", tc.args, c.Renew, c.Grace,
				c.Toleration, c.WorkerGCThreshold, c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout)
		}
	}
}

// Timings the operator set that break a rule are not moved: the error
// names each key as written in the file and the flags that set them.
func TestTimingErrorsNameKeysAndFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--raft-election-timeout", "1s", "--grace-seconds", "2"},
			[]string{"[raft] election_timeout = 1s", "[plugins.executor] grace_seconds (2s)", "--raft-election-timeout", "--grace-seconds"}},
		{[]string{"--config", writeTOML(t, "[raft]\nelection_timeout = \"1s\"\n"), "--grace-seconds", "2"},
			[]string{"[raft] election_timeout", "--raft-election-timeout"}},
		{[]string{"--renew-seconds", "5", "--grace-seconds", "2"},
			[]string{"[plugins.executor] renew_seconds = 5s", "--renew-seconds and --grace-seconds"}},
		{[]string{"--raft-leader-lease-timeout", "1s"},
			[]string{"[raft] leader_lease_timeout", "[raft] heartbeat_timeout (300ms)", "--raft-leader-lease-timeout and --raft-heartbeat-timeout"}},
		{[]string{"--raft-commit-timeout", "0s"}, []string{"[raft] commit_timeout", "--raft-commit-timeout"}},
		{[]string{"--retention-compact-interval", "0s"}, []string{"[retention] compact_interval", "--retention-compact-interval"}},
		{[]string{"--body-timeout", "-1s"}, []string{"[limits] body_timeout = -1s", "--body-timeout"}},
		{[]string{"--timing-scale", "0.01"}, []string{"[raft] heartbeat_timeout = 3ms", "Raft's floor", "--timing-scale 0.01"}},
	} {
		_, err := nodeConfigOf(t, tc.args...)
		if !errors.Is(err, cluster.ErrInvalidConfig) {
			t.Errorf("%v: %v, want an invalid config", tc.args, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q, want it to say %q", tc.args, err, w)
			}
		}
		if strings.Contains(err.Error(), "raft_") {
			t.Errorf("%v: %q names a field no operator writes", tc.args, err)
		}
	}
}

// --timing-scale multiplies every liveness timing: the scaled configuration
// validates and keeps every ratio the rules are made of (renew < grace <
// toleration, election within a quarter of grace, heartbeat <= election,
// lease <= heartbeat, worker GC >= 2 x toleration).
func TestTimingScale(t *testing.T) {
	liveness := func(c cluster.Config) []time.Duration {
		return []time.Duration{c.Renew, c.Grace, c.Toleration, c.WorkerGCThreshold, c.HeartbeatTimeout, c.ElectionTimeout,
			c.LeaderLeaseTimeout, c.CommitTimeout, c.SnapshotInterval, c.ApplyTimeout, c.JoinRetry}
	}
	for _, base := range [][]string{nil, {"--grace-seconds", "2"}, {"--renew-seconds", "0.2", "--grace-seconds", "2", "--toleration-seconds", "4"}} {
		unscaled, err := nodeConfigOf(t, base...)
		if err != nil {
			t.Fatalf("%v: %v", base, err)
		}
		for _, scale := range []float64{0.1, 0.25, 1, 3, 100} {
			args := append([]string{"--timing-scale", ""}, base...)
			args[1] = strconv.FormatFloat(scale, 'g', -1, 64)
			scaled, err := nodeConfigOf(t, args...)
			if err != nil {
				t.Errorf("%v: %v", args, err)
				continue
			}
			for i, d := range liveness(scaled) {
				if want := time.Duration(float64(liveness(unscaled)[i]) * scale); d != want {
					t.Errorf("%v: timing %d is %s, want %s", args, i, d, want)
				}
			}
			if scaled.Retention != unscaled.Retention || scaled.CompactInterval != unscaled.CompactInterval || scaled.ScheduleGrace != unscaled.ScheduleGrace {
				t.Errorf("%v: retention or compaction scaled", args)
			}
		}
	}
	for _, bad := range []string{"0", "-1", "100.5", "NaN", "+Inf"} {
		_, err := serverConfigOf(t, "--timing-scale", bad)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--timing-scale") {
			t.Errorf("--timing-scale %s: %v, want a usage error", bad, err)
		}
	}
	// The dev cluster's configuration, scaled.
	d := &devCluster{dir: t.TempDir(), renew: 1, grace: 5, toleration: 15, scale: 0.1}
	cfg := d.config(0)
	c, _, err := cfg.clusterConfig(hclog.NewNullLogger())
	if err != nil || c.Grace != 500*time.Millisecond || c.ElectionTimeout != 30*time.Millisecond {
		t.Fatalf("dev at 0.1: grace %s election %s: %v", c.Grace, c.ElectionTimeout, err)
	}
}

// Every timing of the file has a flag: each duration and *_seconds key of
// [plugins.executor], [raft], [retention] and [limits] is in timings.
func TestEveryTimingHasAFlag(t *testing.T) {
	have := map[string]bool{}
	for _, tm := range timings {
		have[tm.path()] = true
	}
	var cfg ServerConfig
	for section, v := range map[string]any{"plugins.executor": cfg.Plugins.Executor, "raft": cfg.Raft, "retention": cfg.Retention, "limits": cfg.Limits} {
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			f := rt.Field(i)
			key := f.Tag.Get("toml")
			if f.Type == reflect.TypeOf(duration{}) || strings.HasSuffix(key, "_seconds") {
				if !have[section+"."+key] {
					t.Errorf("[%s] %s has no flag", section, key)
				}
			}
		}
	}
}

// server --help shows each timing's true default, once, and every flag
// has a description.
func TestServerHelpDefaults(t *testing.T) {
	for _, cmd := range []*cli.Command{serverCommand(), devCommand()} {
		var out bytes.Buffer
		app := &cli.App{Name: "leasehold", Writer: &out, Commands: []*cli.Command{cmd}}
		if err := app.Run([]string{"leasehold", cmd.Name, "--help"}); err != nil {
			t.Fatal(err)
		}
		for _, f := range cmd.Flags {
			if f.(cli.DocGenerationFlag).GetUsage() == "" {
				t.Errorf("%s --%s has no description", cmd.Name, f.Names()[0])
			}
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.Contains(line, "(default: 0)") || strings.Count(line, "default") > 1 {
				t.Errorf("%s --help: %q", cmd.Name, line)
			}
		}
		if cmd.Name != "server" {
			continue
		}
		for _, want := range []string{"--renew-seconds value", "(default: 10)", "--grace-seconds value", "(default: 50)",
			"--toleration-seconds value", "(default: 300)", "--raft-election-timeout value", "(default: 300ms)"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("server --help lacks %q:\n%s", want, out.String())
			}
		}
	}
}
