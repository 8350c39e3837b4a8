package latency

import "testing"

// BenchmarkScheduleStep measures one step of a full 256-sequence batch
// (Schedule plus 256 Appends) in steady state: each sequence generates 128
// tokens, then finishes and is replaced by a new one with the same prompt
// (so admissions hit the prefix cache).
func BenchmarkScheduleStep(b *testing.B) {
	s := New(DefaultConfig())
	next := uint64(0)
	produced := map[uint64]int{}
	add := func(slot int32) {
		next++
		s.Add(Request{ID: next, Prompt: prompt(100, slot), MaxTokens: 128})
	}
	for slot := int32(0); slot < 256; slot++ {
		add(slot)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := s.Schedule()
		for _, e := range p.Emits {
			s.Append(e.ID, 5)
			if produced[e.ID]++; produced[e.ID] == 128 {
				s.Finish(e.ID)
				delete(produced, e.ID)
				add(int32(e.ID % 256))
			}
		}
	}
}
