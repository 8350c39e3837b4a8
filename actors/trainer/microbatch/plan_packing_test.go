package microbatch

import (
	"errors"
	"testing"
)

func TestBuildPacking(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxTokensPerMicrobatch = 100
	tokens := []int{60, 50, 40, 30, 20}

	cfg.Packing = PackingFFD
	p, err := Build(tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, mb := range p.Ranks[0].Microbatches {
		if mb.Tokens > 100 {
			t.Fatalf("ffd microbatch over the cap: %+v", mb)
		}
		for _, i := range mb.Indices {
			seen[i] = true
		}
	}
	if len(seen) != len(tokens) {
		t.Fatalf("ffd plan covers %d of %d sequences", len(seen), len(tokens))
	}
	// FFD (SFT semantics) refuses an oversize sequence; Balanced isolates it.
	if _, err := Build([]int{150, 10}, cfg); err == nil {
		t.Fatal("ffd accepted a sequence over the cap")
	}
	cfg.Packing = PackingBalanced
	if _, err := Build([]int{150, 10}, cfg); err != nil {
		t.Fatalf("balanced refused an oversize sequence: %v", err)
	}
	cfg.Packing = "best"
	if err := cfg.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad packing: err %v", err)
	}
}
