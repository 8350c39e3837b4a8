package bridge

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/model"
)

// replayBatch is crossBatch plus the replay arrays: routes that are NOT
// the model's own choice (each of its experts moved to the next id, so a
// child that re-routed instead of replaying would compute other logits)
// and support sets of 1–5 ids that always hold the sampled token.
func replayBatch(t *testing.T, init *model.Model, seqs []crossSeq, temp float64, step int64) *TrainBatch {
	t.Helper()
	tb := crossBatch(t, init, seqs, temp, step)
	layers, topK, experts := init.RouteShape()
	r := rand.New(rand.NewPCG(uint64(step), 19))
	var routes []int32
	var support []int32
	const k = 6
	for _, s := range seqs {
		for _, v := range init.Routes(s.tokens, 0) {
			routes = append(routes, (v+1)%int32(experts))
		}
		for i, id := range s.tokens {
			row := []int32{-1, -1, -1, -1, -1, -1}
			if s.mask[i] == 1 {
				row[0] = id
				for j := 1; j < 1+r.IntN(5); j++ {
					if c := int32(r.IntN(init.VocabSize())); !slices.Contains(row, c) {
						row[j] = c
					}
				}
			}
			support = append(support, row...)
		}
	}
	n := int64(len(routes) / (layers * topK))
	tb.Arrays["routes"] = Int32TensorShaped(routes, n, int64(layers), int64(topK))
	tb.Arrays["support"] = Int32TensorShaped(support, n, k)
	return tb
}

// checkReplayAgree (run by TestGoAndTorchTrainersAgree on its children,
// to share the torch worker's start): with routes replayed (a
// mixture-of-experts model) and normalize_over_support, the Go child and
// the torch worker read the replay arrays of TrainBatch the same way: same
// metrics, same weights.
func checkReplayAgree(t *testing.T, goC, torchC *Child) {
	mcfg := crossModel()
	mcfg.Experts, mcfg.TopK = 4, 2
	initM, initDir := servingInit(t, mcfg, 5)
	seqs := crossSequences(mcfg.VocabSize)
	ctx := context.Background()
	tc := model.DefaultTrainerConfig()
	tc.SupportNorm, tc.Temperature, tc.LR, tc.KLCoef = true, 0.7, 1e-2, 0.05
	dir := t.TempDir()
	for ci, c := range []*Child{goC, torchC} {
		in, err := InitFor(tc, true, "builtin", initDir, filepath.Join(dir, fmt.Sprint(ci)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Call(ctx, TypeInit, &in, TypeReady, time.Minute); err != nil {
			t.Fatalf("child %d Init: %v", ci, err)
		}
	}
	var first [2]StepResult
	for s := range int64(1) {
		var res [2]StepResult
		for ci, c := range []*Child{goC, torchC} {
			rep, err := c.Call(ctx, TypeTrainBatch, replayBatch(t, initM, seqs, tc.Temperature, s+1), TypeStepResult, time.Minute)
			if err != nil {
				t.Fatalf("child %d step %d: %v", ci, s+1, err)
			}
			if res[ci], err = stepResult(rep); err != nil {
				t.Fatal(err)
			}
		}
		if s == 0 {
			first = res
		}
		tol := []float64{1e-6, 5e-5}[s]
		for _, key := range []string{"loss", "entropy", "grad_norm", "kl", "mismatch", "is_ratio", "tokens"} {
			g, p := res[0].Metrics[key], res[1].Metrics[key]
			if d := math.Abs(g-p) / max(math.Abs(g), 1e-3); d > tol {
				t.Errorf("step %d: %s go %.9g torch %.9g (rel %.2g > %.0g)", s+1, key, g, p, d, tol)
			}
		}
		compareWeights(t, "replay", s+1, tc.LR, initM.TensorNames(), res[0], res[1])
	}
	// The arrays matter: without them the same step trains on other
	// numbers (the mismatch against the engine's logprobs changes).
	in, err := InitFor(tc, true, "builtin", initDir, filepath.Join(dir, "plain"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := goC.Call(ctx, TypeInit, &in, TypeReady, time.Minute); err != nil {
		t.Fatal(err)
	}
	rep, err := goC.Call(ctx, TypeTrainBatch, crossBatch(t, initM, seqs, tc.Temperature, 1), TypeStepResult, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := stepResult(rep)
	if plain.Metrics["mismatch"] == first[0].Metrics["mismatch"] {
		t.Fatalf("routes and support sets changed nothing (mismatch %v both ways)", plain.Metrics["mismatch"])
	}
}

func TestReplayArraysRoundTrip(t *testing.T) {
	seqs := []model.Sequence{
		{Tokens: []int32{1, 5, 6}, LossMask: []uint8{0, 1, 1}, Routes: []int32{0, 1, 2, 3, 1, 0, 3, 2, 2, 3, 0, 1},
			Support: [][]int32{nil, {5, 9}, {6}}},
		{Tokens: []int32{1, 7}, LossMask: []uint8{0, 1}}, // no routes, no support: padding rows
	}
	rt, ok := RoutesTensor(seqs, 2, 2)
	st, ok2 := SupportTensor(seqs)
	if !ok || !ok2 || !slices.Equal(rt.Shape, []int64{5, 2, 2}) || !slices.Equal(st.Shape, []int64{5, 2}) {
		t.Fatalf("shapes %v %v", rt.Shape, st.Shape)
	}
	tb := TrainBatch{Arrays: map[string]Tensor{"tokens": Int32Tensor([]int32{1, 5, 6, 1, 7}), "seq_offsets": Int64Tensor([]int64{0, 3, 5}),
		"routes": rt, "support": st}, Groups: []string{"a", "a"}}
	var a batchArrays
	if e := replayArraysOf(tb, 5, &a); e != nil {
		t.Fatal(e)
	}
	var got []model.Sequence
	for i, s := range seqs {
		seq := model.Sequence{LossMask: s.LossMask}
		lo, hi := []int{0, 3}[i], []int{3, 5}[i]
		replayOf(&a, &seq, lo, hi)
		got = append(got, seq)
	}
	if !slices.Equal(got[0].Routes, seqs[0].Routes) || !slices.Equal(got[1].Routes, []int32{0, 1, 0, 1, 0, 1, 0, 1}) {
		t.Fatalf("routes %v / %v", got[0].Routes, got[1].Routes)
	}
	if got[0].Support[0] != nil || !slices.Equal(got[0].Support[1], []int32{5, 9}) || !slices.Equal(got[0].Support[2], []int32{6}) || got[1].Support[1] != nil {
		t.Fatalf("support %v / %v", got[0].Support, got[1].Support)
	}
	for _, bad := range []Tensor{Int32TensorShaped(make([]int32, 8), 4, 1, 2), Int32TensorShaped([]int32{-1, 0, 0, 0}, 1, 2, 2)} {
		tb.Arrays["routes"] = bad
		if e := replayArraysOf(tb, 1, &a); e == nil || e.Field != "arrays.routes" {
			t.Fatalf("bad routes %v: %v", bad.Shape, e)
		}
	}
}
