package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/cluster/api"
	"github.com/leasehold/leasehold/cluster/clustertest"
)

// TestNoAuthAnswersOnlyItsOwnNames replays DNS rebinding: a web page whose
// name the attacker points at the node's address calls the API from the
// developer's browser, with the page's name in Host. A node without API
// authentication refuses it, and answers its addresses, localhost and its
// given names; with authentication the credentials decide.
func TestNoAuthAnswersOnlyItsOwnNames(t *testing.T) {
	c := clustertest.Prepare(t, 1)
	c.API = func(_ int, o *api.Options) { o.HostNames = []string{"node1.internal"} }
	c.Start(0)
	addr := c.Leader().APIAddr
	submit := func(host, secret string) (int, string) {
		req, _ := http.NewRequest("POST", "http://"+addr+"/leasehold.v1.JobService/SubmitJob",
			strings.NewReader(`{"spec":{"id":"from-`+strings.ReplaceAll(host, ":", "-")+`","queue":"q"}}`))
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e struct{ Message string }
		json.Unmarshal(b, &e)
		return resp.StatusCode, e.Message
	}
	for _, host := range []string{"evil.example:7701", "evil.example", "127.0.0.1.nip.example:80", "localhost.evil.example"} {
		if code, msg := submit(host, ""); code != http.StatusForbidden || !strings.Contains(msg, "no API authentication") {
			t.Errorf("Host %q: %d %q, want 403 naming the missing authentication", host, code, msg)
		}
	}
	for _, host := range []string{addr, "localhost:7701", "LOCALHOST", "dev.localhost:1", "[::1]:7701", "node1.internal:7701", "Node1.Internal."} {
		if code, msg := submit(host, ""); code != http.StatusOK {
			t.Errorf("Host %q: %d %q, want 200", host, code, msg)
		}
	}
	// Health checks answer by any name.
	req, _ := http.NewRequest("GET", "http://"+addr+"/livez", nil)
	req.Host = "lb.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("livez by another name: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// With authentication, a name is no refusal: the token decides.
	a := clustertest.Prepare(t, 1)
	a.API = func(_ int, o *api.Options) { o.Credentials = testCreds }
	a.Start(0)
	addr = a.Leader().APIAddr
	if code, msg := submit("evil.example", opsSecret); code != http.StatusOK {
		t.Errorf("with a token, another name: %d %q", code, msg)
	}
	if code, _ := submit("evil.example", ""); code != http.StatusUnauthorized {
		t.Errorf("without a token, another name: %d, want 401", code)
	}
}
