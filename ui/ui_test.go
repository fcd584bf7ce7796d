package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The page's files are served under Prefix with a policy that forbids
// loading anything from elsewhere; nothing but GET and HEAD, and nothing
// outside the embedded tree.
func TestHandlerServesThePageAlone(t *testing.T) {
	h := Handler()
	get := func(method, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec
	}
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		rec := get(http.MethodGet, path)
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != http.StatusOK || len(body) == 0 {
			t.Fatalf("%s: %d, %d bytes", path, rec.Code, len(body))
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s: policy %q", path, csp)
		}
		if strings.Contains(string(body), "http://") || strings.Contains(string(body), "https://") {
			t.Errorf("%s names another origin", path)
		}
	}
	if rec := get(http.MethodPost, "/ui/"); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
	if rec := get(http.MethodGet, "/ui/../ui.go"); rec.Code == http.StatusOK {
		t.Errorf("a path outside the page: %d", rec.Code)
	}
}
