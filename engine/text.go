package engine

import (
	"bytes"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/asyncrl/asyncrl/model/chattemplate"
	"github.com/asyncrl/asyncrl/model/hftokenizer"
	"github.com/asyncrl/asyncrl/model/tokenizer"
)

// WithTokenizer serves text with a Hugging Face tokenizer directory, as
// vLLM serves a model with its tokenizer: text prompts are encoded with it
// (its BOS in front when the tokenizer adds one on encode and
// Config.AddBOS is on); generated tokens are decoded with it, special
// tokens skipped (vLLM's skip_special_tokens default), incrementally — a
// stream holds back a token's bytes until they complete a UTF-8 character,
// and stop strings match the decoded text; logprobs name tokens by their
// decoded text; the tokenizer's EOS ids (generation_config.json's
// eos_token_id, else eos_token) end generation; and /v1/chat/completions
// renders messages with its chat template, add_generation_prompt true
// unless the request says otherwise (text/chathf.go). Without this option
// the engine uses the built-in character tokenizer, as before.
func WithTokenizer(t *chattemplate.Tokenizer) Option {
	return func(e *Engine) {
		if t != nil {
			e.codec = hfCodec{t}
		}
	}
}

// textCodec is the engine's text side.
type textCodec interface {
	// encodePrompt turns a text prompt into ids; addBOS is Config.AddBOS.
	encodePrompt(text string, addBOS bool) []int32
	// appendText appends the text a generated token contributes to the
	// output (nothing for a special token).
	appendText(dst []byte, id int32) []byte
	// tokenString names a token in logprobs.
	tokenString(id int32) string
	// isEOS reports whether a generated id ends the sequence.
	isEOS(id int32) bool
	// chatPrompt renders a chat request into prompt ids.
	chatPrompt(req *ChatRequest, addBOS bool) ([]int32, *reqError)
}

// textCodec returns the configured codec, the character tokenizer by
// default.
func (e *Engine) textCodec() textCodec {
	if e.codec == nil {
		return charCodec{}
	}
	return e.codec
}

// charCodec is the built-in character tokenizer (the built-in policy's).
type charCodec struct{}

func (charCodec) encodePrompt(text string, addBOS bool) []int32 {
	ids := tokenizer.Encode(text)
	if addBOS {
		ids = append([]int32{tokenizer.BOS}, ids...)
	}
	return ids
}

func (charCodec) appendText(dst []byte, id int32) []byte {
	return append(dst, tokenizer.Piece(id)...)
}

func (charCodec) tokenString(id int32) string { return tokenText(id) }

func (charCodec) isEOS(id int32) bool { return id == tokenizer.EOS }

func (c charCodec) chatPrompt(req *ChatRequest, addBOS bool) ([]int32, *reqError) {
	text, rerr := renderChat(req.Messages)
	if rerr != nil {
		return nil, rerr
	}
	return c.encodePrompt(text, addBOS), nil
}

// hfCodec is a Hugging Face tokenizer directory.
type hfCodec struct{ t *chattemplate.Tokenizer }

func (c hfCodec) encodePrompt(text string, addBOS bool) []int32 {
	ids := c.t.Encode(text)
	if addBOS && c.t.AddBOS {
		ids = append(append([]int32(nil), c.t.BOSPrefix...), ids...)
	}
	return ids
}

// appendText appends the token's bytes: byte-level BPE tokens are byte
// strings, so a character may span tokens; the bytes are kept as they are
// and the text is made valid UTF-8 when it is shown (visibleLocked holds an
// incomplete tail back while the sequence is live; a finished text's
// invalid bytes become U+FFFD when encoded, as from_utf8_lossy does).
func (c hfCodec) appendText(dst []byte, id int32) []byte {
	if c.t.IsSpecial(id) {
		return dst
	}
	return c.t.AppendBytes(dst, id)
}

// tokenString is the token's decoded text (vLLM's Logprob.decoded_token),
// special tokens included.
func (c hfCodec) tokenString(id int32) string { return c.t.Decode([]int32{id}) }

func (c hfCodec) isEOS(id int32) bool { return c.t.IsEOS(id) }

// checkTextIDs refuses a text prompt whose tokenizer ids the served model
// has no embedding for (a tokenizer of another model family).
func checkTextIDs(ids []int32, vocab int) *reqError {
	for _, id := range ids {
		if id < 0 || int(id) >= vocab {
			return &reqError{status: http.StatusInternalServerError, param: "prompt",
				msg: fmt.Sprintf("the tokenizer produced id %d, outside the served model's %d embeddings: the engine's tokenizer does not belong to its model", id, vocab)}
		}
	}
	return nil
}

// stopIndex is where the text is cut for a stop string that the last
// token's text completed, or -1: the stop strings are tried in order and
// each is searched in the window its match must overlap the new text in
// (vLLM's StopChecker.check_stop_strings, which searches from
// -new_char_count - len(stop)); a multi-character token can complete a
// stop string anywhere inside it, not only at the end of the text.
func stopIndex(s *seqState, last int32) int {
	if len(s.stops) == 0 {
		return -1
	}
	added := len(s.codec.appendText(nil, last))
	for _, st := range s.stops {
		if st == "" {
			continue
		}
		from := max(0, len(s.text)-added-len(st)+1)
		if i := bytes.Index(s.text[from:], []byte(st)); i >= 0 {
			return from + i
		}
	}
	return -1
}

// textOf is generated text as the API returns it: valid UTF-8, each
// maximal ill-formed subsequence (bytes of a character the model never
// completed) replaced by one U+FFFD, as Rust's from_utf8_lossy in
// tokenizers' decode does. The character tokenizer's text is ASCII.
func textOf(b []byte) string { return hftokenizer.LossyString(b) }

// incompleteUTF8 is the length of an incomplete UTF-8 sequence at the end
// of b (0 when b ends on a character boundary or with invalid bytes that
// no continuation can complete).
func incompleteUTF8(b []byte) int {
	for k := 1; k <= min(3, len(b)); k++ {
		c := b[len(b)-k]
		if c&0xC0 == 0x80 { // continuation byte: look further back
			continue
		}
		if !utf8.RuneStart(c) || c < 0xC0 {
			return 0
		}
		need := 2
		switch {
		case c >= 0xF0:
			need = 4
		case c >= 0xE0:
			need = 3
		}
		if k < need {
			return k
		}
		return 0
	}
	return 0
}
