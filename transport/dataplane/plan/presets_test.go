package plan

import (
	"testing"
)

// The synthetic tensor lists must match the published model sizes, and
// each preset's plan must validate and keep senders balanced.
func TestPresets(t *testing.T) {
	if testing.Short() {
		t.Skip("plans ~70k tensors per preset")
	}
	sizes := map[string][2]float64{ // BF16 bytes, from reference/workloads.md
		"Qwen3-235B-A22B": {460e9, 480e9},    // "~470 GB per BF16 sync"
		"Kimi-K2":         {1.95e12, 2.1e12}, // 1T parameters
		"GLM-4.5":         {690e9, 720e9},    // 355B parameters
		"builtin":         {188424, 188424},  // policy.DefaultConfig: 47,106 FP32 parameters
	}
	for _, ps := range Presets() {
		t.Run(ps.Name, func(t *testing.T) {
			b := float64(ps.Model.Bytes())
			if r := sizes[ps.Name]; b < r[0] || b > r[1] {
				t.Fatalf("model bytes %.3g outside [%.3g, %.3g]", b, r[0], r[1])
			}
			p, err := Build(DefaultConfig(), ps.Model, ps.Train, ps.Infer)
			if err != nil {
				t.Fatal(err)
			}
			if err := Validate(p); err != nil {
				t.Fatal(err)
			}
			var held int64
			for _, n := range p.InferOffsets.Bytes {
				held += n
			}
			if p.TotalBytes() != held {
				t.Fatalf("plan moves %d bytes, inference ranks hold %d", p.TotalBytes(), held)
			}
			var sum, mx int64
			for _, n := range p.SendBytes {
				sum += n
				mx = max(mx, n)
			}
			mean := float64(sum) / float64(len(p.SendBytes))
			if float64(mx) > 1.25*mean {
				t.Fatalf("busiest sender %d B vs mean %.0f: spreading failed", mx, mean)
			}
			t.Logf("%s %v→%v: %d tensors, %d transfers, %.1f GB moved, busiest sender %.2f GB (mean %.2f GB), busiest rank %.2f GB: ≥ %.2f s at 50 GB/s per rank",
				ps.Name, ps.Train, ps.Infer, len(ps.Model.Tensors), len(p.Transfers), float64(p.TotalBytes())/1e9, float64(mx)/1e9, mean/1e9,
				float64(p.Busiest())/1e9, p.LowerBound(50e9))
		})
	}
}

// BenchmarkBuild plans each preset (target: well under a second).
func BenchmarkBuild(b *testing.B) {
	for _, ps := range Presets() {
		b.Run(ps.Name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(DefaultConfig(), ps.Model, ps.Train, ps.Infer); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkValidate(b *testing.B) {
	for _, ps := range Presets() {
		p, err := Build(DefaultConfig(), ps.Model, ps.Train, ps.Infer)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(ps.Name, func(b *testing.B) {
			for b.Loop() {
				if err := Validate(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
