package policy

import "testing"

func TestRetryBudget(t *testing.T) {
	cases := []struct {
		name            string
		ratio           float64
		burst, requests int
		wantRetries     int
	}{
		{"burst only", 0, 3, 100, 3},
		// ≤ 10% of 100 + 10; the first request's 0.1 is lost to the full bucket.
		{"10% of 100 plus a burst of 10", 0.1, 10, 100, 19},
		{"no budget", 0, 0, 50, 0},
		{"ratio 0.5 burst 1", 0.5, 1, 10, 5},
	}
	for _, tc := range cases {
		b := NewRetryBudget(tc.ratio, tc.burst)
		got := 0
		for i := 0; i < tc.requests; i++ {
			b.Request()
			// Every request fails and asks for a retry: the storm case.
			if b.Retry() {
				got++
			}
		}
		if got != tc.wantRetries {
			t.Errorf("%s: %d retries, want %d", tc.name, got, tc.wantRetries)
		}
	}
}

func TestObserveHealth(t *testing.T) {
	c := newCore(t, func(cfg *Config) { cfg.FailThreshold, cfg.RecoverThreshold = 3, 2 }, "http://a")
	steps := []struct {
		ok, probe   bool
		changed     bool
		wantHealthy bool
	}{
		{false, true, false, true},
		{false, false, false, true}, // passive failure counts too
		{true, false, false, true},  // a success resets the streak
		{false, true, false, true},
		{false, true, false, true},
		{false, false, true, false}, // third in a row
		{true, false, false, false}, // passive success never restores
		{true, false, false, false},
		{true, true, false, false},
		{false, true, false, false}, // a failure resets the recovery count
		{true, true, false, false},
		{true, true, true, true},
	}
	for i, s := range steps {
		changed, err := c.ObserveHealth("http://a", s.ok, s.probe)
		v, _ := c.Replica("http://a")
		if err != nil || changed != s.changed || v.Healthy != s.wantHealthy {
			t.Fatalf("step %d: changed=%v healthy=%v err=%v", i, changed, v.Healthy, err)
		}
	}
	// While requests succeed the bucket refills only up to the burst.
	b := NewRetryBudget(0.5, 2)
	for i := 0; i < 100; i++ {
		b.Request()
	}
	r1, r2, r3 := b.Retry(), b.Retry(), b.Retry()
	if !r1 || !r2 || r3 {
		t.Fatal("bucket should hold exactly the burst after a quiet period")
	}
	if _, err := c.ObserveHealth("http://z", true, true); err == nil {
		t.Fatal("unknown replica accepted")
	}
}
