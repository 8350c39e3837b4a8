package weightsync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/enginetest"
)

// TestSGLangSwapsNeverAssert drives the run's weight swaps (Driven.swap:
// Pause → LoadCheckpoint → Resume, through the SGLang driver) against the
// fake SGLang whose scheduler dies like the real one when a disk update
// flushes with requests in its running batch, with generations in flight
// during every swap, in each pause mode the run may use: keep and abort,
// on a release with pause modes and on one without (abort never asserts;
// keep swaps as abort, since SGLang can neither drop frozen requests' KV
// nor abort requests frozen in_place — the fake's paused scheduler, like
// the real one, never lets them leave, so a keep swap that froze them
// first stalled until its deadline); wait is refused before anything is
// sent. The aborted requests linger in the batch (the abort is
// asynchronous, as AReaL met it), so a driver that loaded right after the
// pause would kill the fake.
func TestSGLangSwapsNeverAssert(t *testing.T) {
	cases := []struct {
		release, mode string
		refused       bool
	}{
		{enginetest.SGLangDefaultRelease, string(config.PauseKeep), false},
		{enginetest.SGLangDefaultRelease, string(config.PauseAbort), false},
		{"0.5.5", string(config.PauseAbort), false},
		{"0.5.5", string(config.PauseKeep), false},
		{enginetest.SGLangDefaultRelease, string(config.PauseWait), true},
	}
	for _, tc := range cases {
		t.Run(tc.release+"/"+tc.mode, func(t *testing.T) {
			f := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{SGLangRelease: tc.release,
				GenerateFor: 30 * time.Millisecond, SGLangAbortLag: 20 * time.Millisecond})
			defer f.Close()
			drv, err := driver.New(driver.KindSGLang, f.URL, driver.Options{Model: "Qwen/Qwen3-0.6B"})
			if err != nil {
				t.Fatal(err)
			}
			d := &Driven{Name: "sglang-0", URL: f.URL, Driver: drv, Load: config.LoadFull}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			// Generations keep arriving during the swaps.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			finish := map[string]int{}
			var genErr error
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						res, err := drv.Generate(ctx, driver.GenerateRequest{Model: "Qwen/Qwen3-0.6B", PromptIDs: []int32{1, 2, 3}, MaxTokens: 2, Temperature: 1})
						mu.Lock()
						if err != nil && genErr == nil {
							genErr = err
						}
						finish[res.FinishReason]++
						mu.Unlock()
						if err != nil {
							return
						}
					}
				}()
			}
			deadline := time.Now().Add(5 * time.Second)
			for f.Running() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no generation in flight")
				}
				time.Sleep(time.Millisecond)
			}
			swaps := 0
			for v := int64(1); v <= 5; v++ {
				for f.Running() == 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond) // swap only with requests in the batch
				}
				dir := fmt.Sprintf("/ckpt/full-%08d", v)
				err := d.swap(ctx, tc.mode, func() error { return d.Driver.LoadCheckpoint(ctx, dir, v) })
				if tc.refused {
					if !errors.Is(err, driver.ErrUnsupported) {
						t.Fatalf("swap %d: %v, want a refusal", v, err)
					}
					break
				}
				if err != nil {
					t.Fatalf("swap %d: %v (fake died: %q)", v, err, f.Died())
				}
				swaps++
			}
			close(stop)
			wg.Wait()
			if died := f.Died(); died != "" {
				t.Fatalf("the fake SGLang scheduler asserted: %s", died)
			}
			if genErr != nil {
				t.Fatalf("a generation failed: %v", genErr)
			}
			if tc.refused {
				if c, ok := f.Last("/update_weights_from_disk"); ok {
					t.Fatalf("a refused swap still loaded: %s", c.Body)
				}
				return
			}
			if v, err := drv.ServedVersion(ctx); err != nil || v != 5 || swaps != 5 {
				t.Fatalf("served %d (%v) after %d swaps", v, err, swaps)
			}
			mu.Lock()
			defer mu.Unlock()
			// abort ends the ones in flight; so does keep, which swaps
			// SGLang as abort (Driven.swap) — the flush never runs while
			// the update does.
			if finish["abort"] == 0 {
				t.Fatalf("%s aborted nothing: %v", tc.mode, finish)
			}
			if finish["length"] == 0 {
				t.Fatalf("no generation completed: %v", finish)
			}
		})
	}
}
