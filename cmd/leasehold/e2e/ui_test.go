package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// requireBrowserEnv, set by CI (.ci/run), makes a missing browser a failure
// rather than a skip.
const requireBrowserEnv = "LEASEHOLD_REQUIRE_BROWSER"

// browser finds Debian's chromium-headless-shell (or a chromium).
func browser(t *testing.T) string {
	for _, name := range []string{"chromium-headless-shell", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	msg := "no headless Chromium: apt-get install chromium-headless-shell"
	if os.Getenv(requireBrowserEnv) != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// The status page, in a real headless browser, served by a follower of a
// live 3-node cluster with authentication on: it asks for the token; then
// the members table renders with the leader; a job submitted through the
// API appears; the worker's report shows in the job's leases and the live
// event stream; and after the leader is killed the page names the new
// leader and the incident without a reload.
func TestStatusPage(t *testing.T) {
	exe := browser(t)
	t.Parallel()
	const admin = "ui-admin-token-0123456789"
	c := startClusterWith(t, 3, fmt.Sprintf(`
[[auth.tokens]]
name = "ops"
token = %q
role = "admin"
`, admin), admin)
	leader := c.waitReady(t)
	var page *node
	for _, n := range c.nodes {
		if n != leader {
			page = n
			break
		}
	}

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU)...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer func() {
		cancel()
		cancelAlloc()
	}()
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatal(err)
		}
	}
	eval := func(js string) any {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[any](js))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// text is what the page shows in the elements a selector matches.
	text := func(sel string) string {
		t.Helper()
		s, _ := eval(fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map(e => e.textContent).join("\n")`, sel)).(string)
		return s
	}
	waitText := func(what, sel string, ok func(string) bool) string {
		t.Helper()
		var got string
		waitFor(t, jobBound, what, func() error {
			if got = text(sel); !ok(got) {
				return fmt.Errorf("%s shows %q", sel, got)
			}
			return nil
		})
		return got
	}

	do(chromedp.Navigate("http://" + page.apiAddr + "/ui/"))
	waitText("the page to ask for a token", "#auth:not([hidden])", func(s string) bool { return s != "" })
	do(chromedp.SendKeys(chromedp.CSS("#token"), admin), chromedp.Click(chromedp.CSS("#token-save")))

	waitText("the members table", "#members tbody tr", func(s string) bool {
		return strings.Count(s, "node-") >= 3 && strings.Contains(s, "leader")
	})
	waitText("the leader", "#leader", func(s string) bool { return strings.HasPrefix(s, leader.id) })
	if s := text("#this-node"); !strings.HasPrefix(s, page.id) {
		t.Errorf("this node shows %q, want %s", s, page.id)
	}

	// A job submitted through the API, then a worker's report.
	c.cli(t, "job", "submit", "--id", "ui-job", "--queue", "ui", "--payload", "x")
	eval(`location.hash = "#queues"`)
	waitText("the job's queue with one ready job", "#queue-table tbody tr", func(s string) bool { return strings.HasPrefix(s, "ui1") })
	eval(`location.hash = "#jobs"`)
	waitText("the job in the jobs table", "#job-table tbody", func(s string) bool { return strings.Contains(s, "ui-job") })
	w := c.startWorker(t, "ui-w", "--queue", "ui", "--once", "--", "sh", "-c", `echo ref-from-ui > "$LEASEHOLD_REF_FILE"`)
	if code := w.Wait(t, jobBound); code != 0 {
		t.Fatalf("worker exited %d", code)
	}
	waitText("the job reported", "#job-table tbody tr", func(s string) bool {
		return strings.Contains(s, "ui-job") && strings.Contains(s, "reported") && strings.Contains(s, "succeeded")
	})
	do(chromedp.Click(chromedp.CSS(`#job-table tbody tr.clickable`)))
	waitText("the worker's report in the job's leases", "#job-leases tbody", func(s string) bool {
		return strings.Contains(s, "ui-w") && strings.Contains(s, "ref-from-ui")
	})
	eval(`location.hash = "#events"`)
	waitText("the report in the live event stream", "#event-table tbody", func(s string) bool {
		return strings.Contains(s, "lease.reported") && strings.Contains(s, "ui-job")
	})
	eval(`location.hash = "#jobs"`)
	screenshot(t, ctx, "status-page-job.png")

	// The leader dies; the page, on a survivor, follows without a reload.
	leader.kill(t)
	eval(`location.hash = "#cluster"`)
	newLeader := waitText("a new leader", "#leader", func(s string) bool {
		return s != "" && s != "none" && !strings.HasPrefix(s, leader.id+" ")
	})
	t.Logf("the page shows leader %s after %s was killed", newLeader, leader.id)
	eval(`location.hash = "#incidents"`)
	waitText("the leader change among the incidents", "#incident-table tbody", func(s string) bool {
		return strings.Contains(s, "leader.changed") && strings.Contains(s, "leads term")
	})
	if reloaded, _ := eval(`performance.getEntriesByType("navigation").length !== 1 || state.afterSeq === null`).(bool); reloaded {
		t.Error("the page reloaded")
	}
}

// screenshot keeps what the page shows as a test artifact (not committed):
// in $LEASEHOLD_ARTIFACTS, or bin/artifacts of the repository.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("LEASEHOLD_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "bin", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path, _ := filepath.Abs(filepath.Join(dir, name))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
