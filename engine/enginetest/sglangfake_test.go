package enginetest_test

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/enginetest"
)

// startGenerations starts n /generate calls and returns a wait for them.
func startGenerations(t *testing.T, f *enginetest.Fake, n int) func() {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(f.URL+"/generate", "application/json",
				strings.NewReader(`{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":2}}`))
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.Running() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d generations running", f.Running(), n)
		}
		time.Sleep(time.Millisecond)
	}
	return wg.Wait
}

func post(t *testing.T, url, body string) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSGLangFakeAssertsLikeTheScheduler: the fake dies exactly where
// SGLang's scheduler asserts — a disk update with flush_cache while
// requests sit in the running batch (an in_place pause, or an abort not
// yet finished) — and then answers 500 for ever; /flush_cache alone only
// answers 400.
func TestSGLangFakeAssertsLikeTheScheduler(t *testing.T) {
	for _, mode := range []string{"in_place", "abort"} {
		t.Run(mode, func(t *testing.T) {
			f := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{GenerateFor: time.Hour, SGLangAbortLag: time.Second})
			defer f.Close()
			wait := startGenerations(t, f, 3)
			if code := post(t, f.URL+"/pause_generation", `{"mode":"`+mode+`"}`); code != 200 {
				t.Fatalf("pause: %d", code)
			}
			if code := post(t, f.URL+"/flush_cache", ``); code != http.StatusBadRequest || f.Died() != "" {
				t.Fatalf("flush with requests running: %d, died %q", code, f.Died())
			}
			if code := post(t, f.URL+"/update_weights_from_disk", `{"model_path":"/ckpt/1","flush_cache":true}`); code != 500 {
				t.Fatalf("update: %d", code)
			}
			if !strings.Contains(f.Died(), "Cache flush failed") {
				t.Fatalf("died %q", f.Died())
			}
			if code := post(t, f.URL+"/continue_generation", `{}`); code != 500 {
				t.Fatalf("a dead fake answered %d", code)
			}
			wait()
		})
	}
}

// TestSGLangFakeHealthDuringPause: /health generates, so a paused fake
// answers 503 after its health timeout, and 200 once it continues.
func TestSGLangFakeHealthDuringPause(t *testing.T) {
	f := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{SGLangHealthTimeout: 20 * time.Millisecond})
	defer f.Close()
	get := func() int {
		resp, err := http.Get(f.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get(); c != 200 {
		t.Fatalf("running: %d", c)
	}
	post(t, f.URL+"/pause_generation", `{"mode":"in_place"}`)
	if c := get(); c != http.StatusServiceUnavailable {
		t.Fatalf("paused: %d", c)
	}
	post(t, f.URL+"/continue_generation", `{}`)
	if c := get(); c != 200 {
		t.Fatalf("continued: %d", c)
	}
}
