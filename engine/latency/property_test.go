package latency

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// checkPool verifies the block pool's bookkeeping against a recount.
func checkPool(t *rapid.T, s *Scheduler) {
	p := s.pool
	free, queued := 0, 0
	for i, b := range p.blocks {
		if b.ref < 0 {
			t.Fatalf("block %d ref %d", i, b.ref)
		}
		if b.ref == 0 {
			free++
		}
		if b.queued != (b.ref == 0) {
			t.Fatalf("block %d queued=%v ref=%d", i, b.queued, b.ref)
		}
		if b.queued {
			queued++
		}
	}
	n := 0
	for i := p.head; i >= 0; i = p.blocks[i].next {
		n++
	}
	if free != p.nFree || n != queued || n != free {
		t.Fatalf("free recount %d, nFree %d, queue length %d", free, p.nFree, n)
	}
	for k, i := range p.byKey {
		if !p.blocks[i].keyed || p.blocks[i].key != k {
			t.Fatalf("key %x maps to block %d holding %+v", k, i, p.blocks[i])
		}
	}
	// Referenced blocks are exactly those held by running sequences.
	refs := map[int32]int{}
	for _, q := range s.running {
		for _, b := range q.blocks {
			refs[b]++
		}
	}
	for i, b := range p.blocks {
		if refs[int32(i)] != b.ref {
			t.Fatalf("block %d ref %d, held %d times", i, b.ref, refs[int32(i)])
		}
	}
}

// TestSchedulerProperties drives random workloads (shared prefixes, tight
// caches, aborts) and checks bookkeeping, liveness and counters.
func TestSchedulerProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{
			MaxNumSeqs:      rapid.IntRange(1, 6).Draw(t, "seats"),
			MaxWaiting:      64,
			BlockSize:       rapid.SampledFrom([]int{1, 4, 16}).Draw(t, "bs"),
			CacheBlocks:     rapid.IntRange(8, 40).Draw(t, "blocks"),
			PrefillPerToken: time.Microsecond,
			DecodeBase:      time.Millisecond,
			DecodePerSeq:    10 * time.Microsecond,
		}
		s := New(cfg)
		want := map[uint64]int{}
		got := map[uint64]int{}
		var appended, queries int64
		nreq := rapid.IntRange(1, 12).Draw(t, "n")
		for id := uint64(1); id <= uint64(nreq); id++ {
			plen := rapid.IntRange(1, 3*cfg.BlockSize).Draw(t, "plen")
			shared := rapid.Bool().Draw(t, "shared")
			p := make([]int32, plen)
			for i := range p {
				if shared {
					p[i] = int32(i % 7)
				} else {
					p[i] = int32(id)*100 + int32(i)
				}
			}
			maxTok := rapid.IntRange(1, 2*cfg.BlockSize).Draw(t, "max")
			if s.blocksFor(plen+maxTok) > cfg.CacheBlocks {
				continue
			}
			if err := s.Add(Request{ID: id, Prompt: p, MaxTokens: maxTok}); err != nil {
				t.Fatal(err)
			}
			want[id] = maxTok
		}
		abortAt := rapid.IntRange(0, 50).Draw(t, "abortAt")
		for step := 0; len(got) < len(want) || !allDone(got, want); step++ {
			if step > 5000 {
				t.Fatalf("no progress: %+v", s.Stats())
			}
			before := s.Stats().PrefixQueries
			p := s.Schedule()
			queries += s.Stats().PrefixQueries - before
			if len(p.Emits) > cfg.MaxNumSeqs {
				t.Fatalf("%d emits > %d seats", len(p.Emits), cfg.MaxNumSeqs)
			}
			if p.CachedTokens%cfg.BlockSize != 0 {
				t.Fatalf("cached %d not block aligned", p.CachedTokens)
			}
			seen := map[uint64]bool{}
			for _, e := range p.Emits {
				if seen[e.ID] {
					t.Fatalf("seq %d emitted twice in a step", e.ID)
				}
				seen[e.ID] = true
				s.Append(e.ID, int32(e.ID))
				appended++
				got[e.ID]++
				if got[e.ID] >= want[e.ID] {
					s.Finish(e.ID)
				}
			}
			if step == abortAt && len(want) > 0 {
				for id := range want {
					if got[id] < want[id] {
						s.Finish(id) // abort one live sequence
						got[id] = want[id]
						break
					}
				}
			}
			checkPool(t, s)
		}
		st := s.Stats()
		if st.Running != 0 || st.Waiting != 0 || st.BlocksUsed != 0 || st.KVUsage != 0 {
			t.Fatalf("not drained: %+v", st)
		}
		if st.GenerationTokens != appended || st.PrefixHits > st.PrefixQueries || st.PrefixQueries != queries {
			t.Fatalf("counters %+v (appended %d)", st, appended)
		}
	})
}
