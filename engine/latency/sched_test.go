package latency

import (
	"errors"
	"testing"
	"time"
)

func testConfig() Config {
	return Config{
		MaxNumSeqs:      4,
		MaxWaiting:      8,
		BlockSize:       16,
		CacheBlocks:     64,
		PrefillPerToken: 10 * time.Microsecond,
		DecodeBase:      5 * time.Millisecond,
		DecodePerSeq:    100 * time.Microsecond,
	}
}

func prompt(n int, base int32) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = base + int32(i%50)
	}
	return p
}

// run steps until every sequence has produced want[id] tokens, finishing
// each when done; returns the first-token latency per id.
func run(t *testing.T, s *Scheduler, want map[uint64]int) map[uint64]time.Duration {
	t.Helper()
	ttft := map[uint64]time.Duration{}
	got := map[uint64]int{}
	for steps := 0; len(got) < len(want) || !allDone(got, want); steps++ {
		if steps > 10000 {
			t.Fatal("scheduler made no progress")
		}
		p := s.Schedule()
		if len(p.Emits) == 0 {
			t.Fatalf("empty plan with work left: %+v", s.Stats())
		}
		for _, e := range p.Emits {
			if e.First {
				ttft[e.ID] = e.SinceArrival
			}
			s.Append(e.ID, 7)
			got[e.ID]++
			if got[e.ID] == want[e.ID] {
				s.Finish(e.ID)
			}
		}
	}
	return ttft
}

func allDone(got, want map[uint64]int) bool {
	for id, n := range want {
		if got[id] < n {
			return false
		}
	}
	return true
}

func TestPrefixHitCutsTTFTByExpectedAmount(t *testing.T) {
	cfg := testConfig()
	s := New(cfg)
	p := prompt(100, 3) // 6 full blocks + 4 tokens
	if err := s.Add(Request{ID: 1, Prompt: p, MaxTokens: 4}); err != nil {
		t.Fatal(err)
	}
	first := run(t, s, map[uint64]int{1: 4})[1]
	wantFirst := cfg.DecodeBase + cfg.DecodePerSeq + 100*cfg.PrefillPerToken
	if first != wantFirst {
		t.Fatalf("cold TTFT = %v, want %v", first, wantFirst)
	}
	// Same 96-token prefix, different tail.
	p2 := append(append([]int32(nil), p[:96]...), 90, 91, 92, 93, 94)
	if err := s.Add(Request{ID: 2, Prompt: p2, MaxTokens: 4}); err != nil {
		t.Fatal(err)
	}
	second := run(t, s, map[uint64]int{2: 4})[2]
	wantSecond := cfg.DecodeBase + cfg.DecodePerSeq + (101-96)*cfg.PrefillPerToken
	if second != wantSecond || second >= first {
		t.Fatalf("warm TTFT = %v, want %v (< cold %v)", second, wantSecond, first)
	}
	if d := first - second; d != 95*cfg.PrefillPerToken {
		t.Fatalf("saving = %v, want 95 tokens of prefill = %v", d, 95*cfg.PrefillPerToken)
	}
	st := s.Stats()
	if st.PrefixQueries != 201 || st.PrefixHits != 96 {
		t.Fatalf("queries/hits = %d/%d, want 201/96", st.PrefixQueries, st.PrefixHits)
	}
	if st.GenerationTokens != 8 || st.BlocksUsed != 0 || st.KVUsage != 0 {
		t.Fatalf("after finish: %+v", st)
	}
}

func TestFullyCachedPromptStillComputesOneToken(t *testing.T) {
	s := New(testConfig())
	p := prompt(32, 3) // exactly two blocks
	for id := uint64(1); id <= 2; id++ {
		if err := s.Add(Request{ID: id, Prompt: p, MaxTokens: 1}); err != nil {
			t.Fatal(err)
		}
		run(t, s, map[uint64]int{id: 1})
	}
	// Second lookup may reuse only the first block: the last token's
	// block must be recomputed to produce logits.
	if st := s.Stats(); st.PrefixHits != 16 || st.PrefixQueries != 64 {
		t.Fatalf("hits/queries = %d/%d, want 16/64", st.PrefixHits, st.PrefixQueries)
	}
}

