package guard_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/engine/guard"
)

// fixedRT answers every request with a small JSON body, in memory: the
// benchmark sees the guard's handler and ReverseProxy, not the network.
type fixedRT struct{}

func (fixedRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Request: r, ContentLength: 11,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(`{"ok":true}`))}, nil
}

// discardRW is a minimal ResponseWriter.
type discardRW struct{ h http.Header }

func (d *discardRW) Header() http.Header         { return d.h }
func (d *discardRW) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardRW) WriteHeader(int)             {}

// BenchmarkGuardHandler: the guard's per-request work without the network
// (key check, ReverseProxy rewrite and copy), and what a refusal costs.
func BenchmarkGuardHandler(b *testing.B) {
	g, err := guard.New(guard.Config{Upstream: "http://127.0.0.1:1", Key: guardKey, Transport: fixedRT{}, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"prompt":[1,2,3],"max_tokens":8}`)
	for _, c := range []struct{ name, auth string }{{"forward", "Bearer " + guardKey}, {"refuse", "Bearer nope"}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, _ := http.NewRequest("POST", "http://guard/v1/completions", bytes.NewReader(body))
				r.RemoteAddr = "127.0.0.1:5555"
				r.Header.Set("Authorization", c.auth)
				g.ServeHTTP(&discardRW{h: http.Header{}}, r)
			}
		})
	}
}
