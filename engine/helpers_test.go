package engine

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.TimeScale = 0
	cfg.MaxModelLen = 512
	cfg.Latency.CacheBlocks = 256
	cfg.Latency.MaxNumSeqs = 8
	cfg.Latency.MaxWaiting = 32
	return cfg
}

type harness struct {
	t   *testing.T
	e   *Engine
	srv *httptest.Server
	m   *HashModel
}

func newHarness(t *testing.T, cfg Config, opts ...Option) *harness {
	t.Helper()
	m := NewHashModel(1)
	e, err := New(cfg, m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	h := &harness{t: t, e: e, srv: srv, m: m}
	t.Cleanup(func() {
		e.Close()
		srv.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	return h
}

// post sends body (a value, or a raw string) and returns status, headers
// and the body bytes.
func (h *harness) post(path string, body any, hdr ...string) (int, http.Header, []byte) {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
		rd = strings.NewReader("")
	case string:
		rd = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(http.MethodPost, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, out
}

func (h *harness) get(path string) (int, []byte) {
	h.t.Helper()
	resp, err := http.Get(h.srv.URL + path)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (h *harness) complete(body map[string]any) CompletionResponse {
	h.t.Helper()
	code, _, out := h.post("/v1/completions", body)
	if code != http.StatusOK {
		h.t.Fatalf("completions: %d %s", code, out)
	}
	var r CompletionResponse
	if err := json.Unmarshal(out, &r); err != nil {
		h.t.Fatalf("decode %s: %v", out, err)
	}
	return r
}

type result struct {
	code int
	body []byte
}

// postAsync runs post in a goroutine; the caller must receive from the
// channel before the test ends.
func (h *harness) postAsync(path string, body any, hdr ...string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		buf, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, bytes.NewReader(buf))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- result{code: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		ch <- result{resp.StatusCode, out}
	}()
	return ch
}

func recv(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("request did not complete")
		return result{}
	}
}

// eventually polls cond until it holds or 5 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// generated counts tokens generated so far by live sequences of group id.
func (h *harness) generated(id string) int {
	h.e.mu.Lock()
	defer h.e.mu.Unlock()
	g := h.e.groups[id]
	if g == nil {
		return -1
	}
	n := 0
	for _, s := range g.seqs {
		n += len(s.out)
	}
	return n
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "data: ") {
			t.Fatalf("non-data SSE line %q", line)
		}
		out = append(out, strings.TrimPrefix(line, "data: "))
	}
	return out
}

// refLogSoftmax is an independent float64 log-softmax of logits/T.
func refLogSoftmax(logits []float32, temp float64) []float64 {
	if temp == 0 {
		temp = 1
	}
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, float64(l)/temp)
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l)/temp - mx)
	}
	out := make([]float64, len(logits))
	for i, l := range logits {
		out[i] = float64(l)/temp - mx - math.Log(sum)
	}
	return out
}

func errorBody(t *testing.T, body []byte) ErrorDetail {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("error body %s is not JSON: %v", body, err)
	}
	var d ErrorDetail
	if err := json.Unmarshal(raw["error"], &d); err != nil {
		t.Fatalf("no error object in %s", body)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if !bytes.Contains(raw["error"], []byte(`"`+k+`"`)) {
			t.Fatalf("error object lacks %q: %s", k, raw["error"])
		}
	}
	return d
}

func newTestServer(t *testing.T, e *Engine) *httptest.Server {
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		srv.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	return srv
}
