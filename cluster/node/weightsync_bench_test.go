package node

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/receiver"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
	"github.com/asyncrl/asyncrl/wiring"
)

// BenchmarkWeightSync measures one version end to end: publish, then 4
// receivers (concurrently, each with its own copy) bring their copy to it
// and load it — as a SkyRL delta (encode from memory, fetch, apply) versus
// shipping the full checkpoint (write it, upload, 4 downloads). Each
// iteration is a new version with 2% of the BF16 elements changed. Stores:
// a local directory and the NATS JetStream object store over loopback.
// Models: the built-in policy (loaded by the engine's loader) and a
// synthetic BF16 checkpoint of ASYNCRL_SYNC_BENCH_MB MiB (default 32; the
// figures in docs/weights.md use 256), loaded by a no-op loader.
//
//	go test -run XXX -bench WeightSync -benchtime 3x ./cluster/node
func BenchmarkWeightSync(b *testing.B) {
	mb := 32
	if s := os.Getenv("ASYNCRL_SYNC_BENCH_MB"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("ASYNCRL_SYNC_BENCH_MB=%q", s)
		}
		mb = v
	}
	models := []struct {
		name string
		make func(b *testing.B, dir string) ([]safetensors.Tensor, receiver.Loader)
	}{
		{"builtin", builtinCheckpoint},
		{fmt.Sprintf("synthetic-%dMiB", mb), func(b *testing.B, dir string) ([]safetensors.Tensor, receiver.Loader) {
			return syntheticCheckpoint(b, dir, mb), receiver.LoaderFunc(func(string, int64) error { return nil })
		}},
	}
	for _, m := range models {
		for _, where := range []string{"local", "nats"} {
			for _, path := range []string{"delta", "full"} {
				b.Run(m.name+"/"+where+"/"+path, func(b *testing.B) {
					benchSync(b, m.make, where, path)
				})
			}
		}
	}
}

const benchReceivers = 4

