package plan

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func dense(name string, layer, tpDim int, shape ...int64) Tensor {
	return Tensor{Name: name, Shape: shape, DType: BF16, Layer: layer, TPDim: tpDim, Expert: -1}
}

type want struct {
	tensor   int
	src, dst int
	lo, hi   int64
	run      Run
}

func check(t *testing.T, p *Plan, wants []want) {
	t.Helper()
	if err := Validate(p); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if len(p.Transfers) != len(wants) {
		for _, tr := range p.Transfers {
			t.Logf("%+v", tr)
		}
		t.Fatalf("%d transfers, want %d", len(p.Transfers), len(wants))
	}
	for i, w := range wants {
		tr := p.Transfers[i]
		got := want{tr.Tensor, tr.Src, tr.Dst, tr.Lo, tr.Hi, tr.Run}
		if w.run == (Run{}) {
			got.run = Run{} // run not worked out by hand for this row
		}
		if got != w {
			t.Errorf("transfer %d: %+v, want %+v", i, got, w)
		}
	}
}

// TP2 → TP4, worked by hand. BF16, so one element is 2 bytes.
//
//	tensor 0 "rows" [8,4] split on dim 0: a row is 8 bytes; trainer tp0
//	  holds rows 0-3, tp1 rows 4-7; inference rank r holds rows 2r, 2r+1.
//	tensor 1 "cols" [4,8] split on dim 1: trainer shards are [4,4] (a row of
//	  the shard is 8 bytes), inference shards [4,2] (4 bytes a row): each
//	  slab is 4 blocks of 4 bytes.
//	tensor 2 "norm" [4] replicated: 8 bytes, sent by the less-loaded of the
//	  two trainer ranks, ties to rank 0.
func TestTP2ToTP4(t *testing.T) {
	m := &Model{Name: "toy", Layers: 1, Tensors: []Tensor{
		dense("rows", 0, 0, 8, 4), dense("cols", 0, 1, 4, 8), dense("norm", 0, -1, 4),
	}}
	p, err := Build(DefaultConfig(), m, Layout{TP: 2, PP: 1, DP: 1, EP: 1}, Layout{TP: 4, PP: 1, DP: 1, EP: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Trainer buffers: rows shard at 0 (32 B), cols shard at 32 (32 B),
	// norm at 64 (8 B). Inference buffers: rows at 0 (16 B), cols at 16 (16 B), norm at 32.
	check(t, p, []want{
		{0, 0, 0, 0, 2, Run{SrcOff: 0, DstOff: 0, Len: 16, Count: 1, SrcStride: 32, DstStride: 16}},
		{0, 0, 1, 2, 4, Run{SrcOff: 16, DstOff: 0, Len: 16, Count: 1, SrcStride: 32, DstStride: 16}},
		{0, 1, 2, 4, 6, Run{SrcOff: 0, DstOff: 0, Len: 16, Count: 1, SrcStride: 32, DstStride: 16}},
		{0, 1, 3, 6, 8, Run{SrcOff: 16, DstOff: 0, Len: 16, Count: 1, SrcStride: 32, DstStride: 16}},
		{1, 0, 0, 0, 2, Run{SrcOff: 32, DstOff: 16, Len: 4, Count: 4, SrcStride: 8, DstStride: 4}},
		{1, 0, 1, 2, 4, Run{SrcOff: 36, DstOff: 16, Len: 4, Count: 4, SrcStride: 8, DstStride: 4}},
		{1, 1, 2, 4, 6, Run{SrcOff: 32, DstOff: 16, Len: 4, Count: 4, SrcStride: 8, DstStride: 4}},
		{1, 1, 3, 6, 8, Run{SrcOff: 36, DstOff: 16, Len: 4, Count: 4, SrcStride: 8, DstStride: 4}},
		// Both trainer ranks have sent 64 B; the norm alternates 0,1,0,1.
		{2, 0, 0, 0, 4, Run{SrcOff: 64, DstOff: 32, Len: 8, Count: 1, SrcStride: 8, DstStride: 8}},
		{2, 1, 1, 0, 4, Run{SrcOff: 64, DstOff: 32, Len: 8, Count: 1, SrcStride: 8, DstStride: 8}},
		{2, 0, 2, 0, 4, Run{SrcOff: 64, DstOff: 32, Len: 8, Count: 1, SrcStride: 8, DstStride: 8}},
		{2, 1, 3, 0, 4, Run{SrcOff: 64, DstOff: 32, Len: 8, Count: 1, SrcStride: 8, DstStride: 8}},
	})
	if p.SendBytes[0] != 80 || p.SendBytes[1] != 80 {
		t.Fatalf("send bytes %v, want 80 each", p.SendBytes)
	}
	// Each inference rank receives 16 + 16 + 8 = 40 B; the senders' 80 B is the busiest.
	if p.RecvBytes[3] != 40 || p.Busiest() != 80 || p.LowerBound(40) != 2 || p.LowerBound(0) != 0 {
		t.Fatalf("recv %v busiest %d bound %v", p.RecvBytes, p.Busiest(), p.LowerBound(40))
	}
}

// PP2×TP2 with DP2 (8 trainer ranks) → TP1 with DP2 (2 inference ranks).
// Trainer ranks (pp·2+dp)·2+tp: stage 0 holds layer 0 on ranks 0-3, stage 1
// layer 1 on ranks 4-7; rows 0-1 on tp0 (ranks 0,2 / 4,6), rows 2-3 on tp1
// (ranks 1,3 / 5,7). Each inference replica needs both layers whole. The
// two DP replicas split the work: every trainer rank sends exactly one slab.
func TestPP2TP2DP2ToTP1DP2(t *testing.T) {
	m := &Model{Name: "toy", Layers: 2, Tensors: []Tensor{dense("l0", 0, 0, 4, 4), dense("l1", 1, 0, 4, 4)}}
	p, err := Build(DefaultConfig(), m, Layout{TP: 2, PP: 2, DP: 2, EP: 1}, Layout{TP: 1, PP: 1, DP: 2, EP: 1})
	if err != nil {
		t.Fatal(err)
	}
	// A row is 8 bytes; trainer shards are 16 B at offset 0; inference
	// buffers hold l0 at 0 and l1 at 32.
	check(t, p, []want{
		{0, 0, 0, 0, 2, Run{SrcOff: 0, DstOff: 0, Len: 16, Count: 1, SrcStride: 16, DstStride: 32}},
		{0, 1, 0, 2, 4, Run{SrcOff: 0, DstOff: 16, Len: 16, Count: 1, SrcStride: 16, DstStride: 32}},
		{0, 2, 1, 0, 2, Run{SrcOff: 0, DstOff: 0, Len: 16, Count: 1, SrcStride: 16, DstStride: 32}},
		{0, 3, 1, 2, 4, Run{SrcOff: 0, DstOff: 16, Len: 16, Count: 1, SrcStride: 16, DstStride: 32}},
		{1, 4, 0, 0, 2, Run{SrcOff: 0, DstOff: 32, Len: 16, Count: 1, SrcStride: 16, DstStride: 32}},
		{1, 5, 0, 2, 4, Run{SrcOff: 0, DstOff: 48, Len: 16, Count: 1, SrcStride: 16, DstStride: 32}},
		{1, 6, 1, 0, 2, Run{SrcOff: 0, DstOff: 32, Len: 16, Count: 1, SrcStride: 16, DstStride: 32}},
		{1, 7, 1, 2, 4, Run{SrcOff: 0, DstOff: 48, Len: 16, Count: 1, SrcStride: 16, DstStride: 32}},
	})
	for r, b := range p.SendBytes {
		if b != 16 {
			t.Fatalf("trainer rank %d sends %d B, want 16 (replicas split the work)", r, b)
		}
	}
}

func experts(n int) *Model {
	m := &Model{Name: "moe", Layers: 1, Experts: n}
	for e := range n {
		m.Tensors = append(m.Tensors, Tensor{Name: fmt.Sprintf("e%d", e), Shape: []int64{2, 2}, DType: BF16, TPDim: -1, Expert: e})
	}
	return m
}

// EP8 → EP16 with 16 experts of 8 bytes. Trainer dp8/ep8: rank r holds
// experts 2r, 2r+1. Inference dp16/ep16: rank e holds expert e alone.
func TestEP8ToEP16(t *testing.T) {
	p, err := Build(DefaultConfig(), experts(16), Layout{TP: 1, PP: 1, DP: 8, EP: 8}, Layout{TP: 1, PP: 1, DP: 16, EP: 16})
	if err != nil {
		t.Fatal(err)
	}
	var wants []want
	for e := range 16 {
		// Expert e sits at offset 8·(e mod 2) of trainer rank e/2, at 0 on inference rank e.
		wants = append(wants, want{e, e / 2, e, 0, 2, Run{SrcOff: int64(8 * (e % 2)), DstOff: 0, Len: 8, Count: 1, SrcStride: 8, DstStride: 8}})
	}
	check(t, p, wants)
}

// With dp16/ep8 every expert group has two replicas (local ranks g and
// g+8); the least-loaded rule sends expert 2g from rank g and 2g+1 from
// rank g+8.
func TestEP8ReplicasSplitWork(t *testing.T) {
	p, err := Build(DefaultConfig(), experts(16), Layout{TP: 1, PP: 1, DP: 16, EP: 8}, Layout{TP: 1, PP: 1, DP: 16, EP: 16})
	if err != nil {
		t.Fatal(err)
	}
	var wants []want
	for e := range 16 {
		src := e / 2
		if e%2 == 1 {
			src += 8
		}
		wants = append(wants, want{tensor: e, src: src, dst: e, lo: 0, hi: 2})
	}
	check(t, p, wants)
	for r, b := range p.SendBytes {
		if b != 8 {
			t.Fatalf("rank %d sends %d B, want 8", r, b)
		}
	}
}

// A piece of at least SplitBytes is cut into one slab per replica.
func TestLargePieceSplitAcrossReplicas(t *testing.T) {
	m := &Model{Name: "toy", Layers: 1, Tensors: []Tensor{dense("w", 0, 0, 6, 4)}} // 48 B
	p, err := Build(Config{SplitBytes: 48}, m, Layout{TP: 1, PP: 1, DP: 3, EP: 1}, Layout{TP: 1, PP: 1, DP: 1, EP: 1})
	if err != nil {
		t.Fatal(err)
	}
	check(t, p, []want{
		{0, 0, 0, 0, 2, Run{SrcOff: 0, DstOff: 0, Len: 16, Count: 1, SrcStride: 48, DstStride: 48}},
		{0, 1, 0, 2, 4, Run{SrcOff: 16, DstOff: 16, Len: 16, Count: 1, SrcStride: 48, DstStride: 48}},
		{0, 2, 0, 4, 6, Run{SrcOff: 32, DstOff: 32, Len: 16, Count: 1, SrcStride: 48, DstStride: 48}},
	})
}

func TestValidateCatchesBrokenPlans(t *testing.T) {
	m := &Model{Name: "toy", Layers: 1, Tensors: []Tensor{dense("rows", 0, 0, 8, 4), dense("cols", 0, 1, 4, 8)}}
	build := func() *Plan {
		p, err := Build(DefaultConfig(), m, Layout{TP: 2, PP: 1, DP: 2, EP: 1}, Layout{TP: 4, PP: 1, DP: 1, EP: 1})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, tc := range map[string]struct {
		mut  func(p *Plan)
		want error
		msg  string
	}{
		"dropped transfer": {func(p *Plan) { p.Transfers = p.Transfers[1:] }, ErrMissing, "rows[0:2) never reaches inference rank 0"},
		"duplicated transfer": {func(p *Plan) { p.Transfers = append(p.Transfers, p.Transfers[5]) }, ErrOverlap,
			"cols[2:4) reaches inference rank 1 twice"},
		"overlapping slab": {func(p *Plan) {
			tr := &p.Transfers[1] // rows [2,4) → rank 1; widen to [1,4)
			tr.Lo = 1
		}, ErrNotOwned, "inference rank 1 holds [2:4)"},
		"short slab": {func(p *Plan) {
			tr := &p.Transfers[2] // rows [4,6) → rank 2; shrink to [4,5) and fix its run
			tr.Hi = 5
			tr.Run.Len = 8
		}, ErrMissing, "rows[5:6) never reaches inference rank 2"},
		"wrong sender":            {func(p *Plan) { p.Transfers[0].Src = 1 }, ErrNotOwned, "trainer rank 1 holds [4:8)"},
		"sender in another stage": {func(p *Plan) { p.Transfers[0].Src = 9 }, ErrNotOwned, "trainer rank 9 holds no part"},
		"bad byte offset":         {func(p *Plan) { p.Transfers[4].Run.SrcOff += 2 }, ErrBadRun, ""},
		"bad stride":              {func(p *Plan) { p.Transfers[4].Run.DstStride = 8 }, ErrBadRun, ""},
	} {
		t.Run(name, func(t *testing.T) {
			p := build()
			if err := Validate(p); err != nil {
				t.Fatalf("unbroken plan: %v", err)
			}
			tc.mut(p)
			err := Validate(p)
			if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.msg) {
				t.Fatalf("err %v, want %v containing %q", err, tc.want, tc.msg)
			}
		})
	}
}

func TestBadLayouts(t *testing.T) {
	m := experts(16)
	m.Tensors = append(m.Tensors, dense("w", 0, 0, 6, 4))
	ok := Layout{TP: 1, PP: 1, DP: 1, EP: 1}
	for name, tc := range map[string]struct {
		train, infer Layout
		msg          string
	}{
		"zero TP":                 {Layout{TP: 0, PP: 1, DP: 1, EP: 1}, ok, "TP must be >= 1"},
		"EP not dividing DP·TP":   {Layout{TP: 1, PP: 1, DP: 4, EP: 8}, ok, "EP 8 must divide DP·TP = 4"},
		"EP not dividing experts": {ok, Layout{TP: 1, PP: 1, DP: 3, EP: 3}, "EP 3 must divide the model's 16 experts"},
		"TP not dividing dim":     {Layout{TP: 4, PP: 1, DP: 1, EP: 1}, ok, "dim 0 (6) not divisible by TP 4"},
		"PP over layers":          {ok, Layout{TP: 1, PP: 2, DP: 1, EP: 1}, "PP 2 exceeds"},
	} {
		if _, err := Build(DefaultConfig(), m, tc.train, tc.infer); !errors.Is(err, ErrBadLayout) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: err %v, want ErrBadLayout with %q", name, err, tc.msg)
		}
	}
	bad := &Model{Name: "bad", Layers: 1, Tensors: []Tensor{dense("w", 3, 0, 4)}}
	if _, err := Build(DefaultConfig(), bad, ok, ok); !errors.Is(err, ErrBadLayout) {
		t.Errorf("layer out of range: %v", err)
	}
}

func TestStageSplit(t *testing.T) {
	m := &Model{Layers: 10}
	l := Layout{TP: 1, PP: 4, DP: 1, EP: 1}
	// 10 layers over 4 stages: 3,3,2,2.
	want := []int{0, 0, 0, 1, 1, 1, 2, 2, 3, 3}
	for layer, s := range want {
		if got := l.stage(m, layer); got != s {
			t.Errorf("layer %d: stage %d, want %d", layer, got, s)
		}
	}
	if l.stage(m, LayerEmbed) != 0 || l.stage(m, LayerHead) != 3 {
		t.Error("embed/head stages")
	}
}

// execute runs a plan on real bytes: trainer buffers filled from the full
// tensors by the layout, copied run by run into inference buffers.
func execute(p *Plan, full [][]byte) [][]byte {
	dst := make([][]byte, p.Infer.World())
	for r := range dst {
		dst[r] = make([]byte, p.InferOffsets.Bytes[r])
	}
	src := shardBuffers(p.Model, p.Train, p.TrainOffsets, full)
	for _, tr := range p.Transfers {
		r := tr.Run
		for k := range r.Count {
			copy(dst[tr.Dst][r.DstOff+k*r.DstStride:][:r.Len], src[tr.Src][r.SrcOff+k*r.SrcStride:][:r.Len])
		}
	}
	return dst
}

// shardBuffers builds each rank's buffer straight from the layout rules,
// element by element: the reference the executed plan must reproduce.
func shardBuffers(m *Model, l Layout, o *Offsets, full [][]byte) [][]byte {
	bufs := make([][]byte, l.World())
	for r := range bufs {
		bufs[r] = make([]byte, o.Bytes[r])
	}
	for ti := range m.Tensors {
		t := &m.Tensors[ti]
		outer, inner, _ := t.geometry()
		for r := range bufs {
			off, ok := o.Offset(ti, r)
			if !ok {
				continue
			}
			lo, hi := shardBounds(l, t, r)
			w := (hi - lo) * inner
			for k := range outer {
				row := full[ti][k*(int64(len(full[ti]))/outer):]
				copy(bufs[r][off+k*w:][:w], row[lo*inner:hi*inner])
			}
		}
	}
	return bufs
}

func fullTensors(m *Model) [][]byte {
	full := make([][]byte, len(m.Tensors))
	for i := range m.Tensors {
		full[i] = make([]byte, m.Tensors[i].Bytes())
		for j := range full[i] {
			full[i][j] = byte(i*131 + j*7 + j>>8)
		}
	}
	return full
}

func TestExecutedPlansReproduceShards(t *testing.T) {
	m := &Model{Name: "mix", Layers: 4, Experts: 8}
	m.Tensors = append(m.Tensors, dense("embed", LayerEmbed, 0, 16, 8))
	for l := range 4 {
		m.Tensors = append(m.Tensors, dense(fmt.Sprintf("q%d", l), l, 0, 8, 8), dense(fmt.Sprintf("o%d", l), l, 1, 8, 8),
			dense(fmt.Sprintf("n%d", l), l, -1, 8), Tensor{Name: fmt.Sprintf("w3d%d", l), Shape: []int64{2, 8, 4}, DType: FP32, Layer: l, TPDim: 1, Expert: -1})
		for e := range 8 {
			m.Tensors = append(m.Tensors, Tensor{Name: fmt.Sprintf("x%d.%d", l, e), Shape: []int64{4, 8}, DType: BF16, Layer: l, TPDim: -1, Expert: e})
		}
	}
	m.Tensors = append(m.Tensors, dense("head", LayerHead, 0, 16, 8))
	full := fullTensors(m)
	layouts := []Layout{
		{TP: 1, PP: 1, DP: 1, EP: 1}, {TP: 2, PP: 1, DP: 1, EP: 2}, {TP: 4, PP: 2, DP: 2, EP: 8},
		{TP: 2, PP: 4, DP: 2, EP: 4}, {TP: 8, PP: 1, DP: 1, EP: 8}, {TP: 1, PP: 3, DP: 8, EP: 8},
	}
	for _, split := range []int64{0, 64} {
		for _, tr := range layouts {
			for _, in := range layouts {
				p, err := Build(Config{SplitBytes: split}, m, tr, in)
				if err != nil {
					t.Fatalf("%v→%v: %v", tr, in, err)
				}
				if err := Validate(p); err != nil {
					t.Fatalf("%v→%v: %v", tr, in, err)
				}
				got := execute(p, full)
				want := shardBuffers(m, in, p.InferOffsets, full)
				for r := range got {
					if !bytes.Equal(got[r], want[r]) {
						t.Fatalf("%v→%v split %d: inference rank %d buffer differs", tr, in, split, r)
					}
				}
			}
		}
	}
}

// Property: for random models and layouts, plans validate, deliver every
// inference rank exactly its shard bytes, and each trainer rank sends only
// what it holds (checked by Validate and by execution).
func TestPlanProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		divisors := []int{1, 2, 4}
		pick := func(label string) Layout {
			return Layout{
				TP: rapid.SampledFrom(divisors).Draw(rt, label+"TP"),
				PP: rapid.IntRange(1, 3).Draw(rt, label+"PP"),
				DP: rapid.SampledFrom(divisors).Draw(rt, label+"DP"),
				EP: 1,
			}
		}
		tr, in := pick("train"), pick("infer")
		tr.EP = rapid.SampledFrom(divisors).Filter(func(e int) bool { return (tr.DP*tr.TP)%e == 0 }).Draw(rt, "trainEP")
		in.EP = rapid.SampledFrom(divisors).Filter(func(e int) bool { return (in.DP*in.TP)%e == 0 }).Draw(rt, "inferEP")
		m := &Model{Name: "rand", Layers: 3, Experts: 4}
		n := rapid.IntRange(1, 12).Draw(rt, "tensors")
		for i := range n {
			layer := rapid.IntRange(-2, 2).Draw(rt, "layer")
			if expert := rapid.IntRange(-3, 3).Draw(rt, "expert"); expert >= 0 {
				m.Tensors = append(m.Tensors, Tensor{Name: fmt.Sprint("x", i), Shape: []int64{int64(rapid.IntRange(1, 5).Draw(rt, "d0")), 3}, DType: BF16, Layer: max(layer, 0), TPDim: -1, Expert: expert})
				continue
			}
			dims := rapid.IntRange(1, 3).Draw(rt, "dims")
			shape := make([]int64, dims)
			for d := range shape {
				shape[d] = int64(4 * rapid.IntRange(1, 3).Draw(rt, "dim"))
			}
			m.Tensors = append(m.Tensors, Tensor{Name: fmt.Sprint("t", i), Shape: shape, DType: rapid.SampledFrom([]DType{FP8, BF16, FP32}).Draw(rt, "dtype"),
				Layer: layer, TPDim: rapid.IntRange(-1, dims-1).Draw(rt, "tpdim"), Expert: -1})
		}
		p, err := Build(Config{SplitBytes: int64(rapid.IntRange(0, 64).Draw(rt, "split"))}, m, tr, in)
		if err != nil {
			rt.Fatal(err)
		}
		if err := Validate(p); err != nil {
			rt.Fatal(err)
		}
		full := fullTensors(m)
		got, want := execute(p, full), shardBuffers(m, in, p.InferOffsets, full)
		for r := range got {
			if !bytes.Equal(got[r], want[r]) {
				rt.Fatalf("inference rank %d differs", r)
			}
		}
	})
}
