package model

import (
	"errors"
	"fmt"
	"math"
)

// Mixture of experts (Config.Experts > 0). Every hidden layer l holds
// Experts tanh MLPs and a bias-free linear router over the layer's input x:
//
//	r = R·x                        router logits [Experts]
//	S = top-k(r)                   TopK ids, largest first, ties to the lower id
//	g_s = exp(r_s) / Σ_{t∈S} exp(r_t)   (Mixtral: softmax, top-k, renormalise)
//	h = Σ_{s∈S} g_s · tanh(W_s·x + b_s)  summed in S's order
//
// The ids S of every layer are the token's routes, [Layers·TopK] (vLLM's
// routed_experts row for one position). Route replay (R3) hands the trainer
// the engine's S: the experts are not re-chosen, but the gates are still the
// softmax of the trainer's own router logits over the replayed set, so the
// router keeps its gradient.
//
// Tensors per layer (checkpoint names): layers.<l>.experts.weight
// [Experts, Hidden, in], layers.<l>.router.weight [Experts, in],
// layers.<l>.experts.bias [Experts, Hidden]. The first two are adjacent in
// the flat parameters, one [Experts·Hidden + Experts, in] matrix, so layer 0
// goes through the same per-(slot, token) table as the dense model, a row
// holding every expert's pre-activation and the router logits.

// ErrRoutes is wrapped by errors about a routes row (CheckRoutes, and the
// trainer's checks of Sequence.Routes, which also wrap ErrBatch).
var ErrRoutes = errors.New("model: invalid routes")

// maxExperts bounds Config.Experts (vLLM's int32 routes hold any count;
// this model stays tiny).
const maxExperts = 1024

func (c Config) validateMoE() error {
	switch {
	case c.Experts == 0 && c.TopK == 0:
		return nil
	case c.Experts < 0 || c.Experts > maxExperts:
		return fmt.Errorf("%w: experts must be in [0, %d] (0 = dense), got %d", ErrConfig, maxExperts, c.Experts)
	case c.Experts == 0:
		return fmt.Errorf("%w: top_k must be 0 for a dense model (experts 0), got %d", ErrConfig, c.TopK)
	case c.TopK < 1 || c.TopK > c.Experts:
		return fmt.Errorf("%w: top_k must be in [1, experts=%d], got %d", ErrConfig, c.Experts, c.TopK)
	}
	return nil
}

// layerRows is the number of rows of a hidden layer's weight matrix:
// Hidden, or every expert's Hidden plus the router's Experts.
func (c Config) layerRows() int {
	if c.Experts > 0 {
		return c.Experts*c.Hidden + c.Experts
	}
	return c.Hidden
}

// RouteShape reports the routes a forward pass makes: layers × topK ids in
// [0, experts). All zero for a dense model.
func (m *Model) RouteShape() (layers, topK, experts int) {
	if m.cfg.Experts == 0 {
		return 0, 0, 0
	}
	return m.cfg.Layers, m.cfg.TopK, m.cfg.Experts
}

// RoutesLen is Layers·TopK, the length of one position's routes row (0 for
// a dense model).
func (m *Model) RoutesLen() int {
	if m.cfg.Experts == 0 {
		return 0
	}
	return m.cfg.Layers * m.cfg.TopK
}

// CheckRoutes validates one position's routes row: Layers·TopK ids, each in
// [0, Experts), distinct within a layer.
func (m *Model) CheckRoutes(routes []int32) error {
	c := m.cfg
	if c.Experts == 0 {
		return fmt.Errorf("%w: the model is dense (experts 0)", ErrRoutes)
	}
	if len(routes) != c.Layers*c.TopK {
		return fmt.Errorf("%w: %d ids, want layers×top_k = %d×%d", ErrRoutes, len(routes), c.Layers, c.TopK)
	}
	for l := range c.Layers {
		row := routes[l*c.TopK : (l+1)*c.TopK]
		for s, e := range row {
			if e < 0 || int(e) >= c.Experts {
				return fmt.Errorf("%w: layer %d slot %d: expert %d outside [0, %d)", ErrRoutes, l, s, e, c.Experts)
			}
			for _, prev := range row[:s] {
				if prev == e {
					return fmt.Errorf("%w: layer %d: expert %d listed twice", ErrRoutes, l, e)
				}
			}
		}
	}
	return nil
}

// ForwardReplay is Forward with the experts of routes (one position's row,
// [Layers·TopK], valid by CheckRoutes) instead of the router's own choice;
// nil routes is Forward. The gates still come from the router logits (over
// the given experts), and Backward differentiates that.
func (m *Model) ForwardReplay(tokens, routes []int32, ws *Workspace) []float32 {
	m.forwardReplay(tokens, routes, ws)
	return ws.Logit
}

// Routes returns the routes of the workspace's last forward pass
// ([Layers·TopK], largest router logit first within a layer; replayed ones
// as given), nil for a dense model. The slice is reused by the next pass.
func (ws *Workspace) Routes() []int32 {
	if ws.moe == nil {
		return nil
	}
	return ws.moe.sel
}

