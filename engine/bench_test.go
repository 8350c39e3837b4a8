package engine

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkCompletionsHTTP measures the engine's serving overhead (HTTP,
// JSON, batching loop, sampling) with the cheap HashModel at TimeScale 0:
// 8 concurrent clients, 32 tokens each.
func BenchmarkCompletionsHTTP(b *testing.B) {
	e, err := New(testConfig(), NewHashModel(1))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	defer func() { e.Close(); srv.Close() }()
	body, _ := json.Marshal(map[string]any{"prompt": "benchmark prompt", "max_tokens": 32, "ignore_eos": true, "top_p": 0.9})
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := http.Post(srv.URL+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.ReportMetric(float64(b.N*32)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkAuthHealth: GET /health through the handler (no network), with
// and without an API key, side by side: the key check's cost per request
// (two SHA-256 of short strings and a constant-time compare).
func BenchmarkAuthHealth(b *testing.B) {
	for _, c := range []struct {
		name string
		opts []Option
	}{{"open", nil}, {"api-key", []Option{WithAPIKey("bench-key-0123456789")}}} {
		b.Run(c.name, func(b *testing.B) {
			e, err := New(testConfig(), NewHashModel(1), c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			h := e.Handler()
			req := httptest.NewRequest(http.MethodGet, "/health", nil)
			req.Header.Set("Authorization", "Bearer bench-key-0123456789")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
