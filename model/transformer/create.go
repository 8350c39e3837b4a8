package transformer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/asyncrl/asyncrl/model/hftokenizer"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// CreateOptions describe a random-initialised checkpoint (Create): what
// `asyncrl model init` and a run's model.arch write.
type CreateOptions struct {
	// Arch and Preset pick the shape (NewPreset).
	Arch, Preset string
	// Tokenizer is a directory holding tokenizer.json (and
	// tokenizer_config.json): its vocabulary sizes the embedding, its
	// bos/eos tokens go into generation_config.json, and its files are
	// copied into Out. Empty: Vocab alone.
	Tokenizer string
	// Vocab is the vocabulary without a tokenizer; with one, it pads the
	// embedding to Vocab rows (e.g. Qwen3's 151936). 0: the tokenizer's.
	Vocab int
	// Out is the new or empty directory written.
	Out string
	// Seed makes the weights (Init is deterministic for a seed).
	Seed uint64
	// ShardSize > 0 shards the weights into files of at most that many
	// bytes with an index.
	ShardSize int64
	// InitializerRange is config.json's initializer_range, the std of the
	// normal init (0: HF's 0.02).
	InitializerRange float64
	// RouterBiasStd > 0 draws deepseek_v3's e_score_correction_bias from
	// normal(0, RouterBiasStd) instead of zeros.
	RouterBiasStd float64
}

// Create writes a random-initialised checkpoint in Hugging Face layout
// into o.Out (config.json, BF16 safetensors, generation_config.json and
// the tokenizer's files) and returns the model. Out must be new or empty:
// a checkpoint is never overwritten.
func Create(o CreateOptions) (*Model, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if err := emptyDir(o.Out); err != nil {
		return nil, err
	}
	vocab, gen, tokFiles, err := o.readTokenizer()
	if err != nil {
		return nil, err
	}
	c, err := NewPreset(Arch(o.Arch), Preset(o.Preset), vocab)
	if err != nil {
		return nil, err
	}
	if o.InitializerRange > 0 {
		c.InitializerRange = o.InitializerRange
	}
	c.BOSTokenID, c.EOSTokenIDs = gen.BOSTokenID, gen.EOSTokenIDs
	m, err := InitWithOptions(c, gen, o.Seed, InitOptions{CorrectionBiasStd: o.RouterBiasStd})
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("transformer: %w", err)
	}
	for _, name := range tokFiles {
		if err := copyFile(filepath.Join(o.Tokenizer, name), filepath.Join(o.Out, name)); err != nil {
			return nil, fmt.Errorf("transformer: copying the tokenizer: %w", err)
		}
	}
	if err := m.Save(o.Out, o.ShardSize); err != nil {
		return nil, err
	}
	return m, nil
}

// check refuses options Create cannot act on.
func (o CreateOptions) check() error {
	switch {
	case o.Arch == "":
		return fmt.Errorf("%w: an architecture is required (one of %s)", ErrConfig, archNames())
	case !Supported(o.Arch):
		return fmt.Errorf("%w: architecture %q is not supported; use one of %s", ErrConfig, o.Arch, archNames())
	case o.Out == "":
		return errors.New("transformer: an output directory is required")
	case o.Tokenizer == "" && o.Vocab <= 0:
		return errors.New("transformer: give a tokenizer directory (with tokenizer.json) or a vocabulary size")
	case o.InitializerRange < 0:
		return fmt.Errorf("%w: initializer_range must be > 0, got %v", ErrConfig, o.InitializerRange)
	case o.RouterBiasStd < 0:
		return fmt.Errorf("%w: the router bias std must be >= 0, got %v", ErrConfig, o.RouterBiasStd)
	}
	return nil
}

// readTokenizer returns the vocabulary size (o.Vocab, or the tokenizer's
// when o.Vocab is 0), the special tokens and the tokenizer files to copy;
// without a tokenizer directory, o.Vocab and nothing else.
func (o CreateOptions) readTokenizer() (vocab int, gen GenerationConfig, tokFiles []string, err error) {
	vocab = o.Vocab
	if o.Tokenizer == "" {
		return vocab, gen, nil, nil
	}
	tok, err := hftokenizer.Load(filepath.Join(o.Tokenizer, "tokenizer.json"))
	if err != nil {
		return 0, gen, nil, fmt.Errorf("transformer: tokenizer %s: %w", o.Tokenizer, err)
	}
	if vocab == 0 {
		vocab = tok.VocabSize()
	} else if vocab < tok.VocabSize() {
		return 0, gen, nil, fmt.Errorf("transformer: vocabulary %d is smaller than the tokenizer's %d tokens; leave it out or raise it", vocab, tok.VocabSize())
	}
	if gen, err = specialTokens(o.Tokenizer, tok); err != nil {
		return 0, gen, nil, err
	}
	if tokFiles, err = tokenizerFiles(o.Tokenizer); err != nil {
		return 0, gen, nil, err
	}
	return vocab, gen, tokFiles, nil
}

// emptyDir refuses an existing directory with files in it: init never
// overwrites a checkpoint.
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("transformer: %w", err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("transformer: %s is not empty; choose a new or empty directory", dir)
	}
	return nil
}

// tokenizerFiles lists the regular files of a tokenizer directory to copy
// (everything but a checkpoint's own files, which Create writes).
func tokenizerFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("transformer: tokenizer: %w", err)
	}
	var out []string
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || name == ConfigFileName || name == GenerationConfigFileName ||
			strings.HasSuffix(name, ".safetensors") || name == safetensors.IndexFileName {
			continue
		}
		out = append(out, name)
	}
	return out, nil
}

// specialTokens reads tokenizer_config.json's bos_token and eos_token (a
// string or an AddedToken object with "content") and maps them to ids.
func specialTokens(dir string, tok *hftokenizer.Tokenizer) (GenerationConfig, error) {
	var g GenerationConfig
	path := filepath.Join(dir, "tokenizer_config.json")
	js, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return g, nil
	}
	if err != nil {
		return g, fmt.Errorf("transformer: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return g, fmt.Errorf("transformer: %s: %w", path, err)
	}
	id := func(key string) (*int, error) {
		r, ok := raw[key]
		if !ok || string(r) == "null" {
			return nil, nil
		}
		var s string
		if json.Unmarshal(r, &s) != nil {
			var obj struct {
				Content string `json:"content"`
			}
			if err := json.Unmarshal(r, &obj); err != nil || obj.Content == "" {
				return nil, fmt.Errorf("transformer: %s: %s is neither a string nor a token object", path, key)
			}
			s = obj.Content
		}
		v, ok := tok.TokenID(s)
		if !ok {
			return nil, fmt.Errorf("transformer: %s: %s %q is not in tokenizer.json", path, key, s)
		}
		n := int(v)
		return &n, nil
	}
	if g.BOSTokenID, err = id("bos_token"); err != nil {
		return g, err
	}
	eos, err := id("eos_token")
	if err != nil {
		return g, err
	}
	if eos != nil {
		g.EOSTokenIDs = []int{*eos}
	}
	return g, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
