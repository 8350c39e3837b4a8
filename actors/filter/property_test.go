package filter

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// genBatch draws groups of n trajectories with small integer rewards, so
// flat groups are common.
func genBatch(t *rapid.T, n int) []Sample {
	groups := rapid.IntRange(0, 12).Draw(t, "groups")
	var s []Sample
	for g := range groups {
		for range n {
			s = append(s, Scalar(fmt.Sprintf("u%d", g), float64(rapid.IntRange(0, 1).Draw(t, "r"))))
		}
	}
	rand.New(rand.NewPCG(uint64(groups), 1)).Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

func TestPropertyReplace(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(t, "n")
		s := genBatch(t, n)
		ratio := rapid.Float64Range(0, 1).Draw(t, "ratio")
		seed := rapid.Uint64().Draw(t, "seed")
		r := Replace(s, n, ratio, rand.New(rand.NewPCG(seed, 0)))
		if len(r.Source) != len(s) {
			t.Fatalf("batch size changed: %d → %d", len(s), len(r.Source))
		}
		keep := map[int]bool{}
		for _, i := range KeepIndices(s, n) {
			keep[i] = true
		}
		good := map[string]bool{}
		for i := range keep {
			good[s[i].UID] = true
		}
		if r.Replaced != (float64(len(good)) > float64(r.TotalGroups)*ratio) {
			t.Fatalf("replaced=%t with %d good of %d, ratio %v", r.Replaced, len(good), r.TotalGroups, ratio)
		}
		for slot, src := range r.Source {
			switch {
			case !r.Replaced || keep[slot]:
				if src != slot {
					t.Fatalf("slot %d moved to %d (replaced=%t)", slot, src, r.Replaced)
				}
			case !keep[src]:
				t.Fatalf("slot %d filled from bad trajectory %d", slot, src)
			}
		}
		// Every bad group takes all its slots from one donor.
		if r.Replaced {
			donor := map[string]string{}
			for slot, src := range r.Source {
				if keep[slot] {
					continue
				}
				if d, ok := donor[s[slot].UID]; ok && d != s[src].UID {
					t.Fatalf("bad group %s takes from %s and %s", s[slot].UID, d, s[src].UID)
				}
				donor[s[slot].UID] = s[src].UID
			}
		}
	})
}

func TestPropertyAccumulator(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 3).Draw(t, "n")
		tbs := rapid.IntRange(1, 6).Draw(t, "tbs")
		cfg := DefaultConfig()
		cfg.TrainBatchSize, cfg.NSamplesPerPrompt, cfg.MaxSampleBatches = tbs, n, -1
		a, err := NewAccumulator(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var batches [][]Sample
		prompts := 0
		for range rapid.IntRange(1, 10).Draw(t, "batches") {
			b := genBatch(t, n)
			batches = append(batches, b)
			kept := KeepIndices(b, n)
			prompts += len(kept) / n
			r, err := a.Add(b)
			if err != nil {
				t.Fatal(err)
			}
			if r.Done != (prompts >= tbs) {
				t.Fatalf("done=%t with %d prompts, tbs %d", r.Done, prompts, tbs)
			}
			if !r.Done {
				if r.Prompts != prompts {
					t.Fatalf("prompts %d, want %d", r.Prompts, prompts)
				}
				continue
			}
			if len(r.Refs) != tbs*n {
				t.Fatalf("%d refs, want %d", len(r.Refs), tbs*n)
			}
			seen := map[Ref]bool{}
			for _, ref := range r.Refs {
				src := batches[ref.Batch]
				if seen[ref] || !contains(KeepIndices(src, n), ref.Index) {
					t.Fatalf("ref %+v duplicated or from a dropped group", ref)
				}
				seen[ref] = true
			}
			batches, prompts = nil, 0
		}
	})
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
