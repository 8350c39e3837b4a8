package data

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// Pick is one sampler decision: row Index of dataset Dataset, where a
// dataset's rows are numbered across its shards in shard order.
type Pick struct {
	Dataset int
	Index   int64
}

// Sampler chooses the order examples are drawn in. Implementations are
// pure: all randomness comes from their seed, no clock, no I/O. Next
// returns io.EOF when a finite sampler is exhausted. State is a blob that
// Restore, on a sampler built with the same arguments, turns back into
// exactly the same position. A custom sampler plugs in through OpenWith.
type Sampler interface {
	Next() (Pick, error)
	State() ([]byte, error)
	Restore(state []byte) error
}

// SamplerFactory builds a sampler over datasets of the given row counts,
// weights as configured (all zero when unset).
type SamplerFactory func(sizes []int64, weights []float64) (Sampler, error)

// ErrBadState is wrapped by errors restoring a state that does not fit.
var ErrBadState = errors.New("sft/data: bad sampler state")

// NewSampler builds one of the built-in samplers from cfg.
func NewSampler(cfg SamplerConfig, sizes []int64, weights []float64) (Sampler, error) {
	for i, n := range sizes {
		if n <= 0 {
			return nil, fmt.Errorf("sft/data: dataset %d has no rows", i)
		}
	}
	switch cfg.Kind {
	case "sequential":
		return &Sequential{sizes: sizes, total: sum(sizes), epochs: cfg.Epochs}, nil
	case "shuffle", "":
		return NewShuffle(sizes, cfg.Seed, cfg.Epochs), nil
	case "block_shuffle":
		return NewBlockShuffle(sizes, cfg.Seed, cfg.Epochs, cfg.BlockRows, cfg.Window), nil
	case "mixture":
		w, err := MixtureWeights(sizes, weights, cfg.Temperature)
		if err != nil {
			return nil, err
		}
		return NewMixture(sizes, w, cfg.Seed, cfg.Epochs, cfg.Replacement), nil
	}
	return nil, fmt.Errorf("sft/data: sampler.kind %q: want sequential, shuffle, block_shuffle or mixture", cfg.Kind)
}

func sum(xs []int64) int64 {
	var t int64
	for _, x := range xs {
		t += x
	}
	return t
}

// locate turns a global row number over concatenated datasets into a Pick.
func locate(sizes []int64, g int64) Pick {
	for d, n := range sizes {
		if g < n {
			return Pick{Dataset: d, Index: g}
		}
		g -= n
	}
	panic("sft/data: row beyond the datasets")
}

// position is a sampler's place: which epoch, how far into it.
type position struct {
	Epoch int   `json:"epoch"`
	Pos   int64 `json:"pos"`
}

// Sequential yields every row of dataset 0, then of dataset 1, …, epoch
// after epoch (endless when epochs is 0).
type Sequential struct {
	sizes  []int64
	total  int64
	epochs int
	at     position
}

// Next implements Sampler.
func (s *Sequential) Next() (Pick, error) {
	if s.at.Pos == s.total {
		s.at = position{Epoch: s.at.Epoch + 1}
	}
	if s.epochs > 0 && s.at.Epoch >= s.epochs {
		return Pick{}, io.EOF
	}
	p := locate(s.sizes, s.at.Pos)
	s.at.Pos++
	return p, nil
}

// State implements Sampler.
func (s *Sequential) State() ([]byte, error) { return json.Marshal(s.at) }

// Restore implements Sampler.
func (s *Sequential) Restore(b []byte) error { return restorePos(b, s.total, &s.at) }

func restorePos(b []byte, total int64, at *position) error {
	var p position
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("%w: %v", ErrBadState, err)
	}
	if p.Epoch < 0 || p.Pos < 0 || p.Pos > total {
		return fmt.Errorf("%w: epoch %d position %d outside %d rows", ErrBadState, p.Epoch, p.Pos, total)
	}
	*at = p
	return nil
}

