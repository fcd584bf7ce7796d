package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every list command's -o json output parses: job list, cluster members,
// worker list and lease list as JSON arrays (empty ones as [], not null),
// events as one JSON object per line.
func TestListOutputJSON(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)

	for _, id := range []string{"list-1", "list-2"} {
		c.cli(t, "job", "submit", "--id", id, "--queue", "ql", "--payload", "p-"+id)
	}
	// A worker holds list-1 until the test lets its command finish, so the
	// lease list has a live lease to show. (The loop gives up after a minute
	// or so, should the test binary die and leave it behind.)
	release := filepath.Join(t.TempDir(), "release")
	w := c.startWorker(t, "wl", "--once", "--queue", "ql", "--kill-after", "500ms", "--drain", "2s", "--",
		"sh", "-c", `echo started; n=0; while [ ! -e "$1" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done`, "sh", release)
	running := c.waitJob(t, "list-1", "running")

	t.Run("job list", func(t *testing.T) {
		var jobs []jobJSON
		decodeJSON(t, "job list", c.cli(t, "job", "list", "--queue", "ql", "-o", "json"), &jobs)
		states := map[string]string{}
		for _, j := range jobs {
			states[j.ID] = j.State
		}
		if len(jobs) != 2 || states["list-1"] != "running" || states["list-2"] != "queued" {
			t.Errorf("job list: %+v, want list-1 running and list-2 queued", jobs)
		}
		if out := c.cli(t, "job", "list", "--queue", "no-such-queue", "-o", "json"); strings.TrimSpace(out) != "[]" {
			t.Errorf("empty job list: %q, want []", out)
		}
	})
	t.Run("job list --limit", func(t *testing.T) {
		// Cut short by --limit: stdout stays a JSON array, stderr says
		// there is more and how to go on.
		r := runCLI(t, c.env(), "job", "list", "--queue", "ql", "--limit", "1", "-o", "json")
		var first []jobJSON
		decodeJSON(t, "job list --limit 1", r.stdout, &first)
		m := regexp.MustCompile(`^\(1 shown; more may follow: --limit 0 for all, or --after (\d+) for the next page\)\n$`).FindStringSubmatch(r.stderr)
		if r.code != 0 || len(first) != 1 || first[0].ID != "list-1" || m == nil {
			t.Fatalf("job list --limit 1: exit %d, %+v, stderr %q; want list-1 and a note of more", r.code, first, r.stderr)
		}
		r = runCLI(t, c.env(), "job", "list", "--queue", "ql", "--limit", "1", "--after", m[1])
		if r.code != 0 || !strings.Contains(r.stdout, "list-2") || strings.Contains(r.stdout, "list-1") {
			t.Errorf("job list --after %s: exit %d, stdout %q, want list-2 only", m[1], r.code, r.stdout)
		}
		// All of it: no note.
		if r := runCLI(t, c.env(), "job", "list", "--queue", "ql", "--limit", "0"); r.code != 0 || r.stderr != "" {
			t.Errorf("job list --limit 0: exit %d, stderr %q, want no note", r.code, r.stderr)
		}
	})
	t.Run("cluster members", func(t *testing.T) {
		var members []struct {
			ID       string `json:"id"`
			RaftAddr string `json:"raft_addr"`
			APIAddr  string `json:"api_addr"`
			Voter    bool   `json:"voter"`
			Leader   bool   `json:"leader"`
		}
		decodeJSON(t, "cluster members", c.cli(t, "cluster", "members", "-o", "json"), &members)
		leaders := 0
		for _, m := range members {
			n := c.node(m.ID)
			if n == nil || m.RaftAddr != n.raftAddr || m.APIAddr != n.apiAddr || !m.Voter {
				t.Errorf("member %+v does not match a started voter", m)
			}
			if m.Leader {
				leaders++
			}
		}
		if len(members) != 3 || leaders != 1 {
			t.Errorf("cluster members: %+v, want 3 voters, one leader", members)
		}
	})
	t.Run("worker list", func(t *testing.T) {
		var workers []struct {
			ID         string `json:"id"`
			Capacity   uint32 `json:"capacity"`
			Registered string `json:"registered_at"`
		}
		decodeJSON(t, "worker list", c.cli(t, "worker", "list", "-o", "json"), &workers)
		if len(workers) != 1 || workers[0].ID != "wl" || workers[0].Capacity != 1 || workers[0].Registered == "" {
			t.Errorf("worker list: %+v, want wl with capacity 1", workers)
		}
	})
	t.Run("lease list", func(t *testing.T) {
		var leases []leaseJSON
		decodeJSON(t, "lease list", c.cli(t, "lease", "list", "-o", "json", "wl"), &leases)
		if len(leases) != 1 || leases[0].JobID != "list-1" || leases[0].Token != running.Token || leases[0].Worker != "wl" {
			t.Errorf("lease list wl: %+v, want list-1's lease, token %d", leases, running.Token)
		}
		if out := c.cli(t, "lease", "list", "-o", "json", "nobody"); strings.TrimSpace(out) != "[]" {
			t.Errorf("empty lease list: %q, want []", out)
		}
	})
	t.Run("events", func(t *testing.T) {
		out := c.cli(t, "events", "-o", "json")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		var last uint64
		types := map[string]int{}
		for i, line := range lines {
			var ev struct {
				Seq   uint64 `json:"seq,string"`
				Time  string `json:"time"`
				Type  string `json:"type"`
				JobID string `json:"job_id"`
			}
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("events line %d is not one JSON object (%v): %q", i+1, err, line)
			}
			if ev.Seq <= last || ev.Type == "" || ev.Time == "" {
				t.Errorf("events line %d: %+v after seq %d", i+1, ev, last)
			}
			last = ev.Seq
			types[ev.Type]++
		}
		if types["job.submitted"] != 2 || types["lease.acquired"] != 1 {
			t.Errorf("event types %v, want 2 job.submitted and 1 lease.acquired", types)
		}
	})

	t.Run("tokens and payloads", func(t *testing.T) {
		// Tokens are JSON strings, as the API's protojson prints them.
		raw := c.cli(t, "job", "get", "list-1", "-o", "json")
		if !regexp.MustCompile(`"token": "\d+"`).MatchString(raw) {
			t.Errorf("job get -o json: no token as a string:\n%s", raw)
		}
		// A payload that is not UTF-8 is base64, marked as such.
		bin := filepath.Join(t.TempDir(), "bin")
		if err := os.WriteFile(bin, []byte{0xff, 0xfe, 0x00, 'a'}, 0o600); err != nil {
			t.Fatal(err)
		}
		c.cli(t, "job", "submit", "--id", "bin-1", "--queue", "qbin", "--payload", "@"+bin)
		var j jobJSON
		decodeJSON(t, "job get bin-1", c.cli(t, "job", "get", "bin-1", "-o", "json"), &j)
		if j.PayloadBase64 != "//4AYQ==" || j.Payload != "" {
			t.Errorf("binary payload: payload %q, payload_base64 %q; want only payload_base64 //4AYQ==", j.Payload, j.PayloadBase64)
		}
		if out := c.cli(t, "job", "get", "bin-1"); !strings.Contains(out, "payload: (binary, 4 bytes)") {
			t.Errorf("job get bin-1:\n%s\nwant payload: (binary, 4 bytes)", out)
		}
		var text jobJSON
		decodeJSON(t, "job get list-2", c.cli(t, "job", "get", "list-2", "-o", "json"), &text)
		if text.Payload != "p-list-2" || text.PayloadBase64 != "" {
			t.Errorf("text payload: payload %q, payload_base64 %q", text.Payload, text.PayloadBase64)
		}
	})
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := w.Wait(t, jobBound); code != 0 {
		t.Fatalf("worker exited %d", code)
	}
}

