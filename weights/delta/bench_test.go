package delta_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/internal/fsutil"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/internal/ckpttest"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// Benchmark size: 64 MiB of BF16 weights by default; set
// ASYNCRL_WEIGHTS_BENCH_MB=1024 for the 1 GiB figures.
func benchBytes() int64 {
	if s := os.Getenv("ASYNCRL_WEIGHTS_BENCH_MB"); s != "" {
		if mb, err := strconv.ParseInt(s, 10, 64); err == nil && mb > 0 {
			return mb << 20
		}
	}
	return 64 << 20
}

// reportCPU reports MB per CPU-second ("MB/cpu-s", decimal MB like
// SetBytes's MB/s): the per-core speed, which unlike MB/s does not depend
// on how busy the other cores are.
func reportCPU(b *testing.B, bytesPerOp int64, cpu time.Duration) {
	if cpu > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
	}
}

func benchUpdates(b *testing.B) (base []safetensors.Tensor, updates map[string][]safetensors.Tensor) {
	r := rand.New(rand.NewPCG(42, 42))
	base = ckpttest.Random(r, 32, benchBytes())
	return base, map[string][]safetensors.Tensor{
		"sparse2pct": ckpttest.Update(r, base, 0.02, 0),
		"adamlike":   ckpttest.AdamLike(r, base, 1e-2), // every element ±1%: 1–3 BF16 ulps, exponents rarely move
	}
}

func BenchmarkEncode(b *testing.B) {
	base, updates := benchUpdates(b)
	var total int64
	for _, t := range base {
		total += int64(len(t.Data))
	}
	for _, name := range []string{"sparse2pct", "adamlike"} {
		for _, level := range []int{1, 3} {
			b.Run(fmt.Sprintf("%s/level=%d", name, level), func(b *testing.B) {
				bs, _ := delta.NewMemSource(base)
				ns, _ := delta.NewMemSource(updates[name])
				cfg := delta.DefaultEncodeConfig()
				cfg.Level = level
				b.SetBytes(total)
				var m *delta.Manifest
				cpu0 := cpuTime()
				for b.Loop() {
					var err error
					if m, err = delta.Encode(context.Background(), cfg, bs, ns, 1, store.Discard{}); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, total, cpuTime()-cpu0)
				b.ReportMetric(float64(m.TotalCompressedNumBytes)/float64(total), "compressed/full")
			})
		}
	}
}

func BenchmarkApply(b *testing.B) {
	base, updates := benchUpdates(b)
	var total int64
	for _, t := range base {
		total += int64(len(t.Data))
	}
	for _, name := range []string{"sparse2pct", "adamlike"} {
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			baseDir, newDir, work := filepath.Join(dir, "base"), filepath.Join(dir, "new"), filepath.Join(dir, "work")
			if err := ckpttest.Write(baseDir, base, 1<<30); err != nil {
				b.Fatal(err)
			}
			if err := ckpttest.Write(newDir, updates[name], 1<<30); err != nil {
				b.Fatal(err)
			}
			st, _ := store.NewLocal(filepath.Join(dir, "sync"))
			bs, _ := safetensors.OpenDir(baseDir)
			ns, _ := safetensors.OpenDir(newDir)
			m, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), bs, ns, 1, st)
			bs.Close()
			ns.Close()
			if err != nil {
				b.Fatal(err)
			}
			payloads := st.Path(delta.DeltaDir(1))
			b.SetBytes(total)
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				os.RemoveAll(work)
				if err := fsutil.CopyDir(work, baseDir); err != nil {
					b.Fatal(err)
				}
				mut, err := delta.OpenMutable(work)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				cpu0 := cpuTime()
				if _, err := delta.Apply(context.Background(), delta.DefaultApplyConfig(), m, payloads, mut); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - cpu0
				b.StopTimer()
				mut.Close()
				b.StartTimer()
			}
			reportCPU(b, total, cpu)
		})
	}
}
