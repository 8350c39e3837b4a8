package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/enginetest"
)

// TestSGLangReplicaHealthySwapping: an SGLang replica paused for a weight
// swap never answers its /health (a generation; the fake models SGLang's
// 503 after SGLANG_HEALTH_CHECK_TIMEOUT), yet stays healthy through many
// probes, since its scheduler-free /get_model_info answers; an engine
// whose /health fails and that has no such route is still marked down.
func TestSGLangReplicaHealthySwapping(t *testing.T) {
	eachFront(t, func(t *testing.T) {
		sg := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{SGLangHealthTimeout: time.Hour})
		defer sg.Close()
		down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer down.Close()
		cfg := DefaultConfig()
		cfg.MetricsInterval = 0
		cfg.HealthInterval = time.Hour // probes are driven below
		cfg.HealthTimeout = 50 * time.Millisecond
		cfg.Policy.FailThreshold = 2
		cfg.Replicas = []string{sg.URL, down.URL}
		h := start(t, cfg)
		resp, err := http.Post(sg.URL+"/pause_generation", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for range 4 {
			h.r.checkHealth(context.Background())
		}
		for _, v := range h.r.Replicas() {
			if want := v.URL == sg.URL; v.Healthy != want {
				t.Errorf("%s: healthy %v, want %v", v.URL, v.Healthy, want)
			}
		}
		if _, ok := sg.Last("/get_model_info"); !ok {
			t.Fatal("the paused SGLang replica was never asked /get_model_info")
		}
	})
}