// A failing command exits 1 with one line on stderr: "leasehold: ", then
// the API's reason when there is one.
func TestErrorExit(t *testing.T) {
	t.Parallel()
	oneLine := func(t *testing.T, r result, prefix string) {
		t.Helper()
		if r.code != 1 {
			t.Errorf("exit %d, want 1", r.code)
		}
		if !strings.HasPrefix(r.stderr, prefix) || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
			t.Errorf("stderr %q, want one line starting %q", r.stderr, prefix)
		}
		if r.stdout != "" {
			t.Errorf("stdout %q, want nothing", r.stdout)
		}
	}
	t.Run("not found", func(t *testing.T) {
		c := startCluster(t, 1)
		r := runCLI(t, c.env(), "job", "get", "does-not-exist")
		oneLine(t, r, "leasehold: NOT_FOUND")
		if r.stderr != "leasehold: NOT_FOUND: job does-not-exist\n" {
			t.Errorf("stderr %q, want the reason once and the job", r.stderr)
		}
		// A fence check that is not current is the one exit 3.
		if r := runCLI(t, c.env(), "lease", "check", "does-not-exist", "7"); r.code != 3 || !strings.Contains(r.stdout, "current=false") {
			t.Errorf("lease check of no lease: exit %d, stdout %q; want 3 and current=false", r.code, r.stdout)
		}
	})
	// Usage errors: exit 2, one line naming the command, the problem and
	// where its help is; never the help itself.
	for _, u := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "get", "--nosuchflag", "x"},
			"leasehold: job get: flag provided but not defined: -nosuchflag (see leasehold job get --help)\n"},
		{[]string{"jobs", "list"}, "leasehold: unknown command jobs (did you mean job?) (see leasehold --help)\n"},
		{[]string{"help", "jobs"}, "leasehold: unknown command jobs (did you mean job?) (see leasehold --help)\n"},
		{[]string{"job", "lsit"}, "leasehold: job: unknown command lsit (did you mean list?) (see leasehold job --help)\n"},
		{[]string{"lease", "check", "hello", "abc"},
			"leasehold: lease check: TOKEN \"abc\" is not a token (a whole number from 1 up) (see leasehold lease check --help)\n"},
		{[]string{"lease", "check", "hello"}, "leasehold: lease check: expected two arguments: JOB TOKEN (see leasehold lease check --help)\n"},
		{[]string{"queue", "limit", "q"}, "leasehold: queue limit: flag --max-running is required (see leasehold queue limit --help)\n"},
		{[]string{"job", "list", "-o", "yaml"}, "leasehold: job list: --output \"yaml\": table or json (see leasehold job list --help)\n"},
		{[]string{"completion", "tcsh"}, "leasehold: completion: shell \"tcsh\": bash, zsh or fish (see leasehold completion --help)\n"},
	} {
		t.Run("usage "+strings.Join(u.args, " "), func(t *testing.T) {
			r := runCLI(t, baseEnv(), u.args...)
			if r.code != 2 || r.stderr != u.want || r.stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, stderr %q", r.code, r.stdout, r.stderr, u.want)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		// Nothing listens there (port 1 is privileged, and nobody's);
		// cluster status tries once.
		r := runCLI(t, baseEnv(), "--endpoints", "127.0.0.1:1", "cluster", "status")
		oneLine(t, r, "leasehold: ")
		if strings.HasPrefix(r.stderr, "leasehold: leasehold:") {
			t.Errorf("stderr %q says leasehold twice", r.stderr)
		}
	})
}

