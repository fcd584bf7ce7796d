package api

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// named is a handler that records its name as the one that served.
type named struct {
	name   string
	served *string
}

func (h named) ServeHTTP(http.ResponseWriter, *http.Request) { *h.served = h.name }

// The router sends a call to its procedure's handler, else its service's,
// else to the mux, as the mux alone would; and it finds a call's handler
// without allocating.
func TestRouterRoutesLikeTheMux(t *testing.T) {
	var served string
	h := func(name string) http.Handler { return named{name, &served} }
	mux := http.NewServeMux()
	rt := newRouter(mux)
	rt.handle("/leasehold.v1.JobService/", h("jobs"))
	rt.handle("/leasehold.v1.WorkerService/", h("workers"))
	rt.handle("/leasehold.v1.WorkerService/HeartbeatStream", h("beats"))
	mux.Handle("GET /livez", h("livez"))
	mux.Handle("/debug/pprof/", h("pprof"))
	for path, want := range map[string]string{
		"/leasehold.v1.JobService/SubmitJob":           "jobs",
		"/leasehold.v1.JobService/NoSuchProcedure":     "jobs", // Connect answers 404
		"/leasehold.v1.WorkerService/Acquire":          "workers",
		"/leasehold.v1.WorkerService/HeartbeatStream":  "beats",
		"/leasehold.v1.WorkerService/HeartbeatStreamX": "workers",
		"/livez":               "livez",
		"/debug/pprof/heap":    "pprof",
		"/leasehold.v1.Nope/X": "", // the mux's 404
		"/":                    "",
		// An escaped slash, and paths the mux redirects to their clean
		// form.
		"/leasehold.v1.JobService%2FSubmitJob":           "",
		"/leasehold.v1.WorkerService%2FHeartbeatStream":  "",
		"/leasehold.v1.JobService/../livez":              "",
		"/leasehold.v1.JobService//SubmitJob":            "",
		"/leasehold.v1.JobService/./SubmitJob":           "",
		"/leasehold.v1.WorkerService/HeartbeatStream/..": "",
	} {
		codes := map[http.Handler]int{}
		for _, via := range []http.Handler{rt, mux} {
			served = ""
			rec := httptest.NewRecorder()
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")))
			if err != nil {
				t.Fatal(err)
			}
			via.ServeHTTP(rec, r)
			codes[via] = rec.Code
			if served != want {
				t.Errorf("%T: %s served by %q, want %q", via, path, served, want)
			}
		}
		if codes[rt] != codes[mux] {
			t.Errorf("%s: the router answered %d, the mux %d", path, codes[rt], codes[mux])
		}
	}
	w := httptest.NewRecorder()
	for path, want := range map[string]string{
		"/leasehold.v1.WorkerService/Acquire":         "workers",
		"/leasehold.v1.WorkerService/HeartbeatStream": "beats",
	} {
		r := httptest.NewRequest("POST", path, nil)
		if allocs := testing.AllocsPerRun(100, func() { rt.ServeHTTP(w, r) }); allocs != 0 || served != want {
			t.Errorf("%s: %v allocations to find %q, want 0 to find %q", path, allocs, served, want)
		}
	}
}
