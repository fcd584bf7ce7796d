package client

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/transport/rules"
)

// Config says where the cluster is and how to talk to it. The zero value
// talks to the local development cluster over plain HTTP.
type Config struct {
	// Endpoints are API addresses (host:port) of cluster nodes. The client
	// starts with the first and moves to whichever node the answers name as
	// leader, if that is one of these or a member the cluster listed when
	// the client asked these for its members: the client never sends a
	// request, and so never Token, to any other address. Default: the
	// local dev cluster, DefaultEndpoints.
	Endpoints []string
	// Token is a bearer token sent as "Authorization: Bearer <Token>" when
	// not empty. It never appears in errors or logs.
	Token string
	// TLS, when set, makes the client speak HTTPS with this configuration
	// (HTTP/2 where the server offers it). Nil: plain-text HTTP/2 (h2c),
	// which the API serves beside HTTP/1.1.
	TLS *tls.Config
	// HTTPClient replaces the client's own HTTP client (tests, proxies,
	// custom transports). It must speak TLS itself when TLS is set; the
	// Client uses TLS only to choose the https scheme then. The Client
	// calls through a copy of it whose transport sends each message of a
	// stream as one read of the request body (frames.go), and otherwise
	// leaves the requests to it.
	HTTPClient *http.Client
	// CallTimeout bounds each attempt of a call, and the whole call when the
	// caller's context has no deadline. A long poll gets its wait on top.
	// Default 10s.
	CallTimeout time.Duration
	// RetryBase and RetryMax shape the backoff between attempts: the n-th
	// wait is uniform in [0, min(RetryMax, RetryBase×2^n)] ("full jitter",
	// so many clients that failed together do not retry together). Defaults
	// 50ms and 2s.
	RetryBase time.Duration
	RetryMax  time.Duration
	// WorkerVersion is the version RegisterWorker says the worker runs,
	// shown in its record (`leasehold worker list`): printable ASCII
	// without spaces, at most rules.MaxVersionLen bytes. Default: the
	// running binary's main module version from its build information
	// ("(devel)" for a build from a source tree), or none without it.
	WorkerVersion string
}

// DefaultEndpoints are the API addresses of the local development cluster.
func DefaultEndpoints() []string {
	return []string{"127.0.0.1:7701", "127.0.0.1:7702", "127.0.0.1:7703"}
}

// Defaults of Config.
const (
	DefaultCallTimeout = 10 * time.Second
	DefaultRetryBase   = 50 * time.Millisecond
	DefaultRetryMax    = 2 * time.Second
)

// withDefaults returns a copy of c with every zero field set to its
// default, then checks it. c itself is never changed.
func (c Config) withDefaults() (Config, error) {
	out := c
	if len(out.Endpoints) == 0 {
		out.Endpoints = DefaultEndpoints()
	} else {
		out.Endpoints = append([]string(nil), c.Endpoints...)
	}
	if out.CallTimeout == 0 {
		out.CallTimeout = DefaultCallTimeout
	}
	if out.RetryBase == 0 {
		out.RetryBase = DefaultRetryBase
	}
	if out.RetryMax == 0 {
		out.RetryMax = max(DefaultRetryMax, out.RetryBase)
	}
	if out.WorkerVersion == "" {
		out.WorkerVersion = buildVersion()
	}
	return out, out.validate()
}

func (c Config) validate() error {
	for i, ep := range c.Endpoints {
		if err := checkEndpoint(ep); err != nil {
			return fmt.Errorf("%w: Endpoints[%d] %q: %v", ErrInvalidConfig, i, ep, err)
		}
	}
	for i := 0; i < len(c.Token); i++ {
		if b := c.Token[i]; b <= ' ' || b > '~' {
			// The value is a secret: name the position, never the token.
			return fmt.Errorf("%w: Token: byte %d is not printable ASCII", ErrInvalidConfig, i)
		}
	}
	if err := rules.CheckVersion("WorkerVersion", c.WorkerVersion); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if c.CallTimeout < 0 {
		return fmt.Errorf("%w: CallTimeout %v is negative", ErrInvalidConfig, c.CallTimeout)
	}
	if c.RetryBase < 0 {
		return fmt.Errorf("%w: RetryBase %v is negative", ErrInvalidConfig, c.RetryBase)
	}
	if c.RetryMax < c.RetryBase {
		return fmt.Errorf("%w: RetryMax %v is below RetryBase %v", ErrInvalidConfig, c.RetryMax, c.RetryBase)
	}
	return nil
}

// checkEndpoint accepts host:port with a non-empty host and a port in
// 1..65535; a URL ("http://...") is refused, the scheme comes from TLS.
func checkEndpoint(ep string) error {
	if len(ep) > rules.MaxAddrLen {
		return fmt.Errorf("longer than %d bytes", rules.MaxAddrLen)
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("empty host")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not in 1..65535", port)
	}
	return nil
}

// buildVersion is the running binary's main module version, if its build
// information has one that is a valid worker version.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || rules.CheckVersion("version", bi.Main.Version) != nil {
		return ""
	}
	return bi.Main.Version
}
