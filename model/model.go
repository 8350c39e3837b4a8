package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/asyncrl/asyncrl/model/tokenizer"
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("model: invalid config")

// Config describes the network's shape. All fields are required; use
// DefaultConfig and change what you need.
type Config struct {
	// VocabSize is the number of token ids (tokenizer.VocabSize = 98).
	VocabSize int `json:"vocab_size"`
	// Window is how many preceding tokens the model sees when predicting the
	// next one. Older tokens are invisible; positions before the sequence
	// start read as PAD.
	Window int `json:"window"`
	// EmbedDim is the width of each token embedding.
	EmbedDim int `json:"embed_dim"`
	// Hidden is the width of every hidden layer.
	Hidden int `json:"hidden"`
	// Layers is the number of tanh hidden layers (≥ 1).
	Layers int `json:"layers"`
	// MaxSeqLen is the longest sequence (prompt + generation) the model
	// accepts; engines use it as max_model_len.
	MaxSeqLen int `json:"max_seq_len"`
	// Experts, when > 0, makes every hidden layer a mixture of Experts
	// tanh MLPs (Mixtral style, moe.go): a bias-free linear router, the
	// TopK experts with the largest router logits (ties to the lower id),
	// their outputs summed with the softmax of their router logits. 0 (the
	// default) is the dense model, unchanged; its config.json omits both.
	Experts int `json:"experts,omitempty"`
	// TopK is how many experts each token uses per layer (1 ≤ TopK ≤
	// Experts); 0 when Experts is 0.
	TopK int `json:"top_k,omitempty"`
}

// DefaultConfig is sized so the single-turn tasks learn within a minute on
// two CPU cores (see model/syncloop): one hidden layer learned the
// reverse task faster under RL than two (measured, same budget), and
// ~47k parameters keep a step of 64 episodes around 30 ms.
func DefaultConfig() Config {
	return Config{
		VocabSize: int(tokenizer.VocabSize),
		Window:    16,
		EmbedDim:  16,
		Hidden:    128,
		Layers:    1,
		MaxSeqLen: 256,
	}
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	check := func(name string, v, lo, hi int) error {
		if v < lo || v > hi {
			return fmt.Errorf("%w: %s must be in [%d, %d], got %d", ErrConfig, name, lo, hi, v)
		}
		return nil
	}
	return errors.Join(
		check("vocab_size", c.VocabSize, 3, 1<<20),
		check("window", c.Window, 1, 4096),
		check("embed_dim", c.EmbedDim, 1, 4096),
		check("hidden", c.Hidden, 1, 16384),
		check("layers", c.Layers, 1, 64),
		check("max_seq_len", c.MaxSeqLen, 1, 1<<24),
		c.validateMoE(),
	)
}

// tensor is one named parameter: a view into Model.params.
type tensor struct {
	name  string
	shape []int
	off   int
	n     int
}

// Model is the policy network. Its parameters live in one flat float32
// slice so optimisers, clipping and checkpoints treat them uniformly.
type Model struct {
	cfg     Config
	params  []float32
	tensors []tensor // in a fixed order: embed, layers.i.{weight,bias}, head.{weight,bias}

	// offsets into params
	embOff int
	wOff   []int // layer weights [Hidden × in]
	bOff   []int
	headW  int // [VocabSize × Hidden]
	headB  int
	inDim  []int
	wsPool sync.Pool

	// tab[(k·VocabSize+v)·Hidden : …+Hidden] = W₀[:, slot k] · embed[v]:
	// the first layer's contribution of token v in window slot k. With it
	// the first layer costs Window vector adds instead of a
	// Hidden × Window·EmbedDim matrix product. Derived from params; refresh
	// rebuilds it after every weight change, and training and serving both
	// use it, so their logits stay bit-identical for equal weights.
	tab []float32
}

// layout builds the tensor table for cfg.
func layout(cfg Config) (ts []tensor, total int) {
	add := func(name string, shape ...int) {
		n := 1
		for _, s := range shape {
			n *= s
		}
		ts = append(ts, tensor{name: name, shape: shape, off: total, n: n})
		total += n
	}
	add("embed.weight", cfg.VocabSize, cfg.EmbedDim)
	in := cfg.Window * cfg.EmbedDim
	for l := 0; l < cfg.Layers; l++ {
		if cfg.Experts > 0 {
			// experts.weight and router.weight adjacent: one
			// [Experts·Hidden + Experts, in] matrix (layerRows).
			add(fmt.Sprintf("layers.%d.experts.weight", l), cfg.Experts, cfg.Hidden, in)
			add(fmt.Sprintf("layers.%d.router.weight", l), cfg.Experts, in)
			add(fmt.Sprintf("layers.%d.experts.bias", l), cfg.Experts, cfg.Hidden)
			in = cfg.Hidden
			continue
		}
		add(fmt.Sprintf("layers.%d.weight", l), cfg.Hidden, in)
		add(fmt.Sprintf("layers.%d.bias", l), cfg.Hidden)
		in = cfg.Hidden
	}
	add("head.weight", cfg.VocabSize, cfg.Hidden)
	add("head.bias", cfg.VocabSize)
	return ts, total
}

