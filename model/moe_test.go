package model

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/model/sampler"
)

func tinyMoEConfig() Config {
	c := tinyConfig()
	c.Experts, c.TopK = 3, 2
	return c
}

// routesOf is what an engine reports for toks: row p is the routing of
// the forward pass whose window ends at toks[p].
func routesOf(m *Model, toks []int32) []int32 {
	rl := m.RoutesLen()
	out := make([]int32, len(toks)*rl)
	logits := make([]float32, m.VocabSize())
	for p := range toks {
		m.NextLogitsRoutes(toks[:p+1], logits, out[p*rl:(p+1)*rl])
	}
	return out
}

func TestMoEConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		experts, topK int
		want          string
	}{
		{0, 1, "top_k must be 0"},
		{-1, 0, "experts must be"},
		{4, 0, "top_k must be in [1, experts=4]"},
		{4, 5, "top_k must be in"},
		{maxExperts + 1, 1, "experts must be"},
	} {
		c := tinyConfig()
		c.Experts, c.TopK = tc.experts, tc.topK
		err := c.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("experts %d top_k %d: got %v, want ErrConfig naming %q", tc.experts, tc.topK, err, tc.want)
		}
	}
	if err := tinyMoEConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestDenseConfigJSONUnchanged: a dense model's config.json and tensor