// Shuffle yields all rows of all datasets in a seeded pseudo-random order,
// a fresh permutation each epoch (the permutation of epoch e is keyed by
// seed and e), in O(1) memory whatever the row count.
type Shuffle struct {
	sizes  []int64
	total  int64
	seed   uint64
	epochs int
	at     position
	perm   Perm
}

// NewShuffle returns a shuffled sampler (epochs 0 = endless).
func NewShuffle(sizes []int64, seed uint64, epochs int) *Shuffle {
	s := &Shuffle{sizes: sizes, total: sum(sizes), seed: seed, epochs: epochs}
	s.perm = s.permOf(0)
	return s
}

func (s *Shuffle) permOf(epoch int) Perm {
	return NewPerm(uint64(s.total), hash3(s.seed, 0x53485546, uint64(epoch)))
}

// Next implements Sampler.
func (s *Shuffle) Next() (Pick, error) {
	if s.at.Pos == s.total {
		s.at = position{Epoch: s.at.Epoch + 1}
		s.perm = s.permOf(s.at.Epoch)
	}
	if s.epochs > 0 && s.at.Epoch >= s.epochs {
		return Pick{}, io.EOF
	}
	p := locate(s.sizes, int64(s.perm.At(uint64(s.at.Pos))))
	s.at.Pos++
	return p, nil
}

// State implements Sampler.
func (s *Shuffle) State() ([]byte, error) { return json.Marshal(s.at) }

// Restore implements Sampler.
func (s *Shuffle) Restore(b []byte) error {
	if err := restorePos(b, s.total, &s.at); err != nil {
		return err
	}
	s.perm = s.permOf(s.at.Epoch)
	return nil
}

// MixtureWeights normalizes configured weights; when none is set (all
// zero) the weights are size^(1/temperature): T = 1 samples in proportion
// to size, larger T flattens toward uniform.
func MixtureWeights(sizes []int64, weights []float64, temperature float64) ([]float64, error) {
	w := make([]float64, len(sizes))
	set := 0
	for i := range sizes {
		if i < len(weights) {
			if weights[i] < 0 || math.IsNaN(weights[i]) || math.IsInf(weights[i], 0) {
				return nil, fmt.Errorf("sft/data: dataset %d: weight %v: want a finite number ≥ 0", i, weights[i])
			}
			if weights[i] > 0 {
				set++
			}
		}
	}
	switch {
	case set == 0:
		if temperature <= 0 {
			return nil, fmt.Errorf("sft/data: sampler.temperature %v: want > 0", temperature)
		}
		for i, n := range sizes {
			w[i] = math.Pow(float64(n), 1/temperature)
		}
	case set == len(sizes):
		copy(w, weights)
	default:
		return nil, fmt.Errorf("sft/data: %d of %d datasets have a weight: set every weight or none", set, len(sizes))
	}
	var t float64
	for _, x := range w {
		t += x
	}
	for i := range w {
		w[i] /= t
	}
	return w, nil
}

// Mixture draws each example's dataset at random with the given
// probabilities (draw k's randomness is hash(seed, k), so the state is a
// counter). With replacement the row is uniform in the dataset; without,
// each dataset walks its own per-epoch permutation and starts a fresh one
// when it runs out. Epochs > 0 ends the stream: with replacement after
// epochs × (all rows) draws; without, each dataset leaves the mixture
// after its epochs-th pass (the rest renormalize), io.EOF when all left.
type Mixture struct {
	sizes       []int64
	cum         []float64
	seed        uint64
	epochs      int
	replacement bool
	st          mixState
	perms       []Perm
}

type mixState struct {
	Draw int64      `json:"draw"`
	Sets []position `json:"sets,omitempty"` // without replacement: each dataset's place
}