// newZero allocates a model with zero weights.
func newZero(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ts, total := layout(cfg)
	m := &Model{cfg: cfg, params: make([]float32, total), tensors: ts}
	m.embOff = ts[0].off
	in := cfg.Window * cfg.EmbedDim
	for l := 0; l < cfg.Layers; l++ {
		if cfg.Experts > 0 {
			m.wOff = append(m.wOff, ts[1+3*l].off)
			m.bOff = append(m.bOff, ts[3+3*l].off)
		} else {
			m.wOff = append(m.wOff, ts[1+2*l].off)
			m.bOff = append(m.bOff, ts[2+2*l].off)
		}
		m.inDim = append(m.inDim, in)
		in = cfg.Hidden
	}
	m.headW = ts[len(ts)-2].off
	m.headB = ts[len(ts)-1].off
	m.wsPool.New = func() any { return m.NewWorkspace() }
	return m, nil
}

// New returns a model with deterministic initial weights for seed:
// embeddings N(0,1), hidden layers N(0, 1/fan_in) (tanh-friendly Xavier),
// a small head N(0, 0.01/Hidden) so the initial policy is near uniform, and
// zero biases.
func New(cfg Config, seed uint64) (*Model, error) {
	m, err := newZero(cfg)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	fill := func(off, n int, std float64) {
		for i := off; i < off+n; i++ {
			m.params[i] = float32(rng.NormFloat64() * std)
		}
	}
	fill(m.embOff, cfg.VocabSize*cfg.EmbedDim, 1)
	for l := range m.wOff {
		// MoE: every expert and the router N(0, 1/fan_in).
		fill(m.wOff[l], cfg.layerRows()*m.inDim[l], 1/math.Sqrt(float64(m.inDim[l])))
	}
	fill(m.headW, cfg.VocabSize*cfg.Hidden, 0.1/math.Sqrt(float64(cfg.Hidden)))
	m.refresh()
	return m, nil
}

// Config returns the model's shape.
func (m *Model) Config() Config { return m.cfg }

// VocabSize is the number of logits NextLogits writes.
func (m *Model) VocabSize() int { return m.cfg.VocabSize }

// MaxSeqLen is the longest sequence the model accepts.
func (m *Model) MaxSeqLen() int { return m.cfg.MaxSeqLen }

// NumParams is the number of scalar parameters.
func (m *Model) NumParams() int { return len(m.params) }

// Clone returns a deep copy (e.g. a frozen copy to serve while training).
func (m *Model) Clone() *Model {
	c, _ := newZero(m.cfg)
	copy(c.params, m.params)
	c.tab = append(c.tab[:0], m.tab...)
	return c
}

// CopyFrom overwrites m's weights with src's; shapes must match. It is how a
// serving copy is refreshed without reallocating. Not safe while m serves.
func (m *Model) CopyFrom(src *Model) error {
	if m.cfg != src.cfg {
		return fmt.Errorf("%w: CopyFrom between different shapes", ErrConfig)
	}
	copy(m.params, src.params)
	m.tab = append(m.tab[:0], src.tab...)
	return nil
}

// RoundBF16 rounds every weight to the nearest bfloat16 (ties to even), the
// precision an engine serves. It is what LoadServing yields from a BF16 file.
func (m *Model) RoundBF16() {
	for i, v := range m.params {
		m.params[i] = roundBF16(v)
	}
	m.refresh()
}

// refresh rebuilds the derived first-layer table from the weights. Every
// code path that changes params must call it.
func (m *Model) refresh() {
	c := m.cfg
	H, D, V := c.layerRows(), c.EmbedDim, c.VocabSize // H: the rows of layer 0's matrix
	n := m.inDim[0]
	if len(m.tab) != c.Window*V*H {
		m.tab = make([]float32, c.Window*V*H)
	}
	W := m.params[m.wOff[0] : m.wOff[0]+H*n]
	for k := 0; k < c.Window; k++ {
		for v := 0; v < V; v++ {
			e := m.params[m.embOff+v*D : m.embOff+(v+1)*D]
			row := m.tab[(k*V+v)*H : (k*V+v+1)*H]
			for j := range row {
				row[j] = dot(W[j*n+k*D:j*n+(k+1)*D], e)
			}
		}
	}
}

