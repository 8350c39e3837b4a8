package front

import (
	"net/http"
	"strings"
)

// Headers of the router's own on every relayed answer.
const (
	// ReplicaHeader names the replica that served a response.
	ReplicaHeader = "X-Asyncrl-Replica"
	// VersionMinHeader and VersionMaxHeader carry a Span: the oldest and
	// newest weight version the replica was recorded as serving while
	// the request was on it (as trailers too, at the end of a stream).
	VersionMinHeader = "X-Asyncrl-Weight-Version-Min"
	VersionMaxHeader = "X-Asyncrl-Weight-Version-Max"
)

// hopHeaders are hop-by-hop headers (RFC 9110 §7.6.1); never forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// IsHopHeader reports whether the canonical field name k is hop-by-hop
// (RFC 9110 §7.6.1): never forwarded either way.
func IsHopHeader(k string) bool {
	for _, h := range hopHeaders {
		if k == h {
			return true
		}
	}
	return false
}

// ConnectionNamed returns the (canonical) fields h's Connection headers
// name: hop-by-hop too. Without a Connection header (the common case) it
// allocates nothing.
func ConnectionNamed(h http.Header) []string {
	var named []string
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			named = append(named, http.CanonicalHeaderKey(strings.TrimSpace(f)))
		}
	}
	return named
}