// names are what they were before the MoE fields existed, so old
// checkpoints (and the torch worker's) load and new dense ones are the same
// bytes.
func TestDenseConfigJSONUnchanged(t *testing.T) {
	js, err := json.Marshal(tinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"vocab_size":7,"window":3,"embed_dim":2,"hidden":4,"layers":2,"max_seq_len":16}`; string(js) != want {
		t.Fatalf("dense config JSON %s, want %s", js, want)
	}
	m, _ := New(tinyConfig(), 1)
	want := []string{"embed.weight", "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "head.weight", "head.bias"}
	if got := m.TensorNames(); !slices.Equal(got, want) {
		t.Fatalf("dense tensors %v, want %v", got, want)
	}
	if m.RoutesLen() != 0 {
		t.Fatal("a dense model reports routes")
	}
}

func TestTopKTiesToLowerID(t *testing.T) {
	sel := make([]int32, 3)
	topK([]float32{1, 5, 5, 2, 5}, sel)
	if !slices.Equal(sel, []int32{1, 2, 4}) {
		t.Fatalf("top-3 of ties: %v, want [1 2 4]", sel)
	}
	topK([]float32{0, 3, -1, 3}, sel[:2])
	if !slices.Equal(sel[:2], []int32{1, 3}) {
		t.Fatalf("top-2: %v", sel[:2])
	}
}

// TestMoEForwardByHand recomputes a one-layer mixture's logits from its
// tensors with the formula in moe.go (router, top-k, softmax over the
// chosen, gated tanh experts, head) and compares with the model, and checks
// that replaying other experts changes the logits to that formula's value
// for those experts.
func TestMoEForwardByHand(t *testing.T) {
	c := Config{VocabSize: 9, Window: 2, EmbedDim: 3, Hidden: 5, Layers: 1, MaxSeqLen: 8, Experts: 4, TopK: 2}
	m, err := New(c, 11)
	if err != nil {
		t.Fatal(err)
	}
	toks := []int32{4, 7}
	x := make([]float64, 0, 6)
	for k := range c.Window { // slot 0 = most recent token
		id := toks[len(toks)-1-k]
		for d := range c.EmbedDim {
			x = append(x, float64(m.params[m.embOff+int(id)*c.EmbedDim+d]))
		}
	}
	n := len(x)
	We := m.params[m.wOff[0]:]
	Wr := m.params[m.wOff[0]+c.Experts*c.Hidden*n:]
	b := m.params[m.bOff[0]:]
	logitsFor := func(sel []int32) []float64 {
		r := make([]float64, c.Experts)
		for e := range r {
			for i := range x {
				r[e] += float64(Wr[e*n+i]) * x[i]
			}
		}
		var z float64
		for _, e := range sel {
			z += math.Exp(r[e])
		}
		h := make([]float64, c.Hidden)
		for _, e := range sel {
			g := math.Exp(r[e]) / z
			for j := range h {
				a := float64(b[int(e)*c.Hidden+j])
				for i := range x {
					a += float64(We[(int(e)*c.Hidden+j)*n+i]) * x[i]
				}
				h[j] += g * math.Tanh(a)
			}
		}
		out := make([]float64, c.VocabSize)
		for v := range out {
			out[v] = float64(m.params[m.headB+v])
			for j := range h {
				out[v] += float64(m.params[m.headW+v*c.Hidden+j]) * h[j]
			}
		}
		return out
	}
	ws := m.NewWorkspace()
	got := slices.Clone(m.Forward(toks, ws))
	own := slices.Clone(ws.Routes())
	// the router's choice is the top-2 of its logits
	r := make([]float32, c.Experts)
	for e := range r {
		var s float64
		for i := range x {
			s += float64(Wr[e*n+i]) * x[i]
		}
		r[e] = float32(s)
	}
	want := make([]int32, 2)
	topK(r, want)
	if !slices.Equal(own, want) {
		t.Fatalf("routes %v, router's top-2 %v", own, want)
	}
	for v, w := range logitsFor(own) {
		if math.Abs(float64(got[v])-w) > 1e-5 {
			t.Fatalf("logit %d: model %v, by hand %v", v, got[v], w)
		}
	}
	other := []int32{3, 0}
	if slices.Equal(other, own) || slices.Equal([]int32{0, 3}, own) {
		other = []int32{1, 2}
	}
	rep := m.ForwardReplay(toks, other, ws)
	if !slices.Equal(ws.Routes(), other) {
		t.Fatalf("replayed routes %v, want %v", ws.Routes(), other)
	}
	for v, w := range logitsFor(other) {
		if math.Abs(float64(rep[v])-w) > 1e-5 {
			t.Fatalf("replayed logit %d: model %v, by hand %v", v, rep[v], w)
		}
	}
}

// TestMoEGradientCheck: the analytic gradient of the trainer loss of a
// two-layer mixture against central finite differences, with route replay
// (the loss is smooth in every weight: the experts are fixed) and without
// (the router re-chooses at every evaluation; parameters whose ±eps flips
// a choice are skipped, since the loss jumps there).
func TestMoEGradientCheck(t *testing.T) {
	for _, replay := range []bool{true, false} {
		name := "replay"
		if !replay {
			name = "own_routing"
		}
		t.Run(name, func(t *testing.T) {
			m, err := New(tinyMoEConfig(), 5)
			if err != nil {
				t.Fatal(err)
			}
			for i := m.headW; i < m.headB; i++ {
				m.params[i] *= 20
			}
			m.refresh()
			cfg := DefaultTrainerConfig()
			cfg.KLCoef = 0.2
			tr, err := NewTrainer(m, cfg)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(9, 9))
			seqs := rollout(t, m, 3, 3, rng, sampler.Params{Temperature: 1, TopP: 1})
			for si := range seqs {
				sq := &seqs[si]
				sq.Routes = routesOf(m, sq.Tokens)
				sq.OldLogprobs = slices.Clone(sq.RolloutLogprobs)
				for i := range sq.OldLogprobs {
					if sq.LossMask[i] != 0 {
						sq.OldLogprobs[i] -= float32(0.1 * rng.Float64())
					}
				}
			}
			replayed := Batch{Sequences: seqs}
			own := Batch{Sequences: slices.Clone(seqs)}
			for si := range own.Sequences {
				own.Sequences[si].Routes = nil
			}
			b := own
			if replay {
				b = replayed
			}
			_, g, err := tr.lossGrad(b)
			if err != nil {
				t.Fatal(err)
			}
			ana := slices.Clone(g)
			_, g2, _ := tr.lossGrad(replayed)
			if !replay && !slices.Equal(ana, g2) {
				t.Fatal("at the weights that chose the routes, replaying them changes the gradient")
			}
			loss := func(b Batch) float64 {
				st, _, err := tr.lossGrad(b)
				if err != nil {
					t.Fatal(err)
				}
				return st.Loss
			}
			const eps = 1e-2
			checked, skipped := 0, 0
			for i := range m.params {
				orig := m.params[i]
				var up, down float64
				flipped := false
				for _, d := range []float32{eps, -eps} {
					m.params[i] = orig + d
					m.refresh()
					l := loss(b)
					if !replay && l != loss(replayed) {
						flipped = true
					}
					if d > 0 {
						up = l
					} else {
						down = l
					}
				}
				m.params[i] = orig
				m.refresh()
				if flipped {
					skipped++
					continue
				}
				num := (up - down) / (2 * eps)
				if math.Abs(num-ana[i]) > 2e-4+3e-2*math.Abs(ana[i]) {
					t.Errorf("param %d (%s): analytic %.6g, numeric %.6g", i, m.paramName(i), ana[i], num)
				}
				if ana[i] != 0 {
					checked++
				}
			}
			if skipped > m.NumParams()/10 {
				t.Fatalf("%d of %d parameters flip a route at ±%v: check is vacuous", skipped, m.NumParams(), eps)
			}
			if checked < m.NumParams()/3 {
				t.Fatalf("only %d of %d gradients non-zero: check is vacuous", checked, m.NumParams())
			}
			t.Logf("%d parameters checked, %d skipped (a route flips)", checked, skipped)
		})
	}
}

// TestRouteReplayMatchesEngineLogprob builds a case where the engine and
// the trainer route one token differently: their weights differ only in
// the router row of expert b (as after an optimiser step, or BF16
// rounding), which sits just above expert c's logit in the trainer and just
// below it in the engine. With the engine's routes replayed the trainer's
// logprob of that token is exactly the engine's (the gates come from the
// router logits of the replayed experts, which the two share); routing
// itself, it is off by the difference between experts b and c.
func TestRouteReplayMatchesEngineLogprob(t *testing.T) {
	c := Config{VocabSize: 9, Window: 2, EmbedDim: 3, Hidden: 5, Layers: 1, MaxSeqLen: 8, Experts: 4, TopK: 2}
	train, err := New(c, 21)
	if err != nil {
		t.Fatal(err)
	}
	for i := train.headW; i < train.headB; i++ {
		train.params[i] *= 30 // logits that differ visibly between experts
	}
	toks := []int32{1, 5, 6} // predict toks[2] from the window ending at toks[1]
	n := c.Window * c.EmbedDim
	x := make([]float32, 0, n)
	for k := range c.Window {
		id := toks[1-k]
		x = append(x, train.params[train.embOff+int(id)*c.EmbedDim:train.embOff+int(id+1)*c.EmbedDim]...)
	}
	var xx float32
	for _, v := range x {
		xx += v * v
	}
	// router rows α_e·x/|x|²: logits α = [3, 1+δ, 1, −1] (a = 0 first, then b
	// = 1 or c = 2) in the trainer, b's row at 1−δ in the engine.
	setRouter := func(m *Model, alpha []float32) {
		Wr := m.params[m.wOff[0]+c.Experts*c.Hidden*n:]
		for e, a := range alpha {
			for i, v := range x {
				Wr[e*n+i] = a * v / xx
			}
		}
		m.refresh()
	}
	const delta = 1e-3
	setRouter(train, []float32{3, 1 + delta, 1, -1})
	engine := train.Clone()
	setRouter(engine, []float32{3, 1 - delta, 1, -1})

	lse := func(l []float32) float64 {
		p := make([]float64, len(l))
		s, _ := softmaxT(l, 1, p)
		return s
	}
	logits := make([]float32, c.VocabSize)
	engRoutes := routesOf(engine, toks)
	engine.NextLogits(toks[:2], logits)
	engineLP := float64(logits[toks[2]]) - lse(logits)
	if got := engRoutes[1*2 : 2*2]; !slices.Equal(got, []int32{0, 2}) {
		t.Fatalf("engine routes %v, constructed to be [0 2]", got)
	}
	if got := routesOf(train, toks)[2:4]; !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("trainer routes %v, constructed to be [0 1]", got)
	}

	tr, err := NewTrainer(train, DefaultTrainerConfig())
	if err != nil {
		t.Fatal(err)
	}
	seq := Sequence{Tokens: toks, LossMask: []uint8{0, 0, 1}, RolloutLogprobs: []float32{0, 0, float32(engineLP)}}
	own, err := tr.Logprobs(Batch{Sequences: []Sequence{seq}})
	if err != nil {
		t.Fatal(err)
	}
	seq.Routes = engRoutes
	rep, err := tr.Logprobs(Batch{Sequences: []Sequence{seq}})
	if err != nil {
		t.Fatal(err)
	}
	if rep[0][2] != float32(engineLP) {
		t.Errorf("replayed trainer logprob %v, engine's %v: want equal", rep[0][2], float32(engineLP))
	}
	if d := math.Abs(float64(own[0][2]) - engineLP); d < 0.05 {
		t.Errorf("without replay the trainer's logprob is only %.3g from the engine's: the case does not flip a route that matters", d)
	}
	// and the step's mismatch statistic sees the same
	seq.Advantage = 1
	st, _, err := tr.lossGrad(Batch{Sequences: []Sequence{seq}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Mismatch > 1e-6 {
		t.Errorf("mismatch with replay %v, want ~0", st.Mismatch)
	}
	t.Logf("|Δlogprob| without replay %.4f, with %.2g", math.Abs(float64(own[0][2])-engineLP), st.Mismatch)
}

func TestRoutesValidation(t *testing.T) {
	m, _ := New(tinyMoEConfig(), 2)
	tr, err := NewTrainer(m, DefaultTrainerConfig())
	if err != nil {
		t.Fatal(err)
	}
	toks := []int32{1, 4, 5, 6}
	good := routesOf(m, toks)
	base := Sequence{Tokens: toks, LossMask: []uint8{0, 0, 1, 1}, RolloutLogprobs: []float32{0, 0, -1, -1}, Advantage: 1}
	rl := m.RoutesLen() // 2 layers × top-2
	for _, tc := range []struct {
		name string
		mod  func([]int32) []int32
		want string
	}{
		{"short", func(r []int32) []int32 { return r[:len(r)-1] }, "route ids for 4 tokens"},
		{"out of range", func(r []int32) []int32 { r[1*rl+1] = 3; return r }, "expert 3 outside [0, 3)"},
		{"negative", func(r []int32) []int32 { r[2*rl+2] = -1; return r }, "expert -1 outside"},
		{"duplicate", func(r []int32) []int32 { r[1*rl+2] = r[1*rl+3]; return r }, "listed twice"},
	} {
		s := base
		s.Routes = tc.mod(slices.Clone(good))
		_, err := tr.Step(Batch{Sequences: []Sequence{s}})
		if !errors.Is(err, ErrBatch) || !errors.Is(err, ErrRoutes) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrBatch+ErrRoutes naming %q", tc.name, err, tc.want)
		}
	}
	// rows no loss reads (row 0 predicts the unmasked token 1; the last
	// row predicts nothing) may hold anything, e.g. padding
	s := base
	s.Routes = slices.Clone(good)
	s.Routes[0], s.Routes[3*rl] = 99, -5
	if _, err := tr.Step(Batch{Sequences: []Sequence{s}}); err != nil {
		t.Errorf("padding in unread rows: %v", err)
	}
	dense, _ := New(tinyConfig(), 2)
	dtr, _ := NewTrainer(dense, DefaultTrainerConfig())
	s.Routes = good
	if _, err := dtr.Step(Batch{Sequences: []Sequence{s}}); !errors.Is(err, ErrRoutes) {
		t.Errorf("routes on a dense model: got %v, want ErrRoutes", err)
	}
}

// TestMoECheckpointRoundTrip: a mixture's serving and trainer checkpoints
// name its tensors as moe.go documents, carry experts/top_k in
// config.json, and load back to the same logits and routes.
func TestMoECheckpointRoundTrip(t *testing.T) {
	m, _ := New(tinyMoEConfig(), 4)
	want := []string{"embed.weight",
		"layers.0.experts.weight", "layers.0.router.weight", "layers.0.experts.bias",
		"layers.1.experts.weight", "layers.1.router.weight", "layers.1.experts.bias",
		"head.weight", "head.bias"}
	if got := m.TensorNames(); !slices.Equal(got, want) {
		t.Fatalf("tensors %v, want %v", got, want)
	}
	dir := t.TempDir()
	if err := m.SaveServing(dir); err != nil {
		t.Fatal(err)
	}
	js, _ := os.ReadFile(filepath.Join(dir, ConfigFileName))
	if !strings.Contains(string(js), `"experts": 3`) || !strings.Contains(string(js), `"top_k": 2`) {
		t.Fatalf("config.json lacks experts/top_k: %s", js)
	}
	got, err := LoadServing(dir)
	if err != nil {
		t.Fatal(err)
	}
	bf := m.Clone()
	bf.RoundBF16()
	toks := []int32{1, 3, 4, 6, 2}
	if a, b := routesOf(got, toks), routesOf(bf, toks); !slices.Equal(a, b) {
		t.Fatalf("routes after load %v, BF16 copy %v", a, b)
	}
	la, lb := make([]float32, 7), make([]float32, 7)
	got.NextLogits(toks, la)
	bf.NextLogits(toks, lb)
	if !slices.Equal(la, lb) {
		t.Fatalf("logits after load %v, BF16 copy %v", la, lb)
	}
	tr, _ := NewTrainer(m, DefaultTrainerConfig())
	if err := tr.SaveTrainer(filepath.Join(dir, "tr")); err != nil {
		t.Fatal(err)
	}
	back, err := LoadTrainer(filepath.Join(dir, "tr"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Model().params, m.params) || back.Model().Config() != m.Config() {
		t.Fatal("trainer checkpoint does not round-trip the mixture")
	}
}
