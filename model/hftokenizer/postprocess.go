package hftokenizer

import (
	"encoding/json"
	"fmt"
)

// postProcessorJSON is the part of tokenizer.json's post_processor that
// says which special tokens encoding with add_special_tokens=True puts
// around a single sequence: TemplateProcessing's "single" template (alone
// or inside a Sequence of processors, as Llama-3's file has it).
type postProcessorJSON struct {
	Type       string            `json:"type"`
	Processors []json.RawMessage `json:"processors"`
	Single     []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int32 `json:"ids"`
	} `json:"special_tokens"`
}

// parsePostProcessor returns the ids TemplateProcessing puts before and
// after a single sequence ("$A"); other processors add none.
func parsePostProcessor(raw json.RawMessage) (prefix, suffix []int32, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	var p postProcessorJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, fmt.Errorf("hftokenizer: post_processor: %w", err)
	}
	switch p.Type {
	case "Sequence":
		for i, sub := range p.Processors {
			pre, suf, err := parsePostProcessor(sub)
			if err != nil {
				return nil, nil, fmt.Errorf("post_processor.processors[%d]: %w", i, err)
			}
			prefix, suffix = append(prefix, pre...), append(suffix, suf...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		seen := false
		for _, item := range p.Single {
			switch {
			case item.Sequence != nil:
				seen = true
			case item.SpecialToken != nil:
				st, ok := p.SpecialTokens[item.SpecialToken.ID]
				if !ok {
					return nil, nil, fmt.Errorf("hftokenizer: post_processor: special token %q is not in special_tokens", item.SpecialToken.ID)
				}
				if seen {
					suffix = append(suffix, st.IDs...)
				} else {
					prefix = append(prefix, st.IDs...)
				}
			}
		}
	}
	return prefix, suffix, nil
}

// SpecialPrefix is what tokenizers' post-processor puts before a single
// sequence when encoding with add_special_tokens=True: Llama-3's
// <|begin_of_text|>; nothing for Qwen. Encode never adds it (see the package
// doc); a caller encoding a raw, non-template prompt as transformers'
// tokenizer(text) does prepends it.
func (t *Tokenizer) SpecialPrefix() []int32 { return t.postPrefix }

// SpecialSuffix is what the post-processor appends after a single sequence
// (none of the supported families appends anything).
func (t *Tokenizer) SpecialSuffix() []int32 { return t.postSuffix }
