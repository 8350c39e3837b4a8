package hftokenizer

import "context"

// Encoder turns text into token ids and ids back into text. A rollout needs
// one per model: Local when asyncrl holds the tokenizer.json, or
// vllmtok.Client when the engine owns the tokenizer.
type Encoder interface {
	Encode(ctx context.Context, text string) ([]int32, error)
	Decode(ctx context.Context, ids []int32) (string, error)
}

// Local adapts a Tokenizer to Encoder. It never fails and ignores ctx.
type Local struct{ T *Tokenizer }

var _ Encoder = Local{}

// Encode is T.Encode.
func (l Local) Encode(_ context.Context, text string) ([]int32, error) { return l.T.Encode(text), nil }

// Decode is T.Decode (special tokens kept).
func (l Local) Decode(_ context.Context, ids []int32) (string, error) { return l.T.Decode(ids), nil }
