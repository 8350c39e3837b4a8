package microbatch

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func TestContiguous(t *testing.T) {
	if got := Contiguous(6, 3); !reflect.DeepEqual(got, [][]int{{0, 1}, {2, 3}, {4, 5}}) {
		t.Fatalf("%v", got)
	}
	if got := Contiguous(5, 2); !reflect.DeepEqual(got, [][]int{{0, 1, 2}, {3, 4}}) {
		t.Fatalf("%v", got)
	}
	if got := Contiguous(1, 3); !reflect.DeepEqual(got, [][]int{{0}, nil, nil}) {
		t.Fatalf("%v", got)
	}
}

func TestKarmarkarKarpKnown(t *testing.T) {
	// Two-way LDM on 8,7,6,5,4: merge 8|7 → [8,7], 6|5 → [6,5], 4 with
	// [8,7] → [11,8], then with [6,5] → [16,14]: spread 2.
	costs := []float64{8, 7, 6, 5, 4}
	parts, err := KarmarkarKarp(costs, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	l := Loads(costs, parts)
	if math.Abs(l[0]-l[1]) != 2 {
		t.Fatalf("loads %v, want spread 2 (LDM's answer)", l)
	}
	// LPT on the same input: 8,7 → 6 to 7 (13) → 5 to 8 (13) → 4 → 17 vs 13.
	if g := Loads(costs, Greedy(costs, 2)); math.Abs(g[0]-g[1]) != 4 {
		t.Fatalf("greedy loads %v, want spread 4", g)
	}
}

func TestKarmarkarKarpEqualSize(t *testing.T) {
	costs := []float64{10, 1, 9, 2, 8, 3}
	parts, err := KarmarkarKarp(costs, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if len(p) != 2 {
			t.Fatalf("parts %v not equal size", parts)
		}
	}
	if l := Loads(costs, parts); l[0] != 11 || l[1] != 11 || l[2] != 11 {
		t.Fatalf("loads %v, want 11 each", l)
	}
	if _, err := KarmarkarKarp(costs, 4, true); !errors.Is(err, ErrInvalid) {
		t.Fatalf("6 items into 4 equal parts: %v", err)
	}
}

// The input where LDM loses to LPT: Partition keeps LPT's answer.
func TestPartitionKeepsBetterOfKKAndLPT(t *testing.T) {
	tokens := []int{2, 2, 5, 6, 8, 15, 17, 21, 24}
	costs := Tokens().Costs(tokens)
	kk, _ := KarmarkarKarp(costs, 2, false)
	if Imbalance(Loads(costs, kk)) <= 1 {
		t.Fatalf("expected raw KK to be imperfect here: %v", Loads(costs, kk))
	}
	p, err := Partition(tokens, 2, StrategyKarmarkarKarp, Tokens(), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := Imbalance(Loads(costs, p)); got != 1 {
		t.Fatalf("partition imbalance %v, want 1 (LPT's 50/50)", got)
	}
}

func TestCostModel(t *testing.T) {
	c := FLOPs(2, 0.5)
	if c.Of(10) != 70 || Tokens().Of(10) != 10 {
		t.Fatalf("%v %v", c.Of(10), Tokens().Of(10))
	}
	// Under a quadratic cost one long sequence outweighs many short ones:
	// [100, 10×10] is balanced by tokens but not by FLOPs.
	tokens := []int{100, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10}
	byTok, _ := Partition(tokens, 2, StrategyKarmarkarKarp, Tokens(), false)
	if l := Loads(Tokens().Costs(tokens), byTok); l[0] != l[1] {
		t.Fatalf("token loads %v", l)
	}
	quad := FLOPs(0, 1)
	byFlops, _ := Partition(tokens, 2, StrategyKarmarkarKarp, quad, false)
	lq := Loads(quad.Costs(tokens), byFlops)
	if max(lq[0], lq[1]) != 10000 {
		t.Fatalf("flops loads %v: the long sequence should be alone", lq)
	}
}

func TestImbalance(t *testing.T) {
	cases := []struct {
		loads []float64
		want  float64
	}{
		{[]float64{1, 1}, 1},
		{[]float64{3, 1}, 1.5},
		{[]float64{0, 0}, 1},
		{nil, 1},
		{[]float64{4, 0, 0, 0}, 4},
	}
	for _, tc := range cases {
		if got := Imbalance(tc.loads); got != tc.want {
			t.Errorf("Imbalance(%v) = %v, want %v", tc.loads, got, tc.want)
		}
	}
}

func TestBuild(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DPSize, cfg.MaxTokensPerMicrobatch, cfg.Strategy = 2, 10, StrategyContiguous
	// Rank 0 gets [10,10] → 2 microbatches; rank 1 [5,5] → 1 + 1 padding.
	p, err := Build([]int{10, 10, 5, 5}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r0, r1 := p.Ranks[0], p.Ranks[1]
	if len(r0.Microbatches) != 2 || len(r1.Microbatches) != 2 || p.PaddingMicrobatches != 1 {
		t.Fatalf("%+v", p)
	}
	if !r1.Microbatches[1].Padding || r1.Microbatches[1].Tokens != 1 || len(r1.Microbatches[1].Indices) != 0 {
		t.Fatalf("padding microbatch %+v", r1.Microbatches[1])
	}
	if !reflect.DeepEqual(r1.Microbatches[0].Indices, []int{2, 3}) || p.Imbalance != 20.0/15 {
		t.Fatalf("%+v imbalance %v", r1, p.Imbalance)
	}
	cfg.Strategy = StrategyKarmarkarKarp
	p, err = Build([]int{10, 10, 5, 5}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.Imbalance != 1 || p.PaddingMicrobatches != 0 {
		t.Fatalf("kk plan %+v", p)
	}
}

func TestConfigValidate(t *testing.T) {
	mut := []func(*Config){
		func(c *Config) { c.DPSize = 0 },
		func(c *Config) { c.MaxTokensPerMicrobatch = 0 },
		func(c *Config) { c.Strategy = "lpt" },
		func(c *Config) { c.Cost = Cost{} },
		func(c *Config) { c.Cost = Cost{Linear: -1, Quadratic: 1} },
		func(c *Config) { c.Cost = Cost{Linear: math.NaN()} },
		func(c *Config) { c.Cost = Cost{Linear: 1, Quadratic: math.NaN()} },
		func(c *Config) { c.Cost = Cost{Linear: math.Inf(1)} },
	}
	for i, m := range mut {
		c := DefaultConfig()
		m(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("mutation %d: %v", i, err)
		}
		if _, err := Build([]int{1}, c); !errors.Is(err, ErrInvalid) {
			t.Errorf("Build with mutation %d: %v", i, err)
		}
	}
}
