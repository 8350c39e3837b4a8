package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkProxyOverhead measures a small completion request sent straight
// to a backend and the same request through the router, side by side; the
// difference is the router's cost per request (loopback, keep-alive).
func BenchmarkProxyOverhead(b *testing.B) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	defer be.Close()
	cfg := DefaultConfig()
	cfg.HealthInterval, cfg.MetricsInterval = 0, 0
	cfg.Replicas = []string{be.URL}
	r, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	front := httptest.NewServer(r.Handler())
	defer front.Close()
	defer r.Shutdown(b.Context())
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()
	body := `{"prompt":"` + strings.Repeat("tok ", 256) + `","max_tokens":16}`
	for _, target := range []struct{ name, url string }{{"direct", be.URL}, {"via_router", front.URL}} {
		b.Run(target.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodPost, target.url+"/v1/completions", strings.NewReader(body))
				req.Header.Set("X-Session-ID", fmt.Sprint("s", i%64))
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
