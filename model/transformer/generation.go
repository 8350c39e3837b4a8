package transformer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// GenerationConfig is the part of generation_config.json the engine uses:
// the special token ids (eos_token_id may be one id or a list).
type GenerationConfig struct {
	BOSTokenID  *int
	EOSTokenIDs []int
	PadTokenID  *int
}

// ReadGenerationConfig reads dir/generation_config.json; a missing file is
// an empty config (the engine then uses config.json's eos_token_id).
func ReadGenerationConfig(dir string, vocab int) (GenerationConfig, error) {
	var g GenerationConfig
	js, err := os.ReadFile(filepath.Join(dir, GenerationConfigFileName))
	if errors.Is(err, os.ErrNotExist) {
		return g, nil
	}
	if err != nil {
		return g, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	f := &fields{}
	if err := json.Unmarshal(js, &f.m); err != nil {
		return g, fmt.Errorf("%w: %s: %v", ErrConfig, GenerationConfigFileName, err)
	}
	g.BOSTokenID = f.optInt("bos_token_id")
	g.EOSTokenIDs = f.ints("eos_token_id")
	g.PadTokenID = f.optInt("pad_token_id")
	if f.err != nil {
		return g, fmt.Errorf("%w (in %s)", f.err, GenerationConfigFileName)
	}
	for _, id := range g.EOSTokenIDs {
		if id < 0 || id >= vocab {
			return g, fmt.Errorf("%w: %s: field \"eos_token_id\": %d is outside the vocabulary [0, %d)", ErrConfig, GenerationConfigFileName, id, vocab)
		}
	}
	return g, nil
}

// marshal writes generation_config.json as transformers'
// GenerationConfig.from_model_config does for these ids.
func (g GenerationConfig) marshal() ([]byte, error) {
	m := map[string]any{"_from_model_config": true}
	if g.BOSTokenID != nil {
		m["bos_token_id"] = *g.BOSTokenID
	}
	switch len(g.EOSTokenIDs) {
	case 0:
	case 1:
		m["eos_token_id"] = g.EOSTokenIDs[0]
	default:
		m["eos_token_id"] = g.EOSTokenIDs
	}
	if g.PadTokenID != nil {
		m["pad_token_id"] = *g.PadTokenID
	}
	return json.MarshalIndent(m, "", "  ")
}