// NextLogitsRoutes is NextLogits that also writes the position's routes
// into routes (len ≥ RoutesLen()): what an engine reports as the
// routed_experts row of the last token of tokens.
func (m *Model) NextLogitsRoutes(tokens []int32, out []float32, routes []int32) {
	ws := m.wsPool.Get().(*Workspace)
	m.forward(tokens, ws)
	copy(out[:m.cfg.VocabSize], ws.Logit)
	copy(routes, ws.Routes())
	m.wsPool.Put(ws)
}

// moeWorkspace holds a mixture's activations of one forward pass.
type moeWorkspace struct {
	rlog  []float32 // router logits [Layers·Experts]
	sel   []int32   // chosen experts [Layers·TopK]
	gate  []float32 // their gates [Layers·TopK]
	act   []float32 // their tanh outputs [Layers·TopK·Hidden]
	order []int32   // top-k scratch [Experts]
	dz    []float32 // backward scratch [TopK·Hidden]
	dr    []float32 // backward scratch [TopK]
}

func newMoEWorkspace(c Config) *moeWorkspace {
	LK := c.Layers * c.TopK
	return &moeWorkspace{
		rlog:  make([]float32, c.Layers*c.Experts),
		sel:   make([]int32, LK),
		gate:  make([]float32, LK),
		act:   make([]float32, LK*c.Hidden),
		order: make([]int32, c.Experts),
		dz:    make([]float32, c.TopK*c.Hidden),
		dr:    make([]float32, c.TopK),
	}
}

// topK writes into sel the k largest logits' ids, largest first, ties to
// the lower id (deterministic: a plain selection, no sort instability).
func topK(r []float32, sel []int32) {
	for s := range sel {
		best := int32(-1)
		for e, v := range r {
			taken := false
			for _, p := range sel[:s] {
				if p == int32(e) {
					taken = true
					break
				}
			}
			if !taken && (best < 0 || v > r[best]) {
				best = int32(e)
			}
		}
		sel[s] = best
	}
}

// gates writes softmax(r[sel]) into g (float64 inside, like the trainer's
// softmax).
func gates(r []float32, sel []int32, g []float32) {
	mx := math.Inf(-1)
	for _, e := range sel {
		mx = max(mx, float64(r[e]))
	}
	var sum float64
	for _, e := range sel {
		sum += math.Exp(float64(r[e]) - mx)
	}
	for s, e := range sel {
		g[s] = float32(math.Exp(float64(r[e])-mx) / sum)
	}
}

// forwardMoE runs the mixture's layers and the head on ws.ctx (set by
// forwardReplay); routes, when non-nil, replaces every layer's choice.
func (m *Model) forwardMoE(routes []int32, ws *Workspace) {
	c := m.cfg
	E, K, H, V := c.Experts, c.TopK, c.Hidden, c.VocabSize
	R0 := c.layerRows()
	mw := ws.moe
	var in []float32
	for l := range c.Layers {
		r := mw.rlog[l*E : (l+1)*E]
		sel := mw.sel[l*K : (l+1)*K]
		g := mw.gate[l*K : (l+1)*K]
		n := m.inDim[l]
		W := m.params[m.wOff[l] : m.wOff[l]+R0*n] // layer 0 goes through the table instead
		// router logits
		if l == 0 {
			clear(r)
			for k, id := range ws.ctx {
				row := m.tab[(k*V+int(id))*R0+E*H : (k*V+int(id)+1)*R0]
				for e, v := range row {
					r[e] += v
				}
			}
		} else {
			for e := range r {
				r[e] = dot(W[(E*H+e)*n:(E*H+e+1)*n], in)
			}
		}
		if routes != nil {
			copy(sel, routes[l*K:(l+1)*K])
		} else {
			topK(r, sel)
		}
		gates(r, sel, g)
		h := ws.h[l]
		clear(h)
		for s, e := range sel {
			a := mw.act[(l*K+s)*H : (l*K+s+1)*H]
			b := m.params[m.bOff[l]+int(e)*H : m.bOff[l]+int(e+1)*H]
			if l == 0 {
				copy(a, b)
				for k, id := range ws.ctx {
					row := m.tab[(k*V+int(id))*R0+int(e)*H : (k*V+int(id))*R0+int(e+1)*H]
					for j, v := range row {
						a[j] += v
					}
				}
				for j, v := range a {
					a[j] = float32(math.Tanh(float64(v)))
				}
			} else {
				We := W[int(e)*H*n : int(e+1)*H*n]
				for j := range a {
					a[j] = float32(math.Tanh(float64(b[j] + dot(We[j*n:(j+1)*n], in))))
				}
			}
			axpy(g[s], a, h)
		}
		in = h
	}
	Wh := m.params[m.headW : m.headW+V*H]
	bh := m.params[m.headB : m.headB+V]
	for v := range ws.Logit {
		ws.Logit[v] = bh[v] + dot(Wh[v*H:(v+1)*H], in)
	}
}

