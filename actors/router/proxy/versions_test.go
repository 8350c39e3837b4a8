package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/routertest"
)

// setVersion records v for url the way the actor shell does (Router.Apply).
func (h *harness) setVersion(url string, v int64) {
	h.t.Helper()
	if err := h.r.Apply(policy.SetVersion{URL: url, Version: v}); err != nil {
		h.t.Fatal(err)
	}
}

func versionHeaders(t *testing.T, h http.Header) (string, string) {
	t.Helper()
	return h.Get(VersionMinHeader), h.Get(VersionMaxHeader)
}

// gated is a backend that tells started when a request arrives and
// answers only when release is closed.
func gated(t *testing.T, stream bool) (srvURL func() string, started chan struct{}, release chan struct{}) {
	started, release = make(chan struct{}, 4), make(chan struct{})
	b := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		started <- struct{}{}
		if stream {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"n\":1}\n\n")
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		if stream {
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true}`)
	})
	return func() string { return b.URL }, started, release
}

func TestVersionHeadersSteady(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		a := routertest.Named(t, "a", nil)
		h := start(t, testConfig(a))
		h.setVersion(a.URL, 3)
		resp := h.post("/v1/completions", "s", `{"prompt":"x"}`)
		readAll(t, resp)
		if lo, hi := versionHeaders(t, resp.Header); lo != "3" || hi != "3" {
			t.Fatalf("version headers = %q, %q; want 3, 3", lo, hi)
		}
	})
}

// A request on a replica whose version changes mid-request (a keep-mode
// pause with a weight swap) carries the oldest and the newest version.
func TestVersionHeadersStraddleSwap(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		u, started, release := gated(t, false)
		h := start(t, testConfig())
		if err := h.r.Apply(policy.AddReplica{URL: u()}); err != nil {
			t.Fatal(err)
		}
		h.setVersion(u(), 4)
		type result struct {
			lo, hi string
			err    error
		}
		done := make(chan result, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/completions", strings.NewReader(`{"prompt":"x"}`))
			resp, err := h.client.Do(req)
			if err != nil {
				done <- result{err: err}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- result{lo: resp.Header.Get(VersionMinHeader), hi: resp.Header.Get(VersionMaxHeader)}
		}()
		<-started // the request is on the replica, which still serves 4
		h.setVersion(u(), 5)
		h.setVersion(u(), 6)
		close(release)
		res := <-done
		if res.err != nil {
			t.Fatal(res.err)
		}
		if res.lo != "4" || res.hi != "6" {
			t.Fatalf("straddling request: min %q max %q, want 4, 6", res.lo, res.hi)
		}
		// The span was closed: a later request sees only the current version.
		resp := h.post("/v1/completions", "s2", `{"prompt":"y"}`)
		<-started // release is closed: the backend answers at once
		readAll(t, resp)
		if lo, hi := versionHeaders(t, resp.Header); lo != "6" || hi != "6" {
			t.Fatalf("later request: %q, %q; want 6, 6", lo, hi)
		}
		h.r.mu.Lock()
		open := len(h.r.spans[u()])
		h.r.mu.Unlock()
		if open != 0 {
			t.Fatalf("%d version spans left open", open)
		}
	})
}

// A streamed answer's headers leave before generation ends: they carry the
// span up to the first byte, and the trailers the whole request's.
func TestVersionTrailersOnStream(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		u, started, release := gated(t, true)
		h := start(t, testConfig())
		if err := h.r.Apply(policy.AddReplica{URL: u()}); err != nil {
			t.Fatal(err)
		}
		h.setVersion(u(), 2)
		resp := h.post("/v1/completions", "s", `{"prompt":"x","stream":true}`)
		defer resp.Body.Close()
		<-started
		if lo, hi := versionHeaders(t, resp.Header); lo != "2" || hi != "2" {
			t.Fatalf("stream headers: %q, %q; want 2, 2", lo, hi)
		}
		rd := bufio.NewReader(resp.Body)
		if line, err := rd.ReadString('\n'); err != nil || line != "data: {\"n\":1}\n" {
			t.Fatalf("first chunk %q %v", line, err)
		}
		h.setVersion(u(), 3)
		close(release)
		if _, err := io.ReadAll(rd); err != nil {
			t.Fatal(err)
		}
		if lo, hi := resp.Trailer.Get(VersionMinHeader), resp.Trailer.Get(VersionMaxHeader); lo != "2" || hi != "3" {
			t.Fatalf("stream trailers: %q, %q; want 2, 3 (trailer %v)", lo, hi, resp.Trailer)
		}
	})
}

// A retried request's first attempt leaves no span behind.
func TestVersionSpanClosedOnRetry(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		bad := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
		good := routertest.Named(t, "good", nil)
		h := start(t, testConfig(bad, good))
		h.setVersion(bad.URL, 1)
		h.setVersion(good.URL, 1)
		for i := range 4 {
			resp := h.post("/v1/completions", fmt.Sprintf("s%d", i), `{"prompt":"x"}`)
			readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
		}
		h.r.mu.Lock()
		defer h.r.mu.Unlock()
		for url, set := range h.r.spans {
			if len(set) != 0 {
				t.Fatalf("%d spans left open on %s", len(set), url)
			}
		}
	})
}
