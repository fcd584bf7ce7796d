package workload

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// NewHTTPClient is an HTTP/2 client, like the client package's own, that
// dials from sourceIP ("" for any), so the network can tell who is
// talking. With tlsConfig it speaks HTTPS (HTTP/2 where the server offers
// it); without, HTTP/2 cleartext.
func NewHTTPClient(sourceIP string, tlsConfig *tls.Config) *http.Client {
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 5 * time.Second}
	if sourceIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(sourceIP)}
	}
	protocols := new(http.Protocols)
	if tlsConfig == nil {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP2(true)
		protocols.SetHTTP1(true)
	}
	return &http.Client{Transport: &http.Transport{
		Protocols:           protocols,
		DialContext:         d.DialContext,
		TLSClientConfig:     tlsConfig,
		ForceAttemptHTTP2:   tlsConfig != nil,
		TLSHandshakeTimeout: 2 * time.Second,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
		// A blackholed peer must not hold a connection forever: HTTP/2
		// pings find it dead and the next call dials again.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 2 * time.Second, PingTimeout: 2 * time.Second},
	}}
}

// ReadClientSecrets reads what a worker process of a secure run needs: the
// CA to trust (caFile) and its token (tokenFile). Empty names: nothing.
func ReadClientSecrets(caFile, tokenFile string) (*tls.Config, string, error) {
	var conf *tls.Config
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, "", err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "", fmt.Errorf("%s holds no PEM certificate", caFile)
		}
		conf = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	token := ""
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, "", err
		}
		token = strings.TrimSpace(string(b))
	}
	return conf, token, nil
}
