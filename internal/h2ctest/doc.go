// Package h2ctest starts the tests' HTTP servers that speak HTTP/2 without
// TLS (h2c) as well as HTTP/1.1, as leasehold's API does: Connect's
// bidirectional streams need HTTP/2, and the client's default transport
// speaks h2c.
package h2ctest
