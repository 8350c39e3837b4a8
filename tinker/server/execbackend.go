package server

import (
	"github.com/asyncrl/asyncrl/tinker/bridgetrain"
)

// execBackend trains each model in a trainer child over the worker bridge
// (tinker.trainer exec; tinker/bridgetrain).
type execBackend struct{ b *bridgetrain.Backend }

// ExecBackend is the exec backend: one child per model, each started from
// b.Opts.Base. A model's child is shut down when the model is unloaded,
// its session expires or the server closes.
func ExecBackend(b *bridgetrain.Backend) Backend { return execBackend{b: b} }

func (e execBackend) NewModel(rank int, seed int64) (Trainer, error) { return e.b.NewModel(rank, seed) }
func (e execBackend) VocabSize() int                                 { return e.b.Vocab }
func (e execBackend) MaxSeqLen() int                                 { return e.b.MaxLen }
func (e execBackend) Arch() string                                   { return e.b.ArchName }
func (e execBackend) TokenizerID() string                            { return e.b.Tokenizer }

var _ Trainer = (*bridgetrain.Model)(nil)
