package hftokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
)

// ErrUnsupported is wrapped by Load's errors for a tokenizer.json that uses a
// component or option this package does not implement.
var ErrUnsupported = errors.New("hftokenizer: unsupported tokenizer.json")

// The parts of tokenizer.json this package reads. post_processor is read
// only for the special tokens it adds (SpecialPrefix; Encode never adds
// them, see the package doc); truncation and padding do not apply to Encode.
type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	Decoder       json.RawMessage  `json:"decoder"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Model         modelJSON        `json:"model"`
}

type addedTokenJSON struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

// component is the shape shared by normalizers, pre-tokenizers and decoders.
type component struct {
	Type           string            `json:"type"`
	Normalizers    []json.RawMessage `json:"normalizers"`
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
	Pattern        struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// Load reads and validates a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hftokenizer: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse builds a Tokenizer from the contents of a tokenizer.json.
func Parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("hftokenizer: decode tokenizer.json: %w", err)
	}
	t := &Tokenizer{}
	var err error
	if t.nfc, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.splits, t.prefixSpace, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := parseDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if err := t.parseModel(&f.Model); err != nil {
		return nil, err
	}
	if err := t.parseAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	if t.postPrefix, t.postSuffix, err = parsePostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	return t, nil
}

func parseNormalizer(raw json.RawMessage) (nfc bool, err error) {
	if isNull(raw) {
		return false, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, fmt.Errorf("hftokenizer: normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		for i, sub := range c.Normalizers {
			n, err := parseNormalizer(sub)
			if err != nil {
				return false, fmt.Errorf("normalizers[%d]: %w", i, err)
			}
			nfc = nfc || n
		}
		return nfc, nil
	}
	return false, fmt.Errorf("%w: normalizer type %q (want null, NFC or a Sequence of NFC)", ErrUnsupported, c.Type)
}

func parsePreTokenizer(raw json.RawMessage) ([]splitKind, bool, error) {
	if isNull(raw) {
		return nil, false, fmt.Errorf("%w: pre_tokenizer is null (byte-level BPE needs ByteLevel)", ErrUnsupported)
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, fmt.Errorf("hftokenizer: pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		if c.UseRegex == nil || *c.UseRegex {
			return []splitKind{splitGPT2}, c.AddPrefixSpace, nil
		}
		return []splitKind{splitNone}, c.AddPrefixSpace, nil
	case "Sequence":
		return parseSplitSequence(c.Pretokenizers)
	}
	return nil, false, fmt.Errorf("%w: pre_tokenizer type %q (want ByteLevel or Sequence[Split…, ByteLevel])", ErrUnsupported, c.Type)
}

// parseSplitSequence reads a Sequence of one or more Split{Isolated} with a
// known regex followed by ByteLevel{use_regex false}: Qwen2 and Llama-3 have
// one Split, DeepSeek-V3 three.
func parseSplitSequence(subs []json.RawMessage) ([]splitKind, bool, error) {
	if len(subs) < 2 {
		return nil, false, fmt.Errorf("%w: pre_tokenizer Sequence of %d (want Split…, ByteLevel)", ErrUnsupported, len(subs))
	}
	var bl component
	if err := json.Unmarshal(subs[len(subs)-1], &bl); err != nil {
		return nil, false, fmt.Errorf("hftokenizer: pre_tokenizer.pretokenizers[%d]: %w", len(subs)-1, err)
	}
	if bl.Type != "ByteLevel" {
		return nil, false, fmt.Errorf("%w: pre_tokenizer Sequence ends with %s (want ByteLevel)", ErrUnsupported, bl.Type)
	}
	if bl.UseRegex == nil || *bl.UseRegex || bl.AddPrefixSpace {
		return nil, false, fmt.Errorf("%w: pre_tokenizer ByteLevel after Split must have use_regex false and add_prefix_space false", ErrUnsupported)
	}
	kinds := make([]splitKind, 0, len(subs)-1)
	for i, raw := range subs[:len(subs)-1] {
		var split component
		if err := json.Unmarshal(raw, &split); err != nil {
			return nil, false, fmt.Errorf("hftokenizer: pre_tokenizer.pretokenizers[%d]: %w", i, err)
		}
		if split.Type != "Split" {
			return nil, false, fmt.Errorf("%w: pre_tokenizer.pretokenizers[%d] is %s (want Split)", ErrUnsupported, i, split.Type)
		}
		if split.Behavior != "Isolated" || split.Invert {
			return nil, false, fmt.Errorf("%w: pre_tokenizer.pretokenizers[%d] Split behavior %q invert %v (want Isolated, false)", ErrUnsupported, i, split.Behavior, split.Invert)
		}
		if split.Pattern.Regex == nil {
			return nil, false, fmt.Errorf("%w: pre_tokenizer.pretokenizers[%d] Split pattern is not a Regex", ErrUnsupported, i)
		}
		kind, ok := knownPatterns[*split.Pattern.Regex]
		if !ok {
			return nil, false, fmt.Errorf("%w: pre_tokenizer.pretokenizers[%d] Split regex %q (known: the Qwen2, Llama-3, GPT-2 and DeepSeek-V3 patterns)", ErrUnsupported, i, *split.Pattern.Regex)
		}
		kinds = append(kinds, kind)
	}
	return kinds, false, nil
}

// knownPatterns maps each Split regex this package implements (as a
// hand-written scanner, pretokenize.go and pretokenize_seq.go) to its kind.
var knownPatterns = map[string]splitKind{
	patternQwen2:    splitQwen2,
	patternLlama3:   splitLlama3,
	patternGPT2:     splitGPT2,
	patternDigits3:  splitDigits3,
	patternCJK:      splitCJK,
	patternDeepSeek: splitDeepSeek,
}

func parseDecoder(raw json.RawMessage) error {
	var c component
	if !isNull(raw) {
		if err := json.Unmarshal(raw, &c); err != nil {
			return fmt.Errorf("hftokenizer: decoder: %w", err)
		}
	}
	if c.Type != "ByteLevel" {
		return fmt.Errorf("%w: decoder type %q (want ByteLevel)", ErrUnsupported, c.Type)
	}
	return nil
}

func (t *Tokenizer) parseModel(m *modelJSON) error {
	if err := m.supported(); err != nil {
		return err
	}
	t.vocab = m.Vocab
	t.ignoreMerges = m.IgnoreMerges
	if err := t.indexVocab(m.Vocab); err != nil {
		return err
	}
	t.unk = -1
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return fmt.Errorf("hftokenizer: model.unk_token %q is not in model.vocab", *m.UnkToken)
		}
		t.unk = id
	}
	for b := range t.byteID {
		t.byteID[b] = -1
		if id, ok := m.Vocab[string(byteToRune[b])]; ok {
			t.byteID[b] = id
		}
	}
	return t.indexMerges(m)
}

// supported refuses a model section this tokenizer does not implement.
func (m *modelJSON) supported() error {
	switch {
	case m.Type != "" && m.Type != "BPE":
		return fmt.Errorf("%w: model.type %q (want BPE)", ErrUnsupported, m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("%w: model.dropout %v (want null)", ErrUnsupported, *m.Dropout)
	case m.ByteFallback:
		return fmt.Errorf("%w: model.byte_fallback true", ErrUnsupported)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return fmt.Errorf("%w: model.continuing_subword_prefix %q", ErrUnsupported, *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("%w: model.end_of_word_suffix %q", ErrUnsupported, *m.EndOfWordSuffix)
	case len(m.Vocab) == 0:
		return fmt.Errorf("hftokenizer: model.vocab is empty")
	}
	return nil
}

// indexVocab builds the id → token table, refusing negative and shared ids.
func (t *Tokenizer) indexVocab(vocab map[string]int32) error {
	var maxID int32 = -1
	for tok, id := range vocab {
		if id < 0 {
			return fmt.Errorf("hftokenizer: model.vocab[%q] = %d is negative", tok, id)
		}
		maxID = max(maxID, id)
	}
	t.idToken = make([]string, maxID+1)
	t.idKnown = make([]bool, maxID+1)
	for tok, id := range vocab {
		if t.idKnown[id] {
			return fmt.Errorf("hftokenizer: model.vocab: id %d used by both %q and %q", id, t.idToken[id], tok)
		}
		t.idToken[id], t.idKnown[id] = tok, true
	}
	return nil
}

// indexMerges builds the merge table by pair, each part and the merged
// token in the vocabulary.
func (t *Tokenizer) indexMerges(m *modelJSON) error {
	pairs, err := parseMerges(m.Merges)
	if err != nil {
		return err
	}
	t.merges = make(map[uint64]merge, len(pairs))
	for rank, p := range pairs {
		a, okA := m.Vocab[p[0]]
		b, okB := m.Vocab[p[1]]
		ab, okAB := m.Vocab[p[0]+p[1]]
		if !okA || !okB || !okAB {
			return fmt.Errorf("hftokenizer: model.merges[%d] %q %q: a part or the merged token is not in model.vocab", rank, p[0], p[1])
		}
		t.merges[pairKey(a, b)] = merge{rank: int32(rank), id: ab}
	}
	return nil
}

// parseMerges accepts both serialisations: ["a b", …] (tokenizers < 0.20)
// and [["a","b"], …] (newer). A "#version" line, as merges.txt files start
// with, is skipped.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("hftokenizer: model.merges: %w", err)
	}
	out := make([][2]string, 0, len(items))
	for i, it := range items {
		var s string
		if err := json.Unmarshal(it, &s); err == nil {
			if strings.HasPrefix(s, "#version") {
				continue
			}
			a, b, ok := strings.Cut(s, " ")
			if !ok || a == "" || b == "" {
				return nil, fmt.Errorf("hftokenizer: model.merges[%d] %q: want \"a b\"", i, s)
			}
			out = append(out, [2]string{a, b})
			continue
		}
		var p []string
		if err := json.Unmarshal(it, &p); err != nil || len(p) != 2 {
			return nil, fmt.Errorf("hftokenizer: model.merges[%d]: want \"a b\" or [\"a\",\"b\"]", i)
		}
		out = append(out, [2]string{p[0], p[1]})
	}
	return out, nil
}

func (t *Tokenizer) parseAdded(list []addedTokenJSON) error {
	t.added = make(map[string]int, len(list))
	for i, a := range list {
		if a.Content == "" {
			return fmt.Errorf("hftokenizer: added_tokens[%d] (id %d) has empty content", i, a.ID)
		}
		if a.ID < 0 {
			return fmt.Errorf("hftokenizer: added_tokens[%d] %q has negative id %d", i, a.Content, a.ID)
		}
		if _, dup := t.added[a.Content]; dup {
			return fmt.Errorf("hftokenizer: added_tokens[%d] %q appears twice", i, a.Content)
		}
		t.added[a.Content] = len(t.addedList)
		t.addedList = append(t.addedList, addedToken{
			id: a.ID, content: a.Content, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip, special: a.Special,
		})
		for int(a.ID) >= len(t.idToken) {
			t.idToken = append(t.idToken, "")
			t.idKnown = append(t.idKnown, false)
		}
	}
	t.idAdded = make([]int, len(t.idToken))
	for i := range t.idAdded {
		t.idAdded[i] = -1
	}
	for i, a := range t.addedList {
		t.idAdded[a.id] = i
		t.idKnown[a.id] = true
		byFirst := t.addedByFirst[a.content[0]]
		t.addedByFirst[a.content[0]] = append(byFirst, i)
	}
	// Longest first, so the first hit at a position is the longest.
	for b := range t.addedByFirst {
		l := t.addedByFirst[b]
		sort.SliceStable(l, func(i, j int) bool {
			return len(t.addedList[l[i]].content) > len(t.addedList[l[j]].content)
		})
	}
	return nil
}
