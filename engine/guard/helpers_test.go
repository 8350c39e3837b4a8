package guard_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/engine/guard"
)

const (
	guardKey = "guard-key-5f1c"
	engKey   = "engine-key-a07e"
)

// seen is one request a recording engine received.
type seen struct {
	Method, Path, Query, Auth string
	Body                      []byte
}

// recorder is a real HTTP server that records every request and answers
// 200 {"ok":true} (or what answer says).
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), b})
		rec.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (r *recorder) take() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

// fixture is a guard in front of upstream, served over real HTTP.
type fixture struct {
	g   *guard.Guard
	srv *httptest.Server
	reg *prometheus.Registry
	log *syncWriter
}

func newGuard(t *testing.T, cfg guard.Config) *fixture {
	t.Helper()
	f := &fixture{reg: prometheus.NewRegistry(), log: &syncWriter{w: &bytes.Buffer{}}}
	cfg.Registerer = f.reg
	cfg.Logger = zerolog.New(f.log)
	g, err := guard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.g = g
	f.srv = httptest.NewServer(g)
	t.Cleanup(func() {
		f.srv.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	return f
}

// do sends method path?query with body and an Authorization header (none
// when auth is empty).
func do(t *testing.T, method, url, auth string, body []byte) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return resp, b
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (f *fixture) logText() string {
	f.log.mu.Lock()
	defer f.log.mu.Unlock()
	return f.log.w.String()
}

// counter is the value of the counter name{labels} in f's registry (0 when
// absent).
func counter(t *testing.T, f *fixture, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func checkCounter(t *testing.T, f *fixture, name string, labels map[string]string, want float64) {
	t.Helper()
	if got := counter(t, f, name, labels); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}
