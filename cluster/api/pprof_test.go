package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster/api"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/internal/testwait"
)

// Profiles are served only when enabled, and then only to admins.
func TestPprofAdminOnly(t *testing.T) {
	for _, on := range []bool{false, true} {
		c := clustertest.Prepare(t, 1)
		c.API = func(_ int, o *api.Options) { o.Credentials, o.Pprof = testCreds, on }
		c.Start(0)
		addr := c.Leader().APIAddr
		get := func(secret string) int {
			req, _ := http.NewRequest("GET", "http://"+addr+"/debug/pprof/", nil)
			if secret != "" {
				req.Header.Set("Authorization", "Bearer "+secret)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		wantAdmin := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on]
		if got := get(opsSecret); got != wantAdmin {
			t.Errorf("pprof %t, admin: %d, want %d", on, got, wantAdmin)
		}
		if got := get(subSecret); got != http.StatusForbidden {
			t.Errorf("pprof %t, submitter: %d, want 403", on, got)
		}
		if got := get(""); got != http.StatusUnauthorized {
			t.Errorf("pprof %t, no token: %d, want 401", on, got)
		}
	}
}

// A request without a body is not bound by body_timeout, over either
// protocol: over HTTP/1.1 a read deadline left on the connection ends the
// request's context when it passes (the server's read watching for a
// closed connection fails), which cut a profile longer than body_timeout
// short.
func TestBodilessRequestOutlivesBodyTimeout(t *testing.T) {
	c := clustertest.Prepare(t, 1)
	l := api.DefaultLimits()
	l.BodyTimeout = 200 * time.Millisecond
	c.API = func(_ int, o *api.Options) { o.Credentials, o.Pprof, o.Limits = testCreds, true, l }
	c.Start(0)
	for want, hc := range map[int]*http.Client{1: http.DefaultClient, 2: h2c(t)} {
		req, _ := http.NewRequest("GET", "http://"+c.Leader().APIAddr+"/debug/pprof/allocs?seconds=1", nil)
		req.Header.Set("Authorization", "Bearer "+opsSecret)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != want {
			t.Fatalf("asked over HTTP/%d, want HTTP/%d", resp.ProtoMajor, want)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("HTTP/%d: a 1 s profile with body_timeout 200ms: %d %q", want, resp.StatusCode, b)
		}
	}
}

// A heap dump has its own switch, is served to admins only, one at a time,
// by GET alone, and every one served is audited.
func TestHeapDumpAdminOnly(t *testing.T) {
	for _, on := range []bool{false, true} {
		c := clustertest.Prepare(t, 1)
		c.API = func(_ int, o *api.Options) { o.Credentials, o.Pprof, o.HeapDump = testCreds, true, on }
		c.Start(0)
		addr := c.Leader().APIAddr
		get := func(method, secret string) (int, []byte) {
			req, _ := http.NewRequest(method, "http://"+addr+"/debug/heapdump", nil)
			if secret != "" {
				req.Header.Set("Authorization", "Bearer "+secret)
			}
			return do(t, req)
		}
		if got, b := get("GET", opsSecret); !on && got != http.StatusNotFound {
			t.Errorf("heap dump off (profiles on), admin: %d, want 404", got)
		} else if on && (got != http.StatusOK || !strings.HasPrefix(string(b), "go1.7 heap dump\n")) {
			t.Errorf("heap dump on, admin: %d and %d bytes starting %q, want 200 and a heap dump", got, len(b), b[:min(len(b), 16)])
		}
		if got, _ := get("GET", subSecret); got != http.StatusForbidden {
			t.Errorf("heap dump %t, submitter: %d, want 403", on, got)
		}
		if got, _ := get("GET", ""); got != http.StatusUnauthorized {
			t.Errorf("heap dump %t, no token: %d, want 401", on, got)
		}
		if !on {
			continue
		}
		testwait.For(t, 10*time.Second, "the dump's audit event", func() error {
			if len(audits(c.Leader(), "debug.heapdump")) == 0 {
				return errors.New("no debug.heapdump audit event")
			}
			return nil
		})
		if got, _ := get("HEAD", opsSecret); got != http.StatusMethodNotAllowed {
			t.Errorf("HEAD: %d, want 405", got)
		}
		release := api.HoldHeapDump()
		got, b := get("GET", opsSecret)
		release()
		if got != http.StatusTooManyRequests {
			t.Errorf("while another dump is written: %d %q, want 429", got, b)
		}
	}
}

// With authentication off a heap dump, which holds the node's secrets, is
// served only to a caller on the node's own host.
func TestHeapDumpWithoutAuthentication(t *testing.T) {
	c := clustertest.Prepare(t, 1)
	c.API = func(_ int, o *api.Options) { o.HeapDump = true }
	c.Start(0)
	req, _ := http.NewRequest("GET", "http://"+c.Leader().APIAddr+"/debug/heapdump", nil)
	if got, b := do(t, req); got != http.StatusOK || !strings.HasPrefix(string(b), "go1.7 heap dump\n") {
		t.Fatalf("a caller on loopback: %d, want 200 and a heap dump", got)
	}
}

// do sends a request, with a bound, and reads the answer.
func do(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