func benchSync(b *testing.B, mk func(*testing.B, string) ([]safetensors.Tensor, receiver.Loader), where, path string) {
	// A deadline: without one the NATS object store bounds each Get by the
	// client's default timeout, too short for 4 concurrent 256 MiB reads.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	root := b.TempDir()
	baseDir := filepath.Join(root, "base")
	cur, loader := mk(b, baseDir)
	var st store.Store
	switch where {
	case "local":
		l, err := store.NewLocal(filepath.Join(root, "store"))
		if err != nil {
			b.Fatal(err)
		}
		st = l
	case "nats":
		opts := natsbus.DefaultOptions()
		opts.StoreDir = filepath.Join(root, "js")
		bus, err := natsbus.Connect(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		defer bus.Close()
		nc := store.DefaultNATSConfig("bench")
		nc.Storage = jetstream.FileStorage
		if st, err = store.NewNATS(ctx, bus.Conn(), nc); err != nil {
			b.Fatal(err)
		}
	}
	rcvs := make([]*receiver.Receiver, benchReceivers)
	for i := range rcvs {
		r, err := receiver.New(receiver.DefaultConfig(filepath.Join(root, "rcv"+strconv.Itoa(i)), baseDir), st)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Apply(ctx, 0); err != nil { // copy the base outside the timer
			b.Fatal(err)
		}
		rcvs[i] = r
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var shipped, full int64
	b.ResetTimer()
	for it := range b.N {
		b.StopTimer()
		next := perturb(cur, 0.02, rng)
		v := int64(it + 1)
		b.StartTimer()
		switch path {
		case "delta":
			base, err := delta.NewMemSource(cur)
			if err != nil {
				b.Fatal(err)
			}
			ns, err := delta.NewMemSource(next)
			if err != nil {
				b.Fatal(err)
			}
			m, err := delta.Encode(ctx, delta.DefaultEncodeConfig(), base, ns, v, st)
			if err != nil {
				b.Fatal(err)
			}
			shipped += m.TotalCompressedNumBytes
			full += m.TotalUncompressedNumBytes
			var g errgroup.Group
			for _, r := range rcvs {
				g.Go(func() error { _, err := r.Sync(ctx, v, loader); return err })
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
		case "full":
			dir := filepath.Join(root, fmt.Sprintf("ship-%d", v))
			if err := writeCheckpoint(dir, next, baseDir); err != nil {
				b.Fatal(err)
			}
			sm, err := delta.PublishSnapshot(ctx, st, delta.KindFull, v, dir, store.DefaultWorkers)
			if err != nil {
				b.Fatal(err)
			}
			shipped += sm.TotalNumBytes
			full += sm.TotalNumBytes
			var g errgroup.Group
			for i := range rcvs {
				g.Go(func() error {
					dst := filepath.Join(root, fmt.Sprintf("got-%d-%d", i, v))
					if _, err := delta.FetchSnapshot(ctx, st, delta.KindFull, v, dst, store.DefaultWorkers); err != nil {
						return err
					}
					if err := loader.Load(dst, v); err != nil {
						return err
					}
					return os.RemoveAll(dst)
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			_ = os.RemoveAll(dir)
			b.StartTimer()
		}
		cur = next
	}
	b.StopTimer()
	b.ReportMetric(float64(shipped)/float64(b.N), "shipped-B/op")
	b.ReportMetric(float64(shipped)/float64(max(full, 1)), "shipped/full")
}

// builtinCheckpoint saves the built-in policy's serving copy in dir and
// returns its tensors and the engine's loader.
func builtinCheckpoint(b *testing.B, dir string) ([]safetensors.Tensor, receiver.Loader) {
	m, err := model.New(model.DefaultConfig(), 1)
	if err != nil {
		b.Fatal(err)
	}
	m.RoundBF16()
	if err := m.SaveServing(dir); err != nil {
		b.Fatal(err)
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	for _, name := range ck.Names() {
		data, info, err := ck.ReadTensor(name)
		if err != nil {
			b.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), data...)})
	}
	return ts, receiver.LoaderFunc(func(d string, _ int64) error { _, err := wiring.LoadPolicy(d); return err })
}

// syntheticCheckpoint writes mb MiB of random BF16 weights in 8 MiB
// tensors (2-D, like linear layers) to dir.
func syntheticCheckpoint(b *testing.B, dir string, mb int) []safetensors.Tensor {
	rng := rand.New(rand.NewPCG(3, 4))
	var ts []safetensors.Tensor
	left := int64(mb) << 20
	for i := 0; left > 0; i++ {
		n := min(left, 8<<20) / 2 // elements
		vals := make([]float32, n)
		for j := range vals {
			vals[j] = float32(rng.NormFloat64() * 0.02)
		}
		rows := int64(1024)
		if n%rows != 0 {
			rows = 1
		}
		ts = append(ts, safetensors.Tensor{Name: fmt.Sprintf("layers.%03d.weight", i), DType: safetensors.BF16,
			Shape: []int64{rows, n / rows}, Data: safetensors.EncodeBF16(vals)})
		left -= 2 * n
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if _, err := safetensors.WriteSharded(dir, ts, 0, map[string]string{"format": "pt"}); err != nil {
		b.Fatal(err)
	}
	return ts
}

// perturb returns a copy of ts with a fraction of the BF16 elements
// nudged by one to three ulps (what an RL step does to the few weights
// whose BF16 rounding it moves).
func perturb(ts []safetensors.Tensor, frac float64, rng *rand.Rand) []safetensors.Tensor {
	out := make([]safetensors.Tensor, len(ts))
	for i, t := range ts {
		d := append([]byte(nil), t.Data...)
		n := len(d) / 2
		for k := int(float64(n) * frac); k > 0; k-- {
			j := rng.IntN(n)
			u := binary.LittleEndian.Uint16(d[2*j:])
			binary.LittleEndian.PutUint16(d[2*j:], u+uint16(1+rng.IntN(3)))
		}
		out[i] = safetensors.Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Data: d}
	}
	return out
}

// writeCheckpoint writes ts to dir as one safetensors file, with the base's
// config.json when it has one (the built-in policy's loader needs it).
func writeCheckpoint(dir string, ts []safetensors.Tensor, baseDir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := safetensors.WriteSharded(dir, ts, 0, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	cfg, err := os.ReadFile(filepath.Join(baseDir, "config.json"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
}
