// Package netx holds the two checks every asyncrl listener shares: whether
// an address binds loopback only (off loopback a listener needs its
// credentials: the router's admin token, the engine's API key, the bus's
// TLS and users) and a constant-time bearer-token check; the engines' key
// transport; and FreePorts, loopback ports for a listener that must be told
// its port before it starts (the test clusters' routes and nodes).
package netx

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

// IsLoopback reports whether addr (host:port or host) binds loopback only.
// "" and "localhost" count as loopback; a wildcard ("0.0.0.0", "::", ":80")
// does not.
func IsLoopback(addr string) bool {
	if addr == "" {
		return true
	}
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
		if host == "" {
			return false // ":8000" listens on every interface
		}
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// BearerToken is the token of an "Authorization: Bearer <token>" header
// value (the scheme is case-insensitive, as vLLM's AuthenticationMiddleware
// reads it); ok is false for another scheme or an empty header.
func BearerToken(header string) (tok string, ok bool) {
	scheme, param, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	return param, true
}

// TokenEqual compares a presented token with the expected one in constant
// time (both hashed first, so neither length leaks). An empty want never
// matches.
func TokenEqual(got, want string) bool {
	if want == "" {
		return false
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// KeyTransport wraps base (nil: a proxy-less clone of
// http.DefaultTransport) so every request carries "Authorization: Bearer
// <key>": perHost's key for the request's host:port when listed (an empty
// value sends none), else def (empty: none). It replaces whatever
// Authorization the caller set: the key is the sender's secret, not the
// client's. Keys never appear in errors.
func KeyTransport(base http.RoundTripper, def string, perHost map[string]string) http.RoundTripper {
	if base == nil {
		// As the router's own: no env proxy for engine traffic, pooled,
		// Accept-Encoding passed through untouched.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy, t.MaxIdleConnsPerHost, t.DisableCompression = nil, 256, true
		base = t
	}
	if def == "" && len(perHost) == 0 {
		return base
	}
	return keyTransport{base: base, def: def, hosts: perHost}
}

type keyTransport struct {
	base  http.RoundTripper
	def   string
	hosts map[string]string
}

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	key, listed := k.hosts[r.URL.Host]
	if !listed {
		key = k.def
	}
	if key == "" {
		return k.base.RoundTrip(r)
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer "+key)
	return k.base.RoundTrip(r2)
}