// backwardMoE continues Backward below the head: dh is d loss / d h of the
// last layer (overwritten).
func (m *Model) backwardMoE(ws *Workspace, dh []float32, g *Grad) {
	c := m.cfg
	E, K, H, V := c.Experts, c.TopK, c.Hidden, c.VocabSize
	R0 := c.layerRows()
	mw := ws.moe
	grad := g.flat
	for l := c.Layers - 1; l >= 0; l-- {
		sel := mw.sel[l*K : (l+1)*K]
		gt := mw.gate[l*K : (l+1)*K]
		// d loss/d g_s = dh·a_s; through the softmax over the selected
		// logits: d loss/d r_s = g_s (dg_s − Σ_t g_t dg_t).
		var mean float64
		for s := range sel {
			a := mw.act[(l*K+s)*H : (l*K+s+1)*H]
			dg := float64(dot(dh, a))
			mw.dr[s] = float32(dg)
			mean += float64(gt[s]) * dg
		}
		for s := range sel {
			mw.dr[s] = float32(float64(gt[s]) * (float64(mw.dr[s]) - mean))
			a := mw.act[(l*K+s)*H : (l*K+s+1)*H]
			dz := mw.dz[s*H : (s+1)*H]
			for j, aj := range a {
				dz[j] = gt[s] * dh[j] * (1 - aj*aj)
			}
		}
		if l == 0 {
			for s, e := range sel {
				gb := grad[m.bOff[0]+int(e)*H : m.bOff[0]+int(e+1)*H]
				for j, d := range mw.dz[s*H : (s+1)*H] {
					gb[j] += float64(d)
				}
			}
			for k, id := range ws.ctx {
				r := k*V + int(id)
				g.touched[r] = true
				row := g.tab[r*R0 : (r+1)*R0]
				for s, e := range sel {
					re := row[int(e)*H : int(e+1)*H]
					for j, d := range mw.dz[s*H : (s+1)*H] {
						re[j] += float64(d)
					}
					row[E*H+int(e)] += float64(mw.dr[s])
				}
			}
			return
		}
		n := m.inDim[l]
		in := ws.h[l-1]
		W := m.params[m.wOff[l] : m.wOff[l]+(E*H+E)*n]
		dx := ws.dx[:n]
		clear(dx)
		for s, e := range sel {
			for j, d := range mw.dz[s*H : (s+1)*H] {
				if d == 0 {
					continue
				}
				grad[m.bOff[l]+int(e)*H+j] += float64(d)
				row := int(e)*H + j
				gw := grad[m.wOff[l]+row*n : m.wOff[l]+(row+1)*n]
				for i, a := range in {
					gw[i] += float64(d * a)
				}
				axpy(d, W[row*n:(row+1)*n], dx)
			}
			if d := mw.dr[s]; d != 0 {
				row := E*H + int(e)
				gw := grad[m.wOff[l]+row*n : m.wOff[l]+(row+1)*n]
				for i, a := range in {
					gw[i] += float64(d * a)
				}
				axpy(d, W[row*n:(row+1)*n], dx)
			}
		}
		copy(dh, dx[:H])
	}
}

// checkRoutes validates s.Routes against the model: the shape, and every
// row the loss reads (CheckRoutes).
func (t *Trainer) checkRoutes(s *Sequence) error {
	if s.Routes == nil {
		return nil
	}
	m := t.model
	L, K, E := m.RouteShape()
	if E == 0 {
		return fmt.Errorf("%w: routes given but the model is dense (experts 0)", ErrRoutes)
	}
	rl := L * K
	if len(s.Routes) != len(s.Tokens)*rl {
		return fmt.Errorf("%w: %d route ids for %d tokens, want tokens×layers×top_k = %d×%d×%d", ErrRoutes, len(s.Routes), len(s.Tokens), len(s.Tokens), L, K)
	}
	for i, mk := range s.LossMask {
		if mk == 0 || i == 0 {
			continue
		}
		if err := m.CheckRoutes(s.replayRow(i, rl)); err != nil {
			return fmt.Errorf("row %d (predicts token %d): %w", i-1, i, err)
		}
	}
	return nil
}

// Routes returns the routes of positions [from, len(tokens)):
// C-order [len(tokens)−from, Layers, TopK], row i the routing of the forward
// pass whose window ends at tokens[from+i] (the pass that predicts
// tokens[from+i+1]), as vLLM's routed_experts. nil for a dense model or an
// empty range. With RouteShape it is engine.RoutesModel; safe for
// concurrent use, as NextLogits is.
func (m *Model) Routes(tokens []int32, from int) []int32 {
	rl := m.RoutesLen()
	from = max(from, 0)
	if rl == 0 || from >= len(tokens) {
		return nil
	}
	out := make([]int32, 0, (len(tokens)-from)*rl)
	ws := m.wsPool.Get().(*Workspace)
	for p := from; p < len(tokens); p++ {
		m.forward(tokens[:p+1], ws)
		out = append(out, ws.Routes()...)
	}
	m.wsPool.Put(ws)
	return out
}
