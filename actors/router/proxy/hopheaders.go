package proxy

import (
	"bufio"
	"net/http"
	"slices"
	"strings"

	"github.com/asyncrl/asyncrl/actors/router/front"
)

// writeHeaders writes the client's end-to-end headers (as copyHeaders
// keeps them), minus those this hop sets itself: Host, Content-Length,
// and Expect (the body is already read; a 100-continue would only
// delay it).
func writeHeaders(w *bufio.Writer, h http.Header) {
	named := front.ConnectionNamed(h)
	for k, vs := range h {
		if front.IsHopHeader(k) || k == "Host" || k == "Content-Length" || k == "Expect" || slices.Contains(named, k) {
			continue
		}
		for _, v := range vs {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(headerValue(v))
			w.WriteString("\r\n")
		}
	}
}

// headerValue drops CR and LF (net/http's server never passes them in a
// value; this keeps a header from ever splitting the request).
func headerValue(v string) string {
	if !strings.ContainsAny(v, "\r\n") {
		return v
	}
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, v)
}
