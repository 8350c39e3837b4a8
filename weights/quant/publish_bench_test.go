package quant_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/trainertest"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// formats are the published weight formats compared: BF16 (today's
// serving checkpoint) and the two quantised ones.
var formats = []string{"bf16", "fp8", "mxfp8"}

// publishRow is one format's cost of publishing version 1 after version 0.
type publishRow struct {
	format           string
	full, delta      int64 // bytes of v1's checkpoint; compressed bytes of the v0→v1 delta
	st               quant.Stats
	quantize, encode time.Duration
}

// publishCost writes v0 and v1 (name → rows×cols float32 masters) in
// format, encodes the delta between them as the publisher does
// (delta.DefaultEncodeConfig: XOR + zstd level 1) and returns the sizes
// and the error of v1's served values against its masters.
func publishCost(t testing.TB, format string, shapes map[string][2]int, versions [2]map[string][]float32) publishRow {
	t.Helper()
	root := t.TempDir()
	row := publishRow{format: format}
	var s quant.Scheme
	if format != "bf16" {
		s, _ = quant.Lookup(format)
	}
	var dirs [2]string
	for v, ws := range versions {
		var ts []safetensors.Tensor
		row.st = quant.Stats{}
		t0 := time.Now()
		for _, name := range sortedKeys(shapes) {
			rc := shapes[name]
			if s == nil {
				b := safetensors.EncodeBF16(ws[name])
				ts = append(ts, safetensors.Tensor{Name: name, DType: safetensors.BF16, Shape: []int64{int64(rc[0]), int64(rc[1])}, Data: b})
				served, _ := safetensors.DecodeFloat32(safetensors.BF16, b, nil)
				row.st.Merge(quant.Compare(ws[name], served))
				continue
			}
			w, sc, st, err := s.Quantize(name, rc[0], rc[1], ws[name])
			if err != nil {
				t.Fatal(err)
			}
			row.st.Merge(st)
			for _, q := range []quant.Tensor{w, sc} {
				ts = append(ts, safetensors.Tensor{Name: q.Name, DType: safetensors.DType(q.DType), Shape: q.Shape, Data: q.Data})
			}
		}
		row.quantize = time.Since(t0)
		dirs[v] = filepath.Join(root, fmt.Sprintf("v%d", v))
		if err := os.MkdirAll(dirs[v], 0o755); err != nil {
			t.Fatal(err)
		}
		if err := safetensors.WriteFile(filepath.Join(dirs[v], "model.safetensors"), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(dirs[1], "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	row.full = fi.Size()
	st, err := store.NewLocal(filepath.Join(root, "store"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := safetensors.OpenDir(dirs[0])
	b, _ := safetensors.OpenDir(dirs[1])
	defer a.Close()
	defer b.Close()
	t0 := time.Now()
	m, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), a, b, 1, st)
	if err != nil {
		t.Fatal(err)
	}
	row.encode = time.Since(t0)
	row.delta = m.TotalCompressedNumBytes
	return row
}

func sortedKeys(m map[string][2]int) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks { // a handful of names: insertion sort
		for j := i; j > 0 && ks[j] < ks[j-1]; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
	return ks
}

func reportRows(t testing.TB, title string, rows []publishRow) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n| format | full bytes | ×BF16 | delta bytes | ×BF16 delta | delta/full | max abs err | max rel err | RMS err | quantise | delta encode |\n", title)
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %.3f | %d | %.3f | %.4f | %.3g | %.3g | %.3g | %v | %v |\n", r.format, r.full,
			float64(r.full)/float64(rows[0].full), r.delta, float64(r.delta)/float64(rows[0].delta), float64(r.delta)/float64(r.full),
			r.st.MaxAbs, r.st.MaxRel, r.st.RMS(), r.quantize.Round(time.Millisecond), r.encode.Round(time.Millisecond))
	}
	t.Log("\n" + b.String())
}

