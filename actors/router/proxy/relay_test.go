package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/routertest"
)

// A chunked answer that is not text/event-stream (no Content-Length) may
// still stream: relay flushes each chunk, so the first one arrives while
// the backend is blocked.
func TestChunkedNonSSEStreams(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		release := make(chan struct{})
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			fmt.Fprint(w, "{\"n\":1}\n")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			fmt.Fprint(w, "{\"n\":2}\n")
		})
		h := start(t, testConfig(a))
		resp := h.post("/v1/completions", "s", `{"prompt":"x"}`)
		defer resp.Body.Close()
		if resp.ContentLength != -1 {
			t.Fatalf("ContentLength %d, want -1 (chunked through)", resp.ContentLength)
		}
		rd := bufio.NewReader(resp.Body)
		line, err := rd.ReadString('\n')
		if err != nil || line != "{\"n\":1}\n" {
			t.Fatalf("first chunk %q %v", line, err)
		}
		close(release)
		rest, err := io.ReadAll(rd)
		if err != nil || string(rest) != "{\"n\":2}\n" {
			t.Fatalf("rest %q %v", rest, err)
		}
	})
}

// A plain JSON answer with a declared length (relayed without flushes)
// arrives whole, with its length and the router's headers, for bodies
// smaller and larger than the relay buffer.
func TestKnownLengthAnswerWhole(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		// 3 MiB: over the loop front's LoopMaxAnswer (1 MiB), relayed by a goroutine.
		for _, size := range []int{0, 220, 32 << 10, 200 << 10, 3 << 20} {
			body := strings.Repeat("x", size)
			a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				_, _ = io.WriteString(w, body)
			})
			h := start(t, testConfig(a))
			resp := h.post("/v1/completions", "s", `{"prompt":"x"}`)
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(got) != body {
				t.Fatalf("size %d: got %d bytes, err %v", size, len(got), err)
			}
			if resp.ContentLength != int64(size) || resp.Header.Get(ReplicaHeader) != a.URL ||
				resp.Header.Get(VersionMinHeader) == "" || resp.Header.Get("Trailer") != "" {
				t.Fatalf("size %d: length %d, headers %v", size, resp.ContentLength, resp.Header)
			}
		}
	})
}

// A request body larger than the fronts' read buffers reaches the
// replica whole, with its length, on a connection that then serves the
// next (smaller) request.
func TestLargeRequestBodyForwarded(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		var mu sync.Mutex
		var got []int
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(50 * time.Millisecond) // the router's writes fill the sockets first
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			got = append(got, len(b))
			mu.Unlock()
			fmt.Fprintf(w, "%d:%d:%t", r.ContentLength, len(b), strings.Count(string(b), "y") == len(b)-len(`{"prompt":""}`))
		})
		h := start(t, testConfig(a))
		// 8 MiB: more than loopback's socket buffers take at once.
		for _, size := range []int{300 << 10, 8 << 20, 10} {
			body := `{"prompt":"` + strings.Repeat("y", size) + `"}`
			resp := h.post("/v1/completions", "big", body)
			ans, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("%d:%d:true", len(body), len(body)); string(ans) != want {
				t.Fatalf("size %d: replica saw %q, want %q", size, ans, want)
			}
		}
	})
}

// A chunked request body (no Content-Length) is read whole, routed by
// its body key and forwarded with its length.
func TestChunkedRequestBody(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		var gotLen int64
		var gotBody string
		a := routertest.Backend(t, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			gotLen, gotBody = r.ContentLength, string(b)
		})
		h := start(t, testConfig(a))
		body := `{"prompt":"` + strings.Repeat("p", 50<<10) + `","user":"u-7"}`
		pr, pw := io.Pipe()
		go func() {
			for i := 0; i < len(body); i += 4096 {
				_, _ = pw.Write([]byte(body[i:min(i+4096, len(body))]))
			}
			pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/completions", pr)
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || gotBody != body || gotLen != int64(len(body)) {
			t.Fatalf("status %d, upstream got %d bytes (Content-Length %d), want %d", resp.StatusCode, len(gotBody), gotLen, len(body))
		}
		if v, ok := h.r.Lookup("u-7"); !ok || v.Replica != a.URL {
			t.Fatalf("session u-7 from the chunked body: %+v %v", v, ok)
		}
	})
}