func roundBF16(f float32) float32 {
	b := math.Float32bits(f)
	if b&0x7f800000 == 0x7f800000 { // Inf or NaN: keep (quiet NaN)
		if b&0x007fffff != 0 {
			b |= 0x00400000
		}
		return math.Float32frombits(b &^ 0xffff)
	}
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}

// Workspace holds the activations of one forward/backward pass. One per
// goroutine; NextLogits takes one from an internal pool.
type Workspace struct {
	ctx   []int32     // window token ids, slot 0 = most recent
	x     []float32   // concatenated embeddings [Window×EmbedDim]
	h     [][]float32 // post-tanh activations per layer
	dh    []float32   // gradient w.r.t. the current layer output
	dx    []float32   // gradient w.r.t. the current layer input
	Logit []float32   // logits of the last forward pass
	dlog  []float32   // trainer scratch for d loss / d logits
	moe   *moeWorkspace
}

// NewWorkspace allocates buffers for this model's shape.
func (m *Model) NewWorkspace() *Workspace {
	c := m.cfg
	ws := &Workspace{
		ctx:   make([]int32, c.Window),
		x:     make([]float32, c.Window*c.EmbedDim),
		dh:    make([]float32, c.Hidden),
		dx:    make([]float32, max(c.Window*c.EmbedDim, c.Hidden)),
		Logit: make([]float32, c.VocabSize),
	}
	for range c.Layers {
		ws.h = append(ws.h, make([]float32, c.Hidden))
	}
	if c.Experts > 0 {
		ws.moe = newMoEWorkspace(c)
	}
	return ws
}

// NextLogits writes into out (len ≥ VocabSize) the logits of the token that
// follows tokens. Only the last Window tokens matter. Safe for concurrent use
// on a model nobody mutates; no allocation in steady state.
func (m *Model) NextLogits(tokens []int32, out []float32) {
	ws := m.wsPool.Get().(*Workspace)
	m.forward(tokens, ws)
	copy(out[:m.cfg.VocabSize], ws.Logit)
	m.wsPool.Put(ws)
}

// Forward computes the logits following tokens into ws.Logit and keeps the
// activations in ws for Backward.
func (m *Model) Forward(tokens []int32, ws *Workspace) []float32 {
	m.forward(tokens, ws)
	return ws.Logit
}

func (m *Model) forward(tokens []int32, ws *Workspace) {
	m.forwardReplay(tokens, nil, ws)
}

// forwardReplay is forward; for a mixture of experts a non-nil routes row
// ([Layers·TopK], checked by CheckRoutes) replaces the router's choice.
func (m *Model) forwardReplay(tokens, routes []int32, ws *Workspace) {
	c := m.cfg
	D := c.EmbedDim
	for k := 0; k < c.Window; k++ {
		id := tokenizer.PAD
		if i := len(tokens) - 1 - k; i >= 0 {
			id = tokens[i]
			if id < 0 || int(id) >= c.VocabSize {
				id = tokenizer.PAD
			}
		}
		ws.ctx[k] = id
		copy(ws.x[k*D:(k+1)*D], m.params[m.embOff+int(id)*D:m.embOff+int(id+1)*D])
	}
	if ws.moe != nil {
		m.forwardMoE(routes, ws)
		return
	}
	H, V := c.Hidden, c.VocabSize
	// Layer 0 through the table: bias + Σ_k tab[k][ctx_k], slots in order.
	h := ws.h[0]
	copy(h, m.params[m.bOff[0]:m.bOff[0]+H])
	for k, id := range ws.ctx {
		row := m.tab[(k*V+int(id))*H : (k*V+int(id)+1)*H]
		for j, v := range row {
			h[j] += v
		}
	}
	for j, v := range h {
		h[j] = float32(math.Tanh(float64(v)))
	}
	in := h
	for l := 1; l < c.Layers; l++ {
		W := m.params[m.wOff[l] : m.wOff[l]+c.Hidden*m.inDim[l]]
		b := m.params[m.bOff[l] : m.bOff[l]+c.Hidden]
		h := ws.h[l]
		n := m.inDim[l]
		for j := range h {
			h[j] = float32(math.Tanh(float64(b[j] + dot(W[j*n:(j+1)*n], in))))
		}
		in = h
	}
	W := m.params[m.headW : m.headW+c.VocabSize*c.Hidden]
	b := m.params[m.headB : m.headB+c.VocabSize]
	for v := range ws.Logit {
		ws.Logit[v] = b[v] + dot(W[v*c.Hidden:(v+1)*c.Hidden], in)
	}
}

