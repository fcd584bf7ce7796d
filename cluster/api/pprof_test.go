package api_test

import (
	"net/http"
	"testing"

	"github.com/leasehold/leasehold/cluster/api"
	"github.com/leasehold/leasehold/cluster/clustertest"
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
