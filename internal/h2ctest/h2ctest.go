package h2ctest

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Start serves h over HTTP/1.1 and h2c on a loopback port until the test
// ends.
func Start(tb testing.TB, h http.Handler) *httptest.Server {
	tb.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv
}
