package transformer

// Seq is one sequence's KV cache (engine.SeqCache): per layer the keys and
// values of every position so far, laid out [kv head][capacity][dim] so
// a head's keys are contiguous for the attention's dot products, and the
// expert ids each MoE layer chose at each position.
type Seq struct {
	m      *Model
	n      int         // positions held
	cap    int         // positions allocated
	k, v   [][]float32 // per layer [kvHeads·cap·dim]
	routes []int32     // [n, layers, topK]
	mark   uint64      // the stamp of the forward that last took it
}

func (m *Model) newSeq(capHint int) *Seq {
	s := &Seq{m: m, k: make([][]float32, m.cfg.NumHiddenLayers), v: make([][]float32, m.cfg.NumHiddenLayers)}
	if capHint > 0 {
		s.grow(capHint)
	}
	return s
}

// Len implements engine.SeqCache.
func (s *Seq) Len() int { return s.n }

// Routes implements engine.SeqCache: rows [from, Len()), every decoder
// layer, top-k ids each (dense layers 0); nil for a dense model.
func (s *Seq) Routes(from int) []int32 {
	k := s.m.routeK
	if k == 0 || from >= s.n || from < 0 {
		return nil
	}
	row := s.m.cfg.NumHiddenLayers * k
	return append([]int32(nil), s.routes[from*row:s.n*row]...)
}

// grow makes room for need positions, doubling so appends stay amortised
// O(1) and steady decoding allocates only when a cache crosses a power of
// two.
func (s *Seq) grow(need int) {
	if need <= s.cap {
		return
	}
	c := &s.m.cfg
	nc := max(need, 2*s.cap, 16)
	kh, kd, vd := c.KVHeads(), c.QKHeadDim(), c.VDim()
	for l := range s.k {
		s.k[l] = regrow(s.k[l], kh, s.cap, nc, s.n, kd)
		s.v[l] = regrow(s.v[l], kh, s.cap, nc, s.n, vd)
	}
	if k := s.m.routeK; k > 0 {
		row := c.NumHiddenLayers * k
		r := make([]int32, nc*row)
		copy(r, s.routes[:s.n*row])
		s.routes = r
	}
	s.cap = nc
}

// regrow copies the n used positions of each of heads blocks of old
// capacity oc into a buffer of capacity nc.
func regrow(old []float32, heads, oc, nc, n, dim int) []float32 {
	b := make([]float32, heads*nc*dim)
	for h := range heads {
		copy(b[h*nc*dim:], old[h*oc*dim:h*oc*dim+n*dim])
	}
	return b
}

// kAt returns layer l's key slot of head h at position p.
func (s *Seq) kAt(l, h, p, dim int) []float32 {
	o := (h*s.cap + p) * dim
	return s.k[l][o : o+dim]
}

func (s *Seq) vAt(l, h, p, dim int) []float32 {
	o := (h*s.cap + p) * dim
	return s.v[l][o : o+dim]
}
