package plan

import (
	"errors"
	"math"
	"testing"
)

// twoStage is two column-split 16,000-byte tensors, one per layer.
func twoStage() *Model {
	m := &Model{Name: "two-stage", Layers: 2}
	for l := range 2 {
		m.Tensors = append(m.Tensors, Tensor{Name: "w" + string(rune('0'+l)), Shape: []int64{8, 1000}, DType: BF16, Layer: l, TPDim: 0, Expert: -1})
	}
	return m
}

// Worked by hand: trainer tp2/pp2 on two 2-GPU nodes (stage 0 on node 0,
// stage 1 on node 1), inference dp2 on a third node; a NIC moves 1 GB/s,
// NVLink 2 GB/s.
func TestEstimateSyncByHand(t *testing.T) {
	base := Cluster{GPUsPerNode: 2, NICsPerNode: 2, NICGbps: 8, IntraGBps: 2}
	oneNIC := base
	oneNIC.NICsPerNode = 1
	for _, tc := range []struct {
		name                       string
		c                          Cluster
		gatherNIC, gatherIntra     int64
		broadcast, rank, node, spd float64
		busiestRank, busiestNode   int64
	}{
		// Gather: rank 1's half of w0 over NVLink (8000 B, 4 µs), all of w1
		// from node 1 over the NIC (16000 B, 16 µs) → 16 µs; broadcast
		// 32000 B at 1 GB/s → 32 µs; 48 µs in all. Sharded: each inference
		// rank pulls 32000 B (32 µs); their node pulls 64000 B over two NICs
		// (32 µs).
		{"one NIC per GPU", base, 16000, 8000, 48e-6, 32e-6, 32e-6, 1.5, 32000, 64000},
		// One NIC per node: a rank still gets a whole NIC, but the inference
		// node's 64000 B share it (64 µs), so the broadcast wins.
		{"one NIC per node", oneNIC, 16000, 8000, 48e-6, 32e-6, 64e-6, 0.75, 32000, 64000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Build(DefaultConfig(), twoStage(), Layout{TP: 2, PP: 2, DP: 1, EP: 1}, Layout{TP: 1, PP: 1, DP: 2, EP: 1})
			if err != nil {
				t.Fatal(err)
			}
			e, err := EstimateSync(tc.c, p)
			if err != nil {
				t.Fatal(err)
			}
			b, s := e.Broadcast, e.Sharded
			if b.GatherNICBytes != tc.gatherNIC || b.GatherIntraBytes != tc.gatherIntra || b.BroadcastBytes != 32000 {
				t.Errorf("gather NIC %d intra %d broadcast %d B; want %d, %d, 32000", b.GatherNICBytes, b.GatherIntraBytes, b.BroadcastBytes, tc.gatherNIC, tc.gatherIntra)
			}
			if s.BusiestRankBytes != tc.busiestRank || s.BusiestNodeBytes != tc.busiestNode {
				t.Errorf("busiest rank %d node %d B; want %d, %d", s.BusiestRankBytes, s.BusiestNodeBytes, tc.busiestRank, tc.busiestNode)
			}
			for _, f := range []struct {
				name      string
				got, want float64
			}{{"broadcast", b.Seconds, tc.broadcast}, {"rank", s.RankSeconds, tc.rank}, {"node", s.NodeSeconds, tc.node}, {"speedup", e.Speedup, tc.spd}} {
				if math.Abs(f.got-f.want) > 1e-9*max(1, math.Abs(f.want)) {
					t.Errorf("%s = %g, want %g", f.name, f.got, f.want)
				}
			}
			if e.TrainNodes != 2 || e.InferNodes != 1 {
				t.Errorf("nodes %d/%d, want 2/1", e.TrainNodes, e.InferNodes)
			}
		})
	}
}

