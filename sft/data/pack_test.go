package data

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// Pack's invariants over random examples: every example in exactly one
// bin, its tokens contiguous and intact, segments/positions/mask right,
// padding marked, every bin Budget long, the bin count a multiple of DP.
func TestPackInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		budget := rapid.IntRange(1, 64).Draw(t, "budget")
		dp := rapid.IntRange(1, 4).Draw(t, "dp")
		strategy := rapid.SampledFrom([]string{PackFFD, PackBalanced}).Draw(t, "strategy")
		n := rapid.IntRange(0, 40).Draw(t, "n")
		exs := make([]Example, n)
		for i := range exs {
			l := rapid.IntRange(1, budget).Draw(t, "len")
			exs[i].ID = ExampleID{Row: uint32(i)}
			for j := range l {
				exs[i].Tokens = append(exs[i].Tokens, int32(i*1000+j))
			}
			if rapid.Bool().Draw(t, "mask") {
				exs[i].LossMask = make([]uint8, l)
				for j := range l {
					exs[i].LossMask[j] = uint8(rapid.IntRange(0, 1).Draw(t, "m"))
				}
			}
		}
		bins, err := Pack(exs, PackConfig{Budget: budget, DP: dp, Strategy: strategy})
		if err != nil {
			t.Fatal(err)
		}
		if len(bins)%dp != 0 {
			t.Fatalf("%d bins, not a multiple of dp %d", len(bins), dp)
		}
		seen := make([]int, n)
		for bi, b := range bins {
			if len(b.Tokens) != budget || len(b.LossMask) != budget || len(b.Segments) != budget || len(b.Positions) != budget {
				t.Fatalf("bin %d: lengths %d/%d/%d/%d, want %d", bi, len(b.Tokens), len(b.LossMask), len(b.Segments), len(b.Positions), budget)
			}
			at := 0
			for seg, id := range b.IDs {
				ex := exs[id.Row]
				seen[id.Row]++
				l := len(ex.Tokens)
				if !slices.Equal(b.Tokens[at:at+l], ex.Tokens) {
					t.Fatalf("bin %d segment %d: tokens differ", bi, seg)
				}
				for j := range l {
					if b.Segments[at+j] != int32(seg) || b.Positions[at+j] != int32(j) {
						t.Fatalf("bin %d token %d: segment %d position %d, want %d %d", bi, at+j, b.Segments[at+j], b.Positions[at+j], seg, j)
					}
					want := uint8(1)
					if ex.LossMask != nil {
						want = ex.LossMask[j]
					}
					if j == 0 {
						want = 0
					}
					if b.LossMask[at+j] != want {
						t.Fatalf("bin %d token %d: mask %d, want %d", bi, at+j, b.LossMask[at+j], want)
					}
				}
				at += l
			}
			for j := at; j < budget; j++ {
				if b.Segments[j] != -1 || b.LossMask[j] != 0 || b.Tokens[j] != 0 {
					t.Fatalf("bin %d padding token %d not marked", bi, j)
				}
			}
		}
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("example %d packed %d times", i, c)
			}
		}
	})
}

// FFD raises the bin count to a multiple of DP by splitting bins (the
// microbatch core's adjustment), not by padding, when there are enough examples.
func TestPackFFDSplitsForDP(t *testing.T) {
	exs := make([]Example, 6)
	for i := range exs {
		exs[i] = Example{ID: ExampleID{Row: uint32(i)}, Tokens: []int32{1, 2}}
	}
	bins, err := Pack(exs, PackConfig{Budget: 100, DP: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(bins) != 4 {
		t.Fatalf("%d bins, want 4", len(bins))
	}
	for i, b := range bins {
		if len(b.IDs) == 0 {
			t.Fatalf("bin %d empty: FFD should split, not pad", i)
		}
	}
	if _, err := Pack(exs, PackConfig{Budget: 1, DP: 1}); err == nil {
		t.Fatal("an example over the budget: want an error")
	}
}