func TestSaltSeparatesPrefixes(t *testing.T) {
	s := New(testConfig())
	p := prompt(40, 3)
	s.Add(Request{ID: 1, Prompt: p, MaxTokens: 1, Salt: 1})
	run(t, s, map[uint64]int{1: 1})
	s.Add(Request{ID: 2, Prompt: p, MaxTokens: 1, Salt: 2})
	run(t, s, map[uint64]int{2: 1})
	if h := s.Stats().PrefixHits; h != 0 {
		t.Fatalf("hits across salts = %d, want 0", h)
	}
}

func TestSameStepSiblingsShareBlocks(t *testing.T) {
	s := New(testConfig())
	p := prompt(48, 3)
	for id := uint64(1); id <= 3; id++ {
		s.Add(Request{ID: id, Prompt: p, MaxTokens: 2})
	}
	pl := s.Schedule()
	if pl.Admitted != 3 || pl.PrefillTokens != 48+2*16 || pl.CachedTokens != 2*32 {
		t.Fatalf("plan = %+v", pl)
	}
	// 3 blocks for the first, 1 new block for each sibling.
	if st := s.Stats(); st.BlocksUsed != 5 {
		t.Fatalf("blocks used = %d, want 5", st.BlocksUsed)
	}
}

func TestEvictionLRUUnderPressure(t *testing.T) {
	cfg := testConfig()
	cfg.CacheBlocks = 8
	s := New(cfg)
	a, b, c := prompt(64, 3), prompt(64, 30), prompt(64, 60) // 4 blocks each
	s.Add(Request{ID: 1, Prompt: a, MaxTokens: 1})
	run(t, s, map[uint64]int{1: 1})
	s.Add(Request{ID: 2, Prompt: b, MaxTokens: 1})
	run(t, s, map[uint64]int{2: 1})
	// Cache now holds a (older) and b: 8 blocks, all unreferenced.
	if st := s.Stats(); st.BlocksUsed != 0 || st.Evictions != 0 {
		t.Fatalf("before pressure: %+v", st)
	}
	// Touch b again so a is least recently used.
	s.Add(Request{ID: 3, Prompt: b, MaxTokens: 1})
	run(t, s, map[uint64]int{3: 1})
	hitsBefore := s.Stats().PrefixHits
	if hitsBefore != 48 {
		t.Fatalf("b re-hit = %d tokens, want 48", hitsBefore)
	}
	s.Add(Request{ID: 4, Prompt: c, MaxTokens: 1})
	run(t, s, map[uint64]int{4: 1})
	if ev := s.Stats().Evictions; ev == 0 {
		t.Fatal("no eviction under pressure")
	}
	// b must have survived (recently used), a must be gone.
	s.Add(Request{ID: 5, Prompt: b, MaxTokens: 1})
	run(t, s, map[uint64]int{5: 1})
	if h := s.Stats().PrefixHits - hitsBefore; h != 48 {
		t.Fatalf("b after pressure hit %d tokens, want 48", h)
	}
	before := s.Stats().PrefixHits
	s.Add(Request{ID: 6, Prompt: a, MaxTokens: 1})
	run(t, s, map[uint64]int{6: 1})
	if h := s.Stats().PrefixHits - before; h != 0 {
		t.Fatalf("a (LRU) should be evicted, hit %d tokens", h)
	}
}

func TestBatchGrowthSlowsDecode(t *testing.T) {
	cfg := testConfig()
	s := New(cfg)
	var last time.Duration
	for n := uint64(1); n <= 4; n++ {
		s.Add(Request{ID: n, Prompt: prompt(5, 3), MaxTokens: 100})
		p := s.Schedule() // admits n
		for _, e := range p.Emits {
			s.Append(e.ID, 7)
		}
		p = s.Schedule() // pure decode step at batch n
		if len(p.Emits) != int(n) || p.PrefillTokens != 0 {
			t.Fatalf("batch %d plan %+v", n, p)
		}
		if want := cfg.DecodeBase + time.Duration(n)*cfg.DecodePerSeq; p.Duration != want {
			t.Fatalf("batch %d step = %v, want %v", n, p.Duration, want)
		}
		if p.Duration <= last {
			t.Fatalf("step at batch %d (%v) not slower than %v", n, p.Duration, last)
		}
		last = p.Duration
		for _, e := range p.Emits {
			s.Append(e.ID, 7)
		}
	}
}

