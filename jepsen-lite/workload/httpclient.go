package workload

import (
	"net"
	"net/http"
	"time"
)

// NewHTTPClient is an HTTP/2 cleartext client, like the client package's
// own, that dials from sourceIP ("" for any), so the network can tell who
// is talking.
func NewHTTPClient(sourceIP string) *http.Client {
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 5 * time.Second}
	if sourceIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(sourceIP)}
	}
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:           protocols,
		DialContext:         d.DialContext,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
		// A blackholed peer must not hold a connection forever: HTTP/2
		// pings find it dead and the next call dials again.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 2 * time.Second, PingTimeout: 2 * time.Second},
	}}
}