// TestPublishBytesBuiltInPolicy: the built-in policy between two real
// optimiser steps (trainertest: steps 3 and 4, lr 3e-3), published as the
// publisher publishes (the trainer's BF16 serving copy, quantised for
// fp8/mxfp8): every quantised tensor round trips within the bound, the
// quantised checkpoint is smaller than BF16, and so is its delta. The
// logged table is BENCHMARKS.md's "FP8/MXFP8 publish" built-in rows.
func TestPublishBytesBuiltInPolicy(t *testing.T) {
	var ms [2]*model.Model
	for i, steps := range []int{3, 4} {
		ms[i] = trainertest.Trained(t, steps).ServingCopy()
	}
	shapes := map[string][2]int{}
	var versions [2]map[string][]float32
	for i, m := range ms {
		versions[i] = map[string][]float32{}
		dir := t.TempDir()
		if err := m.SaveServing(dir); err != nil {
			t.Fatal(err)
		}
		ck, err := safetensors.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range m.QuantizedTensors() {
			vals, info, err := ck.ReadFloat32(name)
			if err != nil {
				t.Fatal(err)
			}
			shapes[name] = [2]int{int(info.Shape[0]), int(info.Shape[1])}
			versions[i][name] = vals
		}
		ck.Close()
	}
	var rows []publishRow
	for _, f := range formats {
		r := publishCost(t, f, shapes, versions)
		rows = append(rows, r)
		if f != "bf16" {
			s, _ := quant.Lookup(f)
			for name, rc := range shapes { // the bound, element by element, on every tensor
				w, sc, _, _ := s.Quantize(name, rc[0], rc[1], versions[1][name])
				got, err := s.Dequantize(w, sc, nil)
				if err != nil {
					t.Fatal(err)
				}
				scales := elementScales(t, s, w, sc)
				for i, x := range versions[1][name] {
					xs := float64(x)
					bound := math.Ldexp(math.Abs(xs), -4) + math.Ldexp(float64(scales[i]), -10) + math.Ldexp(math.Abs(xs)+float64(scales[i]), -20)
					if math.Abs(float64(got[i])-xs) > bound {
						t.Fatalf("%s %s[%d]: %g served as %g, beyond %g", f, name, i, xs, got[i], bound)
					}
				}
			}
			if r.full >= rows[0].full || r.delta >= rows[0].delta {
				t.Fatalf("%s: full %d and delta %d bytes, BF16 %d and %d", f, r.full, r.delta, rows[0].full, rows[0].delta)
			}
		}
	}
	reportRows(t, "built-in policy (linear weights only), v3 → v4", rows)
}

// TestPublishBytesLarge (ASYNCRL_QUANT_BENCH=1; make bench-quant): a
// synthetic 8 × 4096×4096 model (134 M parameters, N(0, 0.02)) and an
// AdamW-like update, every element ±lr (lr 1e-5, ASYNCRL_QUANT_LR to
// change it), rounded to BF16 as the trainer's serving copy is, then
// published in each format.
func TestPublishBytesLarge(t *testing.T) {
	if os.Getenv("ASYNCRL_QUANT_BENCH") == "" {
		t.Skip("set ASYNCRL_QUANT_BENCH=1 (make bench-quant)")
	}
	const n, dim = 8, 4096
	lr := 1e-5
	if s := os.Getenv("ASYNCRL_QUANT_LR"); s != "" {
		fmt.Sscan(s, &lr)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	shapes := map[string][2]int{}
	versions := [2]map[string][]float32{{}, {}}
	for l := range n {
		name := fmt.Sprintf("layers.%d.weight", l)
		shapes[name] = [2]int{dim, dim}
		w0, w1 := make([]float32, dim*dim), make([]float32, dim*dim)
		for i := range w0 {
			x := rng.NormFloat64() * 0.02
			step := lr
			if rng.IntN(2) == 0 {
				step = -lr
			}
			w0[i] = roundBF16(float32(x))
			w1[i] = roundBF16(float32(x + step))
		}
		versions[0][name], versions[1][name] = w0, w1
	}
	var rows []publishRow
	for _, f := range formats {
		rows = append(rows, publishCost(t, f, shapes, versions))
	}
	reportRows(t, fmt.Sprintf("synthetic 8 × 4096×4096, AdamW-like update ±%g", lr), rows)
}

func roundBF16(f float32) float32 {
	return safetensors.Float32FromBF16(safetensors.BF16FromFloat32(f))
}