func TestVersionAndCompletion(t *testing.T) {
	t.Parallel()
	env := baseEnv()
	versionLine := regexp.MustCompile(`^leasehold \S+ \(\S+\)\n$`)
	if out := mustCLI(t, env, "version"); !versionLine.MatchString(out) {
		t.Errorf("leasehold version: %q, want \"leasehold VERSION (COMMIT)\"", out)
	}
	var v map[string]string
	decodeJSON(t, "version -o json", mustCLI(t, env, "version", "-o", "json"), &v)
	if v["version"] == "" || v["commit"] == "" {
		t.Errorf("version -o json: %v", v)
	}
	if out := mustCLI(t, env, "completion", "bash"); !strings.Contains(out, "complete") || !strings.Contains(out, "_leasehold") {
		t.Errorf("completion bash: %q", out)
	}
	if out := mustCLI(t, env, "completion", "zsh"); !strings.Contains(out, "compdef _leasehold leasehold") {
		t.Errorf("completion zsh: %q", out)
	}
	if out := mustCLI(t, env, "completion", "fish"); !strings.Contains(out, "complete -c leasehold") ||
		!strings.Contains(out, "-a 'job'") {
		t.Errorf("completion fish: %q", out)
	}
}

// --quiet: the commands that change something print only the id (or their
// one value), whatever -o says.
func TestQuiet(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "submit", "--id", "quiet-1", "--quiet"}, "quiet-1\n"},
		{[]string{"job", "cancel", "quiet-1", "--quiet", "-o", "json"}, "quiet-1\n"},
		{[]string{"job", "cancel-submitter", "nobody", "--quiet"}, "0\n"},
		{[]string{"queue", "pause", "qq", "--quiet"}, "qq\n"},
		{[]string{"queue", "limit", "qq", "--max-running", "2", "--quiet"}, "qq\n"},
		{[]string{"queue", "resume", "qq", "--quiet"}, "qq\n"},
		{[]string{"schedule", "create", "sq", "--cron", "@daily", "--quiet"}, "sq\n"},
		{[]string{"schedule", "pause", "sq", "--quiet"}, "sq\n"},
		{[]string{"schedule", "resume", "sq", "--quiet"}, "sq\n"},
		{[]string{"schedule", "delete", "sq", "--quiet"}, "sq\n"},
	} {
		if out := c.cli(t, step.args...); out != step.want {
			t.Errorf("leasehold %s: %q, want %q", strings.Join(step.args, " "), out, step.want)
		}
	}
	file := filepath.Join(t.TempDir(), "q.snap")
	if out := c.cli(t, "snapshot", "save", file, "--quiet"); out != file+"\n" {
		t.Errorf("snapshot save --quiet: %q, want %q", out, file+"\n")
	}
	if out := c.cli(t, "snapshot", "restore", file, "--quiet"); !regexp.MustCompile(`^[1-9]\d*\n$`).MatchString(out) {
		t.Errorf("snapshot restore --quiet: %q, want the last token", out)
	}
}