// dot is a float32 dot product with four independent accumulators (the
// order is fixed, so results are reproducible).
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// Grad accumulates a loss gradient for one model shape. The first layer's
// gradient is gathered per (window slot, token) — Hidden numbers per trained
// token instead of Hidden × Window·EmbedDim — and folded into weight and
// embedding gradients once by Flatten.
type Grad struct {
	flat    []float64 // same layout as the parameters
	tab     []float64 // d loss / d tab, like Model.tab
	touched []bool    // which (slot, token) rows of tab are non-zero
}

// NewGrad returns a zero gradient for m's shape.
func (m *Model) NewGrad() *Grad {
	c := m.cfg
	return &Grad{
		flat:    make([]float64, len(m.params)),
		tab:     make([]float64, c.Window*c.VocabSize*c.layerRows()),
		touched: make([]bool, c.Window*c.VocabSize),
	}
}

// Reset zeroes the gradient.
func (g *Grad) Reset() {
	clear(g.flat)
	clear(g.tab)
	clear(g.touched)
}

// Flatten folds the per-slot first-layer gradient into the weight and
// embedding gradients (in a fixed order) and returns the gradient in the
// parameters' layout. The slice aliases g; call Reset before reuse.
func (m *Model) Flatten(g *Grad) []float64 {
	c := m.cfg
	H, D, V := c.layerRows(), c.EmbedDim, c.VocabSize // H: the rows of layer 0's matrix
	n := m.inDim[0]
	W := m.params[m.wOff[0] : m.wOff[0]+H*n]
	gW := g.flat[m.wOff[0] : m.wOff[0]+H*n]
	for k := 0; k < c.Window; k++ {
		for v := 0; v < V; v++ {
			r := k*V + v
			if !g.touched[r] {
				continue
			}
			g.touched[r] = false
			row := g.tab[r*H : (r+1)*H]
			e := m.params[m.embOff+v*D : m.embOff+(v+1)*D]
			ge := g.flat[m.embOff+v*D : m.embOff+(v+1)*D]
			for j, gj := range row {
				if gj == 0 {
					continue
				}
				wj := W[j*n+k*D : j*n+(k+1)*D]
				gwj := gW[j*n+k*D : j*n+(k+1)*D]
				for d := 0; d < D; d++ {
					gwj[d] += gj * float64(e[d])
					ge[d] += gj * float64(wj[d])
				}
				row[j] = 0
			}
		}
	}
	return g.flat
}

// Backward accumulates into g the gradient of a scalar loss whose
// derivative w.r.t. the logits of the last Forward(ws) is dlogits. ws must
// hold that forward pass. Call Flatten to read the result.
func (m *Model) Backward(ws *Workspace, dlogits []float32, g *Grad) {
	c := m.cfg
	H := c.Hidden
	grad := g.flat
	top := ws.h[c.Layers-1]
	// head
	W := m.params[m.headW : m.headW+c.VocabSize*H]
	dh := ws.dh[:H]
	clear(dh)
	for v, gv := range dlogits[:c.VocabSize] {
		if gv == 0 {
			continue
		}
		grad[m.headB+v] += float64(gv)
		gw := grad[m.headW+v*H : m.headW+(v+1)*H]
		for j, a := range top {
			gw[j] += float64(gv * a)
		}
		axpy(gv, W[v*H:(v+1)*H], dh)
	}
	if ws.moe != nil {
		m.backwardMoE(ws, dh, g)
		return
	}
	for l := c.Layers - 1; l >= 1; l-- {
		n := m.inDim[l]
		in := ws.h[l-1]
		h := ws.h[l]
		Wl := m.params[m.wOff[l] : m.wOff[l]+H*n]
		dx := ws.dx[:n]
		clear(dx)
		for j := 0; j < H; j++ {
			dz := dh[j] * (1 - h[j]*h[j])
			if dz == 0 {
				continue
			}
			grad[m.bOff[l]+j] += float64(dz)
			gw := grad[m.wOff[l]+j*n : m.wOff[l]+(j+1)*n]
			for i, a := range in {
				gw[i] += float64(dz * a)
			}
			axpy(dz, Wl[j*n:(j+1)*n], dx)
		}
		copy(dh, dx[:H])
	}
	// Layer 0: d loss / d tab[k][ctx_k] = dz for every slot k.
	h := ws.h[0]
	dz := ws.dx[:H]
	for j := range dz {
		dz[j] = dh[j] * (1 - h[j]*h[j])
		grad[m.bOff[0]+j] += float64(dz[j])
	}
	V := c.VocabSize
	for k, id := range ws.ctx {
		r := k*V + int(id)
		g.touched[r] = true
		row := g.tab[r*H : (r+1)*H]
		for j, d := range dz {
			row[j] += float64(d)
		}
	}
}

// axpy: y += a·x.
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += a * v
	}
}