func TestClusterValidate(t *testing.T) {
	for _, mut := range []func(*Cluster){
		func(c *Cluster) { c.GPUsPerNode = 0 },
		func(c *Cluster) { c.NICsPerNode = 0 },
		func(c *Cluster) { c.NICGbps = 0 },
		func(c *Cluster) { c.IntraGBps = math.NaN() },
	} {
		c := DefaultCluster()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrBadLayout) {
			t.Errorf("%+v: err %v, want ErrBadLayout", c, err)
		}
	}
	if err := DefaultCluster().Validate(); err != nil {
		t.Fatal(err)
	}
}

// The model against SkyRL's published Qwen3-235B figures (64.72 s by
// broadcast, 3.54 s sharded, 18×): it must land within an order of
// magnitude of each and of their ratio. BENCHMARKS.md says how close.
func TestEstimateQwen3OrderOfMagnitude(t *testing.T) {
	if testing.Short() {
		t.Skip("plans ~36k tensors")
	}
	ps, err := PresetByName("qwen3-235b-a22b")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(DefaultConfig(), ps.Model, ps.Train, ps.Infer)
	if err != nil {
		t.Fatal(err)
	}
	e, err := EstimateSync(DefaultCluster(), p)
	if err != nil {
		t.Fatal(err)
	}
	within := func(name string, got, published float64) {
		if got < published/10 || got > published*10 {
			t.Errorf("%s %.3g: not within 10× of the published %.3g", name, got, published)
		}
	}
	within("broadcast s", e.Broadcast.Seconds, 64.72)
	within("sharded s", e.Sharded.Seconds, 3.54)
	within("speedup", e.Speedup, 64.72/3.54)
	if e.TrainNodes != 2 || e.InferNodes != 2 {
		t.Errorf("nodes %d/%d, want 2/2", e.TrainNodes, e.InferNodes)
	}
	t.Logf("broadcast %.2f s (gather %.2f s + broadcast %.2f s), sharded %.2f s, %.1f×", e.Broadcast.Seconds, e.Broadcast.GatherSeconds, e.Broadcast.BroadcastSeconds, e.Sharded.Seconds, e.Speedup)
}

func TestParseLayout(t *testing.T) {
	for _, tc := range []struct {
		spec  string
		world int
		want  Layout
		err   bool
	}{
		{"tp4,pp2,ep8", 16, Layout{TP: 4, PP: 2, DP: 2, EP: 8}, false},
		{"dp16,ep16", 16, Layout{TP: 1, PP: 1, DP: 16, EP: 16}, false},
		{"TP8, ep128", 128, Layout{TP: 8, PP: 1, DP: 16, EP: 128}, false},
		{"tp2", 0, Layout{TP: 2, PP: 1, DP: 1, EP: 1}, false},
		{"dp4", 8, Layout{}, true},      // 4 ranks written, 8 GPUs
		{"tp3", 8, Layout{}, true},      // 8 not a multiple of 3
		{"tp2,tp4", 8, Layout{}, true},  // twice
		{"cp2", 8, Layout{}, true},      // unknown
		{"tp0", 8, Layout{}, true},      // size < 1
		{"tp", 8, Layout{}, true},       // no size
		{"tp4,,pp2", 8, Layout{}, true}, // empty item
		{"tp4,pp2x", 8, Layout{}, true}, // not a number
	} {
		got, err := ParseLayout(tc.spec, tc.world)
		if tc.err {
			if !errors.Is(err, ErrBadLayout) {
				t.Errorf("%q/%d: err %v, want ErrBadLayout", tc.spec, tc.world, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q/%d = %v, %v; want %v", tc.spec, tc.world, got, err, tc.want)
		}
	}
}

func TestPresetByName(t *testing.T) {
	for _, name := range []string{"qwen3-235b-a22b", "Kimi-K2", "glm-4.5", "BUILTIN"} {
		if _, err := PresetByName(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := PresetByName("llama"); !errors.Is(err, ErrBadLayout) {
		t.Errorf("unknown preset: err %v", err)
	}
}