// NewMixture returns a mixture sampler over normalized weights w.
func NewMixture(sizes []int64, w []float64, seed uint64, epochs int, replacement bool) *Mixture {
	m := &Mixture{sizes: sizes, seed: seed, epochs: epochs, replacement: replacement}
	m.cum = make([]float64, len(w))
	m.setWeights(w)
	if !replacement {
		m.st.Sets = make([]position, len(sizes))
		m.perms = make([]Perm, len(sizes))
		for d := range sizes {
			m.perms[d] = m.permOf(d, 0)
		}
	}
	return m
}

func (m *Mixture) setWeights(w []float64) {
	var c float64
	for i, x := range w {
		c += x
		m.cum[i] = c
	}
}

func (m *Mixture) permOf(d, epoch int) Perm {
	return NewPerm(uint64(m.sizes[d]), hash3(m.seed, 0x4d495800+uint64(d), uint64(epoch)))
}

// live reports whether dataset d still takes part.
func (m *Mixture) live(d int) bool {
	return m.replacement || m.epochs == 0 || m.st.Sets[d].Epoch < m.epochs
}

// choose picks a dataset for a uniform u among the live ones.
func (m *Mixture) choose(u float64) int {
	var total, prev float64
	for d := range m.cum {
		if m.live(d) {
			total += m.cum[d] - prev
		}
		prev = m.cum[d]
	}
	if total <= 0 {
		return -1
	}
	x, prev, last := u*total, 0.0, -1
	for d := range m.cum {
		wd := m.cum[d] - prev
		prev = m.cum[d]
		if !m.live(d) || wd <= 0 {
			continue
		}
		last = d
		if x < wd {
			return d
		}
		x -= wd
	}
	return last
}

// Next implements Sampler.
func (m *Mixture) Next() (Pick, error) {
	if m.replacement && m.epochs > 0 && m.st.Draw >= int64(m.epochs)*sum(m.sizes) {
		return Pick{}, io.EOF
	}
	k := uint64(m.st.Draw)
	d := m.choose(unit(hash3(m.seed, k, 1)))
	if d < 0 {
		return Pick{}, io.EOF
	}
	m.st.Draw++
	if m.replacement {
		return Pick{Dataset: d, Index: int64(below(hash3(m.seed, k, 2), uint64(m.sizes[d])))}, nil
	}
	at := &m.st.Sets[d]
	p := Pick{Dataset: d, Index: int64(m.perms[d].At(uint64(at.Pos)))}
	at.Pos++
	if at.Pos == m.sizes[d] {
		*at = position{Epoch: at.Epoch + 1}
		m.perms[d] = m.permOf(d, at.Epoch)
	}
	return p, nil
}

// State implements Sampler.
func (m *Mixture) State() ([]byte, error) { return json.Marshal(m.st) }

// Restore implements Sampler.
func (m *Mixture) Restore(b []byte) error {
	var st mixState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("%w: %v", ErrBadState, err)
	}
	if st.Draw < 0 {
		return fmt.Errorf("%w: draw %d", ErrBadState, st.Draw)
	}
	if !m.replacement {
		if len(st.Sets) != len(m.sizes) {
			return fmt.Errorf("%w: %d datasets in the state, %d open", ErrBadState, len(st.Sets), len(m.sizes))
		}
		for d, at := range st.Sets {
			if at.Epoch < 0 || at.Pos < 0 || at.Pos >= m.sizes[d] {
				return fmt.Errorf("%w: dataset %d position %d outside %d rows", ErrBadState, d, at.Pos, m.sizes[d])
			}
			m.perms[d] = m.permOf(d, at.Epoch)
		}
	} else if len(st.Sets) != 0 {
		return fmt.Errorf("%w: a without-replacement state for a with-replacement mixture", ErrBadState)
	}
	m.st = st
	return nil
}

var (
	_ Sampler = (*Sequential)(nil)
	_ Sampler = (*Shuffle)(nil)
	_ Sampler = (*Mixture)(nil)
)
