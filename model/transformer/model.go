package transformer

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asyncrl/asyncrl/engine"
)

// Model is a loaded (or initialised) checkpoint of one of the supported
// architectures, computing in float32. It is immutable once built: every
// method is safe for concurrent use except that Forward must not be
// called concurrently on the same caches.
type Model struct {
	cfg   Config
	gen   GenerationConfig
	w     *weights
	rope  *rope
	scale float32 // attention score scale
	eos   []int32
	// routeK is top-k of the expert layers (0 for a dense model); routes
	// cover every decoder layer (doc.go, "Routes").
	routeK int
	pool   sync.Pool     // *workspace
	stamp  atomic.Uint64 // marks the caches of one forward (duplicate check)
}

var (
	_ engine.Model       = (*Model)(nil)
	_ engine.RoutesModel = (*Model)(nil)
	_ engine.BatchModel  = (*Model)(nil)
	_ engine.EOSModel    = (*Model)(nil)
)

// newModel wraps weights w of c, packing every Linear's transpose.
func newModel(c *Config, gen GenerationConfig, w *weights) *Model {
	w.transpose()
	return wrapModel(c, gen, w)
}

// wrapModel wraps weights w of c whose transposes are already packed.
func wrapModel(c *Config, gen GenerationConfig, w *weights) *Model {
	m := &Model{cfg: *c, gen: gen, w: w, rope: newRope(c), scale: softmaxScale(c)}
	if c.MoE() {
		m.routeK = c.NumExpertsPerTok
	}
	ids := gen.EOSTokenIDs
	if len(ids) == 0 {
		ids = c.EOSTokenIDs
	}
	for _, id := range ids {
		if id >= 0 && id < c.VocabSize {
			m.eos = append(m.eos, int32(id))
		}
	}
	return m
}

// Config returns the model's configuration.
func (m *Model) Config() Config { return m.cfg }

// GenerationConfig returns generation_config.json's token ids.
func (m *Model) GenerationConfig() GenerationConfig { return m.gen }

// NumParams counts the parameters (a tied lm_head once).
func (m *Model) NumParams() int64 { return m.w.numParams() }

// TensorNames lists the checkpoint's tensor names in order.
func (m *Model) TensorNames() []string {
	out := make([]string, len(m.w.tensors))
	for i, t := range m.w.tensors {
		out[i] = t.name
	}
	return out
}

// VocabSize implements engine.Model.
func (m *Model) VocabSize() int { return m.cfg.VocabSize }

// MaxSeqLen implements engine.Model: max_position_embeddings.
func (m *Model) MaxSeqLen() int { return m.cfg.MaxPositionEmbeddings }

// EOSIDs implements engine.EOSModel: generation_config.json's
// eos_token_id, else config.json's.
func (m *Model) EOSIDs() []int32 { return m.eos }

// RouteShape implements engine.RoutesModel: rows cover every decoder
// layer (dense layers' entries are 0), top_k experts each, as vLLM's
// routed-experts capturer lays them out (doc.go). A dense model answers
// zeros (no routes).
func (m *Model) RouteShape() (layers, topK, numExperts int) {
	if m.routeK == 0 {
		return 0, 0, 0
	}
	return m.cfg.NumHiddenLayers, m.routeK, m.cfg.NumExperts
}

// NextLogits implements engine.Model: a prefill of tokens from scratch.
func (m *Model) NextLogits(tokens []int32, out []float32) {
	s := m.newSeq(len(tokens))
	ws := m.getWS()
	defer m.pool.Put(ws)
	if err := m.forward(ws, []*Seq{s}, [][]int32{tokens}, [][]float32{out}); err != nil {
		// engine.Model has no error: the engine validates token ids and
		// lengths before it asks; anything else is a programming error.
		panic(fmt.Sprintf("transformer: NextLogits: %v", err))
	}
}

// Routes implements engine.RoutesModel: the expert ids chosen at positions
// [from, len(tokens)) in a prefill of tokens.
func (m *Model) Routes(tokens []int32, from int) []int32 {
	if m.routeK == 0 || from >= len(tokens) {
		return nil
	}
	s := m.newSeq(len(tokens))
	ws := m.getWS()
	defer m.pool.Put(ws)
	if err := m.forward(ws, []*Seq{s}, [][]int32{tokens}, nil); err != nil {
		panic(fmt.Sprintf("transformer: Routes: %v", err))
	}
	return s.Routes(from)
}

// NewSeq implements engine.BatchModel.
func (m *Model) NewSeq() engine.SeqCache { return m.newSeq(0) }

// Forward implements engine.BatchModel.
func (m *Model) Forward(seqs []engine.SeqCache, tokens [][]int32, logits [][]float32) error {
	ws := m.getWS()
	defer m.pool.Put(ws)
	ws.seqs = ws.seqs[:0]
	for i, sc := range seqs {
		s, ok := sc.(*Seq)
		if !ok || s.m != m {
			return fmt.Errorf("transformer: sequence %d's cache was not built by this model", i)
		}
		ws.seqs = append(ws.seqs, s)
	}
	return m.forward(ws, ws.seqs, tokens, logits)
}

// ForwardSeqs is Forward over this package's caches (no interface
// conversion), for callers that hold *Seq.
func (m *Model) ForwardSeqs(seqs []*Seq, tokens [][]int32, logits [][]float32) error {
	ws := m.getWS()
	defer m.pool.Put(ws)
	return m.forward(ws, seqs, tokens, logits)
}

// NewCache returns an empty cache (NewSeq without the interface).
func (m *Model) NewCache() *Seq { return m.newSeq(0) }
