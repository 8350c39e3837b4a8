package upstream

import (
	"net/http"
	"strings"

	"github.com/asyncrl/asyncrl/internal/h1"
)

// LeanHead is the head of an answer read lean (resp.Header nil), or nil;
// its slices alias the connection's buffer until the body is closed.
func LeanHead(resp *http.Response) *h1.RespHead {
	if resp.Header != nil {
		return nil
	}
	if b, ok := resp.Body.(*upBody); ok {
		return &b.c.rhead
	}
	return nil
}

// Header is resp.Header, built from a lean answer's head on demand and
// kept in resp (the net/http front end needs the map; the fast one writes
// the bytes).
func Header(resp *http.Response) http.Header {
	lh := LeanHead(resp)
	if lh == nil {
		return resp.Header
	}
	h := make(http.Header, len(lh.Headers))
	for _, f := range lh.Headers {
		k := http.CanonicalHeaderKey(string(f.Name))
		h[k] = append(h[k], string(f.Value))
	}
	resp.Header = h
	return h
}

const eventStream = "text/event-stream"

// IsSSE reports whether the answer is text/event-stream.
func IsSSE(resp *http.Response) bool {
	if lh := LeanHead(resp); lh != nil {
		return IsEventStream(lh)
	}
	return strings.HasPrefix(resp.Header.Get("Content-Type"), eventStream)
}

// IsEventStream reports whether a parsed answer head is text/event-stream.
func IsEventStream(h *h1.RespHead) bool {
	v, _ := h.Get("Content-Type")
	return len(v) >= len(eventStream) && string(v[:len(eventStream)]) == eventStream
}
