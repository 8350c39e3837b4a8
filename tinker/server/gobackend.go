package server

import (
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/tinker/gotrain"
)

// goBackend trains on the built-in Go policy (tinker/gotrain).
type goBackend struct{ base *model.Model }

// GoBackend is the built-in backend: every model starts from base's
// weights (the seed of lora_config is unused: a full copy needs no init).
func GoBackend(base *model.Model) Backend { return goBackend{base: base} }

func (b goBackend) NewModel(rank int, seed int64) (Trainer, error) { return gotrain.New(b.base), nil }
func (b goBackend) VocabSize() int                                 { return b.base.VocabSize() }
func (b goBackend) MaxSeqLen() int                                 { return b.base.MaxSeqLen() }
func (b goBackend) Arch() string                                   { return "asyncrl-policy" }
func (b goBackend) TokenizerID() string                            { return "asyncrl/char-ascii" }

var _ Trainer = (*gotrain.Model)(nil)