func TestQueueingBeyondMaxNumSeqsAndFull(t *testing.T) {
	cfg := testConfig() // 4 seats, 8 waiting
	s := New(cfg)
	for id := uint64(1); id <= 6; id++ {
		if err := s.Add(Request{ID: id, Prompt: prompt(5, 3), MaxTokens: 3}); err != nil {
			t.Fatal(err)
		}
	}
	p := s.Schedule()
	if st := s.Stats(); st.Running != 4 || st.Waiting != 2 || p.Admitted != 4 {
		t.Fatalf("after first step: %+v", st)
	}
	for id := uint64(7); id <= 14; id++ {
		if err := s.Add(Request{ID: id, Prompt: prompt(5, 3), MaxTokens: 3}); id <= 12 && err != nil {
			t.Fatalf("add %d: %v", id, err)
		} else if id > 12 && !errors.Is(err, ErrQueueFull) {
			t.Fatalf("add %d beyond MaxWaiting: err = %v, want ErrQueueFull", id, err)
		}
	}
	for _, e := range p.Emits {
		s.Append(e.ID, 7)
	}
	want := map[uint64]int{}
	for id := uint64(1); id <= 12; id++ {
		want[id] = 3
	}
	// The first four already produced one token.
	for id := uint64(1); id <= 4; id++ {
		want[id] = 2
	}
	ttft := run(t, s, want)
	// A queued request waits at least one full generation of the first wave.
	if ttft[5] <= 3*(cfg.DecodeBase) {
		t.Fatalf("queued TTFT %v does not include queueing", ttft[5])
	}
}

func TestPreemptionWhenCacheRunsOut(t *testing.T) {
	cfg := testConfig()
	cfg.CacheBlocks = 4
	s := New(cfg)
	// Two sequences each starting at 1 block, each growing to 3 blocks.
	s.Add(Request{ID: 1, Prompt: prompt(15, 3), MaxTokens: 33})
	s.Add(Request{ID: 2, Prompt: prompt(15, 40), MaxTokens: 33})
	ttft := run(t, s, map[uint64]int{1: 33, 2: 33})
	st := s.Stats()
	if st.Preemptions == 0 {
		t.Fatal("no preemption although the cache cannot hold both")
	}
	if st.BlocksUsed != 0 || st.GenerationTokens != 66 || ttft[1] == 0 {
		t.Fatalf("final stats %+v", st)
	}
}

func TestAddRejects(t *testing.T) {
	cfg := testConfig()
	cfg.CacheBlocks = 2
	s := New(cfg)
	if err := s.Add(Request{ID: 1, Prompt: prompt(30, 3), MaxTokens: 3}); !errors.Is(err, ErrTooLong) {
		t.Fatalf("too long: %v", err)
	}
	if err := s.Add(Request{ID: 1, Prompt: nil, MaxTokens: 3}); !errors.Is(err, ErrTooLong) {
		t.Fatalf("empty: %v", err)
	}
	s.Add(Request{ID: 1, Prompt: prompt(3, 3), MaxTokens: 3})
	if err := s.Add(Request{ID: 1, Prompt: prompt(3, 3), MaxTokens: 3}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("dup: %v", err)
	}
	s.Finish(1)
	s.Finish(1) // idempotent
	if st := s.Stats(); st.Waiting != 0 {
		t.Fatalf("after finish: %+v", st)
	}
}

func TestKVUsage(t *testing.T) {
	s := New(testConfig()) // 64 blocks
	s.Add(Request{ID: 1, Prompt: prompt(33, 3), MaxTokens: 10})
	p := s.Schedule()
	s.Append(p.Emits[0].ID, 7)
	if st := s.Stats(); st.BlocksUsed != 3 || st.KVUsage != 3.0/64 {
		t.Fatalf("usage %+v", st)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Config){
		func(c *Config) { c.MaxNumSeqs = 0 },
		func(c *Config) { c.MaxWaiting = -1 },
		func(c *Config) { c.BlockSize = 0 },
		func(c *Config) { c.CacheBlocks = 0 },
		func(c *Config) { c.DecodeBase = -1 },
	}
	for i, f := range bad {
		c := DefaultConfig()
		f(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("case %d: err = %v", i, err)
		}
	}
}

func TestZeroWaitingQueueStillSeats(t *testing.T) {
	cfg := testConfig() // 4 seats
	cfg.MaxWaiting = 0
	s := New(cfg)
	for id := uint64(1); id <= 4; id++ {
		if err := s.Add(Request{ID: id, Prompt: prompt(3, 3), MaxTokens: 2}); err != nil {
			t.Fatalf("add %d with a free seat: %v", id, err)
		}
	}
	if err := s.Add(Request{ID: 5, Prompt: prompt(3, 3), MaxTokens: 2}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("fifth with no seat and no queue: %v", err)
	}
}
